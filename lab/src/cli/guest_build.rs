//! `lab guest-build` (`cargo make guest-build --manifest PATH`): a user's crate, built like the
//! guest programs, into an overlay directory.

use anyhow::Result;
use std::path::{Path, PathBuf};

/// The executables go into OUT/bin, ready for `--overlay OUT`.
pub fn run(manifest: &Path, out: Option<PathBuf>) -> Result<()> {
    let exes = rootfs::build_user_crate(manifest)?;
    let out = match out {
        Some(o) => o,
        None => exes[0].ancestors().find(|a| a.ends_with("target")).unwrap_or(Path::new(".")).join("lab-overlay"),
    };
    std::fs::create_dir_all(out.join("bin"))?;
    for e in &exes {
        let to = out.join("bin").join(e.file_name().unwrap_or_default());
        std::fs::copy(e, &to)?;
        println!("{} (static aarch64)", to.display());
    }
    // From anywhere: `cargo make` works only inside the checkout, lab.sh everywhere.
    let lab = crate::support::paths::repo().join("lab.sh");
    println!("boot with it: {} run --overlay {} --plan YOUR_PLAN.toml", lab.display(), out.display());
    Ok(())
}
