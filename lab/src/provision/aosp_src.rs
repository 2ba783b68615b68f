//! Android 14's binder userspace source: Debian's `android-platform-tools` source package at
//! the version pinned in `aosp/aosp.lock`. Only its orig tarball is used (frameworks/native's
//! libbinder, servicemanager and tests; system/core's headers); it is downloaded through a
//! private apt with a single `deb-src` line for the pinned suite, checked against the lock's
//! SHA-256 and kept in the cache by that hash. Once cached, nothing is fetched (`--offline`).

pub use crate::provision::apt::SourcePin;
use crate::support::fs::sha256_file;
use crate::support::paths;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The lock's path inside the repository.
pub const LOCK: &str = "aosp/aosp.lock";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AospLock {
    pub source: SourcePin,
}

impl AospLock {
    pub fn path() -> PathBuf {
        paths::repo().join(LOCK)
    }

    pub fn parse(text: &str, origin: &str) -> Result<AospLock> {
        let lock: AospLock =
            toml::from_str(text).with_context(|| format!("{origin} is malformed; restore it from git"))?;
        lock.source.check(origin, "source")?;
        anyhow::ensure!(
            !lock.source.version.is_empty() && !lock.source.suite.is_empty(),
            "{origin}: source.version and source.suite are required"
        );
        Ok(lock)
    }

    pub fn load() -> Result<AospLock> {
        let path = AospLock::path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        AospLock::parse(&text, LOCK)
    }
}

/// Where the orig tarball is kept: named by its hash, so a re-pin never meets a stale file.
pub fn cached_path(cache: &Path, pin: &SourcePin) -> PathBuf {
    cache.join("aosp/downloads").join(&pin.sha256[..16]).join(&pin.orig)
}

/// The pinned orig tarball in the cache, downloaded (apt checks the signed index's hash, then
/// the lock's is checked) when it is not there yet.
pub fn ensure_orig(cache: &Path, pin: &SourcePin) -> Result<PathBuf> {
    let path = cached_path(cache, pin);
    if path.is_file() && sha256_file(&path)? == pin.sha256 {
        return Ok(path);
    }
    if crate::support::artifact::offline() {
        bail!(
            "--offline: {} {} ({}) is not in the cache ({}); run once without --offline to download it",
            pin.package,
            pin.version,
            pin.orig,
            path.display()
        );
    }
    crate::provision::apt::fetch_orig(cache, pin, LOCK, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_lock_parses() {
        let l = AospLock::load().unwrap();
        assert_eq!(l.source.package, "android-platform-tools");
        assert!(l.source.version.starts_with("34."), "Android 14 is 34.x");
    }

    #[test]
    fn lock_errors_name_the_field() {
        let ok = format!(
            "[source]\npackage='p'\nversion='1'\nsuite='trixie'\norig='p_1.orig.tar.xz'\nsha256='{}'\n",
            "a".repeat(64)
        );
        AospLock::parse(&ok, "aosp.lock").unwrap();
        let e = AospLock::parse(&ok.replace(&"a".repeat(64), "zz"), "aosp.lock").unwrap_err().to_string();
        assert!(e.contains("source.sha256 must be"), "{e}");
        let e = AospLock::parse(&ok.replace("p_1.orig.tar.xz", "x/p.tar"), "aosp.lock").unwrap_err().to_string();
        assert!(e.contains("source.orig"), "{e}");
        let e = AospLock::parse("[source]\n", "aosp.lock").unwrap_err();
        assert!(format!("{e:#}").contains("aosp.lock is malformed"), "{e:#}");
    }

    #[test]
    fn offline_without_the_file_names_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let pin = AospLock::load().unwrap().source;
        crate::support::artifact::set_offline(true);
        let e = ensure_orig(d.path(), &pin).unwrap_err().to_string();
        crate::support::artifact::set_offline(false);
        assert!(e.contains("--offline") && e.contains("run once without --offline"), "{e}");
    }
}

#[cfg(test)]
mod live_tests {
    /// Downloads into the machine's lab cache (run by hand: `--ignored`; needs the mirror).
    #[test]
    #[ignore = "downloads from the Debian mirror into the machine's lab cache"]
    fn pinned_source_and_a_missing_version() {
        let cache = crate::support::paths::cache();
        let pin = super::AospLock::load().unwrap().source;
        let p = super::ensure_orig(&cache, &pin).unwrap();
        assert_eq!(crate::support::fs::sha256_file(&p).unwrap(), pin.sha256);
        let mut gone = pin.clone();
        gone.version = "34.0.5-0".into();
        gone.sha256 = "0".repeat(64);
        let e = format!("{:#}", super::ensure_orig(&cache, &gone).unwrap_err());
        assert!(e.contains("34.0.5-0") && e.contains("no longer serves"), "{e}");
    }
}
