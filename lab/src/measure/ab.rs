//! `lab ab`: any binder patch evaluated the way the seeds were. The treatment kernel is the
//! base flavor plus the patches ([`crate::kbuild::treatment`]); it passes the correctness
//! gates (conformance on the perf and debug kernels, KUnit and a fuzz budget on debug), then
//! base and treatment run the seed workloads in alternating boots, each boot with another
//! QEMU `-seed`, on the timing model when the lab QEMU is there. Intervals resample boots
//! and the marks follow [`crate::numbers::table`]'s rules. One report: ab.md, ab.html, ab.json.

use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::Outcome;
use crate::harness::qemu::Tcg;
use crate::kbuild::treatment::{self, Source};
use crate::kbuild::{flavor, kernel, pin::Lock, tree};
use crate::measure::bench::{self, Job, Profile};
use crate::measure::userspace::{self, Userspace};
use crate::numbers::samples::{self, BootSamples, Row};
use crate::numbers::stats::Estimate;
use crate::numbers::table::{self, Dir};
use crate::report::run_plan_and_report;
use crate::support::{paths, progress::note};
use anyhow::{bail, Context, Result};
use labproto::Plan;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to evaluate and how much.
#[derive(Clone, Debug)]
pub struct Request {
    pub sources: Vec<Source>,
    pub base: String,
    pub profile: Profile,
    /// Boots per arm [default: the profile's].
    pub boots: Option<usize>,
    /// A seeds.toml-shaped file: the directions the patch's author claims.
    pub expect: Option<PathBuf>,
    /// Percent by which a row may get worse before the A/B fails.
    pub threshold: f64,
    /// The timing model (lab QEMU, hicount, cache plugin); else the run's own TCG (icount).
    pub model: bool,
    /// Gates only (`--gates-only`): no performance runs and no profile.
    pub no_perf: bool,
    /// QEMU `-seed` of the first boot pair; boot i (from 0) runs with seed_base + i. An A/A
    /// run takes its own range, so that no stored base boot of another range answers for it.
    pub seed_base: u32,
    /// Runs of a failed case on each kernel ([`RERUNS`]); 0: compare one run of the base.
    pub reruns: u32,
    /// No debug kernel: the gates run on the perf-side treatment only.
    pub no_debug: bool,
    /// Which programs run seed 000's throughput and tiers workloads.
    pub userspace: crate::measure::userspace::Userspace,
    pub out: PathBuf,
}

/// How much the performance A/B runs per profile.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Size {
    pub boots: usize,
    pub reps: usize,
    pub fuzz_ops: u64,
}

impl Size {
    pub fn of(profile: Profile) -> Size {
        match profile {
            // The fewest boots a figure needs for a mark (table::MIN_SAMPLES), one repetition each.
            Profile::Quick => Size { boots: table::MIN_SAMPLES, reps: 1, fuzz_ops: 5_000 },
            Profile::Full => Size { boots: 8, reps: 3, fuzz_ops: 100_000 },
        }
    }
}

/// The seed workloads: seed 000's throughput (-w 8) and tiers (both classes, every tier),
/// seed 001's -w 2 and inversion, seed 002's sendvec sizes.
pub fn jobs(profile: Profile) -> Vec<Job> {
    // binder-inversion's CPU hogs keep every vCPU busy for the whole step: at -i 50 its
    // processes ran 30.2 G guest instructions, the other four quick workloads 1.5 G together
    // (measured on cbinder under the model), so quick calls 10 times per high-priority sender.
    let (w8, w2, tiers, sendvec, inv) = match profile {
        Profile::Quick => ("300", "1000", "100", "100", "10"),
        Profile::Full => ("3000", "5000", "500", "1000", "200"),
    };
    let job = |bench: &'static str, argv: &[&str]| Job { bench, argv: argv.iter().map(|s| s.to_string()).collect() };
    vec![
        job("throughput", &["/bin/binder-throughput", "-w", "8", "-i", w8]),
        job("throughput-w2", &["/bin/binder-throughput", "-w", "2", "-i", w2]),
        job("tiers", &["/bin/binder-tiers", "-i", tiers]),
        job("sendvec", &["/bin/binder-sendvec", "-i", sendvec]),
        job("inversion", &["/bin/binder-inversion", "-i", inv, "--high-policy", "nice"]),
    ]
}

/// Arms: 0 the base, 1 the treatment (the samples' "modes").
pub const ARMS: [&str; 2] = ["base", "treatment"];

/// Which way is better for a row; None: a share or a count, reported without a verdict.
pub fn better(metric: &str) -> Option<crate::numbers::gate::Better> {
    use crate::numbers::gate::Better;
    if metric.ends_with("per_sec") {
        Some(Better::Higher)
    } else if metric.ends_with("_ms") || metric.ends_with("_ns") || metric.ends_with("l1d_misses") {
        Some(Better::Lower)
    } else {
        None
    }
}

/// The rows of the table, in order, from what the runs produced.
fn table_metrics(rows: &BTreeMap<String, Row>) -> Vec<String> {
    let mut out = vec![];
    for b in ["throughput", "throughput-w2"] {
        // p50/p99 both ways: binderThroughputTest's histogram buckets and exact
        // (numbers::samples::put_percentiles), whichever program ran.
        for k in ["iterations_per_sec", "avg_ms", "p50_exact_ms", "p99_exact_ms", "p50_bucket_ms", "p99_bucket_ms"] {
            out.push(format!("{b}.{k}"));
        }
    }
    for class in ["fifo", "other"] {
        for tier in ["same_core", "same_cluster", "cross_cluster"] {
            out.push(format!("tiers.{class}.{tier}.avg_ms"));
            out.push(format!("tiers.{class}.{tier}.pct"));
        }
    }
    out.extend(rows.keys().filter(|k| k.starts_with("sendvec.") && k.ends_with(".time_ns")).cloned());
    for k in ["iterations_per_sec", "high.avg_ms", "high.p99_ms", "low.avg_ms", "low.p99_ms"] {
        out.push(format!("inversion.{k}"));
    }
    out.extend(["boot.cache.l1d_refs".to_string(), "boot.cache.l1d_misses".to_string()]);
    out.retain(|m| rows.contains_key(m));
    out
}

/// A row's verdict from the treatment's change: the dead band and sample rule of the seed
/// tables, then better or worse by the metric's direction.
pub fn verdict(metric: &str, d: Option<&Estimate>) -> &'static str {
    use crate::numbers::gate::Better;
    let Some(d) = d else { return "n/a" };
    match (table::lab_dir(d), better(metric)) {
        (Dir::TooFew, _) => "n/a (too few)",
        (Dir::Unclear, _) => "unclear",
        (Dir::Flat, _) => "no change",
        (Dir::Up, Some(Better::Higher)) | (Dir::Down, Some(Better::Lower)) => "better",
        (Dir::Up, Some(Better::Lower)) | (Dir::Down, Some(Better::Higher)) => "worse",
        (Dir::Up, None) => "up",
        (Dir::Down, None) => "down",
    }
}

/// The rows the performance verdict judges, declared before any run: the per-call cost of
/// binder's two headline workloads (seed 000's -w 8 and seed 001's -w 2), in throughput and
/// in mean latency, whose boot-to-boot spread is small enough for 5 boots per arm to detect a
/// change of a few percent. Every other row is exploratory: shown with its interval and its
/// direction at 95%, never failing the A/B on its own.
pub const PRIMARY: [&str; 4] =
    ["throughput.iterations_per_sec", "throughput.avg_ms", "throughput-w2.iterations_per_sec", "throughput-w2.avg_ms"];
/// The family-wise false-alarm rate of the performance verdict: Holm over [`PRIMARY`].
pub const ALPHA: f64 = 0.05;
/// The power a row's smallest detectable change is given at.
pub const POWER: f64 = 0.8;
/// One-sided level of an exploratory row's smallest detectable change: that of its two-sided
/// 95% interval.
const EXPLORATORY_ALPHA: f64 = 0.025;
/// Runs of each failed case on each kernel to tell a flake from a regression.
pub const RERUNS: u32 = 20;
/// Fisher's one-sided level for calling a case's failures the patch's: a flake that fails
/// equally often on both kernels is called a regression at most this often.
pub const FLAKE_ALPHA: f64 = 0.01;

/// What a row contributes to the performance verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// A primary row worse by more than the threshold, significant after Holm.
    Regressed,
    /// A primary row not worse beyond the threshold, where a change of the threshold's size
    /// would have shown (its smallest detectable change is within the threshold).
    Pass,
    /// A primary row that could not be judged: fewer than 5 valid boots in an arm, or no values.
    TooFew,
    /// A primary row not found worse whose smallest detectable change exceeds the threshold.
    Underpowered,
    /// Not part of the verdict.
    Exploratory,
}

impl Judgement {
    fn show(self, mdc: Option<f64>) -> String {
        match self {
            Judgement::Regressed => "**regressed**".into(),
            Judgement::Pass => "pass".into(),
            Judgement::TooFew => "inconclusive: too few boots".into(),
            Judgement::Underpowered => match mdc {
                Some(m) => format!("inconclusive: detects only {m:.1}% or more"),
                None => "inconclusive: no change detectable at these boots".into(),
            },
            Judgement::Exploratory => "exploratory".into(),
        }
    }
}

/// One row of the performance table.
#[derive(Clone, Debug, Serialize)]
pub struct PerfRow {
    pub metric: String,
    pub base: Option<Estimate>,
    pub treatment: Option<Estimate>,
    /// The change; its interval resamples boot pairs (same `-seed`) where there are any.
    pub delta_pct: Option<Estimate>,
    /// The change with each arm's boots resampled on their own, for comparison.
    pub unpaired: Option<Estimate>,
    /// Whether `delta_pct` resampled boot pairs (at least 5 boot numbers in both arms).
    pub paired: bool,
    /// The interval's direction at 95% (better, worse, no change, unclear, n/a).
    pub verdict: String,
    pub primary: bool,
    pub judgement: Judgement,
    /// The one-sided permutation p-value that the treatment is worse (boot medians).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_worse: Option<f64>,
    /// The smallest change (in %) this run's boots could detect with 80% power at the row's
    /// level (primary: ALPHA / primary rows; exploratory: 0.025); None: none at any size.
    pub mdc_pct: Option<f64>,
    /// Valid boots per arm.
    pub boots: [usize; 2],
    /// Worse by more than the threshold, significant after Holm (primary rows only).
    pub regressed: bool,
    /// Against `--expect`: ✓ ~ ✗ ?, and the claimed change in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<(String, f64)>,
}

/// One value per boot (the median of its samples), by arm.
fn boot_values(by_arm: Option<&Vec<Vec<f64>>>) -> Vec<f64> {
    by_arm.into_iter().flatten().filter_map(|b| crate::numbers::stats::median(b)).collect()
}

/// Per boot, log values oriented so that larger is worse; None when a value is not positive
/// or the metric has no better direction.
fn worse_logs(metric: &str, v: &[f64]) -> Option<Vec<f64>> {
    use crate::numbers::gate::Better;
    let sign = match better(metric)? {
        Better::Lower => 1.0,
        Better::Higher => -1.0,
    };
    v.iter().map(|x| (*x > 0.0).then(|| sign * x.ln())).collect()
}

/// Whether a change in % is worse by more than `threshold` for this metric.
fn worse_beyond(metric: &str, d: f64, threshold: f64) -> bool {
    use crate::numbers::gate::Better;
    match better(metric) {
        Some(Better::Lower) => d > threshold,
        Some(Better::Higher) => d < -threshold,
        None => false,
    }
}

/// The table's rows from every valid boot's samples: each arm's median, the change (paired
/// by boot number where both arms have the boot), the interval's direction, and for the
/// primary rows the judgement: a one-sided permutation test on boot medians, Holm over the
/// primary rows at [`ALPHA`], and the smallest detectable change against the threshold.
pub fn perf_rows(samples: &BootSamples, threshold: f64, expect: &BTreeMap<String, f64>) -> Vec<PerfRow> {
    use crate::numbers::stats;
    let summary = samples::summarise_boots(samples);
    let metrics = table_metrics(&summary);
    let k = PRIMARY.len() as f64;
    let mut rows: Vec<PerfRow> = metrics
        .into_iter()
        .map(|m| {
            let r = &summary[&m];
            let arms = samples.get(&m);
            let (bb, tb) = (arms.and_then(|a| a.get(&0)), arms.and_then(|a| a.get(&1)));
            let unpaired = r.delta_pct.get(&1).copied();
            let paired = bb.zip(tb).and_then(|(b, t)| stats::delta_pct_ci_paired(b, t));
            let paired = paired.filter(|p| p.boots >= table::MIN_SAMPLES);
            let d = paired.or(unpaired);
            let v = verdict(&m, d.as_ref());
            let primary = PRIMARY.contains(&m.as_str());
            let (bv, tv) = (boot_values(bb), boot_values(tb));
            let logs = worse_logs(&m, &bv).zip(worse_logs(&m, &tv));
            let p_worse = logs.as_ref().and_then(|(b, t)| stats::perm_p_greater(b, t));
            let level = if primary { ALPHA / k } else { EXPLORATORY_ALPHA };
            let mdc_pct = logs
                .as_ref()
                .and_then(|(b, t)| stats::min_detectable(b, t, level, POWER))
                .map(|l| (l.exp() - 1.0) * 100.0);
            // The seeds' p50/p99 claims are binderThroughputTest's bucket midpoints.
            let claim_key = m.replace("_bucket_ms", "_ms");
            let expect = expect.get(&claim_key).map(|claim| {
                let mark = table::mark(table::seed_dir(*claim), d.as_ref().map(table::lab_dir));
                (mark.to_string(), *claim)
            });
            PerfRow {
                base: r.per_mode.get(&0).copied(),
                treatment: r.per_mode.get(&1).copied(),
                delta_pct: d,
                unpaired,
                paired: paired.is_some(),
                verdict: v.into(),
                primary,
                judgement: Judgement::Exploratory,
                p_worse,
                mdc_pct,
                boots: [bv.len(), tv.len()],
                regressed: false,
                expect,
                metric: m,
            }
        })
        .collect();
    // Holm over every primary row, present or not: a missing one counts as not rejected.
    let find = |m: &str| rows.iter().find(|r| r.metric == m);
    let tests: Vec<(Option<f64>, Option<f64>)> = PRIMARY
        .iter()
        .map(|m| find(m).filter(|r| enough(r)).map_or((None, None), |r| (r.p_worse, r.delta_pct.map(|d| d.value))))
        .collect();
    let regressed = regressions(&tests, threshold);
    for r in rows.iter_mut().filter(|r| r.primary) {
        let i = PRIMARY.iter().position(|m| *m == r.metric).unwrap_or(0);
        r.regressed = regressed[i];
        r.judgement = if !enough(r) || r.p_worse.is_none() {
            Judgement::TooFew
        } else if r.regressed {
            Judgement::Regressed
        } else if r.mdc_pct.is_none_or(|m| m > threshold) {
            Judgement::Underpowered
        } else {
            Judgement::Pass
        };
    }
    rows
}

/// The performance verdict's rule, per [`PRIMARY`] row given its one-sided p-value that the
/// treatment is worse and its change in %: regressed when Holm over all the primary rows at
/// [`ALPHA`] rejects "not worse" and the change is worse by more than `threshold`. The
/// family-wise rate of a false `failed` is at most ALPHA whatever the rows' dependence
/// (Holm), and lower by the threshold's condition.
pub fn regressions(tests: &[(Option<f64>, Option<f64>)], threshold: f64) -> Vec<bool> {
    let ps: Vec<Option<f64>> = tests.iter().map(|t| t.0).collect();
    let reject = crate::numbers::stats::holm(&ps, ALPHA);
    tests
        .iter()
        .enumerate()
        .map(|(i, (_, d))| reject[i] && d.is_some_and(|d| worse_beyond(PRIMARY[i], d, threshold)))
        .collect()
}

/// Whether a row has the boots a verdict needs in both arms.
fn enough(r: &PerfRow) -> bool {
    r.boots.iter().all(|&n| n >= table::MIN_SAMPLES)
}

/// The primary rows the run did not produce at all (a workload that gave no result).
pub fn missing_primary(rows: &[PerfRow]) -> Vec<&'static str> {
    PRIMARY.iter().copied().filter(|m| !rows.iter().any(|r| r.metric == *m)).collect()
}

/// `--expect FILE` in lab/seeds.toml's shape: every table entry with `metric` and `values`
/// (first: before, last: after) or `before` and `after` ranges (seed 001's rows: their
/// midpoints), or seed 000's tier rows (`class`, `tier`, `avg_ms`), gives the claimed change
/// in % of that metric (a later entry for the same metric wins).
pub fn load_expect(path: &Path) -> Result<BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--expect {}: cannot read it", path.display()))?;
    let v: toml::Value = toml::from_str(&text).with_context(|| format!("--expect {}: not TOML", path.display()))?;
    let mut out = BTreeMap::new();
    fn walk(v: &toml::Value, out: &mut BTreeMap<String, f64>) {
        match v {
            toml::Value::Table(t) => {
                let nums = |k: &str| -> Option<(f64, f64)> {
                    let a = t.get(k)?.as_array()?;
                    let f = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
                    Some((f(a.first()?)?, f(a.last()?)?)).filter(|_| a.len() >= 2)
                };
                // Seed 001's shape: ranges before and after, compared by their midpoints.
                let mid = |k: &str| nums(k).map(|(a, b)| (a + b) / 2.0);
                let ranges = || Some((mid("before")?, mid("after")?));
                let metric = match (t.get("metric").and_then(|m| m.as_str()), t.get("class"), t.get("tier")) {
                    (Some(m), ..) if !m.is_empty() => nums("values").or_else(ranges).map(|n| (m.to_string(), n)),
                    (None, Some(c), Some(tr)) => nums("avg_ms").map(|n| {
                        (format!("tiers.{}.{}.avg_ms", c.as_str().unwrap_or(""), tr.as_str().unwrap_or("")), n)
                    }),
                    _ => None,
                };
                if let Some((m, (from, to))) = metric.filter(|(_, (f, _))| *f != 0.0) {
                    out.insert(m, table::pct(from, to));
                }
                for x in t.values() {
                    walk(x, out);
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&v, &mut out);
    if out.is_empty() {
        bail!(
            "--expect {}: no rows with `metric` and `values = [before, after]` (lab/seeds.toml's shape), e.g.\n\
             [[rows]]\nmetric = \"throughput.iterations_per_sec\"\nvalues = [41045, 46179]",
            path.display()
        );
    }
    Ok(out)
}

/// A kernel built for the A/B.
#[derive(Clone, Debug, Serialize)]
pub struct BuildRec {
    pub role: String,
    pub flavor: String,
    pub key: String,
    pub wall_s: f64,
}

/// A failing case run again on both kernels: its failures out of its runs on each.
#[derive(Clone, Debug, Serialize)]
pub struct Rerun {
    pub case: String,
    pub treatment: (u64, u64),
    pub base: (u64, u64),
    /// Fisher's exact test, one-sided: the treatment fails it more often than the base.
    pub p: f64,
    /// `regression`, `flake` (did not fail more often on the treatment, nor on the base) or
    /// `the base fails it too`.
    pub call: String,
    pub run_dirs: Vec<PathBuf>,
}

/// One correctness gate on the treatment.
#[derive(Clone, Debug, Serialize)]
pub struct Gate {
    pub name: String,
    pub flavor: String,
    pub run_dir: PathBuf,
    pub ok: bool,
    pub problems: Vec<String>,
    /// The console around the first splat, or the tail of a failed run.
    pub excerpt: String,
    /// What failed, one signature each ([`failure_signatures`]).
    pub failures: Vec<String>,
    /// When the treatment failed: the base's run of the same gate and what failed there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_run: Option<PathBuf>,
    pub base_failures: Vec<String>,
    /// The failed cases, each run again [`RERUNS`] times on both kernels.
    pub reruns: Vec<Rerun>,
    /// The treatment's failures the A/B fails on: neither the base's own (the same signature)
    /// nor a flake by the re-runs.
    pub blamed: Vec<String>,
    /// KUnit: the suites that fail on the base, left out on both kernels.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub filtered: Vec<FilteredSuite>,
    /// KUnit: the gate's runs without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest: Option<KunitRest>,
}

impl Gate {
    pub fn fails_ab(&self) -> bool {
        !self.ok && !self.blamed.is_empty()
    }
}

/// What makes a run a failure, one line per failure, comparable between kernels and boots:
/// `case NAME` for a failed case, `<kind>: <message>` for a splat ([`Splat::signature`]),
/// `timeout in <phase>`, `step <name> ...` for a failed step without a failed case, and the
/// harness's own faults.
///
/// [`Splat::signature`]: crate::harness::splat::Splat::signature
pub fn failure_signatures(o: &Outcome) -> Vec<String> {
    use crate::harness::outcome::Verdict;
    let mut out: Vec<String> = vec![];
    let mut add = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    match &o.verdict {
        Verdict::Completed | Verdict::Interrupted => {}
        Verdict::Panic { .. } if o.splats.iter().any(|s| s.kind == "panic") => {}
        Verdict::Panic { text } => add(format!("panic: {}", text.lines().next().unwrap_or(""))),
        Verdict::Timeout { phase, .. } => add(format!("timeout in {phase}")),
        Verdict::InitError { message } => add(format!("guest init failed: {message}")),
        Verdict::QemuExited { status, .. } => add(format!("QEMU exited ({status})")),
    }
    for s in &o.splats {
        add(s.signature());
    }
    let failed_cases: Vec<(&str, &str)> =
        o.results().filter(|r| r.2 == labproto::Status::Fail).map(|r| (labproto::plan_step(r.0), r.1)).collect();
    for (_, case) in &failed_cases {
        add(format!("case {case}"));
    }
    for e in &o.events {
        if let labproto::Event::StepEnd { step, exit_code, timed_out, .. } = e {
            let step = labproto::plan_step(step);
            if *timed_out {
                add(format!("step {step} timed out"));
            } else if *exit_code != Some(0) && !failed_cases.iter().any(|(s, _)| *s == step) {
                add(format!("step {step} failed"));
            }
        }
    }
    if !o.topology_mismatches.is_empty() {
        add("topology mismatch".into());
    }
    let empty = out.is_empty();
    if empty && !o.ok() {
        out.push(o.problems().first().and_then(|p| p.lines().next()).unwrap_or("failed").to_string());
    }
    out
}

/// A failing case's call from its re-runs: a regression when the treatment fails it more
/// often than the base at Fisher's one-sided level [`FLAKE_ALPHA`]; else the base's own
/// failure when the base failed it too, else a flake.
pub fn rerun_call(treatment: (u64, u64), base: (u64, u64)) -> (f64, &'static str) {
    let p = crate::numbers::stats::fisher_greater(treatment.0, treatment.1, base.0, base.1);
    let call = if treatment.1 == 0 || base.1 == 0 {
        // A re-run boot that never reached the case (it crashed or hung first) tells nothing.
        "no result in the re-runs"
    } else if p <= FLAKE_ALPHA {
        "regression"
    } else if base.0 > 0 {
        "the base fails it too"
    } else {
        "flake"
    };
    (p, call)
}

/// The treatment's failures the A/B fails on: a case re-run on both kernels counts by its
/// call; anything else only when the base's run did not fail the same way (same case, same
/// splat signature, same timeout).
pub fn blame(failures: &[String], base_failures: &[String], reruns: &[Rerun]) -> Vec<String> {
    failures
        .iter()
        .filter(|f| {
            let rerun = f.strip_prefix("case ").and_then(|c| reruns.iter().find(|r| r.case == c));
            match rerun {
                // Excused only when the re-runs cleared it.
                Some(r) => !matches!(r.call.as_str(), "flake" | "the base fails it too"),
                None => !base_failures.contains(f),
            }
        })
        .cloned()
        .collect()
}

/// One performance boot of the A/B.
#[derive(Clone, Debug, Serialize)]
pub struct BootRec {
    pub arm: String,
    /// From 1.
    pub boot: usize,
    /// QEMU's `-seed`.
    pub seed: u32,
    pub run_dir: PathBuf,
    pub wall_s: f64,
    /// The key of the stored deterministic boot whose results these are (nothing booted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused: Option<String>,
    /// What went wrong in this boot ([`fault`]); None: a valid boot whose samples count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// The console around the first splat, or the tail of the run, for a boot with a fault.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub excerpt: String,
}

impl BootRec {
    /// A fault the A/B fails on: a treatment boot that crashed, splatted, hung or failed a
    /// step. The base's faults and the harness's own make the boot invalid, nothing more.
    pub fn fails_ab(&self) -> bool {
        self.arm == ARMS[1] && matches!(self.fault.as_deref(), Some("crash" | "timeout" | "failed"))
    }
}

/// A boot the harness lost (QEMU or the init failing, QEMU ending before the plan did): says
/// nothing about the patch.
pub const HARNESS_FAULT: &str = "harness fault";

/// What went wrong in a run, in a word: crash (a panic or a splat), timeout, failed (a step
/// or a case), harness fault; None for a clean run.
pub fn fault(o: &Outcome) -> Option<String> {
    use crate::harness::outcome::Exit;
    let f = match o.exit() {
        Exit::Ok | Exit::Inconclusive => return None,
        Exit::KernelFault => "crash",
        Exit::Timeout => "timeout",
        Exit::TestFailure => "failed",
        Exit::HarnessError => HARNESS_FAULT,
        Exit::Interrupted => "interrupted",
    };
    Some(f.into())
}

/// Per function, kernel instructions per call on each side.
#[derive(Clone, Debug, Serialize)]
pub struct FnDiff {
    pub function: String,
    pub base: f64,
    pub treatment: f64,
}

/// What an A/B concludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbVerdict {
    /// Every gate passed, no boot failed, and every primary row was judged without a
    /// regression beyond the threshold (gates only: every gate passed).
    Passed,
    /// A gate failed for the patch, a treatment boot crashed, splatted, hung or failed a
    /// step, or a primary row regressed beyond the threshold.
    Failed,
    /// Nothing failed, but the A/B cannot say it passed: too few valid boots, or a primary
    /// row that could not be judged or could not have detected a change of the threshold's size.
    Inconclusive,
}

impl AbVerdict {
    /// `lab ab`'s exit code: 0 passed, 1 failed, 204 inconclusive.
    pub fn exit(self) -> crate::harness::outcome::Exit {
        use crate::harness::outcome::Exit;
        match self {
            AbVerdict::Passed => Exit::Ok,
            AbVerdict::Failed => Exit::TestFailure,
            AbVerdict::Inconclusive => Exit::Inconclusive,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            AbVerdict::Passed => "passed",
            AbVerdict::Failed => "failed",
            AbVerdict::Inconclusive => "inconclusive",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub base: String,
    pub treatment: String,
    pub patches: Vec<String>,
    pub profile: Profile,
    pub size: Size,
    /// The performance boots' QEMU and timing options (`--qemu lab --tcg hicount --cache
    /// --dvfs --idle`), and the scheduler policy.
    pub timing: String,
    pub policy: String,
    /// Which programs ran seed 000's throughput and tiers workloads.
    #[serde(default)]
    pub userspace: Userspace,
    /// QEMU `-seed` of boot 1; boot i runs with seed_base + i - 1.
    pub seed_base: u32,
    /// `--gates-only`: the verdict covers the gates alone.
    pub gates_only: bool,
    pub builds: Vec<BuildRec>,
    pub gates: Vec<Gate>,
    pub boots: Vec<BootRec>,
    pub rows: Vec<PerfRow>,
    pub perf_problems: Vec<String>,
    pub functions: Vec<FnDiff>,
    pub threshold: f64,
    pub verdict: AbVerdict,
    /// Why the verdict is what it is, most severe first.
    pub reasons: Vec<String>,
    /// The paired intervals' widths over the unpaired ones: median, least, most, rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairing: Option<(f64, f64, f64, usize)>,
    /// What the timing model got right and wrong on the seeds (generated from the freeze record).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trust: Vec<String>,
    pub wall_s: f64,
    #[serde(skip)]
    pub profile_text: String,
    #[serde(skip)]
    pub metrics: BTreeMap<String, Row>,
}

/// Whether the performance runs were asked for and ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perf {
    /// `--gates-only`.
    NotAsked,
    /// Asked, not run: a gate failed, or the A/B was interrupted.
    NotRun,
    Ran,
}

/// The verdict and its reasons from the gates, the performance boots and the rows.
pub fn decide(gates: &[Gate], boots: &[BootRec], rows: &[PerfRow], perf: Perf) -> (AbVerdict, Vec<String>) {
    let mut failed = vec![];
    for b in boots.iter().filter(|b| b.fails_ab()) {
        let what = b.problems.first().and_then(|p| p.lines().next()).unwrap_or("");
        failed.push(format!(
            "{} in treatment boot {} (-seed {}): {what}",
            b.fault.as_deref().unwrap_or(""),
            b.boot,
            b.seed
        ));
    }
    for g in gates.iter().filter(|g| g.fails_ab()) {
        failed.push(format!("gate {} failed on the treatment: {}", g.name, g.blamed.join("; ")));
    }
    for r in rows.iter().filter(|r| r.regressed) {
        failed.push(format!(
            "{} worse by {:.1}% (beyond the threshold; p = {:.4}, significant after Holm over the {} primary rows)",
            r.metric,
            r.delta_pct.map(|d| d.value.abs()).unwrap_or(0.0),
            r.p_worse.unwrap_or(1.0),
            PRIMARY.len()
        ));
    }
    if !failed.is_empty() {
        return (AbVerdict::Failed, failed);
    }
    let mut why = vec![];
    match perf {
        Perf::NotAsked => {
            return (AbVerdict::Passed, vec!["every gate passed (gates only: no performance verdict)".into()])
        }
        Perf::NotRun => why.push("the performance runs did not run".to_string()),
        Perf::Ran => {
            for arm in ARMS {
                let all = boots.iter().filter(|b| b.arm == arm).count();
                let valid = boots.iter().filter(|b| b.arm == arm && b.fault.is_none()).count();
                if valid < table::MIN_SAMPLES {
                    why.push(format!(
                        "{valid} valid {arm} boot(s) of {all}: a performance verdict needs {}",
                        table::MIN_SAMPLES
                    ));
                }
            }
            for m in missing_primary(rows) {
                why.push(format!("primary row {m}: no values"));
            }
            for r in rows.iter().filter(|r| matches!(r.judgement, Judgement::TooFew | Judgement::Underpowered)) {
                why.push(format!("primary row {}: {}", r.metric, r.judgement.show(r.mdc_pct)));
            }
        }
    }
    if why.is_empty() {
        (AbVerdict::Passed, vec!["every gate passed, no boot failed, no primary row regressed".into()])
    } else {
        (AbVerdict::Inconclusive, why)
    }
}

/// How much narrower the paired intervals are than the unpaired ones, over the rows with
/// both: (median, least, most ratio of widths, rows).
pub fn pairing_gain(rows: &[PerfRow]) -> Option<(f64, f64, f64, usize)> {
    let mut ratios: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let (p, u) = (r.delta_pct?, r.unpaired?);
            (r.paired && u.hi > u.lo).then(|| (p.hi - p.lo) / (u.hi - u.lo))
        })
        .collect();
    ratios.sort_by(|a, b| a.total_cmp(b));
    let med = crate::numbers::stats::median(&ratios)?;
    Some((med, ratios[0], ratios[ratios.len() - 1], ratios.len()))
}

/// The console lines around the first splat, or the run's last lines.
fn excerpt(o: &Outcome) -> String {
    if let Some(s) = o.splats.first() {
        let text: Vec<&str> = s.text.lines().take(40).collect();
        return format!("{} (console line {}):\n{}", s.kind, s.line + 1, text.join("\n"));
    }
    let failed: Vec<String> = o
        .step_output
        .iter()
        .filter(|(k, _)| o.failed_steps().contains(k))
        .map(|(k, v)| format!("[{k}]\n{}", v.join("\n")))
        .collect();
    if !failed.is_empty() {
        return failed.join("\n");
    }
    o.console_tail.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The fuzz plan with an operation budget.
fn fuzz_plan(ops: u64) -> Result<Plan> {
    let mut p = load_plan("fuzz")?;
    for s in p.steps.iter_mut() {
        s.env.insert("BINDER_FUZZ_OPS".into(), ops.to_string());
    }
    p.name = format!("fuzz-{ops}");
    Ok(p)
}

/// The binder_alloc KUnit suite of the pinned tree takes the boot down (`BUG_ON(alloc->mapped)`
/// in a case's exit when the test's deferred fput has not run yet; else its exhaustive case
/// runs for many minutes under KASAN): the gates other than KUnit boot such kernels without KUnit.
fn kunit_off(flavor: &str) -> bool {
    flavor::load(flavor)
        .map(|f| f.config.values.get("CONFIG_ANDROID_BINDER_ALLOC_KUNIT_TEST").is_some_and(|v| v == "y"))
        .unwrap_or(false)
}

/// The least boot timeout of an A/B's boots on an idle host: a debug kernel (KASAN, lockdep)
/// or the timing model on a loaded host boots in minutes (measured: every debug boot past
/// 60 s at a load average of 25), and a boot timeout says nothing about the patch.
const MIN_BOOT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// The boot timeout of an A/B's boots: at least [`MIN_BOOT_TIMEOUT`], stretched by the host's
/// load per core (a QEMU gets about cores/load of a core when more than `cores` runnable
/// threads share the host), read when the boots are planned.
fn boot_timeout(asked: std::time::Duration) -> std::time::Duration {
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| load_per_core(&s));
    asked.max(MIN_BOOT_TIMEOUT.mul_f64(load.unwrap_or(1.0).max(1.0)))
}

/// The 1-minute load average of /proc/loadavg's text per host core.
fn load_per_core(loadavg: &str) -> Option<f64> {
    let one: f64 = loadavg.split_whitespace().next()?.parse().ok()?;
    Some(one / crate::harness::boots::default_jobs() as f64)
}

fn gate_run(plan: &Plan, flavor: &str, kind: &str, base: &RunOpts) -> Result<Outcome> {
    let mut o = RunOpts { flavor: flavor.into(), boot_timeout: boot_timeout(base.boot_timeout), ..base.clone() };
    if kind != "kunit" && kunit_off(flavor) {
        o.append.push("kunit.enable=0".into());
    }
    if kind == "kunit" {
        o.append.push(KUNIT_LOGLEVEL.into());
    }
    run_plan_and_report(plan, &o)
}

/// The KUnit gate's boots put the kernel's KTAP (KERN_INFO) on the console: a boot that
/// crashes inside a suite then names the suite, and the suites it never reached are counted.
const KUNIT_LOGLEVEL: &str = "loglevel=7";

/// A KUnit suite left out of the KUnit gate on both kernels, because it fails on the base.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FilteredSuite {
    pub suite: String,
    /// The module `kunit.filter=module!=` names (None: the kernel printed none, so it cannot
    /// be left out and runs as before).
    pub module: Option<String>,
    /// How it failed on the base, or why it goes with one that did.
    pub why: String,
}

/// The KUnit gate once the suites that fail on the base are left out: its runs on both kernels.
#[derive(Clone, Debug, Serialize)]
pub struct KunitRest {
    /// The kernel argument that leaves them out (`kunit.filter=module!=A,module!=B`).
    pub filter: String,
    /// None: no suite was left to run (every suite the base announced fails there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<PathBuf>,
    pub ok: bool,
    pub failures: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_run: Option<PathBuf>,
    pub base_failures: Vec<String>,
    /// The suite the treatment's whole run ended inside (crashed or hung), when the base fails it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_off: Option<String>,
}

/// The console of a run, line by line (empty when it has none).
fn console(o: &Outcome) -> Vec<String> {
    std::fs::read_to_string(o.dir.join("console.log")).unwrap_or_default().lines().map(String::from).collect()
}

/// A gate run's failure signatures; a KUnit run's also carry the expectation and assertion
/// failures the kernel printed, which a crash later in the boot does not erase.
fn signatures(kind: &str, o: &Outcome) -> Vec<String> {
    let mut out = failure_signatures(o);
    if kind == "kunit" {
        let lines = console(o);
        for f in crate::harness::ktap::console_failures(&crate::harness::ktap::kernel_lines(&lines)) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// The KUnit suites that fail in a run, from its console: the boot's KTAP (a suite the boot
/// crashed or hung in, a suite with failed cases) and the `kunit` step's results; with the
/// number of suites the boot announced. Suites that share a failing suite's module go with it
/// (the filter names modules).
pub fn failing_suites(console: &[String]) -> (Option<usize>, Vec<FilteredSuite>) {
    use crate::harness::ktap;
    let (planned, mut seen) = ktap::suites(&ktap::kernel_lines(console));
    let prefix = labproto::step_console_prefix(ktap::STEP);
    let step: Vec<&str> = console.iter().filter_map(|l| l.strip_prefix(prefix.as_str())).collect();
    for s in ktap::suites(&step).1 {
        match seen.iter_mut().find(|x| x.name == s.name) {
            Some(x) => {
                x.module = x.module.take().or(s.module);
                for f in s.failures {
                    if !x.failures.contains(&f) {
                        x.failures.push(f);
                    }
                }
            }
            None => seen.push(s),
        }
    }
    let failing: Vec<&ktap::Suite> = seen.iter().filter(|s| s.failed()).collect();
    let mut out: Vec<FilteredSuite> = failing
        .iter()
        .map(|s| {
            let why = if s.cut_off {
                "the base's boot crashed or hung inside it".to_string()
            } else {
                format!("fails on the base: {}", s.failures.join("; "))
            };
            FilteredSuite { suite: s.name.clone(), module: s.module.clone(), why }
        })
        .collect();
    for s in seen.iter().filter(|s| !s.failed()) {
        if let Some(m) = s.module.as_ref().filter(|m| failing.iter().any(|f| f.module.as_ref() == Some(*m))) {
            let why = format!("passes on the base, but shares module {m} with a suite that fails there");
            out.push(FilteredSuite { suite: s.name.clone(), module: Some(m.clone()), why });
        }
    }
    (planned, out)
}

/// The kernel argument that leaves `suites` out of the boot's KUnit run: KUnit's attribute
/// filter on each module (`kunit.filter_glob` cannot exclude); None when none has a module.
pub fn kunit_filter(suites: &[FilteredSuite]) -> Option<String> {
    let mut modules: Vec<&str> = vec![];
    for m in suites.iter().filter_map(|s| s.module.as_deref()) {
        if !modules.contains(&m) {
            modules.push(m);
        }
    }
    (!modules.is_empty()).then(|| {
        format!("kunit.filter={}", modules.iter().map(|m| format!("module!={m}")).collect::<Vec<_>>().join(","))
    })
}

/// The failures the A/B blames on the patch in a KUnit gate whose base fails some suites:
/// those of the whole runs the base's whole run does not show (a case failure the kernel
/// printed before the crash both boots share), and those of the runs without the failing
/// suites the base's such run does not show.
/// A treatment's whole run that ended inside a suite the base fails is no evidence for how it
/// ended (the base's own boots end in binder_alloc by a crash, or pass its first cases and
/// time out in the last, from boot to boot), so that ending is excused; what the kernel
/// printed before (case failures, KASAN, lockdep, a WARN) is compared.
pub fn kunit_blame(whole: (&[String], &[String]), rest: Option<&KunitRest>) -> Vec<String> {
    let both_cut_off = rest.is_some_and(|r| r.cut_off.is_some());
    let mut out: Vec<String> =
        blame(whole.0, whole.1, &[]).into_iter().filter(|f| !(both_cut_off && ends_a_boot(f))).collect();
    if let Some(r) = rest {
        for f in blame(&r.failures, &r.base_failures, &[]) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// Whether a failure signature is how a boot ended: a crash, a hang, a timeout.
fn ends_a_boot(sig: &str) -> bool {
    ["panic: ", "bug: ", "oops: ", "hung-task: ", "soft-lockup: ", "rcu-stall: ", "timeout in ", "step kunit timed out"]
        .iter()
        .any(|p| sig.starts_with(p))
}

/// The KUnit suite a run's boot ended inside (crashed or hung), from its console.
fn cut_off_in(o: &Outcome) -> Option<String> {
    let console = console(o);
    let (_, suites) = crate::harness::ktap::suites(&crate::harness::ktap::kernel_lines(&console));
    suites.into_iter().find(|s| s.cut_off).map(|s| s.name)
}

/// Skipped results for the suites left out, so that the run's JUnit, TAP and KTAP name them
/// with their reason; the reports are written again.
fn name_filtered(o: &mut Outcome, filtered: &[FilteredSuite]) -> Result<()> {
    for f in filtered.iter().filter(|f| f.module.is_some()) {
        o.events.push(labproto::Event::Result {
            step: crate::harness::ktap::STEP.into(),
            case: f.suite.clone(),
            status: labproto::Status::Skip,
            duration_ms: 0.0,
            message: Some(format!("left out of the A/B's KUnit gate on both kernels: {}", f.why)),
            data: serde_json::Value::Null,
        });
    }
    crate::report::write_reports(&o.dir, o)
}

/// The KUnit gate without the suites that fail on the base (`ob`, its whole run): the
/// treatment, and the base too when the treatment fails.
fn kunit_without_failing(
    g: &mut Gate,
    whole: (&Outcome, &Outcome),
    plan: &Plan,
    base_fl: &str,
    base: &RunOpts,
) -> Result<Option<KunitRest>> {
    let (planned, filtered) = failing_suites(&console(whole.1));
    g.filtered = filtered;
    let Some(filter) = kunit_filter(&g.filtered) else { return Ok(None) };
    let left = g.filtered.iter().filter(|f| f.module.is_some()).count();
    let cut_off = cut_off_in(whole.0).filter(|s| g.filtered.iter().any(|f| f.suite == *s));
    let mut rest = KunitRest {
        filter: filter.clone(),
        run_dir: None,
        ok: true,
        failures: vec![],
        base_run: None,
        base_failures: vec![],
        cut_off,
    };
    if planned.is_some_and(|n| n <= left) {
        note(format!("ab: gate {}: every KUnit suite of the base fails there; none is left to run", g.name));
        return Ok(Some(rest));
    }
    let with = RunOpts { append: [base.append.clone(), vec![filter]].concat(), ..base.clone() };
    note(format!("ab: gate {}: again without the suites that fail on the base ({})", g.name, rest.filter));
    let mut o = gate_run(plan, &g.flavor, "kunit", &with)?;
    name_filtered(&mut o, &g.filtered)?;
    (rest.run_dir, rest.ok, rest.failures) = (Some(o.dir.clone()), o.ok(), signatures("kunit", &o));
    if !o.ok() && !crate::harness::run::interrupted() {
        let mut ob = gate_run(plan, base_fl, "kunit", &with)?;
        name_filtered(&mut ob, &g.filtered)?;
        (rest.base_run, rest.base_failures) = (Some(ob.dir.clone()), signatures("kunit", &ob));
    }
    Ok(Some(rest))
}

/// Opt-in conformance cases and the files whose change makes the debug gate run them: each
/// exercises a window a patch there can open (`shrinker_zap_race`: an allocation between the
/// shrinker's unlock and its zap, the use-after-free of seed 001's RFC).
pub const OPT_IN_BY_PATH: &[(&str, &[&str])] = &[(
    "shrinker_zap_race",
    &[
        "drivers/android/binder_alloc",
        "drivers/android/binder/allocation.rs",
        "drivers/android/binder/range_alloc",
        "drivers/android/binder/page_range.rs",
        "mm/list_lru.c",
    ],
)];

/// The files a patch changes (`diff --git a/X b/X`, or `+++ b/X` in a plain diff).
pub fn touched_files(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for l in text.lines() {
        let f = l.strip_prefix("+++ b/").or_else(|| l.strip_prefix("--- a/"));
        if let Some(f) = f.map(|f| f.split('\t').next().unwrap_or(f).trim().to_string()) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// The opt-in cases the patches' files call for.
pub fn opt_in_cases(files: &[String]) -> Vec<String> {
    OPT_IN_BY_PATH
        .iter()
        .filter(|(_, prefixes)| files.iter().any(|f| prefixes.iter().any(|p| f.starts_with(p))))
        .map(|(case, _)| case.to_string())
        .collect()
}

/// The conformance plan with only the opt-in cases `opt_in`: a boot of their own, since on
/// the C driver `fd_cycle_leak` leaves its context manager behind for the rest of the boot
/// (a documented leak of that driver), and an opt-in case after the default ones could not
/// take the context manager ("BINDER_SET_CONTEXT_MGR already set", measured on cbinder-debug
/// and its treatment alike at load 13).
fn opt_in_plan(opt_in: &[String]) -> Result<Plan> {
    crate::harness::adhoc::select_cases(&load_plan("conformance")?, opt_in, &[])
}

/// Each failed case of a conformance gate, run [`RERUNS`] times in one boot of each kernel.
fn rerun_cases(cases: &[String], t_fl: &str, base_fl: &str, reruns: u32, base: &RunOpts) -> Result<Vec<Rerun>> {
    let plan = crate::harness::adhoc::select_cases(&load_plan("conformance")?, cases, &[])?;
    let repeat = |fl: &str| -> Result<Outcome> {
        let o = RunOpts { repeat: reruns, until_fail: false, ..base.clone() };
        gate_run(&plan, fl, "conformance", &o)
    };
    note(format!("ab: {} failed on the treatment: running it {reruns} times on each kernel", cases.join(", ")));
    let (t, b) = (repeat(t_fl)?, repeat(base_fl)?);
    let count = |o: &Outcome, case: &str| -> (u64, u64) {
        let runs: Vec<labproto::Status> = o.results().filter(|r| r.1 == case).map(|r| r.2).collect();
        (runs.iter().filter(|s| **s == labproto::Status::Fail).count() as u64, runs.len() as u64)
    };
    Ok(cases
        .iter()
        .map(|c| {
            let (tc, bc) = (count(&t, c), count(&b, c));
            let (p, call) = rerun_call(tc, bc);
            Rerun {
                case: c.clone(),
                treatment: tc,
                base: bc,
                p,
                call: call.into(),
                run_dirs: vec![t.dir.clone(), b.dir.clone()],
            }
        })
        .collect())
}

/// The gates, in order: conformance on the perf-side treatment, then on the debug one (with
/// the opt-in cases the patches call for), KUnit and the fuzzer there. A failing gate runs
/// once on its base kernel; its failed cases run [`RERUNS`] times more on both kernels; a
/// failure fails the A/B unless the base shows the same one or the re-runs call it a flake.
fn gates(
    t_perf: &str,
    perf: &str,
    debug: Option<(&str, &str)>,
    size: Size,
    base: &RunOpts,
    opt_in: &[String],
    reruns: u32,
) -> Result<Vec<Gate>> {
    let conformance = load_plan("conformance")?;
    let mut list: Vec<(String, String, String, &str, Plan)> =
        vec![(format!("conformance-{perf}"), t_perf.into(), perf.into(), "conformance", conformance.clone())];
    if let Some((t_dbg, dbg)) = debug {
        list.push((format!("conformance-{dbg}"), t_dbg.into(), dbg.into(), "conformance", conformance.clone()));
        if !opt_in.is_empty() {
            list.push((format!("opt-in-{dbg}"), t_dbg.into(), dbg.into(), "conformance", opt_in_plan(opt_in)?));
        }
        list.push((format!("kunit-{dbg}"), t_dbg.into(), dbg.into(), "kunit", load_plan("kunit")?));
        list.push((format!("fuzz-{dbg}"), t_dbg.into(), dbg.into(), "fuzz", fuzz_plan(size.fuzz_ops)?));
    }
    let mut out = vec![];
    for (name, fl, base_fl, kind, plan) in list {
        note(format!("ab: gate {name} on {fl}"));
        let o = gate_run(&plan, &fl, kind, base)?;
        let mut g = Gate {
            name: name.clone(),
            flavor: fl.clone(),
            run_dir: o.dir.clone(),
            ok: o.ok(),
            problems: o.problems(),
            excerpt: if o.ok() { String::new() } else { excerpt(&o) },
            failures: signatures(kind, &o),
            base_run: None,
            base_failures: vec![],
            reruns: vec![],
            blamed: vec![],
            filtered: vec![],
            rest: None,
        };
        if !g.ok && crate::harness::run::interrupted() {
            g.blamed = g.failures.clone();
        } else if !g.ok {
            note(format!("ab: gate {name} failed on the treatment; running it on {base_fl} to compare the failures"));
            let ob = gate_run(&plan, &base_fl, kind, base)?;
            g.base_run = Some(ob.dir.clone());
            g.base_failures = signatures(kind, &ob);
            let cases = crate::harness::adhoc::failed_cases(&o);
            if kind == "conformance" && !cases.is_empty() && reruns > 0 {
                g.reruns = rerun_cases(&cases, &fl, &base_fl, reruns, base)?;
            }
            g.blamed = blame(&g.failures, &g.base_failures, &g.reruns);
            if kind == "kunit" && !crate::harness::run::interrupted() {
                g.rest = kunit_without_failing(&mut g, (&o, &ob), &plan, &base_fl, base)?;
                if g.rest.is_some() {
                    g.blamed = kunit_blame((&g.failures, &g.base_failures), g.rest.as_ref());
                }
            }
        }
        out.push(g);
        if crate::harness::run::interrupted() {
            break;
        }
    }
    Ok(out)
}

/// QEMU's `-seed` of boot `boot` (from 0) of a range that starts at `seed_base`.
pub fn seed_of(seed_base: u32, boot: usize) -> u32 {
    seed_base.saturating_add(boot as u32)
}

/// Base and treatment in alternating boots: per boot number (QEMU's `-seed`), both arms, the
/// order rotated each boot; every workload `reps` times per boot.
fn perf_runs(
    flavors: [&str; 2],
    size: Size,
    profile: Profile,
    opts: &RunOpts,
    model: bool,
    seed_base: u32,
    userspace: Userspace,
) -> Result<Vec<(u32, usize, Outcome)>> {
    let mut items: Vec<(u32, usize, Plan, RunOpts)> = vec![];
    for b in 0..size.boots {
        let order: Vec<u32> = if b % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
        for arm in order {
            let plan = userspace::apply(
                userspace,
                bench::interleaved(&format!("ab-{}", ARMS[arm as usize]), size.reps, &jobs(profile), &[(arm, vec![])]),
            )?;
            let o = RunOpts {
                flavor: flavors[arm as usize].into(),
                qemu_seed: seed_of(seed_base, b),
                boot_timeout: boot_timeout(opts.boot_timeout),
                // The base arm is the same deterministic boot in every A/B of this base: its
                // results are kept by the content key of its inputs and reused.
                reuse_boots: arm == 0,
                ..opts.clone()
            };
            items.push((arm, b, plan, o));
        }
    }
    note(format!(
        "ab: {} boots per arm ({}), base and treatment alternating, {} repetition(s) of {} workloads each; seed \
         000's programs: {}",
        size.boots,
        if model { "the timing model: lab QEMU, hicount, cache plugin" } else { "icount" },
        size.reps,
        jobs(profile).len(),
        userspace.name()
    ));
    let label = |(arm, b, _, o): &(u32, usize, Plan, RunOpts)| {
        format!("ab {} (boot {}/{}, -seed {})", ARMS[*arm as usize], b + 1, size.boots, o.qemu_seed)
    };
    let outs = crate::harness::boots::each(opts, &items, label, |(_, _, p, o)| run_plan_and_report(p, o))?;
    let reused = outs.iter().filter(|o| o.reused.is_some()).count();
    if reused > 0 {
        note(format!("ab: {reused} boot(s) took the results of a stored deterministic boot with the same inputs"));
    }
    Ok(items.into_iter().zip(outs).map(|((arm, b, ..), o)| (arm, b, o)).collect())
}

/// Every boot's samples; with the model, the boot's L1D counters as one sample per boot.
fn boot_samples(runs: &[(u32, usize, Outcome)], model: bool) -> BootSamples {
    let mut all = BootSamples::new();
    for (arm, b, o) in runs {
        let mut s = samples::collect(&o.events);
        if model {
            if let Ok(c) = crate::measure::model::counters(&o.dir) {
                for k in ["l1d_refs", "l1d_misses"] {
                    s.entry(format!("boot.cache.{k}")).or_default().entry(*arm).or_default().push(c[k]);
                }
            }
        }
        samples::add_boot(&mut all, *b, &s);
    }
    all
}

/// The plan `lab profile` runs on each side: binder-throughput -w 2 under icount.
fn profile_plan(out: &Path, profile: Profile) -> Result<PathBuf> {
    let iters = if profile == Profile::Quick { 1000 } else { 5000 };
    let plan = format!(
        "name = \"ab-profile\"\n\n[[steps]]\nname = \"throughput\"\nargv = [\"/bin/binder-throughput\", \"-w\", \"2\", \"-i\", \"{iters}\"]\ntimeout_s = 600\n"
    );
    let path = out.join("ab-profile.toml");
    std::fs::write(&path, plan)?;
    Ok(path)
}

/// The per-function difference of kernel instructions per call (lab profile's engine).
fn profile_diff(flavors: [&str; 2], out: &Path, profile: Profile, opts: &RunOpts) -> Result<(String, Vec<FnDiff>)> {
    let plan = profile_plan(out, profile)?;
    // Like every boot of an A/B, they wait for the guest as long as the host's load asks.
    let icount = RunOpts { tcg: Tcg::Icount, boot_timeout: boot_timeout(opts.boot_timeout), ..opts.clone() };
    let sides: Vec<RunOpts> = flavors
        .iter()
        .map(|f| RunOpts { flavor: f.to_string(), plan: plan.display().to_string(), ..icount.clone() })
        .collect();
    // Both sides at once: under icount a boot's counts do not depend on what else runs.
    let mut done = crate::harness::boots::each(
        &icount,
        &sides,
        |o| format!("profile {}", o.flavor),
        crate::measure::profile::profiled_run,
    )?;
    let (_, t) = done.pop().expect("two sides");
    let (_, b) = done.pop().expect("two sides");
    let text = crate::measure::profile::compare(&b, ARMS[0], &t, ARMS[1], 25);
    let per = |p: &crate::measure::profile::Profile, n: u64| n as f64 / p.calls.unwrap_or(1).max(1) as f64;
    let mut names: Vec<&String> = b.functions.keys().chain(t.functions.keys()).collect();
    names.sort();
    names.dedup();
    let mut diffs: Vec<FnDiff> = names
        .into_iter()
        .map(|n| FnDiff {
            function: n.clone(),
            base: per(&b, b.functions.get(n).copied().unwrap_or(0)),
            treatment: per(&t, t.functions.get(n).copied().unwrap_or(0)),
        })
        .filter(|d| d.base != d.treatment)
        .collect();
    diffs.sort_by(|x, y| (y.treatment - y.base).abs().total_cmp(&(x.treatment - x.base).abs()));
    diffs.truncate(40);
    Ok((text, diffs))
}

/// The whole A/B. Bad input (a missing file, a non-patch, a patch that does not apply) is
/// refused before anything builds; a treatment that does not build is an error.
pub fn run(req: &Request, opts: &RunOpts) -> Result<Report> {
    let t0 = Instant::now();
    let cache = paths::cache();
    let base_fl = flavor::load(&req.base)?;
    if treatment::split(&req.base).is_some() {
        bail!("--base {}: a treatment cannot be a base; give a flavor of kernel-config/", req.base);
    }
    let debug = if req.no_debug { None } else { treatment::debug_of(&req.base) };
    if debug.is_none() {
        note(format!("ab: no debug kernel for {}: lockdep, KASAN, KUnit and the fuzzer do not run", req.base));
    }
    let expect = req.expect.as_deref().map(load_expect).transpose()?;
    let lock = Lock::load(&Lock::path())?;
    let src = tree::tree_dir(&cache, &lock);
    let head = |f: &flavor::Flavor| -> Result<Option<String>> {
        if !src.join(".git").is_dir() {
            return Ok(None);
        }
        tree::stack_head(&src, &f.stack()?)
    };
    let patches = treatment::gather(&req.sources, head(&base_fl)?.as_deref())?;
    let mut sides = vec![base_fl.clone()];
    if let Some(d) = &debug {
        sides.push(flavor::load(d)?);
    }
    for f in &sides {
        match head(f)? {
            Some(h) => {
                if let Some(why) = treatment::check_applies(&src, &h, &patches, &f.name)? {
                    bail!("{why}");
                }
            }
            None => note(format!(
                "ab: the kernel tree never carried {}'s series; the patches are checked when it does",
                f.name
            )),
        }
    }
    let t = treatment::store(&cache, &patches)?;
    let t_perf = t.flavor(&req.base);
    let t_debug = debug.as_ref().map(|d| t.flavor(d));
    note(format!("ab: treatment {t_perf}: {} patch(es) on {}", patches.len(), req.base));

    let mut builds = vec![];
    let mut to_build = vec![("base", req.base.clone()), ("treatment", t_perf.clone())];
    if let (Some(d), Some(td)) = (&debug, &t_debug) {
        to_build.extend([("base debug", d.clone()), ("treatment debug", td.clone())]);
    }
    for (role, f) in to_build {
        let t1 = Instant::now();
        // The shared tree names the patches by the treatment's series (`<hash>/0001.patch`):
        // say which files those are.
        let b = kernel::build(&f).with_context(|| {
            let list: Vec<String> =
                t.origins.iter().enumerate().map(|(i, o)| format!("{}/{:04}.patch = {o}", t.hash, i + 1)).collect();
            format!("building the {role} kernel {f} ({})", list.join(", "))
        })?;
        builds.push(BuildRec { role: role.into(), flavor: f, key: b.key, wall_s: t1.elapsed().as_secs_f64() });
    }

    let size = Size { boots: req.boots.unwrap_or(Size::of(req.profile).boots), ..Size::of(req.profile) };
    // One QEMU binary for every boot of the A/B, resolved once (measured: another session's
    // unexported work in the shared QEMU tree failed an A/B at its third boot).
    let opts = &opts.with_qemu_resolved()?;
    let files: Vec<String> = patches.iter().flat_map(|p| touched_files(&p.text)).collect();
    let opt_in = if debug.is_some() { opt_in_cases(&files) } else { vec![] };
    if !opt_in.is_empty() {
        note(format!("ab: the patches touch the allocator: the debug conformance gate runs {} too", opt_in.join(", ")));
    }
    let gate_list = gates(
        &t_perf,
        &req.base,
        debug.as_deref().zip(t_debug.as_deref()).map(|(d, td)| (td, d)),
        size,
        opts,
        &opt_in,
        req.reruns,
    )?;

    let (mut metrics, mut perf_problems, mut functions, mut profile_text, mut boots) =
        (BTreeMap::new(), vec![], vec![], String::new(), vec![]);
    let popts = if req.model {
        crate::measure::freeze::model_opts(opts)?.with_qemu_resolved()?
    } else {
        RunOpts { tcg: Tcg::Icount, ..opts.clone() }
    };
    let timing = crate::harness::features::timing_words(&popts);
    let policy = popts.policy.map(|p| format!("{p:?}").to_lowercase()).unwrap_or_else(|| "the board's default".into());
    // A treatment that fails a gate has no performance worth measuring: its report is the failure.
    let gate_failed = gate_list.iter().any(Gate::fails_ab);
    if gate_failed && !req.no_perf {
        perf_problems.push("not run: a gate failed on the treatment".into());
    }
    let mut perf = if req.no_perf { Perf::NotAsked } else { Perf::NotRun };
    let mut samples_all = BootSamples::new();
    if !req.no_perf && !gate_failed && !crate::harness::run::interrupted() {
        let runs = perf_runs([&req.base, &t_perf], size, req.profile, &popts, req.model, req.seed_base, req.userspace)?;
        boots = runs
            .iter()
            .map(|(arm, b, o)| {
                let fault = fault(o);
                BootRec {
                    arm: ARMS[*arm as usize].into(),
                    boot: b + 1,
                    seed: seed_of(req.seed_base, *b),
                    run_dir: o.dir.clone(),
                    wall_s: o.wall_s,
                    reused: o.reused.clone(),
                    excerpt: if fault.is_some() { excerpt(o) } else { String::new() },
                    problems: o.problems(),
                    fault,
                }
            })
            .collect();
        for (arm, b, o) in &runs {
            for p in o.problems() {
                perf_problems.push(format!("{} boot {}: {p} ({})", ARMS[*arm as usize], b + 1, o.dir.display()));
            }
        }
        // Only clean boots give samples: a boot that failed measured something else.
        let valid: Vec<(u32, usize, Outcome)> = runs.into_iter().filter(|(_, _, o)| fault(o).is_none()).collect();
        samples_all = boot_samples(&valid, req.model);
        metrics = samples::summarise_boots(&samples_all);
        perf = if crate::harness::run::interrupted() { Perf::NotRun } else { Perf::Ran };
        match profile_diff([&req.base, &t_perf], &req.out, req.profile, opts) {
            Ok((text, f)) => (profile_text, functions) = (text, f),
            Err(e) => perf_problems.push(format!("profile: {e:#}")),
        }
    }
    let rows = perf_rows(&samples_all, req.threshold, &expect.unwrap_or_default());
    let (verdict, reasons) = decide(&gate_list, &boots, &rows, perf);
    let trust = if req.model { crate::measure::freeze::trust_lines().unwrap_or_default() } else { vec![] };
    Ok(Report {
        base: req.base.clone(),
        treatment: t_perf,
        patches: t.origins.clone(),
        profile: req.profile,
        size,
        timing,
        userspace: req.userspace,
        policy,
        seed_base: req.seed_base,
        gates_only: req.no_perf,
        builds,
        gates: gate_list,
        boots,
        pairing: pairing_gain(&rows),
        rows,
        perf_problems,
        functions,
        threshold: req.threshold,
        verdict,
        reasons,
        trust,
        wall_s: t0.elapsed().as_secs_f64(),
        profile_text,
        metrics,
    })
}

fn show(e: Option<Estimate>, metric: &str) -> String {
    let digits = if metric.ends_with("_ms") {
        3
    } else if metric.ends_with("pct") {
        1
    } else {
        0
    };
    match e {
        Some(e) if table::too_few(&e) => table::few(&e),
        Some(e) if digits == 0 && e.value.abs() >= 1e4 => {
            format!("{} [{}, {}]", table::big(e.value), table::big(e.lo), table::big(e.hi))
        }
        Some(e) => e.show(digits),
        None => "n/a".into(),
    }
}

/// A problem's first line for a table cell.
fn brief(p: &str) -> String {
    let l = p.lines().next().unwrap_or("").replace('|', "/");
    if l.chars().count() > 120 {
        format!("{}…", l.chars().take(120).collect::<String>())
    } else {
        l
    }
}

/// A p-value for the table.
fn show_p(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.001 => format!("{p:.1e}"),
        Some(p) => format!("{p:.3}"),
        None => "".into(),
    }
}

/// ab.md.
pub fn render(r: &Report, reproducer: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# A/B: {} against {}\n", r.treatment, r.base);
    let _ = writeln!(s, "**Verdict: {}**\n", r.verdict.word());
    for why in &r.reasons {
        let _ = writeln!(s, "- {why}");
    }
    let _ = writeln!(s);
    // Crashes first, in any boot (the base's too: they make the boot invalid), then the gates.
    let crashes: Vec<&BootRec> = r.boots.iter().filter(|b| b.fault.is_some()).collect();
    for b in &crashes {
        let whose = if b.fails_ab() { "" } else { " (not counted against the patch; the boot is invalid)" };
        let _ = writeln!(
            s,
            "## {} in {} boot {} (-seed {}){whose}\n\n{}\n",
            b.fault.as_deref().unwrap_or(""),
            b.arm,
            b.boot,
            b.seed,
            b.problems.iter().map(|p| brief(p)).collect::<Vec<_>>().join("; ")
        );
        let _ = writeln!(s, "Run directory: `{}`\n\n```\n{}\n```\n", b.run_dir.display(), b.excerpt);
    }
    for g in r.gates.iter().filter(|g| g.fails_ab()) {
        let _ = writeln!(s, "## FAILED gate {} on {}\n\n{}\n", g.name, g.flavor, g.blamed.join("; "));
        let _ = writeln!(s, "Run directory: `{}`\n\n```\n{}\n```\n", g.run_dir.display(), g.excerpt);
    }
    let _ = writeln!(s, "Patches (in order):\n");
    for p in &r.patches {
        let _ = writeln!(s, "- `{p}`");
    }
    let _ = writeln!(s, "\nRun again: `{reproducer}`\n");
    let _ = writeln!(s, "## Gates on the treatment\n");
    let _ = writeln!(s, "| gate | kernel | result | run |\n| --- | --- | --- | --- |");
    for g in &r.gates {
        let res = if g.ok {
            "pass".to_string()
        } else if g.fails_ab() {
            format!("**FAIL**: {}", g.blamed.iter().map(|p| brief(p)).collect::<Vec<_>>().join("; "))
        } else {
            format!(
                "fail, not the patch's (the base fails the same way, or a flake by the re-runs): {}",
                g.failures.iter().map(|p| brief(p)).collect::<Vec<_>>().join("; ")
            )
        };
        let _ = writeln!(s, "| {} | {} | {} | `{}` |", g.name, g.flavor, res, g.run_dir.display());
    }
    let reruns: Vec<(&Gate, &Rerun)> = r.gates.iter().flat_map(|g| g.reruns.iter().map(move |x| (g, x))).collect();
    if !reruns.is_empty() {
        let _ = writeln!(
            s,
            "\nFailed cases, run again on both kernels ({RERUNS} times each in one boot): a regression when the \
             treatment fails more often than the base at Fisher's one-sided p <= {FLAKE_ALPHA} (a flake equally \
             likely on both is called a regression at most 1% of the time).\n\n\
             | gate | case | treatment fails | base fails | p | call |\n| --- | --- | --- | --- | --- | --- |"
        );
        for (g, x) in reruns {
            let _ = writeln!(
                s,
                "| {} | {} | {} of {} | {} of {} | {} | {} |",
                g.name,
                x.case,
                x.treatment.0,
                x.treatment.1,
                x.base.0,
                x.base.1,
                show_p(Some(x.p)),
                x.call
            );
        }
    }
    for g in r.gates.iter().filter(|g| !g.filtered.is_empty()) {
        render_filtered(&mut s, g);
    }
    let _ = writeln!(
        s,
        "\n## The run\n\nPerformance boots: {} (`{}`), policy {}, QEMU `-seed` {} to {}. Seed 000's programs: {}.",
        if r.gates_only {
            "none (gates only)"
        } else if r.boots.is_empty() {
            "none ran (a gate failed, or the A/B was interrupted); planned as base and treatment alternating"
        } else {
            "base and treatment alternating"
        },
        r.timing,
        r.policy,
        r.seed_base,
        seed_of(r.seed_base, r.size.boots.saturating_sub(1)),
        r.userspace.describe()
    );
    if !r.trust.is_empty() {
        let _ = writeln!(s, "\nHow far the timing model is to be trusted (generated from `freeze/`):\n");
        for l in &r.trust {
            let _ = writeln!(s, "{l}");
        }
    }
    if !r.rows.is_empty() {
        let _ = writeln!(
            s,
            "\n## Performance: seed workloads, {} boots per arm alternating, {} repetition(s) per boot\n",
            r.size.boots, r.size.reps
        );
        let _ = writeln!(
            s,
            "Median [95% CI]; the change's interval resamples pairs of boots with the same `-seed` (where at least {} \
             pairs are valid), else each arm's boots on their own, then the repetitions in them. Direction at 95%: a \
             change beyond ±{}% whose CI excludes 0; no change when the whole CI lies within ±{}%. **Verdict rows** \
             (primary, declared in advance): a one-sided permutation test on the boots' medians, Holm over the {} \
             primary rows at a family-wise {}; a primary row fails the A/B when it is significantly worse and worse by \
             more than {}%, and the performance verdict is inconclusive when a primary row could not have detected a \
             change of that size (MDC: the smallest change detectable with {}% power at these boots). The other rows \
             are exploratory.\n",
            table::MIN_SAMPLES,
            table::DEAD_BAND_PCT,
            table::DEAD_BAND_PCT,
            PRIMARY.len(),
            ALPHA,
            r.threshold,
            (POWER * 100.0) as u32
        );
        if let Some((med, lo, hi, n)) = r.pairing {
            let _ = writeln!(
                s,
                "Pairing by seed: the change's interval is {:.0}% of the unpaired one's width (median over {n} rows; \
                 {:.0}% to {:.0}%).\n",
                med * 100.0,
                lo * 100.0,
                hi * 100.0
            );
        }
        let has_expect = r.rows.iter().any(|x| x.expect.is_some());
        let _ = write!(s, "| metric | base | treatment | Δ% [CI] | direction | verdict row | p (worse) | MDC |");
        let _ = writeln!(s, "{}", if has_expect { " claimed | mark |" } else { "" });
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- |{}",
            if has_expect { " --- | --- |" } else { "" }
        );
        for x in r.rows.iter().filter(|x| x.primary).chain(r.rows.iter().filter(|x| !x.primary)) {
            let mdc = match x.mdc_pct {
                Some(m) => format!("{m:.1}%"),
                None if x.p_worse.is_some() => "none".into(),
                None => "".into(),
            };
            let _ = write!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {mdc} |",
                x.metric,
                show(x.base, &x.metric),
                show(x.treatment, &x.metric),
                table::show_delta(x.delta_pct),
                x.verdict,
                x.judgement.show(x.mdc_pct),
                show_p(x.p_worse)
            );
            if has_expect {
                let _ = match &x.expect {
                    Some((mark, c)) => write!(s, " {c:+.1}% | {mark} |"),
                    None => write!(s, " | |"),
                };
            }
            let _ = writeln!(s);
        }
        if has_expect {
            let _ = writeln!(s, "\n{}", table::LEGEND);
        }
    }
    if let Some(line) = reuse_line(&r.boots) {
        let _ = writeln!(s, "\n{line}");
    }
    if !r.perf_problems.is_empty() {
        let _ = writeln!(s, "\nProblems in the performance runs:\n");
        for p in &r.perf_problems {
            let _ = writeln!(s, "- {p}");
        }
    }
    if !r.profile_text.is_empty() {
        let _ = writeln!(
            s,
            "\n## Kernel instructions per function (binder-throughput -w 2 under icount, per call)\n\n```\n{}```",
            r.profile_text
        );
    }
    let _ = writeln!(s, "\n## Kernels\n\n| role | flavor | key | build wall time |\n| --- | --- | --- | --- |");
    for b in &r.builds {
        let _ = writeln!(s, "| {} | {} | {} | {:.0} s |", b.role, b.flavor, b.key, b.wall_s);
    }
    let _ = writeln!(s, "\nWall time of the whole A/B: {:.0} s.", r.wall_s);
    s
}

/// The KUnit suites a gate left out because they fail on the base, and the gate without them.
fn render_filtered(s: &mut String, g: &Gate) {
    let filter = g.rest.as_ref().map(|r| format!(" (`{}`)", r.filter)).unwrap_or_default();
    let _ = writeln!(
        s,
        "\nKUnit suites that fail on the base, left out of {} on both kernels{filter}:\n\n\
         | suite | module | why |\n| --- | --- | --- |",
        g.name
    );
    for f in &g.filtered {
        let module =
            f.module.as_deref().map_or("none: cannot be left out, runs as before".into(), |m| format!("`{m}`"));
        let _ = writeln!(s, "| {} | {module} | {} |", f.suite, brief(&f.why));
    }
    let rest = match &g.rest {
        None => "None has a module KUnit's filter can name: the gate ran as before.".to_string(),
        Some(r) if r.run_dir.is_none() => "No suite is left to run: the gate judged only what both whole runs printed \
             before the base's failure (the case failures the kernel printed, the crash's signature)."
            .to_string(),
        Some(r) => {
            let run = r.run_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
            let base =
                r.base_run.as_ref().map(|d| format!("; the base without them: `{}`", d.display())).unwrap_or_default();
            let res = if r.ok {
                "pass".to_string()
            } else {
                r.failures.iter().map(|f| brief(f)).collect::<Vec<_>>().join("; ")
            };
            format!("The other suites on the treatment: {res} (`{run}`){base}.")
        }
    };
    let _ = writeln!(s, "\n{rest}");
    if let Some(suite) = g.rest.as_ref().and_then(|r| r.cut_off.as_ref()) {
        let _ = writeln!(
            s,
            "\nThe treatment's whole run ended inside {suite}, which fails on the base (its boots crash or time \
             out there): how it ended is not counted against the patch; what the kernel printed before is compared."
        );
    }
}

/// Which boots took a stored deterministic boot's results, in one sentence.
fn reuse_line(boots: &[BootRec]) -> Option<String> {
    let reused: Vec<String> = boots
        .iter()
        .filter(|b| b.reused.is_some())
        .map(|b| format!("{} boot {} (-seed {})", b.arm, b.boot, b.seed))
        .collect();
    if reused.is_empty() {
        return None;
    }
    Some(format!(
        "Reused, not booted: {} of {} boots took the results of a stored deterministic boot with the same inputs \
         (QEMU, its arguments and seed, kernel, DTB, initramfs; `{}` in their run directories): {}.",
        reused.len(),
        boots.len(),
        crate::harness::boot_cache::REUSED_NOTE,
        reused.join(", ")
    ))
}

/// Rows that get a plot: the throughputs and the inversion workload's high-priority p99.
const PLOTTED: [(&str, &str); 4] = [
    ("throughput.iterations_per_sec", "binder-throughput -w 8: iterations/s"),
    ("throughput-w2.iterations_per_sec", "binder-throughput -w 2: iterations/s"),
    ("inversion.high.p99_ms", "inversion: high-priority p99 (ms)"),
    ("tiers.other.cross_cluster.avg_ms", "tiers, normal class: cross-cluster avg (ms)"),
];

/// ab.md, ab.json, ab.html with the plots, in `out`.
pub fn write(r: &Report, reproducer: &str, out: &Path) -> Result<String> {
    std::fs::create_dir_all(out)?;
    let md = render(r, reproducer);
    std::fs::write(out.join("ab.md"), &md)?;
    std::fs::write(out.join("ab.json"), serde_json::to_string_pretty(r)?)?;
    let mut page = crate::report::html::Page::new();
    page.markdown(&md, out);
    for (i, (metric, title)) in PLOTTED.iter().enumerate() {
        let Some(row) = r.metrics.get(*metric) else { continue };
        let path = out.join(format!("ab-{i}.svg"));
        crate::numbers::plots::bars(&path, &format!("{title}, median and 95% CI"), row, &ARMS)?;
        page.svg(&path);
    }
    let rows = &r.metrics;
    if rows.keys().any(|k| k.starts_with("sendvec.")) {
        let path = out.join("ab-sendvec.svg");
        crate::numbers::plots::sendvec(&path, rows, "time_ns", &ARMS)?;
        page.svg(&path);
    }
    std::fs::write(out.join("ab.html"), page.render(&format!("A/B {}", r.treatment)))?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(value: f64, lo: f64, hi: f64, boots: usize) -> Estimate {
        Estimate { value, lo, hi, n: boots, boots }
    }

    #[test]
    fn verdicts_follow_direction_band_and_sample_count() {
        let m = "throughput.iterations_per_sec";
        assert_eq!(verdict(m, Some(&est(5.0, 2.0, 8.0, 5))), "better");
        assert_eq!(verdict("throughput.p99_ms", Some(&est(5.0, 2.0, 8.0, 5))), "worse");
        assert_eq!(verdict(m, Some(&est(-5.0, -8.0, -2.0, 5))), "worse");
        assert_eq!(verdict(m, Some(&est(0.2, -0.5, 0.9, 5))), "no change");
        // Spans zero but not inside the band: no verdict either way.
        assert_eq!(verdict(m, Some(&est(0.2, -3.0, 3.0, 5))), "unclear");
        assert_eq!(verdict(m, Some(&est(9.0, 5.0, 12.0, 4))), "n/a (too few)");
        assert_eq!(verdict("tiers.fifo.same_core.pct", Some(&est(9.0, 5.0, 12.0, 5))), "up");
        assert_eq!(verdict(m, None), "n/a");
    }

    /// Boot samples: per metric, 5 boots per arm of one value each, `spread` apart in %, the
    /// treatment moved by `shift` %.
    fn boots_of(metrics: &[(&str, f64, f64)], spread: f64) -> BootSamples {
        let mut all = BootSamples::new();
        for (m, base, shift) in metrics {
            let arms = all.entry(m.to_string()).or_default();
            let noise = [0.0, 1.0, -1.0, 0.5, -0.5];
            arms.insert(0, noise.iter().map(|n| vec![base * (1.0 + n * spread / 100.0)]).collect());
            arms.insert(
                1,
                noise.iter().rev().map(|n| vec![base * (1.0 + shift / 100.0) * (1.0 + n * spread / 100.0)]).collect(),
            );
        }
        all
    }

    #[test]
    fn primary_rows_regress_beyond_the_threshold_and_carry_expect_marks() {
        let s = boots_of(
            &[
                ("throughput.iterations_per_sec", 4000.0, -3.0),
                ("throughput.avg_ms", 1.8, 8.0),
                ("throughput-w2.iterations_per_sec", 4500.0, 0.0),
                ("throughput-w2.avg_ms", 0.4, 0.0),
                ("throughput.p99_exact_ms", 9.0, 20.0),
                ("throughput.p99_bucket_ms", 9.0, 20.0),
            ],
            1.0,
        );
        let expect: BTreeMap<String, f64> =
            [("throughput.iterations_per_sec".to_string(), 12.7), ("throughput.p99_ms".to_string(), -4.8)].into();
        let r = perf_rows(&s, 5.0, &expect);
        let get = |m: &str| r.iter().find(|x| x.metric == m).unwrap();
        let t = get("throughput.iterations_per_sec");
        // 3% worse, significant, but within a 5% threshold: not a regression.
        assert_eq!((t.verdict.as_str(), t.regressed, t.judgement), ("worse", false, Judgement::Pass));
        assert_eq!(t.p_worse, Some(1.0 / 252.0));
        assert_eq!(t.expect, Some(("✗".to_string(), 12.7)));
        let a = get("throughput.avg_ms");
        assert_eq!((a.regressed, a.judgement), (true, Judgement::Regressed));
        assert!(a.mdc_pct.unwrap() < 5.0, "{:?}", a.mdc_pct);
        // 20% worse, but exploratory: shown, never a regression.
        let p99 = get("throughput.p99_exact_ms");
        assert_eq!((p99.verdict.as_str(), p99.regressed, p99.judgement), ("worse", false, Judgement::Exploratory));
        // The seed's p99 claim is in its program's buckets: its mark goes on the bucket row.
        assert_eq!(
            (p99.expect.as_ref(), get("throughput.p99_bucket_ms").expect.as_ref().map(|e| e.1)),
            (None, Some(-4.8))
        );
        assert_eq!(get("throughput-w2.avg_ms").judgement, Judgement::Pass);
        assert!(r.iter().all(|x| x.boots == [5, 5] && x.paired));
        // The same rows with 20% spread between boots cannot detect 5%: inconclusive rows.
        let wide = perf_rows(&boots_of(&[("throughput-w2.avg_ms", 0.4, 0.0)], 20.0), 5.0, &BTreeMap::new());
        assert_eq!(wide[0].judgement, Judgement::Underpowered, "{:?}", wide[0].mdc_pct);
    }

    #[test]
    fn expect_reads_the_seeds_file_shape() {
        let e = load_expect(&paths::repo().join("lab/seeds.toml")).unwrap();
        // Seed 001's rows come after seed 000's in the file and win for the metrics both name.
        let t = e["throughput.iterations_per_sec"];
        assert!((t - table::pct(43000.0, 81500.0)).abs() < 1e-9, "{t}");
        assert!(e.contains_key("tiers.other.cross_cluster.avg_ms"), "{e:?}");
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("r.toml"), "[[rows]]\nmetric = \"a_ms\"\nbefore = [1, 3]\nafter = [0.5, 1.5]\n")
            .unwrap();
        assert_eq!(load_expect(&d.path().join("r.toml")).unwrap()["a_ms"], -50.0);
        std::fs::write(d.path().join("x.toml"), "[[rows]]\nname = \"x\"\n").unwrap();
        let err = load_expect(&d.path().join("x.toml")).unwrap_err().to_string();
        assert!(err.contains("no rows with `metric`"), "{err}");
    }

    fn gate(name: &str, ok: bool, failures: &[&str], base_failures: &[&str]) -> Gate {
        let failures: Vec<String> = failures.iter().map(|f| f.to_string()).collect();
        let base_failures: Vec<String> = base_failures.iter().map(|f| f.to_string()).collect();
        Gate {
            name: name.into(),
            flavor: "perf+ab-0123456789ab".into(),
            run_dir: "/runs/x".into(),
            ok,
            problems: if ok { vec![] } else { vec!["kernel splat (warning):\n[ 5.6] WARNING: x | y".into()] },
            excerpt: if ok { String::new() } else { "warning (console line 12):\n[ 5.6] WARNING: x".into() },
            blamed: if ok { vec![] } else { blame(&failures, &base_failures, &[]) },
            failures,
            base_run: None,
            base_failures,
            reruns: vec![],
            filtered: vec![],
            rest: None,
        }
    }

    fn boot(arm: &str, b: usize, fault: Option<&str>) -> BootRec {
        BootRec {
            arm: arm.into(),
            boot: b,
            seed: b as u32,
            run_dir: "/runs/x".into(),
            wall_s: 1.0,
            reused: None,
            fault: fault.map(str::to_string),
            problems: fault
                .map(|f| vec![format!("guest kernel panic ({f}):\nKernel panic - not syncing: x")])
                .unwrap_or_default(),
            excerpt: if fault.is_some() {
                "panic (console line 40):\n[ 9.1] Kernel panic - not syncing: x".into()
            } else {
                String::new()
            },
        }
    }

    fn report(gates: Vec<Gate>, boots: Vec<BootRec>, rows: Vec<PerfRow>) -> Report {
        let perf = if boots.is_empty() { Perf::NotAsked } else { Perf::Ran };
        let (verdict, reasons) = decide(&gates, &boots, &rows, perf);
        Report {
            base: "perf".into(),
            treatment: "perf+ab-0123456789ab".into(),
            patches: vec!["a.patch".into()],
            profile: Profile::Quick,
            size: Size::of(Profile::Quick),
            timing: "--qemu system --tcg icount".into(),
            userspace: Userspace::Ports,
            policy: "phone".into(),
            seed_base: 1,
            gates_only: boots.is_empty(),
            builds: vec![],
            gates,
            boots,
            pairing: pairing_gain(&rows),
            rows,
            perf_problems: vec![],
            functions: vec![],
            threshold: 5.0,
            verdict,
            reasons,
            trust: vec![],
            wall_s: 1.0,
            profile_text: String::new(),
            metrics: BTreeMap::new(),
        }
    }

    #[test]
    fn a_failed_gate_comes_first_with_its_console_and_one_table_line() {
        let sig = "warning: WARNING: CPU: N PID: N at drivers/android/binder/process.rs:N version";
        let r = report(
            vec![
                gate("conformance-perf", false, &[sig], &[]),
                // The base panics in the same KUnit suite the same way: not the patch's.
                gate(
                    "kunit-debug",
                    false,
                    &["panic: Kernel panic - not syncing: x"],
                    &["panic: Kernel panic - not syncing: x"],
                ),
            ],
            vec![],
            vec![],
        );
        assert_eq!(r.verdict, AbVerdict::Failed);
        let md = render(&r, "cargo make ab --patch a.patch");
        assert!(md.starts_with("# A/B: perf+ab-0123456789ab against perf\n\n**Verdict: failed**\n"), "{md}");
        let first = md.find("## FAILED gate conformance-perf").expect(&md);
        assert!(first < md.find("## Gates on the treatment").unwrap(), "{md}");
        assert!(md.contains("```\nwarning (console line 12):"), "{md}");
        assert!(!md.contains("## FAILED gate kunit-debug"), "{md}");
        let rows: Vec<&str> =
            md.lines().filter(|l| l.starts_with("| conformance-perf") || l.starts_with("| kunit")).collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(rows[0].contains("**FAIL**: warning: WARNING") && rows[0].ends_with("`/runs/x` |"), "{md}");
        assert!(rows[1].contains("not the patch's"), "{md}");
    }

    #[test]
    fn the_base_excuses_only_the_same_failure() {
        let warn_a = "warning: WARNING: CPU: N PID: N at drivers/android/binder/process.rs:N version";
        let warn_b = "warning: WARNING: CPU: N PID: N at drivers/android/binder/thread.rs:N reply";
        // Another splat on the base is no excuse; nor is a timeout for a splat.
        assert_eq!(blame(&[warn_a.into()], &[warn_b.into()], &[]), [warn_a]);
        assert_eq!(blame(&[warn_a.into()], &["timeout in boot".into()], &[]), [warn_a]);
        assert!(blame(&[warn_a.into()], &[warn_b.into(), warn_a.into()], &[]).is_empty());
        // A case failure with re-runs goes by their call, whatever the base's one run said.
        let rerun = |call: &str| Rerun {
            case: "thread_pool".into(),
            treatment: (0, 20),
            base: (0, 20),
            p: 1.0,
            call: call.into(),
            run_dirs: vec![],
        };
        assert!(blame(&["case thread_pool".into()], &[], &[rerun("flake")]).is_empty());
        assert_eq!(
            blame(&["case thread_pool".into()], &["case thread_pool".into()], &[rerun("regression")]),
            ["case thread_pool"]
        );
        assert_eq!(blame(&["case leaks".into()], &[], &[rerun("flake")]), ["case leaks"]);
        assert_eq!(
            blame(&["case thread_pool".into()], &[], &[rerun("no result in the re-runs")]),
            ["case thread_pool"]
        );
    }

    #[test]
    fn reruns_tell_a_flake_from_a_regression() {
        assert_eq!(rerun_call((20, 20), (0, 20)).1, "regression");
        assert_eq!(rerun_call((7, 20), (0, 20)).1, "regression");
        assert_eq!(rerun_call((6, 20), (0, 20)).1, "flake", "p = 0.0101 > 0.01");
        assert_eq!(rerun_call((1, 20), (0, 20)).1, "flake");
        assert_eq!(rerun_call((2, 20), (3, 20)).1, "the base fails it too");
        assert_eq!(rerun_call((20, 20), (20, 20)).1, "the base fails it too");
        assert_eq!(rerun_call((0, 0), (0, 20)).1, "no result in the re-runs");
        // The rule's error rates: a flake failing with the same probability q on both kernels
        // is called a regression at most FLAKE_ALPHA of the time (Fisher's test is exact,
        // conditional on the failures' total); a patch that makes the case fail half the time
        // on a base that never fails it is found at least 94% of the time.
        use statrs::distribution::{Binomial, Discrete};
        let n = u64::from(RERUNS);
        let call_p = |qt: f64, qb: f64| -> f64 {
            let (bt, bb) = (Binomial::new(qt, n).unwrap(), Binomial::new(qb, n).unwrap());
            let mut p = 0.0;
            for t in 0..=n {
                for b in 0..=n {
                    if rerun_call((t, n), (b, n)).1 == "regression" {
                        p += bt.pmf(t) * bb.pmf(b);
                    }
                }
            }
            p
        };
        for q in [0.05, 0.2, 0.5, 0.8] {
            assert!(call_p(q, q) <= FLAKE_ALPHA, "flake rate {q}: {}", call_p(q, q));
        }
        assert!(call_p(0.5, 0.0) >= 0.94, "{}", call_p(0.5, 0.0));
        assert!(call_p(1.0, 0.0) > 0.999);
    }

    #[test]
    fn a_crash_in_a_performance_boot_fails_the_ab_and_comes_first() {
        // The treatment's third boot panicked; every row of the other boots is fine.
        let mut boots: Vec<BootRec> =
            (1..=5).flat_map(|b| [boot("base", b, None), boot("treatment", b, None)]).collect();
        boots[5] = boot("treatment", 3, Some("crash"));
        let r = report(vec![gate("conformance-perf", true, &[], &[])], boots, vec![]);
        assert_eq!(r.verdict, AbVerdict::Failed);
        assert_eq!(r.verdict.exit().code(), 1);
        assert!(r.reasons[0].starts_with("crash in treatment boot 3 (-seed 3): guest kernel panic"), "{:?}", r.reasons);
        let md = render(&r, "x");
        let crash = md.find("## crash in treatment boot 3 (-seed 3)").expect(&md);
        assert!(crash < md.find("## Gates on the treatment").unwrap(), "{md}");
        assert!(md.contains("```\npanic (console line 40):"), "{md}");
        // The same crash in a base boot only makes that boot invalid: then too few valid boots.
        let mut boots: Vec<BootRec> =
            (1..=5).flat_map(|b| [boot("base", b, None), boot("treatment", b, None)]).collect();
        boots[4] = boot("base", 3, Some("crash"));
        let r = report(vec![], boots, vec![]);
        assert_eq!(r.verdict, AbVerdict::Inconclusive, "{:?}", r.reasons);
        assert!(r.reasons[0].starts_with("4 valid base boot(s) of 5"), "{:?}", r.reasons);
        assert!(render(&r, "x").contains("## crash in base boot 3 (-seed 3) (not counted against the patch"));
        // A harness fault in a treatment boot is not the patch's either.
        let mut boots: Vec<BootRec> =
            (1..=5).flat_map(|b| [boot("base", b, None), boot("treatment", b, None)]).collect();
        boots[1] = boot("treatment", 1, Some(HARNESS_FAULT));
        assert_eq!(report(vec![], boots, vec![]).verdict, AbVerdict::Inconclusive);
    }

    #[test]
    fn verdicts_and_their_exit_codes() {
        let clean: Vec<BootRec> = (1..=5).flat_map(|b| [boot("base", b, None), boot("treatment", b, None)]).collect();
        let all_primary: Vec<(&str, f64, f64)> = PRIMARY.iter().map(|m| (*m, 100.0, 0.0)).collect();
        let rows = perf_rows(&boots_of(&all_primary, 1.0), 5.0, &BTreeMap::new());
        let r = report(vec![gate("g", true, &[], &[])], clean.clone(), rows);
        assert_eq!((r.verdict, r.verdict.exit().code()), (AbVerdict::Passed, 0), "{:?}", r.reasons);
        // A primary row missing: not judged, so no pass.
        let rows = perf_rows(&boots_of(&all_primary[..3], 1.0), 5.0, &BTreeMap::new());
        let r = report(vec![], clean.clone(), rows);
        assert_eq!((r.verdict, r.verdict.exit().code()), (AbVerdict::Inconclusive, 204));
        assert_eq!(r.reasons, ["primary row throughput-w2.avg_ms: no values"]);
        // Gates only: the gates decide.
        let r = report(vec![gate("g", true, &[], &[])], vec![], vec![]);
        assert_eq!(r.verdict, AbVerdict::Passed);
        assert!(render(&r, "x").contains("Performance boots: none (gates only)"));
        let r = Report { gates_only: false, ..report(vec![gate("g", false, &["case x"], &[])], vec![], vec![]) };
        assert!(render(&r, "x").contains("Performance boots: none ran (a gate failed"), "{}", render(&r, "x"));
        // Pairing's gain is stated.
        let rows = perf_rows(&boots_of(&all_primary, 1.0), 5.0, &BTreeMap::new());
        let md = render(&report(vec![], clean, rows), "x");
        assert!(md.contains("Pairing by seed: the change's interval is"), "{md}");
    }

    /// Synthetic A/A and A/B runs of the primary rows: 5 boots per arm, each boot's value
    /// log-normal with `sd` (a fraction), a seed effect shared by the pair with `seed_sd`, the
    /// treatment moved by `shift` (a fraction) on `row`. Returns whether the verdict failed.
    fn simulate(
        rng: &mut rand_chacha::ChaCha12Rng,
        sd: f64,
        seed_sd: f64,
        shift: f64,
        row: usize,
        threshold: f64,
    ) -> bool {
        use rand::Rng;
        let mut normal = || {
            let (u, v): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        };
        let tests: Vec<(Option<f64>, Option<f64>)> = PRIMARY
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (mut b, mut t) = (vec![], vec![]);
                for _ in 0..5 {
                    let seed = seed_sd * normal();
                    b.push(100.0 * (seed + sd * normal()).exp());
                    let moved = if i == row { worse_by(m, shift) } else { 1.0 };
                    t.push(100.0 * moved * (seed + sd * normal()).exp());
                }
                let (lb, lt) = (worse_logs(m, &b).unwrap(), worse_logs(m, &t).unwrap());
                let d =
                    table::pct(crate::numbers::stats::median(&b).unwrap(), crate::numbers::stats::median(&t).unwrap());
                (crate::numbers::stats::perm_p_greater(&lb, &lt), Some(d))
            })
            .collect();
        regressions(&tests, threshold).iter().any(|r| *r)
    }

    /// The factor that makes `metric` worse by `shift` (a fraction).
    fn worse_by(metric: &str, shift: f64) -> f64 {
        match better(metric) {
            Some(crate::numbers::gate::Better::Higher) => 1.0 / (1.0 + shift),
            _ => 1.0 + shift,
        }
    }

    #[test]
    fn the_design_bounds_false_alarms_and_has_power() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(35);
        let runs = 2000;
        let rate = |rng: &mut rand_chacha::ChaCha12Rng, seed_sd: f64, shift: f64, threshold: f64| {
            (0..runs).filter(|_| simulate(rng, 0.01, seed_sd, shift, 1, threshold)).count() as f64 / runs as f64
        };
        // A/A: the family-wise rate of a failed verdict, with no threshold at all (Holm's
        // bound alone), boots independent (the hardest case: a seed effect shared by the pair
        // only makes the unpaired test more cautious), and with the default 5% threshold.
        let aa0 = rate(&mut rng, 0.0, 0.0, 0.0);
        assert!(aa0 <= ALPHA, "A/A failed {aa0} of the time with no threshold");
        assert!(rate(&mut rng, 0.02, 0.0, 0.0) <= aa0);
        assert_eq!(rate(&mut rng, 0.02, 0.0, 5.0), 0.0);
        // A/B: 10% worse on one row (1% noise per boot) fails nearly always; 7%, near the 5%
        // threshold, in at least 9 of 10 runs.
        assert!(rate(&mut rng, 0.02, 0.10, 5.0) >= 0.99);
        let near = rate(&mut rng, 0.02, 0.07, 5.0);
        assert!(near >= 0.9, "7% regression found {near} of the time");
        // A careless design, Holm over 29 rows two-sided, can never fail at 5 boots per arm:
        // its first step needs p <= 0.05 / 29 / 2 < 1/252.
        assert!(0.05 / 29.0 / 2.0 < crate::numbers::stats::perm_min_p(5, 5));
    }

    #[test]
    fn the_report_names_the_reused_boots() {
        let boot =
            |arm: &str, b: usize, reused: bool| BootRec { reused: reused.then(|| "0123".into()), ..boot(arm, b, None) };
        assert_eq!(reuse_line(&[boot("base", 1, false), boot("treatment", 1, false)]), None);
        let line = reuse_line(&[boot("base", 1, true), boot("treatment", 1, false), boot("base", 2, true)]).unwrap();
        assert!(line.starts_with("Reused, not booted: 2 of 3 boots"), "{line}");
        assert!(line.ends_with(": base boot 1 (-seed 1), base boot 2 (-seed 2)."), "{line}");
    }

    #[test]
    fn boot_timeouts_stretch_with_the_load_per_core() {
        let cores = crate::harness::boots::default_jobs() as f64;
        let per = load_per_core(&format!("{} 3.00 2.00 5/900 1234", 4.0 * cores)).unwrap();
        assert!((per - 4.0).abs() < 1e-9, "{per}");
        assert_eq!(load_per_core("garbage"), None);
        // Never below the floor, and a longer --boot-timeout wins.
        let long = std::time::Duration::from_secs(100_000);
        assert_eq!(boot_timeout(long), long);
        assert!(boot_timeout(std::time::Duration::from_secs(60)) >= MIN_BOOT_TIMEOUT);
    }

    #[test]
    fn allocator_patches_bring_the_zap_race_into_the_debug_gate() {
        let dir = paths::repo().join("c-reference");
        let first = std::fs::read_to_string(dir.join("series")).unwrap();
        let name = first.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty()).unwrap();
        let c_ref = std::fs::read_to_string(dir.join(name.trim())).unwrap();
        let files = touched_files(&c_ref);
        assert!(files.iter().any(|f| f.starts_with("drivers/android/binder_alloc")), "{files:?}");
        assert_eq!(opt_in_cases(&files), ["shrinker_zap_race"]);
        let delay = std::fs::read_to_string(paths::repo().join("tests/data/ab/c-delay.patch")).unwrap();
        assert_eq!(touched_files(&delay), ["drivers/android/binder.c"]);
        assert!(opt_in_cases(&touched_files(&delay)).is_empty());
        let plan = opt_in_plan(&["shrinker_zap_race".to_string()]).unwrap();
        let argv = plan.steps.iter().find(|s| s.argv[0].ends_with("binder-conformance")).unwrap().argv.join(" ");
        assert!(argv.contains("--case shrinker_zap_race") && !argv.contains("--case thread_pool"), "{argv}");
    }

    /// The base's KUnit boot on cbinder-debug, at loglevel 7: the binder_alloc suite crashes
    /// the boot in a case's exit (`BUG_ON(alloc->mapped)` in binder_alloc_deferred_release),
    /// beside a suite of another module that passes and one that shares its module.
    fn base_console() -> Vec<String> {
        "[    7.838178] KTAP version 1
[    7.838253] 1..3
[    7.840000]     KTAP version 1
[    7.840001]     # Subtest: other
[    7.840002]     # module: other_kunit
[    7.840003]     1..1
[    7.840004]     ok 1 a
[    7.840005] ok 1 other
[    7.850000]     KTAP version 1
[    7.850001]     # Subtest: binder_alloc_extra
[    7.850002]     # module: binder_alloc_kunit
[    7.850003]     1..1
[    7.850004]     ok 1 b
[    7.850005] ok 2 binder_alloc_extra
[    7.861918]     KTAP version 1
[    7.862076]     # Subtest: binder_alloc
[    7.864433]     # module: binder_alloc_kunit
[    7.866143]     1..3
[   15.852238] kernel BUG at drivers/android/binder_alloc.c:971!"
            .lines()
            .map(String::from)
            .collect()
    }

    #[test]
    fn kunit_suites_that_fail_on_the_base_are_left_out_and_named() {
        let (planned, f) = failing_suites(&base_console());
        assert_eq!(planned, Some(3));
        let names: Vec<(&str, Option<&str>)> = f.iter().map(|x| (x.suite.as_str(), x.module.as_deref())).collect();
        assert_eq!(
            names,
            [("binder_alloc", Some("binder_alloc_kunit")), ("binder_alloc_extra", Some("binder_alloc_kunit"))]
        );
        assert!(f[0].why.contains("crashed or hung inside it"), "{f:?}");
        assert!(f[1].why.contains("shares module binder_alloc_kunit"), "{f:?}");
        assert_eq!(kunit_filter(&f).as_deref(), Some("kunit.filter=module!=binder_alloc_kunit"));
        // A suite whose cases failed in the kunit step's results, with no crash; one without a
        // module cannot be filtered.
        let mut console = base_console();
        console.truncate(14);
        console.extend(
            [
                "KTAP version 1",
                "1..1",
                "    KTAP version 1",
                "    # Subtest: rust_binder_ctabs",
                "    1..1",
                "    not ok 1 pick",
                "not ok 1 rust_binder_ctabs",
            ]
            .iter()
            .map(|l| format!("[kunit] {l}")),
        );
        let (_, f) = failing_suites(&console);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].suite.as_str(), f[0].module.as_deref()), ("rust_binder_ctabs", None));
        assert_eq!(f[0].why, "fails on the base: rust_binder_ctabs.pick");
        assert_eq!(kunit_filter(&f), None);
        // Nothing fails: nothing is left out.
        console.truncate(14);
        assert!(failing_suites(&console).1.is_empty());
    }

    #[test]
    fn a_kunit_gate_whose_base_crashes_can_still_fail_for_the_patch() {
        let panic = "panic: Kernel panic - not syncing: Oops - BUG: Fatal exception".to_string();
        let crash = vec![panic.clone()];
        let expect = "kunit binder_alloc.binder_alloc_test_init_freelist: EXPECTATION FAILED at drivers/android/tests/binder_alloc_kunit.c:N".to_string();
        // Both boots crash the same way in binder_alloc, and the suite is left out: the
        // treatment's case failure, printed before the crash, is the patch's.
        let rest = KunitRest {
            filter: "kunit.filter=module!=binder_alloc_kunit".into(),
            run_dir: None,
            ok: true,
            failures: vec![],
            base_run: None,
            base_failures: vec![],
            cut_off: None,
        };
        let found = kunit_blame((&[panic.clone(), expect.clone()], &crash), Some(&rest));
        assert_eq!(found, [expect.as_str()]);
        // The same crash alone is the base's.
        assert!(kunit_blame((&crash, &crash), Some(&rest)).is_empty());
        // In the runs without binder_alloc, a case the base passes fails on the treatment.
        let other = KunitRest { ok: false, failures: vec!["case other.a".into()], ..rest.clone() };
        assert_eq!(kunit_blame((&crash, &crash), Some(&other)), ["case other.a"]);
        let both = KunitRest { base_failures: vec!["case other.a".into()], ..other };
        assert!(kunit_blame((&crash, &crash), Some(&both)).is_empty());
        // The base's boots end inside binder_alloc by a BUG or time out in its last case, one
        // or the other: when the treatment's whole run ended inside it, that ending is not the
        // patch's, and what the kernel printed before still is.
        let bug = "bug: Internal error: Oops - BUG: N [#N] SMP".to_string();
        let hang = [
            "hung-task: INFO: task swapper/N:N blocked for more than N seconds.".to_string(),
            "timeout in boot".into(),
        ];
        let kasan = "kasan: BUG: KASAN: slab-use-after-free in binder_alloc_new_buf".to_string();
        let t = [bug.clone(), panic.clone(), expect.clone(), kasan.clone()];
        assert_eq!(kunit_blame((&t, &hang), Some(&rest)), [bug.as_str(), &panic, &expect, &kasan], "not cut off");
        let cut = KunitRest { cut_off: Some("binder_alloc".into()), ..rest };
        assert_eq!(kunit_blame((&t, &hang), Some(&cut)), [expect, kasan]);
        assert!(kunit_blame((&[bug, panic], &hang), Some(&cut)).is_empty());
    }

    #[test]
    fn the_report_names_the_suites_left_out() {
        let (_, filtered) = failing_suites(&base_console());
        let mut g = gate("kunit-cbinder-debug", false, &["panic: x"], &["panic: x"]);
        g.filtered = filtered;
        g.rest = Some(KunitRest {
            filter: kunit_filter(&g.filtered).unwrap(),
            run_dir: Some("/runs/rest".into()),
            ok: true,
            failures: vec![],
            base_run: None,
            base_failures: vec![],
            cut_off: None,
        });
        let md = render(&report(vec![g.clone()], vec![], vec![]), "x");
        assert!(
            md.contains("left out of kunit-cbinder-debug on both kernels (`kunit.filter=module!=binder_alloc_kunit`)"),
            "{md}"
        );
        assert!(
            md.contains("| binder_alloc | `binder_alloc_kunit` | the base's boot crashed or hung inside it |"),
            "{md}"
        );
        assert!(md.contains("The other suites on the treatment: pass (`/runs/rest`)."), "{md}");
        g.rest.as_mut().unwrap().run_dir = None;
        assert!(render(&report(vec![g], vec![], vec![]), "x").contains("No suite is left to run"));
    }

    #[test]
    fn seed_ranges_start_where_asked() {
        assert_eq!((seed_of(1, 0), seed_of(1, 4)), (1, 5), "the default range is the stored boots'");
        assert_eq!((seed_of(101, 0), seed_of(101, 4)), (101, 105));
        assert_eq!(seed_of(u32::MAX, 3), u32::MAX);
    }

    #[test]
    fn workloads_name_their_steps_and_metrics_apart() {
        let plan = bench::interleaved("ab", 1, &jobs(Profile::Quick), &[(1, vec![])]);
        let names: Vec<&str> = plan.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["throughput-m1-r0", "throughput-w2-m1-r0", "tiers-m1-r0", "sendvec-m1-r0", "inversion-m1-r0"]
        );
        assert_eq!(samples::parse_step("throughput-w2-m1-r0"), Some(("throughput-w2", 1)));
    }
}
