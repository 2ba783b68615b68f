//! Seed 002: when does BR_TRANSACTION_COMPLETE arrive?
//!
//! With deferral (the drivers' default: the Rust driver queues the completion of a
//! synchronous transaction as deferred thread work, the C driver does the same with
//! `binder_enqueue_deferred_thread_work_ilocked`), a non-blocking read after a
//! synchronous BC_TRANSACTION returns no BR_TRANSACTION_COMPLETE while the server has not
//! replied, and the completion and BR_REPLY then come back in the same read. A oneway
//! transaction gets its completion at once.
//!
//! The mode comes from `/sys/kernel/debug/rust_binder/defer_tc` when that switch exists:
//! "0" turns deferral off, and the completion is then expected at once, before the reply.

use crate::check;
use crate::common::*;
use binder::looper::Looper;
use binder::protocol::{Command, Return, ReturnReader, TransactionData, WriteBuf};
use binder::uapi::*;
use binder::{Device, OpenOptions, Reply};
use serde_json::json;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const DEFER_TC_SWITCH: &str = "/sys/kernel/debug/rust_binder/defer_tc";
const CODE_SYNC: u32 = 1;
const CODE_ONEWAY: u32 = 2;

/// (deferral expected, where the mode came from).
fn mode() -> (bool, String) {
    match std::fs::read_to_string(DEFER_TC_SWITCH) {
        Ok(s) => (s.trim() != "0", format!("{DEFER_TC_SWITCH}={}", s.trim())),
        Err(_) => (true, "default (no switch)".into()),
    }
}

/// One BINDER_WRITE_READ that only reads; `Ok(None)` for EAGAIN (nothing to return).
fn read_once(dev: &Device, size: usize) -> Result<Option<Vec<Return>>, CaseError> {
    let mut buf = vec![0u8; size];
    match dev.write_read(&[], &mut buf) {
        Ok((_, n)) => {
            let rets: Result<Vec<Return>, _> = ReturnReader::new(&buf[..n]).collect();
            Ok(Some(rets.ctx("decoding the read buffer")?))
        }
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(None),
        Err(e) => fail(format!("non-blocking read: {e}")),
    }
}

fn names(rets: &[Return]) -> Vec<&'static str> {
    rets.iter().filter(|r| **r != Return::Noop).map(|r| r.name()).collect()
}

fn write_only(dev: &Device, cmd: Command) -> CaseResult {
    let mut wb = WriteBuf::new();
    wb.push(cmd);
    let (consumed, _) = dev.write_read(wb.as_bytes(), &mut []).ctx("write BC_TRANSACTION")?;
    check!(consumed == wb.len(), "driver consumed {consumed} of {} bytes", wb.len());
    Ok(())
}

pub fn tc_deferral(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let (defer, source) = mode();
    data.insert("defer_tc".into(), json!(defer));
    data.insert("mode_source".into(), json!(source));

    // The server tells us when a transaction reached it, and replies when told to.
    let (got_tx, got_rx) = mpsc::channel::<u32>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let got_tx = Mutex::new(got_tx);
    let go_rx = Mutex::new(go_rx);
    let hold = ctx.t(10.0);
    let sdev = Device::open(&ctx.dev).ctx("open server")?;
    sdev.become_context_manager_retry(None, Duration::from_secs(10)).ctx("BINDER_SET_CONTEXT_MGR")?;
    let server = Looper::spawn(sdev, 1, None, move |_, inc| {
        let _ = got_tx.lock().unwrap().send(inc.code);
        if inc.code == CODE_SYNC {
            let _ = go_rx.lock().unwrap().recv_timeout(hold);
            Reply::bytes(b"the reply")
        } else {
            Reply::empty()
        }
    });

    let c = Device::open_with(&ctx.dev, &OpenOptions { nonblocking: true, ..Default::default() }).ctx("open client")?;
    let body = b"seed 002";
    let tr = |flags: u32, code: u32| TransactionData {
        target: 0,
        code,
        flags,
        data_size: body.len() as u64,
        buffer: body.as_ptr() as u64,
        ..Default::default()
    };

    // 1. Synchronous transaction, written without reading.
    write_only(&c, Command::Transaction(tr(0, CODE_SYNC)))?;
    let code = got_rx.recv_timeout(ctx.t(5.0)).ctx("the server never got the transaction")?;
    check!(code == CODE_SYNC, "server got code {code}");
    // The transaction is with the server and unanswered: look (several times) without
    // blocking.
    let mut before = vec![];
    for _ in 0..5 {
        if let Some(r) = read_once(&c, 256)? {
            before.extend(r);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let tc_before = before.iter().filter(|r| **r == Return::TransactionComplete).count();
    data.insert("before_reply".into(), json!(names(&before)));
    check!(
        !before.iter().any(|r| matches!(r, Return::Reply(_) | Return::FailedReply | Return::DeadReply)),
        "a reply before the server replied: {:?}",
        names(&before)
    );
    if defer {
        check!(tc_before == 0, "BR_TRANSACTION_COMPLETE before the reply with deferral on: {:?}", names(&before));
    } else {
        check!(tc_before == 1, "deferral off, but no BR_TRANSACTION_COMPLETE at once: {:?}", names(&before));
    }

    // 2. The server replies; one read must carry the completion (if deferred) and the reply.
    go_tx.send(()).ctx("release the server")?;
    let t = Instant::now();
    check!(c.poll_readable(ctx.t(5.0))?, "nothing to read within {:?} of the reply", ctx.t(5.0));
    let after = read_once(&c, 256)?.unwrap_or_default();
    data.insert("reply_read".into(), json!(names(&after)));
    data.insert("reply_wait_ms".into(), json!(ms(t.elapsed())));
    let want: &[&str] = if defer { &["BR_TRANSACTION_COMPLETE", "BR_REPLY"] } else { &["BR_REPLY"] };
    check!(names(&after) == want, "the read after the reply returned {:?}, expected {want:?}", names(&after));
    let reply = after.iter().find_map(|r| match r {
        Return::Reply(t) => Some(*t),
        _ => None,
    });
    let reply = reply.ctx("no reply")?;
    let text = c.buffer_bytes(reply.buffer, reply.data_size)?;
    check!(text == b"the reply", "reply data {text:?}");
    let mut wb = WriteBuf::new();
    wb.push(Command::FreeBuffer(reply.buffer));
    c.write_read(wb.as_bytes(), &mut []).ctx("BC_FREE_BUFFER")?;
    check!(read_once(&c, 256)?.map(|r| names(&r).is_empty()).unwrap_or(true), "leftover returns after the reply");

    // 3. Oneway: the completion is there at once, deferral or not.
    write_only(&c, Command::Transaction(tr(TF_ONE_WAY, CODE_ONEWAY)))?;
    let ow = read_once(&c, 256)?.unwrap_or_default();
    data.insert("oneway_read".into(), json!(names(&ow)));
    check!(names(&ow) == ["BR_TRANSACTION_COMPLETE"], "right after a oneway transaction: {:?}", names(&ow));
    let code = got_rx.recv_timeout(ctx.t(5.0)).ctx("the server never got the oneway transaction")?;
    check!(code == CODE_ONEWAY, "server got code {code}");

    drop(c);
    server.stop().ctx("stop server")?;
    check_no_buffers(data, getpid())
}
