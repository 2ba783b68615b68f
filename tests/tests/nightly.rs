//! The nightly entry point in its quick profile, against a deliberately better baseline: every
//! stage passes, the artifact directory has the HTML report with inline plots, the merged
//! JUnit, KCIDB JSON that validates, the seed tables; and the baseline makes it fail with a
//! named regression. Figures themselves belong to `cargo make nightly`, not to tests.

use lab::harness::opts::RunOpts;
use lab::measure::bench::Profile;
use lab::measure::nightly::{self, Opts};
use lab::numbers::gate::{self, Verdict};

#[test]
fn quick_nightly_writes_artifacts_and_fails_on_a_regression() {
    let out = tempfile::tempdir().unwrap();
    let baseline = out.path().join("better-baseline.json");
    // Far better than TCG can do: the night must report it as a regression.
    std::fs::write(
        &baseline,
        r#"{"metrics": {"seed000.throughput.iterations_per_sec.m0": {"value": 1e9},
                        "seed000.tiers.other.same_core.pct.m0": {"value": 100}}}"#,
    )
    .unwrap();
    let dir = out.path().join("night");
    let opts = Opts {
        profile: Profile::Quick,
        out: dir.clone(),
        baseline: Some(baseline),
        threshold_pct: 10.0,
        fuzz_ops: 20_000,
        base: RunOpts::default(),
        measure_tcg: lab::harness::qemu::Tcg::Icount,
    };
    let n = nightly::run(&opts).unwrap();
    let failures = n.failures();
    // The only failure is the regression: every stage and kernel passed.
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(failures[0].starts_with("regression: seed000.throughput.iterations_per_sec.m0"), "{failures:?}");
    // Ungated metrics (tier shares) never fail the night.
    assert_eq!(n.comparisons.len(), 1);
    assert_eq!(n.comparisons[0].verdict, Verdict::Regressed);

    for stage in
        ["conformance-perf", "conformance-debug", "conformance-cbinder", "kunit-debug", "ctabs-perf", "fuzz-debug"]
    {
        for f in ["console.log", "manifest.json", "junit.xml", "results.tap"] {
            assert!(dir.join(stage).join(f).is_file(), "{stage}/{f}");
        }
    }
    // The C driver passes the same suite; its seed-002 behaviour is fixed (no switch).
    let cb = n.stages.iter().find(|s| s.name == "conformance-cbinder").unwrap().result.as_ref().unwrap();
    let checked = &cb.data("tc_deferral").unwrap()["checked"];
    assert!(checked[0].as_str().unwrap().starts_with("deferred (fixed: no "), "{checked}");
    assert!(checked[0].as_str().unwrap().ends_with(", c driver)"), "{checked}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("binder-lab nightly: FAIL"));
    assert!(html.matches("<svg").count() >= 4, "plots are inlined");
    assert!(!html.contains("missing:"), "every plot found");
    for needle in ["Seed 000", "Seed 001", "Seed 002", "regressed", "conformance-cbinder"] {
        assert!(html.contains(needle), "report.html lacks {needle}");
    }
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.contains("conformance-cbinder.conformance") && junit.contains("failures=\"0\""), "{junit}");

    // kcidb-io validated it (a kcidb.json that could not be validated is an error).
    assert!(n.kcidb_error.is_none(), "{:?}", n.kcidb_error);
    check_kcidb_json(&dir);

    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("nightly.json")).unwrap()).unwrap();
    assert_eq!(j["ok"], false);
    let m = j["metrics"].as_object().unwrap();
    for key in [
        "seed000.throughput.iterations_per_sec.m2",
        "seed000.tiers.other.same_cluster.pct.m1",
        "seed001.throughput.p99_ms.m0",
        "seed001.throughput.p99_ms.m1",
        "seed001.throughput.p99_ms.m2",
        "seed001.inversion.high.p99_ms.m1",
        "seed001.inversion-fifo.high.p999_ms.m2",
        "seed002.sendvec.0004.time_ns.m0",
        "seed002.sendvec.0064.cpu_ns.m1",
        "fuzz-debug.ops_per_s",
    ] {
        assert!(m[key]["value"].as_f64().is_some_and(f64::is_finite), "{key}");
    }
    let md = std::fs::read_to_string(dir.join("reproduce/reproduce.md")).unwrap();
    assert_eq!(md.lines().filter(|l| l.starts_with("BM_sendVec_binderize/")).count(), 9);
    assert!(md.contains("not measurable here"));
    // Seed 000's FIFO rows once per priority-inheritance state, each with the server's policy:
    // SCHED_FIFO only with the switch on and INHERIT_RT on the node.
    assert!(md.contains("lab pi=0") && md.contains("lab pi=1 ") && md.contains("lab pi=1 RT"), "{md}");
    let fifo_served = |b: &str| m[&format!("seed000.{b}.fifo_caller.server_fifo_pct.m0")]["value"].as_f64();
    assert_eq!([fifo_served("tiers"), fifo_served("tiers-pi")], [Some(0.0); 2]);
    assert_eq!(fifo_served("tiers-pirt"), Some(100.0));

    // The same results against themselves: nothing regresses.
    let cur = gate::load_baseline(&dir.join("nightly.json")).unwrap();
    assert!(gate::compare(&cur, &cur, 10.0).iter().all(|c| c.verdict == Verdict::Ok));
}

fn check_kcidb_json(dir: &std::path::Path) {
    let k: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("kcidb.json")).unwrap()).unwrap();
    assert_eq!(k["version"]["major"], 5);
    // perf, debug, cbinder, cbinder-spin (cbinder-spin-debug is the full profile's only).
    assert_eq!(k["builds"].as_array().unwrap().len(), 4);
    let tests = k["tests"].as_array().unwrap();
    assert!(tests.iter().any(|t| t["path"] == "conformance.conformance.tc_deferral" && t["status"] == "PASS"));
    assert!(tests.iter().any(|t| t["status"] == "DONE" && t["number"]["value"].as_f64().is_some()));
}
