//! Benchmark samples: the step names of an interleaved plan, the metrics each result
//! carries, and their per-mode medians with CIs (the rows tables, plots and the gate read).

use crate::measure::stats::{self, Estimate};
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

/// metric -> mode -> one sample per repetition.
pub type Samples = BTreeMap<String, BTreeMap<u32, Vec<f64>>>;

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
            ("throughput", "throughput") => {
                for k in ["iterations_per_sec", "avg_ms", "p50_ms", "p99_ms", "worst_ms"] {
                    put(format!("throughput.{k}"), mode, data[k].as_f64());
                }
                if let Some(c) = data["counters"].as_object() {
                    for (k, v) in c {
                        put(format!("throughput.counters.{k}"), mode, v.as_f64());
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
            ("tiers", "tiers") => {
                let Some(classes) = data["classes"].as_object() else { continue };
                for (class, tiers) in classes {
                    let Some(tiers) = tiers.as_object() else { continue };
                    for (tier, v) in tiers {
                        for k in ["pct", "count"] {
                            put(format!("tiers.{class}.{tier}.{k}"), mode, v[k].as_f64());
                        }
                        // An average over a handful of calls is noise, not a tier latency.
                        let enough = v["count"].as_f64().is_some_and(|c| c >= TIER_MIN_CALLS);
                        put(format!("tiers.{class}.{tier}.avg_ms"), mode, v["avg_ms"].as_f64().filter(|_| enough));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Median and CI per mode, and Δ% against mode 0, for one metric.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub per_mode: BTreeMap<u32, Estimate>,
    pub delta_pct: BTreeMap<u32, Estimate>,
}

pub fn summarise(samples: &Samples) -> BTreeMap<String, Row> {
    samples
        .iter()
        .map(|(metric, by_mode)| {
            let per_mode = by_mode.iter().filter_map(|(m, v)| Some((*m, stats::median_ci(v)?))).collect();
            let base = by_mode.get(&0);
            let delta_pct = by_mode
                .iter()
                .filter(|(m, _)| **m != 0)
                .filter_map(|(m, v)| Some((*m, stats::delta_pct_ci(base?, v)?)))
                .collect();
            (metric.clone(), Row { per_mode, delta_pct })
        })
        .collect()
}
