//! The nightly's regression gate: which metrics gate and which way is better, the metrics
//! of a night as `nightly.json` stores them, and the rule that compares two nights.

use crate::numbers::samples::Row;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// `seed000.throughput.avg_ms` of `seed000.throughput.avg_ms.m1`.
fn without_mode(metric: &str) -> &str {
    metric.rsplit_once(".m").map(|(m, _)| m).unwrap_or(metric)
}

/// Which metrics gate, and which way is better. Tier latencies, shares and counters are
/// reported but not gated: their spread under TCG is too wide for a fixed threshold.
pub fn better(metric: &str) -> Option<Better> {
    let m = without_mode(metric);
    if m.ends_with("iterations_per_sec") || m.ends_with("ops_per_s") {
        return Some(Better::Higher);
    }
    let latency = ["throughput.avg_ms", "throughput.p50_ms", "throughput.p99_ms"].iter().any(|s| m.ends_with(s));
    let sendvec = m.contains(".sendvec.") && (m.ends_with(".time_ns") || m.ends_with(".cpu_ns"));
    (latency || sendvec).then_some(Better::Lower)
}

/// A metric's value in `nightly.json`; `lo`/`hi` are the 95% CI when there is one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Metric {
    pub value: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better: Option<Better>,
}

pub type Metrics = BTreeMap<String, Metric>;

/// `seed000.throughput.iterations_per_sec.m0` for each mode of each row.
pub fn flatten(rows: &BTreeMap<String, Row>) -> Metrics {
    let mut out = Metrics::new();
    for (name, row) in rows {
        for (mode, e) in &row.per_mode {
            let key = format!("{name}.m{mode}");
            let better = better(&key);
            out.insert(key, Metric { value: e.value, lo: Some(e.lo), hi: Some(e.hi), better });
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Improved,
    Regressed,
    /// In the baseline, not in this run.
    Missing,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub metric: String,
    pub baseline: f64,
    pub current: Option<Metric>,
    /// Positive is worse, in %.
    pub worse_pct: Option<f64>,
    pub verdict: Verdict,
}

/// Compares the gated metrics. A metric regresses when it is worse than the baseline by more
/// than `threshold_pct` and the baseline value lies outside this run's 95% CI (so one noisy
/// run alone does not fail the night).
pub fn compare(baseline: &Metrics, current: &Metrics, threshold_pct: f64) -> Vec<Comparison> {
    let mut out = vec![];
    for (name, b) in baseline {
        let Some(dir) = better(name) else { continue };
        let Some(c) = current.get(name) else {
            out.push(Comparison {
                metric: name.clone(),
                baseline: b.value,
                current: None,
                worse_pct: None,
                verdict: Verdict::Missing,
            });
            continue;
        };
        if b.value == 0.0 || !b.value.is_finite() {
            continue;
        }
        let change = (c.value - b.value) / b.value * 100.0;
        let worse = if dir == Better::Higher { -change } else { change };
        let outside = match (c.lo, c.hi) {
            (Some(lo), Some(hi)) => b.value < lo || b.value > hi,
            _ => true,
        };
        let verdict = if worse > threshold_pct && outside {
            Verdict::Regressed
        } else if worse < -threshold_pct && outside {
            Verdict::Improved
        } else {
            Verdict::Ok
        };
        out.push(Comparison {
            metric: name.clone(),
            baseline: b.value,
            current: Some(c.clone()),
            worse_pct: Some(worse),
            verdict,
        });
    }
    out
}

/// Reads the metrics of a baseline: a previous `nightly.json`, or any JSON object with a
/// `metrics` map of `{"value": ...}`.
pub fn load_baseline(path: &Path) -> Result<Metrics> {
    #[derive(Deserialize)]
    struct File {
        metrics: Metrics,
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the baseline {}: give a previous nightly.json", path.display()))?;
    let f: File = serde_json::from_str(&text).with_context(|| {
        format!("{} is not a baseline: it needs {{\"metrics\": {{\"<name>\": {{\"value\": <number>}}}}}}, as in nightly.json", path.display())
    })?;
    Ok(f.metrics)
}

/// The unit of a metric, from its name.
pub fn unit_of(metric: &str) -> &'static str {
    let m = without_mode(metric);
    if m.ends_with("_ms") {
        "ms"
    } else if m.ends_with("_ns") {
        "ns"
    } else if m.ends_with("per_sec") || m.ends_with("per_s") {
        "1/s"
    } else if m.ends_with(".pct") {
        "%"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(value: f64, lo: f64, hi: f64) -> Metric {
        Metric { value, lo: Some(lo), hi: Some(hi), better: None }
    }

    #[test]
    fn gated_metrics_and_their_direction() {
        assert_eq!(better("seed000.throughput.iterations_per_sec.m0"), Some(Better::Higher));
        assert_eq!(better("seed001.throughput.p99_ms.m1"), Some(Better::Lower));
        assert_eq!(better("seed002.sendvec.0064.cpu_ns.m1"), Some(Better::Lower));
        assert_eq!(better("fuzz-debug.ops_per_s"), Some(Better::Higher));
        assert_eq!(better("seed000.tiers.other.same_core.avg_ms.m0"), None);
        assert_eq!(better("seed000.throughput.counters.cpu_migrations.m0"), None);
        assert_eq!(better("seed000.throughput.worst_ms.m0"), None);
    }

    #[test]
    fn compare_needs_threshold_and_ci() {
        let t = "seed000.throughput.iterations_per_sec.m0";
        let l = "seed000.throughput.avg_ms.m0";
        let base: Metrics = [(t.to_string(), m(1000.0, 0.0, 0.0)), (l.to_string(), m(1.0, 0.0, 0.0))].into();
        // 20% fewer iterations, CI excludes the baseline: regressed.
        let cur: Metrics = [(t.to_string(), m(800.0, 780.0, 820.0)), (l.to_string(), m(1.0, 0.9, 1.1))].into();
        let c = compare(&base, &cur, 10.0);
        assert_eq!(c.iter().find(|c| c.metric == t).unwrap().verdict, Verdict::Regressed);
        assert_eq!(c.iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Ok);
        // Same drop but the CI still covers the baseline: noise, not a regression.
        let wide: Metrics = [(t.to_string(), m(800.0, 600.0, 1100.0))].into();
        let c = compare(&base, &wide, 10.0);
        assert_eq!(c.iter().find(|c| c.metric == t).unwrap().verdict, Verdict::Ok);
        assert_eq!(c.iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Missing);
        // Latency 50% lower: improved, never a failure.
        let fast: Metrics = [(l.to_string(), m(0.5, 0.45, 0.55))].into();
        assert_eq!(compare(&base, &fast, 10.0).iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Improved);
        // Ungated metrics are not compared.
        let other: Metrics = [("x.tiers.pct.m0".to_string(), m(1.0, 1.0, 1.0))].into();
        assert!(compare(&other, &other, 10.0).is_empty());
    }

    #[test]
    fn baseline_file_errors_name_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b.json");
        std::fs::write(&p, "{\"metrics\": {\"a.iterations_per_sec.m0\": {\"value\": 5}}}").unwrap();
        assert_eq!(load_baseline(&p).unwrap()["a.iterations_per_sec.m0"].value, 5.0);
        std::fs::write(&p, "{\"nope\": 1}").unwrap();
        let e = format!("{:#}", load_baseline(&p).unwrap_err());
        assert!(e.contains("is not a baseline") && e.contains("nightly.json"), "{e}");
        let e = format!("{:#}", load_baseline(&d.path().join("missing.json")).unwrap_err());
        assert!(e.contains("reading the baseline"), "{e}");
    }

    #[test]
    fn units_from_names() {
        assert_eq!(unit_of("seed000.throughput.avg_ms.m1"), "ms");
        assert_eq!(unit_of("seed002.sendvec.0004.time_ns.m0"), "ns");
        assert_eq!(unit_of("fuzz-debug.ops_per_s"), "1/s");
        assert_eq!(unit_of("seed000.tiers.other.same_core.pct.m0"), "%");
    }
}
