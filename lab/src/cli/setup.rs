//! `lab setup`: everything a build needs, then a summary.

use crate::kbuild::setup;
use crate::support::paths;
use anyhow::Result;

/// `lava`: also Debian's lava-dispatcher, for `lava-run` of `lab lava-job`'s jobs.
pub fn run(lava: bool) -> Result<()> {
    let cache = paths::cache();
    let tc = setup::ensure(&cache)?;
    if lava {
        crate::provision::toolchain::ensure_lava(&cache)?;
    }
    println!("setup complete; cache: {}", cache.display());
    print!("{}", tc.fingerprint()?);
    Ok(())
}
