//! Step program: a seeded, reproducible fuzzer of binder command streams and ioctls.
//!
//! The parent forks `procs` worker processes of `threads` threads each (see worker.rs)
//! and keeps that many alive until the operation budget or the time budget is spent:
//! a worker runs a random number of operations and exits (sometimes abruptly, with
//! transactions in flight), and now and then the parent SIGKILLs one; each slot is then
//! refilled by a new worker. Worker `slot`/`generation` draws its operations from
//! `Rng::derive(seed, slot * 1_000_000 + generation)`, so a seed reproduces every worker's
//! sequence (the interleaving between processes depends on timing).
//!
//! Results: `fuzz` (the run completed: no worker crashed, none hung in the driver, every
//! return stream decoded), `kernel_log` (no splat in the kernel log), `leaks` (after the
//! workers are gone, binderfs stats list no process, thread, node, ref or buffer of
//! theirs).
//!
//! Settings, lowest precedence first: defaults, environment (`BINDER_FUZZ_OPS`,
//! `BINDER_FUZZ_SECONDS`, `BINDER_FUZZ_SEED`, `BINDER_FUZZ_PROCS`, `BINDER_FUZZ_THREADS`),
//! arguments (`--ops N --seconds S --seed N --procs N --threads N --device PATH`), and
//! the kernel command line (`binder_fuzz.ops=N`, `binder_fuzz.seconds=S`,
//! `binder_fuzz.seed=N`, ...), which `lab run --append` sets from the host.
//! `binder_fds=1` (`BINDER_FUZZ_BINDER_FDS=1`, `binder_fuzz.binder_fds=1`) also sends
//! binder fds in fd objects, which finds the known fd-cycle leak (see worker.rs).
//! `shrink_ms=N` (`BINDER_FUZZ_SHRINK_MS`, `--shrink-ms N`, `binder_fuzz.shrink_ms=N`) runs the
//! binder shrinker every N ms from a helper process (`echo 2 > /proc/sys/vm/drop_caches`), so
//! pages of freed buffers are reclaimed while workers allocate, free, unmap and exit.

mod guided;
mod kcov;
mod shm;
mod worker;

use labproto::{report, Status};
use serde_json::{json, Value};
use shm::{Shm, MAX_SLOTS, MAX_THREADS, N_OPS, N_STATS, OP_NAMES, STAT_NAMES};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use testkit::kmsg::{self, Kmsg};
use testkit::logs::Stats;
use testkit::rng::{mix, Rng};

struct Config {
    seed: u64,
    ops: u64,
    seconds: f64,
    procs: usize,
    threads: usize,
    device: String,
    /// An op stuck longer than this is a hang.
    hang_s: f64,
    /// Mean seconds between SIGKILLs of a random worker (0: never).
    chaos_s: f64,
    /// Send binder fds in fd objects too (finds the fd-cycle leak; see worker.rs).
    binder_fds: bool,
    /// Run the shrinker every this many ms (0: never).
    shrink_ms: u64,
    /// `classic` (this file's supervisor), `guided` or `random` (guided.rs's loop with or
    /// without corpus feedback); a `replay` sequence makes it a replay.
    mode: String,
    /// The binder driver's text ranges for KCOV (`0xSTART-0xEND,...`).
    text: String,
    /// A sequence to replay (`0xSEED,...`).
    replay: String,
    /// The kernel flavor, recorded in saved sequences for their replay.
    flavor: String,
    /// Guided/random: go on after a failure until the budget is spent.
    keep_going: bool,
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: binder-fuzz [--ops N] [--seconds S] [--seed N] [--procs N] [--threads N] [--binder-fds 0|1] \
         [--chaos-seconds S] [--shrink-ms N] [--device PATH] [--mode classic|guided|random] \
         [--text 0xSTART-0xEND,...] [--replay 0xSEED,...] [--keep-going 0|1]"
    );
    std::process::exit(2);
}

fn set(cfg: &mut Config, key: &str, val: &str) -> bool {
    match key {
        "ops" => cfg.ops = parse_num(val).unwrap_or_else(|| usage()),
        "seconds" => cfg.seconds = val.parse().unwrap_or_else(|_| usage()),
        "seed" => cfg.seed = parse_num(val).unwrap_or_else(|| usage()),
        "procs" => cfg.procs = parse_num(val).unwrap_or_else(|| usage()) as usize,
        "threads" => cfg.threads = parse_num(val).unwrap_or_else(|| usage()) as usize,
        "device" => cfg.device = val.to_string(),
        "chaos-seconds" => cfg.chaos_s = val.parse().unwrap_or_else(|_| usage()),
        "binder_fds" | "binder-fds" => cfg.binder_fds = parse_num(val).unwrap_or_else(|| usage()) != 0,
        "shrink_ms" | "shrink-ms" => cfg.shrink_ms = parse_num(val).unwrap_or_else(|| usage()),
        "mode" if ["classic", "guided", "random"].contains(&val) => cfg.mode = val.to_string(),
        "mode" => usage(),
        "text" => cfg.text = val.to_string(),
        "replay" => cfg.replay = val.to_string(),
        "flavor" => cfg.flavor = val.to_string(),
        "keep_going" | "keep-going" => cfg.keep_going = parse_num(val).unwrap_or_else(|| usage()) != 0,
        _ => return false,
    }
    true
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills the 8-byte local buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, 8, libc::GRND_NONBLOCK) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        mix(shm::now_ms() ^ std::process::id() as u64)
    }
}

fn config() -> Config {
    let debug = testkit::is_debug_kernel();
    let mut cfg = Config {
        seed: random_seed(),
        ops: 20_000,
        seconds: 300.0,
        procs: 4,
        threads: 2,
        device: binder::DEFAULT_DEVICE.into(),
        hang_s: if debug { 120.0 } else { 30.0 },
        chaos_s: 3.0,
        binder_fds: false,
        shrink_ms: 0,
        mode: "classic".into(),
        text: String::new(),
        replay: String::new(),
        flavor: String::new(),
        keep_going: false,
    };
    for k in [
        "ops",
        "seconds",
        "seed",
        "procs",
        "threads",
        "binder_fds",
        "shrink_ms",
        "mode",
        "text",
        "replay",
        "keep_going",
    ] {
        if let Ok(v) = std::env::var(format!("BINDER_FUZZ_{}", k.to_uppercase())) {
            set(&mut cfg, k, &v);
        }
    }
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let Some(k) = a.strip_prefix("--") else { usage() };
        let v = it.next().unwrap_or_else(|| usage());
        if !set(&mut cfg, k, &v) {
            usage();
        }
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    for tok in cmdline.split_whitespace() {
        if let Some((k, v)) = tok.strip_prefix("binder_fuzz.").and_then(|t| t.split_once('=')) {
            if !set(&mut cfg, k, v) {
                eprintln!("binder-fuzz: ignoring unknown kernel parameter binder_fuzz.{k}");
            }
        }
    }
    cfg.procs = cfg.procs.clamp(1, MAX_SLOTS);
    cfg.threads = cfg.threads.clamp(1, MAX_THREADS);
    cfg
}

struct Live {
    pid: i32,
    slot: usize,
    generation: u64,
}

fn spawn(cfg: &Config, shm: &'static Shm, slot: usize, generation: u64) -> Option<Live> {
    let wseed = Rng::derive(cfg.seed, slot as u64 * 1_000_000 + generation).next_u64();
    let life_ops = Rng::new(wseed ^ 0x11fe).range(200, 3000);
    shm.slots[slot].ops.store(0, Ordering::Relaxed);
    for t in &shm.slots[slot].threads {
        t.in_op.store(0, Ordering::Relaxed);
        t.heartbeat_ms.store(shm::now_ms(), Ordering::Relaxed);
    }
    // SAFETY: the parent is single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        // SAFETY: prctl has no memory preconditions.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
        let code = worker::run(
            worker::Config {
                device: cfg.device.clone(),
                binder_fds: cfg.binder_fds,
                slot,
                seed: wseed,
                threads: cfg.threads,
                life_ops,
            },
            shm,
        );
        // SAFETY: ends the worker without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    shm.slots[slot].pid.store(pid as u64, Ordering::Relaxed);
    Some(Live { pid, slot, generation })
}

/// The shrinker helper: a child that writes drop_caches every `every_ms` until killed.
/// Its pid is not a worker's, so [`Supervisor::reap`] only counts it if it dies early.
fn spawn_shrinker(every_ms: u64) -> Option<i32> {
    // SAFETY: the parent is single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        return (pid > 0).then_some(pid);
    }
    // SAFETY: prctl has no memory preconditions.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    let code = loop {
        if std::fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
            break 3;
        }
        std::thread::sleep(Duration::from_millis(every_ms));
    };
    // SAFETY: ends the helper without running the parent's exit handlers.
    unsafe { libc::_exit(code) }
}

/// Stops the shrinker helper; true if it was still running (it exits only on a failed write).
fn stop_shrinker(pid: i32) -> bool {
    let mut st = 0;
    // SAFETY: pid is our child; st is a valid out-pointer.
    unsafe {
        let running = libc::waitpid(pid, &mut st, libc::WNOHANG) == 0;
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &mut st, 0);
        running
    }
}

/// What the kernel says a stuck task is doing.
fn task_report(pid: i32) -> String {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let tid = e.file_name().to_string_lossy().into_owned();
            let wchan = std::fs::read_to_string(e.path().join("wchan")).unwrap_or_default();
            let stack = std::fs::read_to_string(e.path().join("stack")).unwrap_or_default();
            let stack: Vec<&str> = stack.lines().take(8).collect();
            out.push(format!("tid {tid} wchan {wchan} stack [{}]", stack.join(" <- ")));
        }
    }
    out.join("; ")
}

/// Kernel memory figures (kB) and the number of tasks (kworkers spawned for deferred
/// releases explain KernelStack growth; they idle out after minutes).
fn meminfo() -> BTreeMap<String, i64> {
    let mut m = meminfo_kb();
    let tasks = std::fs::read_dir("/proc")
        .map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())).count())
        .unwrap_or(0);
    m.insert("tasks".into(), tasks as i64);
    m
}

fn meminfo_kb() -> BTreeMap<String, i64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .filter(|(k, _): &(String, i64)| {
            ["MemFree", "Slab", "SUnreclaim", "KernelStack", "PageTables"].contains(&k.as_str())
        })
        .collect()
}

fn counters(a: &[std::sync::atomic::AtomicU64], names: &[&str]) -> Value {
    let m: serde_json::Map<String, Value> = names
        .iter()
        .zip(a)
        .filter_map(|(n, c)| {
            let v = c.load(Ordering::Relaxed);
            (v > 0).then(|| (n.to_string(), json!(v)))
        })
        .collect();
    Value::Object(m)
}

/// The parent's bookkeeping while workers run: who is alive, what ended how, and when to
/// stop.
struct Supervisor<'a> {
    cfg: &'a Config,
    shm: &'static Shm,
    t0: Instant,
    live: Vec<Live>,
    generations: Vec<u64>,
    crashes: Vec<String>,
    hangs: Vec<String>,
    exits: BTreeMap<i32, u64>,
    spawned: u64,
    chaos_kills: u64,
    chaos: Rng,
    next_chaos: Option<Instant>,
    stopped_at: Option<Instant>,
    stopped_by: &'static str,
}

impl<'a> Supervisor<'a> {
    fn start(cfg: &'a Config, shm: &'static Shm) -> Supervisor<'a> {
        let t0 = Instant::now();
        let live = (0..cfg.procs).filter_map(|slot| spawn(cfg, shm, slot, 0)).collect();
        Supervisor {
            cfg,
            shm,
            t0,
            live,
            generations: vec![0; cfg.procs],
            crashes: vec![],
            hangs: vec![],
            exits: BTreeMap::new(),
            spawned: cfg.procs as u64,
            chaos_kills: 0,
            chaos: Rng::derive(cfg.seed, 0xc4a05),
            next_chaos: (cfg.chaos_s > 0.0).then(|| t0 + Duration::from_secs_f64(cfg.chaos_s)),
            stopped_at: None,
            stopped_by: "",
        }
    }

    /// Reaps ended workers, records how they ended and refills their slots (until the stop).
    fn reap(&mut self) {
        loop {
            let mut st = 0;
            // SAFETY: st is a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            let code = syskit::decode_status(st);
            *self.exits.entry(code).or_default() += 1;
            let Some(i) = self.live.iter().position(|l| l.pid == pid) else { continue };
            let l = self.live.swap_remove(i);
            self.shm.slots[l.slot].pid.store(0, Ordering::Relaxed);
            // 0: end of life or a deliberate _exit; 137: SIGKILL (chaos or hang).
            if code != 0 && code != 128 + libc::SIGKILL {
                self.crashes.push(format!(
                    "worker slot {} generation {} (pid {pid}) ended with status {code}; replay its sequence with \
                     seed {:#x}",
                    l.slot, l.generation, self.cfg.seed
                ));
            }
            if self.stopped_at.is_none() {
                self.generations[l.slot] += 1;
                if let Some(n) = spawn(self.cfg, self.shm, l.slot, self.generations[l.slot]) {
                    self.live.push(n);
                    self.spawned += 1;
                }
            }
        }
    }

    /// Stops the workers once the op or time budget is spent. True when all are gone, or
    /// (after SIGKILLing the stragglers as hangs) `grace` after the stop.
    fn stop_when_due(&mut self, now: Instant, grace: Duration) -> bool {
        let total = self.shm.total_ops.load(Ordering::Relaxed);
        if self.stopped_at.is_none() && (total >= self.cfg.ops || self.t0.elapsed().as_secs_f64() >= self.cfg.seconds) {
            self.stopped_by = if total >= self.cfg.ops { "ops" } else { "time" };
            self.shm.stop.store(1, Ordering::SeqCst);
            self.stopped_at = Some(now);
        }
        let Some(s) = self.stopped_at else { return false };
        if self.live.is_empty() {
            return true;
        }
        if now.duration_since(s) <= grace {
            return false;
        }
        for l in &self.live {
            self.hangs.push(format!(
                "worker slot {} (pid {}) did not stop within {grace:?}: {}",
                l.slot,
                l.pid,
                task_report(l.pid)
            ));
            // SAFETY: kill on our own child.
            unsafe { libc::kill(l.pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(500));
        true
    }

    /// Hangs: an op in progress for too long kills its worker.
    fn kill_hung(&mut self) {
        let now_ms = shm::now_ms();
        for l in &self.live {
            for (t, ts) in self.shm.slots[l.slot].threads.iter().enumerate().take(self.cfg.threads) {
                let op = ts.in_op.load(Ordering::Relaxed);
                let hb = ts.heartbeat_ms.load(Ordering::Relaxed);
                if op != 0 && now_ms.saturating_sub(hb) as f64 > self.cfg.hang_s * 1000.0 {
                    let detail = ts.detail.load(Ordering::Relaxed);
                    self.hangs.push(format!(
                        "worker slot {} (pid {}) thread {t} stuck in {} ({detail:#x}) for {} s: {}",
                        l.slot,
                        l.pid,
                        OP_NAMES.get(op as usize - 1).unwrap_or(&"?"),
                        (now_ms - hb) / 1000,
                        task_report(l.pid)
                    ));
                    ts.in_op.store(0, Ordering::Relaxed);
                    // SAFETY: kill on our own child.
                    unsafe { libc::kill(l.pid, libc::SIGKILL) };
                }
            }
        }
    }

    /// Now and then SIGKILLs a random worker.
    fn chaos(&mut self, now: Instant) {
        let Some(at) = self.next_chaos else { return };
        if now >= at && self.stopped_at.is_none() && !self.live.is_empty() {
            let victim = &self.live[self.chaos.below(self.live.len() as u64) as usize];
            // SAFETY: kill on our own child.
            unsafe { libc::kill(victim.pid, libc::SIGKILL) };
            self.chaos_kills += 1;
            let mean = self.cfg.chaos_s * (0.5 + self.chaos.below(1000) as f64 / 1000.0);
            self.next_chaos = Some(now + Duration::from_secs_f64(mean));
        }
    }
}

/// Binder processes (by binderfs stats) not in `baseline`, waited for up to `wait`.
fn leftover_procs(baseline: &[i32], wait: Duration) -> Vec<testkit::logs::ProcStats> {
    let t = Instant::now();
    loop {
        let st = Stats::read().unwrap_or_default();
        let extra: Vec<_> = st.procs.iter().filter(|p| !baseline.contains(&p.pid)).cloned().collect();
        if extra.is_empty() || t.elapsed() > wait {
            return extra;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Guided, random-with-coverage and replay runs (guided.rs).
fn main_guided(cfg: &Config) -> ! {
    let bad = |what: &str| -> ! {
        report("coverage", Status::Fail, 0.0, Some(what.to_string()), json!({}));
        std::process::exit(2)
    };
    let text = guided::parse_ranges(&cfg.text)
        .unwrap_or_else(|| bad(&format!("binder_fuzz.text={:?} is not 0xSTART-0xEND[,...]", cfg.text)));
    let replay = guided::parse_seq(&cfg.replay)
        .unwrap_or_else(|| bad(&format!("binder_fuzz.replay={:?} is not 0xSEED[,0xSEED...]", cfg.replay)));
    let mode = match (cfg.mode.as_str(), replay.is_empty()) {
        (_, false) => guided::Mode::Replay,
        ("random", _) => guided::Mode::Random,
        _ => guided::Mode::Guided,
    };
    let g = guided::Config {
        mode,
        seed: cfg.seed,
        ops: cfg.ops,
        seconds: cfg.seconds,
        threads: cfg.threads,
        device: cfg.device.clone(),
        text,
        replay,
        out: "/tmp/binder-fuzz".into(),
        flavor: cfg.flavor.clone(),
        keep_going: cfg.keep_going,
        hang_s: cfg.hang_s,
    };
    if mode == guided::Mode::Replay {
        eprintln!("binder-fuzz: replaying {} ops on {} threads", g.replay.len(), cfg.threads);
    } else {
        eprintln!(
            "binder-fuzz: {} mode, seed {:#x}, {} ops or {} s, {} threads",
            cfg.mode, cfg.seed, cfg.ops, cfg.seconds, cfg.threads
        );
    }
    std::process::exit(guided::run(&g, Shm::map()))
}

pub fn main() {
    let cfg = config();
    if cfg.mode != "classic" || !cfg.replay.is_empty() {
        main_guided(&cfg);
    }
    let scale = if testkit::is_debug_kernel() { 4.0 } else { 1.0 };
    eprintln!(
        "binder-fuzz: seed {:#x}, {} ops or {} s, {} processes x {} threads on {} (replay: cargo make fuzz \
         --append binder_fuzz.seed={:#x})",
        cfg.seed, cfg.ops, cfg.seconds, cfg.procs, cfg.threads, cfg.device, cfg.seed
    );
    let shm = Shm::map();
    let baseline: Vec<i32> = Stats::read().unwrap_or_default().procs.iter().map(|p| p.pid).collect();
    let mem_before = meminfo();
    kmsg::mark(&format!("binder-fuzz: start, seed {:#x}", cfg.seed));
    let mut kmsg = Kmsg::open_at_end().ok();
    // Drained all along: the ring buffer holds only the last few thousand records.
    let mut log = LogWatch::default();
    let shrinker = (cfg.shrink_ms > 0).then(|| spawn_shrinker(cfg.shrink_ms));
    let mut sup = Supervisor::start(&cfg, shm);
    let mut last_progress = Instant::now();
    let grace = Duration::from_secs_f64(30.0 * scale);
    loop {
        sup.reap();
        let now = Instant::now();
        if sup.stop_when_due(now, grace) {
            break;
        }
        sup.kill_hung();
        sup.chaos(now);
        if let Some(k) = kmsg.as_mut() {
            log.add(&k.read_new());
        }
        if now.duration_since(last_progress) > Duration::from_secs(10) {
            last_progress = now;
            let total = shm.total_ops.load(Ordering::Relaxed);
            eprintln!("binder-fuzz: {total} ops after {:.0} s", sup.t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = sup.t0.elapsed();
    match shrinker {
        Some(Some(pid)) if !stop_shrinker(pid) => {
            sup.crashes.push("the shrinker helper stopped early: drop_caches failed".into())
        }
        Some(None) => sup.crashes.push("could not fork the shrinker helper".into()),
        _ => {}
    }

    // Leaks: every worker's binder state must go away.
    let t_rel = Instant::now();
    let release_wait = Duration::from_secs_f64(30.0 * scale);
    let leftover = leftover_procs(&baseline, release_wait);
    let after = Stats::read().unwrap_or_default();
    let mem_after = meminfo();
    kmsg::mark("binder-fuzz: end");
    if let Some(k) = kmsg.as_mut() {
        log.add(&k.read_new());
        log.lost = k.lost;
    }
    let ok = report_fuzz(&sup, elapsed);
    let splats_ok = report_kernel_log(&cfg, &log);
    let mem_delta: serde_json::Map<String, Value> = mem_after
        .iter()
        .map(|(k, v)| {
            let unit = if k == "tasks" { "" } else { "_kb" };
            (format!("{k}{unit}"), json!(v - mem_before.get(k).copied().unwrap_or(0)))
        })
        .collect();
    report_leaks(&cfg, &leftover, &after, t_rel.elapsed(), release_wait, mem_delta);
    std::process::exit(if ok && splats_ok && leftover.is_empty() { 0 } else { 1 });
}

/// The `fuzz` result; whether it passed.
fn report_fuzz(sup: &Supervisor, elapsed: Duration) -> bool {
    let (cfg, shm) = (sup.cfg, sup.shm);
    let total = shm.total_ops.load(Ordering::Relaxed);
    let undecodable = shm.stats[shm::stat::UNDECODABLE].load(Ordering::Relaxed);
    let mut problems = sup.crashes.clone();
    problems.extend(sup.hangs.iter().cloned());
    if undecodable > 0 {
        problems.push(format!("{undecodable} read buffer(s) held returns that do not decode"));
    }
    if total == 0 {
        problems.push("no operation ran".into());
    }
    let data = json!({
        "seed": format!("{:#x}", cfg.seed),
        "ops": total,
        "target_ops": cfg.ops,
        "stopped_by": sup.stopped_by,
        "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "ops_per_s": (total as f64 / elapsed.as_secs_f64()).round(),
        "procs": cfg.procs,
        "threads": cfg.threads,
        "binder_fds": cfg.binder_fds,
        "shrink_ms": cfg.shrink_ms,
        "workers_spawned": sup.spawned,
        "chaos_kills": sup.chaos_kills,
        "worker_exit_statuses": sup.exits.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "op_counts": counters(&shm.op_counts[..N_OPS], OP_NAMES),
        "outcomes": counters(&shm.stats[..N_STATS], STAT_NAMES),
        "replay": format!("cargo make fuzz --append binder_fuzz.seed={:#x} --append binder_fuzz.ops={}", cfg.seed, cfg.ops),
    });
    let ok = problems.is_empty();
    report(
        "fuzz",
        if ok { Status::Pass } else { Status::Fail },
        elapsed.as_secs_f64() * 1000.0,
        (!ok).then(|| format!("seed {:#x}: {}", cfg.seed, problems.join("; "))),
        data,
    );
    ok
}

/// The `kernel_log` result; whether it passed (no splat).
fn report_kernel_log(cfg: &Config, log: &LogWatch) -> bool {
    let splats = &log.splats;
    report(
        "kernel_log",
        if splats.is_empty() { Status::Pass } else { Status::Fail },
        0.0,
        (!splats.is_empty()).then(|| format!("seed {:#x}: kernel splat(s): {}", cfg.seed, splats.join(" | "))),
        json!({"records": log.records, "warning_lines": log.warnings, "records_lost": log.lost,
               "distinct_warnings_sample": log.distinct.iter().take(15).collect::<Vec<_>>(), "splats": splats}),
    );
    splats.is_empty()
}

/// The `leaks` result.
fn report_leaks(
    cfg: &Config,
    leftover: &[testkit::logs::ProcStats],
    after: &Stats,
    took: Duration,
    release_wait: Duration,
    mem_delta: serde_json::Map<String, Value>,
) {
    let (p, t, n, r, b) = after.totals();
    report(
        "leaks",
        if leftover.is_empty() { Status::Pass } else { Status::Fail },
        took.as_secs_f64() * 1000.0,
        (!leftover.is_empty()).then(|| {
            format!(
                "seed {:#x}: binder state of {} worker process(es) still present {} s after they exited: {:?}",
                cfg.seed,
                leftover.len(),
                release_wait.as_secs(),
                leftover.iter().map(|p| (p.pid, p.threads, p.nodes, p.refs, p.buffers)).collect::<Vec<_>>()
            )
        }),
        json!({"after": {"procs": p, "threads": t, "nodes": n, "refs": r, "buffers": b},
               "release_ms": ms(took), "meminfo_delta": mem_delta}),
    );
}

/// What the kernel logged during the run.
#[derive(Default)]
struct LogWatch {
    records: u64,
    warnings: u64,
    lost: u64,
    /// Up to 64 distinct warning texts.
    distinct: std::collections::BTreeSet<String>,
    /// Up to 20 splat lines.
    splats: Vec<String>,
}

impl LogWatch {
    fn add(&mut self, recs: &[kmsg::Record]) {
        self.records += recs.len() as u64;
        for r in recs.iter().filter(|r| r.level <= 4) {
            self.warnings += 1;
            if self.distinct.len() < 64 {
                self.distinct.insert(r.text.clone());
            }
        }
        for s in kmsg::splats(recs) {
            if self.splats.len() < 20 {
                self.splats.push(s);
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}
