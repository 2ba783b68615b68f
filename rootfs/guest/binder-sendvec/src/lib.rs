//! Seed 002's table: time per synchronous call with payloads of 4, 8, ..., 1024 bytes,
//! printed like Google Benchmark ("BM_sendVec_binderize/<size>  <wall> ns  <cpu> ns  <iters>").
//! Wall time is CLOCK_MONOTONIC per iteration; CPU time is the caller's process CPU time
//! (CLOCK_PROCESS_CPUTIME_ID; the server is another process) per iteration. The server
//! echoes the payload, as the hwbinder benchmark's sendVec does.
//!
//! Options: `-i N` fixed iterations per size (default: adaptive, doubling until a size has run
//! for `--min-time` seconds, 0.5), `--max-size B` (1024), `--ctabs-mode N`, `--defer-tc 0|1`
//! (seed 002's deferral of BR_TRANSACTION_COMPLETE, lab-only series rust-driver/lab/; recorded as
//! "defer_tc", the value in effect, also without the option).

use benchkit::proc::{fork, Chan};
use benchkit::stats::{gbench_table, BenchRow};
use benchkit::{Args, Measure};
use binder::{looper::Looper, Binder, Device, Reply};
use labproto::{report, Status};
use serde_json::json;
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const CODE: u32 = 1;

fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Payload sizes 4, 8, ..., up to `max`.
fn sizes(max: usize) -> Vec<usize> {
    std::iter::successors(Some(4usize), |s| Some(s * 2)).take_while(|&s| s <= max).collect()
}

fn serve(ready: &mut Chan) -> i32 {
    let dev = match Device::open(DEVICE) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("binder-sendvec server: {e}");
            return 2;
        }
    };
    let _ = dev.set_max_threads(0);
    if let Err(e) = dev.become_context_manager_retry(None, Duration::from_secs(10)) {
        eprintln!("binder-sendvec server: context manager: {e}");
        return 2;
    }
    let _looper = Looper::spawn(dev, 1, None, |_, inc| Reply::bytes(&inc.data));
    let _ = ready.signal();
    let _ = ready.wait();
    0
}

/// `n` calls with `data`: (wall ns, cpu ns, failures).
fn batch(b: &mut Binder, data: &[u8], n: u64) -> (u64, u64, u64) {
    let mut failed = 0;
    let (w0, c0) = (Instant::now(), process_cpu_ns());
    for _ in 0..n {
        match b.transact(0, CODE, data, false) {
            Ok(r) if r.len() == data.len() => {}
            _ => failed += 1,
        }
    }
    (w0.elapsed().as_nanos() as u64, process_cpu_ns() - c0, failed)
}

fn run(a: &Args) -> Result<bool, String> {
    let fixed: Option<u64> = if a.has("i") { Some(a.get("i", 0)?) } else { None };
    let min_time: f64 = a.get("min-time", 0.5)?;
    let max_size: usize = a.get("max-size", 1024)?;
    let mode = benchkit::apply_ctabs_mode(a)?;
    let defer_tc = benchkit::apply_defer_tc(a)?;
    let (mut mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
    let mut server = fork(|| serve(&mut theirs)).map_err(|e| e.to_string())?;
    drop(theirs);
    mine.wait().map_err(|_| "the server did not start".to_string())?;

    let mut b = Binder::open(DEVICE).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let measure = Measure::start();
    let mut rows = vec![];
    let mut failed = 0;
    for size in sizes(max_size) {
        let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
        failed += batch(&mut b, &data, 10).2;
        let (n, wall, cpu, f) = match fixed {
            Some(n) => {
                let (w, c, f) = batch(&mut b, &data, n);
                (n, w, c, f)
            }
            None => {
                let mut n = 16;
                loop {
                    let (w, c, f) = batch(&mut b, &data, n);
                    if w as f64 / 1e9 >= min_time || n >= 1 << 24 {
                        break (n, w, c, f);
                    }
                    n *= 2;
                }
            }
        };
        failed += f;
        let n1 = n.max(1) as f64;
        rows.push(BenchRow {
            name: format!("BM_sendVec_binderize/{size}"),
            time_ns: wall as f64 / n1,
            cpu_ns: cpu as f64 / n1,
            iterations: n,
        });
    }
    let mut data = json!({});
    measure.finish(&mut data);
    let _ = mine.signal();
    server.wait();
    print!("{}", gbench_table(&rows));
    let ok = failed == 0;
    let mut d = json!({
        "rows": rows.iter().map(|r| json!({
            "size": r.name.rsplit('/').next().and_then(|s| s.parse::<u64>().ok()),
            "time_ns": r.time_ns, "cpu_ns": r.cpu_ns, "iterations": r.iterations,
        })).collect::<Vec<_>>(),
        "cpu_clock": "CLOCK_PROCESS_CPUTIME_ID", "min_time_s": if fixed.is_none() { Some(min_time) } else { None },
        "ctabs_mode": mode, "defer_tc": defer_tc, "failed_calls": failed,
    });
    for (k, v) in data.as_object().expect("object") {
        d[k] = v.clone();
    }
    report(
        "sendvec",
        if ok { Status::Pass } else { Status::Fail },
        t0.elapsed().as_secs_f64() * 1000.0,
        (!ok).then(|| format!("{failed} failed calls")),
        d,
    );
    Ok(ok)
}

pub fn main() {
    benchkit::main("sendvec", &[], &["i", "max-size", "min-time", "ctabs-mode", "defer-tc"], run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_sizes() {
        assert_eq!(sizes(1024), vec![4, 8, 16, 32, 64, 128, 256, 512, 1024]);
        assert_eq!(sizes(5), vec![4]);
    }
}
