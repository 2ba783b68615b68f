//! `kernel-config/kernel.lock`: the exact kernel source package the lab builds.

use anyhow::{Context, Result};
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
        crate::paths::kernel_config_dir().join("kernel.lock")
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
