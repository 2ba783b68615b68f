//! The nightly (`lab nightly`): everything, into one artifact directory, with one verdict.
//!
//! Kernels perf, debug and cbinder; the conformance suite on each; KUnit and a long fuzz on
//! debug; the CTABS checks; and `reproduce` (the seed-000 benchmarks, seeds 001 and 002).
//! The directory gets every run's console log, manifest, JUnit and TAP, a merged
//! `junit.xml`, `nightly.json` (stages, metrics, comparison), `kcidb.json` and a
//! self-contained `report.html`. It fails on any test failure, kernel splat, panic or hang,
//! and on a metric that is worse than the baseline file by more than the threshold.

use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::{Exit, Outcome};
use crate::harness::qemu;
use crate::kbuild::pin as lock;
use crate::kbuild::{flavor, kernel, tree};
use crate::measure::bench::Profile;
use crate::measure::reproduce;
use crate::numbers::gate::{better, compare, flatten, load_baseline, unit_of, Comparison, Metric, Metrics, Verdict};
use crate::report::nightly::{self as report_nightly, rel, BuildRec, Env, Figure, Night, Page, Stage};
use crate::report::{self, kcidb};
use crate::support::stamp::rfc3339_now;
use crate::support::{paths, progress};
use anyhow::{Context, Result};
use labproto::{Plan, Step};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A kernel of its own (lockdep + KASAN on the C driver with seed 001's patch, ~20 min cold):
/// the full profile only, so the quick nightly in `cargo make test` stays within cold CI's budget.
pub const FULL_ONLY_FLAVOR: &str = "cbinder-spin-debug";
/// Fuzzer operations on cbinder-spin-debug: seed 001's safety check, beside the Rust debug run.
const SPIN_FUZZ_OPS: u64 = 100_000;

#[derive(Clone, Debug)]
pub struct Opts {
    pub profile: Profile,
    pub out: PathBuf,
    pub baseline: Option<PathBuf>,
    /// A gated metric regresses when it is worse than the baseline by more than this (%).
    pub threshold_pct: f64,
    /// Fuzzer operations on the debug kernel.
    pub fuzz_ops: u64,
    /// Options of the test stages (TCG single by default: varied interleavings find more).
    pub base: RunOpts,
    /// TCG mode of the benchmarks (icount by default: repeatable, so the regression gate
    /// sees the code, not the host's load).
    pub measure_tcg: qemu::Tcg,
}

/// Copies a run directory, leaving out the initramfs: it is large, and the manifest records
/// what went into it.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_name() == "initramfs.cpio" {
            continue;
        }
        let dest = to.join(e.file_name());
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else if !kind.is_file() {
            // A socket QEMU left (it crashed) or a link to one: not an artifact.
            continue;
        } else {
            std::fs::copy(e.path(), &dest).with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}

fn fuzz_plan(ops: u64) -> Plan {
    let env = [
        ("BINDER_FUZZ_OPS".to_string(), ops.to_string()),
        // The op budget ends the run; the time limit only guards against a stall.
        ("BINDER_FUZZ_SECONDS".to_string(), (ops / 200 + 600).to_string()),
    ]
    .into();
    let step = Step {
        name: "fuzz".into(),
        argv: vec!["/bin/binder-fuzz".into()],
        timeout_s: ops / 150 + 900,
        env,
        ..Default::default()
    };
    Plan { name: "fuzz-nightly".into(), steps: vec![step], ..Default::default() }
}

/// The nightly's result.
pub struct Nightly {
    pub builds: Vec<BuildRec>,
    pub stages: Vec<Stage>,
    pub reproduce: Option<reproduce::Reproduction>,
    pub reproduce_error: Option<String>,
    pub metrics: Metrics,
    pub comparisons: Vec<Comparison>,
    pub wall_s: f64,
    /// `git describe` of the lab checkout.
    pub lab_commit: String,
    /// kcidb.json failed the schema check (kcidb-io's message).
    pub kcidb_error: Option<String>,
    /// A Ctrl-C or SIGTERM ended the night early.
    pub interrupted: bool,
}

impl Nightly {
    /// What the reports show of the night.
    pub fn night<'a>(&'a self, out: &'a Path) -> Night<'a> {
        Night { builds: &self.builds, stages: &self.stages, out, lab_commit: &self.lab_commit }
    }

    /// The exit code: the worst stage, a harness error for a build, reproduction or KCIDB
    /// failure, a test failure for a regression.
    pub fn exit(&self) -> Exit {
        let stages = self.stages.iter().map(|s| s.result.as_ref().map(Outcome::exit).unwrap_or(Exit::HarnessError));
        let repro = self.reproduce.iter().flat_map(|r| r.outcomes().map(Outcome::exit).collect::<Vec<_>>());
        let harness = self.builds.iter().any(|b| b.error.is_some())
            || self.reproduce_error.is_some()
            || self.kcidb_error.is_some();
        let regressed = self.comparisons.iter().any(|c| c.verdict == Verdict::Regressed);
        stages
            .chain(repro)
            .chain([
                if harness { Exit::HarnessError } else { Exit::Ok },
                if regressed { Exit::TestFailure } else { Exit::Ok },
                if self.interrupted { Exit::Interrupted } else { Exit::Ok },
            ])
            .max()
            .unwrap_or(Exit::Ok)
    }

    /// Every reason to fail, one line each.
    pub fn failures(&self) -> Vec<String> {
        let mut f = vec![];
        if self.interrupted {
            f.push("interrupted (Ctrl-C or SIGTERM): the night ended with the boot it was in".to_string());
        }
        for b in &self.builds {
            if let Some(e) = &b.error {
                f.push(format!("kernel {}: {e}", b.flavor));
            }
        }
        for s in &self.stages {
            f.extend(s.problems().into_iter().map(|p| format!("{}: {}", s.name, first_lines(&p, 3))));
        }
        if let Some(e) = &self.reproduce_error {
            f.push(format!("reproduce: {e}"));
        }
        if let Some(e) = &self.kcidb_error {
            f.push(format!(
                "kcidb.json against KCIDB schema {}.{} ({}): {e}",
                kcidb::VERSION.0,
                kcidb::VERSION.1,
                crate::provision::kcidb_io::KCIDB_IO
            ));
        }
        for c in &self.comparisons {
            if c.verdict == Verdict::Regressed {
                let cur = c.current.as_ref().map(|m| m.value).unwrap_or(f64::NAN);
                f.push(format!(
                    "regression: {} is {:.1}% worse than the baseline ({} -> {})",
                    c.metric,
                    c.worse_pct.unwrap_or(f64::NAN),
                    num(c.baseline),
                    num(cur)
                ));
            }
        }
        f
    }
}

fn first_lines(s: &str, n: usize) -> String {
    s.lines().take(n).collect::<Vec<_>>().join(" | ")
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

/// Runs everything; never stops at the first failure, so one night shows every problem.
pub fn run(opts: &Opts) -> Result<Nightly> {
    let t0 = Instant::now();
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let baseline = opts.baseline.as_deref().map(load_baseline).transpose()?;
    let builds = build_kernels(opts.profile);
    let stages = run_stages(opts)?;
    progress::note(format!("nightly: reproduce ({:?} profile)", opts.profile));
    let rdir = opts.out.join("reproduce");
    let measure = RunOpts { tcg: opts.measure_tcg, ..opts.base.clone() };
    let outcome = if crate::harness::run::interrupted() {
        Err(anyhow::anyhow!("not run: interrupted"))
    } else {
        reproduce::run(opts.profile, &measure, &rdir)
    };
    let (repro, repro_err) = match outcome {
        Ok(r) => {
            for o in r.outcomes() {
                copy_dir(&o.dir, &rdir.join(o.dir.file_name().unwrap_or_default()))?;
            }
            (Some(r), None)
        }
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let metrics = collect_metrics(repro.as_ref(), &stages);
    let comparisons = baseline.map(|b| compare(&b, &metrics, opts.threshold_pct)).unwrap_or_default();
    let mut n = Nightly {
        builds,
        stages,
        reproduce: repro,
        reproduce_error: repro_err,
        metrics,
        comparisons,
        wall_s: t0.elapsed().as_secs_f64(),
        lab_commit: paths::source_commit(),
        kcidb_error: None,
        interrupted: crate::harness::run::interrupted(),
    };
    let lock = lock::Lock::load(&lock::Lock::path())?;
    let kcidb_file = opts.out.join("kcidb.json");
    let series = tree::Series::load(&paths::driver_dir())?;
    let k = report_nightly::kcidb_report(&n.night(&opts.out), &lock.kernel, &series, &env(opts), &figures(&n.metrics))?;
    std::fs::write(&kcidb_file, serde_json::to_string_pretty(&k)?)?;
    n.kcidb_error = check_kcidb(&kcidb_file, || crate::provision::kcidb_io::ensure(&paths::cache()));
    write_artifacts(&n, opts, &lock)?;
    Ok(n)
}

fn build_kernels(profile: Profile) -> Vec<BuildRec> {
    let mut builds = vec![];
    for flavor in flavor::TESTED.into_iter().chain((profile == Profile::Full).then_some(FULL_ONLY_FLAVOR)) {
        progress::note(format!("nightly: kernel {flavor}"));
        let t = Instant::now();
        let r = kernel::build(flavor);
        builds.push(BuildRec {
            flavor: flavor.into(),
            key: r.as_ref().ok().map(|b| b.key.clone()),
            release: r.as_ref().ok().map(|b| b.kernel_release()),
            wall_s: t.elapsed().as_secs_f64(),
            error: r.err().map(|e| format!("{e:#}")),
        });
    }
    builds
}

/// Kernel arguments of a stage beyond the base options. The pinned tree's binder_alloc KUnit
/// suite hits `BUG_ON(alloc->mapped)` in its first case's exit (on cbinder-debug too) and
/// panics the boot before init, so the other stages on that flavor skip KUnit; the kunit
/// stage still runs and reports it.
fn stage_append(flavor: &str, kind: &str) -> Vec<String> {
    if flavor == FULL_ONLY_FLAVOR && kind != "kunit" {
        vec!["kunit.enable=0".into()]
    } else {
        vec![]
    }
}

/// The test stages, each a run whose directory is copied into the artifacts; the notes of a
/// stage carry its name.
fn run_stages(opts: &Opts) -> Result<Vec<Stage>> {
    let load = |name: &str| load_plan(name).map_err(|e| format!("{e:#}"));
    let conformance = load("conformance");
    let mut plans: Vec<(&str, &'static str, &str, std::result::Result<Plan, String>)> = vec![
        ("conformance-perf", "conformance", "perf", conformance.clone()),
        ("conformance-debug", "conformance", "debug", conformance.clone()),
        ("conformance-cbinder", "conformance", "cbinder", conformance),
        ("kunit-debug", "kunit", "debug", load("kunit")),
        ("ctabs-perf", "ctabs", "perf", load("ctabs")),
        ("fuzz-debug", "fuzz", "debug", Ok(fuzz_plan(opts.fuzz_ops))),
    ];
    if opts.profile == Profile::Full {
        // Seed 001's patch under lockdep, DEBUG_ATOMIC_SLEEP and KASAN, with the C allocator's KUnit.
        let d = FULL_ONLY_FLAVOR;
        plans.push(("conformance-cbinder-spin-debug", "conformance", d, load("conformance")));
        plans.push(("kunit-cbinder-spin-debug", "kunit", d, load("kunit")));
        plans.push(("fuzz-cbinder-spin-debug", "fuzz", d, Ok(fuzz_plan(SPIN_FUZZ_OPS.min(opts.fuzz_ops)))));
        // Two third-party stacks through each driver; full only: the first build of
        // rsbinder-tools for the guest takes minutes (then it is cached).
        let thirdparty = load("thirdparty");
        plans.push(("thirdparty-perf", "thirdparty", "perf", thirdparty.clone()));
        plans.push(("thirdparty-cbinder", "thirdparty", "cbinder", thirdparty));
        // Android 14's own binder tests, their classified failures left out per driver; full
        // only: the first build of the AOSP userspace takes minutes (then it is cached).
        for (name, f) in [("aosp-tests-perf", "perf"), ("aosp-tests-debug", "debug"), ("aosp-tests-cbinder", "cbinder")]
        {
            plans.push((name, "aosp-tests", f, load("aosp-tests")));
        }
    }
    let mut stages = vec![];
    for (name, kind, flavor, plan) in plans {
        if crate::harness::run::interrupted() {
            progress::note(format!("nightly: interrupted; {name} and the stages after it are not run"));
            break;
        }
        progress::note(format!("nightly: {name}"));
        let outer =
            progress::set(Arc::new(progress::Prefixed { prefix: format!("[{name}] "), inner: progress::current() }));
        let started = rfc3339_now();
        let mut opts_f = RunOpts { flavor: flavor.into(), ..opts.base.clone() };
        opts_f.append.extend(stage_append(flavor, kind));
        if kind == "ctabs" {
            // The CTABS checks judge the driver's picks against mode 0; the phone's SYNC_EAS
            // also puts mode 0's server on the caller's CPU (90% in CI), so they run mainline's.
            opts_f.policy = Some(board::Policy::Mainline);
        }
        let plan = if kind == "aosp-tests" { plan.and_then(|p| aosp_plan(p, flavor)) } else { plan };
        let result = plan.and_then(|p| report::run_plan_and_report(&p, &opts_f).map_err(|e| format!("{e:#}")));
        progress::set(outer);
        let artifacts = opts.out.join(name);
        if let Ok(o) = &result {
            copy_dir(&o.dir, &artifacts)?;
        }
        stages.push(Stage { name: name.into(), kind, flavor: flavor.into(), started, result, artifacts });
    }
    Ok(stages)
}

/// The `aosp-tests` plan with `flavor`'s known failures left out, each named in a note.
fn aosp_plan(plan: Plan, flavor: &str) -> std::result::Result<Plan, String> {
    let (plan, notes) = crate::harness::gtest::without_known_failures(plan, flavor).map_err(|e| format!("{e:#}"))?;
    for n in notes {
        progress::note(n);
    }
    Ok(plan)
}

/// The reproduction's metrics plus the fuzzer's operations per second.
fn collect_metrics(repro: Option<&reproduce::Reproduction>, stages: &[Stage]) -> Metrics {
    let mut metrics = repro.map(|r| flatten(&r.metrics())).unwrap_or_default();
    for s in stages {
        let Ok(o) = &s.result else { continue };
        if let Some(v) = o.events.iter().find_map(|e| match e {
            labproto::Event::Result { data, .. } => data["ops_per_s"].as_f64(),
            _ => None,
        }) {
            let key = format!("{}.ops_per_s", s.name);
            metrics.insert(key.clone(), Metric { value: v, lo: None, hi: None, better: better(&key) });
        }
    }
    metrics
}

/// The gated metrics as KCIDB figures.
fn figures(metrics: &Metrics) -> Vec<Figure> {
    metrics
        .iter()
        .filter_map(|(name, m)| {
            let better = m.better?;
            // Seed 001's modes 0 and 1 ran on the C driver (mutex, spinlock), the fuzzer on
            // debug, the rest on perf.
            let flavor = match (name.starts_with("seed001."), name.rsplit('.').next()) {
                (true, Some("m0")) => "cbinder",
                (true, Some("m1")) => "cbinder-spin",
                _ if name.starts_with("fuzz-debug.") => "debug",
                _ => "perf",
            };
            Some(Figure {
                name: name.clone(),
                value: m.value,
                ci95: [m.lo, m.hi],
                unit: unit_of(name),
                better: format!("{better:?}").to_lowercase(),
                flavor,
            })
        })
        .collect()
}

fn env(opts: &Opts) -> Env {
    Env {
        qemu: qemu::version().unwrap_or_default(),
        board: opts.base.board.clone(),
        tcg: format!("{:?}", opts.base.tcg).to_lowercase(),
        benchmark_tcg: format!("{:?}", opts.measure_tcg).to_lowercase(),
        compiler: format!(
            "clang{} + rustc {}",
            crate::provision::toolchain::LLVM_SUFFIX,
            crate::provision::toolchain::rustc_version().unwrap_or_default()
        ),
    }
}

/// Seed 000's wake-up placement section (a `--trace` night), or why it is missing.
fn placement(run: &Path, opts: &Opts) -> Option<String> {
    let b = &opts.base;
    let section = crate::harness::opts::load_board_file(&b.board, b.smp, b.memory.as_deref())
        .and_then(|(board, _)| crate::measure::placement::section(run, &board));
    section.unwrap_or_else(|e| Some(format!("## Where woken server threads ran\n\nnot shown: {e:#}\n")))
}

/// The HTML report's header, gate rows and reproduction.
fn page<'a>(n: &'a Nightly, opts: &Opts, failures: &'a [String]) -> Page<'a> {
    let header = format!(
        "{} profile, {:.1} min, lab {}; tests under TCG {:?}, benchmarks under TCG {:?}; fuzz budget {} operations on debug; threshold {}%{}.",
        format!("{:?}", opts.profile).to_lowercase(),
        n.wall_s / 60.0,
        n.lab_commit,
        opts.base.tcg,
        opts.measure_tcg,
        opts.fuzz_ops,
        opts.threshold_pct,
        opts.baseline.as_ref().map(|b| format!(", baseline {}", b.display())).unwrap_or_default()
    );
    let rows = n
        .comparisons
        .iter()
        .filter(|c| c.verdict != Verdict::Ok)
        .map(|c| {
            vec![
                c.metric.clone(),
                num(c.baseline),
                c.current.as_ref().map(|m| num(m.value)).unwrap_or("missing".into()),
                c.worse_pct.map(|w| format!("{w:+.1}% worse")).unwrap_or_default(),
                match &c.verdict {
                    Verdict::Regressed => "FAIL: regressed".into(),
                    v => format!("{v:?}").to_lowercase(),
                },
            ]
        })
        .collect();
    let ok = n.comparisons.iter().filter(|c| c.verdict == Verdict::Ok).count();
    Page {
        header,
        failures,
        gate: (!n.comparisons.is_empty()).then_some((ok, rows)),
        reproduce: n
            .reproduce
            .as_ref()
            .map(|r| (r.text.as_str(), opts.out.join("reproduce"), r.seed000.outcomes.first().map(|o| o.dir.clone()))),
        reproduce_error: n.reproduce_error.as_deref(),
        placement: n.reproduce.as_ref().and_then(|r| r.seed000.outcomes.first()).and_then(|o| placement(&o.dir, opts)),
    }
}

#[derive(Serialize)]
struct StageJson<'a> {
    name: &'a str,
    flavor: &'a str,
    ok: bool,
    problems: Vec<String>,
    passed: usize,
    failed: usize,
    skipped: usize,
    wall_s: Option<f64>,
    artifacts: String,
}

#[derive(Serialize)]
struct NightlyJson<'a> {
    schema: &'static str,
    finished: String,
    wall_s: f64,
    ok: bool,
    failures: Vec<String>,
    profile: Profile,
    threshold_pct: f64,
    baseline: Option<String>,
    lab_commit: String,
    kernel: &'a lock::KernelPin,
    builds: &'a [BuildRec],
    stages: Vec<StageJson<'a>>,
    metrics: &'a Metrics,
    comparisons: &'a [Comparison],
}

fn write_artifacts(n: &Nightly, opts: &Opts, lock: &lock::Lock) -> Result<()> {
    let failures = n.failures();
    let stages: Vec<StageJson> = n
        .stages
        .iter()
        .map(|s| {
            let (passed, failed, skipped) = s.case_counts();
            let problems = s.problems();
            StageJson {
                name: &s.name,
                flavor: &s.flavor,
                ok: problems.is_empty(),
                problems,
                passed,
                failed,
                skipped,
                wall_s: s.result.as_ref().ok().map(|o| o.wall_s),
                artifacts: rel(&s.artifacts, &opts.out),
            }
        })
        .collect();
    let j = NightlyJson {
        schema: "binder-lab-nightly/1",
        finished: rfc3339_now(),
        wall_s: n.wall_s,
        ok: failures.is_empty(),
        failures: failures.clone(),
        profile: opts.profile,
        threshold_pct: opts.threshold_pct,
        baseline: opts.baseline.as_ref().map(|p| p.display().to_string()),
        lab_commit: n.lab_commit.clone(),
        kernel: &lock.kernel,
        builds: &n.builds,
        stages,
        metrics: &n.metrics,
        comparisons: &n.comparisons,
    };
    std::fs::write(opts.out.join("nightly.json"), serde_json::to_string_pretty(&j)?)?;

    let mut runs: Vec<(&str, &Outcome)> =
        n.stages.iter().filter_map(|s| s.result.as_ref().ok().map(|o| (s.name.as_str(), o))).collect();
    if let Some(r) = &n.reproduce {
        runs.extend(r.outcomes().map(|o| ("reproduce", o)));
    }
    std::fs::write(opts.out.join("junit.xml"), report::junit_merged("binder-lab nightly", &runs))?;
    std::fs::write(
        opts.out.join("report.html"),
        report_nightly::html_report(&n.night(&opts.out), &page(n, opts, &failures)),
    )?;
    Ok(())
}

/// kcidb-io, the schema's reference implementation, in a private venv in the cache.
/// Validates `kcidb.json` with kcidb-io (installed by setup, or now); the error says why the
/// file is invalid, or why it could not be validated: a report that was not checked fails
/// the night like one that is wrong.
pub fn check_kcidb(file: &Path, validator: impl FnOnce() -> Result<PathBuf>) -> Option<String> {
    let py = match validator() {
        Ok(py) => py,
        Err(e) => return Some(format!("not validated: {e:#}")),
    };
    kcidb::validate(&py, file).err()
}

/// The summary printed at the end.
pub fn summary(n: &Nightly, out: &Path) -> String {
    let mut s = String::new();
    for st in &n.stages {
        let (ok, failed, skipped) = st.case_counts();
        let v = if st.problems().is_empty() { "PASS" } else { "FAIL" };
        let _ = writeln!(s, "{v}  {:<22} {ok} passed, {failed} failed, {skipped} skipped", st.name);
    }
    let gated = n.comparisons.len();
    if gated > 0 {
        let reg = n.comparisons.iter().filter(|c| c.verdict == Verdict::Regressed).count();
        let _ = writeln!(s, "baseline: {gated} gated metrics compared, {reg} regressed");
    }
    let failures = n.failures();
    for f in &failures {
        let _ = writeln!(s, "FAILED {f}");
    }
    let _ = writeln!(
        s,
        "nightly: {} in {:.1} min; artifacts in {} (report.html, nightly.json, junit.xml, kcidb.json)",
        if failures.is_empty() { "passed" } else { "FAILED" },
        n.wall_s / 60.0,
        out.display()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kunit_stage_of_cbinder_spin_debug_runs_kunit() {
        assert_eq!(stage_append(FULL_ONLY_FLAVOR, "conformance"), ["kunit.enable=0"]);
        assert_eq!(stage_append(FULL_ONLY_FLAVOR, "fuzz"), ["kunit.enable=0"]);
        assert!(stage_append(FULL_ONLY_FLAVOR, "kunit").is_empty());
        assert!(stage_append("debug", "conformance").is_empty());
    }

    #[test]
    fn an_interrupted_night_exits_130_and_says_so() {
        let mut n = Nightly {
            builds: vec![],
            stages: vec![],
            reproduce: None,
            reproduce_error: None,
            metrics: Metrics::new(),
            comparisons: vec![],
            wall_s: 0.0,
            lab_commit: String::new(),
            kcidb_error: None,
            interrupted: false,
        };
        assert_eq!((n.exit(), n.failures().len()), (Exit::Ok, 0));
        // Interrupted during reproduce: its error alone would say "harness error" (203).
        n.reproduce_error = Some("not run: interrupted".into());
        n.interrupted = true;
        assert_eq!(n.exit(), Exit::Interrupted);
        assert!(n.failures()[0].starts_with("interrupted"), "{:?}", n.failures());
    }

    #[test]
    fn kcidb_that_was_not_validated_fails_the_night() {
        let f = std::path::Path::new("/nonexistent/kcidb.json");
        let e = check_kcidb(f, || anyhow::bail!("pip: no network")).expect("a failure");
        assert!(e.starts_with("not validated: pip: no network"), "{e}");
        let e = check_kcidb(f, || Ok("/nonexistent/python3".into())).expect("a failure");
        assert!(e.contains("/nonexistent/python3"), "{e}");
    }

    #[test]
    fn fuzz_plan_budget() {
        let p = fuzz_plan(1_000_000);
        assert_eq!(p.steps[0].env["BINDER_FUZZ_OPS"], "1000000");
        assert!(p.steps[0].timeout_s > 3600);
    }
}
