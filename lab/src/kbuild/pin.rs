//! `kernel-config/kernel.lock`: the exact kernel source package the lab builds, its
//! verified download, and re-pinning (`lab kernel-lock`).

use crate::provision::apt::PrivateApt;
use crate::support::fs::{sha256_file, write_atomic};
use crate::support::paths;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelPin {
    /// Debian package, e.g. `linux-source-7.2`.
    pub package: String,
    /// Exact Debian version, e.g. `7.2.12-1~bpo13+1`.
    pub version: String,
    /// Suite it was pinned from (informational; any private-apt suite that serves it will do).
    pub suite: String,
    /// SHA-256 of the .deb.
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub kernel: KernelPin,
}

pub const HEADER: &str = "# Pinned kernel source. Re-pin with `cargo make kernel-lock` (newest 7.2.x served).\n";

impl Lock {
    pub fn path() -> PathBuf {
        paths::kernel_config_dir().join("kernel.lock")
    }

    pub fn parse(text: &str, origin: &str) -> Result<Lock> {
        let lock: Lock = toml::from_str(text).with_context(|| {
            format!("{origin} is malformed; restore it from git or re-create it with `cargo make kernel-lock`")
        })?;
        let k = &lock.kernel;
        anyhow::ensure!(
            k.sha256.len() == 64 && k.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
            "{origin}: kernel.sha256 must be 64 hex digits; re-pin with `cargo make kernel-lock`"
        );
        anyhow::ensure!(!k.version.is_empty(), "{origin}: kernel.version is empty");
        Ok(lock)
    }

    pub fn load(path: &Path) -> Result<Lock> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Lock::parse(&text, &path.display().to_string())
    }

    pub fn render(&self) -> String {
        format!("{HEADER}{}", toml::to_string(self).expect("lock serializes"))
    }
}

/// Path of the pinned kernel .deb in the cache, downloaded and verified.
pub fn ensure_kernel_deb(cache: &Path, lock: &Lock) -> Result<PathBuf> {
    let k = &lock.kernel;
    let dest = cache.join("downloads");
    let path = dest.join(format!("{}_{}_all.deb", k.package, k.version.replace(':', "%3a")));
    if path.is_file() && verified(&path, &k.sha256)? {
        return Ok(path);
    }
    let apt = PrivateApt::new(cache);
    apt.update()?;
    let served = apt.versions(&k.package)?;
    if !served.iter().any(|v| v.version == k.version) {
        let newest = served.first().map(|v| v.version.as_str()).unwrap_or("none");
        bail!(
            "the pinned {} {} is no longer served (newest served: {newest}).\nRe-pin with `cargo make kernel-lock`, which records the newest 7.2.x and its SHA-256 in kernel-config/kernel.lock.",
            k.package,
            k.version
        );
    }
    crate::support::progress::note(format!("downloading {} {} (~165 MB)", k.package, k.version));
    let got = apt.download(&format!("{}={}", k.package, k.version), &dest)?;
    let sum = sha256_file(&got)?;
    if sum != k.sha256 {
        let _ = std::fs::remove_file(&got);
        bail!(
            "{} has SHA-256 {sum}, but kernel-config/kernel.lock pins {}.\nThe download was deleted. If the archive really changed, re-pin with `cargo make kernel-lock`.",
            got.display(),
            k.sha256
        );
    }
    if got != path {
        std::fs::rename(&got, &path)?;
    }
    Ok(path)
}

/// Whether `path` has SHA-256 `want`. Hashing 165 MB takes a second, so a matching result is
/// remembered next to the file together with its size and mtime.
fn verified(path: &Path, want: &str) -> Result<bool> {
    let meta = std::fs::metadata(path)?;
    let mtime = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let memo = format!("{want} {} {mtime}\n", meta.len());
    let stamp = path.with_extension("deb.verified");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(memo.as_str()) {
        return Ok(true);
    }
    if sha256_file(path)? != want {
        return Ok(false);
    }
    write_atomic(&stamp, memo.as_bytes())?;
    Ok(true)
}

/// `lab kernel-lock`: pin the newest 7.2.x served; returns what changed.
pub fn kernel_lock(cache: &Path) -> Result<String> {
    let path = Lock::path();
    let mut lock = Lock::load(&path)?;
    let apt = PrivateApt::new(cache);
    apt.update()?;
    let newest = apt.versions(&lock.kernel.package)?.into_iter().next().with_context(|| {
        format!("no {} is served by trixie-backports or sid any more; pick a new kernel series", lock.kernel.package)
    })?;
    if newest.version == lock.kernel.version {
        return Ok(format!("kernel.lock already pins the newest {}: {}", lock.kernel.package, newest.version));
    }
    let old = lock.kernel.version.clone();
    lock.kernel.version = newest.version.clone();
    lock.kernel.sha256 = newest.sha256;
    lock.kernel.suite = if newest.version.contains("~bpo") { "trixie-backports".into() } else { "sid".into() };
    write_atomic(&path, lock.render().as_bytes())?;
    ensure_kernel_deb(cache, &lock)?;
    Ok(format!("kernel.lock: {} {old} -> {}", lock.kernel.package, newest.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_lock_parses() {
        let l = Lock::load(&Lock::path()).unwrap();
        assert_eq!(l.kernel.package, "linux-source-7.2");
        assert!(l.kernel.version.starts_with("7.2."));
    }

    #[test]
    fn round_trip_and_errors() {
        let l = Lock {
            kernel: KernelPin {
                package: "linux-source-7.2".into(),
                version: "7.2.1-1".into(),
                suite: "sid".into(),
                sha256: "a".repeat(64),
            },
        };
        assert_eq!(Lock::parse(&l.render(), "x").unwrap(), l);
        let bad = l.render().replace(&"a".repeat(64), "zz");
        assert!(Lock::parse(&bad, "kernel.lock").unwrap_err().to_string().contains("64 hex"));
        let e = Lock::parse("[kernel]\npackage='x'\n", "kernel.lock").unwrap_err();
        assert!(format!("{e:#}").contains("kernel.lock is malformed"), "{e:#}");
    }
}
