//! android-sched's switches in the guest (the `sched-sync` plan): on the `phone` kernel each
//! switch moves the server of a synchronous binder call to the caller's CPU, and with the
//! switches off the placement is mainline's, as on `perf`, which has no switches.

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::report::{run_and_report, summary::summary};
use labproto::Status;

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

fn status(o: &Outcome, case: &str) -> Status {
    o.results().find(|r| r.1 == case).map(|r| r.2).unwrap_or_else(|| panic!("no result {case}"))
}

#[test]
fn each_switch_moves_sync_wakeups_to_the_callers_cpu() {
    let o = sched_sync("phone");
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

#[test]
fn switches_off_place_as_mainline_does() {
    let phone = sched_sync("phone");
    let perf = sched_sync("perf");
    // perf has no switches: those cases are skipped, not failed.
    for case in ["fair_sync_eas", "fifo_fair_sync_eas", "rt_sync", "rt_sync_fair_waker"] {
        assert_eq!(status(&perf, case), Status::Skip, "{case} on perf");
    }
    // Mainline keeps an RT wakee on its previous CPU on both kernels.
    assert!(share(&perf, "rt_off") <= 0.1 && share(&phone, "rt_off") <= 0.1);
    // EAS's own choice: the same on both kernels.
    for case in ["fair_off", "fifo_fair_off"] {
        let (a, b) = (share(&perf, case), share(&phone, case));
        assert!((a - b).abs() <= 0.25, "{case}: perf {a}, phone with the switches off {b}");
    }
}
