//! binder-inversion: the priority inversion seed 001 describes, on purpose. Several
//! low-priority senders (nice 19, or SCHED_IDLE) and a few high-priority ones (nice -20, or
//! SCHED_FIFO) call one server process, so every call allocates its buffer under that
//! process's allocator lock (`alloc->mutex` in the C driver), while CPU hogs at normal
//! priority keep every CPU busy: a low-priority sender preempted while it holds the lock
//! makes the high-priority ones wait for it.
//!
//! Options: `--low N` (6), `--high N` (2), `--low-policy nice|idle`, `--high-policy
//! nice|fifo`, `--hogs N` (one per online CPU), `-i N` calls per high-priority sender
//! (2000; the low ones call until the high ones are done), `-s BYTES` payload (0),
//! `--threads N` server looper threads (4), `--trace 0|1` (1: count lock contention from
//! tracefs). Prints per-class latency lines and one `inversion` result.

mod kstat;

use benchkit::proc::{fork, Chan, Child};
use benchkit::stats::{fmt_g, subsample_ms};
use benchkit::{Args, Measure};
use binder::sm::{self, ServiceManager};
use binder::{looper::Looper, Binder, Device, Reply};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const SERVICE: &str = "inversionServer";
const BINDER_NOP: u32 = 1;
const SAMPLES_MAX: usize = 2000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Nice(i32),
    Idle,
    Fifo(i32),
}

impl Policy {
    fn parse(s: &str, class: &str) -> Result<Policy, String> {
        match (class, s) {
            ("low", "nice") => Ok(Policy::Nice(19)),
            ("low", "idle") => Ok(Policy::Idle),
            ("high", "nice") => Ok(Policy::Nice(-20)),
            // Mid-range RT priority, as Android's audio and display threads use.
            ("high", "fifo") => Ok(Policy::Fifo(50)),
            _ => Err(format!(
                "--{class}-policy {s:?}: use {}",
                if class == "low" { "nice or idle" } else { "nice or fifo" }
            )),
        }
    }

    fn name(self) -> String {
        match self {
            Policy::Nice(n) => format!("nice {n}"),
            Policy::Idle => "SCHED_IDLE".into(),
            Policy::Fifo(p) => format!("SCHED_FIFO {p}"),
        }
    }

    /// Applies the policy to the calling (single-threaded) process.
    fn apply(self) -> Result<(), String> {
        let set = |pol: i32, prio: i32| {
            let p = libc::sched_param { sched_priority: prio };
            // SAFETY: p is a valid sched_param; 0 is the calling thread.
            (unsafe { libc::sched_setscheduler(0, pol, &p) } == 0)
                .then_some(())
                .ok_or_else(|| format!("sched_setscheduler: {}", std::io::Error::last_os_error()))
        };
        match self {
            // SAFETY: setpriority on the calling process has no memory preconditions.
            Policy::Nice(n) => (unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) } == 0)
                .then_some(())
                .ok_or_else(|| format!("setpriority {n}: {}", std::io::Error::last_os_error())),
            Policy::Idle => set(libc::SCHED_IDLE, 0),
            Policy::Fifo(p) => set(libc::SCHED_FIFO, p),
        }
    }
}

struct Opts {
    low: usize,
    high: usize,
    low_policy: Policy,
    high_policy: Policy,
    hogs: usize,
    iterations: usize,
    payload: usize,
    threads: usize,
    trace: bool,
}

/// A flag in shared anonymous memory: the parent sets it, forked senders read it.
struct StopFlag(&'static AtomicU32);

impl StopFlag {
    fn new() -> Result<StopFlag, String> {
        // SAFETY: a fresh anonymous shared mapping; it stays mapped for the process's life
        // and is inherited by the forked children, so the 'static reference stays valid.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the mapping is page-aligned, zeroed and large enough for an AtomicU32.
        Ok(StopFlag(unsafe { &*(p as *const AtomicU32) }))
    }
}

/// One sender process: `high` calls `-i` times, a low one until the flag is set. Sends its
/// latencies, then [calls' duration in ns, scheduler stats...].
fn sender(high: bool, o: &Opts, p: &mut Chan, stop: &StopFlag) -> Result<(), String> {
    let mut b = Binder::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    let target = sm::get_service(&mut b, SERVICE).map_err(|e| format!("get_service: {e}"))?;
    let data = vec![0u8; o.payload / 4 * 4];
    b.transact(target, BINDER_NOP, &data, false).map_err(|e| format!("warm-up call: {e}"))?;
    if high { o.high_policy } else { o.low_policy }.apply()?;
    let io = |e: std::io::Error| format!("pipe: {e}");
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;
    let mut times = Vec::with_capacity(o.iterations);
    let t0 = Instant::now();
    loop {
        if (high && times.len() >= o.iterations) || (!high && stop.0.load(Ordering::Relaxed) != 0) {
            break;
        }
        let start = Instant::now();
        b.transact(target, BINDER_NOP, &data, false).map_err(|e| format!("call {}: {e}", times.len()))?;
        times.push(start.elapsed().as_nanos() as u64);
    }
    let dur = t0.elapsed().as_nanos() as u64;
    let sched = kstat::parse_sched(&std::fs::read_to_string("/proc/self/sched").unwrap_or_default());
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;
    p.send_u64s(&times).map_err(io)?;
    let mut meta = vec![dur];
    meta.extend(sched.to_u64s());
    p.send_u64s(&meta).map_err(io)?;
    p.wait().map_err(io)?;
    Ok(())
}

/// The server process: looper threads answering every call, until the parent says stop.
fn server(o: &Opts, p: &mut Chan) -> Result<(), String> {
    let dev = Device::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    dev.set_max_threads(0).map_err(|e| e.to_string())?;
    let looper = Looper::spawn(dev.clone(), o.threads, None, |_, _| Reply::empty());
    let mut b = Binder::from_device(dev);
    sm::add_service(&mut b, SERVICE, 0x1000, 1).map_err(|e| format!("add_service: {e}"))?;
    p.signal().map_err(|e| e.to_string())?;
    let _ = p.wait();
    looper.stop().map_err(|e| e.to_string())
}

fn hog() -> i32 {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn child_main(name: &str, f: impl FnOnce() -> Result<(), String>) -> i32 {
    match f() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("binder-inversion {name}: {e}");
            1
        }
    }
}

/// A sender's results.
struct Sent {
    high: bool,
    pid: i32,
    times: Vec<u64>,
    dur_ns: u64,
    sched: kstat::SchedStat,
}

pub fn main() {
    benchkit::main(
        "inversion",
        &[],
        &["low", "high", "low-policy", "high-policy", "hogs", "i", "s", "threads", "trace"],
        run,
    )
}

fn opts(a: &Args) -> Result<Opts, String> {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let o = Opts {
        low: a.get("low", 6)?,
        high: a.get("high", 2)?,
        low_policy: Policy::parse(&a.get("low-policy", "nice".to_string())?, "low")?,
        high_policy: Policy::parse(&a.get("high-policy", "nice".to_string())?, "high")?,
        hogs: a.get("hogs", cpus)?,
        iterations: a.get("i", 2000)?,
        payload: a.get("s", 0)?,
        threads: a.get("threads", 4)?,
        trace: a.get("trace", 1u32)? != 0,
    };
    if o.high == 0 || o.threads == 0 || o.iterations == 0 {
        return Err("need --high >= 1, --threads >= 1 and -i >= 1".into());
    }
    Ok(o)
}

fn run(a: &Args) -> Result<bool, String> {
    let o = opts(a)?;
    let t_all = Instant::now();
    let stop = StopFlag::new()?;
    let (mut smc, mut smp) = Chan::pair().map_err(|e| e.to_string())?;
    let mut sm_child = fork(|| {
        let Ok(m) = ServiceManager::start(DEVICE, Duration::from_secs(10), None) else { return 2 };
        let _ = smp.signal();
        let _ = smp.wait();
        drop(m);
        0
    })
    .map_err(|e| e.to_string())?;
    smc.wait().map_err(|_| "the service manager did not start".to_string())?;
    let (mut srv, mut srv_theirs) = Chan::pair().map_err(|e| e.to_string())?;
    let mut srv_child = fork(|| child_main("server", || server(&o, &mut srv_theirs))).map_err(|e| e.to_string())?;
    drop(srv_theirs);
    srv.wait().map_err(|_| "the server did not start".to_string())?;

    let (mut chans, mut kids) = (vec![], vec![]);
    for i in 0..o.high + o.low {
        let high = i < o.high;
        let (mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
        let kid = fork(|| child_main("sender", || sender(high, &o, &mut theirs, &stop))).map_err(|e| e.to_string())?;
        chans.push((high, mine));
        kids.push(kid);
    }
    for (_, c) in &mut chans {
        c.wait().map_err(|_| "a sender did not start (see its error above)".to_string())?;
    }
    let hogs: Vec<Child> = (0..o.hogs).map(|_| fork(hog)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let pids: Vec<i32> = kids.iter().map(|k| k.pid).collect();
    let schedstats = kstat::Schedstats::enable();
    let trace = if o.trace { Some(kstat::Trace::start(&pids)) } else { None };
    let measure = Measure::start();
    let sent = measure_phase(&mut chans, &pids, &stop);
    let mut data = json!({});
    measure.finish(&mut data);
    let trace_text = trace.map(|t| t.and_then(kstat::Trace::finish));
    drop(schedstats);
    drop(hogs);
    let sent = sent?;
    let _ = srv.signal();
    let srv_status = srv_child.wait();
    let _ = smc.signal();
    sm_child.wait();
    let failed = kids.iter_mut().map(|k| k.wait()).filter(|&s| s != 0).count() + usize::from(srv_status != 0);
    let d = summarise(&o, &sent, trace_text, data);
    let ok = failed == 0 && d["high"]["count"].as_u64() == Some((o.high * o.iterations) as u64);
    report(
        "inversion",
        if ok { Status::Pass } else { Status::Fail },
        t_all.elapsed().as_secs_f64() * 1000.0,
        (!ok).then(|| format!("{failed} failed process(es)")),
        d,
    );
    Ok(ok)
}

/// Starts every sender, waits for the high ones, stops the low ones, gathers the results.
fn measure_phase(chans: &mut [(bool, Chan)], pids: &[i32], stop: &StopFlag) -> Result<Vec<Sent>, String> {
    let died = |e: std::io::Error| format!("a sender died: {e}");
    for (_, c) in chans.iter_mut() {
        c.signal().map_err(died)?;
    }
    for (_, c) in chans.iter_mut().filter(|(h, _)| *h) {
        c.wait().map_err(died)?;
    }
    stop.0.store(1, Ordering::Relaxed);
    for (_, c) in chans.iter_mut().filter(|(h, _)| !*h) {
        c.wait().map_err(died)?;
    }
    let mut out = vec![];
    for ((high, c), pid) in chans.iter_mut().zip(pids) {
        c.signal().map_err(died)?;
        let times = c.recv_u64s().map_err(died)?;
        let meta = c.recv_u64s().map_err(died)?;
        c.signal().map_err(died)?;
        let dur_ns = meta.first().copied().unwrap_or(0);
        out.push(Sent { high: *high, pid: *pid, times, dur_ns, sched: kstat::SchedStat::from_u64s(&meta[1..]) });
    }
    Ok(out)
}

/// The value at per-mille `pm` of sorted samples, picked like binderThroughputTest's.
fn permille(sorted: &[u64], pm: usize) -> u64 {
    sorted[(pm * sorted.len() / 1000).min(sorted.len() - 1)]
}

fn class_summary(o: &Opts, sent: &[Sent], high: bool) -> Value {
    let mine: Vec<&Sent> = sent.iter().filter(|s| s.high == high).collect();
    let mut t: Vec<u64> = mine.iter().flat_map(|s| s.times.iter().copied()).collect();
    t.sort_unstable();
    let dur = mine.iter().map(|s| s.dur_ns).max().unwrap_or(0) as f64 / 1e9;
    let mut sched = kstat::SchedStat::default();
    mine.iter().for_each(|s| sched.add(&s.sched));
    let policy = if high { o.high_policy } else { o.low_policy };
    if t.is_empty() {
        return json!({"count": 0, "senders": mine.len(), "policy": policy.name(), "sched": sched.json()});
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let v = json!({
        "count": t.len(), "senders": mine.len(), "policy": policy.name(),
        "calls_per_sec": t.len() as f64 / dur,
        "avg_ms": t.iter().map(|&x| x as f64).sum::<f64>() / t.len() as f64 / 1e6,
        "p50_ms": ms(permille(&t, 500)), "p99_ms": ms(permille(&t, 990)),
        "p999_ms": ms(permille(&t, 999)), "max_ms": ms(t[t.len() - 1]),
        "samples_ms": subsample_ms(&t, SAMPLES_MAX), "sched": sched.json(),
    });
    println!(
        "{:<5} ({}, {} senders): {} calls, {}/s; p50 {}ms p99 {}ms p99.9 {}ms max {}ms; blocked {}ms",
        if high { "high" } else { "low" },
        policy.name(),
        mine.len(),
        t.len(),
        fmt_g(v["calls_per_sec"].as_f64().unwrap_or(0.0)),
        fmt_g(v["p50_ms"].as_f64().unwrap_or(0.0)),
        fmt_g(v["p99_ms"].as_f64().unwrap_or(0.0)),
        fmt_g(v["p999_ms"].as_f64().unwrap_or(0.0)),
        fmt_g(v["max_ms"].as_f64().unwrap_or(0.0)),
        fmt_g(sched.block_ns as f64 / 1e6)
    );
    v
}

fn summarise(o: &Opts, sent: &[Sent], trace: Option<Result<String, String>>, counters: Value) -> Value {
    let (high, low) = (class_summary(o, sent, true), class_summary(o, sent, false));
    let total: f64 = [&high, &low].iter().filter_map(|v| v["calls_per_sec"].as_f64()).sum();
    let lock = match trace {
        None => json!({"trace": "off"}),
        Some(Err(e)) => {
            println!("note: lock contention not counted: {e}");
            json!({"trace": format!("unavailable: {e}")})
        }
        Some(Ok(text)) => {
            let class_of = |pid: i32| sent.iter().find(|s| s.pid == pid).map(|s| if s.high { "high" } else { "low" });
            let c = kstat::count_contentions(&text, class_of);
            let get = |k: &str| c.get(k).cloned().unwrap_or_default();
            let (h, l) = (get("high"), get("low"));
            println!(
                "lock contention: high slept {} / spun {} on the allocator lock; low {} / {}",
                h.alloc_sleeps, h.alloc_spins, l.alloc_sleeps, l.alloc_spins
            );
            json!({"trace": "ok", "high": h.json(), "low": l.json()})
        }
    };
    let mut d = json!({
        "high": high, "low": low, "iterations_per_sec": total, "hogs": o.hogs, "payload": o.payload,
        "server_threads": o.threads, "iterations": o.iterations, "lock": lock,
    });
    for (k, v) in counters.as_object().into_iter().flatten() {
        d[k] = v.clone();
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_refuse() {
        assert_eq!(Policy::parse("nice", "low").unwrap(), Policy::Nice(19));
        assert_eq!(Policy::parse("idle", "low").unwrap(), Policy::Idle);
        assert_eq!(Policy::parse("fifo", "high").unwrap(), Policy::Fifo(50));
        let e = Policy::parse("fifo", "low").unwrap_err();
        assert!(e.contains("--low-policy") && e.contains("nice or idle"), "{e}");
    }

    #[test]
    fn permille_picks_the_tail() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(permille(&v, 500), 501);
        assert_eq!(permille(&v, 999), 1000);
        assert_eq!(permille(&[7], 999), 7);
    }
}
