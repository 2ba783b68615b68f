//! Step program for CTABS (cluster-aware binder thread selection) in the Rust binder driver
//! (rust-driver/, modes 0-3) or the C driver with seed 000's own patches (c-ctabs/, modes 0-2).
//!
//! A server process (the context manager) runs a pool of looper threads pinned to chosen CPUs;
//! client processes pinned to other CPUs make synchronous calls. Between runs the driver mode
//! is switched through /sys/kernel/debug/rust_binder/ctabs (the C driver's:
//! /sys/kernel/debug/binder/ctabs) and the per-mode pick counters in ctabs_stats are read, so
//! every mode is measured in one boot.
//!
//! Subcommands (each reports results on stdout for the lab's init):
//! - `affinity [--iters N] [--server-cpus LIST] [--client-cpus LIST] [--modes LIST]`
//! - `throughput [--iters N] [--rounds R] [--server-threads T] [--modes LIST]`
//! - `scan-cost [--iters N] [--waiters LIST] [--client-cpu C] [--modes LIST]`
//! - `placement [--iters N] [--server-threads T] [--client-cpus LIST]`: where unpinned
//!   servers ran, mode 0 against mode 3.
//! - `toggle [--seconds S]`: switch modes every millisecond under load.

use benchkit::cpu_now;
use benchkit::stats::{clusters, Tier};
use binder::{Binder, Device, Error};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
/// The Rust driver's debugfs directory, then the C driver's; the first with a `ctabs` file is
/// the driver that runs.
const DRIVER_DIRS: [&str; 2] = ["/sys/kernel/debug/rust_binder", "/sys/kernel/debug/binder"];
const CODE_PING: u32 = 1;
/// Share of same-CPU or same-cluster picks that scoring must reach.
const LOCAL_SHARE_MIN: f64 = 0.95;
/// Mode 3 with unpinned servers: the least share of calls served on the caller's CPU, and how
/// far above mode 0's it must be. Measured on sa8155p (TCG single): mode 3 90.8% on perf and
/// 51.8% on debug (servers get back to waiting later there, and idle CPUs pull them away);
/// mode 0 2.6% to 30.9% between boots; a mode 3 that wakes with a plain `notify_one()` 2.1%.
const PLACEMENT_MODE3_MIN: f64 = 0.35;
const PLACEMENT_RISE_MIN: f64 = 0.15;

type Result<T> = std::result::Result<T, String>;

use benchkit::pin;

/// The running driver's CTABS directory (the Rust driver's when neither has the switch, so
/// that errors name the usual path).
fn driver_dir() -> &'static str {
    static DIR: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        DRIVER_DIRS.into_iter().find(|d| std::path::Path::new(d).join("ctabs").exists()).unwrap_or(DRIVER_DIRS[0])
    })
}

/// `rust` or `c`, for results.
fn driver() -> &'static str {
    if driver_dir() == DRIVER_DIRS[0] {
        "rust"
    } else {
        "c"
    }
}

/// The driver's modes: the Rust port adds mode 3 (wake on the caller's CPU) to the seed's 0-2.
fn modes() -> &'static str {
    if driver() == "rust" {
        "0,1,2,3"
    } else {
        "0,1,2"
    }
}

/// A CTABS file of the running driver: `ctabs` (the mode), `ctabs_stats`, `ctabs_counting`
/// (decisions are counted only while it is 1: the counters are shared by all CPUs).
fn ctabs_file(name: &str) -> String {
    format!("{}/{name}", driver_dir())
}

fn set_counting(on: bool) -> Result<()> {
    let f = ctabs_file("ctabs_counting");
    std::fs::write(&f, if on { "1\n" } else { "0\n" })
        .map_err(|e| format!("{f}: {e} (a kernel without CTABS's counting switch?)"))
}

fn set_mode(m: u32) -> Result<()> {
    let f = ctabs_file("ctabs");
    std::fs::write(&f, format!("{m}\n")).map_err(|e| {
        format!("{f}: {e} (is this a binder driver with CTABS, and mode {m} one of its modes {}?)", modes())
    })
}

/// The mode the driver reports, so results say what was in effect, not what was asked for.
fn read_mode() -> Result<u32> {
    let f = ctabs_file("ctabs");
    let t = std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?;
    t.trim().parse().map_err(|e| format!("{f}: {t:?}: {e}"))
}

/// ctabs_stats as mode -> counter name -> value.
fn read_stats() -> Result<BTreeMap<u32, BTreeMap<String, u64>>> {
    let f = ctabs_file("ctabs_stats");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty ctabs_stats")?.split_whitespace().skip(1).collect();
    let mut out = BTreeMap::new();
    for l in lines {
        let mut f = l.split_whitespace();
        let Some(mode) = f.next().and_then(|m| m.parse().ok()) else { continue };
        let row = header.iter().zip(f).map(|(k, v)| (k.to_string(), v.parse().unwrap_or(0))).collect();
        out.insert(mode, row);
    }
    Ok(out)
}

fn stats_delta(
    before: &BTreeMap<u32, BTreeMap<String, u64>>,
    after: &BTreeMap<u32, BTreeMap<String, u64>>,
    mode: u32,
) -> BTreeMap<String, u64> {
    let empty = BTreeMap::new();
    let b = before.get(&mode).unwrap_or(&empty);
    after
        .get(&mode)
        .map(|a| a.iter().map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0))).collect())
        .unwrap_or_default()
}

/// Same-CPU plus same-cluster picks over all picks with a waiting thread.
fn local_share(d: &BTreeMap<String, u64>) -> Option<f64> {
    share_of(d, &["same_cpu", "same_cluster"])
}

fn same_cpu_share(d: &BTreeMap<String, u64>) -> Option<f64> {
    share_of(d, &["same_cpu"])
}

/// The share of picks in `kinds` among all picks that found a waiting thread.
fn share_of(d: &BTreeMap<String, u64>, kinds: &[&str]) -> Option<f64> {
    let g = |k: &str| d.get(k).copied().unwrap_or(0) as f64;
    let total = g("same_cpu") + g("same_cluster") + g("fallback");
    (total > 0.0).then(|| kinds.iter().map(|k| g(k)).sum::<f64>() / total)
}

fn fork() -> Result<libc::pid_t> {
    let _ = std::io::stdout().flush();
    // SAFETY: called while this process is single-threaded (servers and clients are forked
    // from the main thread before it starts any thread).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    Ok(pid)
}

fn exit_child(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: ends a forked child without running the parent's exit handlers twice.
    unsafe { libc::_exit(code) }
}

/// The context manager with one looper thread per entry of `cpus` (None: not pinned).
/// Each reply carries the CPU the serving thread ran on, then the request echoed.
struct Server {
    pid: libc::pid_t,
}

impl Server {
    fn start(cpus: &[Option<u32>]) -> Result<Server> {
        let pid = fork()?;
        if pid == 0 {
            let code = match Self::serve(cpus) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ctabs-check server: {e}");
                    2
                }
            };
            exit_child(code);
        }
        let s = Server { pid };
        s.wait_ready()?;
        Ok(s)
    }

    fn serve(cpus: &[Option<u32>]) -> Result<()> {
        let dev: Arc<Device> = Device::open(DEVICE).map_err(|e| e.to_string())?;
        dev.set_max_threads(0).map_err(|e| e.to_string())?;
        Binder::from_device(dev.clone()).become_context_manager().map_err(|e| e.to_string())?;
        let threads: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    if let Some(c) = cpu {
                        if let Err(e) = pin(c) {
                            eprintln!("ctabs-check server: {e}");
                        }
                    }
                    let mut b = Binder::from_device(dev);
                    if b.enter_looper().is_err() {
                        return;
                    }
                    let e = b.serve(|inc| {
                        let mut r = cpu_now().to_le_bytes().to_vec();
                        r.extend_from_slice(&inc.data);
                        r
                    });
                    eprintln!("ctabs-check server thread: {e}");
                })
            })
            .collect();
        for t in threads {
            let _ = t.join();
        }
        Ok(())
    }

    /// Calls until the manager answers (it may still be starting).
    fn wait_ready(&self) -> Result<()> {
        let mut b = Binder::open(DEVICE).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        loop {
            match b.transact(0, CODE_PING, b"ready?", false) {
                Ok(_) => return Ok(()),
                Err(Error::DeadReply | Error::FailedReply) if t0.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(format!("server never answered: {e}")),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling and reaping our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// What one client process saw.
#[derive(Default, Debug)]
struct ClientStats {
    calls: u64,
    errors: u64,
    same_cpu: u64,
    same_cluster: u64,
    cross: u64,
    total_ns: u64,
}

impl ClientStats {
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}\n",
            self.calls, self.errors, self.same_cpu, self.same_cluster, self.cross, self.total_ns
        )
    }

    fn parse(l: &str) -> Option<ClientStats> {
        let v: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        (v.len() == 6).then(|| ClientStats {
            calls: v[0],
            errors: v[1],
            same_cpu: v[2],
            same_cluster: v[3],
            cross: v[4],
            total_ns: v[5],
        })
    }

    fn add(&mut self, o: &ClientStats) {
        self.calls += o.calls;
        self.errors += o.errors;
        self.same_cpu += o.same_cpu;
        self.same_cluster += o.same_cluster;
        self.cross += o.cross;
        self.total_ns += o.total_ns;
    }

    fn json(&self) -> Value {
        json!({
            "calls": self.calls, "errors": self.errors, "same_cpu": self.same_cpu,
            "same_cluster": self.same_cluster, "cross": self.cross,
            "avg_us": if self.calls > 0 { self.total_ns as f64 / self.calls as f64 / 1000.0 } else { 0.0 },
        })
    }
}

/// One client: `iters` synchronous calls (or until `until`), 16-byte payloads checked in
/// the reply.
fn client(cpu: Option<u32>, iters: u64, until: Option<Instant>, cl: &[i64]) -> ClientStats {
    if let Some(c) = cpu {
        let _ = pin(c);
    }
    let mut st = ClientStats::default();
    let Ok(mut b) = Binder::open(DEVICE) else {
        st.errors = 1;
        return st;
    };
    let mut i = 0u64;
    while i < iters && until.is_none_or(|u| Instant::now() < u) {
        let me = cpu_now();
        let mut payload = [0u8; 16];
        payload[..4].copy_from_slice(&me.to_le_bytes());
        payload[4..12].copy_from_slice(&i.to_le_bytes());
        payload[12..].copy_from_slice(b"ctab");
        let t = Instant::now();
        match b.transact(0, CODE_PING, &payload, false) {
            Ok(r) if r.len() == 20 && r[4..] == payload => {
                st.total_ns += t.elapsed().as_nanos() as u64;
                let server = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
                match Tier::of(me, server, cl) {
                    Tier::SameCore => st.same_cpu += 1,
                    Tier::SameCluster => st.same_cluster += 1,
                    Tier::CrossCluster => st.cross += 1,
                }
                st.calls += 1;
            }
            _ => st.errors += 1,
        }
        i += 1;
    }
    st
}

/// Runs one client process per entry of `cpus` at once and sums what they saw.
fn run_clients(cpus: &[Option<u32>], iters: u64, until: Option<Instant>) -> Result<ClientStats> {
    let cl = clusters();
    let mut kids = vec![];
    for &cpu in cpus {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds is a valid two-element array for pipe(2).
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err("pipe failed".into());
        }
        let pid = fork()?;
        if pid == 0 {
            // SAFETY: fds[1] is the pipe's write end, owned by this child from now on.
            let mut w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
            let st = client(cpu, iters, until, &cl);
            let _ = w.write_all(st.line().as_bytes());
            exit_child(0);
        }
        // SAFETY: closing the parent's copy of the write end; fds[0] is read below.
        unsafe { libc::close(fds[1]) };
        kids.push((pid, fds[0]));
    }
    let mut total = ClientStats::default();
    for (pid, fd) in kids {
        // SAFETY: fd is the read end of the pipe created above, owned here.
        let r = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut line = String::new();
        let _ = BufReader::new(r).read_line(&mut line);
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        match ClientStats::parse(&line) {
            Some(s) => total.add(&s),
            None => total.errors += 1,
        }
    }
    Ok(total)
}

fn parse_list(s: &str) -> Vec<u32> {
    s.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

struct Args(BTreeMap<String, String>);

impl Args {
    fn get<T: std::str::FromStr>(&self, k: &str, default: T) -> T {
        self.0.get(k).and_then(|v| v.parse().ok()).unwrap_or(default)
    }
    fn list(&self, k: &str, default: &str) -> Vec<u32> {
        parse_list(self.0.get(k).map(String::as_str).unwrap_or(default))
    }
}

/// What a mode must show in `affinity`, beyond error-free calls: `None` if it does.
/// Modes 1-3 keep ≥95% of picks local; mode 3 must also have woken servers on the caller's
/// CPU. Mode 0 (list order) and mode 2's nudge (inert by design) are reported, not judged.
fn affinity_problem(m: u32, d: &BTreeMap<String, u64>) -> Option<String> {
    let share = local_share(d);
    if m >= 1 && !share.is_some_and(|s| s >= LOCAL_SHARE_MIN) {
        return Some(format!("mode {m}: local share {share:?}, need {LOCAL_SHARE_MIN}"));
    }
    let woken = d.get("woken_on_caller_cpu").copied().unwrap_or(0);
    if m == 3 && woken == 0 {
        return Some("mode 3: no thread was woken on the caller's CPU (woken_on_caller_cpu 0)".into());
    }
    None
}

/// Picks per mode with servers on every CPU and one client per cluster (see
/// [`affinity_problem`] for what is judged).
fn affinity(a: &Args) -> Result<bool> {
    let iters = a.get("iters", 300u64);
    let servers: Vec<Option<u32>> = a.list("server-cpus", "0,1,2,3,4,5,6,7").into_iter().map(Some).collect();
    let clients: Vec<Option<u32>> = a.list("client-cpus", "1,5,7").into_iter().map(Some).collect();
    let modes = a.list("modes", modes());
    set_counting(true)?;
    let server = Server::start(&servers)?;
    let mut ok = true;
    for &m in &modes {
        set_mode(m)?;
        let mode_read = read_mode()?;
        run_clients(&clients, 20, None)?; // warm-up: every server thread has waited once
        let before = read_stats()?;
        let t = Instant::now();
        let seen = run_clients(&clients, iters, None)?;
        let after = read_stats()?;
        let d = stats_delta(&before, &after, m);
        let share = local_share(&d);
        // Mode 0's shares depend on the order threads happen to wait in, and the same-CPU
        // share on how fast a server gets back to waiting (lower on the debug kernel): both
        // are reported, not judged. KUnit tests the preference itself.
        let problem = match seen.errors {
            0 => affinity_problem(m, &d),
            n => Some(format!("mode {m}: {n} failed calls")),
        };
        ok &= problem.is_none();
        // Where the servers ran, as the clients saw it (the reply carries the server's CPU).
        let client_same_cpu = (seen.calls > 0).then(|| seen.same_cpu as f64 / seen.calls as f64);
        report(
            &format!("affinity_mode{m}"),
            if problem.is_none() { Status::Pass } else { Status::Fail },
            t.elapsed().as_secs_f64() * 1000.0,
            problem,
            json!({ "mode": m, "mode_read": mode_read, "driver": driver(), "counters": d, "local_share": share,
                    "same_cpu_share": same_cpu_share(&d), "client_view": seen.json(),
                    "client_same_cpu_share": client_same_cpu,
                    "server_cpus": a.list("server-cpus", "0,1,2,3,4,5,6,7"), "client_cpus": a.list("client-cpus", "1,5,7") }),
        );
    }
    drop(server);
    set_mode(0)?;
    set_counting(false)?;
    Ok(ok)
}

/// Why mode 3's placement fails, if it does: `same0` and `same3` are the shares of calls
/// served on the caller's CPU in mode 0 and mode 3.
fn placement_problem(same0: f64, same3: f64) -> Option<String> {
    (same3 < PLACEMENT_MODE3_MIN || same3 < same0 + PLACEMENT_RISE_MIN).then(|| {
        format!(
            "mode 3 served {:.1}% of calls on the caller's CPU, mode 0 {:.1}%: the wake-up on the \
             caller's CPU must reach {:.0}% and {:.0} points above mode 0",
            same3 * 100.0,
            same0 * 100.0,
            PLACEMENT_MODE3_MIN * 100.0,
            PLACEMENT_RISE_MIN * 100.0
        )
    })
}

/// Mode 3 judged by where the server ran: unpinned server threads, synchronous calls from
/// SCHED_OTHER clients pinned to `client-cpus`, in mode 0 and then mode 3. Each reply carries
/// the CPU its server thread ran on. The driver's own counter says a wake-up was asked for;
/// this says it moved the server.
fn placement(a: &Args) -> Result<bool> {
    let iters = a.get("iters", 300u64);
    let threads = a.get("server-threads", 8usize);
    let clients: Vec<Option<u32>> = a.list("client-cpus", "1,5,7").into_iter().map(Some).collect();
    let server = Server::start(&vec![None; threads])?;
    let t = Instant::now();
    let mut seen = BTreeMap::new();
    for m in [0u32, 3] {
        set_mode(m)?;
        run_clients(&clients, 20, None)?; // warm-up: every server thread has waited once
        seen.insert(m, run_clients(&clients, iters, None)?);
    }
    drop(server);
    set_mode(0)?;
    let same = |m: u32| seen[&m].same_cpu as f64 / seen[&m].calls.max(1) as f64;
    let errors = seen[&0].errors + seen[&3].errors;
    let problem = match errors {
        0 => placement_problem(same(0), same(3)),
        n => Some(format!("{n} failed calls")),
    };
    report(
        "placement",
        if problem.is_none() { Status::Pass } else { Status::Fail },
        t.elapsed().as_secs_f64() * 1000.0,
        problem.clone(),
        json!({ "server_threads": threads, "client_cpus": a.list("client-cpus", "1,5,7"),
                "mode0": seen[&0].json(), "mode3": seen[&3].json(),
                "same_cpu_share_mode0": same(0), "same_cpu_share_mode3": same(3),
                "mode3_min": PLACEMENT_MODE3_MIN, "rise_min": PLACEMENT_RISE_MIN }),
    );
    Ok(problem.is_none())
}

/// Throughput with a small server pool, modes interleaved round by round.
fn throughput(a: &Args) -> Result<bool> {
    let iters = a.get("iters", 2000u64);
    let rounds = a.get("rounds", 5u32);
    let threads = a.get("server-threads", 1usize);
    let modes = a.list("modes", "0,1");
    let server = Server::start(&vec![None; threads])?;
    let mut per_mode: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut errors = 0;
    for _ in 0..rounds {
        for &m in &modes {
            set_mode(m)?;
            let t = Instant::now();
            let s = run_clients(&[None], iters, None)?;
            errors += s.errors;
            per_mode.entry(m).or_default().push(s.calls as f64 / t.elapsed().as_secs_f64());
        }
    }
    drop(server);
    set_mode(0)?;
    report(
        "throughput",
        if errors == 0 { Status::Pass } else { Status::Fail },
        0.0,
        (errors > 0).then(|| format!("{errors} failed calls")),
        json!({ "server_threads": threads, "iters": iters, "tx_per_s": per_mode }),
    );
    Ok(errors == 0)
}

/// Cost of the scan: call latency with many idle waiting threads, per mode.
fn scan_cost(a: &Args) -> Result<bool> {
    let iters = a.get("iters", 2000u64);
    let client_cpu = a.get("client-cpu", 7u32);
    let modes = a.list("modes", "0,1");
    let mut rows = vec![];
    let mut errors = 0;
    for w in a.list("waiters", "1,16,64") {
        // Pinned round-robin over the silver and gold CPUs: a caller on the prime CPU finds
        // no local thread, so mode 1 scans the full bounded window every time.
        let servers: Vec<Option<u32>> = (0..w).map(|i| Some(i % 7)).collect();
        let server = Server::start(&servers)?;
        for &m in &modes {
            set_mode(m)?;
            run_clients(&[Some(client_cpu)], 50, None)?;
            let s = run_clients(&[Some(client_cpu)], iters, None)?;
            errors += s.errors;
            rows.push(json!({ "waiters": w, "mode": m, "avg_us": s.json()["avg_us"], "calls": s.calls }));
        }
        drop(server);
    }
    set_mode(0)?;
    report(
        "scan_cost",
        if errors == 0 { Status::Pass } else { Status::Fail },
        0.0,
        (errors > 0).then(|| format!("{errors} failed calls")),
        json!({ "client_cpu": client_cpu, "rows": rows }),
    );
    Ok(errors == 0)
}

/// Switches the mode every millisecond while clients call servers; every call must succeed.
fn toggle(a: &Args) -> Result<bool> {
    let secs = a.get("seconds", 5u64);
    let servers: Vec<Option<u32>> = (0..8).map(Some).collect();
    let server = Server::start(&servers)?;
    let until = Instant::now() + Duration::from_secs(secs);
    let count = modes().split(',').count() as u32;
    let pid = fork()?;
    if pid == 0 {
        let mut m = 0;
        while Instant::now() < until {
            m = (m + 1) % count;
            let _ = set_mode(m);
            std::thread::sleep(Duration::from_millis(1));
        }
        exit_child(0);
    }
    let s = run_clients(&[Some(1), Some(5), Some(7), None], u64::MAX, Some(until))?;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    drop(server);
    set_mode(0)?;
    let pass = s.errors == 0 && s.calls > 0;
    report(
        "toggle_under_load",
        if pass { Status::Pass } else { Status::Fail },
        secs as f64 * 1000.0,
        (!pass).then(|| format!("{} calls, {} errors", s.calls, s.errors)),
        s.json(),
    );
    Ok(pass)
}

pub fn main() {
    // A stuck call must end the step, not hang it.
    // SAFETY: alarm has no preconditions; SIGALRM's default action ends the process.
    unsafe { libc::alarm(600) };
    let mut argv = std::env::args().skip(1);
    let cmd = argv.next().unwrap_or_default();
    let mut kv = BTreeMap::new();
    let rest: Vec<String> = argv.collect();
    for pair in rest.chunks(2) {
        if let [k, v] = pair {
            kv.insert(k.trim_start_matches("--").to_string(), v.clone());
        }
    }
    let args = Args(kv);
    let res = match cmd.as_str() {
        "affinity" => affinity(&args),
        "throughput" => throughput(&args),
        "scan-cost" => scan_cost(&args),
        "placement" => placement(&args),
        "toggle" => toggle(&args),
        _ => Err(format!(
            "usage: ctabs-check affinity|throughput|scan-cost|placement|toggle [--key value]..., got {cmd:?}"
        )),
    };
    match res {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            report(&format!("{cmd}_setup"), Status::Fail, 0.0, Some(e), Value::Null);
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::placement_problem;

    #[test]
    fn placement_needs_a_clear_rise() {
        assert_eq!(placement_problem(0.026, 0.908), None);
        assert_eq!(placement_problem(0.102, 0.518), None);
        assert_eq!(placement_problem(0.309, 0.518), None);
        let p = placement_problem(0.309, 0.021).expect("the broken nudge fails");
        assert!(p.contains("mode 3 served 2.1%") && p.contains("35%"), "{p}");
        assert!(placement_problem(0.0, 0.30).is_some(), "below the floor");
        assert!(placement_problem(0.5, 0.6).is_some(), "not far enough above mode 0");
    }
}
