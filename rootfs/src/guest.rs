//! Cross-build of the guest workspace (`rootfs/guest`) into static aarch64 binaries.
//!
//! The aarch64 std is not installed, so std is built from rust-src with `-Zbuild-std`
//! (RUSTC_BOOTSTRAP=1 on stable) and linked statically against Debian's cross glibc.
//! Everything the build depends on is set explicitly here, not read from cargo config.

use crate::elf;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const GUEST_TARGET: &str = "aarch64-unknown-linux-gnu";
pub const GUEST_LINKER: &str = "aarch64-linux-gnu-gcc";
/// Static glibc from libc6-dev-arm64-cross.
pub const STATIC_LIBC: &str = "/usr/aarch64-linux-gnu/lib/libc.a";
pub const GUEST_RUSTFLAGS: &str = "-C target-feature=+crt-static";
/// The one guest binary (rootfs/guest/guestbox) that holds init and every step program and
/// runs the one its argv[0] names; the initramfs links each name to it.
pub const GUEST_MULTICALL: &str = "guestbox";
/// Step programs besides init, installed as /bin/NAME (names [`GUEST_MULTICALL`] answers to).
pub const GUEST_PROGRAMS: &[&str] = &[
    "topology",
    "binder-smoke",
    "binder-conformance",
    "binder-fuzz",
    "ctabs-check",
    "binder-throughput",
    "binder-tiers",
    "binder-sendvec",
    "binder-inversion",
    "binder-kprof",
    "cpu-loops",
    "wake-latency",
    "sched-sync",
];
const CROSS_FIX: &str = "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross (cargo make setup does this)";

/// The guest workspace in this source tree.
pub fn guest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guest")
}

#[derive(Clone, Debug)]
pub struct GuestBuildOpts {
    /// Guest workspace root (holds Cargo.toml and Cargo.lock).
    pub guest_dir: PathBuf,
    /// CARGO_TARGET_DIR for the build; default `<guest_dir>/target`.
    pub target_dir: PathBuf,
    /// cargo to run; default $CARGO (set when we run under cargo) or `cargo`.
    pub cargo: PathBuf,
    /// rustc whose sysroot must hold rust-src; default $RUSTC or `rustc`.
    pub rustc: PathBuf,
    pub linker: String,
    /// `-j`; None lets cargo decide.
    pub jobs: Option<u32>,
    pub offline: bool,
    pub quiet: bool,
    /// `--locked`: the lab's own workspace has a committed Cargo.lock; a user's crate may not.
    pub locked: bool,
}

impl Default for GuestBuildOpts {
    fn default() -> Self {
        let guest_dir = guest_dir();
        let env_or = |k: &str, d: &str| std::env::var_os(k).map(PathBuf::from).unwrap_or_else(|| d.into());
        GuestBuildOpts {
            target_dir: guest_dir.join("target"),
            guest_dir,
            cargo: env_or("CARGO", "cargo"),
            rustc: env_or("RUSTC", "rustc"),
            linker: GUEST_LINKER.into(),
            jobs: None,
            offline: false,
            quiet: false,
            locked: true,
        }
    }
}

/// Host paths of the built guest programs (all [`GUEST_MULTICALL`]'s one binary, under the
/// name it answers to; [`crate::pack_initramfs`] packs a file shared by several names once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestBins {
    pub init: PathBuf,
    /// (name, path) of each step program, in [`GUEST_PROGRAMS`] order.
    pub programs: Vec<(String, PathBuf)>,
}

impl GuestBins {
    pub fn program(&self, name: &str) -> Option<&Path> {
        self.programs.iter().find(|(n, _)| n == name).map(|(_, p)| p.as_path())
    }
}

fn find_in_path(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).is_file().then(|| prog.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(prog)).find(|p| p.is_file())
}

/// "1.95" from "rustc 1.95.0 (...)" or "Version 1.95 (...)".
fn major_minor(s: &str) -> Option<String> {
    let v = s.split_whitespace().nth(1)?;
    let mut it = v.split('.');
    Some(format!("{}.{}", it.next()?, it.next()?))
}

/// Fails with the fix to apply when the cross linker, static glibc or rust-src is missing.
pub fn check_prerequisites(opts: &GuestBuildOpts) -> Result<()> {
    if find_in_path(&opts.linker).is_none() {
        bail!("cross linker {} not found: {CROSS_FIX}", opts.linker);
    }
    if !Path::new(STATIC_LIBC).is_file() {
        bail!("static aarch64 glibc {STATIC_LIBC} not found: {CROSS_FIX}");
    }
    let out = Command::new(&opts.rustc)
        .args(["--print", "sysroot"])
        .output()
        .with_context(|| format!("cannot run {}", opts.rustc.display()))?;
    if !out.status.success() {
        bail!("{} --print sysroot failed: {}", opts.rustc.display(), String::from_utf8_lossy(&out.stderr));
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let src = sysroot.join("lib/rustlib/src/rust");
    if !src.join("library/std/Cargo.toml").is_file() {
        bail!("rust-src not found at {} (needed for -Zbuild-std): run cargo make setup", src.display());
    }
    // std sources of another release fail to build in obscure ways: catch it here.
    let version = Command::new(&opts.rustc).arg("--version").output().ok();
    let rustc_v = version.and_then(|o| major_minor(&String::from_utf8_lossy(&o.stdout)));
    let releases = std::fs::read_to_string(src.join("RELEASES.md")).unwrap_or_default();
    let src_v = releases.lines().find(|l| l.starts_with("Version ")).and_then(major_minor);
    if let (Some(r), Some(s)) = (&rustc_v, &src_v) {
        if r != s {
            bail!("rust-src at {} is for Rust {s} but rustc is {r}: run cargo make setup", src.display());
        }
    }
    Ok(())
}

/// [`GUEST_RUSTFLAGS`] and the remaps that keep this machine's paths out of the binaries:
/// panic locations name their source file, and the guest's path dependencies (the
/// workspace's members and `proto`), the registry's crates and std (`-Zbuild-std`) are named
/// by absolute path. With these, and `proto` inside this workspace's directory (cargo hashes a
/// path dependency's path into every crate's `-C metadata`, relative to the workspace root
/// only when it lies inside), two checkouts at different paths build the same bytes.
pub fn guest_rustflags(opts: &GuestBuildOpts) -> Vec<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    // $CARGO_HOME, else ~/.cargo (likewise rustup): where cargo and rustup themselves look.
    let dir = |k: &str, d: &str| std::env::var_os(k).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(d)));
    let src = opts.guest_dir.parent().unwrap_or(&opts.guest_dir).to_path_buf();
    let remaps =
        [(Some(src), "/src"), (dir("CARGO_HOME", ".cargo"), "/cargo"), (dir("RUSTUP_HOME", ".rustup"), "/rustup")];
    let mut flags: Vec<String> = GUEST_RUSTFLAGS.split(' ').map(String::from).collect();
    for (from, to) in remaps.into_iter().filter_map(|(f, t)| Some((f?, t))) {
        let from = std::path::absolute(&from).unwrap_or(from);
        flags.push(format!("--remap-path-prefix={}={to}", from.display()));
    }
    flags
}

/// The cargo invocation [`build_guest`] runs, with its environment set.
pub fn guest_build_command(opts: &GuestBuildOpts) -> Command {
    let mut cmd = Command::new(&opts.cargo);
    cmd.current_dir(&opts.guest_dir).arg("build").arg("--manifest-path").arg(opts.guest_dir.join("Cargo.toml")).args([
        "--release",
        "-Zbuild-std=std,panic_abort",
        "--target",
        GUEST_TARGET,
    ]);
    if opts.locked {
        cmd.arg("--locked");
    }
    if let Some(j) = opts.jobs {
        cmd.arg(format!("-j{j}"));
    }
    if opts.offline {
        cmd.arg("--offline");
    }
    if opts.quiet {
        cmd.arg("-q");
    }
    cmd.env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", &opts.linker)
        // With --target, RUSTFLAGS only reaches target crates, not proc macros.
        // CARGO_ENCODED_RUSTFLAGS (it takes precedence over RUSTFLAGS): a remapped path
        // may hold spaces.
        .env("CARGO_ENCODED_RUSTFLAGS", guest_rustflags(opts).join("\x1f"))
        .env("CARGO_TARGET_DIR", &opts.target_dir)
        .env("RUSTC", &opts.rustc);
    // Settings of an outer cargo/clippy run that would change this build.
    for k in ["RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_BUILD_RUSTFLAGS", "RUSTC_WORKSPACE_WRAPPER"] {
        cmd.env_remove(k);
    }
    cmd
}

fn describe(cmd: &Command) -> String {
    let envs: Vec<String> =
        cmd.get_envs().filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy()))).collect();
    let args: Vec<OsString> = cmd.get_args().map(|a| a.to_owned()).collect();
    format!(
        "{} {} {}",
        envs.join(" "),
        cmd.get_program().to_string_lossy(),
        args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
    )
}

/// Cross-builds the guest workspace; checks the multicall binary is a static aarch64 ELF.
pub fn build_guest(opts: &GuestBuildOpts) -> Result<GuestBins> {
    check_prerequisites(opts)?;
    let mut cmd = guest_build_command(opts);
    let status = cmd.status().with_context(|| format!("cannot run {}", opts.cargo.display()))?;
    if !status.success() {
        bail!("guest build failed ({status}): {}", describe(&cmd));
    }
    let multicall = opts.target_dir.join(GUEST_TARGET).join("release").join(GUEST_MULTICALL);
    elf::check_static_aarch64(&multicall)?;
    Ok(GuestBins {
        init: multicall.clone(),
        programs: GUEST_PROGRAMS.iter().map(|n| (n.to_string(), multicall.clone())).collect(),
    })
}

/// Builds a user's own crate (the directory of its Cargo.toml) exactly as [`build_guest`]
/// builds the lab's guest programs, into `<crate>/target`, and returns the static aarch64
/// executables it produced.
pub fn build_user_crate(manifest: &Path) -> Result<Vec<PathBuf>> {
    let dir = if manifest.file_name().is_some_and(|n| n == "Cargo.toml") {
        manifest.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        manifest.to_path_buf()
    };
    if !dir.join("Cargo.toml").is_file() {
        bail!("--manifest {}: no Cargo.toml there; give the crate's Cargo.toml or its directory", manifest.display());
    }
    let dir = std::path::absolute(&dir)?;
    let opts = GuestBuildOpts { target_dir: dir.join("target"), guest_dir: dir, locked: false, ..Default::default() };
    check_prerequisites(&opts)?;
    let mut cmd = guest_build_command(&opts);
    cmd.arg("--message-format=json-render-diagnostics").stdout(std::process::Stdio::piped());
    let out = cmd.spawn().with_context(|| format!("cannot run {}", opts.cargo.display()))?.wait_with_output()?;
    if !out.status.success() {
        bail!("guest build failed ({}): {}", out.status, describe(&cmd));
    }
    let exes = executables(&String::from_utf8_lossy(&out.stdout));
    if exes.is_empty() {
        bail!("{} built no executable (a [[bin]] target or src/main.rs)", opts.guest_dir.display());
    }
    for e in &exes {
        elf::check_static_aarch64(e)?;
    }
    Ok(exes)
}

/// Executables among cargo's JSON messages.
fn executables(messages: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cargo hashes a path dependency outside the workspace by its absolute path into every
    /// crate's `-C metadata` (and so into every symbol): one such dependency, and two checkouts
    /// at different paths build different guest binaries (and under icount, run different
    /// instruction streams).
    #[test]
    fn guest_path_dependencies_lie_inside_the_guest_workspace() {
        let root = guest_dir().canonicalize().unwrap();
        let read = |p: &Path| -> toml::Table { std::fs::read_to_string(p).unwrap().parse().unwrap() };
        let ws = read(&root.join("Cargo.toml"));
        let mut manifests = vec![(root.clone(), ws.clone())];
        for m in ws["workspace"]["members"].as_array().unwrap() {
            let dir = root.join(m.as_str().unwrap());
            manifests.push((dir.clone(), read(&dir.join("Cargo.toml"))));
        }
        let mut outside = Vec::new();
        for (dir, t) in &manifests {
            let tables = [
                t.get("workspace").and_then(|w| w.get("dependencies")),
                t.get("dependencies"),
                t.get("dev-dependencies"),
                t.get("build-dependencies"),
            ];
            for deps in tables.into_iter().flatten().filter_map(|d| d.as_table()) {
                for (name, d) in deps {
                    let Some(p) = d.get("path").and_then(|p| p.as_str()) else { continue };
                    let at = dir.join(p).canonicalize().unwrap();
                    if !at.starts_with(&root) {
                        outside.push(format!("{name} ({})", dir.join(p).display()));
                    }
                }
            }
        }
        assert!(outside.is_empty(), "path dependencies outside rootfs/guest: {outside:?}; move them inside");
    }

    #[test]
    fn missing_linker_names_the_fix() {
        let opts = GuestBuildOpts { linker: "no-such-aarch64-gcc".into(), ..Default::default() };
        let e = check_prerequisites(&opts).unwrap_err().to_string();
        assert!(e.contains("install gcc-aarch64-linux-gnu libc6-dev-arm64-cross"), "{e}");
    }

    #[test]
    fn command_sets_its_environment() {
        let opts = GuestBuildOpts { target_dir: "/tmp/t".into(), jobs: Some(1), ..Default::default() };
        let cmd = guest_build_command(&opts);
        let env = |k: &str| {
            cmd.get_envs().find(|(n, _)| *n == k).and_then(|(_, v)| v).map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(env("RUSTC_BOOTSTRAP").as_deref(), Some("1"));
        let flags = env("CARGO_ENCODED_RUSTFLAGS").unwrap();
        let flags: Vec<&str> = flags.split('\x1f').collect();
        assert_eq!(&flags[..2], &["-C", "target-feature=+crt-static"]);
        let src = opts.guest_dir.parent().unwrap().display().to_string();
        assert!(flags.contains(&format!("--remap-path-prefix={src}=/src").as_str()), "{flags:?}");
        assert!(flags.iter().any(|f| f.ends_with("=/cargo")) && flags.iter().any(|f| f.ends_with("=/rustup")));
        assert_eq!(env("CARGO_TARGET_DIR").as_deref(), Some("/tmp/t"));
        assert_eq!(env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER").as_deref(), Some(GUEST_LINKER));
        assert!(cmd.get_envs().any(|(k, v)| k == "RUSTFLAGS" && v.is_none()));
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&"-Zbuild-std=std,panic_abort".to_string()));
        assert!(args.contains(&"-j1".to_string()));
        assert!(opts.guest_dir.join("Cargo.toml").is_file());
    }

    // Slow (builds std for aarch64): cargo test -p rootfs -- --ignored
    #[test]
    #[ignore = "cross-builds the guest workspace"]
    fn builds_static_aarch64_binaries() {
        let bins = build_guest(&GuestBuildOpts { quiet: true, ..Default::default() }).unwrap();
        assert!(bins.init.ends_with("aarch64-unknown-linux-gnu/release/guestbox"));
        for name in GUEST_PROGRAMS {
            elf::check_static_aarch64(bins.program(name).unwrap()).unwrap();
        }
    }

    // The guest binary dispatches on argv[0] with its own table: a program missing there
    // would only fail in the guest ("no program named").
    #[test]
    fn multicall_table_names_every_program() {
        let src = std::fs::read_to_string(guest_dir().join(GUEST_MULTICALL).join("src/main.rs")).unwrap();
        let table: Vec<&str> = src
            .lines()
            .filter_map(|l| l.trim().strip_prefix("(\""))
            .filter_map(|l| l.split_once("\", ").map(|(n, _)| n))
            .collect();
        let want: Vec<&str> = std::iter::once("init").chain(GUEST_PROGRAMS.iter().copied()).collect();
        assert_eq!(table, want, "rootfs/guest/{GUEST_MULTICALL}/src/main.rs PROGRAMS against GUEST_PROGRAMS");
    }

    #[test]
    fn user_crates() {
        let msgs = [
            r#"{"reason":"compiler-artifact","target":{"name":"rsbinder"},"executable":null}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"hello"},"executable":"/c/target/a/release/hello"}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(executables(&msgs), [PathBuf::from("/c/target/a/release/hello")]);
        let e = build_user_crate(Path::new("/nonexistent/Cargo.toml")).unwrap_err().to_string();
        assert!(e.contains("no Cargo.toml there"), "{e}");
        let cmd = guest_build_command(&GuestBuildOpts { locked: false, ..Default::default() });
        assert!(!cmd.get_args().any(|a| a == "--locked"));
    }

    #[test]
    fn versions() {
        assert_eq!(major_minor("rustc 1.95.0 (59807616e 2026-04-14)").as_deref(), Some("1.95"));
        assert_eq!(major_minor("Version 1.95 (2026-04-16)").as_deref(), Some("1.95"));
    }
}
