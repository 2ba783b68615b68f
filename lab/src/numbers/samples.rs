//! Benchmark samples: the step names of an interleaved plan, the metrics each result
//! carries, and their per-mode medians with CIs (the rows tables, plots and the gate read).

use crate::numbers::stats::{self, Estimate};
use labproto::Event;
use serde::Serialize;
use std::collections::BTreeMap;

pub const MODES: [u32; 3] = [0, 1, 2];
pub const MODE_NAMES: [&str; 3] = ["Baseline", "Patch 1/2", "Patch 2/2"];

pub fn step_name(bench: &str, mode: u32, rep: usize) -> String {
    format!("{bench}-m{mode}-r{rep}")
}

/// (bench, mode) from a step name.
pub fn parse_step(step: &str) -> Option<(&str, u32)> {
    let mut it = step.rsplitn(3, '-');
    let _rep = it.next()?.strip_prefix('r')?;
    let mode = it.next()?.strip_prefix('m')?.parse().ok()?;
    Some((it.next()?, mode))
}

/// A tier's average latency counts only from this many calls in a repetition.
pub const TIER_MIN_CALLS: f64 = 20.0;

/// binderThroughputTest's histogram bucket width in ms: 128 buckets over 50 ms.
pub const BUCKET_MS: f64 = 50.0 / 128.0;

/// The midpoint of the histogram bucket that latency `ms` falls in, as binderThroughputTest
/// reports a percentile (its last bucket takes everything beyond).
pub fn bucket_mid(ms: f64) -> f64 {
    ((ms / BUCKET_MS).floor().clamp(0.0, 127.0) + 0.5) * BUCKET_MS
}

/// A throughput result's p50/p99 both ways, as `<bench>.pNN_bucket_ms` and
/// `<bench>.pNN_exact_ms`: AOSP's program reports the bucket midpoints and (with aosp/patches
/// 0008) the exact values; the ports report exact values, whose buckets are derived here (the
/// bucket of the port's sample at p * n / 100; AOSP's cumulative count can end one sample
/// earlier, so at a bucket edge the two may differ by one bucket).
fn put_percentiles(put: &mut impl FnMut(String, u32, Option<f64>), b: &str, mode: u32, data: &serde_json::Value) {
    let bucketed = data["percentiles"].as_str() == Some("buckets");
    for p in ["p50", "p99"] {
        let own = data[format!("{p}_ms")].as_f64();
        let (bucket, exact) =
            if bucketed { (own, data["exact"][format!("{p}_ms")].as_f64()) } else { (own.map(bucket_mid), own) };
        put(format!("{b}.{p}_bucket_ms"), mode, bucket);
        put(format!("{b}.{p}_exact_ms"), mode, exact);
    }
}

/// metric -> mode -> one sample per repetition.
pub type Samples = BTreeMap<String, BTreeMap<u32, Vec<f64>>>;

/// The driver's CTABS selection counters (ctabs_stats), in table order.
pub const SELECTIONS: [&str; 6] =
    ["same_cpu", "same_cluster", "fallback", "no_waiter", "nudge_applied", "nudge_skipped_busy"];

/// `<bench>.ctabs.<counter>` from a result's ctabs_stats_delta row of its own mode, the share
/// of selections that found no waiting thread, and the threads the server pools started.
fn put_selections(put: &mut impl FnMut(String, u32, Option<f64>), bench: &str, mode: u32, data: &serde_json::Value) {
    let row = &data["ctabs_stats_delta"][mode.to_string()];
    for k in SELECTIONS {
        put(format!("{bench}.ctabs.{k}"), mode, row[k].as_f64());
    }
    let picks: Option<f64> = SELECTIONS[..4].iter().map(|k| row[*k].as_f64()).sum();
    let share = picks.filter(|&n| n > 0.0).and_then(|n| Some(100.0 * row["no_waiter"].as_f64()? / n));
    put(format!("{bench}.ctabs.no_waiter_pct"), mode, share);
    let started: Option<f64> =
        data["pool"]["threads_started"].as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).sum());
    put(format!("{bench}.pool.threads_started"), mode, started);
}

/// A binder-tiers result: per class and tier the share, count and average latency; the
/// priority-inheritance switch and INHERIT_RT in effect (0/1); and the shares of the FIFO
/// caller's calls whose server ran SCHED_FIFO or SCHED_OTHER.
fn put_tiers(put: &mut impl FnMut(String, u32, Option<f64>), b: &str, mode: u32, data: &serde_json::Value) {
    put_selections(put, b, mode, data);
    put(format!("{b}.prio_inherit"), mode, data["prio_inherit"].as_f64());
    put(format!("{b}.inherit_rt"), mode, data["inherit_rt"].as_bool().map(|v| f64::from(u8::from(v))));
    let seen = data["server_policies"]["fifo"].as_object();
    let calls: Option<f64> = seen.map(|m| m.values().filter_map(|v| v.as_f64()).sum());
    for (k, policy) in [("server_fifo_pct", "SCHED_FIFO"), ("server_other_pct", "SCHED_OTHER")] {
        let n = seen.map(|m| m.get(policy).and_then(|v| v.as_f64()).unwrap_or(0.0));
        let share = calls.filter(|&c| c > 0.0).and_then(|c| Some(100.0 * n? / c));
        put(format!("{b}.fifo_caller.{k}"), mode, share);
    }
    let Some(classes) = data["classes"].as_object() else { return };
    for (class, tiers) in classes {
        let Some(tiers) = tiers.as_object() else { continue };
        for (tier, v) in tiers {
            for k in ["pct", "count"] {
                put(format!("{b}.{class}.{tier}.{k}"), mode, v[k].as_f64());
            }
            // An average over a handful of calls is noise, not a tier latency.
            let enough = v["count"].as_f64().is_some_and(|c| c >= TIER_MIN_CALLS);
            put(format!("{b}.{class}.{tier}.avg_ms"), mode, v["avg_ms"].as_f64().filter(|_| enough));
        }
    }
}

/// Flattens each benchmark result's numbers into named metrics.
pub fn collect(events: &[Event]) -> Samples {
    let mut out: Samples = BTreeMap::new();
    let mut put = |metric: String, mode: u32, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.entry(metric).or_default().entry(mode).or_default().push(v);
        }
    };
    for e in events {
        let Event::Result { step, case, data, .. } = e else { continue };
        let Some((bench, mode)) = parse_step(step) else { continue };
        match (bench, case.as_str()) {
            // Variants (`throughput-w2`, `lab ab`'s -w 2 run) are named by their step.
            (b, "throughput") if b.starts_with("throughput") => {
                for k in ["iterations_per_sec", "avg_ms", "p50_ms", "p99_ms", "worst_ms"] {
                    put(format!("{b}.{k}"), mode, data[k].as_f64());
                }
                put_percentiles(&mut put, b, mode, data);
                if let Some(c) = data["counters"].as_object() {
                    for (k, v) in c {
                        put(format!("{b}.counters.{k}"), mode, v.as_f64());
                    }
                }
                // The benchmark's own context switches (getrusage), the seed's counting scope.
                put(format!("{b}.task_switches.total"), mode, data["task_switches"]["total"].as_f64());
                put_selections(&mut put, b, mode, data);
            }
            // Variants (`inversion-fifo`) are named by their step, each with its own metrics.
            (b, "inversion") if b.starts_with("inversion") => {
                put(format!("{b}.iterations_per_sec"), mode, data["iterations_per_sec"].as_f64());
                for class in ["high", "low"] {
                    let c = &data[class];
                    for k in ["calls_per_sec", "avg_ms", "p50_ms", "p99_ms", "p999_ms", "max_ms"] {
                        put(format!("{b}.{class}.{k}"), mode, c[k].as_f64());
                    }
                    for k in ["block_ms", "wait_ms", "involuntary_switches"] {
                        put(format!("{b}.{class}.sched.{k}"), mode, c["sched"][k].as_f64());
                    }
                    for k in ["alloc_sleeps", "alloc_spins", "other_sleeps"] {
                        put(format!("{b}.{class}.lock.{k}"), mode, data["lock"][class][k].as_f64());
                    }
                }
            }
            ("sendvec", "sendvec") => {
                for r in data["rows"].as_array().into_iter().flatten() {
                    let Some(size) = r["size"].as_u64() else { continue };
                    for k in ["time_ns", "cpu_ns"] {
                        put(format!("sendvec.{size:04}.{k}"), mode, r[k].as_f64());
                    }
                }
            }
            // Variants (`tiers-pi`: priority inheritance on) are named by their step.
            (b, "tiers") if b.starts_with("tiers") => put_tiers(&mut put, b, mode, data),
            _ => {}
        }
    }
    out
}

/// metric -> mode -> per boot (by boot number) its samples: the timing model's runs, whose
/// intervals resample boots.
pub type BootSamples = BTreeMap<String, BTreeMap<u32, Vec<Vec<f64>>>>;

/// Adds one boot's samples as boot number `boot`.
pub fn add_boot(all: &mut BootSamples, boot: usize, s: &Samples) {
    for (metric, by_mode) in s {
        for (mode, v) in by_mode {
            let boots = all.entry(metric.clone()).or_default().entry(*mode).or_default();
            if boots.len() <= boot {
                boots.resize(boot + 1, vec![]);
            }
            boots[boot].extend(v);
        }
    }
}

/// Every sample, whatever its boot.
pub fn pooled(all: &BootSamples) -> Samples {
    all.iter()
        .map(|(metric, by_mode)| (metric.clone(), by_mode.iter().map(|(m, b)| (*m, b.concat())).collect()))
        .collect()
}

/// Median and CI per mode, and Δ% against mode 0, for one metric.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub per_mode: BTreeMap<u32, Estimate>,
    pub delta_pct: BTreeMap<u32, Estimate>,
}

/// Per metric, each mode's median and CI by `median`, and its change against mode 0 by
/// `delta`.
fn summarise_with<T>(
    samples: &BTreeMap<String, BTreeMap<u32, T>>,
    median: impl Fn(&T) -> Option<Estimate>,
    delta: impl Fn(&T, &T) -> Option<Estimate>,
) -> BTreeMap<String, Row> {
    samples
        .iter()
        .map(|(metric, by_mode)| {
            let per_mode = by_mode.iter().filter_map(|(m, v)| Some((*m, median(v)?))).collect();
            let base = by_mode.get(&0);
            let delta_pct =
                by_mode.iter().filter(|(m, _)| **m != 0).filter_map(|(m, v)| Some((*m, delta(base?, v)?))).collect();
            (metric.clone(), Row { per_mode, delta_pct })
        })
        .collect()
}

/// [`summarise`] with intervals that resample boots, then the samples within them.
pub fn summarise_boots(samples: &BootSamples) -> BTreeMap<String, Row> {
    summarise_with(samples, |v| stats::median_ci_boots(v), |b, o| stats::delta_pct_ci_boots(b, o))
}

pub fn summarise(samples: &Samples) -> BTreeMap<String, Row> {
    summarise_with(samples, |v| stats::median_ci(v), |b, o| stats::delta_pct_ci(b, o))
}

/// The samples and rows over `boots` (each boot's events). A deterministic boot
/// (`by_boots`: icount, hicount) is one sample of the machine: the intervals resample boots,
/// then the repetitions inside them, and a row needs [`crate::numbers::table::MIN_SAMPLES`]
/// boots for a mark. Host-timed boots pool their repetitions.
pub fn summary(boots: &[&[Event]], by_boots: bool) -> (Samples, BTreeMap<String, Row>) {
    if !by_boots {
        let samples = collect(&boots.concat());
        let rows = summarise(&samples);
        return (samples, rows);
    }
    let mut all = BootSamples::new();
    for (b, events) in boots.iter().enumerate() {
        add_boot(&mut all, b, &collect(events));
    }
    (pooled(&all), summarise_boots(&all))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(data: serde_json::Value) -> Event {
        Event::Result {
            step: step_name("throughput", 0, 0),
            case: "throughput".into(),
            status: labproto::Status::Pass,
            duration_ms: 0.0,
            message: None,
            data,
        }
    }

    #[test]
    fn buckets_are_binder_throughput_tests() {
        // The seed's p50 and p99: the midpoints of buckets 0 and 1.
        assert_eq!(bucket_mid(0.0), 0.1953125);
        assert_eq!(bucket_mid(0.3906), 0.1953125);
        assert_eq!(bucket_mid(0.390625), 0.5859375);
        assert_eq!(bucket_mid(1e6), 127.5 * BUCKET_MS);
    }

    #[test]
    fn each_program_gives_both_percentiles() {
        let port = collect(&[result(serde_json::json!({"p50_ms": 0.02, "p99_ms": 0.5}))]);
        let one = |s: &Samples, k: &str| s[k][&0][0];
        assert_eq!((one(&port, "throughput.p50_exact_ms"), one(&port, "throughput.p99_exact_ms")), (0.02, 0.5));
        assert_eq!(
            (one(&port, "throughput.p50_bucket_ms"), one(&port, "throughput.p99_bucket_ms")),
            (0.1953125, 0.5859375)
        );
        let aosp = collect(&[result(serde_json::json!({
            "percentiles": "buckets", "p50_ms": 0.195312, "p99_ms": 0.585938,
            "exact": {"p50_ms": 0.017584, "p99_ms": 0.40}}))]);
        assert_eq!(one(&aosp, "throughput.p50_bucket_ms"), 0.195312);
        assert_eq!((one(&aosp, "throughput.p50_exact_ms"), one(&aosp, "throughput.p99_exact_ms")), (0.017584, 0.40));
        // The program's own figure stays under its old name.
        assert_eq!(one(&aosp, "throughput.p50_ms"), 0.195312);
        // Without patch 0008's line there is no exact value, never a made-up one.
        let old = collect(&[result(serde_json::json!({"percentiles": "buckets", "p50_ms": 0.195312}))]);
        assert!(!old.contains_key("throughput.p50_exact_ms"));
    }
}
