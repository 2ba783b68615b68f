//! CTABS in the guest: pick counters per mode with pinned clients and servers, and mode
//! switches under load, on the perf and the debug kernel (which must show no splat).

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::report::{self as run, summary::summary};

fn ctabs_run(flavor: &str) -> Outcome {
    let o = RunOpts { plan: "ctabs".into(), flavor: flavor.into(), ..Default::default() };
    let out = run::run(&o).unwrap();
    assert!(out.ok(), "ctabs plan failed on {flavor}:\n{}", summary(&out));
    out
}

fn share(o: &Outcome, mode: u32) -> f64 {
    o.data(&format!("affinity_mode{mode}")).and_then(|d| d["local_share"].as_f64()).expect("local share")
}

#[test]
fn scoring_keeps_picks_local() {
    let o = ctabs_run("perf");
    assert!(share(&o, 1) >= 0.95 && share(&o, 2) >= 0.95, "modes 1/2: {} {}", share(&o, 1), share(&o, 2));
    // Mode 0's share depends on the order threads happen to wait in: reported, not judged
    // (it ranged from 40% to 99% between runs). KUnit tests the same-CPU preference.
    assert!(o.data("affinity_mode1").unwrap()["same_cpu_share"].as_f64().is_some());
    // The nudge is counted either way: applied or skipped for a busy caller CPU.
    let c = &o.data("affinity_mode2").unwrap()["counters"];
    let nudges = c["nudge_applied"].as_u64().unwrap() + c["nudge_skipped_busy"].as_u64().unwrap();
    assert!(nudges > 0, "mode 2 counted no nudge decision: {c}");
}

#[test]
fn mode_switches_under_load_are_clean_on_the_debug_kernel() {
    let o = ctabs_run("debug");
    assert!(o.splats.is_empty(), "{:?}", o.splats);
    assert!(o.data("toggle_under_load").unwrap()["calls"].as_u64().unwrap() > 0);
}

#[test]
fn conformance_passes_in_ctabs_modes_1_and_2() {
    // Mode 0 is the default, covered by tests/conformance.rs.
    for mode in [1, 2] {
        let o = RunOpts {
            plan: "conformance".into(),
            append: vec![format!("rust_binder.ctabs={mode}")],
            ..Default::default()
        };
        let out = run::run(&o).unwrap();
        assert!(out.ok(), "conformance failed in CTABS mode {mode}:\n{}", summary(&out));
        let console = std::fs::read_to_string(out.dir.join("manifest.json")).unwrap();
        assert!(console.contains(&format!("rust_binder.ctabs={mode}")));
    }
}
