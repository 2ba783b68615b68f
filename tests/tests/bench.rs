//! The quick benchmark profile: checks the report's shape (every row and column, finite
//! numbers, plots written). Figures themselves belong to `cargo make bench`, not to tests.

use lab::harness::opts::RunOpts;
use lab::measure::bench::{self, Profile};

#[test]
fn quick_profile_report_has_every_row_and_column() {
    let (o, _) = bench::execute(Profile::Quick, 2, &RunOpts::default()).unwrap();
    let dir = o.dir.clone();
    assert!(o.ok(), "bench run failed, see {}", dir.display());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let metrics = v["metrics"].as_object().unwrap();
    let mut want = vec![
        "throughput.iterations_per_sec".to_string(),
        "throughput.avg_ms".into(),
        "throughput.p50_ms".into(),
        "throughput.p99_ms".into(),
        "throughput.counters.cpu_migrations".into(),
        "throughput.counters.context_switches".into(),
    ];
    for class in ["fifo", "other"] {
        for tier in ["same_core", "same_cluster", "cross_cluster"] {
            want.push(format!("tiers.{class}.{tier}.pct"));
        }
    }
    for m in &want {
        let row = metrics.get(m).unwrap_or_else(|| panic!("missing metric {m}"));
        for mode in ["0", "1", "2"] {
            let e = &row["per_mode"][mode];
            for k in ["value", "lo", "hi"] {
                assert!(e[k].as_f64().is_some_and(f64::is_finite), "{m} mode {mode} {k}: {e}");
            }
        }
        for mode in ["1", "2"] {
            if m.ends_with(".pct") {
                continue; // a 0% share has no relative change
            }
            assert!(row["delta_pct"][mode]["value"].as_f64().is_some_and(f64::is_finite), "{m} Δ mode {mode}");
        }
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for needle in
        ["SCHED_FIFO", "Normal", "Same-core", "Cross-cluster", "Throughput", "p99 latency", "CPU migrations", "Δ P2/2"]
    {
        assert!(report.contains(needle), "report lacks {needle}");
    }
    for svg in ["throughput.svg", "latency-cdf.svg", "tiers-other.svg", "tiers-fifo.svg"] {
        assert!(std::fs::read_to_string(dir.join(svg)).unwrap().contains("</svg>"), "{svg}");
    }
}
