//! Files: content hashes and atomic writes (readers never see half a file).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The files `*.ext` in `dir` by stem, sorted; `skip` stems are left out (a missing `dir` has none).
pub fn stems(dir: &Path, ext: &str, skip: &[&str]) -> Vec<(String, std::path::PathBuf)> {
    let suffix = format!(".{ext}");
    let mut out: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.strip_suffix(&suffix)?.to_string();
                    (!skip.contains(&name.as_str())).then(|| (name, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Writes via a temporary file and rename, so readers never see half a file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    publish_file(path, |tmp| std::fs::write(tmp, data).with_context(|| format!("writing {}", tmp.display())))
}

/// A private temporary directory next to `dest` (same file system, so a rename publishes),
/// removed again if it is not published.
fn staging(dest: &Path) -> Result<tempfile::TempDir> {
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let name = dest.file_name().context("path has no file name")?.to_string_lossy().into_owned();
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempdir_in(parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))
}

/// Publishes the file `dest` atomically: `fill` writes it at a temporary path next to it,
/// which is then renamed to `dest`. On an error nothing is left behind and `dest` is as it
/// was; readers never see a partial file.
pub fn publish_file<T>(dest: &Path, fill: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let dir = staging(dest)?;
    let tmp = dir.path().join("file");
    let v = fill(&tmp)?;
    std::fs::rename(&tmp, dest).with_context(|| format!("publishing {}", dest.display()))?;
    Ok(v)
}

/// Publishes the directory `dest` atomically: `fill` populates a temporary directory next to
/// it, which then replaces `dest` (an older, unfinished or damaged one is removed). An existing
/// `dest` is swapped out in one step, so a reader finds the old or the new one, never none. On
/// an error the temporary directory is removed and `dest` is untouched.
pub fn publish_dir<T>(dest: &Path, fill: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let dir = staging(dest)?;
    let v = fill(dir.path())?;
    if std::fs::rename(dir.path(), dest).is_ok() {
        let _ = dir.keep();
        return Ok(v);
    }
    // `dest` exists and is not empty: exchange the two, then the staging name holds the old
    // one and the TempDir removes it. A file system without RENAME_EXCHANGE gets remove+rename.
    if exchange(dir.path(), dest).is_err() {
        let _ = std::fs::remove_dir_all(dest);
        std::fs::rename(dir.path(), dest).with_context(|| format!("publishing {}", dest.display()))?;
        let _ = dir.keep();
    }
    Ok(v)
}

/// Swaps two paths atomically (Linux renameat2 RENAME_EXCHANGE).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths; renameat2 only reads them.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_is_all_or_nothing() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("sub/a.txt");
        write_atomic(&f, b"one").unwrap();
        let e = publish_file(&f, |tmp| -> Result<()> {
            std::fs::write(tmp, b"half")?;
            anyhow::bail!("interrupted")
        });
        assert!(e.is_err());
        assert_eq!(std::fs::read(&f).unwrap(), b"one");
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("stale"), "").unwrap();
        publish_dir(&out, |tmp| Ok(std::fs::write(tmp.join("Image"), "x")?)).unwrap();
        assert!(out.join("Image").is_file() && !out.join("stale").exists());
        assert!(publish_dir(&out, |_| -> Result<()> { anyhow::bail!("no") }).is_err());
        assert!(out.join("Image").is_file());
        // Nothing temporary is left next to the targets.
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert_eq!(std::fs::read_dir(d.path().join("sub")).unwrap().count(), 1);
    }
}
