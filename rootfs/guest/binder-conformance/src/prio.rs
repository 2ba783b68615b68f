//! Priority inheritance (the Android Common Kernel's semantics; rust-driver 0011).
//!
//! Each case runs its scenario in the modes the driver has: with
//! `/sys/kernel/debug/rust_binder/priority_inheritance` (`--prio-switch`), "0" (7.2's Rust
//! driver: the server keeps its own priority) and then "1" (Android's), restoring the value it
//! found; without it (the C driver of mainline), mainline C's behavior, reported as the
//! documented difference: a synchronous caller's nice value is passed on (a FIFO caller's is
//! 0), never its RT policy, and negative node minimums do nothing (the C driver keeps the
//! flags' low byte unsigned). The server observes its own policy, RT priority and
//! nice value during the call (`sched_getscheduler`, `sched_getparam`, `getpriority` on its
//! thread id) and the case reads the same from outside afterwards.
//!
//! - `prio_sync`: a SCHED_FIFO 50 caller's server runs FIFO 50 (node with
//!   FLAT_BINDER_FLAG_INHERIT_RT), a nice -5 caller's at nice -5, a nice 5 caller's at the
//!   node's minimum, nice 0; back to SCHED_OTHER nice 0 after each call.
//! - `prio_node_caps`: a node without INHERIT_RT caps a FIFO caller to SCHED_OTHER at the node's
//!   minimum (nice -10); a node with a FIFO 10 minimum raises a nice 0 caller to FIFO 10.
//! - `prio_oneway`: a FIFO caller's oneway call to a node with INHERIT_RT and minimum nice -5 runs
//!   at the server's default raised to the node's minimum (nice -5), never FIFO.
//! - `prio_nested`: A (FIFO 40) calls B (node minimum nice -10, no INHERIT_RT), B calls back A:
//!   B runs at nice -10, A's thread serves the nested call at nice -10 too (what B carries),
//!   then A is FIFO 40 again and B nice 0.
//! - `prio_dead_caller`: a FIFO 30 caller process is killed while its call is being served; the
//!   server's reply fails and its thread is back to nice 0, also for the next caller.

use crate::check;
use crate::common::*;
use crate::seed002::{set_switch, Restore};
use binder::parcel::{Object, Parcel};
use binder::uapi::*;
use binder::{Binder, CallOpts, Incoming, Reply};
use serde_json::json;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use syskit::child::fork_child;

pub use labproto::PRIO_INHERIT_FILE as PRIO_SWITCH;

const PROBE: u32 = 1;
const HOLD: u32 = 2;
const NEST: u32 = 3;

/// A thread's scheduling state as userspace sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sched {
    policy: i32,
    rt: i32,
    nice: i32,
}

const OTHER0: Sched = Sched { policy: libc::SCHED_OTHER, rt: 0, nice: 0 };

fn fifo(rt: i32) -> Sched {
    Sched { policy: libc::SCHED_FIFO, rt, nice: 0 }
}

fn nice(n: i32) -> Sched {
    Sched { policy: libc::SCHED_OTHER, rt: 0, nice: n }
}

impl Sched {
    fn of(tid: i32) -> Sched {
        let mut p = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscalls on a thread id; `p` is a valid out-pointer.
        unsafe {
            let policy = libc::sched_getscheduler(tid) & !libc::SCHED_RESET_ON_FORK;
            libc::sched_getparam(tid, &mut p);
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            // The nice value only means something for the fair policies.
            let nice = if policy == libc::SCHED_OTHER || policy == libc::SCHED_BATCH { nice } else { 0 };
            Sched { policy, rt: p.sched_priority, nice }
        }
    }

    /// Sets the calling thread to `self`.
    fn set_self(self) -> Result<(), CaseError> {
        let tid = binder::gettid();
        let p = libc::sched_param { sched_priority: self.rt };
        // SAFETY: plain syscalls on our own thread; `p` is valid for the call.
        let r = unsafe { libc::sched_setscheduler(tid, self.policy, &p) };
        check!(r == 0, "sched_setscheduler({self:?}): {}", std::io::Error::last_os_error());
        if self.policy == libc::SCHED_OTHER {
            // SAFETY: as above.
            let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, self.nice) };
            check!(r == 0, "setpriority({}): {}", self.nice, std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn to_bytes(self, tid: i32) -> Vec<u8> {
        format!("{} {} {} {tid}", self.policy, self.rt, self.nice).into_bytes()
    }

    fn parse(b: &[u8]) -> Option<(Sched, i32)> {
        let s = std::str::from_utf8(b).ok()?;
        let v: Vec<i32> = s.split(' ').filter_map(|x| x.parse().ok()).collect();
        (v.len() == 4).then(|| (Sched { policy: v[0], rt: v[1], nice: v[2] }, v[3]))
    }

    fn show(self) -> String {
        match self.policy {
            libc::SCHED_FIFO => format!("FIFO {}", self.rt),
            libc::SCHED_RR => format!("RR {}", self.rt),
            libc::SCHED_OTHER => format!("OTHER nice {}", self.nice),
            p => format!("policy {p} rt {} nice {}", self.rt, self.nice),
        }
    }
}

/// Puts the calling thread back to SCHED_OTHER nice 0 when dropped.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        let _ = OTHER0.set_self();
    }
}

/// Runs `as_caller` from the calling thread set to `s`, then puts it back.
fn as_caller<T>(s: Sched, f: impl FnOnce() -> Result<T, CaseError>) -> Result<T, CaseError> {
    let _reset = Reset;
    s.set_self()?;
    f()
}

/// Waits until thread `tid` is at `want` (a restore runs right after the reply wakes the caller).
fn settles(ctx: &Ctx, tid: i32, want: Sched) -> Result<(), CaseError> {
    let deadline = Instant::now() + ctx.t(2.0);
    loop {
        let now = Sched::of(tid);
        if now == want {
            return Ok(());
        }
        check!(Instant::now() < deadline, "thread {tid} is {} after the call, expected {}", now.show(), want.show());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The handler of a probing server: replies with what its thread runs at.
fn probe_reply() -> Reply {
    let tid = binder::gettid();
    Reply::bytes(&Sched::of(tid).to_bytes(tid))
}

/// One synchronous probe from the calling thread at `caller`: what the server ran at, and its tid.
fn probe(b: &mut Binder, h: u32, caller: Sched) -> Result<(Sched, i32), CaseError> {
    let r = as_caller(caller, || b.call(h, PROBE, &Parcel::new()).ctx("probe call"))?;
    Sched::parse(&r.data).ctx(&format!("probe reply {:?}", String::from_utf8_lossy(&r.data)))
}

/// The driver's behavior a scenario runs under.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// The Rust driver with the switch at 0: no inheritance at all.
    Off,
    /// The Rust driver with the switch at 1: Android's semantics.
    On,
    /// No switch: the C driver of mainline, which passes a synchronous caller's nice value
    /// (never its RT policy) and reads the node's minimum as an unsigned byte, so negative
    /// minimums have no effect.
    MainlineC,
}

/// Runs `scenario(mode)` in every mode the driver has (see the module doc) and reports them.
fn in_modes(
    ctx: &Ctx,
    data: &mut Data,
    mut scenario: impl FnMut(Mode, &mut Data) -> Result<String, CaseError>,
) -> CaseResult {
    let switch = ctx.prio_switch.as_str();
    let original = std::fs::read_to_string(switch).ok().map(|s| s.trim().to_string());
    data.insert("switch_found".into(), json!(original));
    let _restore = original.clone().map(|v| Restore(switch, v));
    let mut seen = vec![];
    if original.is_some() {
        for (v, mode) in [("0", Mode::Off), ("1", Mode::On)] {
            set_switch(switch, v)?;
            let what = scenario(mode, data).map_err(|e| match e {
                CaseError::Fail(m) => CaseError::Fail(format!("priority_inheritance={v}: {m}")),
                e => e,
            })?;
            seen.push(format!("{v}: {what}"));
        }
    } else {
        let what = scenario(Mode::MainlineC, data)?;
        seen.push(format!(
            "no {switch} ({} driver): mainline's nice-only inheritance, the documented difference: {what}",
            ctx.driver.name()
        ));
    }
    data.insert(SUMMARY.into(), json!(seen.join("; ")));
    Ok(())
}

/// A server of one blocking looper thread on a node with `flags`, answering probes.
fn probe_server(ctx: &Ctx, flags: u32) -> Result<(Server, Binder, u32), CaseError> {
    let server = Server::start_blocking(ctx, 1, flags, |_, inc: &Incoming| match inc.code {
        PROBE => probe_reply(),
        _ => Reply::status(-libc::EINVAL),
    })?;
    let mut b = Binder::open(&ctx.dev).ctx("open client")?;
    let h = server.connect(&mut b)?;
    Ok((server, b, h))
}

/// `flags` for a node with a minimum `policy` at `prio` (nice or RT priority).
fn node_flags(policy: i32, prio: i8, inherit_rt: bool) -> u32 {
    let rt = if inherit_rt { FLAT_BINDER_FLAG_INHERIT_RT } else { 0 };
    ((policy as u32) << FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT) | u32::from(prio as u8) | rt
}

/// Probes from each caller priority; `want(on, caller)` is what the server must run at.
fn run_probes(
    ctx: &Ctx,
    data: &mut Data,
    key: &str,
    flags: u32,
    callers: &[Sched],
    want: impl Fn(Mode, Sched) -> Sched,
) -> CaseResult {
    let (server, mut b, h) = probe_server(ctx, flags)?;
    let r = in_modes(ctx, data, |mode, d| {
        let on = mode == Mode::On;
        let mut seen = vec![];
        let mut last = None;
        for &c in callers {
            let (got, tid) = probe(&mut b, h, c)?;
            let w = want(mode, c);
            d.insert(format!("{key}_{}_{}", if on { "on" } else { "off" }, c.show()), json!(got.show()));
            check!(got == w, "a {} caller's server ran at {}, expected {}", c.show(), got.show(), w.show());
            // No wait before the next probe: its call follows the reply at once, as a client's
            // next call does, and must not find the server still at this caller's priority.
            last = Some(tid);
            seen.push(format!("{} -> {}", c.show(), got.show()));
        }
        if let Some(tid) = last {
            settles(ctx, tid, OTHER0)?;
        }
        Ok(seen.join(", "))
    });
    drop(b);
    server.stop()?;
    r
}

pub fn prio_sync(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let callers = [fifo(50), nice(-5), nice(5), OTHER0];
    run_probes(ctx, data, "sync", node_flags(libc::SCHED_OTHER, 0, true), &callers, |mode, c| {
        match (mode, c.policy) {
            (Mode::Off, _) => OTHER0,
            (Mode::On, libc::SCHED_FIFO) => c,
            // A FIFO thread's nice value is 0: the C driver passes that on.
            (Mode::MainlineC, libc::SCHED_FIFO) => OTHER0,
            // The node's minimum (nice 0) raises a weaker caller.
            (_, _) => nice(c.nice.min(0)),
        }
    })
}

pub fn prio_node_caps(ctx: &Ctx, data: &mut Data) -> CaseResult {
    run_probes(ctx, data, "capped", node_flags(libc::SCHED_OTHER, -10, false), &[fifo(50), OTHER0], |mode, _| {
        if mode == Mode::On {
            nice(-10)
        } else {
            OTHER0
        }
    })?;
    let mut rt_min = Data::new();
    run_probes(ctx, &mut rt_min, "rt_min", node_flags(libc::SCHED_FIFO, 10, true), &[OTHER0], |mode, _| {
        if mode == Mode::On {
            fifo(10)
        } else {
            OTHER0
        }
    })?;
    let first = data.get(SUMMARY).cloned().unwrap_or_default();
    let second = rt_min.get(SUMMARY).cloned().unwrap_or_default();
    data.insert(SUMMARY.into(), json!(format!("node nice -10 no RT: {first}; node FIFO 10: {second}")));
    data.insert("rt_min".into(), json!(rt_min));
    Ok(())
}

pub fn prio_oneway(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let (tx, rx) = mpsc::channel::<(Sched, i32)>();
    let tx = Mutex::new(tx);
    let server = Server::start_blocking(ctx, 1, node_flags(libc::SCHED_OTHER, -5, true), move |_, inc| {
        let tid = binder::gettid();
        let _ = tx.lock().unwrap().send((Sched::of(tid), tid));
        if inc.flags & TF_ONE_WAY != 0 {
            Reply::empty()
        } else {
            probe_reply()
        }
    })?;
    let mut b = Binder::open(&ctx.dev).ctx("open client")?;
    let h = server.connect(&mut b)?;
    let r = in_modes(ctx, data, |mode, d| {
        let on = mode == Mode::On;
        let opts = CallOpts { flags: TF_ONE_WAY, ..Default::default() };
        as_caller(fifo(50), || b.call_with(h, PROBE, &Parcel::new(), &opts, None).ctx("oneway call"))?;
        let (got, tid) = rx.recv_timeout(ctx.t(5.0)).ctx("the oneway call did not reach the server")?;
        d.insert(format!("oneway_{}", if on { "on" } else { "off" }), json!(got.show()));
        let want = if on { nice(-5) } else { OTHER0 };
        check!(got == want, "a FIFO 50 caller's oneway call ran at {}, expected {}", got.show(), want.show());
        settles(ctx, tid, OTHER0)?;
        Ok(format!("oneway from FIFO 50 -> {}", got.show()))
    });
    drop(b);
    server.stop()?;
    r
}

pub fn prio_nested(ctx: &Ctx, data: &mut Data) -> CaseResult {
    // B: notes what it runs at, then calls back the node A sent.
    let seen_b: Arc<Mutex<Option<(Sched, i32)>>> = Arc::default();
    let sb = seen_b.clone();
    let server = Server::start_blocking(ctx, 1, node_flags(libc::SCHED_OTHER, -10, false), move |b, inc| {
        let tid = binder::gettid();
        *sb.lock().unwrap() = Some((Sched::of(tid), tid));
        if inc.code != NEST {
            return Reply::status(-libc::EINVAL);
        }
        let Ok(handle) = inc.first_handle() else {
            return Reply::status(-libc::EPROTO);
        };
        match b.call(handle, PROBE, &Parcel::new()) {
            Ok(r) => Reply::bytes(&r.data),
            Err(_) => Reply::status(-libc::EIO),
        }
    })?;
    let mut a = Binder::open(&ctx.dev).ctx("open A")?;
    let h = server.connect(&mut a)?;
    let me = binder::gettid();
    let r = in_modes(ctx, data, |mode, d| {
        let on = mode == Mode::On;
        let mut in_a: Option<(Sched, i32)> = None;
        let mut nested = |_: &mut Binder, _: &Incoming| -> Reply {
            in_a = Some((Sched::of(binder::gettid()), binder::gettid()));
            probe_reply()
        };
        let mut p = Parcel::new();
        p.write_object(Object::binder(0xa0a0, 0xa1a1));
        let after_a = as_caller(fifo(40), || {
            a.call_with(h, NEST, &p, &CallOpts::default(), Some(&mut nested)).ctx("A -> B")?;
            Ok(Sched::of(me))
        })?;
        let (b_sched, b_tid) = seen_b.lock().unwrap().take().ctx("B saw no call")?;
        let (a_sched, a_tid) = in_a.ctx("A's thread served no nested call")?;
        let mode = if on { "on" } else { "off" };
        d.insert(format!("nested_{mode}"), json!([b_sched.show(), a_sched.show(), after_a.show()]));
        check!(a_tid == me, "the nested call ran on thread {a_tid}, A's caller is {me}");
        let (want_b, want_a) = if on { (nice(-10), nice(-10)) } else { (OTHER0, fifo(40)) };
        check!(b_sched == want_b, "B ran at {}, expected {}", b_sched.show(), want_b.show());
        check!(a_sched == want_a, "A served the nested call at {}, expected {}", a_sched.show(), want_a.show());
        check!(after_a == fifo(40), "A is {} after its call, expected FIFO 40", after_a.show());
        settles(ctx, b_tid, OTHER0)?;
        Ok(format!("B {}, A nested {}, A after {}", b_sched.show(), a_sched.show(), after_a.show()))
    });
    drop(a);
    server.stop()?;
    r
}

pub fn prio_dead_caller(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let dev = ctx.dev.clone();
    let hold = ctx.t(10.0);
    // The caller process, forked while this one is single-threaded: calls at FIFO 30 when told.
    let mut caller = fork_child(move |chan| {
        let r = (|| -> Result<(), String> {
            for _ in 0..2 {
                if chan.recv(Duration::from_secs(60)).map_err(|e| e.to_string())?.as_deref() != Some("call") {
                    return Ok(());
                }
                let mut b = Binder::open(&dev).map_err(|e| e.to_string())?;
                let h = binder::sm::get_service(&mut b, "lab.conformance").map_err(|e| e.to_string())?;
                fifo(30).set_self().map_err(|e| format!("{e:?}"))?;
                let _ = b.call(h, HOLD, &Parcel::new());
                OTHER0.set_self().map_err(|e| format!("{e:?}"))?;
            }
            Ok(())
        })();
        child_exit("prio caller", r)
    })
    .ctx("fork the caller")?;
    let (held_tx, held_rx) = mpsc::channel::<(Sched, i32)>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (held_tx, go_rx) = (Mutex::new(held_tx), Mutex::new(go_rx));
    let server = Server::start_blocking(ctx, 1, node_flags(libc::SCHED_OTHER, 0, true), move |_, inc| {
        let tid = binder::gettid();
        if inc.code == HOLD {
            let _ = held_tx.lock().unwrap().send((Sched::of(tid), tid));
            let _ = go_rx.lock().unwrap().recv_timeout(hold);
        }
        probe_reply()
    })?;
    let mut b = Binder::open(&ctx.dev).ctx("open client")?;
    let h = server.connect(&mut b)?;
    let r = in_modes(ctx, data, |mode, d| {
        let on = mode == Mode::On;
        caller.chan.send("call").ctx("tell the caller")?;
        let (during, tid) = held_rx.recv_timeout(ctx.t(10.0)).ctx("the caller's call did not reach the server")?;
        let want = if on { fifo(30) } else { OTHER0 };
        d.insert(format!("dead_{}", if on { "on" } else { "off" }), json!(during.show()));
        check!(during == want, "the FIFO 30 caller's server ran at {}, expected {}", during.show(), want.show());
        if on {
            // Kill the caller while its call is served, then let the server reply into the void.
            caller.kill();
            check!(caller.wait_timeout(ctx.t(5.0)).is_some(), "the caller did not die");
        }
        go_tx.send(()).ctx("release the server")?;
        settles(ctx, tid, OTHER0)?;
        let (next, _) = probe(&mut b, h, OTHER0)?;
        check!(next == OTHER0, "the next caller's call ran at {}", next.show());
        Ok(format!("during {}, after {}", during.show(), Sched::of(tid).show()))
    });
    caller.finish();
    drop(b);
    server.stop()?;
    r
}
