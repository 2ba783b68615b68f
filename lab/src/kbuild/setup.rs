//! The whole provisioning a kernel build needs: the toolchain (stage `provision`), the
//! pinned kernel source, the unpacked tree, and the kernel's own check of the Rust tools.

use crate::kbuild::pin::{ensure_kernel_deb, Lock};
use crate::kbuild::tree;
use crate::provision::toolchain::{self, Toolchain};
use crate::support::fs::write_atomic;
use anyhow::{bail, Result};
use std::path::Path;

/// Full setup. Returns the resolved toolchain.
pub fn ensure(cache: &Path) -> Result<Toolchain> {
    let lock = Lock::load(&Lock::path())?;
    // The kernel source's download and unpack overlap the bindgen build.
    let (tc, tree) = toolchain::ensure_tools_with(cache, || {
        let deb = ensure_kernel_deb(cache, &lock)?;
        tree::ensure_unpacked(cache, &lock, &deb)
    })?;
    rust_available(&tc, &tree)?;
    Ok(tc)
}

/// Fast path for build commands: probe, and run the full setup only when something is missing.
pub fn toolchain(cache: &Path) -> Result<Toolchain> {
    let (missing, _) = toolchain::missing_packages();
    match Toolchain::probe(cache) {
        Some(tc) if missing.is_empty() => Ok(tc),
        _ => ensure(cache),
    }
}

/// `make rustavailable`, run once per toolchain fingerprint.
fn rust_available(tc: &Toolchain, tree: &Path) -> Result<()> {
    let stamp = tc.cache.join("kernel/build/rustavailable.ok");
    let fp = tc.fingerprint()?;
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(fp.as_str()) {
        return Ok(());
    }
    let out = tc.cache.join("kernel/build/rustavailable");
    std::fs::create_dir_all(&out)?;
    let res = tc.make(tree, &out).arg("rustavailable").output()?;
    if !res.status.success() {
        bail!(
            "`make rustavailable` failed: the kernel rejects a Rust tool:\n{}{}\nrustc {}, bindgen {}, RUST_LIB_SRC {}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr),
            tc.rustc_version,
            tc.bindgen_bin_dir.display(),
            tc.rust_lib_src.display()
        );
    }
    crate::support::progress::note(format!("make rustavailable: Rust is available (rustc {})", tc.rustc_version));
    write_atomic(&stamp, fp.as_bytes())
}
