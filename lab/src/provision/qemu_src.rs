//! The lab QEMU's source: Debian's qemu source package at the version pinned in
//! `qemu/qemu.lock`, of which the archive serves only the orig tarball. Downloaded through a
//! private apt with a single `deb-src` line, checked against the lock.

use crate::provision::apt::PrivateApt;
use crate::support::fs::sha256_file;
use crate::support::paths;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QemuPin {
    /// Debian source package, `qemu`.
    pub package: String,
    /// Exact Debian version; the installed qemu-system-arm's, so lab and system QEMU share a base.
    pub version: String,
    /// Suite whose Sources index serves it.
    pub suite: String,
    /// The orig tarball, the only file of the source package the archive serves.
    pub orig: String,
    /// SHA-256 of the orig tarball.
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QemuLock {
    pub qemu: QemuPin,
}

impl QemuLock {
    pub fn path() -> PathBuf {
        paths::qemu_dir().join("qemu.lock")
    }

    pub fn parse(text: &str, origin: &str) -> Result<QemuLock> {
        let lock: QemuLock =
            toml::from_str(text).with_context(|| format!("{origin} is malformed; restore it from git"))?;
        let q = &lock.qemu;
        anyhow::ensure!(
            q.sha256.len() == 64 && q.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
            "{origin}: qemu.sha256 must be the 64 hex digits of {}",
            q.orig
        );
        anyhow::ensure!(
            q.orig.ends_with(".orig.tar.xz") && !q.orig.contains('/'),
            "{origin}: qemu.orig must be a file name like qemu_10.0.2+ds.orig.tar.xz"
        );
        Ok(lock)
    }

    pub fn load() -> Result<QemuLock> {
        let path = QemuLock::path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        QemuLock::parse(&text, &path.display().to_string())
    }
}

/// The pinned orig tarball in the cache, downloaded through a private apt (deb-src only) and
/// checked against the lock.
pub fn ensure_orig(cache: &Path, pin: &QemuPin) -> Result<PathBuf> {
    let path = cache.join("qemu/downloads").join(&pin.orig);
    if path.is_file() && sha256_file(&path)? == pin.sha256 {
        return Ok(path);
    }
    let apt = PrivateApt::sources_of(cache, &pin.suite);
    apt.update()?;
    let files = apt.source_files(&pin.package, &pin.version).with_context(|| {
        format!("qemu/qemu.lock pins {} {}; pin a version {} serves", pin.package, pin.version, pin.suite)
    })?;
    let Some(f) = files.iter().find(|f| f.name == pin.orig) else {
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        bail!(
            "source {} {} has no {} (files: {}); fix qemu/qemu.lock",
            pin.package,
            pin.version,
            pin.orig,
            names.join(", ")
        );
    };
    if f.sha256 != pin.sha256 {
        bail!(
            "the archive's index gives {} SHA-256 {}, qemu/qemu.lock pins {}: the archive changed the file, or the lock is wrong",
            pin.orig,
            f.sha256,
            pin.sha256
        );
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    crate::support::progress::note(format!("downloading {} (~40 MB)", pin.orig));
    apt.fetch(f, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_lock_parses() {
        let l = QemuLock::load().unwrap();
        assert_eq!(l.qemu.package, "qemu");
        assert!(l.qemu.orig.starts_with("qemu_10.0.2"));
    }

    #[test]
    fn lock_errors_name_the_field() {
        let ok = "[qemu]\npackage='qemu'\nversion='1:1'\nsuite='s'\norig='q.orig.tar.xz'\nsha256='".to_string()
            + &"a".repeat(64)
            + "'\n";
        QemuLock::parse(&ok, "qemu.lock").unwrap();
        let e = QemuLock::parse(&ok.replace(&"a".repeat(64), "zz"), "qemu.lock").unwrap_err().to_string();
        assert!(e.contains("qemu.sha256 must be"), "{e}");
        let e = QemuLock::parse(&ok.replace("q.orig.tar.xz", "q.tar"), "qemu.lock").unwrap_err().to_string();
        assert!(e.contains("qemu.orig"), "{e}");
        let e = QemuLock::parse("[qemu]\n", "qemu.lock").unwrap_err();
        assert!(format!("{e:#}").contains("qemu.lock is malformed"), "{e:#}");
    }
}
