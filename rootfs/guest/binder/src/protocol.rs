//! Encoding of the BC_* command stream (write buffer) and decoding of the BR_* return
//! stream (read buffer). Pure byte handling, so it is tested on the host.
//!
//! Each item is a native-endian u32 code followed by a payload whose size is encoded in
//! the code itself (`_IOC_SIZE`). Payloads are written field by field in the 64-bit
//! layout of `uapi` (asserted there), never by transmuting structs.

use crate::uapi::*;
use std::fmt;

/// `binder_transaction_data` with its unions flattened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransactionData {
    /// `target.handle` (commands) or `target.ptr` (BR_TRANSACTION): one 8-byte union,
    /// a handle occupies the low 32 bits.
    pub target: u64,
    pub cookie: u64,
    pub code: u32,
    pub flags: u32,
    pub sender_pid: i32,
    pub sender_euid: u32,
    pub data_size: u64,
    pub offsets_size: u64,
    /// `data.ptr.buffer`
    pub buffer: u64,
    /// `data.ptr.offsets`
    pub offsets: u64,
}

impl TransactionData {
    pub const SIZE: usize = 64;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.target.to_ne_bytes());
        out.extend_from_slice(&self.cookie.to_ne_bytes());
        out.extend_from_slice(&self.code.to_ne_bytes());
        out.extend_from_slice(&self.flags.to_ne_bytes());
        out.extend_from_slice(&self.sender_pid.to_ne_bytes());
        out.extend_from_slice(&self.sender_euid.to_ne_bytes());
        out.extend_from_slice(&self.data_size.to_ne_bytes());
        out.extend_from_slice(&self.offsets_size.to_ne_bytes());
        out.extend_from_slice(&self.buffer.to_ne_bytes());
        out.extend_from_slice(&self.offsets.to_ne_bytes());
    }

    fn get(c: &mut Cursor<'_>) -> Self {
        TransactionData {
            target: c.u64(),
            cookie: c.u64(),
            code: c.u32(),
            flags: c.u32(),
            sender_pid: c.i32(),
            sender_euid: c.u32(),
            data_size: c.u64(),
            offsets_size: c.u64(),
            buffer: c.u64(),
            offsets: c.u64(),
        }
    }

    /// The target as a handle (commands).
    pub fn handle(&self) -> u32 {
        self.target as u32
    }
}

/// `binder_ptr_cookie`
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtrCookie {
    pub ptr: u64,
    pub cookie: u64,
}

/// A BC_* command with its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Transaction(TransactionData),
    Reply(TransactionData),
    AcquireResult(i32),
    FreeBuffer(u64),
    IncRefs(u32),
    Acquire(u32),
    Release(u32),
    DecRefs(u32),
    IncRefsDone(PtrCookie),
    AcquireDone(PtrCookie),
    AttemptAcquire { priority: i32, desc: u32 },
    RegisterLooper,
    EnterLooper,
    ExitLooper,
    RequestDeathNotification { handle: u32, cookie: u64 },
    ClearDeathNotification { handle: u32, cookie: u64 },
    DeadBinderDone(u64),
    TransactionSg { data: TransactionData, buffers_size: u64 },
    ReplySg { data: TransactionData, buffers_size: u64 },
    RequestFreezeNotification { handle: u32, cookie: u64 },
    ClearFreezeNotification { handle: u32, cookie: u64 },
    FreezeNotificationDone(u64),
}

/// A BR_* return with its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Return {
    Error(i32),
    Ok,
    TransactionSecCtx { data: TransactionData, secctx: u64 },
    Transaction(TransactionData),
    Reply(TransactionData),
    AcquireResult(i32),
    DeadReply,
    TransactionComplete,
    IncRefs(PtrCookie),
    Acquire(PtrCookie),
    Release(PtrCookie),
    DecRefs(PtrCookie),
    AttemptAcquire { priority: i32, ptr: u64, cookie: u64 },
    Noop,
    SpawnLooper,
    Finished,
    DeadBinder(u64),
    ClearDeathNotificationDone(u64),
    FailedReply,
    FrozenReply,
    OnewaySpamSuspect,
    TransactionPendingFrozen,
    FrozenBinder { cookie: u64, is_frozen: u32 },
    ClearFreezeNotificationDone(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    UnknownCode(u32),
    /// The buffer ends inside an item (code, needed bytes, available bytes).
    Truncated {
        code: u32,
        need: usize,
        have: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnknownCode(c) => write!(f, "unknown binder code {c:#010x}"),
            DecodeError::Truncated { code, need, have } => {
                write!(f, "truncated binder item {code:#010x}: need {need} bytes, have {have}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads native-endian fields; callers check the length first.
struct Cursor<'a> {
    b: &'a [u8],
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.b.split_at(N);
        self.b = rest;
        head.try_into().expect("split_at gave N bytes")
    }
    fn u32(&mut self) -> u32 {
        u32::from_ne_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_ne_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_ne_bytes(self.take())
    }
    fn ptr_cookie(&mut self) -> PtrCookie {
        PtrCookie { ptr: self.u64(), cookie: self.u64() }
    }
}

/// Splits `buf` into (code, payload, rest), checking the payload size from the code.
fn split_item(buf: &[u8]) -> Result<(u32, &[u8], &[u8]), DecodeError> {
    if buf.len() < 4 {
        return Err(DecodeError::Truncated { code: 0, need: 4, have: buf.len() });
    }
    let code = u32::from_ne_bytes(buf[..4].try_into().unwrap());
    let need = ioc_size(code);
    let rest = &buf[4..];
    if rest.len() < need {
        return Err(DecodeError::Truncated { code, need, have: rest.len() });
    }
    Ok((code, &rest[..need], &rest[need..]))
}

fn put_handle_cookie(out: &mut Vec<u8>, handle: u32, cookie: u64) {
    out.extend_from_slice(&handle.to_ne_bytes());
    out.extend_from_slice(&cookie.to_ne_bytes());
}

impl Command {
    pub fn code(&self) -> u32 {
        match self {
            Command::Transaction(_) => BC_TRANSACTION,
            Command::Reply(_) => BC_REPLY,
            Command::AcquireResult(_) => BC_ACQUIRE_RESULT,
            Command::FreeBuffer(_) => BC_FREE_BUFFER,
            Command::IncRefs(_) => BC_INCREFS,
            Command::Acquire(_) => BC_ACQUIRE,
            Command::Release(_) => BC_RELEASE,
            Command::DecRefs(_) => BC_DECREFS,
            Command::IncRefsDone(_) => BC_INCREFS_DONE,
            Command::AcquireDone(_) => BC_ACQUIRE_DONE,
            Command::AttemptAcquire { .. } => BC_ATTEMPT_ACQUIRE,
            Command::RegisterLooper => BC_REGISTER_LOOPER,
            Command::EnterLooper => BC_ENTER_LOOPER,
            Command::ExitLooper => BC_EXIT_LOOPER,
            Command::RequestDeathNotification { .. } => BC_REQUEST_DEATH_NOTIFICATION,
            Command::ClearDeathNotification { .. } => BC_CLEAR_DEATH_NOTIFICATION,
            Command::DeadBinderDone(_) => BC_DEAD_BINDER_DONE,
            Command::TransactionSg { .. } => BC_TRANSACTION_SG,
            Command::ReplySg { .. } => BC_REPLY_SG,
            Command::RequestFreezeNotification { .. } => BC_REQUEST_FREEZE_NOTIFICATION,
            Command::ClearFreezeNotification { .. } => BC_CLEAR_FREEZE_NOTIFICATION,
            Command::FreezeNotificationDone(_) => BC_FREEZE_NOTIFICATION_DONE,
        }
    }

    /// Appends code and payload to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.code().to_ne_bytes());
        match *self {
            Command::Transaction(t) | Command::Reply(t) => t.put(out),
            Command::AcquireResult(v) => out.extend_from_slice(&v.to_ne_bytes()),
            Command::FreeBuffer(v) | Command::DeadBinderDone(v) | Command::FreezeNotificationDone(v) => {
                out.extend_from_slice(&v.to_ne_bytes())
            }
            Command::IncRefs(h) | Command::Acquire(h) | Command::Release(h) | Command::DecRefs(h) => {
                out.extend_from_slice(&h.to_ne_bytes())
            }
            Command::IncRefsDone(pc) | Command::AcquireDone(pc) => {
                out.extend_from_slice(&pc.ptr.to_ne_bytes());
                out.extend_from_slice(&pc.cookie.to_ne_bytes());
            }
            Command::AttemptAcquire { priority, desc } => {
                out.extend_from_slice(&priority.to_ne_bytes());
                out.extend_from_slice(&desc.to_ne_bytes());
            }
            Command::RegisterLooper | Command::EnterLooper | Command::ExitLooper => {}
            Command::RequestDeathNotification { handle, cookie }
            | Command::ClearDeathNotification { handle, cookie }
            | Command::RequestFreezeNotification { handle, cookie }
            | Command::ClearFreezeNotification { handle, cookie } => put_handle_cookie(out, handle, cookie),
            Command::TransactionSg { data, buffers_size } | Command::ReplySg { data, buffers_size } => {
                data.put(out);
                out.extend_from_slice(&buffers_size.to_ne_bytes());
            }
        }
        debug_assert_eq!(out.len() - start, 4 + ioc_size(self.code()));
    }

    /// Decodes one command from the front of `buf`; returns it and the remaining bytes.
    pub fn decode(buf: &[u8]) -> Result<(Command, &[u8]), DecodeError> {
        let (code, payload, rest) = split_item(buf)?;
        let mut c = Cursor { b: payload };
        let cmd = match code {
            BC_TRANSACTION => Command::Transaction(TransactionData::get(&mut c)),
            BC_REPLY => Command::Reply(TransactionData::get(&mut c)),
            BC_ACQUIRE_RESULT => Command::AcquireResult(c.i32()),
            BC_FREE_BUFFER => Command::FreeBuffer(c.u64()),
            BC_INCREFS => Command::IncRefs(c.u32()),
            BC_ACQUIRE => Command::Acquire(c.u32()),
            BC_RELEASE => Command::Release(c.u32()),
            BC_DECREFS => Command::DecRefs(c.u32()),
            BC_INCREFS_DONE => Command::IncRefsDone(c.ptr_cookie()),
            BC_ACQUIRE_DONE => Command::AcquireDone(c.ptr_cookie()),
            BC_ATTEMPT_ACQUIRE => Command::AttemptAcquire { priority: c.i32(), desc: c.u32() },
            BC_REGISTER_LOOPER => Command::RegisterLooper,
            BC_ENTER_LOOPER => Command::EnterLooper,
            BC_EXIT_LOOPER => Command::ExitLooper,
            BC_REQUEST_DEATH_NOTIFICATION => Command::RequestDeathNotification { handle: c.u32(), cookie: c.u64() },
            BC_CLEAR_DEATH_NOTIFICATION => Command::ClearDeathNotification { handle: c.u32(), cookie: c.u64() },
            BC_DEAD_BINDER_DONE => Command::DeadBinderDone(c.u64()),
            BC_TRANSACTION_SG => Command::TransactionSg { data: TransactionData::get(&mut c), buffers_size: c.u64() },
            BC_REPLY_SG => Command::ReplySg { data: TransactionData::get(&mut c), buffers_size: c.u64() },
            BC_REQUEST_FREEZE_NOTIFICATION => Command::RequestFreezeNotification { handle: c.u32(), cookie: c.u64() },
            BC_CLEAR_FREEZE_NOTIFICATION => Command::ClearFreezeNotification { handle: c.u32(), cookie: c.u64() },
            BC_FREEZE_NOTIFICATION_DONE => Command::FreezeNotificationDone(c.u64()),
            other => return Err(DecodeError::UnknownCode(other)),
        };
        Ok((cmd, rest))
    }
}

impl Return {
    pub fn code(&self) -> u32 {
        match self {
            Return::Error(_) => BR_ERROR,
            Return::Ok => BR_OK,
            Return::TransactionSecCtx { .. } => BR_TRANSACTION_SEC_CTX,
            Return::Transaction(_) => BR_TRANSACTION,
            Return::Reply(_) => BR_REPLY,
            Return::AcquireResult(_) => BR_ACQUIRE_RESULT,
            Return::DeadReply => BR_DEAD_REPLY,
            Return::TransactionComplete => BR_TRANSACTION_COMPLETE,
            Return::IncRefs(_) => BR_INCREFS,
            Return::Acquire(_) => BR_ACQUIRE,
            Return::Release(_) => BR_RELEASE,
            Return::DecRefs(_) => BR_DECREFS,
            Return::AttemptAcquire { .. } => BR_ATTEMPT_ACQUIRE,
            Return::Noop => BR_NOOP,
            Return::SpawnLooper => BR_SPAWN_LOOPER,
            Return::Finished => BR_FINISHED,
            Return::DeadBinder(_) => BR_DEAD_BINDER,
            Return::ClearDeathNotificationDone(_) => BR_CLEAR_DEATH_NOTIFICATION_DONE,
            Return::FailedReply => BR_FAILED_REPLY,
            Return::FrozenReply => BR_FROZEN_REPLY,
            Return::OnewaySpamSuspect => BR_ONEWAY_SPAM_SUSPECT,
            Return::TransactionPendingFrozen => BR_TRANSACTION_PENDING_FROZEN,
            Return::FrozenBinder { .. } => BR_FROZEN_BINDER,
            Return::ClearFreezeNotificationDone(_) => BR_CLEAR_FREEZE_NOTIFICATION_DONE,
        }
    }

    /// Decodes one return from the front of `buf`; returns it and the remaining bytes.
    pub fn decode(buf: &[u8]) -> Result<(Return, &[u8]), DecodeError> {
        let (code, payload, rest) = split_item(buf)?;
        let mut c = Cursor { b: payload };
        let ret = match code {
            BR_ERROR => Return::Error(c.i32()),
            BR_OK => Return::Ok,
            BR_TRANSACTION_SEC_CTX => Return::TransactionSecCtx { data: TransactionData::get(&mut c), secctx: c.u64() },
            BR_TRANSACTION => Return::Transaction(TransactionData::get(&mut c)),
            BR_REPLY => Return::Reply(TransactionData::get(&mut c)),
            BR_ACQUIRE_RESULT => Return::AcquireResult(c.i32()),
            BR_DEAD_REPLY => Return::DeadReply,
            BR_TRANSACTION_COMPLETE => Return::TransactionComplete,
            BR_INCREFS => Return::IncRefs(c.ptr_cookie()),
            BR_ACQUIRE => Return::Acquire(c.ptr_cookie()),
            BR_RELEASE => Return::Release(c.ptr_cookie()),
            BR_DECREFS => Return::DecRefs(c.ptr_cookie()),
            BR_ATTEMPT_ACQUIRE => {
                let priority = c.i32();
                c.u32(); // padding before the u64s
                Return::AttemptAcquire { priority, ptr: c.u64(), cookie: c.u64() }
            }
            BR_NOOP => Return::Noop,
            BR_SPAWN_LOOPER => Return::SpawnLooper,
            BR_FINISHED => Return::Finished,
            BR_DEAD_BINDER => Return::DeadBinder(c.u64()),
            BR_CLEAR_DEATH_NOTIFICATION_DONE => Return::ClearDeathNotificationDone(c.u64()),
            BR_FAILED_REPLY => Return::FailedReply,
            BR_FROZEN_REPLY => Return::FrozenReply,
            BR_ONEWAY_SPAM_SUSPECT => Return::OnewaySpamSuspect,
            BR_TRANSACTION_PENDING_FROZEN => Return::TransactionPendingFrozen,
            BR_FROZEN_BINDER => {
                let cookie = c.u64();
                let is_frozen = c.u32();
                c.u32(); // reserved
                Return::FrozenBinder { cookie, is_frozen }
            }
            BR_CLEAR_FREEZE_NOTIFICATION_DONE => Return::ClearFreezeNotificationDone(c.u64()),
            other => return Err(DecodeError::UnknownCode(other)),
        };
        Ok((ret, rest))
    }

    /// Appends code and payload to `out`, as the driver would (used by tests and fakes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.code().to_ne_bytes());
        match *self {
            Return::Error(v) | Return::AcquireResult(v) => out.extend_from_slice(&v.to_ne_bytes()),
            Return::TransactionSecCtx { data, secctx } => {
                data.put(out);
                out.extend_from_slice(&secctx.to_ne_bytes());
            }
            Return::Transaction(t) | Return::Reply(t) => t.put(out),
            Return::IncRefs(pc) | Return::Acquire(pc) | Return::Release(pc) | Return::DecRefs(pc) => {
                out.extend_from_slice(&pc.ptr.to_ne_bytes());
                out.extend_from_slice(&pc.cookie.to_ne_bytes());
            }
            Return::AttemptAcquire { priority, ptr, cookie } => {
                out.extend_from_slice(&priority.to_ne_bytes());
                out.extend_from_slice(&[0; 4]);
                out.extend_from_slice(&ptr.to_ne_bytes());
                out.extend_from_slice(&cookie.to_ne_bytes());
            }
            Return::DeadBinder(v) | Return::ClearDeathNotificationDone(v) | Return::ClearFreezeNotificationDone(v) => {
                out.extend_from_slice(&v.to_ne_bytes())
            }
            Return::FrozenBinder { cookie, is_frozen } => {
                out.extend_from_slice(&cookie.to_ne_bytes());
                out.extend_from_slice(&is_frozen.to_ne_bytes());
                out.extend_from_slice(&[0; 4]);
            }
            Return::Ok
            | Return::DeadReply
            | Return::TransactionComplete
            | Return::Noop
            | Return::SpawnLooper
            | Return::Finished
            | Return::FailedReply
            | Return::FrozenReply
            | Return::OnewaySpamSuspect
            | Return::TransactionPendingFrozen => {}
        }
        debug_assert_eq!(out.len() - start, 4 + ioc_size(self.code()));
    }
}

impl Command {
    /// The uapi name (`BC_TRANSACTION`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Transaction(_) => "BC_TRANSACTION",
            Command::Reply(_) => "BC_REPLY",
            Command::AcquireResult(_) => "BC_ACQUIRE_RESULT",
            Command::FreeBuffer(_) => "BC_FREE_BUFFER",
            Command::IncRefs(_) => "BC_INCREFS",
            Command::Acquire(_) => "BC_ACQUIRE",
            Command::Release(_) => "BC_RELEASE",
            Command::DecRefs(_) => "BC_DECREFS",
            Command::IncRefsDone(_) => "BC_INCREFS_DONE",
            Command::AcquireDone(_) => "BC_ACQUIRE_DONE",
            Command::AttemptAcquire { .. } => "BC_ATTEMPT_ACQUIRE",
            Command::RegisterLooper => "BC_REGISTER_LOOPER",
            Command::EnterLooper => "BC_ENTER_LOOPER",
            Command::ExitLooper => "BC_EXIT_LOOPER",
            Command::RequestDeathNotification { .. } => "BC_REQUEST_DEATH_NOTIFICATION",
            Command::ClearDeathNotification { .. } => "BC_CLEAR_DEATH_NOTIFICATION",
            Command::DeadBinderDone(_) => "BC_DEAD_BINDER_DONE",
            Command::TransactionSg { .. } => "BC_TRANSACTION_SG",
            Command::ReplySg { .. } => "BC_REPLY_SG",
            Command::RequestFreezeNotification { .. } => "BC_REQUEST_FREEZE_NOTIFICATION",
            Command::ClearFreezeNotification { .. } => "BC_CLEAR_FREEZE_NOTIFICATION",
            Command::FreezeNotificationDone(_) => "BC_FREEZE_NOTIFICATION_DONE",
        }
    }
}

impl Return {
    /// The uapi name (`BR_REPLY`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Return::Error(_) => "BR_ERROR",
            Return::Ok => "BR_OK",
            Return::TransactionSecCtx { .. } => "BR_TRANSACTION_SEC_CTX",
            Return::Transaction(_) => "BR_TRANSACTION",
            Return::Reply(_) => "BR_REPLY",
            Return::AcquireResult(_) => "BR_ACQUIRE_RESULT",
            Return::DeadReply => "BR_DEAD_REPLY",
            Return::TransactionComplete => "BR_TRANSACTION_COMPLETE",
            Return::IncRefs(_) => "BR_INCREFS",
            Return::Acquire(_) => "BR_ACQUIRE",
            Return::Release(_) => "BR_RELEASE",
            Return::DecRefs(_) => "BR_DECREFS",
            Return::AttemptAcquire { .. } => "BR_ATTEMPT_ACQUIRE",
            Return::Noop => "BR_NOOP",
            Return::SpawnLooper => "BR_SPAWN_LOOPER",
            Return::Finished => "BR_FINISHED",
            Return::DeadBinder(_) => "BR_DEAD_BINDER",
            Return::ClearDeathNotificationDone(_) => "BR_CLEAR_DEATH_NOTIFICATION_DONE",
            Return::FailedReply => "BR_FAILED_REPLY",
            Return::FrozenReply => "BR_FROZEN_REPLY",
            Return::OnewaySpamSuspect => "BR_ONEWAY_SPAM_SUSPECT",
            Return::TransactionPendingFrozen => "BR_TRANSACTION_PENDING_FROZEN",
            Return::FrozenBinder { .. } => "BR_FROZEN_BINDER",
            Return::ClearFreezeNotificationDone(_) => "BR_CLEAR_FREEZE_NOTIFICATION_DONE",
        }
    }
}

/// A write buffer of BC_* commands for one BINDER_WRITE_READ.
#[derive(Clone, Debug, Default)]
pub struct WriteBuf {
    buf: Vec<u8>,
}

impl WriteBuf {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn push(&mut self, cmd: Command) -> &mut Self {
        cmd.encode(&mut self.buf);
        self
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn clear(&mut self) {
        self.buf.clear()
    }
    /// Drops the first `n` bytes (what the driver consumed).
    pub fn consume(&mut self, n: usize) {
        self.buf.drain(..n.min(self.buf.len()));
    }
}

/// Iterates the BR_* returns of a filled read buffer.
pub struct ReturnReader<'a> {
    rest: &'a [u8],
}

impl<'a> ReturnReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        ReturnReader { rest: buf }
    }
}

impl Iterator for ReturnReader<'_> {
    type Item = Result<Return, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match Return::decode(self.rest) {
            Ok((r, rest)) => {
                self.rest = rest;
                Some(Ok(r))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}
