//! Verified artifacts: each kind the cache publishes (kernel, lab QEMU, busybox, DTB,
//! binderfs selftest), damaged by truncation and by one flipped byte, is listed by
//! `lab cache verify`, refused by a run (an error naming the fix in CI or with --offline) and
//! rebuilt before the boot, which then passes.
//!
//! It works on a scratch cache (BINDER_LAB_CACHE) whose artifacts are its own and whose
//! inputs and build directories are links into the main cache: the kernel tree and O=
//! directories, rust-src, the QEMU tree and build directory. A rebuild there is what it is in
//! the main cache after damage (a no-op make and ninja, a copy), and the main cache's
//! artifacts are never touched.

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

fn scratch() -> tempfile::TempDir {
    let main = lab::support::paths::cache();
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

const RUN: &[&str] = &["run", "--qemu", "lab", "--plan", "binderfs"];

/// The one artifact of `kind` under `root` (relative to the cache).
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

/// The file of each kind that a boot uses: (kind as `lab` names it, path).
fn booted_files(cache: &Path) -> Vec<(&'static str, PathBuf)> {
    let busybox = only(cache, "busybox");
    let bb = ["bin/busybox", "usr/bin/busybox"].iter().map(|r| busybox.join(r)).find(|p| p.is_file()).unwrap();
    vec![
        ("kernel", only(cache, "kernel/artifacts").join("Image")),
        ("lab QEMU", only(cache, "qemu/artifacts").join("qemu-system-aarch64")),
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

fn booted_ok(o: &Output) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("binderfs_test exit") || t.contains("binderfs"), "{t}");
}

#[test]
fn damaged_artifacts_are_listed_refused_and_rebuilt() {
    let s = scratch();
    let cache = s.path();
    // Every kind published into the scratch (the kernel relinked from the kept O= directory).
    let t = Instant::now();
    booted_ok(&lab(cache, RUN, false));
    eprintln!("first run on the scratch cache: {:.0?}", t.elapsed());
    let v = lab(cache, &["cache", "verify"], false);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    assert!(text(&v).contains("5 artifacts in") && text(&v).contains("5 ok, 0 damaged"), "{}", text(&v));

    for (how, damage, strict) in
        [("truncated", truncate as fn(&Path), &["--offline"][..]), ("one byte flipped", flip, &[][..])]
    {
        let files = booted_files(cache);
        for (_, f) in &files {
            damage(f);
        }
        if how == "one byte flipped" {
            flip(&files[0].1.with_file_name("vmlinux"));
        }
        // `lab cache verify` lists each one with what differs.
        let v = lab(cache, &["cache", "verify"], false);
        let vt = text(&v);
        assert_eq!(v.status.code(), Some(1), "{how}: {vt}");
        assert!(vt.contains("0 ok, 5 damaged"), "{how}: {vt}");
        for (kind, f) in &files {
            let line = vt
                .lines()
                .find(|l| l.trim_start().starts_with(&*f.display().to_string()))
                .unwrap_or_else(|| panic!("{how}: verify does not name {kind}'s {}:\n{vt}", f.display()));
            let want = if how == "truncated" { "size " } else { "sha256 mismatch" };
            assert!(line.contains(want), "{how}: {line}");
        }
        // In CI (or with --offline) nothing is rebuilt and nothing boots: the error names the fix.
        let args: Vec<&str> = strict.iter().copied().chain(RUN.iter().copied()).collect();
        let o = lab(cache, &args, strict.is_empty());
        let ot = text(&o);
        assert_eq!(o.status.code(), Some(203), "{how}: {ot}");
        assert!(ot.contains("is damaged") && ot.contains("cargo make cache verify --repair"), "{how}: {ot}");
        assert!(!ot.contains("booting") && !ot.contains("binderfs_test exit"), "{how}: booted: {ot}");
        // Otherwise each one is refused, naming its file, rebuilt, and the boot passes.
        let t = Instant::now();
        let o = lab(cache, RUN, false);
        eprintln!("{how}: run with five rebuilds: {:.0?}", t.elapsed());
        booted_ok(&o);
        let ot = text(&o);
        for (kind, f) in &files {
            assert!(ot.contains(&format!("refusing the damaged {kind} ")), "{how}: {kind} not refused:\n{ot}");
            assert!(ot.contains(&*f.display().to_string()), "{how}: {} not named:\n{ot}", f.display());
        }
        let v = lab(cache, &["cache", "verify"], false);
        assert!(text(&v).contains("5 ok, 0 damaged"), "{how}: after the rebuild: {}", text(&v));
    }
}
