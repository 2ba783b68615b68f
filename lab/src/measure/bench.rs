//! `lab bench`: seed 000's workloads under CTABS modes 0, 1 and 2, interleaved in one boot
//! (A B C A B C ...), summarised as medians with 95% bootstrap CIs and Δ% against Baseline.
//! The servers run libbinder's thread pool as the AOSP programs do (`--threads N`: a fixed
//! pool), on the board's EAS unless the run says `--no-eas`.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::numbers::samples::{parse_step, step_name, Row, Samples, MODES, MODE_NAMES, SELECTIONS};
use anyhow::{Context, Result};
use labproto::{Event, Plan, Step};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// How much work one repetition does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// About two minutes: checks the report's shape (used by `cargo make test`).
    Quick,
    /// The default benchmark, sized to finish in about 15 minutes here.
    Full,
}

struct Workload {
    bench: &'static str,
    program: &'static str,
    quick: &'static [&'static str],
    full: &'static [&'static str],
}

const WORKLOADS: &[Workload] = &[
    Workload {
        bench: "throughput",
        program: "/bin/binder-throughput",
        quick: &["-w", "2", "-i", "1000"],
        // The seed ran 8 workers x 100k iterations on the phone; under TCG 8 x 3000 takes ~9 s.
        full: &["-w", "8", "-i", "3000"],
    },
    // schd-dbg makes a new SCHED_FIFO thread per iteration: about 17 ms of emulated time each.
    Workload { bench: "tiers", program: "/bin/binder-tiers", quick: &["-i", "300"], full: &["-i", "500"] },
    Workload {
        bench: "sendvec",
        program: "/bin/binder-sendvec",
        quick: &["-i", "100", "--max-size", "64"],
        full: &["-i", "1000"],
    },
];

/// The programs whose servers run a binder thread pool (`--threads N` applies to them).
const POOLED: [&str; 2] = ["throughput", "tiers"];

/// Every workload's job at `profile`; `threads` gives the pooled servers a fixed pool.
pub fn jobs(profile: Profile, threads: Option<usize>) -> Vec<Job> {
    WORKLOADS
        .iter()
        .map(|w| {
            let args = match profile {
                Profile::Quick => w.quick,
                Profile::Full => w.full,
            };
            let mut argv: Vec<String> = [w.program].iter().chain(args).map(|s| s.to_string()).collect();
            if let Some(n) = threads.filter(|_| POOLED.contains(&w.bench)) {
                argv.extend(["--threads".to_string(), n.to_string()]);
            }
            Job { bench: w.bench, argv }
        })
        .collect()
}

/// The arguments that select CTABS mode `m` in a seed-000 program.
pub fn mode_args(m: u32) -> Vec<String> {
    vec!["--ctabs-mode".to_string(), m.to_string()]
}

fn ctabs_modes() -> Vec<(u32, Vec<String>)> {
    MODES.iter().map(|m| (*m, mode_args(*m))).collect()
}

fn plan_name(profile: Profile) -> String {
    format!("bench-{}", if profile == Profile::Quick { "quick" } else { "full" })
}

/// The plan: every workload under every mode, interleaved, `reps` times. `threads` gives
/// the pooled servers a fixed pool of that many loopers instead of libbinder's.
pub fn plan(profile: Profile, reps: usize, threads: Option<usize>) -> Plan {
    interleaved(&plan_name(profile), reps, &jobs(profile, threads), &ctabs_modes())
}

/// binder-tiers' runs per priority-inheritance semantics (rust-driver 0011's switch, set by
/// each step and restored after it): the bench name and the arguments.
pub const TIER_VARIANTS: [(&str, &[&str]); 3] = [
    // Mainline's Rust driver: the server keeps its own priority.
    ("tiers", &["--prio-inherit", "0"]),
    // The phone's: Android's inheritance, schd-dbg's nodes without INHERIT_RT.
    ("tiers-pi", &["--prio-inherit", "1"]),
    // Android's inheritance with INHERIT_RT on the servers' nodes: RT callers pass RT on.
    ("tiers-pirt", &["--prio-inherit", "1", "--inherit-rt"]),
];

/// [`plan`] with binder-tiers once per [`TIER_VARIANTS`] entry, each an interleaved job of
/// its own, so seed 000's FIFO rows come with priority inheritance off and on.
pub fn plan_inherit(profile: Profile, reps: usize, threads: Option<usize>) -> Plan {
    let mut out = vec![];
    for j in jobs(profile, threads) {
        if j.bench != "tiers" {
            out.push(j);
            continue;
        }
        for (bench, extra) in TIER_VARIANTS {
            out.push(Job { bench, argv: j.argv.iter().cloned().chain(extra.iter().map(|s| s.to_string())).collect() });
        }
    }
    interleaved(&plan_name(profile), reps, &out, &ctabs_modes())
}

/// One benchmark program of an interleaved plan.
pub struct Job {
    pub bench: &'static str,
    pub argv: Vec<String>,
}

/// `reps` rounds of every job under every mode, interleaved so that slow drift in the host
/// spreads evenly over the modes. Odd rounds reverse the order (A B C, C B A, ...) so that no
/// mode always runs first after another benchmark. A mode is a number plus the arguments
/// that select it.
pub fn interleaved(name: &str, reps: usize, jobs: &[Job], modes: &[(u32, Vec<String>)]) -> Plan {
    let mut steps = vec![];
    for r in 0..reps {
        for j in jobs {
            let order: Vec<&(u32, Vec<String>)> =
                if r % 2 == 0 { modes.iter().collect() } else { modes.iter().rev().collect() };
            for (m, extra) in order {
                let argv = j.argv.iter().chain(extra).cloned().collect();
                steps.push(Step { name: step_name(j.bench, *m, r), argv, timeout_s: 600, ..Default::default() });
            }
        }
    }
    Plan { name: name.to_string(), steps, ..Default::default() }
}

fn cell(rows: &BTreeMap<String, Row>, metric: &str, mode: u32, digits: usize, unit: &str) -> String {
    match rows.get(metric).and_then(|r| r.per_mode.get(&mode)) {
        Some(e) if crate::numbers::table::too_few(e) => crate::numbers::table::few(e),
        Some(e) => format!("{:.d$}{unit} [{:.d$}, {:.d$}]", e.value, e.lo, e.hi, d = digits),
        None => "n/a".into(),
    }
}

fn delta(rows: &BTreeMap<String, Row>, metric: &str, mode: u32) -> String {
    crate::numbers::table::show_delta(rows.get(metric).and_then(|r| r.delta_pct.get(&mode)).copied())
}

const TIERS: [(&str, &str); 3] =
    [("same_core", "Same-core"), ("same_cluster", "Same-cluster"), ("cross_cluster", "Cross-cluster")];
const CLASSES: [(&str, &str); 2] = [("fifo", "SCHED_FIFO"), ("other", "Normal")];

/// Seed 000's tiered-latency table: class × tier, average latency and share per mode.
pub fn tiers_table(rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<11} {:<14} {:>28} {:>28} {:>28} {:>24} {:>24}",
        "Class", "Tier", MODE_NAMES[0], MODE_NAMES[1], MODE_NAMES[2], "Δ P1/2", "Δ P2/2"
    );
    for (class, cname) in CLASSES {
        for (i, (tier, tname)) in TIERS.iter().enumerate() {
            let m = format!("tiers.{class}.{tier}.avg_ms");
            let _ = writeln!(
                s,
                "{:<11} {:<14} {:>28} {:>28} {:>28} {:>24} {:>24}",
                if i == 0 { cname } else { "" },
                tname,
                cell(rows, &m, 0, 3, " ms"),
                cell(rows, &m, 1, 3, " ms"),
                cell(rows, &m, 2, 3, " ms"),
                delta(rows, &m, 1),
                delta(rows, &m, 2)
            );
            let p = format!("tiers.{class}.{tier}.pct");
            let _ = writeln!(
                s,
                "{:<11} {:<14} {:>28} {:>28} {:>28}",
                "",
                "  share",
                cell(rows, &p, 0, 1, "%"),
                cell(rows, &p, 1, 1, "%"),
                cell(rows, &p, 2, 1, "%")
            );
        }
    }
    s
}

/// Seed 000's binderThroughputTest table.
/// `cache`: the boot ran the cache plugin, whose counters cover the whole boot.
pub fn throughput_table(rows: &BTreeMap<String, Row>, cache: bool) -> String {
    let metrics: [(&str, &str, usize, &str); 10] = [
        ("Throughput", "throughput.iterations_per_sec", 0, "/s"),
        ("Avg latency", "throughput.avg_ms", 3, " ms"),
        ("p50 latency", "throughput.p50_ms", 3, " ms"),
        ("p99 latency", "throughput.p99_ms", 3, " ms"),
        ("CPU cycles", "throughput.counters.cycles", 0, ""),
        ("Instructions", "throughput.counters.instructions", 0, ""),
        ("Task clock", "throughput.counters.task_clock_ns", 0, " ns"),
        ("CPU migrations", "throughput.counters.cpu_migrations", 0, ""),
        ("Ctx switches", "throughput.counters.context_switches", 0, ""),
        // The benchmark's own (getrusage), what the seed's simpleperf counted: no idle task.
        ("Task switches", "throughput.task_switches.total", 0, ""),
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<15} {:>30} {:>30} {:>30} {:>24} {:>24}",
        "Metric", MODE_NAMES[0], MODE_NAMES[1], MODE_NAMES[2], "Δ P1/2", "Δ P2/2"
    );
    for (name, m, d, unit) in metrics {
        let _ = writeln!(
            s,
            "{:<15} {:>30} {:>30} {:>30} {:>24} {:>24}",
            name,
            cell(rows, m, 0, d, unit),
            cell(rows, m, 1, d, unit),
            cell(rows, m, 2, d, unit),
            delta(rows, m, 1),
            delta(rows, m, 2)
        );
    }
    for name in ["Cache refs", "Cache misses"] {
        let why = if cache {
            // The plugin writes its counters once, at QEMU's exit: one boot, every mode.
            "per mode needs one boot per mode (`cargo make reproduce --model`); this boot's total is in cache.json"
        } else {
            "not measurable here: TCG models no caches (the timing model's --cache counts them)"
        };
        let _ = writeln!(s, "{name:<15} {why}");
    }
    s
}

/// The driver's thread selections per mode (ctabs_stats), for each pooled workload: how often
/// a transaction found a waiting thread on the caller's CPU, in its cluster, elsewhere, or
/// none at all, and the nudges of mode 2.
pub fn selections_table(rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:<20} {:>26} {:>26} {:>26}",
        "Workload", "Selection", MODE_NAMES[0], MODE_NAMES[1], MODE_NAMES[2]
    );
    for bench in POOLED {
        let names = SELECTIONS
            .iter()
            .map(|k| (format!("ctabs.{k}"), 0, ""))
            .chain([("ctabs.no_waiter_pct".to_string(), 1, "%"), ("pool.threads_started".to_string(), 0, "")]);
        for (i, (k, digits, unit)) in names.enumerate() {
            let m = format!("{bench}.{k}");
            let label = k.trim_start_matches("ctabs.").replace("no_waiter_pct", "no_waiter share");
            let _ = writeln!(
                s,
                "{:<12} {:<20} {:>26} {:>26} {:>26}",
                if i == 0 { bench } else { "" },
                label,
                cell(rows, &m, 0, digits, unit),
                cell(rows, &m, 1, digits, unit),
                cell(rows, &m, 2, digits, unit)
            );
        }
    }
    s
}

/// Seed 002's BM_sendVec shape: wall and CPU time per call by payload size, per mode.
pub fn sendvec_table(rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:>26} {:>26} {:>26}",
        "Benchmark (time ns / cpu ns)", MODE_NAMES[0], MODE_NAMES[1], MODE_NAMES[2]
    );
    let sizes: std::collections::BTreeSet<&str> =
        rows.keys().filter_map(|k| k.strip_prefix("sendvec.")?.strip_suffix(".time_ns")).collect();
    for size in sizes {
        let (t, c) = (format!("sendvec.{size}.time_ns"), format!("sendvec.{size}.cpu_ns"));
        let both = |m: u32| {
            let v = |k: &str| rows.get(k).and_then(|r| r.per_mode.get(&m)).map(|e| format!("{:.0}", e.value));
            format!("{} / {}", v(&t).unwrap_or("n/a".into()), v(&c).unwrap_or("n/a".into()))
        };
        let name = format!("BM_sendVec_binderize/{}", size.trim_start_matches('0'));
        let _ = writeln!(s, "{name:<28} {:>26} {:>26} {:>26}", both(0), both(1), both(2));
    }
    s
}

/// What the servers ran on: the thread pool and whether the board's EAS was on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Config {
    /// None: libbinder's pool (max threads 15); Some(n): a fixed pool of n loopers.
    pub threads: Option<usize>,
    pub eas: bool,
    /// `--cache`: the cache cost plugin ran (it counts per boot, not per mode).
    pub cache: bool,
}

impl Config {
    pub fn describe(&self) -> String {
        let pool = match self.threads {
            None => "AOSP thread pool (libbinder: max threads 15, loopers on BR_SPAWN_LOOPER)".to_string(),
            Some(n) => format!("fixed pool of {n} looper threads (--threads {n})"),
        };
        format!("{pool}; EAS {}", if self.eas { "on (board energy model, schedutil)" } else { "off (--no-eas)" })
    }
}

#[derive(Serialize)]
struct ResultsFile<'a> {
    profile: Profile,
    reps: usize,
    /// Boots summarised (each one sample under a deterministic TCG mode).
    boots: usize,
    config: &'a Config,
    modes: [&'static str; 3],
    metrics: &'a BTreeMap<String, Row>,
    samples: &'a Samples,
}

/// Per-call latencies (ms) of the throughput runs, pooled per mode, for the CDF plot.
fn latency_samples(events: &[Event]) -> BTreeMap<u32, Vec<f64>> {
    samples_ms(events, "throughput", "throughput", "/samples_ms")
}

/// The `samples_ms` array at JSON `pointer` of the `case` results of `bench` steps, pooled
/// per mode (e.g. `("inversion-fifo", "inversion", "/high/samples_ms")`).
pub fn samples_ms(events: &[Event], bench: &str, case_name: &str, pointer: &str) -> BTreeMap<u32, Vec<f64>> {
    let mut out: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for e in events {
        let Event::Result { step, case, data, .. } = e else { continue };
        let Some((b, mode)) = parse_step(step) else { continue };
        if b == bench && case == case_name {
            if let Some(v) = data.pointer(pointer).and_then(|v| v.as_array()) {
                out.entry(mode).or_default().extend(v.iter().filter_map(|x| x.as_f64()));
            }
        }
    }
    out
}

/// Writes results.json, report.md and the SVG plots into `dir`; returns the report text and
/// the rows ([`crate::numbers::samples::summary`] of `boots`). A traced run (`--trace`) also gets where the woken
/// server threads ran on `board`.
pub fn write_report(
    dir: &Path,
    profile: Profile,
    reps: usize,
    config: &Config,
    board: &board::Board,
    boots: &[&[Event]],
    deterministic: bool,
) -> Result<(String, BTreeMap<String, Row>)> {
    let (samples, rows) = crate::numbers::samples::summary(boots, deterministic);
    crate::numbers::plots::write_all(dir, &rows, &latency_samples(&boots.concat()))?;
    let json = serde_json::to_string_pretty(&ResultsFile {
        profile,
        reps,
        boots: boots.len(),
        config,
        modes: MODE_NAMES,
        metrics: &rows,
        samples: &samples,
    })?;
    std::fs::write(dir.join("results.json"), json).context("writing results.json")?;
    let placement = crate::measure::placement::section(dir, board)?.map(|s| format!("\n{s}")).unwrap_or_default();
    let over = if deterministic {
        format!("{} boot(s), each with its own QEMU -seed, of {reps} interleaved repetitions per mode; intervals over boots, a mark from {} boots", boots.len(), crate::numbers::table::MIN_SAMPLES)
    } else {
        format!("{reps} interleaved repetitions per mode")
    };
    let text = format!(
        "# Seed 000 on the emulated SA8155P\n\n{}.\nMedian [95% bootstrap CI] over {over}.\n\n## Thread selections (ctabs_stats)\n\n```\n{}```\n\n## Tiered latency (schd-dbg style)\n\n```\n{}```\n\n![tiers, SCHED_OTHER](tiers-other.svg) ![tiers, SCHED_FIFO](tiers-fifo.svg)\n\n## binderThroughputTest\n\n```\n{}```\n\n![throughput](throughput.svg) ![latency CDF](latency-cdf.svg)\n\n## BM_sendVec (seed 002's shape, medians)\n\n```\n{}```\n{placement}",
        config.describe(),
        selections_table(&rows),
        tiers_table(&rows),
        throughput_table(&rows, config.cache),
        sendvec_table(&rows)
    );
    std::fs::write(dir.join("report.md"), &text).context("writing report.md")?;
    Ok((text, rows))
}

/// Boots once, runs the interleaved plan and writes the report into the run directory.
/// `threads`: a fixed server pool instead of libbinder's (see [`plan`]).
pub fn execute(profile: Profile, reps: usize, threads: Option<usize>, base: &RunOpts) -> Result<(Outcome, String)> {
    execute_plan(&plan(profile, reps, threads), profile, reps, threads, base)
}

fn config_of(threads: Option<usize>, base: &RunOpts) -> Result<(Config, board::Board)> {
    let board = crate::harness::opts::load_board_file(&base.board, base.smp, base.memory.as_deref())?.0;
    Ok((Config { threads, eas: !base.no_eas && board.has_eas(), cache: base.cache }, board))
}

/// [`execute`] of a given plan of seed 000's shape (e.g. [`plan_inherit`]): one boot, its
/// report in its run directory.
pub fn execute_plan(
    plan: &Plan,
    profile: Profile,
    reps: usize,
    threads: Option<usize>,
    base: &RunOpts,
) -> Result<(Outcome, String)> {
    let outcome = crate::report::run_plan_and_report(plan, base)?;
    let (config, board) = config_of(threads, base)?;
    let (text, _) =
        write_report(&outcome.dir, profile, reps, &config, &board, &[&outcome.events], base.tcg.deterministic())?;
    Ok((outcome, text))
}

/// The options of each of `boots` boots: under a deterministic TCG mode boot i with QEMU
/// `-seed` [`crate::harness::opts::seed_of`]`(i)` (the same seed would repeat the first boot
/// bit for bit); host-timed TCG boots once.
pub fn boot_opts(base: &RunOpts, boots: usize) -> Vec<RunOpts> {
    if !base.tcg.deterministic() {
        return vec![base.clone()];
    }
    (0..boots).map(|i| RunOpts { qemu_seed: crate::harness::opts::seed_of(i), ..base.clone() }).collect()
}

/// `lab bench`: [`execute`]'s plan in `boots` boots ([`boot_opts`], `-j` at once), the report
/// over them in `out`. Returns the boots, the text and the rows.
pub fn execute_boots(
    profile: Profile,
    reps: usize,
    threads: Option<usize>,
    base: &RunOpts,
    boots: usize,
    out: &Path,
) -> Result<(Vec<Outcome>, String, BTreeMap<String, Row>)> {
    let plan = plan(profile, reps, threads);
    let opts = boot_opts(base, boots);
    let outcomes = crate::harness::boots::each(
        base,
        &opts,
        |o| format!("bench seed {}", o.qemu_seed),
        |o| crate::report::run_plan_and_report(&plan, o),
    )?;
    let (config, board) = config_of(threads, base)?;
    std::fs::create_dir_all(out)?;
    let events: Vec<&[Event]> = outcomes.iter().map(|o| o.events.as_slice()).collect();
    let (text, rows) = write_report(out, profile, reps, &config, &board, &events, base.tcg.deterministic())?;
    Ok((outcomes, text, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::samples::{collect, summarise};
    use labproto::Status;
    use serde_json::json;

    fn result(step: &str, case: &str, data: serde_json::Value) -> Event {
        Event::Result {
            step: step.into(),
            case: case.into(),
            status: Status::Pass,
            duration_ms: 0.0,
            message: None,
            data,
        }
    }

    /// Under icount one boot is one sample, however many repetitions it ran; host-timed
    /// boots pool theirs.
    #[test]
    fn a_deterministic_boot_is_one_sample() {
        let ev: Vec<Event> = (0..9)
            .map(|r| {
                result(&step_name("throughput", 0, r), "throughput", json!({"iterations_per_sec": 1000.0 + r as f64}))
            })
            .collect();
        let units = |det: bool, boots: &[&[Event]]| {
            crate::numbers::table::units(
                &crate::numbers::samples::summary(boots, det).1["throughput.iterations_per_sec"].per_mode[&0],
            )
        };
        assert_eq!(units(true, &[&ev]), 1);
        assert_eq!(units(true, &[&ev, &ev, &ev, &ev, &ev]), 5);
        assert_eq!(units(false, &[&ev]), 9);
        let icount = RunOpts { tcg: crate::harness::qemu::Tcg::Icount, ..RunOpts::default() };
        assert_eq!(boot_opts(&icount, 3).iter().map(|o| o.qemu_seed).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(boot_opts(&RunOpts::default(), 3).len(), 1, "host-timed TCG boots once");
    }

    #[test]
    fn plan_interleaves_modes() {
        let p = plan(Profile::Quick, 2, None);
        let names: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).take(4).collect();
        assert_eq!(names, ["throughput-m0-r0", "throughput-m1-r0", "throughput-m2-r0", "tiers-m0-r0"]);
        assert_eq!(p.steps.len(), 2 * WORKLOADS.len() * 3);
        assert!(p.steps[1].argv.ends_with(&["--ctabs-mode".to_string(), "1".to_string()]));
        // The second round runs the modes in reverse.
        let r1: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).skip(9).take(3).collect();
        assert_eq!(r1, ["throughput-m2-r1", "throughput-m1-r1", "throughput-m0-r1"]);
        assert_eq!(parse_step("throughput-m2-r10"), Some(("throughput", 2)));
        assert_eq!(parse_step("smoke"), None);
        // --threads N reaches the pooled programs only.
        let fixed = plan(Profile::Quick, 1, Some(2));
        let has = |bench: &str| fixed.steps.iter().find(|s| s.name.starts_with(bench)).unwrap().argv.join(" ");
        assert!(has("throughput").ends_with("--threads 2 --ctabs-mode 0") && has("tiers").contains("--threads 2"));
        assert!(!has("sendvec").contains("--threads") && !p.steps[0].argv.contains(&"--threads".to_string()));
    }

    #[test]
    fn inherit_plan_runs_tiers_per_switch_state() {
        let p = plan_inherit(Profile::Quick, 2, None);
        assert_eq!(p.steps.len(), 2 * (WORKLOADS.len() + 2) * 3);
        let names: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).skip(3).take(9).collect();
        assert_eq!(names[..4], ["tiers-m0-r0", "tiers-m1-r0", "tiers-m2-r0", "tiers-pi-m0-r0"]);
        assert_eq!(names[8], "tiers-pirt-m2-r0");
        let argv = |name: &str| p.steps.iter().find(|s| s.name == name).unwrap().argv.join(" ");
        assert_eq!(argv("tiers-m1-r0"), "/bin/binder-tiers -i 300 --prio-inherit 0 --ctabs-mode 1");
        assert_eq!(argv("tiers-pi-m0-r1"), "/bin/binder-tiers -i 300 --prio-inherit 1 --ctabs-mode 0");
        assert!(argv("tiers-pirt-m2-r0").ends_with("--prio-inherit 1 --inherit-rt --ctabs-mode 2"));
        assert_eq!(parse_step("tiers-pirt-m2-r0"), Some(("tiers-pirt", 2)));
        // The others are the bench plan's.
        assert_eq!(argv("throughput-m0-r0"), plan(Profile::Quick, 1, None).steps[0].argv.join(" "));
    }

    #[test]
    fn tables_have_every_row_and_deltas() {
        let mut ev = vec![];
        for r in 0..5 {
            for m in MODES {
                let tput = 1000.0 + 100.0 * m as f64 + r as f64;
                ev.push(result(
                    &step_name("throughput", m, r),
                    "throughput",
                    json!({"iterations_per_sec": tput, "avg_ms": 1.0, "p50_ms": 0.9, "p99_ms": 2.0, "worst_ms": 3.0,
                           "samples_ms": [0.5, 0.9, 1.0, 2.0],
                           "counters": {"cpu_migrations": 10.0 + m as f64, "context_switches": 100.0, "cycles": null},
                           "task_switches": {"total": 70.0 + m as f64},
                           "pool": {"threads_started": [3, 4]},
                           "ctabs_stats_delta": {"0": {"same_cpu": 0, "same_cluster": 0, "fallback": 0, "no_waiter": 0},
                                                 m.to_string(): {"same_cpu": 10, "same_cluster": 20, "fallback": 10, "no_waiter": 60}}}),
                ));
                let tier = json!({"count": 50, "pct": 33.3, "avg_ms": 0.1 + 0.01 * m as f64});
                ev.push(result(
                    &step_name("tiers", m, r),
                    "tiers",
                    json!({"classes": {"fifo": {"same_core": tier, "same_cluster": tier, "cross_cluster": tier},
                                       "other": {"same_core": tier, "same_cluster": tier, "cross_cluster": tier}}}),
                ));
            }
        }
        let rows = summarise(&collect(&ev));
        let t = throughput_table(&rows, false);
        assert!(t.contains("Throughput") && t.contains("+10.0%") && t.contains("+20.0%"), "{t}");
        // A counter the PMU does not provide shows n/a, never 0.
        assert!(t.lines().find(|l| l.starts_with("CPU cycles")).unwrap().contains("n/a"), "{t}");
        assert!(t.contains("not measurable here"));
        // The benchmark's own switches (getrusage) beside the system-wide counter.
        assert!(t.lines().find(|l| l.starts_with("Task switches")).unwrap().contains("+1.4%"), "{t}");
        let tc = throughput_table(&rows, true);
        assert!(!tc.contains("not measurable") && tc.contains("reproduce --model"), "{tc}");
        let tt = tiers_table(&rows);
        assert_eq!(tt.lines().count(), 1 + 2 * 3 * 2, "{tt}");
        assert!(tt.contains("SCHED_FIFO") && tt.contains("Cross-cluster") && tt.contains("0.110 ms"), "{tt}");
        // A tier with a handful of calls has a share but no average latency.
        let few = [result(
            &step_name("tiers", 0, 0),
            "tiers",
            json!({"classes": {"other": {"same_core": {"count": 3, "pct": 0.1, "avg_ms": 9.0}}}}),
        )];
        let s = collect(&few);
        assert!(s.contains_key("tiers.other.same_core.pct") && !s.contains_key("tiers.other.same_core.avg_ms"));
        assert!(sendvec_table(&rows).lines().count() == 1, "no sendvec data, header only");
        let d = tempfile::tempdir().unwrap();
        // Each run's own mode row counts: 60 of 100 selections found no waiting thread.
        let sel = selections_table(&rows);
        assert!(sel.lines().find(|l| l.contains("no_waiter share")).unwrap().contains("60.0% [60.0, 60.0]"), "{sel}");
        assert!(sel.lines().find(|l| l.contains("threads_started")).unwrap().contains("7 [7, 7]"), "{sel}");
        let config = Config { threads: Some(2), eas: false, cache: false };
        let board = crate::harness::opts::load_board("sa8155p").unwrap();
        let (report, _) = write_report(d.path(), Profile::Quick, 5, &config, &board, &[&ev], false).unwrap();
        assert!(report.contains("fixed pool of 2 looper threads") && report.contains("EAS off"), "{report}");
        // Not traced: no placement section (placement.rs tests a traced one).
        assert!(!report.contains("Where woken server threads ran"), "{report}");

        if let Some(keep) = std::env::var_os("LAB_KEEP_PLOTS") {
            for f in ["throughput.svg", "latency-cdf.svg", "tiers-other.svg"] {
                std::fs::copy(d.path().join(f), std::path::Path::new(&keep).join(f)).unwrap();
            }
        }
        for svg in ["throughput.svg", "latency-cdf.svg", "tiers-other.svg"] {
            let text = std::fs::read_to_string(d.path().join(svg)).unwrap();
            assert!(text.starts_with("<svg") && text.contains("</svg>"), "{svg}");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("results.json")).unwrap()).unwrap();
        assert!(v["metrics"]["throughput.iterations_per_sec"]["per_mode"]["2"]["value"].as_f64().unwrap() > 1000.0);
    }
}
