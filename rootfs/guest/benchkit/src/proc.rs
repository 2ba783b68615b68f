//! Forked helper processes and the pipes the parent steers them with.

use std::fs::File;
use std::io::{Read, Write};

fn pipe() -> std::io::Result<(File, File)> {
    let (r, w) = syskit::pipe()?;
    Ok((File::from(r), File::from(w)))
}

/// One end of a bidirectional pipe pair (like binderThroughputTest's `Pipe`).
pub struct Chan {
    r: File,
    w: File,
}

impl Chan {
    /// Two connected ends.
    pub fn pair() -> std::io::Result<(Chan, Chan)> {
        let (r1, w1) = pipe()?;
        let (r2, w2) = pipe()?;
        Ok((Chan { r: r1, w: w2 }, Chan { r: r2, w: w1 }))
    }

    pub fn signal(&mut self) -> std::io::Result<()> {
        self.w.write_all(&[1])
    }

    /// Waits for one signal; an error when the other end went away.
    pub fn wait(&mut self) -> std::io::Result<()> {
        let mut b = [0u8];
        self.r.read_exact(&mut b)
    }

    pub fn send_u64s(&mut self, v: &[u64]) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(8 * (v.len() + 1));
        buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
        for x in v {
            buf.extend_from_slice(&x.to_le_bytes());
        }
        self.w.write_all(&buf)
    }

    pub fn recv_u64s(&mut self) -> std::io::Result<Vec<u64>> {
        let mut n = [0u8; 8];
        self.r.read_exact(&mut n)?;
        let mut buf = vec![0u8; 8 * u64::from_le_bytes(n) as usize];
        self.r.read_exact(&mut buf)?;
        Ok(buf.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
}

/// A forked child running `f`; its exit code is what `f` returns.
pub struct Child {
    pub pid: libc::pid_t,
}

/// Forks; the child runs `f` and exits with its result. Call only while the process is
/// single-threaded.
pub fn fork<F: FnOnce() -> i32>(f: F) -> std::io::Result<Child> {
    Ok(Child { pid: syskit::fork(f)? })
}

impl Child {
    /// Waits for the child; its exit code, or 128 + signal.
    pub fn wait(&mut self) -> i32 {
        let mut st = 0;
        // SAFETY: reaping our own child into a valid status word.
        let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
        self.pid = 0;
        if r < 0 {
            return -1;
        }
        syskit::decode_status(st)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.pid > 0 {
            // SAFETY: signalling our own child, reaped right after.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.wait();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}
