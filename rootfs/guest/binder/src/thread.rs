//! The thread side of binder ([`Binder`]): the driver keeps a transaction stack and a
//! looper state per thread; this is the matching state in userspace, with calls, replies,
//! nested calls, refcounts and death notifications, and what a transaction carries.

use crate::device::{Device, OpenOptions};
use crate::error::{Error, Result};
use crate::parcel::{self, Object, Parcel, ParcelReader};
use crate::protocol::{Command, Return, TransactionData, WriteBuf};
use crate::uapi::*;
use std::collections::VecDeque;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const READ_BUF_SIZE: usize = 512;
/// How many unclaimed notifications a [`Binder`] keeps (oldest dropped first).
const MAX_EVENTS: usize = 4096;

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
