//! `lab reproduce`: every table of the three seed mails, with the seed's hardware figure
//! beside the lab's (median and 95% CI) and whether the direction of the change matches.
//!
//! - Seed 000 (CTABS): the `bench` plan, CTABS modes 0/1/2 interleaved in one boot.
//! - Seed 001 (alloc->mutex): the C driver with and without the seed's spinlock patch and the
//!   Rust driver, on binderThroughputTest -w 2 and the inversion workload ([`super::seed001`]).
//! - Seed 002 (deferred BR_TRANSACTION_COMPLETE): binder-sendvec with `defer_tc` off and on,
//!   interleaved in one boot.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::measure::bench::{self, Job, Profile};
use crate::measure::seed001::Seed001;
use crate::measure::userspace::{self, Userspace};
use crate::numbers::samples::{self, Row, Samples, MODES, MODE_NAMES};
use crate::numbers::table::{big, delta, est, lab_head, lab_row, pct, show, show_delta};
pub use crate::numbers::table::{lab_dir, mark, seed_dir, Dir, LEGEND};
use crate::report::run_plan_and_report;
use anyhow::{Context, Result};
use labproto::{Event, Plan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The seeds' published figures (lab/seeds.toml).
#[derive(Debug, Deserialize)]
pub struct Seeds {
    pub seed000: Seed000,
    pub seed001: Seed001,
    pub seed002: Seed002,
}

#[derive(Debug, Deserialize)]
pub struct Seed000 {
    pub tiers: Vec<TierRow>,
    pub throughput: Vec<ValuesRow>,
}

#[derive(Debug, Deserialize)]
pub struct TierRow {
    pub class: String,
    pub tier: String,
    /// Baseline, Patch 1/2, Patch 2/2.
    pub avg_ms: [f64; 3],
    pub count: u64,
    pub pct: f64,
}

#[derive(Debug, Deserialize)]
pub struct ValuesRow {
    pub name: String,
    /// The lab's metric; empty when the lab cannot measure it (see `why`).
    pub metric: String,
    pub unit: String,
    pub values: [f64; 3],
    #[serde(default)]
    pub why: String,
}

#[derive(Debug, Deserialize)]
pub struct Seed002 {
    pub rows: Vec<SendVecRow>,
}

#[derive(Debug, Deserialize)]
pub struct SendVecRow {
    pub size: u32,
    /// Wall ns, CPU ns, iterations.
    pub before: [f64; 3],
    pub after: [f64; 3],
}

pub fn seeds() -> Result<Seeds> {
    toml::from_str(include_str!("../../seeds.toml")).context("lab/seeds.toml")
}

const TIER_NAMES: [(&str, &str); 3] =
    [("same_core", "Same-core"), ("same_cluster", "Same-cluster"), ("cross_cluster", "Cross-cluster")];

fn tier_name(t: &str) -> &str {
    TIER_NAMES.iter().find(|(k, _)| *k == t).map(|(_, v)| *v).unwrap_or(t)
}

fn class_name(c: &str) -> &str {
    if c == "fifo" {
        "SCHED_FIFO"
    } else {
        "Normal"
    }
}

/// The label column of seed 000's tier tables: `seed`, `lab pi=0`, `lab pi=1 RT`.
const LABEL_W: usize = 11;

/// What each binder-tiers variant of [`bench::TIER_VARIANTS`] stands for, printed under the table.
pub const FIFO_SEMANTICS: &str =
    "pi = rust_binder's priority_inheritance switch as each run read it back (rust-driver \
0011; each step sets it and restores it after). pi=0: mainline's semantics, the server thread keeps its own \
priority. pi=1: Android's (the phone's GKI 6.1 driver); schd-dbg registers its service through libbinder, whose \
Parcel::flattenBinder sets FLAT_BINDER_FLAG_INHERIT_RT only after BBinder::setInheritRt(true), which schd-dbg never \
calls, so the ACK driver's binder_transaction_priority serves the FIFO caller at SCHED_NORMAL nice 0: that is \
the phone's configuration. pi=1 RT: the servers' nodes carry INHERIT_RT (binder-tiers --inherit-rt), the server \
runs SCHED_FIFO at the caller's priority.";

/// The switch's value a variant's runs read back (`0`, `1`, `mixed` when the runs differ).
fn switch_state(rows: &BTreeMap<String, Row>, metric: &str) -> Option<String> {
    let r = rows.get(metric)?;
    let vals: std::collections::BTreeSet<String> =
        r.per_mode.values().map(|e| if e.lo == e.hi { format!("{}", e.value) } else { "mixed".into() }).collect();
    Some(if vals.len() == 1 { vals.into_iter().next().unwrap_or_default() } else { "mixed".into() })
}

/// The lab line's label for the runs of `bench`, naming the switch state they saw: `lab pi=1`,
/// `lab pi=1 RT`, or `lab` when they did not report it (a kernel without the switch).
fn variant_label(rows: &BTreeMap<String, Row>, bench: &str) -> String {
    match switch_state(rows, &format!("{bench}.prio_inherit")) {
        None => "lab".into(),
        Some(pi) => {
            let rt = switch_state(rows, &format!("{bench}.inherit_rt")).is_some_and(|v| v != "0");
            format!("lab pi={pi}{}", if rt { " RT" } else { "" })
        }
    }
}

/// The binder-tiers runs with lines for `class`: the FIFO rows get every variant that has
/// data, the Normal rows the plain runs (`tiers`, which always get a line, n/a without data).
fn benches_for(rows: &BTreeMap<String, Row>, class: &str) -> Vec<&'static str> {
    let has = |b: &str| rows.keys().any(|k| k.starts_with(&format!("{b}.{class}.")));
    bench::TIER_VARIANTS.iter().map(|(b, _)| *b).filter(|b| *b == "tiers" || (class == "fifo" && has(b))).collect()
}

/// The policy the FIFO caller's server ran with, per mode: SCHED_FIFO, SCHED_OTHER, or the
/// shares when the runs saw both.
fn policy_cell(rows: &BTreeMap<String, Row>, bench: &str, mode: u32) -> String {
    let share = |k: &str| est(rows, &format!("{bench}.fifo_caller.{k}"), mode).map(|e| e.value);
    match (share("server_fifo_pct"), share("server_other_pct")) {
        (Some(f), _) if f >= 100.0 => "SCHED_FIFO".into(),
        (_, Some(o)) if o >= 100.0 => "SCHED_OTHER".into(),
        (Some(f), Some(o)) => format!("FIFO {f:.1}% OTHER {o:.1}%"),
        _ => "n/a".into(),
    }
}

/// Seed 000, schd-dbg table: avg latency per class and tier for Baseline, P1, P2, the seed's
/// line above the lab's (the FIFO rows once per priority-inheritance semantics, named by the
/// switch state the runs saw), then the share of transactions per tier and the policy the
/// FIFO caller's server ran with.
pub fn seed000_tiers(seed: &Seed000, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let w = 22;
    let _ = writeln!(
        s,
        "{:<11} {:<14} {:<LABEL_W$} {:>w$} {:>w$} {:>w$} {:>w$} {:>w$}  dir",
        "Class", "Tier", "", "Baseline", "Patch 1/2", "Patch 2/2", "Δ P1/2", "Δ P2/2"
    );
    let mut last_class = "";
    for r in &seed.tiers {
        let class = if r.class != last_class { class_name(&r.class) } else { "" };
        last_class = &r.class;
        let (d1, d2) = (pct(r.avg_ms[0], r.avg_ms[1]), pct(r.avg_ms[0], r.avg_ms[2]));
        let _ = writeln!(
            s,
            "{:<11} {:<14} {:<LABEL_W$} {:>w$} {:>w$} {:>w$} {:>w$} {:>w$}",
            class,
            tier_name(&r.tier),
            "seed",
            format!("{:.3} ms", r.avg_ms[0]),
            format!("{:.3} ms", r.avg_ms[1]),
            format!("{:.3} ms", r.avg_ms[2]),
            format!("{d1:+.1}%"),
            format!("{d2:+.1}%")
        );
        for b in benches_for(rows, &r.class) {
            let m = format!("{b}.{}.{}.avg_ms", r.class, r.tier);
            let label = format!("{:<LABEL_W$}", variant_label(rows, b));
            lab_row(&mut s, &lab_head(&format!("{:<11} {:<14}", "", ""), &label), w, rows, &m, "ms", [d1, d2]);
        }
    }
    let _ = writeln!(s, "\nShare of transactions per tier (the seed gives Baseline only):");
    let _ = writeln!(
        s,
        "{:<11} {:<14} {:>18} {:<LABEL_W$} {:>w$} {:>w$} {:>w$}",
        "Class", "Tier", "seed Baseline", "", "lab Baseline", "lab Patch 1/2", "lab Patch 2/2"
    );
    last_class = "";
    for r in &seed.tiers {
        let class = if r.class != last_class { class_name(&r.class) } else { "" };
        last_class = &r.class;
        for (i, b) in benches_for(rows, &r.class).into_iter().enumerate() {
            let m = format!("{b}.{}.{}.pct", r.class, r.tier);
            let first = i == 0;
            let _ = writeln!(
                s,
                "{:<11} {:<14} {:>18} {:<LABEL_W$} {:>w$} {:>w$} {:>w$}",
                if first { class } else { "" },
                if first { tier_name(&r.tier) } else { "" },
                if first { format!("{} / {:.1}%", r.count, r.pct) } else { String::new() },
                variant_label(rows, b),
                show(est(rows, &m, 0), 1),
                show(est(rows, &m, 1), 1),
                show(est(rows, &m, 2), 1)
            );
        }
    }
    let _ = writeln!(s, "\nThe FIFO caller's server thread ran as (binder-tiers reports the policy it saw):");
    let _ = writeln!(s, "{:<LABEL_W$} {:>w$} {:>w$} {:>w$}", "", MODE_NAMES[0], MODE_NAMES[1], MODE_NAMES[2]);
    for b in benches_for(rows, "fifo") {
        let cells: Vec<String> = MODES.iter().map(|m| policy_cell(rows, b, *m)).collect();
        let _ = writeln!(s, "{:<LABEL_W$} {:>w$} {:>w$} {:>w$}", variant_label(rows, b), cells[0], cells[1], cells[2]);
    }
    let _ = writeln!(s, "\n{FIFO_SEMANTICS}");
    s
}

/// The lab lines of a seed-000 throughput row: p50 and p99 twice, as binderThroughputTest's
/// histogram buckets (the seed's units; `lab bkt`) and exact (`lab exact`), every other row once.
fn throughput_lines(metric: &str) -> Vec<(&'static str, String)> {
    match metric.strip_suffix("_ms").filter(|m| m.ends_with(".p50") || m.ends_with(".p99")) {
        Some(p) => vec![("lab bkt", format!("{p}_bucket_ms")), ("lab exact", format!("{p}_exact_ms"))],
        None => vec![("lab", metric.to_string())],
    }
}

/// The note under seed 000's throughput table on its two kinds of percentile.
pub const PERCENTILES: &str = "p50/p99: `bkt` is the midpoint of binderThroughputTest's 0.39 ms histogram bucket \
(128 buckets over 50 ms), the seed's units, so such a line moves only when calls cross a bucket edge; `exact` is the \
sample at p * n / 100 of every call's latency. AOSP's program prints its buckets, and its exact values with \
aosp/patches 0008; the ports print exact values, and their bucket is the one that value falls in.";

/// Seed 000, binderThroughputTest table.
pub fn seed000_throughput(seed: &Seed000, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let w = 24;
    let _ = writeln!(
        s,
        "{:<15} {:<9} {:>w$} {:>w$} {:>w$} {:>w$} {:>w$}  dir",
        "Metric", "", "Baseline", "Patch 1/2", "Patch 2/2", "Δ P1/2", "Δ P2/2"
    );
    for r in &seed.throughput {
        let v = |x: f64| if r.unit == "ms" { format!("{x:.3} ms") } else { format!("{}{}", big(x), r.unit) };
        let (d1, d2) = (pct(r.values[0], r.values[1]), pct(r.values[0], r.values[2]));
        let _ = writeln!(
            s,
            "{:<15} {:<9} {:>w$} {:>w$} {:>w$} {:>w$} {:>w$}",
            r.name,
            "seed",
            v(r.values[0]),
            v(r.values[1]),
            v(r.values[2]),
            format!("{d1:+.1}%"),
            format!("{d2:+.1}%")
        );
        if r.metric.is_empty() {
            let _ = writeln!(s, "{:<15} {:<9} not measurable here: {}", "", "lab", r.why);
            continue;
        }
        for (label, metric) in throughput_lines(&r.metric) {
            lab_row(
                &mut s,
                &lab_head(&format!("{:<15}", ""), &format!("{label:<9}")),
                w,
                rows,
                &metric,
                &r.unit,
                [d1, d2],
            );
        }
    }
    let _ = writeln!(s, "\n{PERCENTILES}");
    s
}

/// Seed 002's BM_sendVec_binderize rows: before (deferral off) and after (on).
pub fn seed002_table(seed: &Seed002, rows: &BTreeMap<String, Row>, iterations: usize) -> String {
    let mut s = String::new();
    let w = 24;
    let _ = writeln!(
        s,
        "{:<28} {:<5} {:>w$} {:>w$} {:>w$} {:>w$}  dir",
        "Benchmark (Time / CPU ns)", "", "before (defer_tc=0)", "after (defer_tc=1)", "Δ Time", "Δ CPU"
    );
    for r in &seed.rows {
        let name = format!("BM_sendVec_binderize/{}", r.size);
        let (dt, dc) = (pct(r.before[0], r.after[0]), pct(r.before[1], r.after[1]));
        let _ = writeln!(
            s,
            "{name:<28} {:<5} {:>w$} {:>w$} {:>w$} {:>w$}",
            "seed",
            format!("{:.0} / {:.0}", r.before[0], r.before[1]),
            format!("{:.0} / {:.0}", r.after[0], r.after[1]),
            format!("{dt:+.1}%"),
            format!("{dc:+.1}%")
        );
        let (t, c) = (format!("sendvec.{:04}.time_ns", r.size), format!("sendvec.{:04}.cpu_ns", r.size));
        let both = |m: u32| match (est(rows, &t, m), est(rows, &c, m)) {
            (Some(a), Some(b)) => format!("{:.0} / {:.0}", a.value, b.value),
            _ => "n/a".into(),
        };
        let (lt, lc) = (delta(rows, &t, 1), delta(rows, &c, 1));
        let _ = writeln!(
            s,
            "{:<28} {:<5} {:>w$} {:>w$} {:>w$} {:>w$}  {} {}",
            "",
            "lab",
            both(0),
            both(1),
            show_delta(lt),
            show_delta(lc),
            mark(seed_dir(dt), lt.as_ref().map(lab_dir)),
            mark(seed_dir(dc), lc.as_ref().map(lab_dir))
        );
    }
    let _ = writeln!(
        s,
        "Iterations: the seed's Google Benchmark chose 34k-41k per size; the lab runs a fixed {iterations} per size and repetition."
    );
    s
}

/// Seed 000's two tables in the seed's format with direction marks, as a report section
/// (`lab bench` appends it to its report; the Patch columns are a held-out prediction).
pub fn seed000_section(seeds: &Seeds, rows: &BTreeMap<String, Row>) -> String {
    format!(
        "\n## Against the seed's figures (its Patch columns are a held-out prediction)\n\n{LEGEND}\n\n```\n{}```\n\n```\n{}```\n",
        seed000_tiers(&seeds.seed000, rows),
        seed000_throughput(&seeds.seed000, rows)
    )
}

/// Appends [`seed000_section`] for a finished bench run to its report.md; returns the section.
pub fn append_seed000(dir: &Path, rows: &BTreeMap<String, Row>) -> Result<String> {
    let section = seed000_section(&seeds()?, rows);
    let path = dir.join("report.md");
    let mut text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.push_str(&section);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(section)
}

/// Sizes of the experiments.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Sizes {
    /// Seed 000: interleaved repetitions per mode.
    pub bench_reps: usize,
    /// Seed 001: runs per driver (as in the seed: 10) and iterations per run; calls per
    /// high-priority sender in each run of the inversion workload.
    pub tput_runs: usize,
    pub tput_iters: usize,
    #[serde(default)]
    pub inv_iters: usize,
    #[serde(default)]
    pub inv_runs: usize,
    /// Seed 002: repetitions per mode and iterations per size.
    pub sendvec_reps: usize,
    pub sendvec_iters: usize,
    /// Which programs measure seed 000's rows (`--userspace`).
    #[serde(default)]
    pub userspace: Userspace,
}

impl Sizes {
    pub fn seed001(&self) -> crate::measure::seed001::Size {
        crate::measure::seed001::Size {
            runs: self.tput_runs,
            tput_iters: self.tput_iters,
            inv_runs: self.inv_runs,
            inv_iters: self.inv_iters,
        }
    }

    pub fn of(profile: Profile) -> Sizes {
        match profile {
            Profile::Quick => Sizes {
                bench_reps: 2,
                tput_runs: 2,
                tput_iters: 1000,
                inv_runs: 2,
                inv_iters: 50,
                sendvec_reps: 2,
                sendvec_iters: 100,
                userspace: Userspace::Ports,
            },
            // About 10 minutes here in all.
            Profile::Full => Sizes {
                bench_reps: 12,
                tput_runs: 10,
                tput_iters: 10000,
                // With a hog per CPU every vCPU is busy: ~20 s of wall time per run of 200.
                inv_runs: 6,
                inv_iters: 200,
                sendvec_reps: 8,
                sendvec_iters: 1000,
                userspace: Userspace::Ports,
            },
        }
    }
}

/// Each seed's experiment: its runs, samples and summary.
pub struct Experiment {
    pub outcomes: Vec<Outcome>,
    pub events: Vec<Event>,
    pub samples: Samples,
    pub rows: BTreeMap<String, Row>,
}

impl Experiment {
    /// The summary of `outcomes`, each one boot ([`samples::summary`]): `by_boots` for
    /// deterministic boots (each its own QEMU `-seed`), whose repetitions are never
    /// independent samples; otherwise the repetitions are pooled.
    pub fn of(outcomes: Vec<Outcome>, by_boots: bool) -> Experiment {
        let e = Experiment::from_boots(&outcomes.iter().map(|o| o.events.as_slice()).collect::<Vec<_>>(), by_boots);
        Experiment { outcomes, ..e }
    }

    /// [`Experiment::of`] from each boot's saved events (no runs).
    fn from_boots(boots: &[&[Event]], by_boots: bool) -> Experiment {
        let (samples, rows) = samples::summary(boots, by_boots);
        Experiment { rows, samples, outcomes: vec![], events: boots.concat() }
    }
}

/// The events a run directory saved in `results.jsonl`, and the results the host read from
/// AOSP's programs' output in its `console.log` ([`crate::harness::aosp_output`]).
pub fn saved_events(run_dir: &Path) -> Result<Vec<Event>> {
    let path = run_dir.join("results.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut events: Vec<Event> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    if let Ok(console) = std::fs::read_to_string(run_dir.join("console.log")) {
        let lines: Vec<String> = console.lines().map(String::from).collect();
        events.extend(crate::harness::aosp_output::from_console(&lines));
    }
    Ok(events)
}

/// Re-renders the tables of a finished reproduction (`reproduce.json` in `dir`, as
/// `lab reproduce` or `lab nightly` left it) with the current analysis, without rerunning.
pub fn rerender(dir: &Path) -> Result<String> {
    #[derive(Deserialize)]
    struct Saved {
        sizes: Sizes,
        runs: Vec<std::path::PathBuf>,
    }
    let file = dir.join("reproduce.json");
    let saved: Saved = serde_json::from_str(
        &std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}: is this a reproduce directory?", file.display()))?,
    )
    .with_context(|| format!("{} is not a reproduce.json", file.display()))?;
    // Each saved run is one boot: its repetitions are not independent samples.
    let mut by_seed: BTreeMap<&str, Vec<Vec<Event>>> = BTreeMap::new();
    for run in &saved.runs {
        // The nightly keeps a copy of each run next to reproduce.json; prefer it.
        let name = run.file_name().unwrap_or_default();
        let local = dir.join(name);
        let events = saved_events(if local.is_dir() { &local } else { run })?;
        let n = name.to_string_lossy();
        let seed = if n.contains("-seed001-") {
            "001"
        } else if n.contains("-seed000c-") {
            "000c"
        } else if n.contains("-seed002-") {
            "002"
        } else {
            "000"
        };
        by_seed.entry(seed).or_default().push(events);
    }
    let e = |k: &str| {
        let boots: Vec<&[Event]> = by_seed.get(k).map(|b| b.iter().map(Vec::as_slice).collect()).unwrap_or_default();
        Experiment::from_boots(&boots, true)
    };
    let (s0, s0c, s1, s2) = (e("000"), e("000c"), e("001"), e("002"));
    write_plots(dir, &s1, &s2)?;
    Ok(render(&seeds()?, &[&s0, &s0c], &s1, &s2, saved.sizes))
}

/// Deferral off (mode 0, the "before") and on (mode 1), interleaved in one boot.
pub fn seed002_plan(sizes: Sizes) -> Plan {
    let job = Job {
        bench: "sendvec",
        argv: ["/bin/binder-sendvec", "-i", &sizes.sendvec_iters.to_string()].map(String::from).to_vec(),
    };
    let modes: Vec<(u32, Vec<String>)> =
        [0u32, 1].iter().map(|m| (*m, vec!["--defer-tc".into(), m.to_string()])).collect();
    bench::interleaved("seed002", sizes.sendvec_reps, &[job], &modes)
}

/// Known limits of the emulation, printed with the tables.
pub const LIMITS: &[&str] = &[
    "Absolute figures are not comparable: TCG emulates the SA8155P's topology, not its speed (emulated calls are \
     tens of times slower than on the phone). Compare directions and relative changes.",
    "TCG models no caches and no interconnect, so cache rows are not measurable here and locality saves no time; \
     the tier tables show where transactions land, not what locality would save on silicon.",
    "EAS runs on the board's energy model (one OPP per cluster at the fixed clock, sm8150.dtsi's power \
     coefficients, assumed voltages): with a single OPP gold is the cheapest per unit of capacity, so EAS packs \
     work onto gold, where the phone's low silver OPPs draw it to silver.",
    "Seed 000's SCHED_FIFO rows run three times: mainline's Rust driver has no priority inheritance (pi=0); \
     rust-driver 0011 adds Android's, off by default, which each pi=1 step switches on and restores after. The \
     phone's configuration is pi=1 without INHERIT_RT (schd-dbg never calls setInheritRt), where the FIFO \
     caller's server runs SCHED_NORMAL nice 0, as with pi=0; pi=1 RT shows Android's RT inheritance. The \
     Normal rows are the pi=0 runs.",
    "Seed 001's A/B is the C driver with alloc->mutex (cbinder) against the seed's spinlock patch \
     (cbinder-spin, c-reference/); the Rust driver (perf) is a third column, not the seed's \"after\". The seed's \
     own workload (-w 2, no low-priority lock holder) cannot trigger the inversion it describes; the inversion \
     workload does (nice 19 senders preempted by CPU hogs while holding the lock), and its lock rows count what \
     tracefs saw. Under single-threaded TCG a vCPU can also stop inside a critical section when QEMU switches \
     vCPUs, which a spinlock cannot prevent (a lock-holder preemption the phone does not have).",
    "Seed 002's \"before\" is the Rust driver with `rust_binder.defer_tc=0` (lab-only series rust-driver/lab/), not the \
     2017 C driver.",
];

#[derive(Serialize)]
struct ResultsFile<'a> {
    profile: Profile,
    sizes: Sizes,
    seed000: &'a BTreeMap<String, Row>,
    /// Seed 000 on the C driver with the seed's own patches (c-ctabs/).
    seed000_c: &'a BTreeMap<String, Row>,
    seed001: &'a BTreeMap<String, Row>,
    seed002: &'a BTreeMap<String, Row>,
    runs: Vec<String>,
}

/// The whole reproduction.
pub struct Reproduction {
    pub text: String,
    pub seed000: Experiment,
    /// Seed 000's patches on the C driver ([`C_FLAVOR`]), beside the Rust port's `seed000`.
    pub seed000_c: Experiment,
    pub seed001: Experiment,
    pub seed002: Experiment,
}

impl Reproduction {
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        [&self.seed000, &self.seed000_c, &self.seed001, &self.seed002].into_iter().flat_map(|e| e.outcomes.iter())
    }
    pub fn ok(&self) -> bool {
        self.outcomes().all(Outcome::ok)
    }
    /// Every metric, named `seed00N.<metric>`, for regression checks.
    pub fn metrics(&self) -> BTreeMap<String, Row> {
        let mut m = BTreeMap::new();
        for (p, e) in [
            ("seed000", &self.seed000),
            ("seed000c", &self.seed000_c),
            ("seed001", &self.seed001),
            ("seed002", &self.seed002),
        ] {
            m.extend(e.rows.iter().map(|(k, v)| (format!("{p}.{k}"), v.clone())));
        }
        m
    }
}

/// The flavor seed 000's C patches run on: the C driver plus c-ctabs/.
pub const C_FLAVOR: &str = "cbinder-ctabs";

/// `base` on the C driver with seed 000's own patches; the run directory's name says so, so
/// that [`rerender`] can tell its runs from the Rust port's.
fn c_driver_opts(base: &RunOpts) -> RunOpts {
    RunOpts { flavor: C_FLAVOR.into(), name: format!("seed000c-{C_FLAVOR}"), ..base.clone() }
}

/// The report text for all three seeds. `s0` is seed 000 on the Rust port, then (when it has
/// runs) on the C driver with the seed's own patches.
pub fn render(seeds: &Seeds, s0: &[&Experiment; 2], s1: &Experiment, s2: &Experiment, sizes: Sizes) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "# Seeds reproduced on the emulated SA8155P\n\n{LEGEND}\n");
    let _ = writeln!(t, "Seed 000's programs: {}.\n", sizes.userspace.describe());
    for (e, driver) in
        s0.iter().zip(["the Rust port (rust-driver/)", "the C driver (c-ctabs/, the seed's own patches)"])
    {
        if e.rows.is_empty() && driver.contains("C driver") {
            continue;
        }
        let _ = writeln!(
            t,
            "## Seed 000 on {driver}: CTABS, schd-dbg tiered latency (avg), {} interleaved repetitions per mode\n\n```\n{}```\n",
            sizes.bench_reps,
            seed000_tiers(&seeds.seed000, &e.rows)
        );
        let _ = writeln!(
            t,
            "## Seed 000 on {driver}: CTABS, binderThroughputTest\n\n```\n{}```\n",
            seed000_throughput(&seeds.seed000, &e.rows)
        );
    }
    t.push_str(&crate::measure::seed001::render(&seeds.seed001, &s1.samples, &s1.rows, sizes.seed001()));
    let _ = writeln!(
        t,
        "## Seed 002: deferred BR_TRANSACTION_COMPLETE, BM_sendVec, {} interleaved repetitions per mode\n\n```\n{}```\n",
        sizes.sendvec_reps,
        seed002_table(&seeds.seed002, &s2.rows, sizes.sendvec_iters)
    );
    let _ = writeln!(t, "![seed 002 time](seed002-time.svg) ![seed 002 cpu](seed002-cpu.svg)\n");
    let _ = writeln!(t, "## Known limits\n");
    for l in LIMITS {
        let _ = writeln!(t, "- {l}");
    }
    t
}

/// The plots the report names: seed 001's throughput per driver, seed 002's time and CPU per
/// payload size per mode.
fn write_plots(out: &Path, s1: &Experiment, s2: &Experiment) -> Result<()> {
    crate::measure::seed001::write_plots(out, &s1.rows, &s1.events)?;
    let labels = ["defer_tc=0 (before)", "defer_tc=1 (after)"];
    crate::numbers::plots::sendvec(&out.join("seed002-time.svg"), &s2.rows, "time_ns", &labels)?;
    crate::numbers::plots::sendvec(&out.join("seed002-cpu.svg"), &s2.rows, "cpu_ns", &labels)
}

/// Runs the three experiments, then writes `reproduce.md` and `reproduce.json` to `out`.
pub fn run(profile: Profile, base: &RunOpts, out: &Path) -> Result<Reproduction> {
    run_only(profile, base, out, &[], default_boots(profile))
}

/// Boots per experiment under icount unless `--boots` says otherwise: the full profile's is
/// the fewest a row needs for a mark; the quick one checks the report's shape in one boot
/// (its rows are then `?`, too few boots).
pub fn default_boots(profile: Profile) -> usize {
    match profile {
        Profile::Quick => 1,
        Profile::Full => crate::numbers::table::MIN_SAMPLES,
    }
}

/// [`run`] with only the seeds named in `only` (`000`, `001`, `002`; empty: all), `boots`
/// boots of each experiment (each with its own QEMU `-seed` when the TCG mode is
/// deterministic; see [`experiment_boots`]).
pub fn run_only(profile: Profile, base: &RunOpts, out: &Path, only: &[String], boots: usize) -> Result<Reproduction> {
    run_with(profile, Userspace::Ports, base, out, only, boots)
}

/// [`run_only`] with seed 000's rows measured by `userspace`'s programs.
pub fn run_with(
    profile: Profile,
    userspace: Userspace,
    base: &RunOpts,
    out: &Path,
    only: &[String],
    boots: usize,
) -> Result<Reproduction> {
    if boots == 0 {
        anyhow::bail!("--boots 0: every experiment needs at least one boot");
    }
    run_sized(profile, Sizes { userspace, ..Sizes::of(profile) }, boots, base, out, only)
}

/// The boots of one experiment of `plan`: under a deterministic TCG mode `boots` of them,
/// boot i with QEMU `-seed` [`crate::harness::opts::seed_of`]`(i)` (another boot of the same
/// machine; the same seed would repeat the first boot bit for bit); otherwise one boot, whose
/// repetitions vary with the host.
fn experiment_boots<'a>(seed: &'a str, plan: Plan, opts: &RunOpts, boots: usize) -> Vec<(&'a str, Plan, RunOpts)> {
    bench::boot_opts(opts, boots).into_iter().map(|o| (seed, plan.clone(), o)).collect()
}

/// Seed 001 on the timing model (`reproduce --model --only 001`): `base` as [`crate::measure::model::opts`]
/// makes it, `boots` boots per driver, each with its own QEMU `-seed`.
pub fn run_seed001_model(
    profile: Profile,
    sizes: Sizes,
    boots: usize,
    base: &RunOpts,
    out: &Path,
) -> Result<Reproduction> {
    run_sized(profile, sizes, boots, base, out, &["001".to_string()])
}

fn run_sized(
    profile: Profile,
    sizes: Sizes,
    boots_each: usize,
    base: &RunOpts,
    out: &Path,
    only: &[String],
) -> Result<Reproduction> {
    const SEEDS: [&str; 3] = ["000", "001", "002"];
    if let Some(bad) = only.iter().find(|s| !SEEDS.contains(&s.as_str())) {
        anyhow::bail!("--only {bad}: the seeds are {}", SEEDS.join(", "));
    }
    let want = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let seeds = seeds()?;
    let note = crate::support::progress::note;
    // Every boot of the three experiments, (seed, plan, options), in one list for -j.
    let mut boots: Vec<(&str, Plan, RunOpts)> = vec![];
    if want("000") {
        let u = sizes.userspace;
        note(format!(
            "reproduce: seed 000 (CTABS modes 0/1/2, the tiers with priority_inheritance 0, 1{}; {} repetitions), \
             measured by {}",
            if u == Userspace::Ports { ", 1 + INHERIT_RT" } else { "" },
            sizes.bench_reps,
            u.describe()
        ));
        let plan = userspace::apply(u, bench::plan_inherit(profile, sizes.bench_reps, None))?;
        boots.extend(experiment_boots("000", plan, base, boots_each));
        note(format!(
            "reproduce: seed 000 on the C driver ({C_FLAVOR}, CTABS modes 0/1/2; {} repetitions)",
            sizes.bench_reps
        ));
        boots.extend(experiment_boots(
            "000c",
            userspace::apply(u, bench::plan(profile, sizes.bench_reps, None))?,
            &c_driver_opts(base),
            boots_each,
        ));
    }
    let deterministic = base.tcg.deterministic();
    if want("001") {
        note(format!("reproduce: seed 001 (C mutex, C spinlock, Rust; {} runs each)", sizes.tput_runs));
        let per_driver = deterministic.then_some(boots_each);
        boots.extend(
            crate::measure::seed001::boots(sizes.seed001(), base, per_driver).into_iter().map(|(p, o)| ("001", p, o)),
        );
    }
    if want("002") {
        note(format!("reproduce: seed 002 (defer_tc 0/1, {} repetitions)", sizes.sendvec_reps));
        boots.extend(experiment_boots("002", seed002_plan(sizes), base, boots_each));
    }
    if deterministic {
        note(format!(
            "reproduce: {boots_each} boot(s) per experiment, each with its own QEMU -seed; intervals over boots, a mark \
             from {} boots",
            crate::numbers::table::MIN_SAMPLES
        ));
    }
    let outcomes = crate::harness::boots::each(
        base,
        &boots,
        |(_, p, _)| p.name.clone(),
        |(seed, plan, opts)| {
            if seed.starts_with("000") {
                Ok(bench::execute_plan(plan, profile, sizes.bench_reps, None, opts)?.0)
            } else {
                run_plan_and_report(plan, opts)
            }
        },
    )?;
    let mut by_seed: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for ((seed, ..), o) in boots.iter().zip(outcomes) {
        by_seed.entry(seed).or_default().push(o);
    }
    let mut experiment = |seed: &str| Experiment::of(by_seed.remove(seed).unwrap_or_default(), deterministic);
    let (s0, s0c, s1, s2) = (experiment("000"), experiment("000c"), experiment("001"), experiment("002"));
    let text = render(&seeds, &[&s0, &s0c], &s1, &s2, sizes);
    std::fs::create_dir_all(out)?;
    write_plots(out, &s1, &s2)?;
    std::fs::write(out.join("reproduce.md"), &text).context("writing reproduce.md")?;
    let r = Reproduction { text, seed000: s0, seed000_c: s0c, seed001: s1, seed002: s2 };
    let json = serde_json::to_string_pretty(&ResultsFile {
        profile,
        sizes,
        seed000: &r.seed000.rows,
        seed000_c: &r.seed000_c.rows,
        seed001: &r.seed001.rows,
        seed002: &r.seed002.rows,
        runs: r.outcomes().map(|o| o.dir.display().to_string()).collect(),
    })?;
    std::fs::write(out.join("reproduce.json"), json).context("writing reproduce.json")?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::stats::Estimate;

    fn rows_with(metric: &str, per_mode: &[(u32, &[f64])]) -> (Samples, BTreeMap<String, Row>) {
        let mut s: Samples = BTreeMap::new();
        for (m, v) in per_mode {
            s.entry(metric.to_string()).or_default().insert(*m, v.to_vec());
        }
        let rows = samples::summarise(&s);
        (s, rows)
    }

    /// A boot of `reps` `-w 2` throughput repetitions of mode 0: `v`, `v + 1`, ...
    fn tput_boot(v: f64, reps: usize) -> Outcome {
        let mut o = crate::harness::outcome::tests::three_problems();
        o.events = (0..reps)
            .map(|r| Event::Result {
                step: samples::step_name("throughput-w2", 0, r),
                case: "throughput".into(),
                status: labproto::Status::Pass,
                duration_ms: 0.0,
                message: None,
                data: serde_json::json!({ "iterations_per_sec": v + r as f64 }),
            })
            .collect();
        o
    }

    /// Seed 001 on the model: 3 boots of 3 repetitions each are 3 samples, not 9.
    #[test]
    fn one_boot_never_counts_as_several() {
        let outcomes: Vec<Outcome> = [1000.0, 1100.0, 1200.0].into_iter().map(|v| tput_boot(v, 3)).collect();
        let e =
            Experiment::of(outcomes.clone(), true).rows.remove("throughput-w2.iterations_per_sec").unwrap().per_mode
                [&0];
        assert_eq!((e.n, e.boots, crate::numbers::table::units(&e)), (9, 3, 3));
        assert!(crate::numbers::table::too_few(&e), "3 boots are too few, whatever their repetitions");
        // Pooled, the same boots would pass for 9 independent samples.
        let flat =
            Experiment::of(outcomes, false).rows.remove("throughput-w2.iterations_per_sec").unwrap().per_mode[&0];
        assert_eq!(crate::numbers::table::units(&flat), 9);
    }

    /// `reproduce` under icount: one boot of 9 repetitions is one sample (no mark), and more
    /// boots are other `-seed`s, never the same boot again.
    #[test]
    fn icount_reproduce_counts_boots_not_repetitions() {
        use crate::harness::qemu::Tcg;
        let o = tput_boot(1000.0, 9);
        let mut e = Experiment::of(vec![o.clone()], true);
        let est = e.rows.remove("throughput-w2.iterations_per_sec").unwrap().per_mode[&0];
        assert_eq!(crate::numbers::table::units(&est), 1, "{est:?}");
        assert!(crate::numbers::table::too_few(&est));
        let mut host = Experiment::of(vec![o], false);
        assert_eq!(
            crate::numbers::table::units(&host.rows.remove("throughput-w2.iterations_per_sec").unwrap().per_mode[&0]),
            9
        );

        let icount = RunOpts { tcg: Tcg::Icount, ..RunOpts::default() };
        let b = experiment_boots("002", Plan::default(), &icount, 5);
        assert_eq!(b.iter().map(|x| x.2.qemu_seed).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        let single = RunOpts { tcg: Tcg::Single, ..RunOpts::default() };
        assert_eq!(experiment_boots("002", Plan::default(), &single, 5).len(), 1);
        assert_eq!((default_boots(Profile::Quick), default_boots(Profile::Full)), (1, 5));
    }

    #[test]
    fn seeds_file_parses_with_every_row() {
        let s = seeds().unwrap();
        assert_eq!(s.seed000.tiers.len(), 6);
        assert_eq!(s.seed000.throughput.len(), 9);
        assert_eq!(s.seed001.rows.len(), 3);
        assert_eq!(s.seed002.rows.len(), 9);
        // Every measurable seed-000 metric is one the bench collects.
        for r in s.seed000.throughput.iter().filter(|r| !r.metric.is_empty()) {
            assert!(r.metric.starts_with("throughput."), "{}", r.metric);
        }
    }

    #[test]
    fn direction_marks() {
        let e = |lo, hi| Estimate { value: (lo + hi) / 2.0, lo, hi, n: 5, boots: 0 };
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(-30.0, -5.0)))), "✓");
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(-3.0, 2.0)))), "~");
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(1.0, 2.0)))), "✗");
        // Spanning zero is not no change: the CI reaches beyond the 1% band.
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(-1.0, 2.0)))), "~");
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(1.0, 2.0)))), "✗");
        assert_eq!(mark(Dir::Up, None), "?");
    }

    #[test]
    fn seed000_tables_show_seed_and_lab_lines() {
        let seeds = seeds().unwrap();
        let (_, rows) = rows_with(
            "throughput.iterations_per_sec",
            &[
                (0, &[100.0, 101.0, 99.0, 102.0, 98.0]),
                (1, &[120.0, 121.0, 119.0, 122.0, 118.0]),
                (2, &[100.0, 99.0, 101.0, 102.0, 98.0]),
            ],
        );
        let t = seed000_throughput(&seeds.seed000, &rows);
        let tput: Vec<&str> = t.lines().skip_while(|l| !l.starts_with("Throughput")).take(2).collect();
        assert!(tput[0].contains("41.0 K/s") && tput[0].contains("+12.7%"), "{t}");
        assert!(tput[1].contains("lab") && tput[1].contains("+20.0%") && tput[1].ends_with("✓ ~"), "{t}");
        assert!(t.contains("not measurable here: TCG models no caches"), "{t}");
        assert!(t.lines().find(|l| l.starts_with("CPU migrations")).is_some());
        let tt = seed000_tiers(&seeds.seed000, &rows);
        assert!(tt.contains("0.089 ms") && tt.contains("4623 / 46.2%"), "{tt}");
        // No lab data for the tiers here: n/a and "?", never a made-up number.
        assert!(tt.lines().nth(2).unwrap().contains("n/a") && tt.lines().nth(2).unwrap().ends_with("? ?"), "{tt}");
    }

    #[test]
    fn seed000_on_the_c_driver_is_a_section_of_its_own_when_it_ran() {
        let seeds = seeds().unwrap();
        let sizes = Sizes::of(Profile::Quick);
        let ev = tier_events(5, &[("tiers", Some(0), false, serde_json::json!({"SCHED_OTHER": 300}), 0.0)]);
        let rust = Experiment::from_boots(&[&ev], false);
        let none = Experiment::from_boots(&[], false);
        let t = render(&seeds, &[&rust, &none], &none, &none, sizes);
        assert!(t.contains("## Seed 000 on the Rust port") && !t.contains("on the C driver"), "{t}");
        let c = Experiment::from_boots(&[&ev[..ev.len() / 2]], false);
        let t = render(&seeds, &[&rust, &c], &none, &none, sizes);
        assert_eq!(t.matches("## Seed 000 on the C driver (c-ctabs/").count(), 2, "{t}");
        // Its runs are told apart by the run directory's name.
        assert_eq!(c_driver_opts(&RunOpts::default()).flavor, C_FLAVOR);
        assert!(format!("x-{}-1", c_driver_opts(&RunOpts::default()).name).contains("-seed000c-"));
    }

    /// binder-tiers results of three variants over `reps` rounds: (bench, switch, INHERIT_RT,
    /// the FIFO caller's server policies, FIFO latency added in ms).
    fn tier_events(reps: usize, variants: &[(&str, Option<u32>, bool, serde_json::Value, f64)]) -> Vec<Event> {
        let mut ev = vec![];
        for r in 0..reps {
            for m in MODES {
                for (b, pi, rt, policies, extra) in variants {
                    let tier = |ms: f64| serde_json::json!({"count": 100, "pct": 33.3, "avg_ms": ms});
                    let fifo = tier(0.2 + extra + 0.01 * m as f64);
                    let data = serde_json::json!({
                        "classes": {"fifo": {"same_core": fifo, "same_cluster": fifo, "cross_cluster": fifo},
                                    "other": {"same_core": tier(0.3), "same_cluster": tier(0.3), "cross_cluster": tier(0.3)}},
                        "prio_inherit": pi, "inherit_rt": rt,
                        "server_policies": {"fifo": policies, "other": {"SCHED_OTHER": 300}},
                    });
                    ev.push(Event::Result {
                        step: samples::step_name(b, m, r),
                        case: "tiers".into(),
                        status: labproto::Status::Pass,
                        duration_ms: 0.0,
                        message: None,
                        data,
                    });
                }
            }
        }
        ev
    }

    #[test]
    fn seed000_fifo_rows_name_the_switch_state() {
        let seeds = seeds().unwrap();
        let other = serde_json::json!({"SCHED_OTHER": 300});
        let ev = tier_events(
            5,
            &[
                ("tiers", Some(0), false, other.clone(), 0.0),
                ("tiers-pi", Some(1), false, other, 0.05),
                ("tiers-pirt", Some(1), true, serde_json::json!({"SCHED_FIFO": 300}), 0.1),
            ],
        );
        let rows = samples::summarise(&samples::collect(&ev));
        let t = seed000_tiers(&seeds.seed000, &rows);
        let l: Vec<&str> = t.lines().collect();
        // The FIFO same-core row: the seed's line, then one lab line per switch state.
        assert!(l[1].starts_with("SCHED_FIFO") && l[1].contains("seed") && l[1].contains("0.089 ms"), "{t}");
        assert!(l[2].contains("lab pi=0 ") && l[2].contains("0.200 [0.200, 0.200]"), "{t}");
        assert!(l[3].contains("lab pi=1 ") && !l[3].contains("RT") && l[3].contains("0.250"), "{t}");
        assert!(l[4].contains("lab pi=1 RT") && l[4].contains("0.300") && l[4].contains("+3.3%"), "{t}");
        // Latency rises with the mode here, where the seed's FIFO latency falls: ✗ on each line.
        assert!(l[2].ends_with("✗ ✗") && l[4].ends_with("✗ ✗"), "{t}");
        // The Normal rows have the pi=0 runs only.
        let normal = l.iter().position(|x| x.starts_with("Normal")).unwrap();
        assert!(l[normal + 1].contains("lab pi=0") && l[normal + 2].starts_with("            "), "{t}");
        assert!(!l[normal + 2].contains("lab"), "{t}");
        // Shares: the FIFO rows once per variant, the seed's count on the first only.
        let share = l.iter().position(|x| x.starts_with("Share")).unwrap();
        assert!(l[share + 2].contains("9963 / 99.6%") && l[share + 2].contains("lab pi=0"), "{t}");
        assert!(l[share + 4].contains("lab pi=1 RT") && !l[share + 4].contains('%'), "{t}");
        // The policy the FIFO caller's server ran with, per variant and mode.
        let pol = l.iter().position(|x| x.starts_with("The FIFO caller's server")).unwrap();
        assert!(l[pol + 2].starts_with("lab pi=0") && l[pol + 2].matches("SCHED_OTHER").count() == 3, "{t}");
        assert!(l[pol + 4].starts_with("lab pi=1 RT") && l[pol + 4].matches("SCHED_FIFO").count() == 3, "{t}");
        assert!(t.contains("schd-dbg never") && t.contains("SCHED_NORMAL nice 0"), "{t}");
    }

    #[test]
    fn seed000_fifo_rows_without_a_switch_or_with_mixed_runs() {
        let seeds = seeds().unwrap();
        // A kernel without the switch (the plain bench plan on the C driver): "lab", one line.
        let ev = tier_events(2, &[("tiers", None, false, serde_json::json!({"SCHED_OTHER": 300}), 0.0)]);
        let t = seed000_tiers(&seeds.seed000, &samples::summarise(&samples::collect(&ev)));
        let l: Vec<&str> = t.lines().collect();
        assert!(l[2].contains(" lab ") && !l[2].contains("pi="), "{t}");
        assert!(l[3].contains("Same-cluster") && l[3].contains("seed"), "{t}");
        // Runs that saw different switch values, and servers of both policies: said so.
        let both = serde_json::json!({"SCHED_OTHER": 150, "SCHED_FIFO": 150});
        let mut ev = tier_events(2, &[("tiers-pi", Some(1), false, both.clone(), 0.0)]);
        ev.extend(tier_events(2, &[("tiers-pi", Some(0), false, both, 0.0)]));
        let t = seed000_tiers(&seeds.seed000, &samples::summarise(&samples::collect(&ev)));
        assert!(t.lines().nth(3).unwrap().contains("lab pi=mixed"), "{t}");
        let pol = t.lines().rev().find(|x| x.starts_with("lab pi=mixed")).unwrap();
        assert_eq!(pol.matches("FIFO 50.0% OTHER 50.0%").count(), 3, "{t}");
    }

    #[test]
    fn seed002_table_has_every_size() {
        let seeds = seeds().unwrap();
        let (_, rows) = rows_with(
            "sendvec.0004.time_ns",
            &[(0, &[50.0, 51.0, 52.0, 49.0, 53.0]), (1, &[40.0, 41.0, 42.0, 39.0, 43.0])],
        );
        let t = seed002_table(&seeds.seed002, &rows, 1000);
        assert_eq!(t.lines().filter(|l| l.starts_with("BM_sendVec_binderize/")).count(), 9, "{t}");
        assert!(t.contains("45959 / 20288") && t.contains("fixed 1000"), "{t}");
        let lab4 = t.lines().nth(2).unwrap();
        assert!(lab4.contains("-19.6%") && lab4.contains("✓ ?"), "{t}");
    }
}
