//! android-sched's switches in the guest (the `sched-sync` plan): every kernel carries them,
//! each moves the server of a synchronous binder call to the caller's CPU, and with them off
//! the placement is mainline's. The board's policy (`--policy`) sets them at boot.

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::report::{run_and_report, run_plan_and_report, summary::summary};

fn sched_sync(flavor: &str) -> Outcome {
    // icount: utilization follows guest instructions, not how busy the host is (under plain TCG
    // a loaded host overutilizes the guest's CPUs now and then, and EAS stands aside).
    let o = RunOpts {
        plan: "sched-sync".into(),
        flavor: flavor.into(),
        tcg: lab::harness::qemu::Tcg::Icount,
        ..Default::default()
    };
    let out = run_and_report(&o).unwrap();
    assert!(out.ok(), "sched-sync failed on {flavor}:\n{}", summary(&out));
    out
}

fn share(o: &Outcome, case: &str) -> f64 {
    o.data(case).and_then(|d| d["same_cpu_share"].as_f64()).unwrap_or_else(|| panic!("{case}: no share"))
}

#[test]
fn each_switch_moves_sync_wakeups_to_the_callers_cpu() {
    let o = sched_sync("perf");
    // The guest judges the shares too (>= 90% on, <= 10% for RT without an honoured switch);
    // these are the host's own checks of what it reported.
    for (case, feature) in [("fair_sync_eas", "SYNC_EAS"), ("fifo_fair_sync_eas", "SYNC_EAS"), ("rt_sync", "RT_SYNC")] {
        assert!(share(&o, case) >= 0.9, "{case}: {}", o.data(case).unwrap());
        // Read back from debugfs during the case: this switch on, the other off.
        let sw = &o.data(case).unwrap()["switches"];
        for s in ["SYNC_EAS", "RT_SYNC"] {
            assert_eq!(sw[s].as_bool(), Some(s == feature), "{case}: switches {sw}");
        }
    }
    for case in ["rt_off", "rt_sync_fair_waker"] {
        assert!(share(&o, case) <= 0.1, "{case}: {}", o.data(case).unwrap());
    }
    for (off, on) in [("fair_off", "fair_sync_eas"), ("fifo_fair_off", "fifo_fair_sync_eas"), ("rt_off", "rt_sync")] {
        assert!(share(&o, on) >= share(&o, off) + 0.3, "{off} {} against {on} {}", share(&o, off), share(&o, on));
        let sw = &o.data(off).unwrap()["switches"];
        assert!(sw["SYNC_EAS"] == false && sw["RT_SYNC"] == false, "{off}: switches {sw}");
    }
}

/// The scheduler's state at boot, as the guest reads it before anything else runs.
fn boot_state(board: &str, policy: Option<board::Policy>) -> Outcome {
    let read =
        "cat /sys/kernel/debug/sched/features /proc/sys/kernel/sched_rt_period_us /proc/sys/kernel/sched_rt_runtime_us";
    let plan = lab::harness::adhoc::command_plan(&["/bin/sh".into(), "-c".into(), read.into()], 30);
    let o = RunOpts { board: board.into(), policy, ..Default::default() };
    let out = run_plan_and_report(&plan, &o).unwrap();
    assert!(out.ok(), "{board} {policy:?}:\n{}", summary(&out));
    out
}

/// Features on (`NAME`, not `NO_NAME`; sorted) and the two RT sysctls, from [`boot_state`]'s
/// output.
fn switches_and_rt(o: &Outcome) -> (Vec<String>, Vec<String>) {
    let lines = &o.step_output["sh"];
    let mut on: Vec<String> =
        lines[0].split_whitespace().filter(|w| ["SYNC_EAS", "RT_SYNC"].contains(w)).map(String::from).collect();
    on.sort();
    (on, lines[1..].to_vec())
}

#[test]
fn the_board_policy_is_applied_at_boot_and_mainline_writes_nothing() {
    // sa8155p's default is the phone's: both switches on, Qualcomm's RT period and runtime.
    let phone = switches_and_rt(&boot_state("sa8155p", None));
    assert_eq!(phone, (vec!["RT_SYNC".into(), "SYNC_EAS".into()], vec!["1350000".into(), "1250000".into()]));
    // --policy mainline: the kernel's own defaults (7.2: runtime = period, the fair server keeps
    // CFS from starving; 6.1 had 950000).
    let mainline = switches_and_rt(&boot_state("sa8155p", Some(board::Policy::Mainline)));
    assert_eq!(mainline, (vec![], vec!["1000000".into(), "1000000".into()]));
    // A board without [policy] runs mainline's and refuses a phone policy before booting.
    assert_eq!(switches_and_rt(&boot_state("symmetric", None)), mainline);
    let o = RunOpts { board: "symmetric".into(), policy: Some(board::Policy::Phone), ..Default::default() };
    let e = format!("{:#}", run_and_report(&o).unwrap_err());
    assert!(e.contains("no [policy] section") && e.contains("--policy mainline"), "{e}");
}
