//! Step program: the binder conformance suite. Each case runs in its own forked process
//! (so a crash or a hang stays contained and the driver cleans up after it), with a
//! timeout, and becomes one result line for the host. Kernel log records logged during a
//! case are checked for splats, which fail that case.
//!
//! `binder-conformance [--case NAME]... [--skip NAME]... [--list] [--stress-seconds S]
//! [--seed N] [--device PATH] [--defer-tc-switch PATH] [--prio-switch PATH]`
//!
//! The last case, `leaks`, compares binderfs `binder_logs/stats` (and `state`) from
//! before the first case with after the last: no process, thread, node, ref or buffer
//! may remain.

mod bad;
mod basic;
mod common;
mod fdcycle;
mod pool;
mod prio;
mod report;
mod seed002;
mod stress;
mod zap_race;

use common::{CaseError, CaseResult, Ctx, Data, SUMMARY};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use syskit::child::fork_child;
use testkit::kmsg::{self, Kmsg};
use testkit::logs::{self, Stats};
use testkit::{is_debug_kernel, Driver};

pub struct Case {
    pub name: &'static str,
    /// Timeout on the perf kernel (scaled on debug).
    pub timeout_s: f64,
    pub run: fn(&Ctx, &mut Data) -> CaseResult,
}

const CASES: &[Case] = &[
    Case { name: "binder_version", timeout_s: 10.0, run: basic::binder_version },
    Case { name: "context_manager", timeout_s: 20.0, run: basic::context_manager },
    Case { name: "sync_round_trip_sizes", timeout_s: 30.0, run: basic::round_trip_sizes },
    Case { name: "oneway_order", timeout_s: 30.0, run: basic::oneway_order },
    Case { name: "nested_calls", timeout_s: 20.0, run: basic::nested_calls },
    Case { name: "death_notification", timeout_s: 30.0, run: basic::death_notification },
    Case { name: "refcounts", timeout_s: 20.0, run: basic::refcounts },
    Case { name: "fd_passing", timeout_s: 20.0, run: basic::fd_passing },
    Case { name: "nonblocking_read", timeout_s: 10.0, run: basic::nonblocking_read },
    Case { name: "free_buffer", timeout_s: 20.0, run: basic::free_buffer },
    Case { name: "service_manager", timeout_s: 20.0, run: basic::service_manager },
    Case { name: "thread_pool", timeout_s: 30.0, run: pool::thread_pool },
    Case { name: "tc_deferral", timeout_s: 20.0, run: seed002::tc_deferral },
    Case { name: "stress_shrinker", timeout_s: 90.0, run: stress::stress_shrinker },
    Case { name: "bad_invalid_handle", timeout_s: 15.0, run: bad::invalid_handle },
    Case { name: "bad_pointers", timeout_s: 15.0, run: bad::bad_pointers },
    Case { name: "bad_offsets", timeout_s: 15.0, run: bad::bad_offsets },
    Case { name: "bad_oversized", timeout_s: 15.0, run: bad::oversized },
    Case { name: "bad_unknown_command", timeout_s: 15.0, run: bad::unknown_command },
    Case { name: "prio_sync", timeout_s: 20.0, run: prio::prio_sync },
    Case { name: "prio_node_caps", timeout_s: 20.0, run: prio::prio_node_caps },
    Case { name: "prio_oneway", timeout_s: 20.0, run: prio::prio_oneway },
    Case { name: "prio_nested", timeout_s: 20.0, run: prio::prio_nested },
    Case { name: "prio_dead_caller", timeout_s: 30.0, run: prio::prio_dead_caller },
    Case { name: "transaction_report", timeout_s: 30.0, run: report::transaction_report },
    // Last: on the C driver it leaks a process that stays the context manager, so any later
    // case that needs one gets EBUSY.
    Case { name: "fd_cycle_leak", timeout_s: 60.0, run: fdcycle::fd_cycle_leak },
];

/// Known driver issues: run only when named with `--case`.
const OPT_IN: &[Case] = &[
    // Aims at a window that only seed 001's C patch opens; it pins threads and runs the
    // shrinker without pause, so it stays out of the default run.
    Case { name: "shrinker_zap_race", timeout_s: 60.0, run: zap_race::shrinker_zap_race },
];

/// The final case (not in CASES: it runs in the runner itself).
const LEAKS: &str = "leaks";
/// How long the driver may take to release the processes of a finished case.
const RELEASE_WAIT: Duration = Duration::from_secs(10);
/// Kernel log lines (level <= warning) kept per case in its data.
const MAX_LOG_LINES: usize = 12;

struct Args {
    cases: Vec<String>,
    skip: Vec<String>,
    list: bool,
    ctx: Ctx,
}

fn usage() -> ! {
    eprintln!(
        "usage: binder-conformance [--case NAME]... [--skip NAME]... [--list] [--stress-seconds S] [--seed N] \
         [--device PATH] [--defer-tc-switch PATH] [--prio-switch PATH]"
    );
    std::process::exit(2);
}

fn parse_args() -> Args {
    let debug = is_debug_kernel();
    let mut a = Args {
        cases: vec![],
        skip: vec![],
        list: false,
        ctx: Ctx {
            dev: binder::DEFAULT_DEVICE.into(),
            driver: Driver::detect(),
            debug,
            scale: if debug { 4 } else { 1 },
            stress_s: if debug { 20.0 } else { 15.0 },
            seed: 0x5eed_0001,
            defer_tc_switch: seed002::DEFER_TC_SWITCH.into(),
            prio_switch: prio::PRIO_SWITCH.into(),
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--case" => a.cases.push(val()),
            "--skip" => a.skip.push(val()),
            "--list" => a.list = true,
            "--device" => a.ctx.dev = val(),
            "--stress-seconds" => a.ctx.stress_s = val().parse().unwrap_or_else(|_| usage()),
            "--seed" => a.ctx.seed = parse_u64(&val()).unwrap_or_else(|| usage()),
            "--defer-tc-switch" => a.ctx.defer_tc_switch = val(),
            "--prio-switch" => a.ctx.prio_switch = val(),
            _ => usage(),
        }
    }
    a
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Runs one case in a forked process and collects (status, message, data).
fn run_case(case: &Case, ctx: &Ctx) -> (Status, Option<String>, Data) {
    let child = fork_child(|chan| {
        let mut data = Data::new();
        let r = (case.run)(ctx, &mut data);
        let (status, message) = match r {
            Ok(()) => ("pass", data.get(SUMMARY).and_then(|s| s.as_str()).map(String::from)),
            Err(CaseError::Fail(m)) => ("fail", Some(m)),
            Err(CaseError::Skip(m)) => ("skip", Some(m)),
        };
        let line = json!({"status": status, "message": message, "data": Value::Object(data)});
        let _ = chan.send(&line.to_string());
        0
    });
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return (Status::Fail, Some(format!("fork: {e}")), Data::new()),
    };
    let timeout = ctx.t(case.timeout_s);
    let got = child.chan.recv(timeout);
    let mut data = Data::new();
    let (status, message) = match got {
        Ok(Some(line)) => match serde_json::from_str::<Value>(&line) {
            Ok(v) => {
                if let Some(d) = v.get("data").and_then(|d| d.as_object()) {
                    data = d.clone();
                }
                let st = match v.get("status").and_then(|s| s.as_str()) {
                    Some("pass") => Status::Pass,
                    Some("skip") => Status::Skip,
                    _ => Status::Fail,
                };
                (st, v.get("message").and_then(|m| m.as_str()).map(String::from))
            }
            Err(e) => (Status::Fail, Some(format!("unreadable case result ({e}): {line}"))),
        },
        Ok(None) => {
            child.kill();
            (Status::Fail, Some(format!("timed out after {:.0} s (case process killed)", timeout.as_secs_f64())))
        }
        Err(e) => {
            let st = child.wait_timeout(Duration::from_secs(5));
            (Status::Fail, Some(format!("case process ended without a result ({e}); exit status {st:?}")))
        }
    };
    let exit = child.wait_timeout(Duration::from_secs(10)).or_else(|| child.finish());
    if status != Status::Fail && exit != Some(0) {
        return (Status::Fail, Some(format!("case process exited with status {exit:?}")), data);
    }
    (status, message, data)
}

/// Waits until the binder processes of finished cases are gone from binder_logs/stats
/// (the driver releases them asynchronously). Returns the pids still there.
fn wait_released(baseline: &[i32], timeout: Duration) -> Vec<i32> {
    let t0 = Instant::now();
    loop {
        let extra: Vec<i32> = Stats::read()
            .map(|s| s.procs.iter().map(|p| p.pid).filter(|p| !baseline.contains(p)).collect())
            .unwrap_or_default();
        if extra.is_empty() || t0.elapsed() >= timeout {
            return extra;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stats_json(s: &Stats) -> Value {
    let (procs, threads, nodes, refs, buffers) = s.totals();
    json!({"procs": procs, "threads": threads, "nodes": nodes, "refs": refs, "buffers": buffers})
}

/// The leaks case: everything the suite created is gone again, but for the documented leaks
/// of the driver under test (`known`, pids as binder_logs/stats shows them).
fn leaks(
    before: &Stats,
    state_before: &str,
    case_leftovers: &[(String, Vec<i32>)],
    known: &[i32],
) -> (Status, Option<String>, Data) {
    let baseline: Vec<i32> = before.procs.iter().map(|p| p.pid).chain(known.iter().copied()).collect();
    let left = wait_released(&baseline, RELEASE_WAIT);
    let after = Stats::read().unwrap_or_default();
    let state_after = logs::read_state();
    let mut data = Data::new();
    data.insert("before".into(), stats_json(before));
    data.insert("after".into(), stats_json(&after));
    let mut deltas = serde_json::Map::new();
    for (k, v) in &after.global {
        let d = v - before.counter(k).min(*v);
        if d > 0 {
            deltas.insert(k.clone(), json!(d));
        }
    }
    data.insert("commands_and_returns_during_suite".into(), Value::Object(deltas));
    let mut problems = vec![];
    if !left.is_empty() {
        problems.push(format!("binder processes of the suite still present: {left:?}"));
        let tail: String = state_after.lines().take(60).collect::<Vec<_>>().join("\n");
        data.insert("state_after".into(), json!(tail));
    }
    // Processes that were there before (none normally) must be back to their counts.
    for p in &before.procs {
        for q in after.proc(p.pid) {
            if (q.threads, q.nodes, q.refs, q.buffers) > (p.threads, p.nodes, p.refs, p.buffers) {
                problems.push(format!("pid {} grew during the suite: {p:?} -> {q:?}", p.pid));
            }
        }
    }
    let slow: Vec<Value> = case_leftovers
        .iter()
        .filter(|(_, pids)| !pids.is_empty())
        .map(|(c, pids)| json!({"case": c, "pids": pids}))
        .collect();
    if !slow.is_empty() {
        problems.push(format!("binder processes outlived their case by {} s", RELEASE_WAIT.as_secs()));
        data.insert("outlived_their_case".into(), Value::Array(slow));
    }
    if !known.is_empty() {
        data.insert("known_leak_pids".into(), json!(known));
    }
    data.insert("state_procs_before".into(), json!(logs::pids_in(state_before)));
    data.insert("state_procs_after".into(), json!(logs::pids_in(&state_after)));
    if problems.is_empty() {
        (Status::Pass, None, data)
    } else {
        (Status::Fail, Some(problems.join("; ")), data)
    }
}

pub fn main() {
    let args = parse_args();
    let ctx = &args.ctx;
    if args.list {
        for c in CASES {
            println!("{}", c.name);
        }
        println!("{LEAKS}");
        for c in OPT_IN {
            println!("{} (opt-in: known issue)", c.name);
        }
        return;
    }
    for name in args.cases.iter().chain(&args.skip) {
        if name != LEAKS && !CASES.iter().chain(OPT_IN).any(|c| c.name == name) {
            eprintln!("binder-conformance: no case {name:?} (--list shows them)");
            std::process::exit(2);
        }
    }
    let selected =
        |n: &str| (args.cases.is_empty() || args.cases.iter().any(|c| c == n)) && !args.skip.iter().any(|s| s == n);
    eprintln!(
        "binder-conformance: driver {}, {} kernel (timeouts x{}), device {}, seed {:#x}",
        ctx.driver.name(),
        if ctx.debug { "debug" } else { "perf" },
        ctx.scale,
        ctx.dev,
        ctx.seed
    );

    let before = Stats::read().unwrap_or_default();
    let state_before = logs::read_state();
    let mut baseline: Vec<i32> = before.procs.iter().map(|p| p.pid).collect();
    let mut known_leaks: Vec<i32> = vec![];
    let mut kmsg = Kmsg::open_at_end().ok();
    let mut failed = 0;
    let mut leftovers = vec![];
    let named = |n: &str| args.cases.iter().any(|c| c == n);
    let to_run = CASES.iter().filter(|c| selected(c.name)).chain(OPT_IN.iter().filter(|c| named(c.name)));
    for case in to_run {
        let marker = format!("binder-conformance: case {}", case.name);
        kmsg::mark(&format!("{marker} start"));
        if let Some(k) = kmsg.as_mut() {
            k.read_new();
        }
        let t0 = Instant::now();
        let (mut status, mut message, mut data) = run_case(case, ctx);
        let elapsed = t0.elapsed();
        // A documented leak of this driver (fd_cycle_leak on the C driver) stays for the rest
        // of the suite; later cases and `leaks` do not count it again.
        if let Some(pids) = data.get("known_leak_pids").and_then(|v| v.as_array()) {
            let pids: Vec<i32> = pids.iter().filter_map(|p| p.as_i64()).map(|p| p as i32).collect();
            baseline.extend(&pids);
            known_leaks.extend(pids);
        }
        let left = wait_released(&baseline, RELEASE_WAIT);
        leftovers.push((case.name.to_string(), left));
        kmsg::mark(&format!("{marker} end"));
        if let Some(k) = kmsg.as_mut() {
            let lost_before = k.lost;
            let recs: Vec<_> = k.read_new().into_iter().filter(|r| !r.text.starts_with(&marker)).collect();
            if k.lost > lost_before {
                // The ring buffer wrapped: the host's console scan still sees everything.
                data.insert("kernel_log_records_lost".into(), json!(true));
            }
            let splats = kmsg::splats(&recs);
            let warn: Vec<String> = recs.iter().filter(|r| r.level <= 4).map(|r| r.text.clone()).collect();
            if !warn.is_empty() {
                data.insert("kernel_log_count".into(), json!(warn.len()));
                data.insert("kernel_log".into(), json!(warn.iter().take(MAX_LOG_LINES).collect::<Vec<_>>()));
            }
            if !splats.is_empty() {
                status = Status::Fail;
                let m = format!("kernel splat during the case: {}", splats.join(" | "));
                message = Some(match message {
                    Some(prev) => format!("{m}; {prev}"),
                    None => m,
                });
            }
        }
        if status == Status::Fail {
            failed += 1;
        }
        report(case.name, status, elapsed.as_secs_f64() * 1000.0, message, Value::Object(data));
    }
    if selected(LEAKS) {
        let t0 = Instant::now();
        let (status, message, data) = leaks(&before, &state_before, &leftovers, &known_leaks);
        if status == Status::Fail {
            failed += 1;
        }
        report(LEAKS, status, t0.elapsed().as_secs_f64() * 1000.0, message, Value::Object(data));
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

#[cfg(test)]
mod tests {
    use super::*;

    // The host lists and checks case names from labproto's catalogue without booting: it
    // must be this program's table, in this order.
    #[test]
    fn catalogue_matches_the_cases() {
        let here: Vec<(&str, bool)> = CASES
            .iter()
            .map(|c| (c.name, false))
            .chain([(LEAKS, false)])
            .chain(OPT_IN.iter().map(|c| (c.name, true)))
            .collect();
        let catalogue: Vec<(&str, bool)> = labproto::CONFORMANCE_CASES.iter().map(|c| (c.name, c.opt_in)).collect();
        assert_eq!(here, catalogue, "update rootfs/guest/proto/src/cases.rs with the case table");
    }
}
