//! benchkit's timed phase in the guest (binder-throughput's "timed_phase"): the benchmark's
//! own counters, inherited over its process tree as `simpleperf stat CMD` counts, and its
//! threads' scheduler accounting, beside the system-wide counters of the same phase.

use lab::harness::opts::RunOpts;
use lab::report::{run_plan_and_report, summary::summary};

#[test]
fn timed_phase_counts_the_benchmarks_whole_process_tree() {
    let argv: Vec<String> = ["/bin/binder-throughput", "-w", "4", "-i", "200"].iter().map(|s| s.to_string()).collect();
    let plan = lab::harness::adhoc::command_plan(&argv, 600);
    // icount: the PMU counts instructions only under precise instruction counting.
    let o = RunOpts { tcg: lab::harness::qemu::Tcg::Icount, ..Default::default() };
    let out = run_plan_and_report(&plan, &o).unwrap();
    assert!(out.ok(), "{}", summary(&out));
    let tp = &out.data("throughput").expect("a throughput result")["timed_phase"];
    let n = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v} in {tp}"));
    let calls = n(&tp["calls"]);
    assert_eq!(calls, 800.0, "{tp}");
    let task = &tp["task"];
    // Each synchronous call switches its caller out and a server thread in and back: at least
    // two switches per call, all of them in the workers. Counters that did not follow the
    // forks (no `inherit`, or an enable that does not reach the children) see only the
    // parent's handful.
    let switches = n(&task["context_switches"]);
    assert!(switches >= 2.0 * calls, "{switches} switches for {calls} calls: {tp}");
    assert!(switches <= n(&tp["system"]["context_switches"]), "more than system-wide: {tp}");
    assert!(n(&task["instructions_user"]) > 0.0 && n(&task["instructions_kernel"]) > 0.0, "{tp}");
    assert!(n(&task["cycles"]) > 0.0, "{tp}");
    // On-CPU time two ways: perf's task clock and the scheduler's accounting of the same
    // threads, within 20% of each other and within the phase's wall time on 8 CPUs.
    let (clock, exec) = (n(&task["task_clock_ns"]), n(&tp["schedstat"]["exec_ns"]));
    assert!((clock - exec).abs() <= 0.2 * exec, "task clock {clock} ns, schedstat {exec} ns: {tp}");
    assert!(exec <= 8.0 * n(&tp["ns"]), "{tp}");
}
