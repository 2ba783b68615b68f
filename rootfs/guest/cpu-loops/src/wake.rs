//! Step program `wake-latency`: a periodic sleeper pinned to one CPU, as cyclictest measures
//! one. Each period it sleeps to an absolute CLOCK_MONOTONIC deadline and takes the time it
//! runs again; the wake-up latency is that time minus the deadline (guest time). With nothing
//! else on the CPU it idles between wake-ups, so each one wakes an idle CPU, from the state
//! its cpuidle governor chose: the per-state `usage` counts of
//! `/sys/devices/system/cpu/cpuN/cpuidle/` before and after show which.
//!
//! `wake-latency --cpu N --period-us P --count K`: one result `cpuN` with the latencies'
//! min/p50/p90/max/mean in ns and each idle state's usage during the run.

use labproto::{report, Status};
use serde_json::{json, Map, Value};

/// Each cpuidle state of `cpu` as (name, usage); empty without cpuidle.
fn idle_usage(cpu: u32) -> Vec<(String, u64)> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    let mut out = Vec::new();
    for i in 0.. {
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/state{i}/{f}")).ok();
        // `desc` is the DT's idle-state-name; `name` the node's name, cut to 15 bytes.
        let (Some(name), Some(usage)) = (read("desc").or_else(|| read("name")), read("usage")) else { break };
        out.push((name.trim().to_string(), usage.trim().parse().unwrap_or(0)));
    }
    out
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`.
fn sleep_until(deadline_ns: u64) -> Result<(), String> {
    let ts = libc::timespec { tv_sec: (deadline_ns / 1_000_000_000) as _, tv_nsec: (deadline_ns % 1_000_000_000) as _ };
    loop {
        // SAFETY: ts is a valid timespec; no remainder is asked for with TIMER_ABSTIME.
        let r = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        match r {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(format!("clock_nanosleep: error {e}")),
        }
    }
}

fn run(a: &benchkit::Args) -> Result<bool, String> {
    let cpu: u32 = a.get("cpu", 0)?;
    let period_us: u64 = a.get("period-us", 20_000)?;
    let count: usize = a.get("count", 50)?;
    if period_us == 0 || count == 0 {
        return Err("--period-us and --count must be positive".into());
    }
    benchkit::pin(cpu).map_err(|e| format!("{e} (does the guest have that CPU?)"))?;
    let before = idle_usage(cpu);
    let mut lat = Vec::with_capacity(count);
    let mut deadline = now_ns();
    for _ in 0..count {
        deadline += period_us * 1000;
        sleep_until(deadline)?;
        lat.push(now_ns().saturating_sub(deadline));
    }
    let after = idle_usage(cpu);
    let mut usage = Map::new();
    for ((name, b), (_, a)) in before.iter().zip(&after) {
        usage.insert(name.clone(), Value::from(a - b));
    }
    let mean = lat.iter().sum::<u64>() / lat.len() as u64;
    lat.sort_unstable();
    let pct = |p: usize| benchkit::stats::percentile(&lat, p);
    let data = json!({
        "cpu": cpu, "period_us": period_us, "count": count,
        "min_ns": lat[0], "p50_ns": pct(50), "p90_ns": pct(90), "max_ns": lat[lat.len() - 1], "mean_ns": mean,
        "idle_usage": usage,
    });
    println!(
        "wake-latency: cpu{cpu} every {period_us} us x {count}: p50 {} ns, max {} ns, idle states {}",
        pct(50),
        lat[lat.len() - 1],
        Value::Object(usage)
    );
    report(&format!("cpu{cpu}"), Status::Pass, pct(50) as f64 / 1e6, None, data);
    Ok(true)
}

pub fn main() {
    benchkit::main("wake-latency", &[], &["cpu", "period-us", "count"], run)
}
