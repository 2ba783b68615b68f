//! Minimal userspace for the Linux binder driver: the uapi ([`uapi`]), the command and
//! return stream codec ([`protocol`]) and a single-threaded device handle ([`Binder`]).
//!
//! ```no_run
//! let mut b = binder::Binder::open("/dev/binderfs/binder")?;
//! assert_eq!(b.version()?, binder::uapi::BINDER_CURRENT_PROTOCOL_VERSION);
//! let reply = b.transact(0, 1, b"ping", false)?;
//! # Ok::<(), binder::Error>(())
//! ```

pub mod protocol;
pub mod uapi;

use protocol::{Command, DecodeError, Return, TransactionData, WriteBuf};
use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use uapi::*;

/// Android's default mapping size (1 MiB minus two pages).
pub const DEFAULT_MAP_SIZE: usize = 1024 * 1024 - 2 * 4096;
const READ_BUF_SIZE: usize = 256;

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
    Protocol(String),
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
            Error::Protocol(m) => write!(f, "protocol: {m}"),
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

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A transaction received by [`Binder::serve_one`], copied out of the mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    pub target: u64,
    pub cookie: u64,
    pub code: u32,
    pub flags: u32,
    pub sender_pid: i32,
    pub sender_euid: u32,
    pub data: Vec<u8>,
}

/// An open binder device with its receive mapping. Use it from one thread: the driver
/// keeps per-thread state (looper, transaction stack).
pub struct Binder {
    fd: OwnedFd,
    map: *mut libc::c_void,
    map_len: usize,
    /// Commands not yet handed to the driver.
    out: WriteBuf,
    /// Returns read from the driver and not yet consumed.
    inbox: Vec<u8>,
    inbox_pos: usize,
    /// Returns set aside while waiting for something else.
    deferred: VecDeque<Return>,
    /// BR_TRANSACTION_COMPLETE still owed for sent transactions/replies.
    pending_complete: usize,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Binder {
    /// Opens a binder device (e.g. `/dev/binderfs/binder`) and maps its receive buffer.
    pub fn open(path: impl AsRef<Path>) -> Result<Binder> {
        Self::open_with_map_size(path, DEFAULT_MAP_SIZE)
    }

    pub fn open_with_map_size(path: impl AsRef<Path>, map_len: usize) -> Result<Binder> {
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| Error::Protocol("path contains NUL".into()))?;
        // SAFETY: cpath is a valid NUL-terminated string for the duration of the call.
        let raw = cvt(unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
        // SAFETY: raw is a freshly opened fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a fresh read-only private mapping of the binder fd; the kernel picks the
        // address. The driver refuses writable mappings, hence PROT_READ.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Binder {
            fd,
            map,
            map_len,
            out: WriteBuf::new(),
            inbox: Vec::with_capacity(READ_BUF_SIZE),
            inbox_pos: 0,
            deferred: VecDeque::new(),
            pending_complete: 0,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn ioctl<T>(&self, request: u32, arg: *mut T) -> io::Result<libc::c_int> {
        loop {
            // SAFETY: every caller passes the request code whose argument type is T and a
            // pointer to a live T; the driver reads/writes at most size_of::<T>() bytes.
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, arg) };
            match cvt(r) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
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

    /// BINDER_THREAD_EXIT: drops the calling thread's driver state.
    pub fn thread_exit(&self) -> Result<()> {
        let mut zero: i32 = 0;
        self.ioctl(BINDER_THREAD_EXIT, &mut zero)?;
        Ok(())
    }

    /// One BINDER_WRITE_READ. Returns (bytes of `write` consumed, bytes of `read` filled).
    /// With a non-empty `read` it blocks until the driver has something to return.
    pub fn write_read(&self, write: &[u8], read: &mut [u8]) -> Result<(usize, usize)> {
        let mut bwr = binder_write_read {
            write_size: write.len() as u64,
            write_consumed: 0,
            write_buffer: write.as_ptr() as u64,
            read_size: read.len() as u64,
            read_consumed: 0,
            read_buffer: read.as_mut_ptr() as u64,
        };
        self.ioctl(BINDER_WRITE_READ, &mut bwr)?;
        Ok((bwr.write_consumed as usize, bwr.read_consumed as usize))
    }

    /// Queues a command; it goes to the driver with the next read or [`Binder::flush`].
    /// Commands that point at user memory (transactions) must stay valid until then.
    pub fn queue(&mut self, cmd: Command) {
        self.out.push(cmd);
    }

    /// Sends all queued commands without reading.
    pub fn flush(&mut self) -> Result<()> {
        while !self.out.is_empty() {
            let (consumed, _) = self.write_read(self.out.as_bytes(), &mut [])?;
            if consumed == 0 {
                return Err(Error::Protocol("driver consumed no commands".into()));
            }
            self.out.consume(consumed);
        }
        Ok(())
    }

    /// Next return from the driver, sending queued commands first if it must block.
    pub fn next_return(&mut self) -> Result<Return> {
        if let Some(r) = self.deferred.pop_front() {
            return Ok(r);
        }
        while self.inbox_pos >= self.inbox.len() {
            self.inbox.resize(READ_BUF_SIZE, 0);
            self.inbox_pos = 0;
            let (consumed, filled) = {
                let mut bwr = binder_write_read {
                    write_size: self.out.len() as u64,
                    write_consumed: 0,
                    write_buffer: self.out.as_bytes().as_ptr() as u64,
                    read_size: self.inbox.len() as u64,
                    read_consumed: 0,
                    read_buffer: self.inbox.as_mut_ptr() as u64,
                };
                let r = self.ioctl(BINDER_WRITE_READ, &mut bwr);
                if let Err(e) = r {
                    self.inbox.clear();
                    return Err(e.into());
                }
                (bwr.write_consumed as usize, bwr.read_consumed as usize)
            };
            self.out.consume(consumed);
            self.inbox.truncate(filled);
        }
        let (ret, rest) = Return::decode(&self.inbox[self.inbox_pos..])?;
        self.inbox_pos = self.inbox.len() - rest.len();
        Ok(ret)
    }

    /// Copies `len` bytes at `ptr` out of the receive mapping, checking the range.
    pub fn buffer_bytes(&self, ptr: u64, len: u64) -> Result<Vec<u8>> {
        let start = self.map as u64;
        let end = start + self.map_len as u64;
        if ptr < start || len > end - start || ptr > end - len {
            return Err(Error::Protocol(format!("buffer {ptr:#x}+{len} outside the mapping")));
        }
        // SAFETY: [ptr, ptr+len) lies inside our live read-only mapping (checked above);
        // the driver filled it before returning the transaction, and it stays put until
        // we send BC_FREE_BUFFER for it.
        let s = unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) };
        Ok(s.to_vec())
    }

    /// Answers driver bookkeeping returns; gives back the ones the caller must handle.
    fn handle_common(&mut self, r: Return) -> Result<Option<Return>> {
        match r {
            Return::Noop | Return::SpawnLooper | Return::OnewaySpamSuspect | Return::Ok => {}
            Return::IncRefs(pc) => {
                self.out.push(Command::IncRefsDone(pc));
            }
            Return::Acquire(pc) => {
                self.out.push(Command::AcquireDone(pc));
            }
            Return::Release(_) | Return::DecRefs(_) => {}
            Return::DeadBinder(cookie) => {
                self.out.push(Command::DeadBinderDone(cookie));
            }
            Return::Error(e) => return Err(Error::Driver(e)),
            other => return Ok(Some(other)),
        }
        Ok(None)
    }

    fn complete_one(&mut self) {
        self.pending_complete = self.pending_complete.saturating_sub(1);
    }

    /// Sends a transaction to `handle` and, unless `oneway`, waits for the reply and
    /// returns its data (the reply buffer is freed). A oneway call returns an empty Vec
    /// once the driver accepted it.
    pub fn transact(&mut self, handle: u32, code: u32, data: &[u8], oneway: bool) -> Result<Vec<u8>> {
        let tr = TransactionData {
            target: handle as u64,
            code,
            flags: if oneway { TF_ONE_WAY } else { 0 },
            data_size: data.len() as u64,
            buffer: data.as_ptr() as u64,
            ..Default::default()
        };
        self.out.push(Command::Transaction(tr));
        self.pending_complete += 1;
        // `data` outlives this loop, and the loop does not end before the driver
        // consumed the command (a reply or error needs it sent first).
        loop {
            let r = self.next_return()?;
            let Some(r) = self.handle_common(r)? else {
                continue;
            };
            match r {
                Return::TransactionComplete => {
                    self.complete_one();
                    if oneway && self.pending_complete == 0 {
                        self.flush()?;
                        return Ok(Vec::new());
                    }
                }
                Return::TransactionPendingFrozen if oneway => {
                    self.complete_one();
                    self.flush()?;
                    return Ok(Vec::new());
                }
                Return::Reply(t) => {
                    let bytes = self.buffer_bytes(t.buffer, t.data_size);
                    self.out.push(Command::FreeBuffer(t.buffer));
                    self.flush()?;
                    let bytes = bytes?;
                    if t.flags & TF_STATUS_CODE != 0 {
                        let status = bytes.get(..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap()));
                        return Err(Error::Status(status.unwrap_or(i32::MIN)));
                    }
                    return Ok(bytes);
                }
                Return::DeadReply => {
                    self.complete_one();
                    self.flush()?;
                    return Err(Error::DeadReply);
                }
                Return::FailedReply => {
                    self.complete_one();
                    self.flush()?;
                    return Err(Error::FailedReply);
                }
                Return::FrozenReply => {
                    self.complete_one();
                    self.flush()?;
                    return Err(Error::FrozenReply);
                }
                Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } => {
                    // Nested incoming calls are not supported: refuse them.
                    self.refuse(&t)?;
                }
                other => {
                    return Err(Error::Protocol(format!("unexpected {other:?} while waiting for a reply")));
                }
            }
        }
    }

    /// Frees an incoming transaction and, if it waits for a reply, answers with a
    /// status code (-EPROTO-like) so the sender does not hang.
    fn refuse(&mut self, t: &TransactionData) -> Result<()> {
        self.out.push(Command::FreeBuffer(t.buffer));
        if t.flags & TF_ONE_WAY == 0 {
            let status: i32 = -libc::EPROTO;
            let bytes = status.to_ne_bytes();
            let tr = TransactionData {
                flags: TF_STATUS_CODE,
                data_size: 4,
                buffer: bytes.as_ptr() as u64,
                ..Default::default()
            };
            self.out.push(Command::Reply(tr));
            self.pending_complete += 1;
            // `bytes` must stay alive until the driver copied it: send now.
            self.flush()?;
        }
        Ok(())
    }

    /// BC_ENTER_LOOPER: marks this thread as a looper so it receives incoming calls.
    pub fn enter_looper(&mut self) -> Result<()> {
        self.out.push(Command::EnterLooper);
        self.flush()
    }

    /// Waits for one incoming transaction, hands it to `handler` and sends the returned
    /// bytes as the reply (nothing for oneway calls). Call [`Binder::enter_looper`] once
    /// first.
    pub fn serve_one<F>(&mut self, mut handler: F) -> Result<Incoming>
    where
        F: FnMut(&Incoming) -> Vec<u8>,
    {
        loop {
            let r = self.next_return()?;
            let Some(r) = self.handle_common(r)? else {
                continue;
            };
            let t = match r {
                Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } => t,
                Return::TransactionComplete => {
                    self.complete_one();
                    continue;
                }
                Return::Finished => return Err(Error::Protocol("BR_FINISHED".into())),
                _ => continue,
            };
            let data = self.buffer_bytes(t.buffer, t.data_size);
            self.out.push(Command::FreeBuffer(t.buffer));
            let data = match data {
                Ok(d) => d,
                Err(e) => {
                    self.flush()?;
                    return Err(e);
                }
            };
            let inc = Incoming {
                target: t.target,
                cookie: t.cookie,
                code: t.code,
                flags: t.flags,
                sender_pid: t.sender_pid,
                sender_euid: t.sender_euid,
                data,
            };
            if t.flags & TF_ONE_WAY != 0 {
                handler(&inc);
                self.flush()?;
                return Ok(inc);
            }
            let reply = handler(&inc);
            self.send_reply(&reply)?;
            return Ok(inc);
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

    /// BC_REPLY with `data`, then waits until the driver delivered it.
    fn send_reply(&mut self, data: &[u8]) -> Result<()> {
        let tr = TransactionData { data_size: data.len() as u64, buffer: data.as_ptr() as u64, ..Default::default() };
        self.out.push(Command::Reply(tr));
        self.pending_complete += 1;
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
                // Keep anything else (a new call) for the next serve_one.
                other => self.deferred.push_back(other),
            }
        }
    }
}

impl Drop for Binder {
    fn drop(&mut self) {
        // Best effort: hand back freed buffers and ref acks before closing.
        let _ = self.flush();
        // SAFETY: map/map_len are the mapping created in open and nothing borrows it
        // (buffer_bytes copies out).
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

#[cfg(test)]
mod tests;
