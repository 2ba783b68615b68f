//! Port of AOSP's binderThroughputTest (frameworks/native/libs/binder/tests): `-w` worker
//! processes each serve a NOP service registered with a small service manager and each make
//! `-i` synchronous calls to another worker (chosen at random, seeded per worker, or its
//! pair partner with `-p`), timing every call. The parent gathers the latencies over pipes
//! and prints the original's lines, then one `throughput` result.
//!
//! Each worker serves with libbinder's thread pool, as `ProcessState::startThreadPool()`
//! gives the original (max threads 15, loopers spawned on BR_SPAWN_LOOPER);
//! `--threads N` runs a fixed pool of N loopers instead. The pool is recorded as "pool".
//!
//! Options: `-w N` (2), `-i N` (10000), `-s BYTES` (0), `-p` (client/server pairs), `-t N`
//! (N warm-up iterations first), `--threads N` (fixed pool), `--ctabs-mode N`,
//! `--defer-tc 0|1` (the lab-only rust-driver/lab/ series: deferral of BR_TRANSACTION_COMPLETE off/on;
//! the value in effect is recorded as "defer_tc"). Besides the system-wide counters,
//! "task_switches" counts the context switches of the benchmark's own processes (getrusage).
//! docs/src/guide/bench.md lists what still differs from the original.

use benchkit::proc::{fork, Chan, Child};
use benchkit::stats::{fmt_g, subsample_ms, Summary};
use benchkit::{Args, Measure};
use binder::pool::{PoolSize, ThreadPool};
use binder::sm::{self, ServiceManager};
use binder::uapi::TF_ACCEPT_FDS;
use binder::{parcel::Parcel, Binder, CallOpts, Device, Reply};
use labproto::{report, Status};
use serde_json::json;
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const BINDER_NOP: u32 = 1;
const SAMPLES_MAX: usize = 2000;

#[derive(Clone, Copy)]
struct Opts {
    workers: usize,
    iterations: usize,
    payload: usize,
    cs_pair: bool,
    pool: PoolSize,
}

fn service_name(i: usize) -> String {
    format!("binderWorker{i}")
}

/// Which workers a worker calls: the first half in pair mode, all others otherwise.
fn server_count(o: &Opts) -> usize {
    if o.cs_pair {
        o.workers / 2
    } else {
        o.workers
    }
}

/// The calls of one run: every worker's, or in pair mode the clients' only.
fn expected_calls(o: &Opts) -> usize {
    if o.cs_pair {
        (o.workers - server_count(o)) * o.iterations
    } else {
        o.workers * o.iterations
    }
}

/// Per worker: what its pool did, sent ahead of the latencies.
struct PoolStats {
    started: u64,
    spawn_requests: u64,
}

fn worker(num: usize, o: &Opts, p: &mut Chan) -> Result<(), String> {
    let dev = Device::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    // startThreadPool() before addService(), as the original.
    let pool =
        ThreadPool::start(dev.clone(), o.pool, |_, _| Reply::empty()).map_err(|e| format!("thread pool: {e}"))?;
    let mut b = Binder::from_device(dev);
    sm::add_service(&mut b, &service_name(num), 0x1000 + num as u64, num as u64)
        .map_err(|e| format!("add_service: {e}"))?;
    let io = |e: std::io::Error| format!("pipe: {e}");
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;

    let servers = server_count(o);
    println!("Created BinderWorker{num}");
    let mut targets = vec![];
    for i in (0..servers).filter(|&i| i != num) {
        targets.push(sm::get_service(&mut b, &service_name(i)).map_err(|e| format!("get_service {i}: {e}"))?);
    }
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;

    let mut times = Vec::with_capacity(o.iterations);
    // SAFETY: srand/rand only touch libc's PRNG state; this process has no other user.
    unsafe { libc::srand(num as u32) };
    let is_pair_server = o.cs_pair && num < servers;
    // IPCThreadState::transact() adds TF_ACCEPT_FDS to every call.
    let opts = CallOpts { flags: TF_ACCEPT_FDS, ..Default::default() };
    if !is_pair_server && !targets.is_empty() {
        // The original writes an int32 0 while 4 or more bytes of the size are left.
        let data = Parcel::from_bytes(&vec![0u8; o.payload / 4 * 4]);
        for i in 0..o.iterations {
            // In pair mode worker num (>= servers) calls worker num % servers, which is
            // targets[num % servers] as its own index is not among them.
            // SAFETY: see srand above.
            let t = if o.cs_pair { num % servers } else { (unsafe { libc::rand() }) as usize % targets.len() };
            let start = Instant::now();
            let r = b.call_with(targets[t], BINDER_NOP, &data, &opts, None);
            times.push(start.elapsed().as_nanos() as u64);
            if let Err(e) = r {
                return Err(format!("thread {num} failed {e} i : {i}"));
            }
        }
    }
    p.signal().map_err(io)?;
    p.wait().map_err(io)?;
    p.send_u64s(&[pool.threads() as u64, pool.spawn_requests()]).map_err(io)?;
    p.send_u64s(&times).map_err(io)?;
    p.wait().map_err(io)?;
    pool.stop().map_err(|e| format!("thread pool: {e}"))
}

/// Voluntary and involuntary context switches of `who` (RUSAGE_SELF or RUSAGE_CHILDREN).
fn switches(who: libc::c_int) -> [u64; 2] {
    // SAFETY: getrusage fills the zeroed rusage it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    [ru.ru_nvcsw as u64, ru.ru_nivcsw as u64]
}

struct RunResult {
    iterations_per_sec: f64,
    samples: Vec<u64>,
    pools: Vec<PoolStats>,
    failed_workers: usize,
}

fn run_main(o: &Opts, measure: Option<&mut Measure>) -> Result<RunResult, String> {
    let mut pipes: Vec<Chan> = vec![];
    let mut kids: Vec<Child> = vec![];
    for i in 0..o.workers {
        let (mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
        let kid = fork(|| {
            drop(std::mem::take(&mut pipes));
            match worker(i, o, &mut theirs) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("binder-throughput worker {i}: {e}");
                    println!("thread {i} failed: {e}");
                    1
                }
            }
        })
        .map_err(|e| e.to_string())?;
        drop(theirs);
        pipes.push(mine);
        kids.push(kid);
    }
    let wait_all = |pipes: &mut Vec<Chan>| -> Result<(), String> {
        pipes.iter_mut().try_for_each(|p| p.wait()).map_err(|e| format!("a worker died: {e}"))
    };
    let signal_all = |pipes: &mut Vec<Chan>| -> Result<(), String> {
        pipes.iter_mut().try_for_each(|p| p.signal()).map_err(|e| format!("a worker died: {e}"))
    };
    wait_all(&mut pipes)?;
    signal_all(&mut pipes)?;
    wait_all(&mut pipes)?;

    println!("waiting for workers to complete");
    let pids: Vec<libc::pid_t> = kids.iter().map(|k| k.pid).collect();
    let mut measure = measure;
    if let Some(m) = measure.as_deref_mut() {
        m.phase_begin(&pids);
    }
    let start = Instant::now();
    signal_all(&mut pipes)?;
    wait_all(&mut pipes)?;
    let elapsed = start.elapsed();
    if let Some(m) = measure {
        m.phase_end(&pids, expected_calls(o) as u64);
    }
    let iterations_per_sec = (o.iterations * o.workers) as f64 / elapsed.as_secs_f64();
    println!("iterations per sec: {}", fmt_g(iterations_per_sec));

    println!("collecting results");
    signal_all(&mut pipes)?;
    let mut samples = vec![];
    let mut pools = vec![];
    for p in &mut pipes {
        let ps = p.recv_u64s().map_err(|e| format!("results: {e}"))?;
        pools.push(PoolStats {
            started: ps.first().copied().unwrap_or(0),
            spawn_requests: ps.get(1).copied().unwrap_or(0),
        });
        samples.extend(p.recv_u64s().map_err(|e| format!("results: {e}"))?);
    }
    println!("killing workers");
    signal_all(&mut pipes)?;
    let mut failed_workers = 0;
    for k in &mut kids {
        let st = k.wait();
        if st != 0 {
            println!("nonzero child status{st}");
            failed_workers += 1;
        }
    }
    Ok(RunResult { iterations_per_sec, samples, pools, failed_workers })
}

fn run(a: &Args) -> Result<bool, String> {
    let o = Opts {
        workers: a.get("w", 2)?,
        iterations: a.get("i", 10000)?,
        payload: a.get("s", 0)?,
        cs_pair: a.flag("p"),
        pool: benchkit::pool::size(a)?,
    };
    if o.workers < 2 {
        return Err("need -w >= 2".into());
    }
    let warmup: usize = a.get("t", 0)?;
    let mode = benchkit::apply_ctabs_mode(a)?;
    let defer_tc = benchkit::apply_defer_tc(a)?;
    // The service manager runs in its own process, forked before any thread exists.
    let (mut smc, mut smp) = Chan::pair().map_err(|e| e.to_string())?;
    let mut sm_child = fork(|| {
        let m = match ServiceManager::start(DEVICE, Duration::from_secs(10), None) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("binder-throughput: service manager: {e}");
                return 2;
            }
        };
        let _ = smp.signal();
        let _ = smp.wait();
        drop(m);
        0
    })
    .map_err(|e| e.to_string())?;
    smc.wait().map_err(|_| "the service manager did not start".to_string())?;

    if warmup > 0 {
        // The original's lines, typo included.
        println!("Start warump round");
        run_main(&Opts { iterations: warmup, ..o }, None)?;
        println!("Completed warump round\n");
    }
    let t0 = Instant::now();
    let (own0, kids0) = (switches(libc::RUSAGE_SELF), switches(libc::RUSAGE_CHILDREN));
    let mut measure = Measure::start().with_timed_phase();
    let r = run_main(&o, Some(&mut measure));
    let mut data = json!({});
    measure.finish(&mut data);
    // The benchmark's own tasks only (what `simpleperf stat CMD` counts, idle and other
    // tasks excluded): this process and its reaped workers, every thread, whole lifetime.
    let since = |now: [u64; 2], then: [u64; 2]| [now[0] - then[0], now[1] - then[1]];
    let (own, kids) = (since(switches(libc::RUSAGE_SELF), own0), since(switches(libc::RUSAGE_CHILDREN), kids0));
    data["task_switches"] = json!({
        "main": { "voluntary": own[0], "involuntary": own[1] },
        "workers": { "voluntary": kids[0], "involuntary": kids[1] },
        "total": own[0] + own[1] + kids[0] + kids[1],
    });
    let _ = smc.signal();
    sm_child.wait();
    let mut r = r?;
    let Some(s) = Summary::of(&mut r.samples) else {
        println!("error: no data\n");
        return Err("no data".into());
    };
    print!("{}", s.aosp_lines());
    let expected = expected_calls(&o);
    let ok = r.failed_workers == 0 && s.count == expected;
    let mut d = json!({
        "workers": o.workers, "iterations": o.iterations, "payload": o.payload, "pairs": o.cs_pair,
        "pool": benchkit::pool::json(o.pool, &r.pools.iter().map(|p| p.started).collect::<Vec<_>>(),
            &r.pools.iter().map(|p| p.spawn_requests).collect::<Vec<_>>()),
        "warmup_iterations": warmup, "ctabs_mode": mode, "defer_tc": defer_tc,
        "iterations_per_sec": r.iterations_per_sec, "samples": s.count,
        "samples_ms": subsample_ms(&r.samples, SAMPLES_MAX),
    });
    for (k, v) in s.json().as_object().expect("object") {
        d[k] = v.clone();
    }
    for (k, v) in data.as_object().expect("object") {
        d[k] = v.clone();
    }
    report(
        "throughput",
        if ok { Status::Pass } else { Status::Fail },
        t0.elapsed().as_secs_f64() * 1000.0,
        (!ok).then(|| format!("{} failed workers, {} of {expected} samples", r.failed_workers, s.count)),
        d,
    );
    Ok(ok)
}

pub fn main() {
    benchkit::main("throughput", &["p"], &["i", "s", "w", "t", "threads", "ctabs-mode", "defer-tc"], run)
}
