//! Basic protocol cases: version, context manager, round trips, oneway ordering, nested
//! calls, death notifications, reference counting, fd passing, buffer exhaustion and a
//! service registry on handle 0.
//!
//! Servers run as threads with their own binder fd (a separate binder process to the
//! driver) unless the case needs a real process: the death notification server must
//! exit, and fds are passed between separate fd tables. A thread server is reached through
//! a handle from a context manager in a forked process ([`Server`]): the C driver refuses
//! calls to handle 0 from the process that owns the manager.

use crate::check;
use crate::common::*;
use binder::looper::Looper;
use binder::parcel::{Object, Parcel};
use binder::protocol::Return;
use binder::uapi::*;
use binder::{sm, Binder, CallOpts, Device, Error, EventLog, Incoming, OpenOptions, Reply};
use serde_json::{json, Value};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use syskit::child::fork_child;
use testkit::kmsg::{self, Kmsg};
use testkit::payload;
use testkit::rng::mix;
use testkit::Driver;

fn client(ctx: &Ctx) -> Result<Binder, CaseError> {
    Binder::open(&ctx.dev).ctx("open client device")
}

pub fn binder_version(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let a = Device::open(&ctx.dev).ctx("open")?;
    let v = a.version().ctx("BINDER_VERSION")?;
    data.insert("protocol_version".into(), json!(v));
    data.insert("driver".into(), json!(ctx.driver.name()));
    data.insert("driver_evidence".into(), json!(Driver::evidence()));
    check!(v == BINDER_CURRENT_PROTOCOL_VERSION, "protocol_version {v}, expected {BINDER_CURRENT_PROTOCOL_VERSION}");
    // Any open file answers, also one without a mapping.
    let b = Device::open_with(&ctx.dev, &OpenOptions { map_size: 0, ..Default::default() }).ctx("open unmapped")?;
    let v2 = b.version().ctx("BINDER_VERSION without mapping")?;
    check!(v2 == v, "second fd reports version {v2}");
    // SAFETY: the pointer is a PROT_NONE page: the kernel's copy fails, nothing is written.
    let r = unsafe { a.ioctl_raw(BINDER_VERSION, bad_ptr() as *mut libc::c_void) };
    // The drivers differ (docs/src/guide/conformance-and-fuzz.md, "C vs Rust driver differences"): the C driver turns the
    // failed put_user into EINVAL, the Rust driver returns the copy's EFAULT.
    let want = match ctx.driver {
        Driver::C => libc::EINVAL,
        Driver::Rust => libc::EFAULT,
    };
    let got = r.as_ref().err().and_then(|e| e.raw_os_error());
    data.insert("bad_pointer_errno".into(), json!(got));
    check!(
        got == Some(want),
        "BINDER_VERSION to a bad pointer: {r:?}, expected errno {want} ({} driver)",
        ctx.driver.name()
    );
    Ok(())
}

pub fn context_manager(ctx: &Ctx, data: &mut Data) -> CaseResult {
    // The manager is its own process, which answers our questions about its fd; the C
    // driver refuses calls to handle 0 from the manager's process (bad_invalid_handle).
    let dev = ctx.dev.clone();
    let mut mgr = fork_child(move |chan| {
        let r = (|| -> Result<(), String> {
            let m = Device::open(&dev).map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            m.become_context_manager_retry(None, MGR_WAIT).map_err(|e| format!("first BINDER_SET_CONTEXT_MGR: {e}"))?;
            chan.send(&format!("set {}", ms(t0.elapsed()))).map_err(|e| e.to_string())?;
            chan.expect("again?", Duration::from_secs(60))?;
            let e = m.become_context_manager().err().and_then(|e| e.errno());
            chan.send(&format!("{}", e.unwrap_or(0))).map_err(|e| e.to_string())?;
            let looper = Looper::spawn(m, 1, None, |_, inc| Reply::bytes(&[inc.data.as_slice(), b"@mgr"].concat()));
            chan.send("serving").map_err(|e| e.to_string())?;
            chan.expect("exit", Duration::from_secs(60))?;
            // Closing the manager's only fd releases the context manager.
            looper.stop().map_err(|e| e.to_string())
        })();
        child_exit("context manager process", r)
    })
    .ctx("fork the manager")?;
    let line = mgr.chan.recv(ctx.t(15.0)).ctx("the manager process")?.ctx("the manager process did not answer")?;
    let set_ms: f64 =
        line.strip_prefix("set ").and_then(|v| v.parse().ok()).ctx(&format!("manager process: {line}"))?;
    data.insert("set_ms".into(), json!(set_ms));
    let other = Device::open(&ctx.dev).ctx("open second")?;
    let e = other.become_context_manager().err().and_then(|e| e.errno());
    data.insert("second_process_errno".into(), json!(e));
    check!(e == Some(libc::EBUSY), "a second process got {e:?} instead of EBUSY");
    mgr.chan.send("again?")?;
    let e = mgr.chan.recv(ctx.t(5.0)).ctx("the manager process")?.ctx("the manager process did not answer")?;
    check!(e == libc::EBUSY.to_string(), "the manager setting itself again got errno {e} instead of EBUSY");
    let e = other.become_context_manager_ext(0, 0x10, 0x20).err().and_then(|e| e.errno());
    check!(e == Some(libc::EBUSY), "BINDER_SET_CONTEXT_MGR_EXT while set got {e:?} instead of EBUSY");

    // Handle 0 now reaches the manager.
    mgr.chan.expect("serving", ctx.t(5.0)).map_err(CaseError::Fail)?;
    let mut c = client(ctx)?;
    let r = c.transact(0, 1, b"hello", false).ctx("call handle 0")?;
    check!(r == b"hello@mgr", "handle 0 answered {:?}", String::from_utf8_lossy(&r));
    mgr.chan.send("exit")?;
    let st = mgr.wait_timeout(ctx.t(10.0));
    check!(st == Some(0), "manager process exit status {st:?}");
    drop(c);
    // Once the manager's file is released, another process can take over.
    let t1 = Instant::now();
    other.become_context_manager_retry(None, MGR_WAIT).ctx("taking over after the manager closed")?;
    data.insert("takeover_ms".into(), json!(ms(t1.elapsed())));
    Ok(())
}

/// Request of size `len` for round trip `i`, and the reply the server sends back.
fn rt_seed(i: u32) -> u64 {
    mix(0xa11ce ^ i as u64)
}

pub fn round_trip_sizes(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const SIZES: &[usize] =
        &[0, 1, 3, 8, 24, 100, 1000, 4095, 4096, 4097, 8191, 8192, 12289, 16384, 32768, 49152, 65535, 65536];
    const REPEAT: u32 = 3;
    let mgr = Server::start(ctx, &OpenOptions::default(), 1, None, |_, inc| {
        let seed = rt_seed(inc.code);
        if payload::check(seed, &inc.data).is_err() {
            return Reply::status(-libc::EBADMSG);
        }
        Reply::bytes(&payload::make(!seed, inc.data.len()))
    })?;
    let mut c = client(ctx)?;
    let h = mgr.connect(&mut c)?;
    let mut per_size = serde_json::Map::new();
    let mut code = 0u32;
    for &len in SIZES {
        let mut lat = vec![];
        for _ in 0..REPEAT {
            code += 1;
            let req = payload::make(rt_seed(code), len);
            let t = Instant::now();
            let reply = match c.call(h, code, &Parcel::from_bytes(&req)) {
                Ok(r) => r,
                Err(Error::Status(s)) => return fail(format!("{len} B: the server found the request corrupted ({s})")),
                Err(e) => return fail(format!("{len} B: {e}")),
            };
            lat.push(t.elapsed());
            check!(reply.data.len() == len, "{len} B: reply has {} bytes", reply.data.len());
            if let Err(e) = payload::check(!rt_seed(code), &reply.data) {
                return fail(format!("{len} B: reply corrupted: {e}"));
            }
            check!(reply.sender_pid == 0, "reply sender_pid {} (replies carry none)", reply.sender_pid);
        }
        lat.sort();
        per_size.insert(len.to_string(), json!(ms(lat[lat.len() / 2])));
    }
    data.insert("median_ms_by_size".into(), Value::Object(per_size));
    data.insert("calls".into(), json!(code));
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

pub fn oneway_order(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const N: u32 = 300;
    const CODE_SEQ: u32 = 1;
    const CODE_COUNT: u32 = 2;
    let seen: Arc<Mutex<Vec<(u32, i32)>>> = Arc::default();
    let s = seen.clone();
    // One looper thread: a single-threaded server.
    let mgr = Server::start(ctx, &OpenOptions::default(), 1, None, move |_, inc| {
        let mut seen = s.lock().unwrap();
        match inc.code {
            CODE_SEQ => {
                let seq = inc.reader().read_u32().unwrap_or(u32::MAX);
                seen.push((seq, binder::gettid()));
                Reply::empty()
            }
            _ => Reply::bytes(&(seen.len() as u32).to_ne_bytes()),
        }
    })?;
    let mut c = client(ctx)?;
    let h = mgr.connect(&mut c)?;
    let t0 = Instant::now();
    for i in 0..N {
        let mut p = Parcel::new();
        p.write_u32(i).write_bytes(&payload::pattern(i as u64, (i as usize * 37) % 200));
        c.send_oneway(h, CODE_SEQ, &p).ctx(&format!("oneway #{i}"))?;
    }
    let sent = t0.elapsed();
    let count = |c: &mut Binder| -> Option<u32> {
        let r = c.transact(h, CODE_COUNT, &[], false).ok()?;
        Some(u32::from_ne_bytes(r.get(..4)?.try_into().ok()?))
    };
    let done = wait_for(ctx.t(10.0), || count(&mut c).filter(|&n| n >= N));
    let seen = seen.lock().unwrap().clone();
    data.insert("sent".into(), json!(N));
    data.insert("received".into(), json!(seen.len()));
    data.insert("send_ms".into(), json!(ms(sent)));
    data.insert("all_received_ms".into(), json!(ms(t0.elapsed())));
    check!(done.is_some(), "only {} of {N} oneway calls arrived", seen.len());
    let order: Vec<u32> = seen.iter().map(|s| s.0).collect();
    if let Some(i) = order.iter().enumerate().position(|(i, &s)| s != i as u32) {
        return fail(format!("out of order at #{i}: got {:?}", &order[i..(i + 5).min(order.len())]));
    }
    check!(seen.iter().all(|s| s.1 == seen[0].1), "a single-threaded server ran calls on several threads");
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

const CALL_BACK: u32 = 1;
const LEAF: u32 = 2;
const PING: u32 = 3;

/// B's side of the nested calls case; also B's handler for calls nested in its own.
fn b_handle(b: &mut Binder, inc: &Incoming, tids: &Mutex<Vec<(u32, i32)>>) -> Reply {
    tids.lock().unwrap().push((inc.code, binder::gettid()));
    match inc.code {
        CALL_BACK => {
            // B -> A, nested in A's call: must reach the thread of A that waits.
            let h = match inc.first_handle() {
                Ok(h) => h,
                Err(_) => return Reply::status(-libc::EINVAL),
            };
            let mut nested = |b: &mut Binder, inc: &Incoming| b_handle(b, inc, tids);
            let r = b.call_with(h, PING, &Parcel::from_bytes(b"ping from B"), &CallOpts::default(), Some(&mut nested));
            match r {
                Ok(Some(r)) => Reply::bytes(&[b"B got: ".as_slice(), &r.data].concat()),
                Ok(None) => Reply::status(-libc::EIO),
                Err(e) => Reply::status(if let Error::Status(s) = e { s } else { -libc::EIO }),
            }
        }
        LEAF => Reply::bytes(b"leaf"),
        _ => Reply::status(-libc::EINVAL),
    }
}

pub fn nested_calls(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let b_tids: Arc<Mutex<Vec<(u32, i32)>>> = Arc::default();
    let bt = b_tids.clone();
    // B: two threads, so a wrongly routed nested call would show another thread id.
    let b = Server::start(ctx, &OpenOptions::default(), 2, None, move |b, inc| b_handle(b, inc, &bt))?;
    let a_dev = Device::open(&ctx.dev).ctx("open A")?;
    // A also has an idle looper: the nested call must still go to the calling thread.
    let looper_calls = Arc::new(AtomicU64::new(0));
    let lc = looper_calls.clone();
    let a_looper = Looper::spawn(a_dev.clone(), 1, None, move |_, _| {
        lc.fetch_add(1, Ordering::SeqCst);
        Reply::status(-libc::EPROTO)
    });
    let mut a = Binder::from_device(a_dev);
    let hb = b.connect(&mut a)?;
    let my_tid = binder::gettid();
    let mut nested_seen: Vec<(u32, i32, u64, u64)> = vec![];
    let mut leaf = String::new();
    let mut nested = |a: &mut Binder, inc: &Incoming| -> Reply {
        nested_seen.push((inc.code, binder::gettid(), inc.target, inc.cookie));
        // Depth 3: A -> B -> A -> B, back on B's waiting thread.
        match a.call(hb, LEAF, &Parcel::new()) {
            Ok(r) => leaf = String::from_utf8_lossy(&r.data).into_owned(),
            Err(e) => leaf = format!("error {e}"),
        }
        Reply::bytes(b"pong from A")
    };
    let mut p = Parcel::new();
    p.write_object(Object::binder(0xa0a0, 0xa1a1));
    let reply = a.call_with(hb, CALL_BACK, &p, &CallOpts::default(), Some(&mut nested)).ctx("A -> B")?;
    let reply = reply.ctx("no reply")?;
    let text = String::from_utf8_lossy(&reply.data).into_owned();
    data.insert("reply".into(), json!(text));
    data.insert("nested_calls_in_a".into(), json!(nested_seen.len()));
    check!(text == "B got: pong from A", "final reply {text:?}");
    check!(nested_seen.len() == 1, "A's calling thread served {} nested calls", nested_seen.len());
    let (code, tid, target, cookie) = nested_seen[0];
    check!(code == PING, "nested call had code {code}");
    check!(tid == my_tid, "nested call ran on thread {tid}, the caller is {my_tid}");
    check!((target, cookie) == (0xa0a0, 0xa1a1), "nested call for node {target:#x}/{cookie:#x}");
    check!(leaf == "leaf", "A -> B -> A -> B: {leaf}");
    let bt = b_tids.lock().unwrap().clone();
    data.insert("b_calls".into(), json!(bt.iter().map(|(c, t)| json!([c, t])).collect::<Vec<_>>()));
    let outer = bt.iter().find(|x| x.0 == CALL_BACK).map(|x| x.1);
    let inner = bt.iter().find(|x| x.0 == LEAF).map(|x| x.1);
    check!(
        outer.is_some() && outer == inner,
        "B's nested leaf call ran on thread {inner:?}, its outer call on {outer:?}"
    );
    check!(looper_calls.load(Ordering::SeqCst) == 0, "A's idle looper thread got the nested call");
    drop(a);
    a_looper.stop().ctx("stop A's looper")?;
    b.stop()?;
    check_no_buffers(data, getpid())
}

pub fn death_notification(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const COOKIE_EARLY: u64 = 0xdead_0001;
    const COOKIE: u64 = 0xdead_0002;
    let dev = ctx.dev.clone();
    // The server is a real process: it becomes handle 0, then exits when told.
    let mut server = fork_child(move |chan| {
        let r = (|| -> Result<(), String> {
            let d = Device::open(&dev).map_err(|e| e.to_string())?;
            d.become_context_manager_retry(None, MGR_WAIT).map_err(|e| e.to_string())?;
            let looper = Looper::spawn(d, 1, None, |_, _| Reply::bytes(b"alive"));
            chan.send("ready").map_err(|e| e.to_string())?;
            let _ = chan.recv(Duration::from_secs(600));
            // Exit with the binder fd still open and the looper running: the process
            // dies, and the driver has to notice.
            std::mem::forget(looper);
            Ok(())
        })();
        child_exit("death server", r)
    })
    .ctx("fork server")?;
    server.chan.expect("ready", ctx.t(15.0)).map_err(CaseError::Fail)?;

    let mut b = client(ctx)?;
    // Process-wide work (death notifications) goes to looper threads.
    b.enter_looper().ctx("BC_ENTER_LOOPER")?;
    b.auto_dead_binder_done = false;
    let alive = b.transact(0, 1, b"?", false).ctx("call the server")?;
    check!(alive == b"alive", "server answered {alive:?}");
    b.acquire(0).ctx("BC_ACQUIRE 0")?;

    // Register and clear while the server lives: BR_CLEAR_DEATH_NOTIFICATION_DONE.
    b.request_death(0, COOKIE_EARLY).ctx("request death")?;
    b.clear_death(0, COOKIE_EARLY).ctx("clear death")?;
    let t = Instant::now();
    let r = b.wait_event(ctx.t(5.0), |r| *r == Return::ClearDeathNotificationDone(COOKIE_EARLY))?;
    check!(r.is_some(), "no BR_CLEAR_DEATH_NOTIFICATION_DONE for a live node within {:?}", ctx.t(5.0));
    data.insert("clear_done_live_ms".into(), json!(ms(t.elapsed())));

    // Now the real thing: the server process exits.
    b.request_death(0, COOKIE).ctx("request death")?;
    let t = Instant::now();
    server.chan.send("exit").ctx("tell the server to exit")?;
    let st = server.wait_timeout(ctx.t(10.0));
    data.insert("server_exit".into(), json!(st));
    check!(st == Some(0), "server exit status {st:?}");
    let r = b.wait_event(ctx.t(10.0), |r| *r == Return::DeadBinder(COOKIE))?;
    check!(r.is_some(), "no BR_DEAD_BINDER within {:?} of the server's exit", ctx.t(10.0));
    data.insert("dead_binder_ms".into(), json!(ms(t.elapsed())));
    let early = b.take_events().into_iter().filter(|e| *e == Return::DeadBinder(COOKIE_EARLY)).count();
    check!(early == 0, "BR_DEAD_BINDER for a cleared notification");

    // Clear it, then acknowledge: BR_CLEAR_DEATH_NOTIFICATION_DONE follows the DONE.
    b.clear_death(0, COOKIE).ctx("clear death")?;
    b.dead_binder_done(COOKIE).ctx("BC_DEAD_BINDER_DONE")?;
    let r = b.wait_event(ctx.t(5.0), |r| *r == Return::ClearDeathNotificationDone(COOKIE))?;
    check!(r.is_some(), "no BR_CLEAR_DEATH_NOTIFICATION_DONE after BC_DEAD_BINDER_DONE");
    // No manager any more: calls to handle 0 are dead.
    let r = b.transact(0, 1, b"?", false);
    check!(matches!(r, Err(Error::DeadReply)), "call after the manager died: {r:?}");
    b.release(0).ctx("BC_RELEASE 0")?;
    let stray = b.take_events();
    check!(stray.iter().all(|e| !matches!(e, Return::DeadBinder(_))), "extra notifications: {stray:?}");
    drop(b);
    check_no_buffers(data, getpid())
}

/// Waits until `log` holds `n` events about node `ptr`; returns them.
fn node_events(log: &EventLog, ptr: u64, n: usize, timeout: Duration) -> Vec<Return> {
    let get = || -> Vec<Return> {
        log.lock()
            .unwrap()
            .iter()
            .filter(|e| match e {
                Return::IncRefs(pc) | Return::Acquire(pc) | Return::Release(pc) | Return::DecRefs(pc) => pc.ptr == ptr,
                _ => false,
            })
            .copied()
            .collect()
    };
    wait_for(timeout, || Some(get()).filter(|v| v.len() >= n)).unwrap_or_else(get)
}

fn names(ev: &[Return]) -> Vec<&'static str> {
    ev.iter()
        .map(|e| match e {
            Return::IncRefs(_) => "BR_INCREFS",
            Return::Acquire(_) => "BR_ACQUIRE",
            Return::Release(_) => "BR_RELEASE",
            Return::DecRefs(_) => "BR_DECREFS",
            _ => "?",
        })
        .collect()
}

pub fn refcounts(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const NEW_STRONG: u32 = 1;
    const NEW_WEAK: u32 = 2;
    const P: u64 = 0xb0b0;
    const C: u64 = 0xc0c0;
    const PW: u64 = 0xb1b1;
    const CW: u64 = 0xc1c1;
    let log: EventLog = Arc::default();
    let owner = Server::start(ctx, &OpenOptions::default(), 1, Some(log.clone()), |_, inc| {
        let mut p = Parcel::new();
        match inc.code {
            NEW_STRONG => p.write_object(Object::binder(P, C)),
            NEW_WEAK => p.write_object(Object::Binder { weak: true, flags: 0, ptr: PW, cookie: CW }),
            _ => return Reply::status(-libc::EINVAL),
        };
        Reply::parcel(p)
    })?;
    let odev = owner.device().clone();
    let mut c = client(ctx)?;
    let ho = owner.connect(&mut c)?;
    let short = ctx.t(0.3);
    let long = ctx.t(5.0);

    // A strong reference arrives with the reply; keep it with BC_ACQUIRE before the
    // reply buffer (and the reference it carried) goes.
    let r = c.call_keep(ho, NEW_STRONG, &Parcel::new(), 0).ctx("get a strong node")?;
    let objs = r.objects()?;
    let h = match objs.first() {
        Some(Object::Handle { weak: false, handle, .. }) => *handle,
        o => return fail(format!("expected a strong handle, got {o:?}")),
    };
    c.acquire(h)?;
    c.free_buffer(r.buffer)?;
    let ev = node_events(&log, P, 2, long);
    data.insert("after_acquire".into(), json!(names(&ev)));
    check!(names(&ev) == ["BR_INCREFS", "BR_ACQUIRE"], "owner saw {:?} after the first strong ref", names(&ev));
    let info = odev.nodes()?.into_iter().find(|n| n.ptr == P).ctx("node missing in its owner")?;
    check!(info.cookie == C && info.has_strong_ref == 1 && info.has_weak_ref == 1, "node debug info {info:?}");

    // More strong refs and a release: the owner hears nothing.
    c.acquire(h)?;
    c.release(h)?;
    std::thread::sleep(short);
    check!(node_events(&log, P, 2, Duration::ZERO).len() == 2, "owner notified while strong refs remained");
    // Keep a weak ref, drop the last strong one: BR_RELEASE only.
    c.increfs(h)?;
    c.release(h)?;
    let ev = node_events(&log, P, 3, long);
    check!(names(&ev) == ["BR_INCREFS", "BR_ACQUIRE", "BR_RELEASE"], "after the last strong ref: {:?}", names(&ev));
    std::thread::sleep(short);
    check!(node_events(&log, P, 3, Duration::ZERO).len() == 3, "BR_DECREFS while a weak ref remained");
    // Drop the weak ref: BR_DECREFS, and the node goes away in the owner.
    c.decrefs(h)?;
    let ev = node_events(&log, P, 4, long);
    data.insert("strong_node_events".into(), json!(names(&ev)));
    check!(names(&ev) == ["BR_INCREFS", "BR_ACQUIRE", "BR_RELEASE", "BR_DECREFS"], "strong node: {:?}", names(&ev));
    let gone = wait_for(long, || odev.nodes().ok().filter(|n| n.iter().all(|n| n.ptr != P)));
    check!(gone.is_some(), "node still in its owner after all refs went");

    // A weak reference alone: BR_INCREFS then BR_DECREFS, never BR_ACQUIRE.
    let r = c.call_keep(ho, NEW_WEAK, &Parcel::new(), 0).ctx("get a weak node")?;
    let hw = match r.objects()?.first() {
        Some(Object::Handle { weak: true, handle, .. }) => *handle,
        o => return fail(format!("expected a weak handle, got {o:?}")),
    };
    c.increfs(hw)?;
    c.free_buffer(r.buffer)?;
    let ev = node_events(&log, PW, 1, long);
    check!(names(&ev) == ["BR_INCREFS"], "weak node after BC_INCREFS: {:?}", names(&ev));
    c.decrefs(hw)?;
    let ev = node_events(&log, PW, 2, long);
    data.insert("weak_node_events".into(), json!(names(&ev)));
    check!(names(&ev) == ["BR_INCREFS", "BR_DECREFS"], "weak node: {:?}", names(&ev));

    // The client holds no refs now (once it drops the one on the owner's node).
    c.release(ho)?;
    let st = testkit::logs::Stats::read()?;
    let refs: u64 = st.proc(getpid()).iter().map(|p| p.refs).sum();
    check!(refs == 0, "{refs} ref(s) left in the client");
    drop(c);
    owner.stop()?;
    check_no_buffers(data, getpid())
}

fn memfd(name: &str, content: &[u8]) -> Result<OwnedFd, CaseError> {
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: cname is a valid C string.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    check!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd.try_clone()?);
    std::io::Write::write_all(&mut f, content)?;
    Ok(fd)
}

fn ino(fd: i32) -> u64 {
    // SAFETY: stat is plain data; fstat fills it for a valid fd (zeroes on error).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer.
    unsafe { libc::fstat(fd, &mut st) };
    st.st_ino
}

fn pread_all(fd: i32) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: buf is a valid writable buffer of buf.len() bytes.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
    buf.truncate(n.max(0) as usize);
    buf
}

pub fn fd_passing(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const READ_FD: u32 = 1;
    const GIVE_FD: u32 = 2;
    let dev = ctx.dev.clone();
    // The server is another process, with its own fd table.
    let mut server = fork_child(move |chan| {
        let r = (|| -> Result<(), String> {
            let d = Device::open(&dev).map_err(|e| e.to_string())?;
            // The manager node accepts fds.
            d.become_context_manager_retry(Some(FLAT_BINDER_FLAG_ACCEPTS_FDS), MGR_WAIT).map_err(|e| e.to_string())?;
            let given: Arc<Mutex<Vec<OwnedFd>>> = Arc::default();
            let looper = Looper::spawn(d, 1, None, move |_, inc| match inc.code {
                READ_FD => {
                    let fd = match inc.objects().ok().and_then(|o| o.first().copied()) {
                        Some(Object::Fd { fd, .. }) => fd as i32,
                        _ => return Reply::status(-libc::EINVAL),
                    };
                    let mut p = Parcel::new();
                    p.write_u64(ino(fd)).write_blob(&pread_all(fd)).write_i32(fd);
                    // The received fd belongs to this process now.
                    // SAFETY: the driver installed fd for us; nothing else owns it.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                    Reply::parcel(p)
                }
                GIVE_FD => match memfd("from-server", b"content from the server") {
                    Ok(f) => {
                        let mut p = Parcel::new();
                        p.write_object(Object::fd(f.as_raw_fd()));
                        // Keep it open until the reply has been sent (the next call).
                        given.lock().unwrap().push(f);
                        Reply::parcel(p)
                    }
                    Err(_) => Reply::status(-libc::ENOMEM),
                },
                _ => Reply::status(-libc::EINVAL),
            });
            chan.send("ready").map_err(|e| e.to_string())?;
            let _ = chan.recv(Duration::from_secs(600));
            looper.stop().map_err(|e| e.to_string())
        })();
        child_exit("fd server", r)
    })
    .ctx("fork server")?;
    server.chan.expect("ready", ctx.t(15.0)).map_err(CaseError::Fail)?;
    let mut c = client(ctx)?;

    // Client -> server.
    let content = format!("fd content from {}", getpid());
    let f = memfd("to-server", content.as_bytes())?;
    let mut p = Parcel::new();
    p.write_object(Object::fd(f.as_raw_fd()));
    let r = c.call(0, READ_FD, &p).ctx("send an fd")?;
    let mut rd = r.reader();
    let (their_ino, their_content, their_fd) = (rd.read_u64()?, rd.read_blob()?.to_vec(), rd.read_i32()?);
    data.insert("server_fd".into(), json!(their_fd));
    check!(their_content == content.as_bytes(), "server read {:?}", String::from_utf8_lossy(&their_content));
    check!(their_ino == ino(f.as_raw_fd()), "server got another file (ino {their_ino})");

    // Server -> client, in a reply: needs TF_ACCEPT_FDS.
    let r = c.call_keep(0, GIVE_FD, &Parcel::new(), TF_ACCEPT_FDS).ctx("receive an fd")?;
    let got = match r.objects()?.first() {
        Some(Object::Fd { fd, .. }) => *fd as i32,
        o => return fail(format!("expected an fd object, got {o:?}")),
    };
    c.free_buffer(r.buffer)?;
    let text = pread_all(got);
    // SAFETY: the driver installed `got` in our table; we own it now.
    drop(unsafe { OwnedFd::from_raw_fd(got) });
    check!(text == b"content from the server", "received fd reads {:?}", String::from_utf8_lossy(&text));

    // Without TF_ACCEPT_FDS the reply is refused.
    let r = c.call(0, GIVE_FD, &Parcel::new());
    data.insert("reply_fd_without_accept".into(), json!(format!("{:?}", r.as_ref().err())));
    check!(matches!(r, Err(Error::FailedReply)), "an fd reply without TF_ACCEPT_FDS gave {r:?}");
    // A closed fd number cannot be sent.
    let mut p = Parcel::new();
    p.write_object(Object::Fd { fd: 9999, cookie: 0 });
    let r = c.call(0, READ_FD, &p);
    check!(matches!(r, Err(Error::FailedReply)), "sending a closed fd gave {r:?}");

    server.chan.send("exit")?;
    let st = server.wait_timeout(ctx.t(10.0));
    check!(st == Some(0), "server exit status {st:?}");
    drop(c);
    check_no_buffers(data, getpid())
}

pub fn free_buffer(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const MAP: usize = 128 * 1024;
    const CHUNK: usize = 30_000;
    const BIG_REPLY: u32 = 1;
    const HOLD: u32 = 2;
    const FREE_ALL: u32 = 3;
    let held: Arc<Mutex<Vec<u64>>> = Arc::default();
    let hs = held.clone();
    let small = OpenOptions { map_size: MAP, ..Default::default() };
    let mgr = Server::start(ctx, &small, 1, None, move |b, inc| match inc.code {
        BIG_REPLY => Reply::bytes(&payload::make(inc.data.len() as u64, CHUNK)),
        HOLD => {
            if payload::verify(&inc.data).is_err() {
                return Reply::status(-libc::EBADMSG);
            }
            hs.lock().unwrap().push(inc.buffer);
            Reply::status(0).keep_buffer()
        }
        FREE_ALL => {
            let bufs: Vec<u64> = hs.lock().unwrap().drain(..).collect();
            for &p in &bufs {
                b.queue(binder::protocol::Command::FreeBuffer(p));
            }
            Reply::bytes(&(bufs.len() as u32).to_ne_bytes())
        }
        _ => Reply::status(-libc::EINVAL),
    })?;

    // 1. Replies kept in the client's (small) mapping.
    let mut c = Binder::open_with(&ctx.dev, &small).ctx("open client")?;
    let h = mgr.connect(&mut c)?;
    let fill = |c: &mut Binder, kept: &mut Vec<u64>| -> Result<usize, CaseError> {
        for i in 0..20 {
            match c.call_keep(h, BIG_REPLY, &Parcel::from_bytes(&vec![0; i]), 0) {
                Ok(r) => {
                    payload::check(i as u64, &r.data).map_err(|e| CaseError::Fail(format!("kept reply #{i}: {e}")))?;
                    kept.push(r.buffer);
                }
                Err(Error::FailedReply) => return Ok(i),
                Err(e) => return fail(format!("reply #{i}: {e}")),
            }
        }
        fail("20 replies of 30 kB fit into a 128 kB mapping")
    };
    let mut kept = vec![];
    let n1 = fill(&mut c, &mut kept)?;
    let ee = c.extended_error().ok();
    data.insert("replies_until_full".into(), json!(n1));
    data.insert(
        "extended_error".into(),
        json!(ee.map(|e| json!({"command": format!("{:#x}", e.command), "param": e.param}))),
    );
    check!((2..=MAP / CHUNK).contains(&n1), "{n1} replies of {CHUNK} B fit into {MAP} B");
    for b in kept.drain(..) {
        c.free_buffer(b)?;
    }
    let n2 = fill(&mut c, &mut kept)?;
    check!(n2 == n1, "after BC_FREE_BUFFER {n2} replies fit again, before {n1}");
    for b in kept.drain(..) {
        c.free_buffer(b)?;
    }

    // 2. Requests kept in the server's (small) mapping.
    let mut sent = 0;
    let full = loop {
        match c.call(h, HOLD, &Parcel::from_bytes(&payload::make(sent, CHUNK))) {
            Err(Error::Status(0)) => sent += 1,
            Err(Error::FailedReply) => break sent,
            r => return fail(format!("held request #{sent}: {r:?}")),
        }
        check!(sent < 20, "20 requests of 30 kB fit into a 128 kB mapping");
    };
    data.insert("requests_until_full".into(), json!(full));
    check!(full >= 2, "only {full} requests fit");
    let freed = c.transact(h, FREE_ALL, &[], false).ctx("FREE_ALL")?;
    check!(freed == (full as u32).to_ne_bytes(), "server freed {freed:?}");
    let again = c.call(h, HOLD, &Parcel::from_bytes(&payload::make(99, CHUNK)));
    check!(matches!(again, Err(Error::Status(0))), "after the server freed its buffers: {again:?}");
    c.transact(h, FREE_ALL, &[], false)?;
    drop(c);
    mgr.stop()?;
    check_no_buffers(data, getpid())
}

pub fn service_manager(ctx: &Ctx, data: &mut Data) -> CaseResult {
    const ECHO: u32 = 7;
    // The manager is another process: the service and the client here call handle 0.
    let smgr = sm::ForkedServiceManager::start(&ctx.dev, MGR_WAIT).ctx("start the context manager")?;
    // A service process with a node registered under a name.
    let sdev = Device::open(&ctx.dev)?;
    let service = Looper::spawn(sdev.clone(), 1, None, |_, inc| {
        if inc.code == ECHO {
            Reply::bytes(&[b"echo:".as_slice(), &inc.data].concat())
        } else {
            Reply::status(-libc::EINVAL)
        }
    });
    let mut sb = Binder::from_device(sdev.clone());
    sm::add_service(&mut sb, "lab.echo", 0xe0, 0xe1).ctx("add_service")?;
    // A client finds it by name and calls it.
    let mut c = client(ctx)?;
    let h = sm::get_service(&mut c, "lab.echo").ctx("get_service")?;
    data.insert("client_handle".into(), json!(h));
    check!(h != 0, "the service came back as handle 0");
    let r = c.transact(h, ECHO, b"hi", false).ctx("call the service")?;
    check!(r == b"echo:hi", "service answered {r:?}");
    let names = sm::list_services(&mut c)?;
    check!(names == ["lab.echo"], "list: {names:?}");
    let missing = sm::get_service(&mut c, "lab.missing");
    check!(matches!(missing, Err(Error::Status(s)) if s == -libc::ENOENT), "unknown name: {missing:?}");
    let node = sdev.nodes()?.into_iter().find(|n| n.ptr == 0xe0).ctx("service node missing")?;
    check!(node.has_strong_ref == 1, "service node has no strong ref: {node:?}");
    c.release(h)?;
    drop(c);
    drop(sb);
    service.stop()?;
    smgr.stop()?;
    check_no_buffers(data, getpid())
}

/// Kernel log records since `k` was last read that report a failed binder read.
fn read_failures(k: &mut Kmsg) -> Vec<String> {
    // The driver's warnings end without a newline and stay open until the next record.
    kmsg::mark("binder-conformance: nonblocking_read checkpoint");
    k.read_new().into_iter().map(|r| r.text).filter(|t| t.contains("Read failure")).collect()
}

/// A non-blocking read with no work returns EAGAIN and logs nothing: that is the expected
/// answer, not a failure (the C driver is silent too). A real failure stays visible: a read
/// into an unwritable buffer fails with EFAULT and the Rust driver logs "Read failure".
pub fn nonblocking_read(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let c = Device::open(&ctx.dev)?;
    c.set_nonblocking(true).ctx("O_NONBLOCK")?;
    let mut k = Kmsg::open_at_end().ctx("opening /dev/kmsg")?;
    // A new thread's first read returns at once with BR_NOOP on the C driver (its
    // looper_need_return starts set); the reads after it are the ones that would block.
    let mut buf = [0u8; 256];
    let _ = c.write_read(&[], &mut buf);
    let _ = read_failures(&mut k);
    for i in 0..20 {
        let mut buf = [0u8; 256];
        let r = c.write_read(&[], &mut buf);
        check!(
            matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EAGAIN)),
            "non-blocking read {i} with no work: want EAGAIN, got {r:?}"
        );
    }
    let logged = read_failures(&mut k);
    data.insert("eagain_read_failure_lines".into(), json!(logged.len()));
    check!(logged.is_empty(), "20 EAGAIN reads logged {} line(s), e.g. {:?}", logged.len(), logged.first());

    let mut bwr = binder_write_read { read_size: 256, read_buffer: 8, ..Default::default() };
    let r = c.write_read_raw(&mut bwr);
    check!(
        matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EFAULT)),
        "read into an unwritable buffer: want EFAULT, got {r:?}"
    );
    let logged = read_failures(&mut k);
    data.insert("efault_read_failure_lines".into(), logged.iter().take(2).cloned().collect::<Vec<_>>().into());
    if ctx.driver == Driver::Rust {
        check!(!logged.is_empty(), "an EFAULT read was not logged: real failures must stay visible");
    }
    Ok(())
}
