//! Step program: busy loops of an exact instruction count, each pinned to one CPU, timed with
//! CLOCK_MONOTONIC (guest time). The timing model's checks rest on it: per-vCPU instruction
//! counts of a plugin, per-cluster speed (a loop takes `ps_per_insn` x instructions) and
//! overlap of loops on different CPUs in guest time.
//!
//! `cpu-loops --cpus 0,4,7 --iters N [--parallel]`: one loop per listed CPU, one after the
//! other (default) or all at once (started together, `--parallel`). Each loop reports a result
//! `cpuN` with `insns` (2 per iteration), `ns` and its thread's PMU `cycles` (null without a
//! cycle counter); `--parallel` adds `all` with the time from
//! the common start to the last loop's end.

pub mod wake;

use labproto::{report, Status};
use serde_json::json;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Instructions per iteration of [`spin`]: `subs` and `b.ne`.
const INSNS_PER_ITER: u64 = 2;

/// Exactly `iters` iterations of a two-instruction loop.
#[inline(never)]
fn spin(iters: u64) {
    if iters == 0 {
        return;
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the loop only decrements a register it owns; no memory, no stack.
    unsafe {
        std::arch::asm!("1:", "subs {n}, {n}, #1", "b.ne 1b", n = inout(reg) iters => _, options(nomem, nostack));
    }
    #[cfg(not(target_arch = "aarch64"))]
    for i in 0..iters {
        std::hint::black_box(i);
    }
}

/// What one loop measured: start and end offsets in ns from the common start, the CPU it
/// ended on, and its thread's PMU cycles (None where the guest has no cycle counter).
struct Measured {
    a: u64,
    b: u64,
    ended_on: u32,
    cycles: Option<u64>,
}

/// Pins to `cpu`, waits at `start`, runs the loop.
fn one_loop(cpu: u32, iters: u64, start: &Barrier, t0: &Instant) -> Result<Measured, String> {
    benchkit::pin(cpu).map_err(|e| format!("{e} (does the guest have that CPU?)"))?;
    let counter = benchkit::counters::ThreadCycles::start().ok();
    start.wait();
    let a = t0.elapsed().as_nanos() as u64;
    let c0 = counter.as_ref().and_then(|c| c.read());
    spin(iters);
    let c1 = counter.as_ref().and_then(|c| c.read());
    let b = t0.elapsed().as_nanos() as u64;
    let cycles = c0.zip(c1).map(|(x, y)| y.saturating_sub(x));
    Ok(Measured { a, b, ended_on: benchkit::cpu_now(), cycles })
}

fn parse_cpus(s: &str) -> Result<Vec<u32>, String> {
    let cpus: Result<Vec<u32>, _> = s.split(',').map(|c| c.trim().parse::<u32>()).collect();
    let cpus = cpus.map_err(|_| format!("bad --cpus {s:?}: expected a list like 0,4,7"))?;
    if cpus.is_empty() {
        return Err("--cpus is empty".into());
    }
    Ok(cpus)
}

fn loop_result(cpu: u32, iters: u64, m: Measured) -> bool {
    let Measured { a, b, ended_on, cycles } = m;
    let ok = ended_on == cpu;
    let data = json!({
        "cpu": cpu, "iters": iters, "insns": iters * INSNS_PER_ITER, "ns": b - a, "start_ns": a, "end_ns": b,
        "cycles": cycles,
    });
    let msg = (!ok).then(|| format!("ended on cpu{ended_on}, not cpu{cpu}"));
    println!("cpu-loops: cpu{cpu} {} insns in {} ns", iters * INSNS_PER_ITER, b - a);
    report(&format!("cpu{cpu}"), if ok { Status::Pass } else { Status::Fail }, (b - a) as f64 / 1e6, msg, data);
    ok
}

fn run(a: &benchkit::Args) -> Result<bool, String> {
    let cpus = parse_cpus(&a.get("cpus", String::from("0"))?)?;
    let iters: u64 = a.get("iters", 100_000_000)?;
    let t0 = Instant::now();
    if !a.flag("parallel") {
        let mut ok = true;
        for &cpu in &cpus {
            ok &= loop_result(cpu, iters, one_loop(cpu, iters, &Barrier::new(1), &t0)?);
        }
        return Ok(ok);
    }
    let start = Arc::new(Barrier::new(cpus.len()));
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let start = start.clone();
            std::thread::spawn(move || one_loop(cpu, iters, &start, &t0))
        })
        .collect();
    let mut ok = true;
    let (mut first, mut last) = (u64::MAX, 0);
    for (&cpu, h) in cpus.iter().zip(handles) {
        let r = h.join().map_err(|_| format!("loop on cpu{cpu} panicked"))??;
        first = first.min(r.a);
        last = last.max(r.b);
        ok &= loop_result(cpu, iters, r);
    }
    let data = json!({ "cpus": cpus, "iters": iters, "ns": last - first });
    report("all", Status::Pass, (last - first) as f64 / 1e6, None, data);
    Ok(ok)
}

pub fn main() {
    benchkit::main("cpu-loops", &["parallel"], &["cpus", "iters"], run)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists() {
        assert_eq!(super::parse_cpus("0,4, 7").unwrap(), [0, 4, 7]);
        assert!(super::parse_cpus("0,x").unwrap_err().contains("bad --cpus"));
        assert!(super::parse_cpus("").is_err());
    }

    #[test]
    fn spin_returns() {
        super::spin(0);
        super::spin(1000);
    }
}
