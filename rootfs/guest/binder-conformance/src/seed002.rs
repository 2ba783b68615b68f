//! Seed 002: when do BR_TRANSACTION_COMPLETE, and BR_INCREFS/BR_ACQUIRE for the objects a
//! transaction carries, arrive?
//!
//! With deferral (the Rust driver queues the completion of a synchronous transaction, and
//! the node work of the objects it carries, as deferred thread work; the C driver does the
//! same with `binder_enqueue_deferred_thread_work_ilocked` and `thread->process_todo`), a
//! non-blocking read after a synchronous BC_TRANSACTION returns none of them while the
//! server has not replied, and they come back in the same read as BR_REPLY. Without it
//! (before seed 002) they come back at once, and the read after the reply has BR_REPLY
//! alone. A oneway transaction gets its completion at once either way.
//!
//! The mode: when `/sys/kernel/debug/rust_binder/defer_tc` exists, the case runs both
//! modes, "0" (at once) and then "1" (deferred), and restores the value it found, also
//! when a check fails. Without the switch it checks the driver's fixed behaviour, which is
//! deferral for both drivers of this kernel (7.2). The modes checked are in the result's
//! message and data. (`--defer-tc-switch PATH` points the case at another file, e.g. a
//! plain file with "1" to see the immediate-mode check fail and the value restored.)

use crate::check;
use crate::common::*;
use binder::parcel::{Object, Parcel};
use binder::protocol::{Command, PtrCookie, Return, ReturnReader, TransactionData, WriteBuf};
use binder::uapi::*;
use binder::{Binder, Device, OpenOptions, Reply};
use serde_json::{json, Value};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use labproto::DEFER_TC_FILE as DEFER_TC_SWITCH;
const CODE_SYNC: u32 = 1;
const CODE_ONEWAY: u32 = 2;
/// Synchronous, carrying a binder object of the client; the server keeps the buffer (and
/// with it the reference) until the next transaction.
const CODE_SYNC_OBJ: u32 = 3;

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

/// Several non-blocking reads, 10 ms apart.
fn read_a_while(dev: &Device) -> Result<Vec<Return>, CaseError> {
    let mut got = vec![];
    for _ in 0..5 {
        if let Some(r) = read_once(dev, 256)? {
            got.extend(r.into_iter().filter(|r| *r != Return::Noop));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(got)
}

fn names(rets: &[Return]) -> Vec<&'static str> {
    rets.iter().filter(|r| **r != Return::Noop).map(|r| r.name()).collect()
}

fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort_unstable();
    v
}

fn write_only(dev: &Device, cmds: &[Command]) -> CaseResult {
    let mut wb = WriteBuf::new();
    for &c in cmds {
        wb.push(c);
    }
    let (consumed, _) = dev.write_read(wb.as_bytes(), &mut []).ctx("write commands")?;
    check!(consumed == wb.len(), "driver consumed {consumed} of {} bytes", wb.len());
    Ok(())
}

/// Restores the switch (path, value) when dropped (also when a check failed).
pub struct Restore<'a>(pub &'a str, pub String);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(self.0, &self.1) {
            eprintln!("could not restore {} to {:?}: {e}", self.0, self.1);
        }
    }
}

pub fn set_switch(path: &str, v: &str) -> CaseResult {
    std::fs::write(path, v).ctx(&format!("writing {v} to {path}"))?;
    let back = std::fs::read_to_string(path).ctx(&format!("reading {path}"))?;
    check!(back.trim() == v, "{path} reads {:?} after writing {v}", back.trim());
    Ok(())
}

/// The client side and the server's two channels.
struct Rig<'a> {
    ctx: &'a Ctx,
    c: &'a Device,
    h: u32,
    got_rx: mpsc::Receiver<u32>,
    go_tx: mpsc::Sender<()>,
}

impl Rig<'_> {
    fn tr(&self, flags: u32, code: u32, p: &Parcel) -> TransactionData {
        Binder::tx_data(self.h, code, flags, p)
    }

    fn server_got(&self, want: u32) -> CaseResult {
        let code = self.got_rx.recv_timeout(self.ctx.t(5.0)).ctx("the server never got the transaction")?;
        check!(code == want, "server got code {code}, expected {want}");
        Ok(())
    }

    /// A synchronous transaction, written without reading: what comes before the server
    /// replies, and in the first read after. `node`: the binder object it carries.
    fn sync(&self, node: Option<u64>, m: &mut Data) -> Result<(Vec<Return>, Vec<Return>), CaseError> {
        let mut p = Parcel::new();
        p.write_bytes(b"seed 002");
        let code = match node {
            Some(ptr) => {
                p.write_object(Object::binder(ptr, !ptr));
                CODE_SYNC_OBJ
            }
            None => CODE_SYNC,
        };
        write_only(self.c, &[Command::Transaction(self.tr(0, code, &p))])?;
        self.server_got(code)?;
        // The transaction is with the server and unanswered: look (several times) without
        // blocking.
        let before = read_a_while(self.c)?;
        let key = if node.is_some() { "object_" } else { "" };
        m.insert(format!("{key}before_reply"), json!(names(&before)));
        check!(
            !before.iter().any(|r| matches!(r, Return::Reply(_) | Return::FailedReply | Return::DeadReply)),
            "a reply before the server replied: {:?}",
            names(&before)
        );
        // The server replies; the next read must carry the reply.
        self.go_tx.send(()).ctx("release the server")?;
        let t = Instant::now();
        check!(self.c.poll_readable(self.ctx.t(5.0))?, "nothing to read within {:?} of the reply", self.ctx.t(5.0));
        let after: Vec<Return> =
            read_once(self.c, 256)?.unwrap_or_default().into_iter().filter(|r| *r != Return::Noop).collect();
        m.insert(format!("{key}reply_read"), json!(names(&after)));
        m.insert(format!("{key}reply_wait_ms"), json!(ms(t.elapsed())));
        let reply = after.iter().find_map(|r| match r {
            Return::Reply(t) => Some(*t),
            _ => None,
        });
        let reply = reply.ctx(&format!("no BR_REPLY in the read after the reply: {:?}", names(&after)))?;
        check!(after.last() == Some(&Return::Reply(reply)), "BR_REPLY is not the last return: {:?}", names(&after));
        let text = self.c.buffer_bytes(reply.buffer, reply.data_size)?;
        check!(text == b"the reply", "reply data {text:?}");
        write_only(self.c, &[Command::FreeBuffer(reply.buffer)])?;
        Ok((before, after))
    }

    /// The checks of one mode: `defer` is what the driver must do.
    fn check_mode(&self, defer: bool, node: u64, m: &mut Data) -> CaseResult {
        // 1. A plain synchronous transaction: BR_TRANSACTION_COMPLETE only.
        let (before, after) = self.sync(None, m)?;
        let (want_before, want_after): (&[&str], &[&str]) = if defer {
            (&[], &["BR_TRANSACTION_COMPLETE", "BR_REPLY"])
        } else {
            (&["BR_TRANSACTION_COMPLETE"], &["BR_REPLY"])
        };
        check!(names(&before) == want_before, "before the reply: {:?}, expected {want_before:?}", names(&before));
        check!(
            names(&after) == want_after,
            "the read after the reply returned {:?}, expected {want_after:?}",
            names(&after)
        );
        check!(
            read_once(self.c, 256)?.map(|r| names(&r).is_empty()).unwrap_or(true),
            "leftover returns after the reply"
        );

        // 2. Carrying a new binder object of ours: the server's reference makes us (the
        // owner) get BR_INCREFS and BR_ACQUIRE for it, with the completion. (In any order
        // among themselves: seed 002 is about when they come, not their order.)
        let (before, after) = self.sync(Some(node), m)?;
        let ours = PtrCookie { ptr: node, cookie: !node };
        let refs = |rs: &[Return]| -> Vec<&'static str> {
            rs.iter()
                .filter(|r| matches!(r, Return::IncRefs(pc) | Return::Acquire(pc) if *pc == ours))
                .map(|r| r.name())
                .collect()
        };
        let node_cmds = ["BR_ACQUIRE", "BR_INCREFS", "BR_TRANSACTION_COMPLETE"];
        let (want_before, want_after): (Vec<&str>, Vec<&str>) = if defer {
            (vec![], [node_cmds.as_slice(), &["BR_REPLY"]].concat())
        } else {
            (node_cmds.to_vec(), vec!["BR_REPLY"])
        };
        check!(
            sorted(names(&before)) == want_before,
            "with an object, before the reply: {:?}, expected {want_before:?} (any order)",
            names(&before)
        );
        check!(
            sorted(names(&after)) == sorted(want_after.clone()),
            "with an object, the read after the reply returned {:?}, expected {want_after:?} (reply last)",
            names(&after)
        );
        check!(
            refs(&before).len() + refs(&after).len() == 2,
            "BR_INCREFS/BR_ACQUIRE were for another node than {node:#x}: {before:?} {after:?}"
        );
        // Take the references the driver handed us.
        write_only(self.c, &[Command::IncRefsDone(ours), Command::AcquireDone(ours)])?;
        check!(
            read_once(self.c, 256)?.map(|r| names(&r).is_empty()).unwrap_or(true),
            "leftover returns after the reply"
        );

        // 3. Oneway: the completion is there at once, deferral or not.
        let p = Parcel::from_bytes(b"seed 002");
        write_only(self.c, &[Command::Transaction(self.tr(TF_ONE_WAY, CODE_ONEWAY, &p))])?;
        let ow = read_once(self.c, 256)?.unwrap_or_default();
        m.insert("oneway_read".into(), json!(names(&ow)));
        check!(names(&ow) == ["BR_TRANSACTION_COMPLETE"], "right after a oneway transaction: {:?}", names(&ow));
        self.server_got(CODE_ONEWAY)
    }
}

pub fn tc_deferral(ctx: &Ctx, data: &mut Data) -> CaseResult {
    // (switch value to write or None, deferral expected, label).
    let switch = ctx.defer_tc_switch.as_str();
    let original = std::fs::read_to_string(switch).ok().map(|s| s.trim().to_string());
    let modes: Vec<(Option<&str>, bool, String)> = match &original {
        Some(_) => {
            vec![(Some("0"), false, "immediate (defer_tc=0)".into()), (Some("1"), true, "deferred (defer_tc=1)".into())]
        }
        // Both drivers of this kernel always defer: the C driver since "ANDROID: binder:
        // Add thread->process_todo flag", the Rust driver since it was merged.
        None => vec![(None, true, format!("deferred (fixed: no {switch}, {} driver)", ctx.driver.name()))],
    };
    data.insert("switch_found".into(), json!(original));
    let _restore = original.clone().map(|v| Restore(switch, v));

    // The server tells us when a transaction reached it, and replies when told to.
    let (got_tx, got_rx) = mpsc::channel::<u32>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let got_tx = Mutex::new(got_tx);
    let go_rx = Mutex::new(go_rx);
    let held: Arc<Mutex<Vec<u64>>> = Arc::default();
    let hold = ctx.t(10.0);
    let server = Server::start(ctx, &OpenOptions::default(), 1, None, move |b, inc| {
        // The buffer an object transaction kept goes with the next transaction.
        for p in held.lock().unwrap().drain(..) {
            b.queue(Command::FreeBuffer(p));
        }
        let _ = got_tx.lock().unwrap().send(inc.code);
        match inc.code {
            CODE_SYNC | CODE_SYNC_OBJ => {
                let _ = go_rx.lock().unwrap().recv_timeout(hold);
                if inc.code == CODE_SYNC_OBJ {
                    held.lock().unwrap().push(inc.buffer);
                    Reply::bytes(b"the reply").keep_buffer()
                } else {
                    Reply::bytes(b"the reply")
                }
            }
            _ => Reply::empty(),
        }
    })?;
    let mut cb = Binder::open(&ctx.dev).ctx("open client")?;
    let h = server.connect(&mut cb)?;
    let c = cb.device().clone();
    c.set_nonblocking(true).ctx("O_NONBLOCK on the client")?;
    let rig = Rig { ctx, c: &c, h, got_rx, go_tx };

    let mut checked = vec![];
    let mut per_mode = vec![];
    for (i, (value, defer, label)) in modes.iter().enumerate() {
        let mut m = Data::new();
        m.insert("mode".into(), json!(label));
        let r = value
            .map_or(Ok(()), |v| set_switch(switch, v))
            .and_then(|()| rig.check_mode(*defer, 0x5eed_0000 + i as u64, &mut m));
        per_mode.push(Value::Object(m));
        if let Err(CaseError::Fail(msg)) = r {
            data.insert("modes".into(), json!(per_mode));
            data.insert("checked".into(), json!(checked));
            return fail(format!("{label}: {msg}"));
        }
        r?;
        checked.push(label.clone());
    }
    data.insert("modes".into(), json!(per_mode));
    data.insert("checked".into(), json!(checked));
    data.insert(SUMMARY.into(), json!(format!("checked: {}", checked.join(", "))));

    drop(rig);
    drop(cb);
    drop(c);
    server.stop()?;
    check_no_buffers(data, getpid())
}
