//! Host-side end-to-end tests live in tests/tests/.

use std::path::PathBuf;

/// The `lab` binary the end-to-end tests run: `$LAB_BIN`, else the workspace's
/// `target/debug/lab` (`cargo make test` builds it before the end-to-end tests).
pub fn lab_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LAB_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("debug/lab");
    assert!(bin.is_file(), "{} is missing: run `cargo build -p lab` (or set LAB_BIN)", bin.display());
    bin
}
