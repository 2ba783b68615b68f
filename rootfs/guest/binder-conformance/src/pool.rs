//! libbinder's thread pool against the driver: BR_SPAWN_LOOPER comes when every looper of
//! the process is busy, and never beyond BINDER_SET_MAX_THREADS.

use crate::check;
use crate::common::{check_no_buffers, getpid, wait_for, CaseResult, Context, Ctx, Data, MGR_WAIT, SUMMARY};
use binder::pool::{PoolSize, ThreadPool};
use binder::sm::{self, ForkedServiceManager};
use binder::{Binder, Device, Reply};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Spawned loopers the pool may have (the main looper comes on top).
const MAX: u32 = 4;
/// Concurrent callers in the busy phase: more than the pool can ever have.
const CALLERS: usize = MAX as usize + 3;
/// Calls one at a time in the idle phase.
const SEQUENTIAL: usize = 10;
const QUICK: u32 = 1;
const HOLD: u32 = 2;
const NAME: &str = "lab.pool";

/// The handlers of HOLD calls wait here until the gate opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    busy: AtomicUsize,
}

impl Gate {
    fn hold(&self) {
        self.busy.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().expect("gate");
        while !*open {
            open = self.cv.wait(open).expect("gate");
        }
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }

    fn release(&self) {
        *self.open.lock().expect("gate") = true;
        self.cv.notify_all();
    }
}

/// Whether every pool thread of this process is asleep. A pool thread sleeps only in the
/// driver's wait for work, so this means each is back on the driver's list of waiting
/// threads; a thread still on its way back from a reply (under a loaded host that can take
/// longer than any fixed pause) would make the next call ask for a looper rightly.
fn pool_asleep() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    tasks.flatten().all(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("binder:") {
            return true;
        }
        // `tid (comm) S ...`: the state follows the last ')'.
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
    })
}

/// Names of this process's threads that look like libbinder's pool threads.
fn binder_thread_names() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| s.starts_with("binder:"))
        .collect();
    v.sort();
    v
}

pub fn thread_pool(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let mgr = ForkedServiceManager::start(&ctx.dev, MGR_WAIT).ctx("start the context manager process")?;
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let dev = Device::open(&ctx.dev).ctx("open the pool's device")?;
    let pool = ThreadPool::start(dev.clone(), PoolSize::Aosp { max_threads: MAX }, move |_, inc| {
        if inc.code == HOLD {
            g.hold();
        }
        Reply::bytes(&binder::gettid().to_le_bytes())
    })
    .ctx("start the thread pool")?;
    sm::add_service(&mut Binder::from_device(dev), NAME, 0x900, 0x901).ctx("register the pool's node")?;
    let cdev = Device::open(&ctx.dev).ctx("open the client device")?;
    let mut c = Binder::from_device(cdev.clone());
    let h = sm::get_service(&mut c, NAME).ctx("look the pool's node up")?;
    // The manager's references reach the pool as BR_INCREFS/BR_ACQUIRE: let that settle.
    std::thread::sleep(ctx.t(0.2));

    // Idle phase: one call at a time, each with time to get back to waiting. Both drivers
    // ask for a looper (BR_SPAWN_LOOPER) whenever a looper leaves its read with work while no
    // thread of the process waits and no request is outstanding. The first work (refcounts,
    // the first call, its transaction-complete) brings loopers back to user space several
    // times while the ones just spawned have registered but not yet entered their wait; how
    // often depends on how fast those reach it (on a loaded host, slower), so the start
    // asks for one to MAX loopers, each request answered by one thread. Once settled an idle
    // looper is always waiting, so the driver must never ask again: that is the property.
    c.transact(h, QUICK, &[], false).ctx("first call")?;
    std::thread::sleep(ctx.t(0.2));
    let back = |what: &str| {
        wait_for(ctx.t(5.0), || pool_asleep().then_some(())).ok_or_else(|| {
            crate::common::CaseError::Fail(format!("{what}: the pool's threads never all went back to waiting"))
        })
    };
    back("after the first call")?;
    let settled = (pool.threads(), pool.spawn_requests());
    for i in 0..SEQUENTIAL {
        c.transact(h, QUICK, &[], false).ctx(&format!("sequential call {i}"))?;
        std::thread::sleep(ctx.t(0.02));
        back(&format!("after sequential call {i}"))?;
    }
    let idle = (pool.threads(), pool.spawn_requests());
    data.insert("idle".into(), json!({"threads": idle.0, "spawn_requests": idle.1, "after_first_call": settled.0}));
    check!(
        (2..=MAX as usize + 1).contains(&settled.0) && settled.1 + 1 == settled.0 as u64,
        "after the first call: pool of {} threads, {} spawn requests; want 2 to {} threads (at most max threads {MAX} spawned), each spawned one requested by the driver",
        settled.0,
        settled.1,
        MAX + 1
    );
    check!(idle == settled, "one call at a time: pool of {} threads, {} spawn requests (after the first call {settled:?}); want no request while a looper waits", idle.0, idle.1);

    // Busy phase: more concurrent calls than the pool may have threads. The driver asks for
    // a looper each time all are busy, up to MAX spawned ones, and never beyond.
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let mut b = Binder::from_device(cdev.clone());
            std::thread::spawn(move || b.transact(h, HOLD, &[], false))
        })
        .collect();
    let full = MAX as usize + 1;
    let reached = wait_for(ctx.t(10.0), || (gate.busy.load(Ordering::SeqCst) >= full).then_some(()));
    // Time for any request beyond the maximum to show.
    std::thread::sleep(ctx.t(0.3));
    let busy = (gate.busy.load(Ordering::SeqCst), pool.threads(), pool.spawn_requests());
    let names = binder_thread_names();
    gate.release();
    let results: Vec<_> = callers.into_iter().map(|t| t.join()).collect();
    data.insert("busy".into(), json!({"in_handler": busy.0, "threads": busy.1, "spawn_requests": busy.2}));
    data.insert("thread_names".into(), json!(names));
    check!(reached.is_some(), "{} of {full} loopers became busy with {CALLERS} callers: the pool did not grow to max threads {MAX} + the main looper", busy.0);
    check!(busy == (full, full, u64::from(MAX)), "with {CALLERS} callers: {} in handlers, {} threads, {} spawn requests; want {full}, {full}, {MAX} (max threads {MAX})", busy.0, busy.1, busy.2);
    let want: Vec<String> = (1..=full).map(|i| format!("binder:{}_{i:X}", getpid())).collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    check!(names == want_sorted && pool.thread_names() == want, "thread names {names:?}, want libbinder's {want:?}");
    for (i, r) in results.into_iter().enumerate() {
        let r = r.map_err(|_| crate::common::CaseError::Fail(format!("caller {i} panicked")))?;
        r.ctx(&format!("caller {i}"))?;
    }
    let served = pool.served();
    check!(served == (1 + SEQUENTIAL + CALLERS) as u64, "served {served} calls");
    c.release(h)?;
    drop(c);
    pool.stop().ctx("stop the pool")?;
    mgr.stop().ctx("stop the context manager process")?;
    data.insert(
        SUMMARY.into(),
        json!(format!(
            "idle: {} threads, {} spawn requests; {CALLERS} callers: {full} threads, {MAX} spawn requests (max {MAX})",
            idle.0, idle.1
        )),
    );
    check_no_buffers(data, getpid())
}
