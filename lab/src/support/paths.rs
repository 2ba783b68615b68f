//! Where things live: the repository (inputs) and the cache (everything derived).

use std::path::{Path, PathBuf};

/// Root of the repository: the workspace that built this binary.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("lab/ sits in the workspace").to_path_buf()
}

/// `git describe --always --dirty` of the repository (for `--version` and the nightly's
/// records), or `unknown` outside a git checkout.
pub fn source_commit() -> String {
    std::process::Command::new("git")
        .current_dir(repo())
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The lab's cache: `$BINDER_LAB_CACHE`, else `$XDG_CACHE_HOME/binder-lab`, else
/// `~/.cache/binder-lab`. It outlives clones, so CI reuses kernel builds between runs.
pub fn cache() -> PathBuf {
    if let Some(p) = std::env::var_os("BINDER_LAB_CACHE") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache"));
    base.join("binder-lab")
}

pub fn kernel_config_dir() -> PathBuf {
    repo().join("kernel-config")
}

pub fn driver_dir() -> PathBuf {
    repo().join("rust-driver")
}

/// The lab QEMU's pin and patch series.
pub fn qemu_dir() -> PathBuf {
    repo().join("qemu")
}

pub fn board_dir() -> PathBuf {
    repo().join("board")
}

/// Per-run output directories (console logs, results, manifests).
pub fn runs_dir() -> PathBuf {
    repo().join("target").join("lab").join("runs")
}

/// Makes a version string safe for a path component (`7.2.12-1~bpo13+1` -> `7.2.12-1_bpo13_1`):
/// kbuild refuses some characters in source and object paths.
pub fn path_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn path_safe_versions() {
        assert_eq!(super::path_safe("7.2.12-1~bpo13+1"), "7.2.12-1_bpo13_1");
    }
}
