//! Forked helper processes with a line channel to the parent, for tests that need
//! separate processes (a server that exits, fd passing, stress clients).
//!
//! Fork while the calling process is single-threaded: the child runs arbitrary Rust code.
//! Children get SIGKILL when the forking thread dies (PR_SET_PDEATHSIG), so a killed case
//! takes its helpers with it.

use crate::{decode_status, fork, pipe};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// One end of a bidirectional line channel.
pub struct Chan {
    rx: OwnedFd,
    tx: OwnedFd,
    buf: Vec<u8>,
}

impl Chan {
    /// Sends one line (no newline inside `msg`).
    pub fn send(&mut self, msg: &str) -> io::Result<()> {
        let mut line = msg.replace('\n', " ");
        line.push('\n');
        let mut f = std::mem::ManuallyDrop::new(
            // SAFETY: tx is a valid fd we own; ManuallyDrop keeps File from closing it.
            unsafe { std::fs::File::from_raw_fd(self.tx.as_raw_fd()) },
        );
        f.write_all(line.as_bytes())
    }

    /// Next line, or `None` after `timeout`. EOF (the peer is gone) is an error.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(String::from_utf8_lossy(&line[..i]).into_owned()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !crate::wait_readable(self.rx.as_raw_fd(), left)? {
                return Ok(None);
            }
            let mut tmp = [0u8; 4096];
            let n = crate::read_some(self.rx.as_raw_fd(), &mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the channel"));
            }
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Waits for exactly `want` (or fails with what came instead).
    pub fn expect(&mut self, want: &str, timeout: Duration) -> Result<(), String> {
        match self.recv(timeout) {
            Ok(Some(l)) if l == want => Ok(()),
            Ok(Some(l)) => Err(format!("expected {want:?}, got {l:?}")),
            Ok(None) => Err(format!("no {want:?} within {timeout:?}")),
            Err(e) => Err(format!("waiting for {want:?}: {e}")),
        }
    }

    /// Everything until EOF (or `timeout`).
    pub fn read_to_end(&mut self, timeout: Duration) -> Vec<String> {
        let mut out = Vec::new();
        let deadline = Instant::now() + timeout;
        while let Ok(Some(l)) = self.recv(deadline.saturating_duration_since(Instant::now())) {
            out.push(l);
        }
        out
    }

    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }
}

/// A forked child process and the parent's end of its channel.
pub struct Child {
    pub pid: libc::pid_t,
    pub chan: Chan,
    status: Option<i32>,
}

/// Forks; the child runs `f` with its end of the channel and exits with its return value.
pub fn fork_child<F: FnOnce(&mut Chan) -> i32>(f: F) -> io::Result<Child> {
    let (p_rx, c_tx) = pipe()?;
    let (c_rx, p_tx) = pipe()?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let parent_ends = [p_rx.as_raw_fd(), p_tx.as_raw_fd()];
    // The closure owns the child's ends: the parent closes them when fork drops it unrun.
    let pid = fork(move || {
        // SAFETY: the child's copies of the parent's ends, which nothing in the child uses
        // (their owners stay with the parent's code, which the child never runs again).
        parent_ends.iter().for_each(|&fd| unsafe {
            libc::close(fd);
        });
        // SAFETY: prctl/getppid have no memory preconditions.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(120);
            }
        }
        let mut chan = Chan { rx: c_rx, tx: c_tx, buf: Vec::new() };
        let code = f(&mut chan);
        drop(chan);
        code
    })?;
    Ok(Child { pid, chan: Chan { rx: p_rx, tx: p_tx, buf: Vec::new() }, status: None })
}

impl Child {
    /// The exit status once the child ended (see [`decode_status`]), waiting up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.status.is_some() {
                return self.status;
            }
            let mut st = 0;
            // SAFETY: st is a valid out-pointer; pid is our child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
            if r == self.pid {
                self.status = Some(decode_status(st));
                continue;
            }
            if r < 0 || Instant::now() >= deadline {
                return self.status;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: kill on our own, not yet reaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }

    /// Kills the child if it is still running and reaps it.
    pub fn finish(&mut self) -> Option<i32> {
        if self.wait_timeout(Duration::ZERO).is_none() {
            self.kill();
            return self.wait_timeout(Duration::from_secs(10));
        }
        self.status
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.finish();
    }
}
