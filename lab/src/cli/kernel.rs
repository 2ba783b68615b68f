//! `lab kernel`, `kernel-lock` and the driver tree commands (`driver-tree`, `driver-export`,
//! `driver-reset`).

use crate::kbuild::{kernel, pin, tree};
use crate::support::paths;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn build(flavor: &str) -> Result<()> {
    let b = kernel::build(flavor)?;
    println!("{}", b.image().display());
    Ok(())
}

pub fn lock() -> Result<()> {
    println!("{}", pin::kernel_lock(&paths::cache())?);
    Ok(())
}

pub fn driver_tree() -> Result<()> {
    println!("{}", prepared_tree(&paths::cache())?.0.display());
    Ok(())
}

pub fn driver_export() -> Result<()> {
    let names = tree::export(&prepared_tree(&paths::cache())?.0, &paths::driver_dir())?;
    println!("exported {} patch(es) to rust-driver/", names.len());
    for n in names {
        println!("  {n}");
    }
    Ok(())
}

pub fn driver_reset() -> Result<()> {
    let (t, _tree_lock) = prepared_tree(&paths::cache())?;
    tree::reset(&t, &tree::Series::load(&paths::driver_dir())?)?;
    println!("{} now carries exactly rust-driver/series", t.display());
    Ok(())
}

/// The unpacked kernel tree (unpacking it on first use), locked against other lab processes
/// while the caller holds the returned file.
fn prepared_tree(cache: &Path) -> Result<(PathBuf, std::fs::File)> {
    let lock = pin::Lock::load(&pin::Lock::path())?;
    let deb = pin::ensure_kernel_deb(cache, &lock)?;
    let t = tree::ensure_unpacked(cache, &lock, &deb)?;
    Ok((t, tree::lock(cache, "a driver-tree command")?))
}
