//! Bad input: each must be rejected with an error (an errno from the ioctl, or
//! BR_FAILED_REPLY/BR_DEAD_REPLY for a transaction) and no kernel splat (the runner checks
//! the kernel log of every case). After each, the same thread must still work.

use crate::check;
use crate::common::*;
use binder::looper::Looper;
use binder::parcel::{Object, Parcel};
use binder::protocol::{Command, TransactionData, WriteBuf};
use binder::uapi::*;
use binder::{Binder, CallOpts, Device, Error, Incoming, OpenOptions, Reply};
use serde_json::{json, Value};
use testkit::payload;
use testkit::Driver;

/// An echo server and a client with a handle `h` to it: `(server, client, h)`.
fn echo_server(ctx: &Ctx) -> Result<(Server, Binder, u32), CaseError> {
    let s = Server::start(ctx, &OpenOptions::default(), 1, None, |_, inc| Reply::bytes(&inc.data))?;
    let mut c = Binder::open(&ctx.dev).ctx("open")?;
    let h = s.connect(&mut c)?;
    Ok((s, c, h))
}

/// Records what happened to one bad input.
struct Log(Vec<Value>);

impl Log {
    fn add(&mut self, what: &str, outcome: impl std::fmt::Debug) {
        self.0.push(json!({"input": what, "outcome": format!("{outcome:?}")}));
    }
}

/// The transaction must have been refused by the driver.
fn rejected(log: &mut Log, what: &str, r: binder::Result<Option<Incoming>>) -> CaseResult {
    log.add(what, r.as_ref().map(|o| o.as_ref().map(|i| i.data.len())).map_err(|e| e.to_string()));
    match r {
        Err(Error::FailedReply | Error::DeadReply) => Ok(()),
        other => fail(format!("{what}: expected BR_FAILED_REPLY or BR_DEAD_REPLY, got {other:?}")),
    }
}

/// The ioctl must have failed with `errno`.
fn errno_is(log: &mut Log, what: &str, r: std::io::Result<()>, errno: i32) -> CaseResult {
    log.add(what, r.as_ref().map_err(|e| e.raw_os_error()));
    let got = r.as_ref().err().and_then(|e| e.raw_os_error());
    check!(got == Some(errno), "{what}: expected errno {errno}, got {r:?}");
    Ok(())
}

/// A normal round trip on the same thread.
fn still_works(c: &mut Binder, h: u32, what: &str) -> CaseResult {
    let req = payload::make(7, 3000);
    let r = c.call(h, 1, &Parcel::from_bytes(&req)).ctx(&format!("valid call after {what}"))?;
    check!(r.data == req, "echo after {what} came back different");
    Ok(())
}

fn ee(c: &Binder) -> Value {
    match c.extended_error() {
        Ok(e) => json!({"id": e.id, "command": format!("{:#x}", e.command), "param": e.param}),
        Err(e) => json!(e.to_string()),
    }
}

fn raw(handle: u32, flags: u32, data: u64, size: u64, offsets: u64, offsets_size: u64) -> TransactionData {
    TransactionData {
        target: handle as u64,
        code: 1,
        flags,
        data_size: size,
        offsets_size,
        buffer: data,
        offsets,
        ..Default::default()
    }
}

fn finish(data: &mut Data, log: Log) {
    data.insert("inputs".into(), Value::Array(log.0));
}

pub fn invalid_handle(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mut log = Log(vec![]);
    let mut c = Binder::open(&ctx.dev).ctx("open")?;
    // No context manager (the previous case's is gone): handle 0 is dead.
    let r = c.call(0, 1, &Parcel::from_bytes(b"x")).map(Some);
    log.add("handle 0 without a context manager", r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    check!(matches!(r, Err(Error::DeadReply)), "handle 0 without a manager: {r:?}");
    // The client holds no references yet: every handle but 0 is unknown.
    for h in [1u32, 7, 0x7fff_fff0, u32::MAX] {
        let r = c.call(h, 1, &Parcel::from_bytes(b"x")).map(Some);
        rejected(&mut log, &format!("sync to unknown handle {h:#x}"), r)?;
        let r =
            c.call_with(h, 1, &Parcel::from_bytes(b"x"), &CallOpts { flags: TF_ONE_WAY, ..Default::default() }, None);
        rejected(&mut log, &format!("oneway to unknown handle {h:#x}"), r)?;
    }
    data.insert("extended_error".into(), ee(&c));
    // Refcount and death commands on unknown handles are ignored (logged by the driver).
    for cmd in [
        Command::Acquire(0x55),
        Command::Release(0x55),
        Command::IncRefs(0x55),
        Command::DecRefs(0x55),
        Command::RequestDeathNotification { handle: 0x55, cookie: 1 },
        Command::ClearDeathNotification { handle: 0x55, cookie: 1 },
    ] {
        let mut wb = WriteBuf::new();
        wb.push(cmd);
        let r = c.write_read(wb.as_bytes(), &mut []);
        log.add(&format!("{} on an unknown handle", cmd.name()), &r);
        check!(r.is_ok(), "{} on an unknown handle failed the ioctl: {r:?}", cmd.name());
    }
    let srv = Server::start(ctx, &OpenOptions::default(), 1, None, |_, inc| Reply::bytes(&inc.data))?;
    let h = srv.connect(&mut c)?;
    still_works(&mut c, h, "calls to unknown handles")?;
    c.release(h)?;
    srv.stop()?;

    // A context manager in this process, on its own fd.
    let mdev = Device::open(&ctx.dev).ctx("open manager")?;
    mdev.become_context_manager_retry(None, MGR_WAIT).ctx("BINDER_SET_CONTEXT_MGR")?;
    let mgr = Looper::spawn(mdev.clone(), 1, None, |_, inc| Reply::bytes(&inc.data));
    // The manager calling handle 0 on its own fd is calling itself: refused by both.
    let mut m = Binder::from_device(mdev);
    let r = m.call(0, 1, &Parcel::from_bytes(b"self")).map(Some);
    rejected(&mut log, "context manager calling handle 0 (itself)", r)?;
    drop(m);
    // Another fd of the manager's process calling handle 0. The drivers differ (docs/src/guide/
    // conformance-and-fuzz.md, "C vs Rust driver differences"): the C driver refuses it by pid, with BR_FAILED_REPLY
    // and "got transaction to context manager from process owning it" in its log (EINVAL
    // in the extended error); the Rust driver refuses only the manager's own binder_proc
    // (its fd), so the call reaches the manager.
    let r = c.call(0, 1, &Parcel::from_bytes(b"same process"));
    log.add("another fd of the manager's process calling handle 0", r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    data.insert("same_process_handle_0_extended_error".into(), ee(&c));
    match ctx.driver {
        Driver::C => check!(
            matches!(r, Err(Error::FailedReply)),
            "C driver: handle 0 from the manager's process (another fd): expected BR_FAILED_REPLY, got {r:?}"
        ),
        Driver::Rust => check!(
            matches!(&r, Ok(rep) if rep.data == b"same process"),
            "Rust driver: handle 0 from the manager's process (another fd): expected the echo, got {r:?}"
        ),
    }
    drop(r);
    finish(data, log);
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

pub fn bad_pointers(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mut log = Log(vec![]);
    let (mgr, mut c, h) = echo_server(ctx)?;
    let bad = bad_ptr();
    for (name, p) in [("PROT_NONE page", bad), ("kernel address", KERNEL_PTR), ("NULL", 0)] {
        // SAFETY: the argument points at no accessible user memory: the driver's copy
        // of binder_write_read fails and nothing is written.
        let r = unsafe { c.ioctl_raw(BINDER_WRITE_READ, p as *mut libc::c_void) }.map(|_| ());
        errno_is(&mut log, &format!("BINDER_WRITE_READ argument: {name}"), r, libc::EFAULT)?;
        let mut bwr = binder_write_read { write_size: 64, write_buffer: p, ..Default::default() };
        errno_is(&mut log, &format!("write_buffer: {name}"), c.write_read_raw(&mut bwr), libc::EFAULT)?;
        check!(bwr.write_consumed == 0, "write_consumed {} for an unreadable buffer", bwr.write_consumed);
        let mut bwr = binder_write_read { read_size: 256, read_buffer: p, ..Default::default() };
        errno_is(&mut log, &format!("read_buffer: {name}"), c.write_read_raw(&mut bwr), libc::EFAULT)?;
    }
    // A write buffer that starts valid and runs into an unreadable page.
    let g = Guarded::new()?;
    let mut wb = WriteBuf::new();
    wb.push(Command::EnterLooper);
    let at = g.place(wb.as_bytes());
    let mut bwr = binder_write_read { write_size: 4 + 64, write_buffer: at, ..Default::default() };
    let r = c.write_read_raw(&mut bwr);
    log.add("write_size past the end of readable memory", (&r, bwr.write_consumed));
    check!(r.is_err(), "a write buffer running into a PROT_NONE page was accepted");
    still_works(&mut c, h, "bad BINDER_WRITE_READ pointers")?;

    // Transactions whose data or offsets cannot be read.
    let opts = CallOpts::default();
    for (name, p) in [("PROT_NONE page", bad), ("kernel address", KERNEL_PTR)] {
        rejected(&mut log, &format!("transaction data: {name}"), c.call_raw(raw(h, 0, p, 64, 0, 0), &opts, None))?;
        let buf = [0u8; 64];
        let r = c.call_raw(raw(h, 0, buf.as_ptr() as u64, 64, p, 8), &opts, None);
        rejected(&mut log, &format!("transaction offsets: {name}"), r)?;
        let r =
            c.call_raw(raw(h, TF_ONE_WAY, p, 64, 0, 0), &CallOpts { flags: TF_ONE_WAY, ..Default::default() }, None);
        rejected(&mut log, &format!("oneway data: {name}"), r)?;
    }
    data.insert("extended_error".into(), ee(&c));
    // BC_FREE_BUFFER of addresses that are no buffer: ignored.
    let (map, _) = c.mapping();
    for (name, p) in [("unmapped", bad), ("mapping + 8", map + 8), ("zero", 0)] {
        let mut wb = WriteBuf::new();
        wb.push(Command::FreeBuffer(p));
        let r = c.write_read(wb.as_bytes(), &mut []);
        log.add(&format!("BC_FREE_BUFFER {name}"), &r);
        check!(r.is_ok(), "BC_FREE_BUFFER {name}: {r:?}");
    }
    still_works(&mut c, h, "bad transaction pointers")?;
    finish(data, log);
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

pub fn bad_offsets(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mut log = Log(vec![]);
    let (mgr, mut c, h) = echo_server(ctx)?;
    let opts = CallOpts::default();
    let mut obj = Parcel::new();
    obj.write_object(Object::binder(0x5000, 0x5001));
    let one = obj.data().to_vec(); // 24 bytes: one flat_binder_object at 0
    let mut two = one.clone();
    two.extend_from_slice(&one); // two objects, at 0 and 24
    let cases: Vec<(&str, Vec<u8>, Vec<u64>, u64)> = vec![
        ("offsets_size not a multiple of 8", one.clone(), vec![0], 4),
        ("offset beyond the data", one.clone(), vec![100], 8),
        ("offset not 4-aligned", two.clone(), vec![3], 8),
        ("object running past the end of the data", one[..20].to_vec(), vec![0], 8),
        ("object at the last byte", one.clone(), vec![23], 8),
        ("decreasing offsets", two.clone(), vec![24, 0], 16),
        ("overlapping objects", two.clone(), vec![0, 8], 16),
        ("offset u64::MAX", one.clone(), vec![u64::MAX], 8),
    ];
    for (name, d, offs, offs_size) in &cases {
        let r = c.call_raw(raw(h, 0, d.as_ptr() as u64, d.len() as u64, offs.as_ptr() as u64, *offs_size), &opts, None);
        rejected(&mut log, name, r)?;
    }
    // An unknown object type where an object should be.
    let junk = [0x5au8; 24];
    let offs = [0u64];
    let r = c.call_raw(raw(h, 0, junk.as_ptr() as u64, 24, offs.as_ptr() as u64, 8), &opts, None);
    rejected(&mut log, "unknown object type", r)?;
    // An offsets array far larger than the buffer space.
    let r = c.call_raw(raw(h, 0, one.as_ptr() as u64, 24, offs.as_ptr() as u64, 1 << 40), &opts, None);
    rejected(&mut log, "offsets_size 1 TiB", r)?;
    // A valid object in the same position works.
    let r = c.call_raw(raw(h, 0, one.as_ptr() as u64, 24, offs.as_ptr() as u64, 8), &opts, None);
    log.add("valid object", r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    check!(r.is_ok(), "a valid object after the bad ones: {r:?}");
    data.insert("extended_error".into(), ee(&c));
    still_works(&mut c, h, "bad offsets")?;
    finish(data, log);
    // Failed transactions must not leave references behind (the one on the server's node
    // goes first).
    c.release(h)?;
    let st = testkit::logs::Stats::read()?;
    let refs: u64 = st.proc(getpid()).iter().map(|p| p.refs).sum();
    check!(refs == 0, "{refs} ref(s) left after the rejected transactions");
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

pub fn oversized(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mut log = Log(vec![]);
    let (mgr, mut c, h) = echo_server(ctx)?;
    let (_, map_len) = mgr.device().mapping();
    let opts = CallOpts::default();
    let big = vec![0xabu8; 2 * 1024 * 1024];
    for size in [map_len as u64 + 1, 2 * 1024 * 1024] {
        let r = c.call_raw(raw(h, 0, big.as_ptr() as u64, size, 0, 0), &opts, None);
        rejected(&mut log, &format!("{size} bytes to a {map_len}-byte mapping"), r)?;
    }
    // Sizes whose alignment or sum overflows.
    for size in [u64::MAX, u64::MAX - 3, 1 << 62] {
        let r = c.call_raw(raw(h, 0, big.as_ptr() as u64, size, 0, 0), &opts, None);
        rejected(&mut log, &format!("data_size {size:#x}"), r)?;
    }
    let offs = [0u64; 1];
    let r = c.call_raw(raw(h, 0, big.as_ptr() as u64, 1 << 40, offs.as_ptr() as u64, u64::MAX - 7), &opts, None);
    rejected(&mut log, "data_size + offsets_size overflowing", r)?;
    // Oneway calls may only use half of the mapping.
    let ow = CallOpts { flags: TF_ONE_WAY, ..Default::default() };
    let half = map_len as u64 / 2 + 4096;
    let r = c.call_raw(raw(h, TF_ONE_WAY, big.as_ptr() as u64, half, 0, 0), &ow, None);
    rejected(&mut log, &format!("oneway of {half} bytes (more than half the mapping)"), r)?;
    data.insert("extended_error".into(), ee(&c));
    // The largest sizes still work.
    let r = c.call(h, 1, &Parcel::from_bytes(&big[..64 * 1024])).ctx("64 KiB after the oversized ones")?;
    check!(r.data.len() == 64 * 1024, "64 KiB echo came back with {} bytes", r.data.len());
    still_works(&mut c, h, "oversized transactions")?;
    finish(data, log);
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

/// Two pages: the first readable and writable, the second PROT_NONE. Bytes placed at the
/// end of the first page run into the second.
struct Guarded {
    base: *mut u8,
}

impl Guarded {
    fn new() -> Result<Guarded, CaseError> {
        // SAFETY: a fresh anonymous mapping of two pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        check!(p != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        // SAFETY: the second page of our own fresh mapping.
        let r =
            unsafe { libc::mprotect((p as *mut u8).wrapping_add(4096) as *mut libc::c_void, 4096, libc::PROT_NONE) };
        check!(r == 0, "mprotect: {}", std::io::Error::last_os_error());
        Ok(Guarded { base: p as *mut u8 })
    }

    /// Copies `b` to the end of the first page; returns its address.
    fn place(&self, b: &[u8]) -> u64 {
        assert!(b.len() <= 4096);
        let at = self.base.wrapping_add(4096 - b.len());
        // SAFETY: [at, at+len) lies in the first (writable) page of our mapping.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), at, b.len()) };
        at as u64
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, not borrowed anywhere.
        unsafe { libc::munmap(self.base as *mut libc::c_void, 8192) };
    }
}

pub fn unknown_command(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mut log = Log(vec![]);
    let (mgr, mut c, h) = echo_server(ctx)?;
    let code = |c: u32| c.to_ne_bytes().to_vec();
    let bogus: Vec<(&str, Vec<u8>)> = vec![
        ("unknown BC nr 0x3f", code(ioc(IOC_WRITE, b'c', 0x3f, 4)).into_iter().chain([0; 4]).collect()),
        ("BR_NOOP as a command", code(BR_NOOP)),
        ("zero", code(0)),
        ("all ones", code(u32::MAX)),
        ("BC_ATTEMPT_ACQUIRE (unsupported)", {
            let mut wb = WriteBuf::new();
            wb.push(Command::AttemptAcquire { priority: 0, desc: 0 });
            wb.as_bytes().to_vec()
        }),
        ("BC_ACQUIRE_RESULT (unsupported)", {
            let mut wb = WriteBuf::new();
            wb.push(Command::AcquireResult(0));
            wb.as_bytes().to_vec()
        }),
    ];
    for (name, bytes) in &bogus {
        let (r, consumed) = {
            let mut bwr = binder_write_read {
                write_size: bytes.len() as u64,
                write_buffer: bytes.as_ptr() as u64,
                ..Default::default()
            };
            let r = c.write_read_raw(&mut bwr);
            (r, bwr.write_consumed)
        };
        log.add(name, (&r, consumed));
        check!(r.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EINVAL), "{name}: {r:?}");
        check!(consumed == 0, "{name}: {consumed} bytes consumed");
    }
    // A valid command before an unknown one is executed; the ioctl then fails.
    let mut wb = WriteBuf::new();
    wb.push(Command::ExitLooper);
    let mut bytes = wb.as_bytes().to_vec();
    bytes.extend_from_slice(&code(ioc(IOC_NONE, b'c', 0x7e, 0)));
    let mut bwr =
        binder_write_read { write_size: bytes.len() as u64, write_buffer: bytes.as_ptr() as u64, ..Default::default() };
    let r = c.write_read_raw(&mut bwr);
    log.add("BC_EXIT_LOOPER then an unknown command", (&r, bwr.write_consumed));
    check!(r.is_err() && bwr.write_consumed == 4, "valid + unknown: {r:?}, {} consumed", bwr.write_consumed);
    // A command cut short by the end of readable memory. (The Rust driver also stops at
    // write_size; the C driver reads a command's payload past write_size, so the guard
    // page is what makes both fail the same way.)
    let g = Guarded::new()?;
    let tr = BC_TRANSACTION.to_ne_bytes();
    let at = g.place(&[tr.as_slice(), &[0u8; 8]].concat());
    let mut bwr = binder_write_read { write_size: 12, write_buffer: at, ..Default::default() };
    let r = c.write_read_raw(&mut bwr);
    log.add("BC_TRANSACTION truncated by a PROT_NONE page", (&r, bwr.write_consumed));
    check!(r.is_err(), "a truncated BC_TRANSACTION was accepted");
    // Fewer bytes than a command code.
    let three = [1u8, 2, 3];
    let mut bwr = binder_write_read { write_size: 3, write_buffer: three.as_ptr() as u64, ..Default::default() };
    let r = c.write_read_raw(&mut bwr);
    log.add("3-byte write buffer", (&r, bwr.write_consumed));
    match ctx.driver {
        // The Rust driver only reads whole u32 codes within write_size.
        Driver::Rust => check!(r.is_ok() && bwr.write_consumed == 0, "3-byte write: {r:?}"),
        // The C driver reads a u32 at ptr < end even if it extends past write_size; the
        // other byte is our stack, so any outcome but a crash is acceptable.
        Driver::C => {}
    }
    still_works(&mut c, h, "unknown commands")?;
    finish(data, log);
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}
