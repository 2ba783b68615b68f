//! `fd_cycle_leak`: a binder file in a transaction queued in its own binder process.
//!
//! A process holding binder fd X (a context manager that never reads) has a forked sender
//! send X in a BINDER_TYPE_FD object of a oneway transaction to X's binder process, where
//! it stays queued; both exit. The queued transaction holds the file until it is read, and
//! only the file's release cancels queued work, so nothing would ever free that binder
//! process (AF_UNIX
//! breaks such cycles with its SCM_RIGHTS garbage collector). A binder file only works in the
//! process that opened it, so the Rust driver refuses binder files in fd objects
//! (rust-driver 0009): the transaction fails with BR_FAILED_REPLY (extended error -EPERM) and
//! nothing is left. The C driver accepts it and leaks the process (pid 0 in
//! binder_logs/stats): a documented difference, reported in the message and in
//! `known_leak_pids`, which the runner's `leaks` case then accepts. The fuzzer can build the
//! same cycle when allowed to send binder fds (`binder_fuzz.binder_fds=1`).

use crate::check;
use crate::common::*;
use binder::parcel::{Object, Parcel};
use binder::uapi::*;
use binder::{Binder, CallOpts, Device, Error};
use serde_json::json;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use syskit::child::fork_child;
use testkit::logs::Stats;
use testkit::Driver;

/// Which fd the child sends in its queued transaction.
#[derive(Clone, Copy, Debug)]
enum Carried {
    /// A pipe: an ordinary file, no cycle.
    Pipe,
    /// Y, the sender's other binder fd (its file is not the target's): no cycle, but a binder file.
    OtherBinder,
    /// X, the target's own binder fd: the cycle.
    Own,
}

/// What the child saw: the call's result and the extended error after it.
struct Sent {
    result: String,
    extended_param: Option<i32>,
}

/// The sender: from its own binder fd Y, a oneway transaction to handle 0 carrying `what`
/// (X is inherited from the manager). Returns "result|extended error param".
fn send(dev: &str, x: &Device, what: Carried) -> Result<String, String> {
    let mut y = Binder::open(dev).map_err(|e| e.to_string())?;
    let (pipe_r, _pipe_w) = std::io::pipe().map_err(|e| e.to_string())?;
    let fd = match what {
        Carried::Pipe => pipe_r.as_raw_fd(),
        Carried::OtherBinder => y.raw_fd(),
        Carried::Own => x.raw_fd(),
    };
    let mut p = Parcel::new();
    p.write_object(Object::fd(fd));
    let r = y.call_with(0, 1, &p, &CallOpts { flags: TF_ONE_WAY, ..Default::default() }, None);
    let param = y.device().extended_error().map(|e| e.param.to_string()).unwrap_or_default();
    let result = match r {
        Ok(_) => "sent".to_string(),
        Err(Error::FailedReply) => "failed_reply".to_string(),
        Err(e) => format!("error: {e}"),
    };
    Ok(format!("{result}|{param}"))
}

/// Child: becomes the context manager on fd X (accepting fds, never reading); a forked
/// sender (another process, since the C driver refuses handle 0 from the manager's own
/// process) sends the transaction carrying `what`; both exit. Returns what the sender saw
/// and the binder processes left once the driver had time to release them.
fn send_and_exit(ctx: &Ctx, what: Carried) -> Result<(Sent, Vec<i32>), CaseError> {
    let dev = ctx.dev.clone();
    let mut child = fork_child(move |chan| {
        let r = (|| -> Result<String, String> {
            let x = Device::open(&dev).map_err(|e| e.to_string())?;
            x.become_context_manager_retry(Some(FLAT_BINDER_FLAG_ACCEPTS_FDS), Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            let mut sender = fork_child(|c| {
                let _ = c.send(&send(&dev, &x, what).unwrap_or_else(|e| format!("child error: {e}|")));
                0
            })
            .map_err(|e| e.to_string())?;
            let line = sender.chan.recv(Duration::from_secs(15)).map_err(|e| e.to_string())?.unwrap_or_default();
            sender.wait_timeout(Duration::from_secs(15));
            Ok(line)
        })();
        let _ = chan.send(&r.unwrap_or_else(|e| format!("child error: {e}|")));
        0
    })?;
    let line = child.chan.recv(Duration::from_secs(15))?.unwrap_or_default();
    let st = child.wait_timeout(Duration::from_secs(15));
    let (result, param) = line.split_once('|').unwrap_or((line.as_str(), ""));
    if result.starts_with("child error") || st != Some(0) {
        return fail(format!("child ({what:?}): {line}, exit {st:?}"));
    }
    let sent = Sent { result: result.to_string(), extended_param: param.parse().ok() };
    // Give the driver's deferred release time to run.
    let t0 = Instant::now();
    loop {
        let left: Vec<i32> = Stats::read()?.procs.iter().map(|p| p.pid).collect();
        if left.is_empty() || t0.elapsed() > ctx.t(5.0) {
            return Ok((sent, left));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn fd_cycle_leak(ctx: &Ctx, data: &mut Data) -> CaseResult {
    // Control: an ordinary file in the queued transaction. It is delivered, and everything goes.
    let (sent, left) = send_and_exit(ctx, Carried::Pipe)?;
    data.insert("control".into(), json!({"result": sent.result, "left": left}));
    check!(sent.result == "sent", "control: a pipe fd in a oneway transaction: {}", sent.result);
    check!(left.is_empty(), "control: binder processes {left:?} remain without a cycle");

    let (other, left) = send_and_exit(ctx, Carried::OtherBinder)?;
    data.insert("other_binder_fd".into(), json!({"result": other.result, "param": other.extended_param, "left": left}));
    check!(left.is_empty(), "another binder fd of the sender: binder processes {left:?} remain");

    let (own, left) = send_and_exit(ctx, Carried::Own)?;
    let st = Stats::read()?;
    let procs: Vec<_> = st
        .procs
        .iter()
        .map(|p| json!({"pid": p.pid, "threads": p.threads, "nodes": p.nodes, "buffers": p.buffers}))
        .collect();
    data.insert("own_binder_fd".into(), json!({"result": own.result, "param": own.extended_param, "left": procs}));
    match ctx.driver {
        Driver::Rust => {
            check!(left.is_empty(), "the fd-cycle leak: binder processes {left:?} are never released");
            for (what, s) in [("another binder fd", &other), ("the target's own binder fd", &own)] {
                check!(
                    s.result == "failed_reply" && s.extended_param == Some(-libc::EPERM),
                    "{what} in a fd object: want BR_FAILED_REPLY with extended error -EPERM, got {} ({:?})",
                    s.result,
                    s.extended_param
                );
            }
            data.insert(SUMMARY.into(), json!("binder fds refused (EPERM); nothing left"));
        }
        Driver::C => {
            // Documented difference: the C driver accepts binder fds and leaks the cycle.
            check!(own.result == "sent", "C driver: own binder fd: {}", own.result);
            data.insert("known_leak_pids".into(), json!(left));
            let m = if left.is_empty() {
                "C driver: no leak left (the cycle was broken)".to_string()
            } else {
                format!(
                    "C driver: known leak, {} binder process(es) never released (documented difference)",
                    left.len()
                )
            };
            data.insert(SUMMARY.into(), json!(m));
        }
    }
    Ok(())
}
