//! `lab setup`: everything a build needs, then a summary.

use crate::kbuild::setup;
use crate::support::paths;
use anyhow::Result;

pub fn run() -> Result<()> {
    let cache = paths::cache();
    let tc = setup::ensure(&cache)?;
    println!("setup complete; cache: {}", cache.display());
    print!("{}", tc.fingerprint()?);
    Ok(())
}
