//! kcidb-io, KernelCI's KCIDB schema validator, in a private venv in the cache: the nightly
//! validates its kcidb.json with it. Installed by `lab setup` like the rest of the toolchain.

use crate::support::process::{output, sh};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use xshell::cmd;

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
    // One installer at a time: two setups at once removed each other's half-made venv.
    std::fs::create_dir_all(venv.parent().context("the venv has a parent")?)?;
    let lockf = std::fs::File::create(venv.with_extension("lock"))?;
    lockf.lock().context("locking the kcidb-io install")?;
    if ready.is_file() && py.is_file() {
        return Ok(py);
    }
    crate::support::progress::note(format!("installing {KCIDB_IO} into {}", venv.display()));
    let _ = std::fs::remove_dir_all(&venv);
    let sh = sh();
    let pip = venv.join("bin/pip");
    let installed = output(&mut cmd!(sh, "python3 -m venv {venv}").into())
        .and_then(|_| output(&mut cmd!(sh, "{pip} install -q {KCIDB_IO}").into()))
        .and_then(|_| output(&mut cmd!(sh, "{py} -c 'import kcidb_io'").into()));
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

#[cfg(test)]
mod tests {
    /// Installs kcidb-io into a fresh directory (run by hand: `--ignored`; needs PyPI).
    #[test]
    #[ignore = "downloads kcidb-io from PyPI"]
    fn installs_into_a_fresh_cache() {
        let d = tempfile::tempdir().unwrap();
        let py = super::ensure(d.path()).unwrap();
        assert!(py.is_file());
        assert_eq!(super::ensure(d.path()).unwrap(), py, "the second call reuses the venv");
    }
}
