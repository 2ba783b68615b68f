//! `lab kernel --check-reproducible`: the same flavor built a second time, from a second
//! unpack of the pinned source into a second cache (other paths for the tree, the O= directory
//! and rust-src), must give the same Image bytes. A deterministic guest stays deterministic
//! across machines only if nothing of the build's place or time reaches the kernel.

use crate::support::fs::sha256_hex;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Entries of the main cache the scratch cache shares: inputs only, each verified or
/// versioned (the pinned downloads, the versioned tools). Everything the build writes or
/// whose path can reach the kernel (the tree, the O= directories, rust-src) is the scratch's own.
const SHARED: [&str; 2] = ["downloads", "tools"];

/// `scratch` as an absolute path (the second lab process resolves it on its own), refused when
/// it overlaps the main cache `main`: the second build must not share the first one's paths.
pub fn scratch_dir(main: &Path, scratch: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(scratch).with_context(|| format!("--scratch {}", scratch.display()))?;
    let main = std::path::absolute(main).unwrap_or_else(|_| main.to_path_buf());
    if abs.starts_with(&main) || main.starts_with(&abs) {
        bail!("--scratch {}: it overlaps the lab cache {}; name a directory outside it", abs.display(), main.display());
    }
    Ok(abs)
}

/// Prepares `scratch` as a second cache sharing [`SHARED`] with `main`.
pub fn scratch_cache(main: &Path, scratch: &Path) -> Result<()> {
    std::fs::create_dir_all(scratch).with_context(|| format!("creating {}", scratch.display()))?;
    for name in SHARED {
        let (from, link) = (main.join(name), scratch.join(name));
        if link.symlink_metadata().is_ok() || !from.exists() {
            continue;
        }
        std::os::unix::fs::symlink(&from, &link)
            .with_context(|| format!("linking {} to {}", link.display(), from.display()))?;
    }
    Ok(())
}

/// How two Images compare.
#[derive(Debug, PartialEq)]
pub enum Comparison {
    Same { sha256: String, len: usize },
    Differ { first: usize, lens: (usize, usize), near: (String, String) },
}

/// Compares two Images; for a difference, the printable text around the first differing
/// byte in each (a build path or a time stamp shows up there as text).
pub fn compare(a: &[u8], b: &[u8]) -> Comparison {
    match a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len()))) {
        None => Comparison::Same { sha256: sha256_hex(a), len: a.len() },
        Some(first) => {
            Comparison::Differ { first, lens: (a.len(), b.len()), near: (text_near(a, first), text_near(b, first)) }
        }
    }
}

/// The run of printable bytes around `at` (at most 80 on either side), escaped.
fn text_near(bytes: &[u8], at: usize) -> String {
    let printable = |c: &u8| (0x20..0x7f).contains(c);
    let at = at.min(bytes.len());
    let start = bytes[..at].iter().rposition(|c| !printable(c)).map_or(0, |p| p + 1).max(at.saturating_sub(80));
    let end = bytes[at..].iter().position(|c| !printable(c)).map_or(bytes.len(), |p| at + p).min(at + 80);
    String::from_utf8_lossy(&bytes[start..end]).into_owned()
}

/// Builds `flavor` again by running this binary with `BINDER_LAB_CACHE=scratch`; returns the
/// Image it printed.
pub fn build_in(scratch: &Path, flavor: &str, extra_args: &[String]) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the lab binary")?;
    let out = Command::new(exe)
        .args(["kernel", "--flavor", flavor])
        .args(extra_args)
        .env("BINDER_LAB_CACHE", scratch)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running the second build")?;
    if !out.status.success() {
        bail!("the second build (BINDER_LAB_CACHE={}) failed ({})", scratch.display(), out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let image = text.lines().last().map(PathBuf::from).filter(|p| p.is_file());
    image.with_context(|| format!("the second build printed no Image path (stdout: {text:?})"))
}

/// The verdict on two built Images, as the command prints it (an error if they differ).
pub fn verdict(a: &Path, b: &Path) -> Result<String> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    match compare(&read(a)?, &read(b)?) {
        Comparison::Same { sha256, len } => Ok(format!(
            "reproducible: both builds gave the same Image ({len} bytes, sha256 {sha256})\n  {}\n  {}",
            a.display(),
            b.display()
        )),
        Comparison::Differ { first, lens, near } => bail!(
            "not reproducible: the Images differ from byte {first} (sizes {} and {}).\n  \
             {}: ...{}...\n  {}: ...{}...\nSomething of the build's place or time reaches the \
             kernel: a path needs a prefix map (KCFLAGS -ffile-prefix-map, KRUSTFLAGS \
             --remap-path-prefix) or a time a KBUILD_BUILD_* setting (provision/toolchain.rs).",
            lens.0,
            lens.1,
            a.display(),
            near.0,
            b.display(),
            near.1
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_are_reproducible() {
        let c = compare(b"Linux version 7.2", b"Linux version 7.2");
        assert!(matches!(c, Comparison::Same { len: 17, .. }), "{c:?}");
    }

    #[test]
    fn a_path_difference_is_shown_as_text() {
        let a = b"\x00\x01/home/a/cache/kernel/src/mm/mmap.c\x00tail";
        let b = b"\x00\x01/home/b/cache/kernel/src/mm/mmap.c\x00tail";
        match compare(a, b) {
            Comparison::Differ { first, near, .. } => {
                assert_eq!(first, 8);
                assert_eq!(near.0, "/home/a/cache/kernel/src/mm/mmap.c");
                assert_eq!(near.1, "/home/b/cache/kernel/src/mm/mmap.c");
            }
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn a_longer_image_differs_where_the_shorter_ends() {
        assert!(matches!(compare(b"abc", b"abcd"), Comparison::Differ { first: 3, lens: (3, 4), .. }));
    }

    #[test]
    fn the_verdict_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"built Thu Jan 1").unwrap();
        std::fs::write(&b, b"built Fri Jan 2").unwrap();
        let e = verdict(&a, &b).unwrap_err().to_string();
        assert!(e.contains("differ from byte 6") && e.contains("KBUILD_BUILD_"), "{e}");
        std::fs::write(&b, b"built Thu Jan 1").unwrap();
        assert!(verdict(&a, &b).unwrap().starts_with("reproducible"));
    }

    #[test]
    fn a_scratch_inside_or_around_the_cache_is_refused() {
        let main = Path::new("/c/binder-lab");
        for bad in ["/c/binder-lab/x", "/c/binder-lab", "/c"] {
            let e = scratch_dir(main, Path::new(bad)).unwrap_err().to_string();
            assert!(e.contains("overlaps the lab cache"), "{bad}: {e}");
        }
        assert_eq!(scratch_dir(main, Path::new("/c/other")).unwrap(), Path::new("/c/other"));
        assert!(scratch_dir(main, Path::new("rel")).unwrap().is_absolute());
    }

    #[test]
    fn the_scratch_cache_shares_only_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let (main, scratch) = (dir.path().join("main"), dir.path().join("scratch"));
        for d in ["downloads", "tools", "kernel", "rust-src"] {
            std::fs::create_dir_all(main.join(d)).unwrap();
        }
        scratch_cache(&main, &scratch).unwrap();
        scratch_cache(&main, &scratch).unwrap(); // idempotent
        let mut names: Vec<_> = std::fs::read_dir(&scratch).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["downloads", "tools"]);
        assert!(scratch.join("tools").symlink_metadata().unwrap().file_type().is_symlink());
    }
}
