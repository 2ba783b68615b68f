//! `lab qemu`: the lab's own QEMU. Debian's qemu source (the orig tarball pinned in
//! `qemu/qemu.lock`, see `provision::qemu_src`) plus the patch series in `qemu/`, applied as
//! commits in a prepared tree like the kernel's, built `aarch64-softmmu` only out of tree, and
//! published under a content key by rename (an interrupted build never looks complete).

use crate::kbuild::tree::{self, Names, Series};
use crate::provision::apt;
use crate::provision::qemu_src::{ensure_orig, QemuLock, QemuPin};
use crate::support::artifact::{self, Kind, Reuse};
use crate::support::fs::{publish_dir, sha256_hex, write_atomic};
use crate::support::paths;
use crate::support::process::{output, run_logged};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Bump when the build recipe changes in a way the inputs don't show.
const RECIPE: &str = "lab-qemu-v1";
/// What is built: one target, plugins on, nothing the lab does not use. Debian's +ds tarball
/// has no firmware blobs, so none are installed.
pub const CONFIGURE: &[&str] = &[
    "--target-list=aarch64-softmmu",
    "--enable-plugins",
    "--disable-docs",
    "--disable-tools",
    "--disable-user",
    "--without-default-features",
    "--enable-fdt=system",
    "--disable-install-blobs",
];
/// Build dependencies from the host's own release: (package, why).
pub const BUILD_PACKAGES: &[(&str, &str)] = &[
    ("gcc", "QEMU's C compiler"),
    ("ninja-build", "QEMU's build backend"),
    ("pkg-config", "configure's dependency lookup"),
    ("libglib2.0-dev", "QEMU's core library"),
    ("libpixman-1-dev", "required by the softmmu targets"),
    ("libfdt-dev", "the virt machine's device tree (--enable-fdt=system)"),
    ("python3-venv", "the private meson venv"),
    ("bzip2", "pc-bios/meson.build looks for it"),
    ("flex", "QEMU's dtc fallback and decodetree users"),
    ("bison", "idem"),
];
/// configure wants meson >= 1.5 (bookworm ships 1.0) and pycotap, and refuses to download
/// them itself: both go into a venv in the cache, pinned.
pub const PYPI: &[&str] = &["meson==1.5.0", "pycotap==1.3.1"];
/// Published builds kept.
pub const KEEP: usize = 3;
pub const BINARY: &str = "qemu-system-aarch64";

pub const NAMES: Names = Names { folder: "qemu/", export: "qemu-export", reset: "qemu-reset", base: "the pinned QEMU" };

/// A published build.
#[derive(Clone, Debug, Serialize)]
pub struct Built {
    pub key: String,
    pub dir: PathBuf,
}

impl Built {
    pub fn binary(&self) -> PathBuf {
        self.dir.join(BINARY)
    }
}

fn qemu_cache(cache: &Path) -> PathBuf {
    cache.join("qemu")
}

pub fn tree_dir(cache: &Path, pin: &QemuPin) -> PathBuf {
    qemu_cache(cache).join("src").join(format!("qemu-{}", paths::path_safe(&pin.version)))
}

/// The orig tarball unpacked once into a prepared tree (base commit, work branch).
pub fn ensure_unpacked(cache: &Path, pin: &QemuPin) -> Result<PathBuf> {
    let dir = tree_dir(cache, pin);
    if dir.join(".git/lab-base").is_file() {
        return Ok(dir);
    }
    let orig = ensure_orig(cache, pin)?;
    crate::support::progress::note(format!("unpacking {} into {} (about a minute)", orig.display(), dir.display()));
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    // --no-same-owner: as root, tar would keep the tarball's uids, and git refuses such a tree.
    output(
        Command::new("tar").args(["-xJf"]).arg(&orig).args(["--strip-components=1", "--no-same-owner", "-C"]).arg(&tmp),
    )?;
    tree::commit_base(&tmp, &format!("{} {}", pin.package, pin.version))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}

/// The tree carrying `qemu/series`, locked against other lab processes while the caller holds
/// the returned file.
pub fn prepared_tree(cache: &Path) -> Result<(PathBuf, std::fs::File)> {
    let lock = QemuLock::load()?;
    let src = ensure_unpacked(cache, &lock.qemu)?;
    let guard = tree::lock_in(&qemu_cache(cache).join("src"), "QEMU", "building the lab QEMU")?;
    tree::sync_series_named(&src, std::slice::from_ref(&series()?), &NAMES)?;
    Ok((src, guard))
}

pub fn series() -> Result<Series> {
    Series::load(&paths::qemu_dir())
}

/// The tree without syncing it (for `qemu-export` and `qemu-reset`), locked.
pub fn unsynced_tree(cache: &Path) -> Result<(PathBuf, std::fs::File)> {
    let src = ensure_unpacked(cache, &QemuLock::load()?.qemu)?;
    Ok((src, tree::lock_in(&qemu_cache(cache).join("src"), "QEMU", "a qemu-tree command")?))
}

/// Build packages missing on the host, installed from its own release.
fn ensure_build_deps(cache: &Path) -> Result<()> {
    let names: Vec<&str> = BUILD_PACKAGES.iter().map(|(p, _)| *p).collect();
    let have = apt::installed_versions(&names);
    let missing: Vec<String> = names.iter().filter(|p| !have.contains_key(**p)).map(|p| p.to_string()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    crate::support::progress::note(format!("installing QEMU build dependencies: {}", missing.join(" ")));
    apt::host_install(&missing, None, cache)
}

/// The venv with configure's Python tools; returns its python.
fn ensure_venv(cache: &Path) -> Result<PathBuf> {
    let venv = qemu_cache(cache).join("venv");
    let python = venv.join("bin/python3");
    let stamp = venv.join(".lab-pypi");
    let want = PYPI.join(" ");
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(python);
    }
    crate::support::progress::note(format!("creating {} with {want} from PyPI", venv.display()));
    let _ = std::fs::remove_dir_all(&venv);
    output(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context("python3 -m venv (python3-venv)")?;
    output(Command::new(&python).args(["-m", "pip", "install", "-q", "--disable-pip-version-check"]).args(PYPI))
        .context("installing meson and pycotap from PyPI into the QEMU venv")?;
    write_atomic(&stamp, want.as_bytes())?;
    Ok(python)
}

/// Versions that go into the cache key: compiler, build packages, Python tools.
fn toolchain_fingerprint() -> Result<String> {
    let gcc = output(Command::new("gcc").arg("--version"))?;
    let names: Vec<&str> = BUILD_PACKAGES.iter().map(|(p, _)| *p).collect();
    let mut pkgs: Vec<(String, String)> = apt::installed_versions(&names).into_iter().collect();
    pkgs.sort();
    let pkgs: Vec<String> = pkgs.into_iter().map(|(p, v)| format!("{p}={v}")).collect();
    Ok(format!("{}\n{}\n{}\n", gcc.lines().next().unwrap_or_default(), pkgs.join(" "), PYPI.join(" ")))
}

/// Cache key of a build: every input that changes the binary.
pub fn cache_key(pin: &QemuPin, tree_state: &str, toolchain: &str) -> String {
    let text = format!(
        "{RECIPE}\n{}={} {}\n--configure--\n{}\n--tree--\n{tree_state}\n--toolchain--\n{toolchain}",
        pin.package,
        pin.version,
        pin.sha256,
        CONFIGURE.join(" ")
    );
    sha256_hex(text.as_bytes())[..16].to_string()
}

fn artifacts_dir(cache: &Path, key: &str) -> PathBuf {
    Kind::Qemu.root(cache).join(format!("qemu-{key}"))
}

/// Builds (or finds) the lab's QEMU.
pub fn build() -> Result<Built> {
    let cache = paths::cache();
    let lock = QemuLock::load()?;
    ensure_build_deps(&cache)?;
    let python = ensure_venv(&cache)?;
    let (src, _tree_lock) = prepared_tree(&cache)?;
    let state = tree::state_hash(&src)?;
    let key = cache_key(&lock.qemu, &state, &toolchain_fingerprint()?);
    let out = artifacts_dir(&cache, &key);
    let built = Built { key: key.clone(), dir: out.clone() };
    if out.exists() && artifact::reuse(Kind::Qemu, &out)? == Reuse::Use {
        crate::support::process::mark_used(&out);
        return Ok(built);
    }
    let obj = qemu_cache(&cache).join("build");
    std::fs::create_dir_all(&obj)?;
    let lockf = std::fs::File::create(obj.join(".lab-lock"))?;
    lockf.lock().context("locking the QEMU build directory")?;
    let t0 = Instant::now();
    configure(&src, &obj, &python)?;
    ninja_with_progress(&obj)?;
    if tree::state_hash(&src)? != state {
        bail!(
            "the QEMU tree {} changed during the build; nothing was published. Rerun `cargo make qemu`.",
            src.display()
        );
    }
    publish(&src, &obj, &out, &lock.qemu, &key)?;
    prune(&cache, &key);
    crate::support::progress::note(format!("QEMU built in {:.0?}: {}", t0.elapsed(), out.display()));
    Ok(built)
}

/// `configure` into `obj`, unless it was last configured the same way.
fn configure(src: &Path, obj: &Path, python: &Path) -> Result<()> {
    // Resolved paths (the venv's python itself is a link to the system's, so its directory):
    // a scratch cache that links the main one's tree and build directory (tests) must not
    // reconfigure, which would empty that build directory.
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let src = &real(src);
    let python = &match (python.parent(), python.file_name()) {
        (Some(dir), Some(name)) => real(dir).join(name),
        _ => python.to_path_buf(),
    };
    let want = sha256_hex(format!("{}\n{}\n{}", src.display(), python.display(), CONFIGURE.join(" ")).as_bytes());
    let stamp = obj.join(".lab-configure.sha256");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && obj.join("build.ninja").is_file() {
        return Ok(());
    }
    crate::support::progress::note(format!("configuring QEMU in {}", obj.display()));
    for e in std::fs::read_dir(obj)?.flatten() {
        if e.file_name() != ".lab-lock" {
            let p = e.path();
            let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        }
    }
    let log = obj.join("configure.lab.log");
    run_logged(
        Command::new(src.join("configure"))
            .current_dir(obj)
            .arg(format!("--python={}", python.display()))
            .args(CONFIGURE),
        &log,
        |_| {},
    )?;
    write_atomic(&stamp, want.as_bytes())
}

/// `[12/1874] Compiling C object ...` -> (12, 1874).
pub fn ninja_progress(line: &str) -> Option<(u64, u64)> {
    let (n, m) = line.strip_prefix('[')?.split_once(']')?.0.split_once('/')?;
    Some((n.parse().ok()?, m.parse().ok()?))
}

fn ninja_with_progress(obj: &Path) -> Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    let pb = ProgressBar::new(0);
    pb.set_style(ProgressStyle::with_template("{spinner} QEMU [{elapsed}] {pos}/{len} {msg}").unwrap());
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    let res = run_logged(Command::new("ninja").current_dir(obj).arg(BINARY), &obj.join("build.lab.log"), |line| {
        if let Some((n, m)) = ninja_progress(line) {
            pb.set_length(m);
            pb.set_position(n);
            pb.set_message(line.split_once("] ").map(|x| x.1).unwrap_or_default().chars().take(60).collect::<String>());
        }
    });
    pb.finish_and_clear();
    res
}

/// The binary and the plugin header (plugins written in C need it) into a temporary
/// directory, recorded there (support::artifact) and renamed into place.
fn publish(src: &Path, obj: &Path, out: &Path, pin: &QemuPin, key: &str) -> Result<()> {
    publish_dir(out, |tmp| {
        std::fs::copy(obj.join(BINARY), tmp.join(BINARY))?;
        std::fs::copy(src.join("include/qemu/qemu-plugin.h"), tmp.join("qemu-plugin.h"))?;
        let info = serde_json::json!({ "key": key, "package": pin.package, "version": pin.version, "series": series()?.patches });
        std::fs::write(tmp.join("info.json"), serde_json::to_string_pretty(&info)?)?;
        artifact::seal(tmp)?;
        for f in std::fs::read_dir(tmp)?.flatten() {
            std::fs::File::open(f.path())?.sync_all()?;
        }
        Ok(())
    })
}

fn prune(cache: &Path, keep_key: &str) {
    crate::support::process::prune_builds(&Kind::Qemu.root(cache), "qemu-", keep_key, KEEP);
}

/// Builds a TCG plugin crate of this workspace (`qemu/plugins/*`, release) and returns its
/// shared object.
pub fn build_plugin(package: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    output(Command::new(cargo).current_dir(paths::repo()).args(["build", "-q", "--release", "-p", package]))
        .with_context(|| format!("building the plugin {package}"))?;
    let so = paths::repo().join("target/release").join(format!("lib{}.so", package.replace('-', "_")));
    anyhow::ensure!(so.is_file(), "cargo built {package} but {} is missing (is it a cdylib?)", so.display());
    Ok(so)
}

/// Which QEMU runs the guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Choice {
    /// The lab's build under the deterministic `--tcg icount` and `hicount` (Debian's 10.0.2
    /// is not deterministic under host load: qemu/0022), the host's otherwise.
    #[default]
    Auto,
    /// The host's qemu-system-aarch64 (Debian's package).
    System,
    /// The lab's patched QEMU (`qemu/`), built on first use.
    Lab,
}

/// The binary for `choice`, and the lab build's key.
pub fn resolve(choice: Choice) -> Result<(PathBuf, Option<String>)> {
    match choice {
        Choice::System => Ok((PathBuf::from(BINARY), None)),
        Choice::Auto => bail!("--qemu auto names no binary until it is read against --tcg (RunOpts::qemu_choice)"),
        Choice::Lab => {
            let b = build()?;
            Ok((b.binary(), Some(b.key)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_series_is_listed() {
        assert!(!series().unwrap().patches.is_empty());
    }

    #[test]
    fn cache_key_is_stable_and_sensitive() {
        let pin = QemuPin {
            package: "qemu".into(),
            version: "1:10".into(),
            suite: "s".into(),
            orig: "q.orig.tar.xz".into(),
            sha256: "0".repeat(64),
        };
        let k = cache_key(&pin, "tree", "gcc 12");
        assert_eq!(k, cache_key(&pin, "tree", "gcc 12"));
        assert_ne!(k, cache_key(&pin, "tree2", "gcc 12"));
        assert_ne!(k, cache_key(&pin, "tree", "gcc 13"));
        let mut p2 = pin.clone();
        p2.sha256 = "1".repeat(64);
        assert_ne!(k, cache_key(&p2, "tree", "gcc 12"));
    }

    #[test]
    fn parses_ninja_progress() {
        assert_eq!(ninja_progress("[12/1874] Compiling C object x.o"), Some((12, 1874)));
        assert_eq!(ninja_progress("ninja: no work to do."), None);
    }
}
