//! Tiered call latency (the CTABS seed's schd-dbg-style table): per iteration one
//! synchronous call from a SCHED_FIFO (max priority) thread and one from a SCHED_OTHER
//! thread to a server process with a few unpinned looper threads. The 16-byte payload
//! carries the caller's CPU (sched_getcpu just before the call); the server replies with its
//! CPU and scheduling policy. Each call is classified same-core / same-cluster /
//! cross-cluster by the sysfs cluster_id.
//!
//! The Rust binder driver has no real-time priority inheritance, so the FIFO caller's server
//! thread runs as SCHED_OTHER; the observed server policy is reported.
//!
//! Options: `-i N` (10000), `-s BYTES` (16, at least 16), `--server-threads N` (4),
//! `--ctabs-mode N`.

use benchkit::proc::{fork, Chan};
use benchkit::stats::{clusters, Tier};
use benchkit::{cpu_now, Args, Measure};
use binder::{looper::Looper, Binder, Device, Reply};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const CODE: u32 = 1;

fn policy_name(p: i32) -> String {
    match p {
        libc::SCHED_OTHER => "SCHED_OTHER".into(),
        libc::SCHED_FIFO => "SCHED_FIFO".into(),
        libc::SCHED_RR => "SCHED_RR".into(),
        libc::SCHED_BATCH => "SCHED_BATCH".into(),
        libc::SCHED_IDLE => "SCHED_IDLE".into(),
        6 => "SCHED_DEADLINE".into(),
        p => format!("policy {p}"),
    }
}

/// Per class: count and total latency per tier, plus the server policies seen.
#[derive(Default, Debug, Clone)]
struct ClassStats {
    count: [u64; 3],
    total_ns: [u64; 3],
    server_policy: BTreeMap<String, u64>,
    errors: u64,
}

impl ClassStats {
    fn calls(&self) -> u64 {
        self.count.iter().sum()
    }

    fn json(&self) -> Value {
        let n = self.calls();
        let mut o = serde_json::Map::new();
        for t in Tier::ALL {
            let (c, ns) = (self.count[t.index()], self.total_ns[t.index()]);
            o.insert(
                t.name().into(),
                json!({
                    "count": c,
                    "pct": if n > 0 { 100.0 * c as f64 / n as f64 } else { 0.0 },
                    "avg_ms": if c > 0 { Some(ns as f64 / c as f64 / 1e6) } else { None },
                }),
            );
        }
        Value::Object(o)
    }
}

/// The text table: one row per class and tier.
fn table(classes: &[(&str, &ClassStats)]) -> String {
    let mut s = format!("{:<6} {:<14} {:>8} {:>7} {:>10}\n", "class", "tier", "count", "%", "avg_ms");
    for (name, st) in classes {
        let n = st.calls();
        for t in Tier::ALL {
            let (c, ns) = (st.count[t.index()], st.total_ns[t.index()]);
            let pct = if n > 0 { 100.0 * c as f64 / n as f64 } else { 0.0 };
            let avg = if c > 0 { format!("{:.4}", ns as f64 / c as f64 / 1e6) } else { "-".into() };
            s += &format!("{:<6} {:<14} {:>8} {:>6.1}% {:>10}\n", name, t.name(), c, pct, avg);
        }
    }
    s
}

fn serve(threads: usize, ready: &mut Chan) -> i32 {
    let dev = match Device::open(DEVICE) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("binder-tiers server: {e}");
            return 2;
        }
    };
    let _ = dev.set_max_threads(0);
    if let Err(e) = dev.become_context_manager_retry(None, Duration::from_secs(10)) {
        eprintln!("binder-tiers server: context manager: {e}");
        return 2;
    }
    // Blocking loopers, as libbinder's thread pool: the driver sees them waiting (CTABS picks among them).
    let _looper = Looper::spawn_blocking(dev, threads, |_, _| {
        // SAFETY: sched_getscheduler(0) queries the calling thread; no preconditions.
        let policy = unsafe { libc::sched_getscheduler(0) };
        let mut r = cpu_now().to_le_bytes().to_vec();
        r.extend_from_slice(&policy.to_le_bytes());
        Reply::bytes(&r)
    });
    let _ = ready.signal();
    let _ = ready.wait();
    0
}

/// Makes the calling thread SCHED_FIFO at the maximum priority.
fn make_fifo() -> Result<(), String> {
    // SAFETY: plain sched_param for the calling thread; the functions have no other
    // preconditions.
    let r = unsafe {
        let prio = libc::sched_get_priority_max(libc::SCHED_FIFO);
        let param = libc::sched_param { sched_priority: prio };
        libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param)
    };
    if r != 0 {
        return Err(format!("SCHED_FIFO not permitted: {}", std::io::Error::from_raw_os_error(r)));
    }
    Ok(())
}

fn caller(
    fifo: bool,
    iterations: usize,
    payload: usize,
    cl: &[i64],
    barrier: &Barrier,
) -> (ClassStats, Option<String>) {
    let mut st = ClassStats::default();
    let note = if fifo { make_fifo().err() } else { None };
    let mut b = match Binder::open(DEVICE) {
        Ok(b) => b,
        Err(e) => {
            st.errors = 1;
            return (st, Some(format!("open: {e}")));
        }
    };
    let mut data = vec![0u8; payload.max(16)];
    for i in 0..iterations {
        barrier.wait();
        let me = cpu_now();
        data[..4].copy_from_slice(&me.to_le_bytes());
        data[4..12].copy_from_slice(&(i as u64).to_le_bytes());
        let t = Instant::now();
        let r = b.transact(0, CODE, &data, false);
        let ns = t.elapsed().as_nanos() as u64;
        match r {
            Ok(r) if r.len() >= 8 => {
                let server = u32::from_le_bytes(r[..4].try_into().expect("4 bytes"));
                let policy = i32::from_le_bytes(r[4..8].try_into().expect("4 bytes"));
                let tier = Tier::of(me, server, cl);
                st.count[tier.index()] += 1;
                st.total_ns[tier.index()] += ns;
                *st.server_policy.entry(policy_name(policy)).or_default() += 1;
            }
            _ => st.errors += 1,
        }
    }
    (st, note)
}

fn run(a: &Args) -> Result<bool, String> {
    let iterations: usize = a.get("i", 10000)?;
    let payload: usize = a.get("s", 16)?;
    let threads: usize = a.get("server-threads", 4)?;
    let mode = benchkit::apply_ctabs_mode(a)?;
    let (mut mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
    let mut server = fork(|| serve(threads, &mut theirs)).map_err(|e| e.to_string())?;
    drop(theirs);
    mine.wait().map_err(|_| "the server did not start".to_string())?;

    let cl = clusters();
    let t0 = Instant::now();
    let measure = Measure::start();
    let barrier = Arc::new(Barrier::new(2));
    let spawn = |fifo: bool| {
        let (cl, barrier) = (cl.clone(), barrier.clone());
        std::thread::spawn(move || caller(fifo, iterations, payload, &cl, &barrier))
    };
    let (f, o) = (spawn(true), spawn(false));
    let (fifo, fifo_note) = f.join().map_err(|_| "fifo caller panicked")?;
    let (other, other_note) = o.join().map_err(|_| "other caller panicked")?;
    let mut data = json!({});
    measure.finish(&mut data);
    let _ = mine.signal();
    server.wait();

    let fifo_permitted = fifo_note.as_deref().is_none_or(|n| !n.starts_with("SCHED_FIFO"));
    println!(
        "binder-tiers: {iterations} iterations, payload {} B, {threads} unpinned server looper threads, clusters {cl:?}",
        payload.max(16)
    );
    print!("{}", table(&[("fifo", &fifo), ("other", &other)]));
    let pol = |s: &ClassStats| s.server_policy.iter().map(|(k, v)| format!("{k} x{v}")).collect::<Vec<_>>().join(", ");
    println!(
        "note: the Rust binder driver has no real-time priority inheritance; server policy seen by the FIFO caller: {}; by the OTHER caller: {}",
        pol(&fifo),
        pol(&other)
    );
    if let Some(n) = &fifo_note {
        println!("note: {n}");
    }
    let dominant = fifo.server_policy.iter().max_by_key(|(_, v)| **v).map(|(k, _)| k.clone());
    let errors = fifo.errors + other.errors;
    let ok = errors == 0 && other_note.is_none();
    let mut d = json!({
        "classes": { "fifo": fifo.json(), "other": other.json() },
        "server_policy_fifo_caller": dominant,
        "server_policies": { "fifo": fifo.server_policy, "other": other.server_policy },
        "fifo_permitted": fifo_permitted,
        "iterations": iterations, "payload": payload.max(16), "server_threads": threads,
        "ctabs_mode": mode, "clusters": cl, "errors": errors,
    });
    for (k, v) in data.as_object().expect("object") {
        d[k] = v.clone();
    }
    let msg = match (&fifo_note, ok) {
        (_, false) => Some(format!("{errors} failed calls {}", other_note.unwrap_or_default())),
        (Some(n), true) => Some(n.clone()),
        (None, true) => None,
    };
    report("tiers", if ok { Status::Pass } else { Status::Fail }, t0.elapsed().as_secs_f64() * 1000.0, msg, d);
    Ok(ok)
}

fn main() {
    benchkit::main("tiers", &[], &["i", "s", "server-threads", "ctabs-mode"], run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json() {
        let s = ClassStats { count: [1, 3, 0], total_ns: [1_000_000, 6_000_000, 0], ..Default::default() };
        let j = s.json();
        assert_eq!(j["same_core"]["pct"], 25.0);
        assert_eq!(j["same_cluster"]["avg_ms"], 2.0);
        assert!(j["cross_cluster"]["avg_ms"].is_null());
        let t = table(&[("fifo", &s)]);
        assert!(t.contains("fifo   same_cluster          3   75.0%     2.0000"), "{t}");
        assert!(t.lines().nth(3).unwrap().ends_with(" -"));
        assert_eq!(policy_name(libc::SCHED_FIFO), "SCHED_FIFO");
    }
}
