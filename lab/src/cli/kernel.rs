//! `lab kernel`, `kernel-lock` and the driver tree commands (`driver-tree`, `driver-export`,
//! `driver-reset`).

use crate::kbuild::{flavor, kernel, pin, repro, tree};
use crate::support::paths;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub fn build(flavor: &str, extras: &kernel::Extras) -> Result<()> {
    let b = kernel::build_with(flavor, extras)?;
    println!("{}", b.image().display());
    Ok(())
}

/// Builds the flavor, then again in a scratch cache (by default under target/lab/repro/), and
/// compares the Images. The default scratch goes when they match; a named one, or one whose
/// Image differs, stays (for a look, or for an incremental rerun).
pub fn check_reproducible(
    flavor: &str,
    kconfig: &crate::cli::args::KconfigArgs,
    scratch: Option<PathBuf>,
) -> Result<()> {
    let keep = scratch.is_some();
    let scratch = scratch.unwrap_or_else(|| paths::repo().join("target/lab/repro").join(flavor));
    // Checked before the first build: a bad --scratch must not cost a kernel build.
    let scratch = repro::scratch_dir(&paths::cache(), &scratch)?;
    let a = kernel::build_with(flavor, &kconfig.extras())?;
    repro::scratch_cache(&paths::cache(), &scratch)?;
    crate::support::progress::note(format!(
        "building {flavor} again in {} (its own tree, O= and rust-src: a full build the first time)",
        scratch.display()
    ));
    let b = repro::build_in(&scratch, flavor, &kconfig.to_args())?;
    println!("{}", repro::verdict(&a.image(), &b)?);
    if keep {
        return Ok(());
    }
    std::fs::remove_dir_all(&scratch).with_context(|| format!("removing {}", scratch.display()))
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
