//! kcidb-io, KernelCI's KCIDB schema validator, in a private venv in the cache: the nightly
//! validates its kcidb.json with it. Installed by `lab setup` like the rest of the toolchain.

use crate::support::process::output;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned validator (PyPI).
pub const KCIDB_IO: &str = "kcidb-io==141";

fn venv(cache: &Path) -> PathBuf {
    cache.join("tools").join(KCIDB_IO.replace("==", "-"))
}

/// The venv's python with kcidb-io importable, installing it on first use.
pub fn ensure(cache: &Path) -> Result<PathBuf> {
    let venv = venv(cache);
    let py = venv.join("bin/python3");
    let ready = venv.join(".complete");
    if ready.is_file() && py.is_file() {
        return Ok(py);
    }
    crate::support::progress::note(format!("installing {KCIDB_IO} into {}", venv.display()));
    let _ = std::fs::remove_dir_all(&venv);
    let installed = output(Command::new("python3").arg("-m").arg("venv").arg(&venv))
        .and_then(|_| output(Command::new(venv.join("bin/pip")).args(["install", "-q", KCIDB_IO])))
        .and_then(|_| output(Command::new(&py).args(["-c", "import kcidb_io"])));
    if let Err(e) = installed {
        let _ = std::fs::remove_dir_all(&venv);
        return Err(e).with_context(|| {
            format!(
                "could not install {KCIDB_IO} (the nightly validates kcidb.json with it) into {}; \
                 it needs python3-venv and access to PyPI",
                venv.display()
            )
        });
    }
    std::fs::write(&ready, KCIDB_IO)?;
    Ok(py)
}
