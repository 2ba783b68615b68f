//! The process side of binder: one open device fd and its receive mapping ([`Device`]),
//! shared by the threads of a process, and the ioctls on it.

use crate::error::{Error, Result};
use crate::uapi::*;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use syskit::cvt;

/// Android's default mapping size (1 MiB minus two pages).
pub const DEFAULT_MAP_SIZE: usize = 1024 * 1024 - 2 * 4096;
/// The default binder device of the lab guest.
pub const DEFAULT_DEVICE: &str = "/dev/binderfs/binder";

/// How to open a binder device.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Size of the receive mapping; 0 maps nothing (the process can send, not receive).
    pub map_size: usize,
    /// O_NONBLOCK: BINDER_WRITE_READ never waits for work (EAGAIN instead).
    pub nonblocking: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { map_size: DEFAULT_MAP_SIZE, nonblocking: false }
    }
}

/// One open binder fd and its receive mapping: one binder "process" in the driver. Share
/// it between threads with `Arc`; each thread talks to the driver through its own
/// [`Binder`].
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    /// The device's file name (`binder` for `/dev/binderfs/binder`), as libbinder names
    /// its threads after it.
    name: String,
    /// Start of the read-only receive mapping (0 if none).
    map_addr: usize,
    map_len: usize,
}

impl Device {
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Device>> {
        Self::open_with(path, &OpenOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Arc<Device>> {
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| Error::Protocol("path contains NUL".into()))?;
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC;
        if opts.nonblocking {
            flags |= libc::O_NONBLOCK;
        }
        // SAFETY: cpath is a valid NUL-terminated string for the duration of the call.
        let raw = cvt(unsafe { libc::open(cpath.as_ptr(), flags) })?;
        // SAFETY: raw is a freshly opened fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let name = path.as_ref().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut dev = Device { fd, name, map_addr: 0, map_len: 0 };
        if opts.map_size > 0 {
            // SAFETY: a fresh read-only private mapping of the binder fd; the kernel picks
            // the address. The driver refuses writable mappings, hence PROT_READ.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    opts.map_size,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_NORESERVE,
                    dev.fd.as_raw_fd(),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(io::Error::last_os_error().into());
            }
            dev.map_addr = map as usize;
            dev.map_len = opts.map_size;
        }
        Ok(Arc::new(dev))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The device's file name, e.g. `binder`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// (start address, length) of the receive mapping.
    pub fn mapping(&self) -> (u64, usize) {
        (self.map_addr as u64, self.map_len)
    }

    /// Any ioctl on the binder fd, with EINTR retried.
    ///
    /// # Safety
    ///
    /// The driver reads and writes `_IOC_SIZE(request)` bytes at `arg`: it must point at
    /// memory the caller owns and may have overwritten, or at memory the kernel cannot
    /// access (to provoke EFAULT). Never pass a pointer into live Rust objects of another
    /// size or type.
    pub unsafe fn ioctl_raw(&self, request: u32, arg: *mut libc::c_void) -> io::Result<libc::c_int> {
        loop {
            // SAFETY: forwarded to the caller (see above).
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, arg) };
            match cvt(r) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Typed ioctl. Only called with the request whose argument type is `T` (the uapi
    /// defines the request from `size_of::<T>()`, and the tests pin those sizes).
    fn ioctl<T>(&self, request: u32, arg: &mut T) -> io::Result<libc::c_int> {
        debug_assert_eq!(ioc_size(request), std::mem::size_of::<T>());
        // SAFETY: arg is a live, exclusively borrowed T, and the request's size is
        // size_of::<T>(), so the driver stays inside it.
        unsafe { self.ioctl_raw(request, arg as *mut T as *mut libc::c_void) }
    }

    /// BINDER_VERSION: the driver's protocol version (8 for 64-bit).
    pub fn version(&self) -> Result<i32> {
        let mut v = binder_version::default();
        self.ioctl(BINDER_VERSION, &mut v)?;
        Ok(v.protocol_version)
    }

    pub fn set_max_threads(&self, n: u32) -> Result<()> {
        let mut n = n;
        self.ioctl(BINDER_SET_MAX_THREADS, &mut n)?;
        Ok(())
    }

    /// BINDER_SET_CONTEXT_MGR: this process becomes handle 0 of its binder context.
    pub fn become_context_manager(&self) -> Result<()> {
        let mut zero: i32 = 0;
        self.ioctl(BINDER_SET_CONTEXT_MGR, &mut zero)?;
        Ok(())
    }

    /// BINDER_SET_CONTEXT_MGR_EXT: as above, with the manager node's flags (e.g.
    /// FLAT_BINDER_FLAG_ACCEPTS_FDS), ptr and cookie.
    pub fn become_context_manager_ext(&self, flags: u32, ptr: u64, cookie: u64) -> Result<()> {
        let mut obj = flat_binder_object {
            hdr: binder_object_header { type_: BINDER_TYPE_BINDER },
            flags,
            u: flat_binder_object_u { binder: ptr },
            cookie,
        };
        self.ioctl(BINDER_SET_CONTEXT_MGR_EXT, &mut obj)?;
        Ok(())
    }

    /// [`Device::become_context_manager`], retrying EBUSY until `wait` has passed: the
    /// previous manager's process may still be in its (asynchronous) release.
    pub fn become_context_manager_retry(&self, flags: Option<u32>, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        loop {
            let r = match flags {
                None => self.become_context_manager(),
                Some(f) => self.become_context_manager_ext(f, 0, 0),
            };
            match r {
                Err(e) if e.errno() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                other => return other,
            }
        }
    }

    /// BINDER_THREAD_EXIT: drops the calling thread's driver state.
    pub fn thread_exit(&self) -> Result<()> {
        let mut zero: i32 = 0;
        self.ioctl(BINDER_THREAD_EXIT, &mut zero)?;
        Ok(())
    }

    /// BINDER_FREEZE: freezes (`enable`) or thaws the binder processes of `pid`. Freezing
    /// waits up to `timeout_ms` for their outstanding transactions (EAGAIN after that).
    pub fn freeze(&self, pid: i32, enable: bool, timeout_ms: u32) -> Result<()> {
        let mut v = binder_freeze_info { pid: pid as u32, enable: enable as u32, timeout_ms };
        self.ioctl(BINDER_FREEZE, &mut v)?;
        Ok(())
    }

    pub fn enable_oneway_spam_detection(&self, on: bool) -> Result<()> {
        let mut v: u32 = on as u32;
        self.ioctl(BINDER_ENABLE_ONEWAY_SPAM_DETECTION, &mut v)?;
        Ok(())
    }

    /// BINDER_GET_NODE_DEBUG_INFO: the first node of this process with ptr > `after`
    /// (`ptr` 0 in the result: none).
    pub fn node_debug_info(&self, after: u64) -> Result<binder_node_debug_info> {
        let mut v = binder_node_debug_info { ptr: after, ..Default::default() };
        self.ioctl(BINDER_GET_NODE_DEBUG_INFO, &mut v)?;
        Ok(v)
    }

    /// All nodes of this process as (ptr, cookie, has_strong_ref, has_weak_ref).
    pub fn nodes(&self) -> Result<Vec<binder_node_debug_info>> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let n = self.node_debug_info(after)?;
            if n.ptr == 0 {
                return Ok(out);
            }
            after = n.ptr;
            out.push(n);
        }
    }

    /// BINDER_GET_NODE_INFO_FOR_REF (context manager only): the node's counts.
    pub fn node_info_for_ref(&self, handle: u32) -> Result<binder_node_info_for_ref> {
        let mut v = binder_node_info_for_ref { handle, ..Default::default() };
        self.ioctl(BINDER_GET_NODE_INFO_FOR_REF, &mut v)?;
        Ok(v)
    }

    /// BINDER_GET_EXTENDED_ERROR: the calling thread's last transaction error (and clears it).
    pub fn extended_error(&self) -> Result<binder_extended_error> {
        let mut v = binder_extended_error::default();
        self.ioctl(BINDER_GET_EXTENDED_ERROR, &mut v)?;
        Ok(v)
    }

    /// O_NONBLOCK on the file: BINDER_WRITE_READ returns EAGAIN instead of waiting. It is
    /// a property of the open file, so it applies to all threads using this device.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: fcntl on an fd we own; only the O_NONBLOCK flag changes.
        unsafe {
            let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
            let fl = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
            cvt(libc::fcntl(fd, libc::F_SETFL, fl))?;
        }
        Ok(())
    }

    /// One BINDER_WRITE_READ. Returns (bytes of `write` consumed, bytes of `read` filled).
    /// With a non-empty `read` it blocks until the driver has something to return (unless
    /// the device is non-blocking).
    pub fn write_read(&self, write: &[u8], read: &mut [u8]) -> io::Result<(usize, usize)> {
        let mut bwr = binder_write_read {
            write_size: write.len() as u64,
            write_consumed: 0,
            write_buffer: write.as_ptr() as u64,
            read_size: read.len() as u64,
            read_consumed: 0,
            read_buffer: read.as_mut_ptr() as u64,
        };
        self.write_read_raw(&mut bwr).map(|_| (bwr.write_consumed as usize, bwr.read_consumed as usize))
    }

    /// BINDER_WRITE_READ with a caller-built descriptor. The driver reads `write_size`
    /// bytes at `write_buffer` and writes up to `read_size` bytes at `read_buffer`; on an
    /// error the consumed counts are still updated.
    ///
    /// This is safe only because the buffers are the caller's own memory or memory the
    /// kernel cannot access (EFAULT); callers that build descriptors by hand (bad-input
    /// tests, the fuzzer) point them at scratch memory or unmapped ranges.
    pub fn write_read_raw(&self, bwr: &mut binder_write_read) -> io::Result<()> {
        self.ioctl(BINDER_WRITE_READ, bwr).map(|_| ())
    }

    /// Copies `len` bytes at `ptr` out of the receive mapping, checking the range.
    pub fn buffer_bytes(&self, ptr: u64, len: u64) -> Result<Vec<u8>> {
        let start = self.map_addr as u64;
        let end = start + self.map_len as u64;
        if self.map_len == 0 || ptr < start || len > end - start || ptr > end - len {
            return Err(Error::Protocol(format!("buffer {ptr:#x}+{len} outside the mapping")));
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: [ptr, ptr+len) lies inside our live read-only mapping (checked above);
        // the driver filled it before returning the transaction, and it stays put until
        // we send BC_FREE_BUFFER for it.
        let s = unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) };
        Ok(s.to_vec())
    }

    /// Waits until a read would return something for the calling thread (poll(2)).
    pub fn poll_readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        loop {
            // SAFETY: p is one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            match cvt(r) {
                Ok(n) => return Ok(n > 0 && p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Wakes the threads of this process that wait in BINDER_WRITE_READ: closing any fd
    /// of the file calls the driver's flush, which makes waiting loopers return.
    pub fn kick(&self) -> io::Result<()> {
        // SAFETY: dup of an fd we own; the copy is closed right away.
        let d = cvt(unsafe { libc::dup(self.fd.as_raw_fd()) })?;
        // SAFETY: d is our fresh duplicate.
        unsafe { libc::close(d) };
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.map_len > 0 {
            // SAFETY: map_addr/map_len are the mapping created in open_with and nothing
            // borrows it (buffer_bytes copies out).
            unsafe { libc::munmap(self.map_addr as *mut libc::c_void, self.map_len) };
        }
    }
}
