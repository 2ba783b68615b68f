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
//!
//! `--walk-kib K`: each iteration instead loads one 64-byte line of a K KiB buffer, in order
//! and around (6 instructions, one load; `insns` counts them). The buffer is written and
//! walked once before the timed loop, so the loop sees a warm cache: a buffer larger than the
//! L1D and smaller than the L2 is a loop of L2 hits, one larger than the L2 one of L3 hits.

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

/// Instructions per iteration of [`walk`].
const WALK_INSNS_PER_ITER: u64 = 6;
const LINE: usize = 64;

/// Exactly `iters` iterations of a loop that loads one line of `buf` each, in order and
/// around: `ldr`, `add`, `cmp`, `csel`, `subs`, `b.ne`.
#[inline(never)]
fn walk(buf: &[u8], iters: u64) {
    if iters == 0 || buf.len() < LINE {
        return;
    }
    let len = buf.len() / LINE * LINE;
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the loads stay below `len` bytes of `buf`; nothing is written.
    unsafe {
        std::arch::asm!(
            "1:",
            "ldr {t}, [{base}, {off}]",
            "add {off}, {off}, #64",
            "cmp {off}, {len}",
            "csel {off}, xzr, {off}, hs",
            "subs {n}, {n}, #1",
            "b.ne 1b",
            base = in(reg) buf.as_ptr(),
            len = in(reg) len,
            off = inout(reg) 0usize => _,
            n = inout(reg) iters => _,
            t = out(reg) _,
            options(readonly, nostack),
        );
    }
    #[cfg(not(target_arch = "aarch64"))]
    for i in 0..iters as usize {
        std::hint::black_box(buf[i * LINE % len]);
    }
}

/// What the loop does: spin, or walk a buffer of `kib` KiB.
#[derive(Clone, Copy)]
enum Work {
    Spin,
    Walk { kib: usize },
}

impl Work {
    fn insns(self, iters: u64) -> u64 {
        iters * if let Work::Walk { .. } = self { WALK_INSNS_PER_ITER } else { INSNS_PER_ITER }
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
fn one_loop(cpu: u32, iters: u64, work: Work, start: &Barrier, t0: &Instant) -> Result<Measured, String> {
    benchkit::pin(cpu).map_err(|e| format!("{e} (does the guest have that CPU?)"))?;
    // Written (not zero pages shared by the kernel) and walked once on this CPU: warm.
    let buf = match work {
        Work::Spin => Vec::new(),
        Work::Walk { kib } => vec![1u8; kib * 1024],
    };
    walk(&buf, (buf.len() / LINE) as u64);
    let counter = benchkit::counters::ThreadCycles::start().ok();
    start.wait();
    let a = t0.elapsed().as_nanos() as u64;
    let c0 = counter.as_ref().and_then(|c| c.read());
    match work {
        Work::Spin => spin(iters),
        Work::Walk { .. } => walk(&buf, iters),
    }
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

fn loop_result(cpu: u32, iters: u64, work: Work, m: Measured) -> bool {
    let Measured { a, b, ended_on, cycles } = m;
    let ok = ended_on == cpu;
    let insns = work.insns(iters);
    let mut data = json!({
        "cpu": cpu, "iters": iters, "insns": insns, "ns": b - a, "start_ns": a, "end_ns": b,
        "cycles": cycles,
    });
    if let Work::Walk { kib } = work {
        data["walk_kib"] = kib.into();
    }
    let msg = (!ok).then(|| format!("ended on cpu{ended_on}, not cpu{cpu}"));
    println!("cpu-loops: cpu{cpu} {insns} insns in {} ns", b - a);
    report(&format!("cpu{cpu}"), if ok { Status::Pass } else { Status::Fail }, (b - a) as f64 / 1e6, msg, data);
    ok
}

fn run(a: &benchkit::Args) -> Result<bool, String> {
    let cpus = parse_cpus(&a.get("cpus", String::from("0"))?)?;
    let iters: u64 = a.get("iters", 100_000_000)?;
    let work = match a.get("walk-kib", 0usize)? {
        0 => Work::Spin,
        kib if kib <= 1 << 20 => Work::Walk { kib },
        kib => return Err(format!("--walk-kib {kib}: at most 1048576 (1 GiB)")),
    };
    let t0 = Instant::now();
    if !a.flag("parallel") {
        let mut ok = true;
        for &cpu in &cpus {
            ok &= loop_result(cpu, iters, work, one_loop(cpu, iters, work, &Barrier::new(1), &t0)?);
        }
        return Ok(ok);
    }
    let start = Arc::new(Barrier::new(cpus.len()));
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let start = start.clone();
            std::thread::spawn(move || one_loop(cpu, iters, work, &start, &t0))
        })
        .collect();
    let mut ok = true;
    let (mut first, mut last) = (u64::MAX, 0);
    for (&cpu, h) in cpus.iter().zip(handles) {
        let r = h.join().map_err(|_| format!("loop on cpu{cpu} panicked"))??;
        first = first.min(r.a);
        last = last.max(r.b);
        ok &= loop_result(cpu, iters, work, r);
    }
    let data = json!({ "cpus": cpus, "iters": iters, "ns": last - first });
    report("all", Status::Pass, (last - first) as f64 / 1e6, None, data);
    Ok(ok)
}

pub fn main() {
    benchkit::main("cpu-loops", &["parallel"], &["cpus", "iters", "walk-kib"], run)
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

    #[test]
    fn walk_returns_and_counts() {
        let buf = vec![1u8; 4096];
        super::walk(&buf, 0);
        super::walk(&buf, 1000);
        super::walk(&buf[..10], 5);
        assert_eq!(super::Work::Walk { kib: 4 }.insns(10), 60);
        assert_eq!(super::Work::Spin.insns(10), 20);
    }
}
