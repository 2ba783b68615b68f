//! The syscall helpers the guest crates share (the library, the test and benchmark kits,
//! init): [`cvt`] for libc's -1-and-errno results, [`pipe`], [`fork`], and in [`child`] a
//! forked helper process with a line channel to its parent.

pub mod child;

use std::io::{self, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A libc call's result: `Err` with errno when it returned a negative value.
pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Waits until `fd` is readable (true) or `timeout` passes (false); EINTR is retried.
pub fn wait_readable(fd: RawFd, timeout: std::time::Duration) -> io::Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: p is one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(60_000) as libc::c_int) };
        match cvt(r) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(0) if !left.is_zero() => continue,
            Ok(n) => return Ok(n > 0),
        }
    }
}

/// Reads once into `buf` (EINTR retried); the byte count, 0 at EOF.
pub fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is a valid writable buffer of buf.len() bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A pipe (read end, write end), close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks; the child runs `f` and exits with what it returns (without the parent's exit
/// handlers), the parent gets the child's pid. Output is flushed before the fork and when
/// `f` returns, so nothing buffered is written twice or lost. In the parent, `f` is dropped
/// unrun (with what it owns).
///
/// Call it while the process is single-threaded: the child runs arbitrary Rust code.
pub fn fork<F: FnOnce() -> i32>(f: F) -> io::Result<libc::pid_t> {
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    // SAFETY: the documented precondition: the caller is single-threaded, so the child
    // may run arbitrary code.
    let pid = cvt(unsafe { libc::fork() })?;
    if pid == 0 {
        let code = f();
        let _ = io::stdout().flush();
        let _ = io::stderr().flush();
        // SAFETY: _exit ends the child without running the parent's exit handlers twice.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}

/// Exit status as a number: the exit code, or 128 + signal.
pub fn decode_status(st: libc::c_int) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        -1
    }
}

#[cfg(test)]
mod tests {
    use super::child::fork_child;
    use std::time::{Duration, Instant};

    const WAIT: Duration = Duration::from_secs(20);

    #[test]
    fn a_forked_child_talks_over_its_channel_and_exits_with_its_code() {
        let mut c = fork_child(|chan| {
            // The parent sends the number of its read end: the child must not hold it.
            let Ok(Some(fd)) = chan.recv(WAIT) else { return 3 };
            // SAFETY: F_GETFD only asks whether the number is an open fd.
            let open = unsafe { libc::fcntl(fd.parse().unwrap(), libc::F_GETFD) } >= 0;
            let _ = chan.send(if open { "parent's end open" } else { "parent's end closed" });
            7
        })
        .unwrap();
        let fd = c.chan.rx_fd().to_string();
        c.chan.send(&fd).unwrap();
        // EOF right after the child's exit: the parent holds no copy of the child's ends.
        let t0 = Instant::now();
        assert_eq!(c.chan.read_to_end(WAIT), ["parent's end closed"]);
        assert!(t0.elapsed() < WAIT / 2, "no EOF: {:?}", t0.elapsed());
        assert_eq!(c.wait_timeout(WAIT), Some(7));
    }

    #[test]
    fn fork_runs_the_closure_only_in_the_child() {
        let pid = super::fork(|| 5).unwrap();
        let mut st = 0;
        // SAFETY: st is a valid out-pointer; pid is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert_eq!(super::decode_status(st), 5);
    }
}
