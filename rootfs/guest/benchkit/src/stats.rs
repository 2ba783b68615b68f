//! Latency statistics and the output formats of the benchmarks.

use serde_json::{json, Value};

/// `x` as C++ `ostream << double` prints it by default (`%g` with 6 significant digits).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let exp = format!("{:.5e}", x);
    let (mant, e) = exp.split_once('e').expect("exponent");
    let e: i32 = e.parse().expect("exponent digits");
    if !(-4..6).contains(&e) {
        let mant = trim_zeros(mant);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", e.abs())
    } else {
        let decimals = (5 - e).max(0) as usize;
        trim_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The sample at percentile `p` of sorted samples, as binderThroughputTest picks it:
/// `data[p * n / 100]`.
pub fn percentile(sorted: &[u64], p: usize) -> u64 {
    sorted[(p * sorted.len() / 100).min(sorted.len() - 1)]
}

/// Summary of latency samples in nanoseconds, reported in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub avg_ms: f64,
    pub worst_ms: f64,
    pub best_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
}

impl Summary {
    /// Sorts `samples` in place; `None` without samples.
    pub fn of(samples: &mut [u64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        let total: u128 = samples.iter().map(|&s| s as u128).sum();
        Some(Summary {
            count: samples.len(),
            avg_ms: total as f64 / samples.len() as f64 / 1e6,
            worst_ms: ms(samples[samples.len() - 1]),
            best_ms: ms(samples[0]),
            p50_ms: ms(percentile(samples, 50)),
            p90_ms: ms(percentile(samples, 90)),
            p95_ms: ms(percentile(samples, 95)),
            p99_ms: ms(percentile(samples, 99)),
        })
    }

    /// The two lines binderThroughputTest prints after "iterations per sec".
    pub fn aosp_lines(&self) -> String {
        format!(
            "average:{}ms worst:{}ms best:{}ms\n50%: {} 90%: {} 95%: {} 99%: {}\n",
            fmt_g(self.avg_ms),
            fmt_g(self.worst_ms),
            fmt_g(self.best_ms),
            fmt_g(self.p50_ms),
            fmt_g(self.p90_ms),
            fmt_g(self.p95_ms),
            fmt_g(self.p99_ms)
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "avg_ms": self.avg_ms, "worst_ms": self.worst_ms, "best_ms": self.best_ms,
            "p50_ms": self.p50_ms, "p90_ms": self.p90_ms, "p95_ms": self.p95_ms, "p99_ms": self.p99_ms,
        })
    }
}

/// At most `max` evenly spaced samples of sorted `samples` (first and last kept), in ms.
pub fn subsample_ms(sorted: &[u64], max: usize) -> Vec<f64> {
    let n = sorted.len();
    if n <= max || max < 2 {
        return sorted.iter().take(max).map(|&s| s as f64 / 1e6).collect();
    }
    (0..max).map(|k| sorted[k * (n - 1) / (max - 1)] as f64 / 1e6).collect()
}

/// One row of a Google-Benchmark-style table.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    pub name: String,
    pub time_ns: f64,
    pub cpu_ns: f64,
    pub iterations: u64,
}

/// The table Google Benchmark prints on the console.
pub fn gbench_table(rows: &[BenchRow]) -> String {
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max("Benchmark".len());
    let header = format!("{:<w$} {:>13} {:>15} {:>12}", "Benchmark", "Time", "CPU", "Iterations");
    let rule = "-".repeat(header.len());
    let mut s = format!("{rule}\n{header}\n{rule}\n");
    for r in rows {
        s += &format!("{:<w$} {:>10.0} ns {:>12.0} ns {:>12}\n", r.name, r.time_ns, r.cpu_ns, r.iterations);
    }
    s
}

/// Where a callee ran relative to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    SameCore,
    SameCluster,
    CrossCluster,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::SameCore, Tier::SameCluster, Tier::CrossCluster];

    pub fn name(self) -> &'static str {
        match self {
            Tier::SameCore => "same_core",
            Tier::SameCluster => "same_cluster",
            Tier::CrossCluster => "cross_cluster",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Classifies caller CPU `a` and callee CPU `b` with `clusters[cpu]` = cluster_id (an
    /// unknown cluster, -1 or missing, never matches).
    pub fn of(a: u32, b: u32, clusters: &[i64]) -> Tier {
        let c = |x: u32| clusters.get(x as usize).copied().unwrap_or(-1);
        if a == b {
            Tier::SameCore
        } else if c(a) >= 0 && c(a) == c(b) {
            Tier::SameCluster
        } else {
            Tier::CrossCluster
        }
    }
}

/// cluster_id of every CPU, from sysfs.
pub fn clusters() -> Vec<i64> {
    (0..)
        .map_while(|c| std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{c}/topology/cluster_id")).ok())
        .map(|s| s.trim().parse().unwrap_or(-1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_matches_iostream() {
        assert_eq!(fmt_g(34868.7), "34868.7");
        assert_eq!(fmt_g(0.0542985), "0.0542985");
        assert_eq!(fmt_g(0.314584123), "0.314584");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.00001234), "1.234e-05");
        assert_eq!(fmt_g(2.0), "2");
        assert_eq!(fmt_g(100000.0), "100000");
        assert_eq!(fmt_g(0.0001), "0.0001");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(999999.7), "1e+06");
    }

    #[test]
    fn percentiles_pick_like_the_original() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50), 6);
        assert_eq!(percentile(&v, 90), 10);
        assert_eq!(percentile(&v, 99), 10);
        assert_eq!(percentile(&[7], 99), 7);
        let mut s: Vec<u64> = (0..100).rev().map(|x| x * 1_000_000).collect();
        let sum = Summary::of(&mut s).unwrap();
        assert_eq!(sum.best_ms, 0.0);
        assert_eq!(sum.worst_ms, 99.0);
        assert_eq!(sum.p50_ms, 50.0);
        assert_eq!(sum.p95_ms, 95.0);
        assert_eq!(sum.avg_ms, 49.5);
        assert_eq!(sum.aosp_lines(), "average:49.5ms worst:99ms best:0ms\n50%: 50 90%: 90 95%: 95 99%: 99\n");
        assert!(Summary::of(&mut []).is_none());
    }

    #[test]
    fn subsample_keeps_ends() {
        let v: Vec<u64> = (0..10_000).map(|x| x * 1000).collect();
        let s = subsample_ms(&v, 2000);
        assert_eq!(s.len(), 2000);
        assert_eq!(s[0], 0.0);
        assert_eq!(s[1999], 9.999);
        assert_eq!(subsample_ms(&v[..3], 2000).len(), 3);
    }

    #[test]
    fn tiers() {
        let cl = [0, 0, 0, 0, 1, 1, 1, 2];
        assert_eq!(Tier::of(3, 3, &cl), Tier::SameCore);
        assert_eq!(Tier::of(0, 3, &cl), Tier::SameCluster);
        assert_eq!(Tier::of(4, 6, &cl), Tier::SameCluster);
        assert_eq!(Tier::of(6, 7, &cl), Tier::CrossCluster);
        assert_eq!(Tier::of(1, 9, &cl), Tier::CrossCluster);
        assert_eq!(Tier::of(1, 2, &[-1, -1, -1]), Tier::CrossCluster);
    }

    #[test]
    fn gbench_rows_align() {
        let rows = [
            BenchRow { name: "BM_sendVec_binderize/4".into(), time_ns: 51234.4, cpu_ns: 20000.0, iterations: 300 },
            BenchRow { name: "BM_sendVec_binderize/1024".into(), time_ns: 61234.6, cpu_ns: 21000.0, iterations: 300 },
        ];
        let t = gbench_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[3].starts_with("BM_sendVec_binderize/4    "));
        assert!(lines[3].contains(" 51234 ns "));
        assert!(lines[4].contains(" 61235 ns "));
        assert_eq!(lines[3].len(), lines[4].len());
        assert!(lines[4].ends_with(" 300"));
    }
}
