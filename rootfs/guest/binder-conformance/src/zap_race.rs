//! Seed 001's open point: the shrinker (binder_alloc_free_page) reinstalling race. With the
//! RFC's spinlock the shrinker clears `pages[index]` and drops the allocator lock before
//! zap_vma_range() clears the PTE. An allocation in that window sees no page, installs a new
//! one, gets -EBUSY from vm_insert_page() on the old PTE and adopts the old page through
//! get_user_pages_remote(); then the shrinker zaps the PTE and frees the page's shrinker
//! metadata. The receiver faults on its own buffer (SIGBUS from binder_vm_fault) and the
//! driver later uses the freed metadata (KASAN), or the lookup finds nothing (-ESRCH, a
//! failed transaction and "failed to find page" in the log).
//!
//! The case aims at that window instead of waiting for it. One CPU runs a thread that
//! writes drop_caches without pause and a SCHED_FIFO client; the server runs on another
//! CPU. The server frees each request buffer at once (its pages go to the shrinker's LRU),
//! spins a random 0-3 ms and replies. The reply wakes the FIFO client, which preempts the
//! shrinker thread at its next preemption point: inside the LRU walk that is
//! `spin_unlock(&lru->lock)` in binder_alloc_free_page, the start of the window. The client's
//! next request then allocates the same server pages (the server's mapping is empty again,
//! so the buffer lands at its start), under the preempted shrinker.

use crate::check;
use crate::common::*;
use binder::looper::Looper;
use binder::parcel::Parcel;
use binder::{Binder, Device, Error, Reply};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use syskit::child::{fork_child, Chan};
use testkit::payload;
use testkit::rng::Rng;

/// The CPU shared by the shrinker thread and the client, and the server's CPU.
const RACE_CPU: u32 = 1;
const SERVER_CPU: u32 = 2;
/// Request size: 16 pages of the server's mapping per call.
const REQUEST: usize = 16 * 4096;
/// The server's random delay before replying: long enough for the shrinker to reach the
/// freed pages, short enough that the reply often lands in the middle of the walk.
const MAX_DELAY_US: u64 = 3000;

fn spin_for(d: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The server process: context manager on SERVER_CPU, one looper thread.
fn server(dev: &str, seed: u64, chan: &mut Chan) -> Result<(), String> {
    benchkit::pin(SERVER_CPU)?;
    let d = Device::open(dev).map_err(|e| e.to_string())?;
    d.become_context_manager_retry(None, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let corrupt = Arc::new(AtomicU64::new(0));
    let c2 = corrupt.clone();
    let rng = std::sync::Mutex::new(Rng::new(seed));
    let looper = Looper::spawn_blocking(d, 1, move |b, inc| {
        // Free the request first: its pages go to the LRU while the shrinker runs.
        if b.free_buffer(inc.buffer).is_err() {
            return Reply::status(-libc::EIO).keep_buffer();
        }
        if payload::verify(&inc.data).is_err() {
            c2.fetch_add(1, Ordering::SeqCst);
            return Reply::status(-libc::EBADMSG).keep_buffer();
        }
        let delay = rng.lock().unwrap().below(MAX_DELAY_US);
        spin_for(Duration::from_micros(delay));
        Reply::empty().keep_buffer()
    });
    chan.send("ready").map_err(|e| e.to_string())?;
    let _ = chan.recv(Duration::from_secs(3600));
    let bad = corrupt.load(Ordering::SeqCst);
    looper.stop().map_err(|e| e.to_string())?;
    if bad > 0 {
        return Err(format!("{bad} corrupted request(s)"));
    }
    Ok(())
}

/// Makes the calling thread SCHED_FIFO (priority 10).
fn make_fifo() -> Result<(), String> {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: p is a valid sched_param; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        return Err(format!("SCHED_FIFO: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The client loop until `deadline`: returns the calls made, or the first failure.
fn client(b: &mut Binder, seed: u64, deadline: Instant) -> Result<u64, String> {
    let mut r = Rng::new(seed);
    let mut calls = 0u64;
    while Instant::now() < deadline {
        let req = payload::make(r.next_u64(), REQUEST);
        match b.call(0, 1, &Parcel::from_bytes(&req)) {
            Ok(_) => calls += 1,
            Err(Error::FailedReply) => {
                let ee = b.extended_error().map_err(|e| e.to_string())?;
                return Err(format!("call {calls}: BR_FAILED_REPLY, extended error {ee:?}"));
            }
            Err(e) => return Err(format!("call {calls}: {e}")),
        }
    }
    Ok(calls)
}

pub fn shrinker_zap_race(ctx: &Ctx, data: &mut Data) -> CaseResult {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cpus <= SERVER_CPU as usize {
        return Err(CaseError::Skip(format!("needs cpu{SERVER_CPU}; {cpus} CPU(s) online")));
    }
    let (dev, seed) = (ctx.dev.clone(), ctx.seed);
    let mut srv = fork_child(move |chan| child_exit("race server", server(&dev, seed, chan))).ctx("fork server")?;
    srv.chan.expect("ready", ctx.t(15.0)).map_err(CaseError::Fail)?;
    benchkit::pin(RACE_CPU).map_err(CaseError::Fail)?;
    let stop = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicU64::new(0));
    // Spawned before the client turns FIFO, so it stays SCHED_OTHER on RACE_CPU.
    let shrinker = {
        let (stop, drops) = (stop.clone(), drops.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
                    return false;
                }
                drops.fetch_add(1, Ordering::Relaxed);
            }
            true
        })
    };
    let mut b = Binder::open(&ctx.dev).ctx("open client")?;
    let t0 = Instant::now();
    let res = make_fifo().and_then(|_| client(&mut b, seed ^ 0xc11e, t0 + Duration::from_secs_f64(ctx.stress_s)));
    stop.store(true, Ordering::Relaxed);
    let drops_ok = shrinker.join().unwrap_or(false);
    drop(b);
    let _ = srv.chan.send("exit");
    let st = srv.wait_timeout(ctx.t(15.0));
    data.insert(
        "race".into(),
        json!({"seconds": ms(t0.elapsed()) / 1000.0, "calls": res.as_ref().ok(), "drop_caches": drops.load(Ordering::Relaxed),
               "request_bytes": REQUEST, "max_delay_us": MAX_DELAY_US, "server_exit": st}),
    );
    let calls = res.map_err(|e| CaseError::Fail(format!("client: {e} (server exit status {st:?})")))?;
    check!(drops_ok, "writing /proc/sys/vm/drop_caches failed");
    check!(
        st == Some(0),
        "server exit status {st:?} after {calls} calls (135 = SIGBUS: a zapped page under a live buffer)"
    );
    check!(calls > 0 && drops.load(Ordering::Relaxed) > 0, "no load ({calls} calls) or no shrinker runs");
    data.insert(SUMMARY.into(), json!(format!("{calls} calls, {} drop_caches", drops.load(Ordering::Relaxed))));
    Ok(())
}
