//! Known driver issues, as opt-in cases (`--case NAME`): they are not part of the default
//! run because both drivers fail them today. Each reports the truth: it fails while the
//! issue reproduces.
//!
//! `fd_cycle_leak`: a process sends its own binder fd in a BINDER_TYPE_FD object of a
//! oneway transaction that stays queued in its own binder process, then exits. The queued
//! transaction holds a reference to the file (the Rust driver in the allocation's file
//! list, the C driver in `t->fd_fixups`) until it is read, and only the file's release
//! would cancel it: the binder process, its nodes and buffers are never freed. AF_UNIX
//! breaks such cycles with its SCM_RIGHTS garbage collector; binder has none. The fuzzer
//! finds it when allowed to send binder fds (`binder_fuzz.binder_fds=1`).

use crate::common::*;
use binder::parcel::{Object, Parcel};
use binder::testkit::child::fork_child;
use binder::testkit::logs::Stats;
use binder::uapi::*;
use binder::{Binder, CallOpts, Device};
use serde_json::json;
use std::time::{Duration, Instant};

/// Child: becomes the context manager on fd X (accepting fds, never reading), sends a
/// oneway transaction to handle 0 from fd Y carrying X (`own`) or Y itself, and exits.
fn send_and_exit(ctx: &Ctx, own: bool) -> Result<(i32, Vec<i32>), CaseError> {
    let dev = ctx.dev.clone();
    let mut child = fork_child(move |chan| {
        let r = (|| -> Result<(), String> {
            let x = Device::open(&dev).map_err(|e| e.to_string())?;
            x.become_context_manager_retry(Some(FLAT_BINDER_FLAG_ACCEPTS_FDS), Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            let mut y = Binder::open(&dev).map_err(|e| e.to_string())?;
            let fd = if own { x.raw_fd() } else { y.raw_fd() };
            let mut p = Parcel::new();
            p.write_object(Object::fd(fd));
            y.call_with(0, 1, &p, &CallOpts { flags: TF_ONE_WAY, ..Default::default() }, None)
                .map_err(|e| e.to_string())?;
            Ok(())
        })();
        let _ = chan.send(&format!("{r:?}"));
        0
    })?;
    let sent = child.chan.recv(Duration::from_secs(15))?.unwrap_or_default();
    let st = child.wait_timeout(Duration::from_secs(15));
    if sent != "Ok(())" || st != Some(0) {
        return fail(format!("child: {sent}, exit {st:?}"));
    }
    // Give the driver's deferred release time to run.
    let t0 = Instant::now();
    loop {
        let left: Vec<i32> = Stats::read()?.procs.iter().map(|p| p.pid).collect();
        if left.is_empty() || t0.elapsed() > ctx.t(5.0) {
            return Ok((child.pid, left));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn fd_cycle_leak(ctx: &Ctx, data: &mut Data) -> CaseResult {
    // Control: the other fd of the process in the queued transaction. Everything goes.
    let (_, left) = send_and_exit(ctx, false)?;
    data.insert("control_left".into(), json!(left));
    if !left.is_empty() {
        return fail(format!("control: binder processes {left:?} remain without a cycle"));
    }
    let (pid, left) = send_and_exit(ctx, true)?;
    let st = Stats::read()?;
    data.insert(
        "cycle_left".into(),
        json!(st
            .procs
            .iter()
            .map(|p| json!({"pid": p.pid, "threads": p.threads, "nodes": p.nodes, "buffers": p.buffers}))
            .collect::<Vec<_>>()),
    );
    if !left.is_empty() {
        return fail(format!(
            "known issue: the binder process of exited pid {pid} is never released (its own fd is in a queued \
             transaction; shown as pid 0): {} process(es) left",
            left.len()
        ));
    }
    Ok(())
}
