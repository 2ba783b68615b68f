//! CTABS in the guest: pick counters per mode with pinned clients and servers, and mode
//! switches under load, on the perf and the debug kernel (which must show no splat).

use lab::harness::opts::{load_plan, RunOpts};
use lab::harness::outcome::Outcome;
use lab::harness::qemu::Tcg;
use lab::report::summary::summary;
use lab::report::{run_and_report, run_plan_and_report};
use labproto::Step;

/// The `ctabs` plan on `flavor` without the steps named in `skip`.
fn ctabs_run(flavor: &str, skip: &[&str]) -> Outcome {
    // Mainline's scheduler policy: these checks are about the driver's picks. Under the
    // phone's (sa8155p's default) SYNC_EAS also puts mode 0's server on the caller's CPU,
    // which narrowed mode 3's margin over mode 0 to about 10 points and failed it once in CI.
    // `--tcg icount`: where an unpinned server runs depends on how the vCPUs interleave, which
    // under `single` follows the host's load (mode 0 served 3-31% of calls on the caller's
    // CPU between runs, mode 3 39-91%: CI failed at 27.3% against 38.8%). Under icount it
    // follows the kernel, the plan and the guest binaries: on perf 7.7% and 90.7% in two runs
    // of one checkout, 10.6% and 95.2% in CI's clone, whose guest binaries differ (they
    // depend on the checkout's path: rootfs/src/guest.rs, `guest_rustflags`).
    let o = RunOpts {
        plan: "ctabs".into(),
        flavor: flavor.into(),
        policy: Some(board::Policy::Mainline),
        tcg: Tcg::Icount,
        ..Default::default()
    };
    let mut plan = load_plan("ctabs").unwrap();
    plan.steps.retain(|s| !skip.contains(&s.name.as_str()));
    let out = run_plan_and_report(&plan, &o).unwrap();
    assert!(out.ok(), "ctabs plan failed on {flavor}:\n{}", summary(&out));
    out
}

fn share(o: &Outcome, mode: u32) -> f64 {
    o.data(&format!("affinity_mode{mode}")).and_then(|d| d["local_share"].as_f64()).expect("local share")
}

#[test]
fn scoring_keeps_picks_local() {
    let o = ctabs_run("perf", &[]);
    // ctabs-check reads the mode back from debugfs: each share was measured in its mode.
    for mode in 0..=3u32 {
        let read = o.data(&format!("affinity_mode{mode}")).and_then(|d| d["mode_read"].as_u64());
        assert_eq!(read, Some(u64::from(mode)), "the driver's ctabs file during mode {mode}");
    }
    for m in [1, 2, 3] {
        assert!(share(&o, m) >= 0.95, "mode {m}: local share {}", share(&o, m));
    }
    // Mode 0's share depends on the order threads happen to wait in: reported, not judged
    // (it ranged from 40% to 99% between runs). KUnit tests the same-CPU preference.
    assert!(o.data("affinity_mode1").unwrap()["same_cpu_share"].as_f64().is_some());
    // Mode 2 decides on the nudge once per synchronous pick on the caller's CPU or cluster
    // (all of ctabs-check's calls are synchronous): applied, or skipped for a busy CPU.
    // Whether it is ever applied is reported, not judged: the caller still runs on its CPU
    // when it wakes the server (patch 0003 measured 0 of 2999).
    let c = &o.data("affinity_mode2").unwrap()["counters"];
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    assert!(n("same_cpu") + n("same_cluster") > 0, "mode 2 made no local pick: {c}");
    assert_eq!(
        n("nudge_applied") + n("nudge_skipped_busy"),
        n("same_cpu") + n("same_cluster"),
        "mode 2: one nudge decision per local pick: {c}"
    );
    eprintln!("mode 2 nudges: {} applied, {} skipped (caller CPU busy)", n("nudge_applied"), n("nudge_skipped_busy"));
    // Mode 3 fires: servers are woken on the caller's CPU.
    let c = &o.data("affinity_mode3").unwrap()["counters"];
    assert!(c["woken_on_caller_cpu"].as_u64().unwrap() > 0, "mode 3 woke nothing on the caller's CPU: {c}");
    // ... and it moves them: with unpinned servers, mode 3 serves far more calls on the
    // caller's CPU than mode 0 (the plan's `placement` step fails otherwise).
    let p = o.data("placement").expect("the placement step's result");
    let same = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
    assert!(same("same_cpu_share_mode3") >= 0.35, "mode 3 placement: {p}");
    assert!(same("same_cpu_share_mode3") >= same("same_cpu_share_mode0") + 0.15, "mode 3 placement: {p}");
}

#[test]
fn mode_switches_under_load_are_clean_on_the_debug_kernel() {
    // Where unpinned servers run (`placement`) is judged on perf above; the debug kernel's
    // KASAN and lockdep change the timing it measures (mode 3 at 34-40% against perf's 91%).
    let o = ctabs_run("debug", &["placement"]);
    assert!(o.data("placement").is_none(), "the placement step was skipped");
    assert!(o.splats.is_empty(), "{:?}", o.splats);
    assert!(o.data("toggle_under_load").unwrap()["calls"].as_u64().unwrap() > 0);
}

/// A step that reports the driver's CTABS mode, as read from debugfs, as a result.
fn mode_step() -> Step {
    let script = format!(
        r#"printf '{{"type":"result","case":"ctabs_mode","status":"pass","data":{{"mode":%s}}}}\n' "$(cat {})""#,
        labproto::CTABS_MODE_FILE
    );
    Step {
        name: "ctabs-mode".into(),
        argv: vec!["/bin/sh".into(), "-c".into(), script],
        timeout_s: 10,
        ..Default::default()
    }
}

#[test]
fn conformance_passes_in_ctabs_modes_1_to_3() {
    // Mode 0 is the default, covered by tests/conformance.rs.
    for mode in [1, 2, 3] {
        let o = RunOpts { append: vec![format!("rust_binder.ctabs={mode}")], ..Default::default() };
        let mut plan = load_plan("conformance").unwrap();
        // After the suite: nothing in it changes the mode, so this is the mode it ran in.
        plan.steps.push(mode_step());
        let out = run_plan_and_report(&plan, &o).unwrap();
        assert!(out.ok(), "conformance failed in CTABS mode {mode}:\n{}", summary(&out));
        let read = out.data("ctabs_mode").and_then(|d| d["mode"].as_u64());
        assert_eq!(read, Some(mode), "rust_binder.ctabs={mode} on the command line; the driver's ctabs file");
    }
}

/// Seed 000's own patches on the C driver (`cbinder-ctabs`, c-ctabs/): the plan `ctabs-c` picks
/// locally in modes 1 and 2, survives mode switches under load, and passes the conformance
/// suite in every mode (each `conformance_modeN` step after a step that sets mode N; fd_cycle_leak
/// only in the last, see the plan).
#[test]
fn c_driver_with_the_seeds_patches() {
    let o = RunOpts { plan: "ctabs-c".into(), flavor: "cbinder-ctabs".into(), ..Default::default() };
    let out = run_and_report(&o).unwrap();
    assert!(out.ok(), "ctabs-c failed on cbinder-ctabs:\n{}", summary(&out));
    for mode in 0..=2u32 {
        let d = out.data(&format!("affinity_mode{mode}")).expect("affinity result");
        assert_eq!(d["driver"], "c", "ctabs-check found the C driver's files: {d}");
        assert_eq!(d["mode_read"].as_u64(), Some(u64::from(mode)), "binder/ctabs during mode {mode}");
        if mode > 0 {
            assert!(d["local_share"].as_f64().unwrap() >= 0.95, "mode {mode}: {d}");
        }
    }
    // Mode 2: one nudge decision per local synchronous pick, as in the Rust port.
    let c = &out.data("affinity_mode2").unwrap()["counters"];
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    assert_eq!(n("nudge_applied") + n("nudge_skipped_busy"), n("same_cpu") + n("same_cluster"), "{c}");
    assert!(out.data("toggle_under_load").unwrap()["calls"].as_u64().unwrap() > 0);
    for step in ["conformance_mode0", "conformance_mode1", "conformance_mode2"] {
        assert!(out.results().any(|r| r.0 == step), "no results from {step}");
    }
}
