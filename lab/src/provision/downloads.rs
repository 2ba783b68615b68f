//! Guest-side downloads: the static busybox, through the private apt.

use crate::provision::apt::PrivateApt;
use crate::support::fs::sha256_file;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The guest's static arm64 busybox (Debian's busybox-static), downloaded once through the
/// private apt and unpacked into the cache.
pub fn busybox(cache: &Path) -> Result<PathBuf> {
    let downloads = cache.join("downloads");
    let deb = match rootfs::busybox_deb_path(&downloads) {
        Ok(d) => d,
        Err(_) => {
            let apt = PrivateApt::new(cache);
            apt.update()?;
            apt.download("busybox-static:arm64", &downloads)?
        }
    };
    let out = cache.join("busybox").join(&sha256_file(&deb)?[..16]);
    if let Some(bin) = ["bin/busybox", "usr/bin/busybox"].iter().map(|r| out.join(r)).find(|p| p.is_file()) {
        return Ok(bin);
    }
    let rel = crate::support::fs::publish_dir(&out, |tmp| {
        let bin = rootfs::extract_busybox(&deb, tmp)?;
        Ok(bin.strip_prefix(tmp)?.to_path_buf())
    })?;
    Ok(out.join(rel))
}
