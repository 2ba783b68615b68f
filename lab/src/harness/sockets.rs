//! Where a run's unix sockets (QMP, gdbstub) live. A socket's path must fit `sun_path`
//! (108 bytes with its NUL), and a run directory under a deep checkout (CI's, or a
//! `--board PATH` run's) can be longer than that. Such runs put their sockets in a short
//! private directory under the system's temporary directory, linked from the run directory.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// `sun_path`'s 108 bytes less the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// The directory that holds a run's sockets; a private one, and its links in the run
/// directory, are removed when the last clone drops.
#[derive(Clone, Debug)]
pub struct SocketDir {
    dir: PathBuf,
    private: Option<Arc<Private>>,
}

#[derive(Debug)]
struct Private {
    _tmp: tempfile::TempDir,
    /// Where the links go.
    run_dir: PathBuf,
    links: Mutex<Vec<PathBuf>>,
}

impl Drop for Private {
    fn drop(&mut self) {
        // A dangling link would break copying or archiving the run directory.
        for l in self.links.get_mut().map(std::mem::take).unwrap_or_default() {
            let _ = std::fs::remove_file(l);
        }
    }
}

impl SocketDir {
    /// The run directory itself if `longest` (the longest socket name used) fits there,
    /// else a private directory under `tmp`.
    pub fn for_run(run_dir: &Path, longest: &str, tmp: &Path) -> Result<SocketDir> {
        if fits(&run_dir.join(longest)) {
            return Ok(SocketDir { dir: run_dir.to_path_buf(), private: None });
        }
        // TempDir makes it 0700 with a random name: no other user can connect or squat.
        let t = tempfile::Builder::new().prefix("lab-").tempdir_in(tmp).with_context(|| {
            format!("creating a socket directory under {} (set TMPDIR to a short, writable directory)", tmp.display())
        })?;
        if !fits(&t.path().join(longest)) {
            anyhow::bail!(
                "{} is too long for a unix socket path ({MAX_SOCKET_PATH} bytes at most): set TMPDIR to a shorter directory",
                t.path().join(longest).display()
            );
        }
        let dir = t.path().to_path_buf();
        let private = Private { _tmp: t, run_dir: run_dir.to_path_buf(), links: Mutex::new(vec![]) };
        Ok(SocketDir { dir, private: Some(Arc::new(private)) })
    }

    /// The socket `name`'s path.
    pub fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Links a private socket from the run directory, so a user finds it where the run's
    /// other files are. Called when QEMU starts, for the sockets it is given.
    pub fn link(&self, socket: &Path) -> Result<()> {
        let Some(private) = &self.private else { return Ok(()) };
        let link = private.run_dir.join(socket.file_name().context("a socket path has a file name")?);
        std::os::unix::fs::symlink(socket, &link)
            .with_context(|| format!("linking {} to {}", link.display(), socket.display()))?;
        private.links.lock().map_err(|_| anyhow::anyhow!("socket links poisoned"))?.push(link);
        Ok(())
    }
}

fn fits(p: &Path) -> bool {
    p.as_os_str().len() <= MAX_SOCKET_PATH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_directory_holds_its_own_sockets() {
        let run = tempfile::tempdir().unwrap();
        let s = SocketDir::for_run(run.path(), "qmp.sock", &std::env::temp_dir()).unwrap();
        assert_eq!(s.socket("qmp.sock"), run.path().join("qmp.sock"));
        s.link(&s.socket("qmp.sock")).unwrap();
        assert!(std::fs::symlink_metadata(run.path().join("qmp.sock")).is_err(), "no link needed");
    }

    #[test]
    fn a_long_run_directory_gets_a_short_private_one_linked_from_it() {
        let base = tempfile::tempdir().unwrap();
        let run = base.path().join("x".repeat(120));
        std::fs::create_dir(&run).unwrap();
        let s = SocketDir::for_run(&run, "qmp.sock", &std::env::temp_dir()).unwrap();
        let sock = s.socket("qmp.sock");
        assert!(sock.as_os_str().len() <= MAX_SOCKET_PATH, "{}", sock.display());
        s.link(&sock).unwrap();
        assert_eq!(std::fs::read_link(run.join("qmp.sock")).unwrap(), sock);
        // A real listener binds there (the kernel, not our arithmetic, is the judge).
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let private = sock.parent().unwrap().to_path_buf();
        let clone = s.clone();
        drop(s);
        assert!(private.exists(), "a clone (the VM's) keeps it");
        drop(clone);
        assert!(!private.exists(), "the private directory goes with the last clone");
        assert!(std::fs::symlink_metadata(run.join("qmp.sock")).is_err(), "and so does its link");
    }

    #[test]
    fn a_long_tmpdir_is_refused_with_the_fix() {
        let base = tempfile::tempdir().unwrap();
        let long = base.path().join("y".repeat(110));
        std::fs::create_dir(&long).unwrap();
        let e = SocketDir::for_run(&long, "qmp.sock", &long).unwrap_err().to_string();
        assert!(e.contains("set TMPDIR"), "{e}");
    }
}
