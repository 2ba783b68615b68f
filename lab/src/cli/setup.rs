//! `lab setup`: everything a build needs, then a summary.

use crate::kbuild::setup;
use crate::support::paths;
use anyhow::Result;

/// `lava`: also LAVA from Debian (lava-dispatcher, lava-server, lavacli): see ensure_lava.
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
