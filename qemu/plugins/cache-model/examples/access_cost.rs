//! What one data access costs the cache model on the host, the plugin's hot path without QEMU:
//! `cargo run --release -p lab-cache-model --example access_cost [ACCESSES]`. Prints ns per
//! access for a stream shaped like a guest's (mostly L1D hits, private working sets larger
//! than the L1D, lines shared and written between CPUs of both clusters).
//!
//! The stream is a fixed pseudo-random sequence, so two runs model the same accesses; only
//! the host time varies. Geometries are sa8155p's (Cortex-A55/A76 L1D and L2, a 2 MiB L3).

use lab_cache_model::{Config, Costs, CpuConfig, Geometry, L2Policy, Model};
use std::time::Instant;

fn config() -> Config {
    let cost = Costs { l2: 2000, l3: 8000, same_cluster: 8000, cross_cluster: 20000, dram: 124000 };
    let cpu = |cluster, big: bool| CpuConfig {
        cluster,
        l1d: Geometry { size_kib: if big { 64 } else { 32 }, ways: 4 },
        l2: Geometry { size_kib: if big { 256 } else { 128 }, ways: if big { 8 } else { 4 } },
        l2_policy: if big { L2Policy::Inclusive } else { L2Policy::Exclusive },
        cost_ps: cost,
        core_ps: Costs::default(),
        top_khz: 0,
    };
    let cpus = (0..8).map(|i| if i < 4 { cpu(0, false) } else { cpu(if i < 7 { 1 } else { 2 }, true) }).collect();
    Config { line_bytes: 64, l3: Geometry { size_kib: 2048, ways: 16 }, cpus }
}

/// xorshift64*: a fixed, seedless stream.
fn next(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// This thread's CPU time in ns (Linux's schedstat): on a shared host, wall time mostly
/// measures the other processes.
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux's /proc/thread-self/schedstat");
    s.split_whitespace().next().and_then(|w| w.parse().ok()).expect("schedstat starts with the CPU time in ns")
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000_000);
    let mut m = Model::new(config()).expect("the benchmark's config is valid");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut cpu = 0usize;
    let mut charged = 0u64;
    let start = Instant::now();
    let cpu0 = cpu_ns();
    for i in 0..n {
        let r = next(&mut x);
        // A vCPU runs a slice of accesses before the next one does.
        if i.is_multiple_of(2000) {
            cpu = (r >> 56) as usize % 8;
        }
        let base = 0x8000_0000 + cpu as u64 * 0x100_0000;
        let paddr = match r % 100 {
            // The stack and hot data: a few KiB.
            0..=79 => base + (r >> 8) % 0x2000,
            // The private working set: 512 KiB.
            80..=94 => base + 0x10_0000 + (r >> 8) % 0x8_0000,
            // Shared lines (binder buffers, locks): 64 KiB every CPU touches.
            95..=98 => 0x4000_0000 + (r >> 8) % 0x1_0000,
            // Streaming through memory.
            _ => 0x1_0000_0000 + (r >> 8) % 0x1000_0000,
        };
        let store = (r >> 40).is_multiple_of(4);
        charged += m.access(cpu, paddr, store).1;
    }
    let el = start.elapsed();
    let cpu_ns = cpu_ns() - cpu0;
    let c = m.counters(0);
    println!(
        "{n} accesses in {:.3} s wall, {:.3} s CPU: {:.1} ns CPU/access (cpu0: {} refs, {} L1D misses; {} ps charged in all)",
        el.as_secs_f64(),
        cpu_ns as f64 / 1e9,
        cpu_ns as f64 / n as f64,
        c.l1d_refs,
        c.l1d_misses,
        charged
    );
}
