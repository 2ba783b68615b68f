//! Thin wrappers over the syscalls PID 1 needs.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use syskit::cvt;

pub fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in built-in strings")
}

/// Console log line. Never panics (eprintln! would, and a panic in PID 1 powers off).
pub fn log(msg: &str) {
    let _ = writeln!(io::stderr(), "lab-init: {msg}");
}

/// A raw line on the console, no prefix.
pub fn console_line(line: &str) {
    let mut e = io::stderr().lock();
    let _ = e.write_all(line.as_bytes());
    if !line.ends_with('\n') {
        let _ = e.write_all(b"\n");
    }
}

pub fn mkdir_p(path: &str) {
    // Errors (EEXIST, read-only sysfs dirs) surface later as a mount error.
    let _ = std::fs::create_dir_all(path);
}

/// mount(2); an already mounted target (EBUSY) counts as success.
pub fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: Option<&str>) -> io::Result<()> {
    let (s, t, f) = (cstr(src), cstr(target), cstr(fstype));
    let d = data.map(cstr);
    let dptr = d.as_ref().map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void);
    // SAFETY: all pointers are valid NUL-terminated strings (or null data) that live
    // across the call.
    let r = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), flags, dptr) };
    match cvt(r) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
        other => other.map(|_| ()),
    }
}

pub fn is_pid1() -> bool {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() == 1 }
}

/// Makes sure fds 0-2 are open, on /dev/console, so children inherit a usable stdio
/// and nothing else we open lands on 0-2.
pub fn ensure_stdio() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            continue;
        }
        let path = cstr("/dev/console");
        // SAFETY: path is a valid C string.
        let new = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
        if new >= 0 && new != fd {
            // SAFETY: both fds are valid; dup2 replaces the closed slot.
            unsafe {
                libc::dup2(new, fd);
                libc::close(new);
            }
        }
    }
}

pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; zeroed is a valid initial value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer for uname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::from("unknown");
    }
    // SAFETY: the kernel NUL-terminates release within the array.
    unsafe { CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned()
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own; only the O_NONBLOCK flag changes.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// write_all on a non-blocking fd, giving up after `timeout` (a stalled result port
/// must not hang PID 1).
pub fn write_all_timeout(fd: RawFd, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    while !buf.is_empty() {
        // SAFETY: buf is a valid readable slice of buf.len() bytes.
        let n = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) };
        if n >= 0 {
            buf = &buf[n as usize..];
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out"));
                }
                let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: p is one valid pollfd.
                unsafe { libc::poll(&mut p, 1, left.as_millis().min(1000) as libc::c_int) };
            }
            _ => return Err(e),
        }
    }
    Ok(())
}

/// Non-blocking waitpid(-1): the next exited child, if any.
pub fn reap_one() -> Option<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid, status))
}

pub fn kill_group(pgid: libc::pid_t) {
    // SAFETY: kill has no memory preconditions; a gone group gives ESRCH.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Syncs and powers off. Outside PID 1 (tests on a workstation) it just exits.
pub fn poweroff(code: i32) -> ! {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    if !is_pid1() {
        std::process::exit(code);
    }
    // SAFETY: reboot(2) with a valid command; we are PID 1 with CAP_SYS_BOOT.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
    log(&format!("power off failed: {}; trying restart", io::Error::last_os_error()));
    // SAFETY: as above; with QEMU -no-reboot a restart also ends the VM.
    unsafe { libc::reboot(libc::RB_AUTOBOOT) };
    log("restart failed too; idling (PID 1 must not exit)");
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}
