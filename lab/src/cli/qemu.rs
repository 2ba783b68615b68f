//! `lab qemu` and the QEMU tree commands (`qemu-tree`, `qemu-export`, `qemu-reset`), like the
//! driver tree's.

use crate::kbuild::{qemu, tree};
use crate::support::paths;
use anyhow::Result;

pub fn build() -> Result<()> {
    println!("{}", qemu::build()?.binary().display());
    Ok(())
}

pub fn tree() -> Result<()> {
    println!("{}", qemu::prepared_tree(&paths::cache())?.0.display());
    Ok(())
}

pub fn export() -> Result<()> {
    let (t, _lock) = qemu::unsynced_tree(&paths::cache())?;
    let names = tree::export_named(&t, &paths::qemu_dir(), qemu::NAMES, "cargo make qemu")?;
    println!("exported {} patch(es) to qemu/", names.len());
    for n in names {
        println!("  {n}");
    }
    Ok(())
}

pub fn reset() -> Result<()> {
    let (t, _lock) = qemu::unsynced_tree(&paths::cache())?;
    tree::reset_named(&t, std::slice::from_ref(&qemu::series()?), &qemu::NAMES)?;
    println!("{} now carries exactly qemu/series", t.display());
    Ok(())
}
