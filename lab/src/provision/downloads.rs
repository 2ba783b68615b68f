//! Guest-side downloads: the static busybox, through the private apt.

use crate::provision::apt::PrivateApt;
use crate::support::artifact::{self, Kind, Reuse};
use crate::support::fs::sha256_file;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Where the package puts it: older packages ship bin/busybox, merged-/usr ones usr/bin/busybox.
const BINARIES: [&str; 2] = ["bin/busybox", "usr/bin/busybox"];

/// The guest's static arm64 busybox (Debian's busybox-static), downloaded once through the
/// private apt and unpacked into the cache (recorded there, checked on every reuse).
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
    let out = Kind::Busybox.root(cache).join(&sha256_file(&deb)?[..16]);
    if out.exists() && artifact::reuse(Kind::Busybox, &out)? == Reuse::Use {
        if let Some(bin) = BINARIES.iter().map(|r| out.join(r)).find(|p| p.is_file()) {
            crate::support::process::mark_used(&out);
            return Ok(bin);
        }
    }
    let rel = crate::support::fs::publish_dir(&out, |tmp| {
        let bin = rootfs::extract_busybox(&deb, tmp)?;
        artifact::seal(tmp)?;
        Ok(bin.strip_prefix(tmp)?.to_path_buf())
    })?;
    Ok(out.join(rel))
}
