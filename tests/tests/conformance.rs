//! The binder conformance suite and the fuzzer, booted on both kernels: the perf kernel
//! and the debug kernel (lockdep, KASAN, Rust debug assertions), where any splat fails
//! the run. Needs `cargo make setup` (cargo make test runs it first).

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::report::{self, summary::summary};
use labproto::Status;

/// Every case of `binder-conformance --list`, in order.
const CASES: &[&str] = &[
    "binder_version",
    "context_manager",
    "sync_round_trip_sizes",
    "oneway_order",
    "nested_calls",
    "death_notification",
    "refcounts",
    "fd_passing",
    "nonblocking_read",
    "free_buffer",
    "service_manager",
    "thread_pool",
    "tc_deferral",
    "stress_shrinker",
    "bad_invalid_handle",
    "bad_pointers",
    "bad_offsets",
    "bad_oversized",
    "bad_unknown_command",
    "prio_sync",
    "prio_node_caps",
    "prio_oneway",
    "prio_nested",
    "prio_dead_caller",
    "transaction_report",
    "fd_cycle_leak",
    "leaks",
];

const FUZZ_CASES: &[&str] = &["fuzz", "kernel_log", "leaks"];

fn boot(plan: &str, flavor: &str) -> Outcome {
    let opts =
        RunOpts { plan: plan.into(), flavor: flavor.into(), name: format!("{plan}-{flavor}"), ..Default::default() };
    report::run_and_report(&opts).unwrap()
}

/// The run passed, every expected case passed, and the reports are in the run directory.
fn assert_all_pass(o: &Outcome, step: &str, cases: &[&str]) {
    assert!(o.ok(), "run failed:\n{}{}", report::case_table(o), summary(o));
    let got: Vec<(&str, Status)> = o.results().filter(|r| r.0 == step).map(|r| (r.1, r.2)).collect();
    let names: Vec<&str> = got.iter().map(|g| g.0).collect();
    assert_eq!(names, cases, "cases of step {step}");
    assert!(got.iter().all(|g| g.1 == Status::Pass), "{got:?}");
    let junit = std::fs::read_to_string(o.dir.join("junit.xml")).expect("junit.xml in the run directory");
    for c in cases {
        assert!(junit.contains(&format!("name=\"{step}/{c}\"")), "{c} missing from junit.xml");
    }
    let head = junit.lines().nth(1).unwrap_or_default();
    assert!(head.contains(&format!("tests=\"{}\"", cases.len())) && head.contains("failures=\"0\""), "{junit}");
    assert!(junit.contains("<property name=\"flavor\""), "run properties in junit.xml: {junit}");
    let tap = std::fs::read_to_string(o.dir.join("results.tap")).expect("results.tap in the run directory");
    assert!(tap.starts_with(&format!("TAP version 13\n1..{}\n", cases.len())), "{tap}");
    assert!(!tap.contains("not ok"));
}

fn conformance(flavor: &str) {
    let o = boot("conformance", flavor);
    assert_all_pass(&o, "conformance", CASES);
    // The shrinker really reclaimed and reinstalled pages.
    let pages = &o.data("stress_shrinker").unwrap()["server_resident_pages"];
    let (freed, dropped, refilled) = (
        pages["freed"].as_u64().unwrap(),
        pages["after_drop_caches"].as_u64().unwrap(),
        pages["refilled"].as_u64().unwrap(),
    );
    assert!(dropped < freed && refilled > dropped, "{pages}");
    // The seed-002 case follows the deferral switch (rust-driver/lab/) in both modes.
    let tc = o.data("tc_deferral").unwrap();
    assert_eq!(tc["checked"], serde_json::json!(["immediate (defer_tc=0)", "deferred (defer_tc=1)"]), "{tc}");
    // The fd cycle cannot form: the Rust driver refuses a binder fd in a fd object.
    let cycle = o.data("fd_cycle_leak").unwrap();
    assert_eq!(cycle["own_binder_fd"]["result"], "failed_reply", "{cycle}");
    // Priority inheritance (rust-driver 0011) was checked off and on: FIFO 50 reached the server.
    let sync = o.data("prio_sync").unwrap();
    assert_eq!(sync["switch_found"], "0", "{sync}");
    assert_eq!(sync["sync_on_FIFO 50"], "FIFO 50", "{sync}");
    assert_eq!(sync["sync_off_FIFO 50"], "OTHER nice 0", "{sync}");
}

fn fuzz(flavor: &str) {
    let o = boot("fuzz", flavor);
    assert_all_pass(&o, "fuzz", FUZZ_CASES);
    let d = o.data("fuzz").unwrap();
    assert!(d["ops"].as_u64().unwrap() >= 20_000, "{d}");
    assert_eq!(d["stopped_by"], "ops", "{d}");
    assert!(d["seed"].as_str().unwrap().starts_with("0x"));
}

#[test]
fn conformance_perf() {
    conformance("perf");
}

#[test]
fn conformance_debug() {
    conformance("debug");
}

#[test]
fn fuzz_perf() {
    fuzz("perf");
}

#[test]
fn fuzz_debug() {
    fuzz("debug");
}
