//! A binder caller thread that exits right after its call must not stall the server thread
//! that served it (rust-driver 0014: a `PollCondVar` waits for an RCU grace period on drop
//! only if a poll table was registered, as the C driver does per thread).
//!
//! Plan `thread-exit`: binder-tiers, whose FIFO caller is a new thread per call that exits
//! after its reply, traced with `sched_switch` and `sched_wakeup` under `--tcg icount`
//! (deterministic, so the figure does not depend on the host's load). Without the fix the
//! server's pool threads sleep uninterruptibly in `synchronize_rcu()` for 8-30 ms of guest
//! time, and a normal-class call waiting for one takes as long.

use lab::harness::opts::RunOpts;
use lab::harness::qemu::Tcg;
use lab::harness::trace::parse_line;
use lab::report::run_and_report;
use lab_tests::assert_ok;
use std::collections::BTreeMap;

/// The longest uninterruptible sleep (switched out in state D until woken) of any binder
/// pool thread in `trace`, in seconds, with the thread's name, and how many there were.
fn longest_d_sleep(trace: &str) -> (f64, String, usize) {
    let mut asleep: BTreeMap<u32, (f64, String)> = BTreeMap::new();
    let (mut worst, mut who, mut n) = (0.0, String::new(), 0);
    for l in trace.lines().filter_map(parse_line) {
        match l.event {
            "sched_switch" => {
                let comm = l.args.get("prev_comm").copied().unwrap_or_default();
                if comm.starts_with("binder:") && l.args.get("prev_state") == Some(&"D") {
                    let pid = l.args["prev_pid"].parse().expect("prev_pid");
                    asleep.insert(pid, (l.ts, comm.to_string()));
                    n += 1;
                }
            }
            "sched_wakeup" => {
                let pid: u32 = l.args.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
                if let Some((t0, comm)) = asleep.remove(&pid) {
                    if l.ts - t0 > worst {
                        (worst, who) = (l.ts - t0, comm);
                    }
                }
            }
            _ => {}
        }
    }
    (worst, who, n)
}

#[test]
fn a_caller_thread_exit_does_not_stall_its_server() {
    let o = RunOpts { plan: "thread-exit".into(), tcg: Tcg::Icount, ..Default::default() };
    let out = run_and_report(&o).unwrap();
    assert_ok(&out);
    let trace = std::fs::read_to_string(out.dir.join("trace/tiers/trace.txt")).unwrap();
    assert!(trace.contains("comm=binder:"), "the trace has the server's pool threads");
    let (worst, who, n) = longest_d_sleep(&trace);
    // A mutex or a page fault may put a pool thread in D for microseconds; an RCU grace
    // period is milliseconds.
    assert!(
        worst < 0.001,
        "{who} slept uninterruptibly for {:.3} ms ({n} such sleeps of binder threads in {})",
        worst * 1e3,
        out.dir.display()
    );
}

#[test]
fn longest_d_sleep_pairs_a_switch_in_d_with_its_wakeup() {
    let t = "\
    binder:77_2-82      [002] d..2.     3.000100: sched_switch: prev_comm=binder:77_2 prev_pid=82 prev_prio=120 prev_state=D ==> next_comm=swapper/2 next_pid=0 next_prio=120
    binder:77_3-86      [003] d..2.     3.000200: sched_switch: prev_comm=binder:77_3 prev_pid=86 prev_prio=120 prev_state=S ==> next_comm=swapper/3 next_pid=0 next_prio=120
       rcu_sched-14      [006] d..3.     3.014100: sched_wakeup: comm=binder:77_2 pid=82 prio=120 target_cpu=005
       rcu_sched-14      [006] d..3.     3.020100: sched_wakeup: comm=binder:77_3 pid=86 prio=120 target_cpu=005
";
    let (worst, who, n) = longest_d_sleep(t);
    assert!((worst - 0.014).abs() < 1e-9, "{worst}");
    assert_eq!((who.as_str(), n), ("binder:77_2", 1));
}
