//! The lab QEMU's source: Debian's qemu source package at the version pinned in
//! `qemu/qemu.lock`, of which the archive serves only the orig tarball. Downloaded through a
//! private apt with a single `deb-src` line, checked against the lock.

use crate::provision::apt::SourcePin;
use crate::support::fs::sha256_file;
use crate::support::paths;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The qemu source package (`qemu/qemu.lock`): the orig tarball is the only file of it the
/// archive serves; the version is the installed qemu-system-arm's, so lab and system QEMU share
/// a base.
pub type QemuPin = SourcePin;

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
        lock.qemu.check(origin, "qemu")?;
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
    crate::provision::apt::fetch_orig(cache, pin, "qemu/qemu.lock", &path)?;
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
