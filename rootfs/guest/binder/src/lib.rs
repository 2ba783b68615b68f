//! Userspace for the Linux binder driver, used by every guest test and benchmark:
//!
//! - [`uapi`]: the structs, ioctl numbers and BC_*/BR_* codes of
//!   `include/uapi/linux/android/binder.h` (checked against the pinned header in the tests);
//! - [`protocol`]: encoding of the command stream and decoding of the return stream;
//! - [`parcel`]: transaction payloads with embedded objects (binders, handles, fds);
//! - [`Device`]: one open binder fd with its receive mapping, shared by the threads of a
//!   process, and its ioctls;
//! - [`Binder`]: the per-thread protocol state (the driver keeps a transaction stack and a
//!   looper state per thread) with calls, replies, nested calls, refcounts and death
//!   notifications;
//! - [`looper::Looper`]: a small thread pool serving incoming transactions;
//! - [`pool::ThreadPool`]: libbinder's thread pool (max threads 15, loopers spawned on
//!   BR_SPAWN_LOOPER), as every AOSP binder process runs it;
//! - [`sm::ServiceManager`]: a context manager on handle 0 with a name registry.
//!
//! ```no_run
//! let mut b = binder::Binder::open("/dev/binderfs/binder")?;
//! assert_eq!(b.version()?, binder::uapi::BINDER_CURRENT_PROTOCOL_VERSION);
//! let reply = b.transact(0, 1, b"ping", false)?;
//! # Ok::<(), binder::Error>(())
//! ```

pub mod looper;
pub mod parcel;
pub mod pool;
pub mod protocol;
pub mod sm;
pub mod testkit;
pub mod uapi;

use parcel::{Object, ObjectError, Parcel, ParcelReader};
use protocol::{Command, DecodeError, Return, TransactionData, WriteBuf};
use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uapi::*;

/// Android's default mapping size (1 MiB minus two pages).
pub const DEFAULT_MAP_SIZE: usize = 1024 * 1024 - 2 * 4096;
/// The default binder device of the lab guest.
pub const DEFAULT_DEVICE: &str = "/dev/binderfs/binder";
const READ_BUF_SIZE: usize = 512;
/// How many unclaimed notifications a [`Binder`] keeps (oldest dropped first).
const MAX_EVENTS: usize = 4096;

#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// BR_DEAD_REPLY: the target is gone (or no context manager yet for handle 0).
    DeadReply,
    /// BR_FAILED_REPLY: the driver rejected the transaction.
    FailedReply,
    /// BR_FROZEN_REPLY: the target process is frozen.
    FrozenReply,
    /// BR_ERROR with its error code.
    Driver(i32),
    /// The peer replied with TF_STATUS_CODE and this status.
    Status(i32),
    Decode(DecodeError),
    Object(ObjectError),
    Protocol(String),
    /// Nothing arrived within the caller's timeout.
    Timeout,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "binder I/O: {e}"),
            Error::DeadReply => f.write_str("BR_DEAD_REPLY"),
            Error::FailedReply => f.write_str("BR_FAILED_REPLY"),
            Error::FrozenReply => f.write_str("BR_FROZEN_REPLY"),
            Error::Driver(e) => write!(f, "BR_ERROR {e}"),
            Error::Status(s) => write!(f, "status reply {s}"),
            Error::Decode(e) => write!(f, "{e}"),
            Error::Object(e) => write!(f, "{e}"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
            Error::Timeout => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::Decode(e)
    }
}

impl From<ObjectError> for Error {
    fn from(e: ObjectError) -> Self {
        Error::Object(e)
    }
}

impl From<parcel::ShortRead> for Error {
    fn from(e: parcel::ShortRead) -> Self {
        Error::Protocol(e.to_string())
    }
}

impl Error {
    /// The errno of an I/O error (ioctl failure), if that is what this is.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

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

/// A transaction or reply received from the driver, copied out of the mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Incoming {
    pub target: u64,
    pub cookie: u64,
    pub code: u32,
    pub flags: u32,
    pub sender_pid: i32,
    pub sender_euid: u32,
    pub data: Vec<u8>,
    pub offsets: Vec<u64>,
    /// Address of the buffer in the receive mapping (for BC_FREE_BUFFER when kept).
    pub buffer: u64,
}

impl Incoming {
    pub fn is_oneway(&self) -> bool {
        self.flags & TF_ONE_WAY != 0
    }

    pub fn reader(&self) -> ParcelReader<'_> {
        ParcelReader::new(&self.data)
    }

    /// The objects at the offsets the driver reported.
    pub fn objects(&self) -> Result<Vec<Object>> {
        parcel::objects_at(&self.data, &self.offsets)
            .into_iter()
            .map(|r| r.map(|(_, o)| o).map_err(Error::from))
            .collect()
    }

    /// The handle of the first (strong or weak) handle object.
    pub fn first_handle(&self) -> Result<u32> {
        self.objects()?
            .into_iter()
            .find_map(|o| match o {
                Object::Handle { handle, .. } => Some(handle),
                _ => None,
            })
            .ok_or_else(|| Error::Protocol("no handle object in the payload".into()))
    }
}

/// What a handler answers to an incoming transaction.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub parcel: Parcel,
    /// Reply with TF_STATUS_CODE and this status instead of `parcel`.
    pub status: Option<i32>,
    /// Extra BC_REPLY flags (e.g. TF_CLEAR_BUF).
    pub flags: u32,
    /// Do not free the incoming buffer: the handler frees it later with BC_FREE_BUFFER.
    pub keep_buffer: bool,
}

impl Reply {
    pub fn parcel(p: Parcel) -> Reply {
        Reply { parcel: p, ..Default::default() }
    }
    pub fn bytes(b: &[u8]) -> Reply {
        Reply::parcel(Parcel::from_bytes(b))
    }
    pub fn empty() -> Reply {
        Reply::default()
    }
    pub fn status(code: i32) -> Reply {
        Reply { status: Some(code), ..Default::default() }
    }
    pub fn keep_buffer(mut self) -> Reply {
        self.keep_buffer = true;
        self
    }
}

impl From<Vec<u8>> for Reply {
    fn from(v: Vec<u8>) -> Reply {
        Reply::parcel(Parcel::from_bytes(&v))
    }
}

/// Shared record of the notifications a [`Binder`] received (refcount requests for its
/// nodes, death notifications, ...), for tests that watch another thread's server.
pub type EventLog = Arc<Mutex<Vec<Return>>>;

/// Handler of incoming transactions (servers and nested calls).
pub type Handler<'a> = dyn FnMut(&mut Binder, &Incoming) -> Reply + 'a;

/// Options of [`Binder::call_with`].
#[derive(Clone, Debug, Default)]
pub struct CallOpts {
    /// Transaction flags (TF_ONE_WAY, TF_ACCEPT_FDS, TF_CLEAR_BUF, ...).
    pub flags: u32,
    /// Keep the reply buffer (free it with [`Binder::free_buffer`]).
    pub keep_buffer: bool,
    /// Give up (Error::Timeout) if nothing arrives for this long.
    pub timeout: Option<Duration>,
}

/// The per-thread side of a binder device: command queue, return stream, and what the
/// driver expects from this thread. Dereferences to its [`Device`].
pub struct Binder {
    dev: Arc<Device>,
    /// Commands not yet handed to the driver.
    out: WriteBuf,
    /// Returns read from the driver and not yet consumed.
    inbox: Vec<u8>,
    inbox_pos: usize,
    /// Returns set aside while waiting for something else.
    deferred: VecDeque<Return>,
    /// BR_TRANSACTION_COMPLETE still owed for sent oneway transactions and replies.
    pending_complete: usize,
    /// Notifications not yet claimed by [`Binder::wait_event`] / [`Binder::take_events`].
    events: VecDeque<Return>,
    event_log: Option<EventLog>,
    /// Answer BR_DEAD_BINDER with BC_DEAD_BINDER_DONE right away (default true).
    pub auto_dead_binder_done: bool,
    /// BR_SPAWN_LOOPER returns not yet claimed by [`Binder::take_spawn_requests`].
    spawn_requests: u32,
}

impl Deref for Binder {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.dev
    }
}

impl Binder {
    /// Opens a binder device (e.g. `/dev/binderfs/binder`) and maps its receive buffer.
    pub fn open(path: impl AsRef<Path>) -> Result<Binder> {
        Ok(Self::from_device(Device::open(path)?))
    }

    pub fn open_with_map_size(path: impl AsRef<Path>, map_size: usize) -> Result<Binder> {
        Self::open_with(path, &OpenOptions { map_size, ..Default::default() })
    }

    pub fn open_with(path: impl AsRef<Path>, opts: &OpenOptions) -> Result<Binder> {
        Ok(Self::from_device(Device::open_with(path, opts)?))
    }

    /// A handle for the calling thread on a device shared with other threads.
    pub fn from_device(dev: Arc<Device>) -> Binder {
        Binder {
            dev,
            out: WriteBuf::new(),
            inbox: Vec::with_capacity(READ_BUF_SIZE),
            inbox_pos: 0,
            deferred: VecDeque::new(),
            pending_complete: 0,
            events: VecDeque::new(),
            event_log: None,
            auto_dead_binder_done: true,
            spawn_requests: 0,
        }
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Also append every notification to `log`.
    pub fn set_event_log(&mut self, log: EventLog) {
        self.event_log = Some(log);
    }

    /// Queues a command; it goes to the driver with the next read or [`Binder::flush`].
    /// Commands that point at user memory (transactions) must stay valid until then.
    pub fn queue(&mut self, cmd: Command) {
        self.out.push(cmd);
    }

    /// Sends queued commands without reading. Stops early (leaving the rest queued for
    /// the next read) if the driver takes nothing: it does that while it holds an error
    /// return for this thread.
    pub fn flush(&mut self) -> Result<()> {
        while !self.out.is_empty() {
            let r = {
                let mut bwr = binder_write_read {
                    write_size: self.out.len() as u64,
                    write_buffer: self.out.as_bytes().as_ptr() as u64,
                    ..Default::default()
                };
                let r = self.dev.write_read_raw(&mut bwr);
                self.out.consume(bwr.write_consumed as usize);
                r.map(|_| bwr.write_consumed)
            };
            match r {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    // Whatever is left may point at memory that is about to go away.
                    self.out.clear();
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Commands still queued (not yet consumed by the driver).
    pub fn queued_bytes(&self) -> usize {
        self.out.len()
    }

    fn decode_inbox(&mut self) -> Result<Option<Return>> {
        if self.inbox_pos >= self.inbox.len() {
            return Ok(None);
        }
        match Return::decode(&self.inbox[self.inbox_pos..]) {
            Ok((ret, rest)) => {
                self.inbox_pos = self.inbox.len() - rest.len();
                Ok(Some(ret))
            }
            Err(e) => {
                self.inbox.clear();
                self.inbox_pos = 0;
                Err(e.into())
            }
        }
    }

    /// Next return from the driver, sending queued commands first. Blocks (unless the
    /// device is non-blocking, then EAGAIN) until the driver has something.
    pub fn next_return(&mut self) -> Result<Return> {
        if let Some(r) = self.deferred.pop_front() {
            return Ok(r);
        }
        loop {
            if let Some(r) = self.decode_inbox()? {
                return Ok(r);
            }
            self.inbox.resize(READ_BUF_SIZE, 0);
            self.inbox_pos = 0;
            let mut bwr = binder_write_read {
                write_size: self.out.len() as u64,
                write_consumed: 0,
                write_buffer: self.out.as_bytes().as_ptr() as u64,
                read_size: self.inbox.len() as u64,
                read_consumed: 0,
                read_buffer: self.inbox.as_mut_ptr() as u64,
            };
            let r = self.dev.write_read_raw(&mut bwr);
            self.out.consume(bwr.write_consumed as usize);
            if let Err(e) = r {
                self.inbox.clear();
                self.out.clear();
                return Err(e.into());
            }
            self.inbox.truncate(bwr.read_consumed as usize);
        }
    }

    /// Like [`Binder::next_return`] but gives up after `timeout` (poll(2) first). With
    /// several looper threads on one device another thread may take the work between the
    /// poll and the read; the read then waits for the next work item.
    pub fn next_return_timeout(&mut self, timeout: Duration) -> Result<Option<Return>> {
        if let Some(r) = self.deferred.pop_front() {
            return Ok(Some(r));
        }
        if let Some(r) = self.decode_inbox()? {
            return Ok(Some(r));
        }
        self.flush()?;
        if self.out.is_empty() && !self.dev.poll_readable(timeout)? {
            return Ok(None);
        }
        self.next_return().map(Some)
    }

    fn record(&mut self, r: Return) {
        if let Some(log) = &self.event_log {
            if let Ok(mut l) = log.lock() {
                l.push(r);
            }
        }
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(r);
    }

    /// Answers driver bookkeeping returns and records notifications; gives back the ones
    /// the caller must handle (transactions, replies, completions, errors).
    fn handle_common(&mut self, r: Return) -> Result<Option<Return>> {
        match r {
            Return::Noop | Return::Ok | Return::Finished => {}
            Return::SpawnLooper => self.spawn_requests += 1,
            Return::IncRefs(pc) => {
                self.out.push(Command::IncRefsDone(pc));
                self.record(r);
            }
            Return::Acquire(pc) => {
                self.out.push(Command::AcquireDone(pc));
                self.record(r);
            }
            Return::DeadBinder(cookie) => {
                if self.auto_dead_binder_done {
                    self.out.push(Command::DeadBinderDone(cookie));
                }
                self.record(r);
            }
            Return::FrozenBinder { cookie, .. } => {
                self.out.push(Command::FreezeNotificationDone(cookie));
                self.record(r);
            }
            Return::Release(_)
            | Return::DecRefs(_)
            | Return::ClearDeathNotificationDone(_)
            | Return::ClearFreezeNotificationDone(_)
            | Return::AttemptAcquire { .. }
            | Return::AcquireResult(_) => self.record(r),
            Return::Error(e) => return Err(Error::Driver(e)),
            other => return Ok(Some(other)),
        }
        Ok(None)
    }

    fn complete_one(&mut self) {
        self.pending_complete = self.pending_complete.saturating_sub(1);
    }

    /// Copies a received transaction or reply out of the mapping.
    fn incoming(&self, t: &TransactionData) -> Result<Incoming> {
        let data = self.dev.buffer_bytes(t.buffer, t.data_size)?;
        let offsets = if t.offsets_size > 0 {
            parcel::decode_offsets(&self.dev.buffer_bytes(t.offsets, t.offsets_size)?)
        } else {
            Vec::new()
        };
        Ok(Incoming {
            target: t.target,
            cookie: t.cookie,
            code: t.code,
            flags: t.flags,
            sender_pid: t.sender_pid,
            sender_euid: t.sender_euid,
            data,
            offsets,
            buffer: t.buffer,
        })
    }

    /// The transaction data of `p` for `handle` (it points into `p`: keep `p` alive until
    /// the driver has consumed the command).
    pub fn tx_data(handle: u32, code: u32, flags: u32, p: &Parcel) -> TransactionData {
        TransactionData {
            target: handle as u64,
            code,
            flags,
            data_size: p.data().len() as u64,
            offsets_size: (p.offsets().len() * 8) as u64,
            buffer: p.data().as_ptr() as u64,
            offsets: p.offsets().as_ptr() as u64,
            ..Default::default()
        }
    }

    fn next_for_call(&mut self, timeout: Option<Duration>) -> Result<Return> {
        match timeout {
            None => self.next_return(),
            Some(t) => self.next_return_timeout(t)?.ok_or(Error::Timeout),
        }
    }

    /// Sends a transaction to `handle` and, unless it is oneway, waits for the reply.
    /// Incoming calls that arrive meanwhile on this thread (nested calls, A→B→A) go to
    /// `nested`, or are refused with a status reply without one. Returns the reply
    /// (freed from the mapping unless `opts.keep_buffer`); a TF_STATUS_CODE reply is
    /// `Error::Status`. Oneway calls return `None` once the driver accepted them.
    pub fn call_with(
        &mut self,
        handle: u32,
        code: u32,
        p: &Parcel,
        opts: &CallOpts,
        mut nested: Option<&mut Handler<'_>>,
    ) -> Result<Option<Incoming>> {
        // `p` outlives the call, which does not end before the driver consumed the command
        // (a reply or error needs it sent first); on ioctl errors the queue is cleared.
        self.call_raw(Self::tx_data(handle, code, opts.flags, p), opts, nested.take())
    }

    /// [`Binder::call_with`] with a hand-built `binder_transaction_data`: any data and
    /// offsets pointers and sizes (bad-input tests, the fuzzer). The driver only reads
    /// through them; memory they point at must stay valid until this returns.
    pub fn call_raw(
        &mut self,
        tr: TransactionData,
        opts: &CallOpts,
        mut nested: Option<&mut Handler<'_>>,
    ) -> Result<Option<Incoming>> {
        let oneway = tr.flags & TF_ONE_WAY != 0;
        self.out.push(Command::Transaction(tr));
        if oneway {
            self.pending_complete += 1;
        }
        let r = self.wait_reply(oneway, opts, &mut nested);
        if r.is_err() {
            self.out.clear();
        }
        r
    }

    fn wait_reply(
        &mut self,
        oneway: bool,
        opts: &CallOpts,
        nested: &mut Option<&mut Handler<'_>>,
    ) -> Result<Option<Incoming>> {
        loop {
            let r = self.next_for_call(opts.timeout)?;
            let Some(r) = self.handle_common(r)? else {
                continue;
            };
            match r {
                Return::TransactionComplete | Return::OnewaySpamSuspect | Return::TransactionPendingFrozen => {
                    if oneway {
                        self.complete_one();
                        if self.pending_complete == 0 {
                            self.flush()?;
                            return Ok(None);
                        }
                    }
                }
                Return::Reply(t) => {
                    let inc = self.incoming(&t);
                    if !opts.keep_buffer || inc.is_err() {
                        self.out.push(Command::FreeBuffer(t.buffer));
                    }
                    self.flush()?;
                    let inc = inc?;
                    if t.flags & TF_STATUS_CODE != 0 {
                        if opts.keep_buffer {
                            self.free_buffer(t.buffer)?;
                        }
                        let status = inc.data.get(..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap()));
                        return Err(Error::Status(status.unwrap_or(i32::MIN)));
                    }
                    return Ok(Some(inc));
                }
                Return::DeadReply | Return::FailedReply | Return::FrozenReply => {
                    if oneway {
                        self.complete_one();
                    }
                    self.flush()?;
                    return Err(match r {
                        Return::DeadReply => Error::DeadReply,
                        Return::FailedReply => Error::FailedReply,
                        _ => Error::FrozenReply,
                    });
                }
                Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } => match nested {
                    Some(h) => {
                        self.dispatch(&t, &mut **h)?;
                    }
                    None => self.refuse(&t)?,
                },
                other => {
                    return Err(Error::Protocol(format!("unexpected {other:?} while waiting for a reply")));
                }
            }
        }
    }

    /// Synchronous call with a payload; the reply buffer is freed.
    pub fn call(&mut self, handle: u32, code: u32, p: &Parcel) -> Result<Incoming> {
        self.call_with(handle, code, p, &CallOpts::default(), None)?
            .ok_or_else(|| Error::Protocol("no reply to a synchronous call".into()))
    }

    /// Synchronous call whose reply buffer stays mapped until [`Binder::free_buffer`].
    pub fn call_keep(&mut self, handle: u32, code: u32, p: &Parcel, flags: u32) -> Result<Incoming> {
        let opts = CallOpts { flags, keep_buffer: true, timeout: None };
        self.call_with(handle, code, p, &opts, None)?.ok_or_else(|| Error::Protocol("no reply".into()))
    }

    /// Oneway call: returns once the driver queued it.
    pub fn send_oneway(&mut self, handle: u32, code: u32, p: &Parcel) -> Result<()> {
        self.call_with(handle, code, p, &CallOpts { flags: TF_ONE_WAY, ..Default::default() }, None).map(|_| ())
    }

    /// Sends a transaction to `handle` and, unless `oneway`, waits for the reply and
    /// returns its data (the reply buffer is freed). A oneway call returns an empty Vec
    /// once the driver accepted it.
    pub fn transact(&mut self, handle: u32, code: u32, data: &[u8], oneway: bool) -> Result<Vec<u8>> {
        let p = Parcel::from_bytes(data);
        let opts = CallOpts { flags: if oneway { TF_ONE_WAY } else { 0 }, ..Default::default() };
        Ok(self.call_with(handle, code, &p, &opts, None)?.map(|i| i.data).unwrap_or_default())
    }

    /// Frees an incoming transaction and, if it waits for a reply, answers with a
    /// status code (-EPROTO) so the sender does not hang.
    fn refuse(&mut self, t: &TransactionData) -> Result<()> {
        self.out.push(Command::FreeBuffer(t.buffer));
        if t.flags & TF_ONE_WAY == 0 {
            self.send_reply(&Reply::status(-libc::EPROTO))?;
        } else {
            self.flush()?;
        }
        Ok(())
    }

    /// Runs `handler` on a received transaction, frees its buffer (unless the handler
    /// keeps it) and sends the reply (nothing for oneway calls).
    fn dispatch(&mut self, t: &TransactionData, handler: &mut Handler<'_>) -> Result<Incoming> {
        let inc = match self.incoming(t) {
            Ok(i) => i,
            Err(e) => {
                self.refuse(t)?;
                return Err(e);
            }
        };
        let reply = handler(self, &inc);
        if !reply.keep_buffer {
            self.out.push(Command::FreeBuffer(t.buffer));
        }
        if inc.is_oneway() {
            self.flush()?;
        } else {
            self.send_reply(&reply)?;
        }
        Ok(inc)
    }

    /// BC_ENTER_LOOPER: marks this thread as a looper so it receives incoming calls (and
    /// process-wide work such as death notifications).
    pub fn enter_looper(&mut self) -> Result<()> {
        self.out.push(Command::EnterLooper);
        self.flush()
    }

    /// BC_EXIT_LOOPER.
    pub fn exit_looper(&mut self) -> Result<()> {
        self.out.push(Command::ExitLooper);
        self.flush()
    }

    /// One step of a server loop: waits (up to `timeout`, or forever) for one return and
    /// handles it. Returns the transaction it served, if any.
    pub fn serve_step(&mut self, timeout: Option<Duration>, handler: &mut Handler<'_>) -> Result<Option<Incoming>> {
        let r = match timeout {
            None => self.next_return()?,
            Some(t) => match self.next_return_timeout(t)? {
                Some(r) => r,
                None => return Ok(None),
            },
        };
        let Some(r) = self.handle_common(r)? else {
            self.flush()?;
            return Ok(None);
        };
        match r {
            Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } => self.dispatch(&t, handler).map(Some),
            Return::TransactionComplete | Return::OnewaySpamSuspect | Return::TransactionPendingFrozen => {
                self.complete_one();
                Ok(None)
            }
            Return::Reply(t) => {
                self.out.push(Command::FreeBuffer(t.buffer));
                self.flush()?;
                Err(Error::Protocol("BR_REPLY outside a call".into()))
            }
            Return::FailedReply => Err(Error::FailedReply),
            Return::DeadReply => Err(Error::DeadReply),
            Return::FrozenReply => Err(Error::FrozenReply),
            other => Err(Error::Protocol(format!("unexpected {other:?} in a server loop"))),
        }
    }

    /// Waits for one incoming transaction, hands it to `handler` and sends the returned
    /// bytes as the reply (nothing for oneway calls). Call [`Binder::enter_looper`] once
    /// first.
    pub fn serve_one<F>(&mut self, mut handler: F) -> Result<Incoming>
    where
        F: FnMut(&Incoming) -> Vec<u8>,
    {
        let mut h = |_: &mut Binder, inc: &Incoming| Reply::from(handler(inc));
        loop {
            if let Some(inc) = self.serve_step(None, &mut h)? {
                return Ok(inc);
            }
        }
    }

    /// Serves with a full handler (payload objects, status replies, nested calls) until
    /// an error.
    pub fn serve_with(&mut self, handler: &mut Handler<'_>) -> Error {
        loop {
            if let Err(e) = self.serve_step(None, handler) {
                return e;
            }
        }
    }

    /// Serves incoming transactions until an error.
    pub fn serve<F>(&mut self, mut handler: F) -> Error
    where
        F: FnMut(&Incoming) -> Vec<u8>,
    {
        loop {
            if let Err(e) = self.serve_one(&mut handler) {
                return e;
            }
        }
    }

    /// BC_REPLY (or a status reply), then waits until the driver delivered it.
    fn send_reply(&mut self, reply: &Reply) -> Result<()> {
        let status_bytes;
        let tr = match reply.status {
            Some(s) => {
                status_bytes = s.to_ne_bytes();
                TransactionData {
                    flags: TF_STATUS_CODE | reply.flags,
                    data_size: 4,
                    buffer: status_bytes.as_ptr() as u64,
                    ..Default::default()
                }
            }
            None => Self::tx_data(0, 0, reply.flags, &reply.parcel),
        };
        self.out.push(Command::Reply(tr));
        self.pending_complete += 1;
        // The reply's memory (`reply`, `status_bytes`) lives until this loop ends, which
        // is after the driver consumed the command; errors clear the queue.
        let r = self.wait_reply_complete();
        if r.is_err() {
            self.out.clear();
        }
        r
    }

    fn wait_reply_complete(&mut self) -> Result<()> {
        loop {
            let r = self.next_return()?;
            let Some(r) = self.handle_common(r)? else {
                continue;
            };
            match r {
                Return::TransactionComplete => {
                    self.complete_one();
                    if self.pending_complete == 0 {
                        return self.flush();
                    }
                }
                Return::FailedReply | Return::DeadReply => {
                    self.complete_one();
                    self.flush()?;
                    return Err(if r == Return::DeadReply { Error::DeadReply } else { Error::FailedReply });
                }
                // Keep anything else (a new call, our own reply) for whoever waits next.
                other => self.deferred.push_back(other),
            }
        }
    }

    /// BC_FREE_BUFFER for a buffer kept with [`Reply::keep_buffer`] or
    /// [`CallOpts::keep_buffer`].
    pub fn free_buffer(&mut self, buffer: u64) -> Result<()> {
        self.out.push(Command::FreeBuffer(buffer));
        self.flush()
    }

    fn send(&mut self, cmd: Command) -> Result<()> {
        self.out.push(cmd);
        self.flush()
    }

    /// BC_INCREFS: take a weak reference on `handle`.
    pub fn increfs(&mut self, handle: u32) -> Result<()> {
        self.send(Command::IncRefs(handle))
    }
    /// BC_ACQUIRE: take a strong reference on `handle`.
    pub fn acquire(&mut self, handle: u32) -> Result<()> {
        self.send(Command::Acquire(handle))
    }
    /// BC_RELEASE: drop a strong reference.
    pub fn release(&mut self, handle: u32) -> Result<()> {
        self.send(Command::Release(handle))
    }
    /// BC_DECREFS: drop a weak reference.
    pub fn decrefs(&mut self, handle: u32) -> Result<()> {
        self.send(Command::DecRefs(handle))
    }
    pub fn request_death(&mut self, handle: u32, cookie: u64) -> Result<()> {
        self.send(Command::RequestDeathNotification { handle, cookie })
    }
    pub fn clear_death(&mut self, handle: u32, cookie: u64) -> Result<()> {
        self.send(Command::ClearDeathNotification { handle, cookie })
    }
    pub fn dead_binder_done(&mut self, cookie: u64) -> Result<()> {
        self.send(Command::DeadBinderDone(cookie))
    }

    /// BR_SPAWN_LOOPER returns seen since the last call (the driver asks the process for
    /// another looper; [`pool::ThreadPool`] answers them).
    pub fn take_spawn_requests(&mut self) -> u32 {
        std::mem::take(&mut self.spawn_requests)
    }

    /// Takes the recorded notifications.
    pub fn take_events(&mut self) -> Vec<Return> {
        self.events.drain(..).collect()
    }

    /// Reads returns (answering bookkeeping, refusing incoming calls) until a recorded
    /// notification matches `pred`, or `timeout` passes (`None`). Needs a looper thread
    /// for process-wide work (death notifications).
    pub fn wait_event(&mut self, timeout: Duration, mut pred: impl FnMut(&Return) -> bool) -> Result<Option<Return>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.events.iter().position(&mut pred) {
                return Ok(self.events.remove(i));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.flush()?;
                return Ok(None);
            }
            let Some(r) = self.next_return_timeout(left)? else {
                continue;
            };
            let Some(r) = self.handle_common(r)? else {
                continue;
            };
            match r {
                Return::TransactionComplete | Return::OnewaySpamSuspect => self.complete_one(),
                Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } => self.refuse(&t)?,
                other => return Err(Error::Protocol(format!("unexpected {other:?} while waiting for an event"))),
            }
        }
    }
}

impl Drop for Binder {
    fn drop(&mut self) {
        // Best effort: hand back freed buffers and ref acks before the thread goes.
        let _ = self.flush();
    }
}

/// gettid(2).
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests;
