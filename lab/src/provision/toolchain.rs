//! The host toolchain: system packages, rust-src and bindgen, provisioned idempotently.
//! Each step detects what is already there first, so a warm machine does no work.

use crate::provision::apt::{self, PrivateApt};
use crate::support::process::{have_tool, output, sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use xshell::cmd;

/// The LLVM suffix passed as `LLVM=-19`.
pub const LLVM_SUFFIX: &str = "-19";
pub const BINDGEN_VERSION: &str = "0.72.1";
/// Oldest QEMU whose cortex-a76/a55 models and QMP schema the harness relies on.
pub const QEMU_MIN: &str = "1:9.0";

/// System packages: (package, why). qemu-system-arm is checked separately for its version.
pub const HOST_PACKAGES: &[(&str, &str)] = &[
    ("clang-19", "kernel C compiler (LLVM=-19)"),
    ("lld-19", "kernel linker"),
    ("llvm-19", "llvm-ar/nm/objcopy for LLVM=-19"),
    ("libclang-19-dev", "libclang for bindgen"),
    ("bc", "kernel build"),
    ("bison", "kconfig"),
    ("flex", "kconfig"),
    ("libelf-dev", "objtool/resolve_btfids"),
    ("libssl-dev", "kernel host tools"),
    ("device-tree-compiler", "dtc for inspecting board DTBs"),
    ("cpio", "inspecting initramfs images"),
    ("xz-utils", "unpacking linux-source"),
    ("git", "the patched kernel tree"),
    ("make", "kbuild"),
    ("python3", "kernel scripts"),
    ("python3-ply", "checkpatch's SPDX check"),
    ("python3-git", "checkpatch's SPDX check"),
    ("python3-venv", "a private kcidb-io to validate the nightly's KCIDB JSON"),
    ("gcc-aarch64-linux-gnu", "linker for the static aarch64 guest binaries"),
    ("libc6-dev-arm64-cross", "static glibc for the guest binaries"),
    ("gdb-multiarch", "cargo make gdb: debugging the aarch64 guest kernel"),
    ("trace-cmd", "--trace: trace.dat from the guest's ring buffers"),
    ("chromium", "the test that opens the nightly's HTML report in a real browser"),
    ("aidl", "Android 10's aidl compiler: libbinder's service manager interfaces (aosp/)"),
];

/// Everything the kernel build needs from setup, with paths resolved.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub cache: PathBuf,
    pub bindgen_bin_dir: PathBuf,
    pub rust_lib_src: PathBuf,
    pub rustc_version: String,
}

impl Toolchain {
    /// Resolves the toolchain without installing anything; None if a piece is missing.
    pub fn probe(cache: &Path) -> Option<Toolchain> {
        let rustc_version = rustc_version().ok()?;
        // Resolved: the path reaches make's command lines and the cache key, so a scratch
        // cache that links the main one's rust-src (tests) builds exactly what the main one does.
        let rust_lib_src = rust_src_library(cache, &rustc_version)?;
        let rust_lib_src = std::fs::canonicalize(&rust_lib_src).unwrap_or(rust_lib_src);
        let bindgen_bin_dir = bindgen_root(cache).join("bin");
        bindgen_bin_dir.join("bindgen").is_file().then_some(())?;
        Some(Toolchain { cache: cache.to_path_buf(), bindgen_bin_dir, rust_lib_src, rustc_version })
    }

    /// A `make` for the kernel tree `src` building into `out`, with the toolchain's env.
    pub fn make(&self, src: &Path, out: &Path) -> Command {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![self.bindgen_bin_dir.clone()];
        dirs.extend(std::env::split_paths(&path));
        let sh = sh();
        sh.change_dir(src);
        let o = format!("O={}", out.display());
        // LOCALVERSION defined but empty: keeps setlocalversion from appending "+" for the git tree.
        let make = cmd!(sh, "make ARCH=arm64 LLVM={LLVM_SUFFIX} LOCALVERSION= {o}")
            .env("PATH", std::env::join_paths(dirs).expect("PATH joins"))
            .env("RUST_LIB_SRC", &self.rust_lib_src);
        let mut c = Command::from(make);
        // Reproducible builds: the same inputs give the same Image on any machine, so a
        // deterministic guest stays deterministic across hosts (no build time, user, host or
        // per-link build counter in the banner).
        c.env("KBUILD_BUILD_TIMESTAMP", "Thu Jan  1 00:00:00 UTC 2026")
            .env("KBUILD_BUILD_USER", "binderlab")
            .env("KBUILD_BUILD_HOST", "binderlab")
            .env("KBUILD_BUILD_VERSION", "1")
            .env("KRUSTFLAGS", self.rust_remap());
        c
    }

    /// Kbuild maps the source tree's prefix out of Rust's panic locations, but `core` is
    /// compiled from RUST_LIB_SRC, a path in this machine's cache, and its locations reach the
    /// Image. Mapped the same way, a second cache (or machine) gives the same bytes.
    fn rust_remap(&self) -> String {
        format!("--remap-path-prefix={}/=", self.rust_lib_src.display())
    }

    /// Versions that go into the kernel cache key.
    pub fn fingerprint(&self) -> Result<String> {
        let clang = output(Command::new(format!("clang{LLVM_SUFFIX}")).arg("--version"))?;
        let bindgen = output(Command::new(self.bindgen_bin_dir.join("bindgen")).arg("--version"))?;
        Ok(format!(
            "rustc {}\n{}\n{}\nrust-src {}\n",
            self.rustc_version,
            clang.lines().next().unwrap_or_default(),
            bindgen.trim(),
            self.rust_lib_src.display()
        ))
    }
}

pub fn rustc_version() -> Result<String> {
    let v = output(Command::new("rustc").arg("--version")).context("rustc not found; install Rust with rustup")?;
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    v.split_whitespace().nth(1).map(str::to_string).context("unexpected `rustc --version` output")
}

fn major_minor(v: &str) -> String {
    v.split('.').take(2).collect::<Vec<_>>().join(".")
}

fn bindgen_root(cache: &Path) -> PathBuf {
    cache.join("tools").join(format!("bindgen-cli-{BINDGEN_VERSION}"))
}

fn rust_src_dir(cache: &Path, rustc: &str) -> PathBuf {
    cache.join("rust-src").join(major_minor(rustc))
}

/// `library/` of an unpacked rust-src matching rustc's major.minor, if complete.
fn rust_src_library(cache: &Path, rustc: &str) -> Option<PathBuf> {
    let dir = rust_src_dir(cache, rustc);
    dir.join(".complete").is_file().then_some(())?;
    let src = std::fs::read_dir(dir.join("usr/src"))
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("rustc-"))?;
    Some(src.path().join("library"))
}

/// Host packages that are missing, plus whether qemu needs the backports.
pub fn missing_packages() -> (Vec<String>, bool) {
    let mut names: Vec<&str> = HOST_PACKAGES.iter().map(|(p, _)| *p).collect();
    names.push("qemu-system-arm");
    let installed = apt::installed_versions(&names);
    let mut missing: Vec<String> =
        HOST_PACKAGES.iter().filter(|(p, _)| !installed.contains_key(*p)).map(|(p, _)| p.to_string()).collect();
    let qemu_ok = installed.get("qemu-system-arm").is_some_and(|v| apt::version_ge(v, QEMU_MIN));
    if !qemu_ok {
        missing.push("qemu-system-arm".into());
    }
    (missing, !qemu_ok)
}

fn ensure_host_packages(cache: &Path) -> Result<()> {
    let (missing, qemu) = missing_packages();
    if missing.is_empty() {
        return Ok(());
    }
    crate::support::progress::note(format!("installing system packages: {}", missing.join(" ")));
    let codename = apt::host_codename();
    // bookworm ships QEMU 7.2: take qemu (alone) from the host release's own backports.
    let qemu_from_backports = qemu && codename.as_deref() == Some("bookworm");
    let (plain, bpo): (Vec<String>, Vec<String>) =
        missing.into_iter().partition(|p| !(qemu_from_backports && p == "qemu-system-arm"));
    apt::host_install(&plain, None, cache)?;
    apt::host_install(&bpo, codename.as_deref(), cache)?;
    let (still, _) = missing_packages();
    if !still.is_empty() {
        bail!("still missing after apt-get install: {}", still.join(" "));
    }
    Ok(())
}

/// LAVA from Debian (`lab setup --lava`; the builds do not need it): lava-dispatcher for
/// `lava-run` of the lab's jobs, and lava-server with lavacli for a LAVA instance on this
/// machine (`lab lava-submit` against it, in the slower tests). On bookworm libguestfs pulls
/// qemu-system-x86, which must come from backports like the lab's qemu-system-arm (they share
/// qemu-system-common). lava-server's postinst creates its database, so PostgreSQL is
/// installed first and its cluster runs during the install (stopped again after).
pub fn ensure_lava(cache: &Path) -> Result<()> {
    if ["lava-run", "lava-server", "lavacli"].iter().all(|t| crate::support::process::have_tool(t)) {
        return Ok(());
    }
    let codename = apt::host_codename();
    let bookworm = codename.as_deref().filter(|c| *c == "bookworm");
    apt::host_install(&["postgresql".to_string()], None, cache)?;
    let started = crate::provision::postgres::start_cluster()?;
    let mut pkgs: Vec<String> = ["lava-dispatcher", "lava-server", "lavacli"].map(String::from).to_vec();
    if bookworm.is_some() {
        pkgs.push("qemu-system-x86/bookworm-backports".into());
    }
    let installed = apt::host_install(&pkgs, bookworm, cache);
    if let Some(c) = started {
        crate::provision::postgres::stop_cluster(&c)?;
    }
    installed?;
    for t in ["lava-run", "lava-server", "lavacli"] {
        if !crate::support::process::have_tool(t) {
            bail!("{t} still missing after installing lava-dispatcher, lava-server and lavacli");
        }
    }
    Ok(())
}

/// rust-src matching the host rustc, unpacked (not installed) into the cache, and linked
/// into the rustc sysroot when it has none, so `-Zbuild-std` finds it for the guest.
fn ensure_rust_src(cache: &Path) -> Result<PathBuf> {
    let rustc = rustc_version()?;
    let lib = match rust_src_library(cache, &rustc) {
        Some(lib) => lib,
        None => {
            let apt = PrivateApt::new(cache);
            apt.update()?;
            let want = format!("{}.", major_minor(&rustc));
            let versions = apt.versions("rust-src")?;
            let Some(v) = versions.iter().find(|v| v.version.starts_with(&want)) else {
                let have: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
                bail!(
                    "no Debian rust-src {want}x for your rustc {rustc} (served: {}).\nUse a rustc whose version Debian serves (e.g. `rustup default 1.95`).",
                    have.join(", ")
                );
            };
            let deb = apt.download(&format!("rust-src={}", v.version), &cache.join("downloads"))?;
            crate::support::fs::publish_dir(&rust_src_dir(cache, &rustc), |tmp| {
                let sh = sh();
                let st = Command::from(cmd!(sh, "dpkg-deb -x {deb} {tmp}")).status()?;
                if !st.success() {
                    bail!("dpkg-deb -x {} failed", deb.display());
                }
                Ok(std::fs::write(tmp.join(".complete"), &v.version)?)
            })?;
            rust_src_library(cache, &rustc).context("rust-src unpacked without usr/src/rustc-*/library")?
        }
    };
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    let link = Path::new(sysroot.trim()).join("lib/rustlib/src/rust");
    if !link.join("library/Cargo.lock").exists() {
        let _ = std::fs::remove_file(&link);
        std::fs::create_dir_all(link.parent().unwrap())?;
        std::os::unix::fs::symlink(lib.parent().unwrap(), &link)
            .with_context(|| format!("linking rust-src into the rustc sysroot at {}", link.display()))?;
        crate::support::progress::note(format!(
            "linked rust-src into {} (same as `rustup component add rust-src`)",
            link.display()
        ));
    }
    Ok(lib)
}

fn ensure_bindgen(cache: &Path) -> Result<()> {
    let root = bindgen_root(cache);
    if root.join("bin/bindgen").is_file() {
        return Ok(());
    }
    crate::support::progress::note(format!(
        "installing bindgen-cli {BINDGEN_VERSION} into {} (a few minutes)",
        root.display()
    ));
    // Into a log, not the terminal: the downloads beside it report progress there.
    let tools = root.parent().context("the bindgen root has a parent")?;
    std::fs::create_dir_all(tools)?;
    let log = tools.join(format!("bindgen-cli-{BINDGEN_VERSION}.log"));
    let mut cmd = Command::new("cargo");
    cmd.args(["install", "--locked", "bindgen-cli", "--version", BINDGEN_VERSION, "--root"]).arg(&root);
    crate::support::process::run_logged(&mut cmd, &log, |_| {})
        .with_context(|| format!("cargo install bindgen-cli {BINDGEN_VERSION} failed"))
}

/// Host packages, cargo, rust-src, bindgen and busybox. Returns the resolved toolchain.
pub fn ensure_tools(cache: &Path) -> Result<Toolchain> {
    Ok(ensure_tools_with(cache, || Ok(()))?.0)
}

/// What the guest build takes from the host, installed when missing: the cross linker and
/// static glibc (system packages) and rust-src (`-Zbuild-std`). The guest build runs beside the
/// kernel's setup, which would install them only after the guest build had looked for them.
pub fn ensure_guest_prerequisites(cache: &Path) -> Result<()> {
    ensure_host_packages(cache)?;
    ensure_rust_src(cache).map(drop)
}

/// [`ensure_tools`], with `alongside` (e.g. the kernel source's download and unpack) run after
/// the host packages. On a new machine the bindgen build (minutes of CPU) runs on its own
/// thread while the downloads, the unpacks and `alongside` wait on the network and the disk.
pub fn ensure_tools_with<T: Send>(
    cache: &Path,
    alongside: impl FnOnce() -> Result<T> + Send,
) -> Result<(Toolchain, T)> {
    ensure_host_packages(cache)?;
    if !have_tool("cargo") {
        bail!("cargo not found: install Rust with rustup");
    }
    let (bindgen, rest) = std::thread::scope(|s| {
        let bindgen = s.spawn(|| ensure_bindgen(cache));
        let rest = (|| {
            ensure_rust_src(cache)?;
            crate::provision::downloads::busybox(cache)?;
            crate::provision::kcidb_io::ensure(cache)?;
            alongside()
        })();
        (bindgen.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the bindgen install panicked"))), rest)
    });
    bindgen?;
    let t = rest?;
    Ok((Toolchain::probe(cache).context("toolchain incomplete after setup")?, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_maps_the_rust_library_path_out_of_the_kernel() {
        let tc = Toolchain {
            cache: "/c".into(),
            bindgen_bin_dir: "/c/tools/bin".into(),
            rust_lib_src: "/c/rust-src/1.95/library".into(),
            rustc_version: "1.95.0".into(),
        };
        let c = tc.make(Path::new("/src"), Path::new("/obj"));
        let env: Vec<_> = c.get_envs().filter_map(|(k, v)| Some((k.to_str()?, v?.to_str()?))).collect();
        assert!(env.contains(&("KRUSTFLAGS", "--remap-path-prefix=/c/rust-src/1.95/library/=")), "{env:?}");
        assert!(env.contains(&("KBUILD_BUILD_TIMESTAMP", "Thu Jan  1 00:00:00 UTC 2026")), "{env:?}");
    }
}
