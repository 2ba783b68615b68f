//! `lab kernel`, `kernel-lock` and the driver tree commands (`driver-tree`, `driver-export`,
//! `driver-reset`).

use crate::kbuild::{flavor, kernel, pin, tree};
use crate::support::paths;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn build(flavor: &str, extras: &kernel::Extras) -> Result<()> {
    let b = kernel::build_with(flavor, extras)?;
    println!("{}", b.image().display());
    Ok(())
}

pub fn lock() -> Result<()> {
    println!("{}", pin::kernel_lock(&paths::cache())?);
    Ok(())
}

pub fn driver_tree() -> Result<()> {
    let (t, _tree_lock) = prepared_tree(&paths::cache())?;
    // A build of a flavor with an extra series may have left it on top; without unexported
    // work on it, go back to rust-driver/ alone (cheap: the common prefix stays).
    if !tree::has_work(&t)? {
        tree::sync_series(&t, &flavor::load("perf")?.stack()?)?;
    }
    println!("{}", t.display());
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
    tree::reset(&t, &flavor::load("perf")?.stack()?)?;
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
