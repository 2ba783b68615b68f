//! Verified artifacts: each kind the cache publishes (kernel, lab QEMU, busybox, DTB,
//! binderfs selftest), damaged by truncation and by one flipped byte, is listed by
//! `lab cache verify`, refused (an error naming the fix in CI or with --offline) and rebuilt;
//! a run rebuilds what it boots before the boot, which then passes.
//!
//! It works on a scratch cache (BINDER_LAB_CACHE) whose artifacts are its own and whose
//! inputs and build directories are links into the main cache: the kernel tree and O=
//! directories, rust-src, the QEMU tree and build directory. A rebuild there is what it is in
//! the main cache after damage (the kernel's damaged files restored from its kept O=
//! directory, a no-op ninja and a copy for QEMU), and the main cache's artifacts are never
//! touched.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

/// What the scratch shares with the main cache (inputs and kept build directories).
const SHARED: &[&str] = &[
    "apt",
    "downloads",
    "tools",
    "rust-src",
    "kernel/src",
    "kernel/build",
    "qemu/src",
    "qemu/build",
    "qemu/venv",
    "qemu/downloads",
];

/// A scratch cache sharing [`SHARED`] with the main one, which must hold `built` (relative):
/// the kept build directory a rebuild reuses (`cargo make test` builds them before the e2e
/// tests). Without it the scratch would build from nothing.
fn scratch(built: &str) -> tempfile::TempDir {
    let main = lab::support::paths::cache();
    assert!(
        main.join(built).exists(),
        "{} is missing: build it first (`cargo make kernel` / `cargo make qemu`)",
        main.join(built).display()
    );
    let root = lab::support::paths::repo().join("target/lab");
    std::fs::create_dir_all(&root).unwrap();
    let d = tempfile::Builder::new().prefix("cache-e2e-").tempdir_in(root).unwrap();
    for rel in SHARED {
        let (from, link) = (main.join(rel), d.path().join(rel));
        if from.exists() {
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&from, &link).unwrap();
        }
    }
    d
}

/// `lab ARGS` on the scratch cache; `ci` runs it as CI does (damaged artifacts are errors).
fn lab(cache: &Path, args: &[&str], ci: bool) -> Output {
    let mut c = std::process::Command::new(lab_tests::lab_bin());
    c.args(args).env("BINDER_LAB_CACHE", cache).env_remove("LAB_OFFLINE").env_remove("CI");
    if ci {
        c.env("CI", "true");
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A run that uses four kinds: the kernel, busybox, QEMU's DTB and the binderfs selftest.
const RUN: &[&str] = &["run", "--plan", "binderfs"];

/// The one artifact under `root` (relative to the cache).
fn only(cache: &Path, root: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(cache.join(root))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{root}: {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// The file of each kind a boot uses: (kind as `lab` names it, path).
fn booted_files(cache: &Path) -> Vec<(&'static str, PathBuf)> {
    let busybox = only(cache, "busybox");
    let bb = ["bin/busybox", "usr/bin/busybox"].iter().map(|r| busybox.join(r)).find(|p| p.is_file()).unwrap();
    vec![
        ("kernel", only(cache, "kernel/artifacts").join("Image")),
        ("busybox", bb),
        ("DTB", only(cache, "dtb").join("virt.dtb")),
        ("binderfs selftest", only(cache, "selftests").join("binderfs_test")),
    ]
}

fn truncate(p: &Path) {
    let len = std::fs::metadata(p).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len / 2).unwrap();
}

fn flip(p: &Path) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
    let at = std::fs::metadata(p).unwrap().len() / 3;
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x01]).unwrap();
}

/// A damage: its name, what does it, and whether its round asks for strictness by `CI=true`
/// (else by `--offline`).
type Damage = (&'static str, fn(&Path), bool);
const DAMAGES: [Damage; 2] = [("truncated", truncate, false), ("one byte flipped", flip, true)];

/// `lab cache verify` exits 1 and names each file with what differs.
fn verify_lists(cache: &Path, how: &str, files: &[(&str, PathBuf)]) {
    let v = lab(cache, &["cache", "verify"], false);
    let vt = text(&v);
    assert_eq!(v.status.code(), Some(1), "{how}: {vt}");
    assert!(vt.contains(&format!("0 ok, {} damaged", files.len())), "{how}: {vt}");
    for (kind, f) in files {
        let line = vt
            .lines()
            .find(|l| l.trim_start().starts_with(&*f.display().to_string()))
            .unwrap_or_else(|| panic!("{how}: verify does not name {kind}'s {}:\n{vt}", f.display()));
        let want = if how == "truncated" { ": size " } else { ": sha256 mismatch" };
        assert!(line.contains(want), "{how}: {line}");
    }
}

/// In CI or with --offline nothing is rebuilt and nothing boots: the error names the fix.
fn strict_refuses(cache: &Path, how: &str, args: &[&str], ci: bool) {
    let args: Vec<&str> = if ci { args.to_vec() } else { [&["--offline"][..], args].concat() };
    let o = lab(cache, &args, ci);
    let ot = text(&o);
    assert_eq!(o.status.code(), Some(203), "{how}: {ot}");
    assert!(ot.contains("is damaged") && ot.contains("cargo make cache verify --repair"), "{how}: {ot}");
    assert!(!ot.contains("binderfs_test exit"), "{how}: booted: {ot}");
}

/// Each file's artifact was refused, naming the file, and `lab cache verify` is clean again.
fn refused_and_rebuilt(cache: &Path, how: &str, out: &Output, files: &[(&str, PathBuf)]) {
    let ot = text(out);
    for (kind, f) in files {
        assert!(ot.contains(&format!("refusing the damaged {kind} ")), "{how}: {kind} not refused:\n{ot}");
        assert!(ot.contains(&*f.display().to_string()), "{how}: {} not named:\n{ot}", f.display());
    }
    let v = lab(cache, &["cache", "verify"], false);
    assert_eq!(v.status.code(), Some(0), "{how}: after the rebuild: {}", text(&v));
    assert!(text(&v).contains(&format!("{} ok, 0 damaged", files.len())), "{how}: {}", text(&v));
}

/// The main cache's perf kernel of this tree copied into the scratch (a reuse there needs no
/// tree lock, which another flavor's build may hold for many minutes). Only that one: the
/// main cache also holds other trees' perf kernels (branches, A/B treatments), which the
/// counts below must not see.
fn seed_kernels(cache: &Path) {
    let built = lab::kbuild::kernel::build("perf").unwrap();
    let from = built.image().parent().unwrap().to_path_buf();
    let to = cache.join("kernel/artifacts");
    std::fs::create_dir_all(&to).unwrap();
    let st = std::process::Command::new("cp").arg("-a").arg(&from).arg(&to).status().unwrap();
    assert!(st.success());
}

#[test]
fn damaged_boot_artifacts_are_listed_refused_and_rebuilt() {
    let s = scratch("kernel/build/perf/vmlinux");
    let cache = s.path();
    seed_kernels(cache);
    // Every other kind published into the scratch.
    let t = Instant::now();
    let o = lab(cache, RUN, false);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    eprintln!("first run on the scratch cache: {:.0?}", t.elapsed());
    let v = lab(cache, &["cache", "verify"], false);
    assert!(text(&v).contains("4 artifacts in") && text(&v).contains("4 ok, 0 damaged"), "{}", text(&v));

    for (how, damage, ci) in DAMAGES {
        let files = booted_files(cache);
        for (_, f) in &files {
            damage(f);
        }
        verify_lists(cache, how, &files);
        strict_refuses(cache, how, RUN, ci);
        let t = Instant::now();
        let o = lab(cache, RUN, false);
        eprintln!("{how}: a run that rebuilds all four: {:.0?}", t.elapsed());
        assert_eq!(o.status.code(), Some(0), "{how}: {}", text(&o));
        refused_and_rebuilt(cache, how, &o, &files);
    }
}

#[test]
fn damaged_lab_qemu_is_listed_refused_and_rebuilt() {
    let s = scratch("qemu/build/qemu-system-aarch64");
    let cache = s.path();
    let o = lab(cache, &["qemu"], false);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let binary = only(cache, "qemu/artifacts").join("qemu-system-aarch64");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), binary.display().to_string());
    for (how, damage, ci) in DAMAGES {
        damage(&binary);
        let files = [("lab QEMU", binary.clone())];
        verify_lists(cache, how, &files);
        strict_refuses(cache, how, &["qemu"], ci);
        let t = Instant::now();
        let o = lab(cache, &["qemu"], false);
        eprintln!("{how}: lab qemu rebuilding the QEMU: {:.0?}", t.elapsed());
        assert_eq!(o.status.code(), Some(0), "{how}: {}", text(&o));
        refused_and_rebuilt(cache, how, &o, &files);
        // And it runs.
        let v = std::process::Command::new(&binary).arg("--version").output().unwrap();
        assert!(v.status.success() && String::from_utf8_lossy(&v.stdout).contains("QEMU emulator"), "{how}");
    }
}
