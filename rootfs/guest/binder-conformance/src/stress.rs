//! Seed 001: buffers allocated and freed across page boundaries by several processes and
//! threads, with checksummed payloads, while memory pressure runs the binder shrinker.
//!
//! A server process (context manager, 3 looper threads) and 3 client processes of 2
//! threads each exchange payloads of 0..64 KiB, with sizes clustered around page
//! multiples, in both directions (requests land in the server's mapping, replies in the
//! clients'). Some requests and replies are held for a while so that live and free
//! buffers interleave. Every payload carries its length, seed and an FNV-1a checksum and is
//! verified on arrival.
//!
//! Pressure: `echo 2 > /proc/sys/vm/drop_caches` every 100 ms (drop_slab runs every
//! shrinker, including binder's "android-binder" list_lru shrinker, which zaps the
//! unused-but-mapped pages of all binder mappings).
//!
//! Proof of reclaim: the Rust driver exports no shrinker counters (and
//! CONFIG_SHRINKER_DEBUG is off), so it is measured from the page tables: the binder
//! mapping's resident pages (mincore in the server, smaps Rss of every process from
//! outside) drop when the shrinker frees free-buffer pages, and rise again when new
//! transactions make the driver reinstall pages. During the load every drop_caches
//! records the Rss before and after; then a deterministic phase fills the server's
//! mapping, frees it, drops caches and refills it, and requires resident pages to go down
//! and back up, with every payload intact.

use crate::check;
use crate::common::*;
use binder::looper::Looper;
use binder::parcel::Parcel;
use binder::{Binder, Device, Error, Reply};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use syskit::child::{fork_child, Child};
use testkit::logs::Stats;
use testkit::payload;
use testkit::rng::{mix, Rng};
use testkit::{binder_rss_kb, resident_pages};

const ECHO: u32 = 1;
const HOLD_ECHO: u32 = 2;
const ONEWAY: u32 = 3;
const STATS: u32 = 4;
const FLUSH: u32 = 5;

const CLIENTS: u64 = 3;
const THREADS: u64 = 2;
/// Requests the server keeps before freeing the oldest.
const SERVER_HOLD: usize = 6;
/// Replies a client thread keeps before freeing the oldest.
const CLIENT_HOLD: usize = 3;
const MAX_LEN: u64 = 64 * 1024;
const PRESSURE_EVERY: Duration = Duration::from_millis(100);

/// The reply length and seed the server derives from a request's seed.
fn reply_for(seed: u64) -> (u64, usize) {
    let s = mix(seed ^ 0x5e_4e_4e);
    (s, (s % (MAX_LEN / 2)) as usize + payload::OVERHEAD)
}

/// Payload sizes: uniform, or within 64 bytes of a page multiple (to straddle pages).
fn pick_len(r: &mut Rng) -> usize {
    let len = if r.chance(1, 2) {
        r.range(payload::OVERHEAD as u64, MAX_LEN)
    } else {
        let pages = r.range(1, 16) * 4096;
        (pages + r.range(0, 128)).saturating_sub(64).clamp(payload::OVERHEAD as u64, MAX_LEN)
    };
    len as usize
}

fn write_drop_caches() -> std::io::Result<()> {
    std::fs::write("/proc/sys/vm/drop_caches", "2")
}

/// The server process: verifies requests, answers with derived payloads, holds some.
fn server(dev: &str, chan: &mut syskit::child::Chan) -> Result<(), String> {
    let d = Device::open(dev).map_err(|e| e.to_string())?;
    d.become_context_manager_retry(None, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let (map, map_len) = d.mapping();
    let held: Arc<Mutex<VecDeque<u64>>> = Arc::default();
    let served = Arc::new(AtomicU64::new(0));
    let corrupt = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let (h2, s2, c2, e2) = (held.clone(), served.clone(), corrupt.clone(), first_error.clone());
    let looper = Looper::spawn(d, 3, None, move |b, inc| {
        if inc.code == STATS {
            let resident = resident_pages(map, map_len).unwrap_or(0);
            let s = json!({
                "served": s2.load(Ordering::SeqCst),
                "corrupt": c2.load(Ordering::SeqCst),
                "first_error": e2.lock().unwrap().clone(),
                "resident_pages": resident,
                "map_pages": map_len / 4096,
                "held": h2.lock().unwrap().len(),
            });
            return Reply::bytes(s.to_string().as_bytes());
        }
        if inc.code == FLUSH {
            for p in h2.lock().unwrap().drain(..) {
                b.queue(binder::protocol::Command::FreeBuffer(p));
            }
            return Reply::empty();
        }
        s2.fetch_add(1, Ordering::SeqCst);
        let seed = match payload::verify(&inc.data) {
            Ok(s) => s,
            Err(e) => {
                c2.fetch_add(1, Ordering::SeqCst);
                e2.lock().unwrap().get_or_insert_with(|| format!("request code {}: {e}", inc.code));
                return Reply::status(-libc::EBADMSG);
            }
        };
        let mut reply = match inc.code {
            ONEWAY => Reply::empty(),
            _ => {
                let (rs, rl) = reply_for(seed);
                Reply::bytes(&payload::make(rs, rl))
            }
        };
        if inc.code == HOLD_ECHO {
            let mut h = h2.lock().unwrap();
            h.push_back(inc.buffer);
            while h.len() > SERVER_HOLD {
                let old = h.pop_front().unwrap();
                b.queue(binder::protocol::Command::FreeBuffer(old));
            }
            reply = reply.keep_buffer();
        }
        reply
    });
    chan.send("ready").map_err(|e| e.to_string())?;
    let _ = chan.recv(Duration::from_secs(3600));
    looper.stop().map_err(|e| e.to_string())
}

/// One client thread's load until `deadline`. Returns (ops, bytes).
fn client_thread(dev: Arc<Device>, seed: u64, deadline: Instant) -> Result<(u64, u64, u64), String> {
    let mut r = Rng::new(seed);
    let mut full = 0u64;
    let mut b = Binder::from_device(dev);
    let mut kept: VecDeque<u64> = VecDeque::new();
    let (mut ops, mut bytes) = (0u64, 0u64);
    while Instant::now() < deadline {
        let s = r.next_u64();
        let len = pick_len(&mut r);
        let req = payload::make(s, len);
        let p = Parcel::from_bytes(&req);
        let op = r.weighted(&[60, 15, 10, 15]);
        let res = match op {
            0 | 1 => b.call(0, if op == 0 { ECHO } else { HOLD_ECHO }, &p).map(|rep| (rep, false)),
            2 => b.send_oneway(0, ONEWAY, &p).map(|_| (Default::default(), true)),
            _ => b.call_keep(0, ECHO, &p, 0).map(|rep| (rep, false)),
        };
        let (rep, oneway) = match res {
            Ok(x) => x,
            Err(Error::Status(st)) => return Err(format!("server rejected a {len}-byte request as corrupt ({st})")),
            // A full mapping (held buffers plus a oneway backlog) is backpressure, not an
            // error: the driver says ENOSPC in the thread's extended error.
            Err(Error::FailedReply) => {
                let ee = b.extended_error().map_err(|e| e.to_string())?;
                if ee.param != -libc::ENOSPC {
                    return Err(format!("op {op} with {len} bytes: BR_FAILED_REPLY, extended error {ee:?}"));
                }
                full += 1;
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(format!("op {op} with {len} bytes: {e}")),
        };
        ops += 1;
        bytes += len as u64;
        if !oneway {
            let (rs, rl) = reply_for(s);
            if rep.data.len() != rl {
                return Err(format!("reply of {} bytes, expected {rl}", rep.data.len()));
            }
            payload::check(rs, &rep.data).map_err(|e| format!("reply to a {len}-byte request: {e}"))?;
            bytes += rl as u64;
            if op == 3 {
                kept.push_back(rep.buffer);
                while kept.len() > CLIENT_HOLD {
                    b.free_buffer(kept.pop_front().unwrap()).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    for k in kept {
        b.free_buffer(k).map_err(|e| e.to_string())?;
    }
    Ok((ops, bytes, full))
}

fn client(dev: &str, idx: u64, seed: u64, secs: f64, chan: &mut syskit::child::Chan) -> Result<(), String> {
    chan.expect("go", Duration::from_secs(60))?;
    let d = Device::open(dev).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let d = d.clone();
            let s = Rng::derive(seed, idx * 100 + t).next_u64();
            std::thread::spawn(move || client_thread(d, s, deadline))
        })
        .collect();
    let mut out = vec![];
    for t in threads {
        out.push(match t.join() {
            Ok(Ok((ops, bytes, full))) => json!({"ops": ops, "bytes": bytes, "enospc": full}),
            Ok(Err(e)) => json!({"error": e}),
            Err(_) => json!({"error": "thread panicked"}),
        });
    }
    chan.send(&Value::Array(out).to_string()).map_err(|e| e.to_string())
}

fn rss_each(pids: &[i32]) -> Vec<Option<u64>> {
    pids.iter().map(|&p| binder_rss_kb(p)).collect()
}

/// Sum of decreases (or increases) between two readings, over the processes read both times.
fn rss_change(a: &[Option<u64>], b: &[Option<u64>], down: bool) -> u64 {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| {
            Some(if down { x.as_ref()?.saturating_sub(*y.as_ref()?) } else { y.as_ref()?.saturating_sub(*x.as_ref()?) })
        })
        .sum()
}

fn server_stats(b: &mut Binder) -> Result<Value, CaseError> {
    let r = b.transact(0, STATS, &[], false).ctx("server stats")?;
    serde_json::from_slice(&r).ctx("server stats JSON")
}

pub fn stress_shrinker(ctx: &Ctx, data: &mut Data) -> CaseResult {
    check!(
        std::path::Path::new("/proc/sys/vm/drop_caches").exists(),
        "/proc/sys/vm/drop_caches missing: no way to drive the shrinker"
    );
    let stats_before = Stats::read().unwrap_or_default();
    // Processes first, while this process is single-threaded.
    let dev = ctx.dev.clone();
    let mut srv = fork_child(move |chan| child_exit("stress server", server(&dev, chan))).ctx("fork server")?;
    srv.chan.expect("ready", ctx.t(15.0)).map_err(CaseError::Fail)?;
    let secs = ctx.stress_s;
    let mut clients: Vec<Child> = vec![];
    for i in 0..CLIENTS {
        let (dev, seed) = (ctx.dev.clone(), ctx.seed);
        clients.push(
            fork_child(move |chan| child_exit(&format!("stress client {i}"), client(&dev, i, seed, secs, chan)))
                .ctx("fork client")?,
        );
    }
    let pids: Vec<i32> = std::iter::once(srv.pid).chain(clients.iter().map(|c| c.pid)).collect();
    data.insert("seed".into(), json!(format!("{:#x}", ctx.seed)));
    data.insert("processes".into(), json!({"server": 1, "clients": CLIENTS, "threads_per_client": THREADS}));

    // Load with pressure.
    for c in &mut clients {
        c.chan.send("go")?;
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(secs);
    let (mut drops, mut reclaim_events, mut reclaimed_kb, mut reinstalled_kb) = (0u64, 0u64, 0u64, 0u64);
    let mut last_after: Option<Vec<Option<u64>>> = None;
    let mut drop_errors = 0;
    while Instant::now() < deadline {
        std::thread::sleep(PRESSURE_EVERY);
        let before = rss_each(&pids);
        if let Some(prev) = &last_after {
            reinstalled_kb += rss_change(prev, &before, false);
        }
        if write_drop_caches().is_err() {
            drop_errors += 1;
        }
        drops += 1;
        let after = rss_each(&pids);
        let down = rss_change(&before, &after, true);
        if down > 0 {
            reclaim_events += 1;
            reclaimed_kb += down;
        }
        last_after = Some(after);
    }
    let mut ops = 0u64;
    let mut bytes = 0u64;
    let mut errors = vec![];
    let mut per_client = vec![];
    for (i, c) in clients.iter_mut().enumerate() {
        match c.chan.recv(ctx.t(30.0)) {
            Ok(Some(line)) => {
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                for t in v.as_array().into_iter().flatten() {
                    ops += t["ops"].as_u64().unwrap_or(0);
                    bytes += t["bytes"].as_u64().unwrap_or(0);
                    if let Some(e) = t["error"].as_str() {
                        errors.push(format!("client {i}: {e}"));
                    }
                }
                per_client.push(v);
            }
            other => errors.push(format!("client {i}: no report ({other:?})")),
        }
        let st = c.wait_timeout(ctx.t(10.0));
        if st != Some(0) && errors.is_empty() {
            errors.push(format!("client {i} exit status {st:?}"));
        }
    }
    data.insert("load_s".into(), json!(ms(t0.elapsed()) / 1000.0));
    data.insert("ops".into(), json!(ops));
    data.insert("mib_moved".into(), json!(bytes / (1024 * 1024)));
    data.insert("per_client".into(), Value::Array(per_client));
    data.insert(
        "load_pressure".into(),
        json!({"drop_caches": drops, "drop_errors": drop_errors, "rss_drops": reclaim_events,
               "reclaimed_kb": reclaimed_kb, "reinstalled_kb": reinstalled_kb}),
    );

    // Deterministic reclaim and reinstall in the server's mapping.
    let mut b = Binder::open(&ctx.dev).ctx("open observer")?;
    let fill = |b: &mut Binder, tag: u64| -> Result<(), CaseError> {
        // Held requests of 100 KB: SERVER_HOLD of them cover 600 KB of the mapping.
        for i in 0..SERVER_HOLD as u64 {
            let s = mix(tag + i);
            let rep = b.call(0, HOLD_ECHO, &Parcel::from_bytes(&payload::make(s, 100_000))).ctx("fill")?;
            let (rs, _) = reply_for(s);
            payload::check(rs, &rep.data).map_err(|e| CaseError::Fail(format!("fill reply: {e}")))?;
        }
        Ok(())
    };
    fill(&mut b, 1000)?;
    let full = server_stats(&mut b)?;
    b.transact(0, FLUSH, &[], false).ctx("flush")?;
    let freed = server_stats(&mut b)?;
    let rss_freed = binder_rss_kb(srv.pid).unwrap_or(0);
    // One drop_caches can catch the freed pages still on their way to the shrinker's LRU and
    // reclaim only a few; then the refill lands in resident pages and shows nothing. Repeat
    // (a few times at most) until most of them are gone.
    let mut reclaimed = freed.clone();
    for _ in 0..5 {
        write_drop_caches().ctx("drop_caches")?;
        reclaimed = server_stats(&mut b)?;
        if reclaimed["resident_pages"].as_u64().unwrap_or(0) * 2 <= freed["resident_pages"].as_u64().unwrap_or(0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_reclaimed = binder_rss_kb(srv.pid).unwrap_or(0);
    fill(&mut b, 2000)?;
    let refilled = server_stats(&mut b)?;
    let rss_refilled = binder_rss_kb(srv.pid).unwrap_or(0);
    b.transact(0, FLUSH, &[], false).ctx("flush")?;
    let pages = |v: &Value| v["resident_pages"].as_u64().unwrap_or(0);
    data.insert(
        "server_resident_pages".into(),
        json!({"held": pages(&full), "freed": pages(&freed), "after_drop_caches": pages(&reclaimed),
               "refilled": pages(&refilled), "map_pages": full["map_pages"]}),
    );
    data.insert(
        "server_binder_rss_kb".into(),
        json!({"freed": rss_freed, "after_drop_caches": rss_reclaimed, "refilled": rss_refilled}),
    );
    let end = server_stats(&mut b)?;
    data.insert("server".into(), end.clone());
    drop(b);
    srv.chan.send("exit")?;
    let st = srv.wait_timeout(ctx.t(15.0));
    let stats_after = Stats::read().unwrap_or_default();
    let delta = |k: &str| stats_after.counter(k).saturating_sub(stats_before.counter(k));
    data.insert(
        "binder_stats_delta".into(),
        json!({"BC_TRANSACTION": delta("BC_TRANSACTION"), "BC_REPLY": delta("BC_REPLY"),
               "BC_FREE_BUFFER": delta("BC_FREE_BUFFER"), "BR_FAILED_REPLY": delta("BR_FAILED_REPLY")}),
    );

    check!(errors.is_empty(), "{}", errors.join("; "));
    check!(end["corrupt"].as_u64() == Some(0), "server saw corrupted requests: {}", end["first_error"]);
    check!(st == Some(0), "server exit status {st:?}");
    check!(ops > 0 && drops > 0, "no load ({ops} ops) or no pressure ({drops} drops)");
    check!(drop_errors == 0, "{drop_errors} writes to drop_caches failed");
    check!(
        pages(&reclaimed) < pages(&freed),
        "drop_caches did not reclaim free buffer pages: {} resident before, {} after",
        pages(&freed),
        pages(&reclaimed)
    );
    check!(
        pages(&refilled) > pages(&reclaimed),
        "pages were not reinstalled: {} resident after reclaim, {} after refilling",
        pages(&reclaimed),
        pages(&refilled)
    );
    check!(reclaim_events > 0, "no drop_caches during the load reduced the binder mappings' Rss");
    Ok(())
}
