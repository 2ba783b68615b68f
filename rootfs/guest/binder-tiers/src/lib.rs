//! Port of AOSP's schd-dbg (frameworks/native/libs/binder/tests/schd-dbg.cpp) in the shape
//! the CTABS seed measured with (its schd-dbg-ctabs variant): `--pair N` server/client
//! process pairs, each process serving with libbinder's thread pool and registered with a
//! service manager. Per iteration a client makes one call from a new SCHED_FIFO
//! (max priority) thread and then one from its SCHED_OTHER main thread to its server. The
//! request carries the caller's priority and CPU (sched_getcpu just before the call); the
//! server replies with a priority mismatch flag, a CPU mismatch flag, its CPU and its policy.
//! Each call is classified same-core / same-cluster / cross-cluster by the sysfs cluster_id.
//!
//! Mainline's Rust binder driver has no real-time priority inheritance, so the FIFO caller's
//! server thread runs as SCHED_OTHER; the policies seen are reported. With rust-driver 0011's
//! `priority_inheritance` on (`--prio-inherit 1` for this run, or
//! `--append rust_binder.priority_inheritance=1`) the server takes the caller's priority, a
//! real-time one only with `--inherit-rt` (the servers' nodes carry Android's
//! FLAT_BINDER_FLAG_INHERIT_RT, which schd-dbg's do not set: without it Android's driver serves
//! a FIFO caller at SCHED_NORMAL nice 0). The switch's value in effect is reported.
//!
//! Options: `-i N` (100, as schd-dbg), `--pair N` (1), `-s BYTES` (16, at least 8),
//! `--threads N` (a fixed pool of N loopers instead of libbinder's), `--ctabs-mode N`,
//! `--prio-inherit 0|1` (set for this run, then restored), `--inherit-rt`.
//! docs/src/guide/bench.md lists what still differs from the original.

use benchkit::proc::{fork, Chan, Child};
use benchkit::stats::{clusters, Tier};
use benchkit::{cpu_now, Args, Measure};
use binder::parcel::Parcel;
use binder::pool::{PoolSize, ThreadPool};
use binder::sm::{self, ForkedServiceManager};
use binder::uapi::TF_ACCEPT_FDS;
use binder::{Binder, CallOpts, Device, Incoming, Reply};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const BINDER_NOP: u32 = 1;
/// Server policies counted: SCHED_OTHER, SCHED_FIFO, anything else.
const POLICIES: [&str; 3] = ["SCHED_OTHER", "SCHED_FIFO", "other"];

fn policy_index(p: i32) -> usize {
    match p {
        libc::SCHED_OTHER => 0,
        libc::SCHED_FIFO => 1,
        _ => 2,
    }
}

/// Per class: count and total latency per tier, plus the server policies seen.
#[derive(Default, Debug, Clone, PartialEq)]
struct ClassStats {
    count: [u64; 3],
    total_ns: [u64; 3],
    server_policy: [u64; 3],
    errors: u64,
    /// Calls whose server thread had another priority (schd-dbg's "inheritance").
    priority_mismatch: u64,
    /// Calls served on another CPU than the caller's (schd-dbg's "SYNC").
    cpu_mismatch: u64,
    /// FIFO callers that could not become SCHED_FIFO.
    fifo_denied: u64,
}

impl ClassStats {
    const WORDS: usize = 13;

    fn calls(&self) -> u64 {
        self.count.iter().sum()
    }

    fn add(&mut self, o: &ClassStats) {
        for i in 0..3 {
            self.count[i] += o.count[i];
            self.total_ns[i] += o.total_ns[i];
            self.server_policy[i] += o.server_policy[i];
        }
        self.errors += o.errors;
        self.priority_mismatch += o.priority_mismatch;
        self.cpu_mismatch += o.cpu_mismatch;
        self.fifo_denied += o.fifo_denied;
    }

    fn to_words(&self) -> Vec<u64> {
        let mut v = [self.count, self.total_ns, self.server_policy].concat();
        v.extend([self.errors, self.priority_mismatch, self.cpu_mismatch, self.fifo_denied]);
        v
    }

    fn from_words(w: &[u64]) -> Option<ClassStats> {
        if w.len() != Self::WORDS {
            return None;
        }
        let three = |i: usize| [w[i], w[i + 1], w[i + 2]];
        Some(ClassStats {
            count: three(0),
            total_ns: three(3),
            server_policy: three(6),
            errors: w[9],
            priority_mismatch: w[10],
            cpu_mismatch: w[11],
            fifo_denied: w[12],
        })
    }

    fn policies(&self) -> Value {
        let m: serde_json::Map<String, Value> = POLICIES
            .iter()
            .zip(self.server_policy)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect();
        Value::Object(m)
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

/// The calling thread's policy and priority, from the kernel: glibc's pthread_getschedparam()
/// caches the first values it reads for a thread, so it never sees a priority the driver set.
fn thread_sched() -> (i32, i32) {
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscalls on the calling thread (0); `param` is a valid out-pointer.
    let policy = unsafe {
        libc::sched_getparam(0, &mut param);
        libc::sched_getscheduler(0)
    };
    // Inherited policies are set with SCHED_RESET_ON_FORK, which the policy reports.
    (policy & !libc::SCHED_RESET_ON_FORK, param.sched_priority)
}

/// BINDER_NOP: request [caller priority, caller CPU]; reply [priority differs, CPU differs,
/// server CPU, server policy].
fn serve_nop(inc: &Incoming) -> Reply {
    let word = |i: usize| inc.data.get(4 * i..4 * i + 4).map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")));
    let (policy, prio) = thread_sched();
    let cpu = cpu_now() as i32;
    let h = i32::from(word(0) != Some(prio));
    let s = i32::from(word(1) != Some(cpu));
    let r: Vec<u8> = [h, s, cpu, policy].iter().flat_map(|v| v.to_le_bytes()).collect();
    Reply::bytes(&r)
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

/// One timed call to `target`, classified into `st`.
fn timed_call(b: &mut Binder, target: u32, payload: usize, cl: &[i64], st: &mut ClassStats) {
    let (_, prio) = thread_sched();
    let me = cpu_now();
    let mut data = vec![0u8; payload.max(8) / 4 * 4];
    data[..4].copy_from_slice(&prio.to_le_bytes());
    data[4..8].copy_from_slice(&(me as i32).to_le_bytes());
    let p = Parcel::from_bytes(&data);
    let opts = CallOpts { flags: TF_ACCEPT_FDS, ..Default::default() };
    let t = Instant::now();
    let r = b.call_with(target, BINDER_NOP, &p, &opts, None);
    let ns = t.elapsed().as_nanos() as u64;
    let words = r.ok().flatten().map(|inc| {
        inc.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect::<Vec<_>>()
    });
    match words.as_deref() {
        Some([h, s, server, policy, ..]) => {
            let tier = Tier::of(me, *server as u32, cl);
            st.count[tier.index()] += 1;
            st.total_ns[tier.index()] += ns;
            st.server_policy[policy_index(*policy)] += 1;
            st.priority_mismatch += *h as u64;
            st.cpu_mismatch += *s as u64;
        }
        _ => st.errors += 1,
    }
}

#[derive(Clone, Copy)]
struct Opts {
    iterations: usize,
    pairs: usize,
    payload: usize,
    pool: PoolSize,
    /// The servers' nodes carry FLAT_BINDER_FLAG_INHERIT_RT.
    inherit_rt: bool,
}

fn service_name(i: usize) -> String {
    format!("binderWorker{i}")
}

/// schd-dbg's `worker_fx`: workers below `pairs` serve, the others call worker `num % pairs`.
fn worker(num: usize, o: Opts, cl: &[i64], p: &mut Chan) -> Result<(), String> {
    let dev = Device::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    let pool = ThreadPool::start(dev.clone(), o.pool, |_, inc| serve_nop(inc)).map_err(|e| format!("pool: {e}"))?;
    let mut b = Binder::from_device(dev.clone());
    let flags = if o.inherit_rt { binder::uapi::FLAT_BINDER_FLAG_INHERIT_RT } else { 0 };
    sm::add_service_flags(&mut b, &service_name(num), 0x1000 + num as u64, num as u64, flags)
        .map_err(|e| format!("add_service: {e}"))?;
    let io = |e: std::io::Error| format!("pipe: {e}");
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;
    let mut targets = vec![];
    for i in (0..o.pairs).filter(|&i| i != num) {
        targets.push(sm::get_service(&mut b, &service_name(i)).map_err(|e| format!("get_service {i}: {e}"))?);
    }
    let (mut fifo, mut other) = (ClassStats::default(), ClassStats::default());
    for _ in 0..if num >= o.pairs { o.iterations } else { 0 } {
        let target = targets[num % o.pairs];
        // 1. A new SCHED_FIFO thread makes one call (its own binder thread, exited after).
        let (d, cl2) = (dev.clone(), cl.to_vec());
        let t = std::thread::spawn(move || {
            let mut st = ClassStats::default();
            if let Err(e) = make_fifo() {
                st.fifo_denied = 1;
                eprintln!("binder-tiers: {e}");
            }
            let mut fb = Binder::from_device(d);
            timed_call(&mut fb, target, o.payload, &cl2, &mut st);
            let _ = fb.thread_exit();
            st
        });
        fifo.add(&t.join().map_err(|_| "fifo caller panicked".to_string())?);
        // 2. The calling (SCHED_OTHER) thread makes one.
        timed_call(&mut b, target, o.payload, cl, &mut other);
    }
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;
    p.send_u64s(&[fifo.to_words(), other.to_words(), vec![pool.threads() as u64, pool.spawn_requests()]].concat())
        .map_err(io)?;
    p.wait().map_err(io)?;
    pool.stop().map_err(|e| format!("pool: {e}"))
}

struct Gathered {
    fifo: ClassStats,
    other: ClassStats,
    started: Vec<u64>,
    spawns: Vec<u64>,
    failed: usize,
}

/// schd-dbg's `main`: fork the pairs, start them together, gather the clients' figures.
fn run_pairs(o: Opts, cl: &[i64], data: &mut Value) -> Result<Gathered, String> {
    let mut pipes: Vec<Chan> = vec![];
    let mut kids: Vec<Child> = vec![];
    for i in 0..2 * o.pairs {
        let (mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
        let kid = fork(|| {
            drop(std::mem::take(&mut pipes));
            match worker(i, o, cl, &mut theirs) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("binder-tiers worker {i}: {e}");
                    1
                }
            }
        })
        .map_err(|e| e.to_string())?;
        drop(theirs);
        pipes.push(mine);
        kids.push(kid);
    }
    let died = |e: std::io::Error| format!("a worker died: {e}");
    pipes.iter_mut().try_for_each(|p| p.wait()).map_err(died)?;
    let measure = Measure::start();
    pipes.iter_mut().try_for_each(|p| p.signal()).map_err(died)?;
    pipes.iter_mut().try_for_each(|p| p.wait()).map_err(died)?;
    measure.finish(data);
    pipes.iter_mut().try_for_each(|p| p.signal()).map_err(died)?;
    let mut g = Gathered {
        fifo: ClassStats::default(),
        other: ClassStats::default(),
        started: vec![],
        spawns: vec![],
        failed: 0,
    };
    for p in &mut pipes {
        let w = p.recv_u64s().map_err(|e| format!("results: {e}"))?;
        let n = ClassStats::WORDS;
        let bad = || "a worker sent malformed results".to_string();
        g.fifo.add(&ClassStats::from_words(w.get(..n).ok_or_else(bad)?).ok_or_else(bad)?);
        g.other.add(&ClassStats::from_words(w.get(n..2 * n).ok_or_else(bad)?).ok_or_else(bad)?);
        g.started.push(w.get(2 * n).copied().unwrap_or(0));
        g.spawns.push(w.get(2 * n + 1).copied().unwrap_or(0));
    }
    pipes.iter_mut().try_for_each(|p| p.signal()).map_err(died)?;
    g.failed = kids.iter_mut().map(|k| k.wait()).filter(|&st| st != 0).count();
    Ok(g)
}

fn run(a: &Args) -> Result<bool, String> {
    let o = Opts {
        iterations: a.get("i", 100)?,
        pairs: a.get("pair", 1)?,
        payload: a.get("s", 16)?,
        pool: benchkit::pool::size(a)?,
        inherit_rt: a.flag("inherit-rt"),
    };
    if o.pairs == 0 || o.payload < 8 {
        return Err("need --pair >= 1 and -s >= 8 (the request carries priority and CPU)".into());
    }
    let mode = benchkit::apply_ctabs_mode(a)?;
    // Held until the result is reported: the switch goes back to its boot value after.
    let (prio_inherit, _restore) = benchkit::prio::apply(a)?;
    let mgr = ForkedServiceManager::start(DEVICE, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let cl = Arc::new(clusters());
    let t0 = Instant::now();
    let mut data = json!({});
    let g = run_pairs(o, &cl, &mut data);
    let _ = mgr.stop();
    let g = g?;
    println!(
        "binder-tiers: {} pair(s), {} iterations, payload {} B, pool {:?}, clusters {cl:?}",
        o.pairs, o.iterations, o.payload, o.pool
    );
    print!("{}", table(&[("fifo", &g.fifo), ("other", &g.other)]));
    println!(
        "note: server policies seen by the FIFO caller: {}; by the OTHER caller: {} (priority_inheritance {}, INHERIT_RT {})",
        g.fifo.policies(),
        g.other.policies(),
        prio_inherit.map_or("absent".to_string(), |v| v.to_string()),
        if o.inherit_rt { "on" } else { "off" }
    );
    let dominant = (0..3).max_by_key(|&i| g.fifo.server_policy[i]).filter(|&i| g.fifo.server_policy[i] > 0);
    let errors = g.fifo.errors + g.other.errors;
    let expected = (o.pairs * o.iterations) as u64;
    let ok = errors == 0 && g.failed == 0 && g.fifo.calls() == expected && g.other.calls() == expected;
    let mut d = json!({
        "classes": { "fifo": g.fifo.json(), "other": g.other.json() },
        "server_policy_fifo_caller": dominant.map(|i| POLICIES[i]),
        "server_policies": { "fifo": g.fifo.policies(), "other": g.other.policies() },
        "priority_mismatches": g.fifo.priority_mismatch + g.other.priority_mismatch,
        "cpu_mismatches": g.fifo.cpu_mismatch + g.other.cpu_mismatch,
        "fifo_permitted": g.fifo.fifo_denied == 0,
        "iterations": o.iterations, "pairs": o.pairs, "payload": o.payload,
        "pool": benchkit::pool::json(o.pool, &g.started, &g.spawns),
        "ctabs_mode": mode, "clusters": *cl, "errors": errors, "inherit_rt": o.inherit_rt,
        "prio_inherit": prio_inherit,
    });
    for (k, v) in data.as_object().expect("object") {
        d[k] = v.clone();
    }
    let msg = (!ok).then(|| format!("{errors} failed calls, {} failed workers", g.failed));
    report("tiers", if ok { Status::Pass } else { Status::Fail }, t0.elapsed().as_secs_f64() * 1000.0, msg, d);
    Ok(ok)
}

pub fn main() {
    benchkit::main("tiers", &["inherit-rt"], &["i", "s", "pair", "threads", "ctabs-mode", "prio-inherit"], run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_json_and_transport() {
        let s = ClassStats {
            count: [1, 3, 0],
            total_ns: [1_000_000, 6_000_000, 0],
            server_policy: [4, 0, 0],
            ..Default::default()
        };
        let j = s.json();
        assert_eq!(j["same_core"]["pct"], 25.0);
        assert_eq!(j["same_cluster"]["avg_ms"], 2.0);
        assert!(j["cross_cluster"]["avg_ms"].is_null());
        let t = table(&[("fifo", &s)]);
        assert!(t.contains("fifo   same_cluster          3   75.0%     2.0000"), "{t}");
        assert!(t.lines().nth(3).unwrap().ends_with(" -"));
        assert_eq!(ClassStats::from_words(&s.to_words()), Some(s.clone()));
        assert_eq!(ClassStats::from_words(&[0; 3]), None);
        assert_eq!(s.policies(), json!({"SCHED_OTHER": 4}));
        assert_eq!(policy_index(libc::SCHED_FIFO), 1);
    }
}
