//! `lab nightly`: everything, into one artifact directory, with one verdict.
//!
//! Kernels perf, debug and cbinder; the conformance suite on each; KUnit and a long fuzz on
//! debug; the CTABS checks; and `reproduce` (the seed-000 benchmarks, seeds 001 and 002).
//! The directory gets every run's console log, manifest, JUnit and TAP, a merged
//! `junit.xml`, `nightly.json` (stages, metrics, comparison), `kcidb.json` and a
//! self-contained `report.html`. It fails on any test failure, kernel splat, panic or hang,
//! and on a metric that is worse than the baseline file by more than the threshold.

use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::Outcome;
use crate::harness::qemu;
use crate::kbuild::pin as lock;
use crate::kbuild::{kernel, tree};
use crate::measure::bench::Profile;
use crate::measure::reproduce;
use crate::measure::samples::Row;
use crate::report::{self, html, kcidb};
use crate::support::fs::sha256_file;
use crate::support::paths;
use crate::support::stamp::{rfc3339_now, utc_stamp};
use anyhow::{Context, Result};
use labproto::{Plan, Step};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const FLAVORS: [&str; 3] = ["perf", "debug", "cbinder"];

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

/// One kernel build.
#[derive(Clone, Debug, Serialize)]
pub struct BuildRec {
    pub flavor: String,
    pub key: Option<String>,
    pub release: Option<String>,
    pub wall_s: f64,
    pub error: Option<String>,
}

/// One guest run of the nightly, and where its files were copied.
pub struct Stage {
    pub name: String,
    pub kind: &'static str,
    pub flavor: String,
    pub started: String,
    pub result: std::result::Result<Outcome, String>,
    pub artifacts: PathBuf,
}

impl Stage {
    pub fn problems(&self) -> Vec<String> {
        match &self.result {
            Ok(o) => o.problems(),
            Err(e) => vec![format!("did not run: {e}")],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

/// `seed000.throughput.avg_ms` of `seed000.throughput.avg_ms.m1`.
fn without_mode(metric: &str) -> &str {
    metric.rsplit_once(".m").map(|(m, _)| m).unwrap_or(metric)
}

/// Which metrics gate, and which way is better. Tier latencies, shares and counters are
/// reported but not gated: their spread under TCG is too wide for a fixed threshold.
pub fn better(metric: &str) -> Option<Better> {
    let m = without_mode(metric);
    if m.ends_with("iterations_per_sec") || m.ends_with("ops_per_s") {
        return Some(Better::Higher);
    }
    let latency = ["throughput.avg_ms", "throughput.p50_ms", "throughput.p99_ms"].iter().any(|s| m.ends_with(s));
    let sendvec = m.contains(".sendvec.") && (m.ends_with(".time_ns") || m.ends_with(".cpu_ns"));
    (latency || sendvec).then_some(Better::Lower)
}

/// A metric's value in `nightly.json`; `lo`/`hi` are the 95% CI when there is one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Metric {
    pub value: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better: Option<Better>,
}

pub type Metrics = BTreeMap<String, Metric>;

/// `seed000.throughput.iterations_per_sec.m0` for each mode of each row.
pub fn flatten(rows: &BTreeMap<String, Row>) -> Metrics {
    let mut out = Metrics::new();
    for (name, row) in rows {
        for (mode, e) in &row.per_mode {
            let key = format!("{name}.m{mode}");
            let better = better(&key);
            out.insert(key, Metric { value: e.value, lo: Some(e.lo), hi: Some(e.hi), better });
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Improved,
    Regressed,
    /// In the baseline, not in this run.
    Missing,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub metric: String,
    pub baseline: f64,
    pub current: Option<Metric>,
    /// Positive is worse, in %.
    pub worse_pct: Option<f64>,
    pub verdict: Verdict,
}

/// Compares the gated metrics. A metric regresses when it is worse than the baseline by more
/// than `threshold_pct` and the baseline value lies outside this run's 95% CI (so one noisy
/// run alone does not fail the night).
pub fn compare(baseline: &Metrics, current: &Metrics, threshold_pct: f64) -> Vec<Comparison> {
    let mut out = vec![];
    for (name, b) in baseline {
        let Some(dir) = better(name) else { continue };
        let Some(c) = current.get(name) else {
            out.push(Comparison {
                metric: name.clone(),
                baseline: b.value,
                current: None,
                worse_pct: None,
                verdict: Verdict::Missing,
            });
            continue;
        };
        if b.value == 0.0 || !b.value.is_finite() {
            continue;
        }
        let change = (c.value - b.value) / b.value * 100.0;
        let worse = if dir == Better::Higher { -change } else { change };
        let outside = match (c.lo, c.hi) {
            (Some(lo), Some(hi)) => b.value < lo || b.value > hi,
            _ => true,
        };
        let verdict = if worse > threshold_pct && outside {
            Verdict::Regressed
        } else if worse < -threshold_pct && outside {
            Verdict::Improved
        } else {
            Verdict::Ok
        };
        out.push(Comparison {
            metric: name.clone(),
            baseline: b.value,
            current: Some(c.clone()),
            worse_pct: Some(worse),
            verdict,
        });
    }
    out
}

/// Reads the metrics of a baseline: a previous `nightly.json`, or any JSON object with a
/// `metrics` map of `{"value": ...}`.
pub fn load_baseline(path: &Path) -> Result<Metrics> {
    #[derive(Deserialize)]
    struct File {
        metrics: Metrics,
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the baseline {}: give a previous nightly.json", path.display()))?;
    let f: File = serde_json::from_str(&text).with_context(|| {
        format!("{} is not a baseline: it needs {{\"metrics\": {{\"<name>\": {{\"value\": <number>}}}}}}, as in nightly.json", path.display())
    })?;
    Ok(f.metrics)
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
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
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
    let step = Step { name: "fuzz".into(), argv: vec!["/bin/binder-fuzz".into()], timeout_s: ops / 150 + 900, env };
    Plan { name: "fuzz-nightly".into(), steps: vec![step], shell: false }
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
}

impl Nightly {
    /// Every reason to fail, one line each.
    pub fn failures(&self) -> Vec<String> {
        let mut f = vec![];
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
                "kcidb.json does not validate against KCIDB schema {}.{}: {e}",
                kcidb::VERSION.0,
                kcidb::VERSION.1
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

    let mut builds = vec![];
    for flavor in FLAVORS {
        eprintln!("lab nightly: kernel {flavor}");
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

    let fuzz = fuzz_plan(opts.fuzz_ops);
    let load = |name: &str| load_plan(name).map_err(|e| format!("{e:#}"));
    let conformance = load("conformance");
    let plans: Vec<(&str, &'static str, &str, std::result::Result<Plan, String>)> = vec![
        ("conformance-perf", "conformance", "perf", conformance.clone()),
        ("conformance-debug", "conformance", "debug", conformance.clone()),
        ("conformance-cbinder", "conformance", "cbinder", conformance),
        ("kunit-debug", "kunit", "debug", load("kunit")),
        ("ctabs-perf", "ctabs", "perf", load("ctabs")),
        ("fuzz-debug", "fuzz", "debug", Ok(fuzz)),
    ];
    let mut stages = vec![];
    for (name, kind, flavor, plan) in plans {
        eprintln!("lab nightly: {name}");
        let started = rfc3339_now();
        let opts_f = RunOpts { flavor: flavor.into(), ..opts.base.clone() };
        let result = plan.and_then(|p| report::run_plan(&p, &opts_f).map_err(|e| format!("{e:#}")));
        let artifacts = opts.out.join(name);
        if let Ok(o) = &result {
            copy_dir(&o.dir, &artifacts)?;
        }
        stages.push(Stage { name: name.into(), kind, flavor: flavor.into(), started, result, artifacts });
    }

    eprintln!("lab nightly: reproduce ({:?} profile)", opts.profile);
    let rdir = opts.out.join("reproduce");
    let measure = RunOpts { tcg: opts.measure_tcg, ..opts.base.clone() };
    let (repro, repro_err) = match reproduce::run(opts.profile, &measure, &rdir) {
        Ok(r) => {
            for o in r.outcomes() {
                copy_dir(&o.dir, &rdir.join(o.dir.file_name().unwrap_or_default()))?;
            }
            (Some(r), None)
        }
        Err(e) => (None, Some(format!("{e:#}"))),
    };

    let mut metrics = repro.as_ref().map(|r| flatten(&r.metrics())).unwrap_or_default();
    for s in &stages {
        let Ok(o) = &s.result else { continue };
        if let Some(v) = o.events.iter().find_map(|e| match e {
            labproto::Event::Result { data, .. } => data["ops_per_s"].as_f64(),
            _ => None,
        }) {
            let key = format!("{}.ops_per_s", s.name);
            metrics.insert(key.clone(), Metric { value: v, lo: None, hi: None, better: better(&key) });
        }
    }
    let comparisons = baseline.map(|b| compare(&b, &metrics, opts.threshold_pct)).unwrap_or_default();
    let mut n = Nightly {
        builds,
        stages,
        reproduce: repro,
        reproduce_error: repro_err,
        metrics,
        comparisons,
        wall_s: t0.elapsed().as_secs_f64(),
        lab_commit: lab_commit(),
        kcidb_error: None,
    };
    let lock = lock::Lock::load(&lock::Lock::path())?;
    let kcidb_file = opts.out.join("kcidb.json");
    std::fs::write(&kcidb_file, serde_json::to_string_pretty(&kcidb_report(&n, opts, &lock)?)?)?;
    n.kcidb_error = validate_kcidb(&kcidb_file).and_then(|r| r.err());
    write_artifacts(&n, opts, &lock)?;
    Ok(n)
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

fn lab_commit() -> String {
    let out =
        std::process::Command::new("git").current_dir(paths::repo()).args(["describe", "--always", "--dirty"]).output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => "unknown".into(),
    }
}

fn case_counts(s: &Stage) -> (usize, usize, usize) {
    let Ok(o) = &s.result else { return (0, 0, 0) };
    let cases = report::test_cases(o);
    let c = |st| cases.iter().filter(|c| c.status == st).count();
    (c(labproto::Status::Pass), c(labproto::Status::Fail), c(labproto::Status::Skip))
}

fn rel(p: &Path, base: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

fn write_artifacts(n: &Nightly, opts: &Opts, lock: &lock::Lock) -> Result<()> {
    let failures = n.failures();
    let stages: Vec<StageJson> = n
        .stages
        .iter()
        .map(|s| {
            let (passed, failed, skipped) = case_counts(s);
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
    std::fs::write(opts.out.join("report.html"), html_report(n, opts, &failures))?;
    Ok(())
}

/// kcidb-io, the schema's reference implementation, in a private venv in the cache.
pub const KCIDB_IO: &str = "kcidb-io==141";

/// Validates `kcidb.json` against the KCIDB schema with kcidb-io. Returns None when the
/// validator cannot be installed (no network): the report is still written.
pub fn validate_kcidb(file: &Path) -> Option<std::result::Result<(), String>> {
    let venv = paths::cache().join("tools").join(KCIDB_IO.replace("==", "-"));
    let py = venv.join("bin/python3");
    if !py.is_file() {
        let ok =
            std::process::Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success())
                && std::process::Command::new(venv.join("bin/pip"))
                    .args(["install", "-q", KCIDB_IO])
                    .status()
                    .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("lab nightly: could not install {KCIDB_IO} into {}; kcidb.json not validated", venv.display());
            let _ = std::fs::remove_dir_all(&venv);
            return None;
        }
    }
    let out = std::process::Command::new(&py)
        .args(["-c", "import json,sys,kcidb_io; kcidb_io.schema.LATEST.validate(json.load(open(sys.argv[1])))"])
        .arg(file)
        .output()
        .ok()?;
    Some(if out.status.success() { Ok(()) } else { Err(kcidb::excerpt(&String::from_utf8_lossy(&out.stderr))) })
}

fn unit_of(metric: &str) -> &'static str {
    let m = without_mode(metric);
    if m.ends_with("_ms") {
        "ms"
    } else if m.ends_with("_ns") {
        "ns"
    } else if m.ends_with("per_sec") || m.ends_with("per_s") {
        "1/s"
    } else if m.ends_with(".pct") {
        "%"
    } else {
        ""
    }
}

/// The KCIDB report: builds per flavor, a test per case, gated metrics as numbers.
fn kcidb_report(n: &Nightly, opts: &Opts, lock: &lock::Lock) -> Result<kcidb::Report> {
    let series = tree::Series::load(&paths::driver_dir())?;
    let shas: Vec<String> = series.patches.iter().map(|p| sha256_file(&series.dir.join(p))).collect::<Result<_>>()?;
    let patchset = kcidb::patchset_hash(&shas);
    let commit = &n.lab_commit;
    let checkout_id = kcidb::id(&format!(
        "{}-{}-{}",
        lock.kernel.version,
        patchset.as_deref().map(|h| &h[..12]).unwrap_or("none"),
        commit
    ));
    let now = rfc3339_now();
    let mut r = kcidb::Report::default();
    r.checkouts.push(kcidb::Checkout {
        id: checkout_id.clone(),
        origin: kcidb::ORIGIN.into(),
        tree_name: "debian-linux-source-7.2".into(),
        comment: format!(
            "{} {} with rust-driver/ ({} patches)",
            lock.kernel.package,
            lock.kernel.version,
            series.patches.len()
        ),
        patchset_hash: patchset,
        start_time: now.clone(),
        valid: true,
        misc: serde_json::json!({"lab_commit": commit, "source_sha256": lock.kernel.sha256, "patches": series.patches}),
    });
    let compiler = format!(
        "clang{} + rustc {}",
        crate::provision::toolchain::LLVM_SUFFIX,
        crate::provision::toolchain::rustc_version().unwrap_or_default()
    );
    let build_id = |flavor: &str| {
        let key = n.builds.iter().find(|b| b.flavor == flavor).and_then(|b| b.key.clone()).unwrap_or("failed".into());
        kcidb::id(&format!("{flavor}-{key}"))
    };
    for b in &n.builds {
        r.builds.push(kcidb::Build {
            id: build_id(&b.flavor),
            checkout_id: checkout_id.clone(),
            origin: kcidb::ORIGIN.into(),
            architecture: "arm64".into(),
            compiler: compiler.clone(),
            config_name: b.flavor.clone(),
            status: if b.error.is_none() { "PASS" } else { "FAIL" },
            duration: Some(b.wall_s),
            log_excerpt: b.error.as_deref().map(kcidb::excerpt),
            misc: serde_json::json!({"kernel_release": b.release, "fragments": ["base.config", format!("{}.config", b.flavor)]}),
        });
    }
    let env = kcidb::Environment {
        comment: format!(
            "{} -M virt, board {}, TCG {:?} (benchmarks: {:?})",
            qemu::version().unwrap_or_default(),
            opts.base.board,
            opts.base.tcg,
            opts.measure_tcg
        ),
        misc: serde_json::json!({"board": opts.base.board, "tcg": format!("{:?}", opts.base.tcg).to_lowercase(),
                                 "benchmark_tcg": format!("{:?}", opts.measure_tcg).to_lowercase()}),
    };
    let run_id = utc_stamp();
    for s in &n.stages {
        let Ok(o) = &s.result else {
            r.tests.push(kcidb::Test {
                id: kcidb::id(&format!("{run_id}.{}", s.name)),
                build_id: build_id(&s.flavor),
                origin: kcidb::ORIGIN.into(),
                path: kcidb::path(&[s.kind]),
                status: "MISS",
                start_time: s.started.clone(),
                log_excerpt: Some(kcidb::excerpt(&s.problems().join("\n"))),
                environment: env.clone(),
                ..Default::default()
            });
            continue;
        };
        for (i, c) in report::test_cases(o).iter().enumerate() {
            let case = c.name.rsplit('/').next().unwrap_or(&c.name);
            r.tests.push(kcidb::Test {
                id: kcidb::id(&format!("{run_id}.{}.{i}", s.name)),
                build_id: build_id(&s.flavor),
                origin: kcidb::ORIGIN.into(),
                path: kcidb::path(&[s.kind, &c.suite, case]),
                status: kcidb::status(c.status),
                start_time: s.started.clone(),
                duration: Some(c.time_s),
                log_excerpt: c.detail.as_deref().map(kcidb::excerpt),
                environment: env.clone(),
                misc: serde_json::json!({"artifacts": rel(&s.artifacts, &opts.out)}),
                ..Default::default()
            });
        }
    }
    for (i, (name, m)) in n.metrics.iter().filter(|(_, m)| m.better.is_some()).enumerate() {
        // Seed 001's mode 0 ran on the C driver; every other figure on the perf kernel.
        let flavor = if name.starts_with("seed001.") && name.ends_with(".m0") { "cbinder" } else { "perf" };
        let flavor = if name.starts_with("fuzz-debug.") { "debug" } else { flavor };
        r.tests.push(kcidb::Test {
            id: kcidb::id(&format!("{run_id}.bench.{i}")),
            build_id: build_id(flavor),
            origin: kcidb::ORIGIN.into(),
            path: kcidb::path(&["bench"].into_iter().chain(name.split('.')).collect::<Vec<_>>()),
            status: "DONE",
            start_time: now.clone(),
            number: Some(kcidb::Number { value: m.value, unit: unit_of(name).into() }),
            environment: env.clone(),
            misc: serde_json::json!({"ci95": [m.lo, m.hi], "better": m.better}),
            ..Default::default()
        });
    }
    Ok(r)
}

fn html_report(n: &Nightly, opts: &Opts, failures: &[String]) -> String {
    let mut p = html::Page::new();
    let verdict = if failures.is_empty() { "PASS" } else { "FAIL" };
    p.h(1, &format!("binder-lab nightly: {verdict}"));
    p.p(&format!(
        "{} profile, {:.1} min, lab {}; tests under TCG {:?}, benchmarks under TCG {:?}; fuzz budget {} operations on debug; threshold {}%{}.",
        format!("{:?}", opts.profile).to_lowercase(),
        n.wall_s / 60.0,
        n.lab_commit,
        opts.base.tcg,
        opts.measure_tcg,
        opts.fuzz_ops,
        opts.threshold_pct,
        opts.baseline.as_ref().map(|b| format!(", baseline {}", b.display())).unwrap_or_default()
    ));
    if !failures.is_empty() {
        p.h(2, "Failures");
        p.pre(&failures.join("\n"));
    }
    p.h(2, "Kernels");
    let rows: Vec<Vec<String>> = n
        .builds
        .iter()
        .map(|b| {
            vec![
                b.flavor.clone(),
                b.error.as_ref().map(|e| format!("FAIL: {e}")).unwrap_or("PASS".into()),
                b.release.clone().unwrap_or_default(),
                format!("{:.1} s", b.wall_s),
            ]
        })
        .collect();
    p.table(&["flavor", "build", "release", "wall"], &rows);
    p.h(2, "Test stages");
    let rows: Vec<Vec<String>> = n
        .stages
        .iter()
        .map(|s| {
            let (ok, failed, skipped) = case_counts(s);
            let probs = s.problems();
            vec![
                s.name.clone(),
                s.flavor.clone(),
                if probs.is_empty() { "PASS".into() } else { format!("FAIL: {}", first_lines(&probs[0], 1)) },
                format!("{ok} passed, {failed} failed, {skipped} skipped"),
                s.result.as_ref().map(|o| format!("{:.0} s", o.wall_s)).unwrap_or_default(),
                rel(&s.artifacts, &opts.out),
            ]
        })
        .collect();
    p.table(&["stage", "kernel", "verdict", "cases", "wall", "files"], &rows);
    if !n.comparisons.is_empty() {
        p.h(2, "Against the baseline");
        let rows: Vec<Vec<String>> = n
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
        p.p(&format!("{ok} gated metrics within the threshold; the others:"));
        p.table(&["metric", "baseline", "now", "change", "verdict"], &rows);
    }
    if let Some(r) = &n.reproduce {
        p.markdown(&r.text, &opts.out.join("reproduce"));
        if let Some(o) = r.seed000.outcomes.first() {
            p.h(2, "Seed 000 plots");
            for svg in ["throughput.svg", "latency-cdf.svg", "tiers-other.svg", "tiers-fifo.svg"] {
                p.svg(&o.dir.join(svg));
            }
        }
    }
    if let Some(e) = &n.reproduce_error {
        p.h(2, "Reproduce failed");
        p.pre(e);
    }
    p.render("binder-lab nightly")
}

/// The summary printed at the end.
pub fn summary(n: &Nightly, out: &Path) -> String {
    let mut s = String::new();
    for st in &n.stages {
        let (ok, failed, skipped) = case_counts(st);
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

/// `lab nightly`: runs everything into `out` and prints the reproduction and the summary.
pub fn command(
    profile: Profile,
    out: Option<PathBuf>,
    baseline: Option<PathBuf>,
    threshold: f64,
    fuzz_ops: Option<u64>,
    run_args: &crate::cli::args::RunArgs,
) -> Result<()> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/nightly").join(utc_stamp()));
    let quick = profile == Profile::Quick;
    let opts = Opts {
        profile,
        out: out.clone(),
        baseline,
        threshold_pct: threshold,
        fuzz_ops: fuzz_ops.unwrap_or(if quick { 20_000 } else { 1_000_000 }),
        base: run_args.opts("default"),
        measure_tcg: run_args.tcg.unwrap_or(qemu::Tcg::Icount),
    };
    let n = run(&opts)?;
    if let Some(r) = &n.reproduce {
        println!("{}", r.text);
    }
    print!("{}", summary(&n, &out));
    if !n.failures().is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(value: f64, lo: f64, hi: f64) -> Metric {
        Metric { value, lo: Some(lo), hi: Some(hi), better: None }
    }

    #[test]
    fn gated_metrics_and_their_direction() {
        assert_eq!(better("seed000.throughput.iterations_per_sec.m0"), Some(Better::Higher));
        assert_eq!(better("seed001.throughput.p99_ms.m1"), Some(Better::Lower));
        assert_eq!(better("seed002.sendvec.0064.cpu_ns.m1"), Some(Better::Lower));
        assert_eq!(better("fuzz-debug.ops_per_s"), Some(Better::Higher));
        assert_eq!(better("seed000.tiers.other.same_core.avg_ms.m0"), None);
        assert_eq!(better("seed000.throughput.counters.cpu_migrations.m0"), None);
        assert_eq!(better("seed000.throughput.worst_ms.m0"), None);
    }

    #[test]
    fn compare_needs_threshold_and_ci() {
        let t = "seed000.throughput.iterations_per_sec.m0";
        let l = "seed000.throughput.avg_ms.m0";
        let base: Metrics = [(t.to_string(), m(1000.0, 0.0, 0.0)), (l.to_string(), m(1.0, 0.0, 0.0))].into();
        // 20% fewer iterations, CI excludes the baseline: regressed.
        let cur: Metrics = [(t.to_string(), m(800.0, 780.0, 820.0)), (l.to_string(), m(1.0, 0.9, 1.1))].into();
        let c = compare(&base, &cur, 10.0);
        assert_eq!(c.iter().find(|c| c.metric == t).unwrap().verdict, Verdict::Regressed);
        assert_eq!(c.iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Ok);
        // Same drop but the CI still covers the baseline: noise, not a regression.
        let wide: Metrics = [(t.to_string(), m(800.0, 600.0, 1100.0))].into();
        let c = compare(&base, &wide, 10.0);
        assert_eq!(c.iter().find(|c| c.metric == t).unwrap().verdict, Verdict::Ok);
        assert_eq!(c.iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Missing);
        // Latency 50% lower: improved, never a failure.
        let fast: Metrics = [(l.to_string(), m(0.5, 0.45, 0.55))].into();
        assert_eq!(compare(&base, &fast, 10.0).iter().find(|c| c.metric == l).unwrap().verdict, Verdict::Improved);
        // Ungated metrics are not compared.
        let other: Metrics = [("x.tiers.pct.m0".to_string(), m(1.0, 1.0, 1.0))].into();
        assert!(compare(&other, &other, 10.0).is_empty());
    }

    #[test]
    fn baseline_file_errors_name_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b.json");
        std::fs::write(&p, "{\"metrics\": {\"a.iterations_per_sec.m0\": {\"value\": 5}}}").unwrap();
        assert_eq!(load_baseline(&p).unwrap()["a.iterations_per_sec.m0"].value, 5.0);
        std::fs::write(&p, "{\"nope\": 1}").unwrap();
        let e = format!("{:#}", load_baseline(&p).unwrap_err());
        assert!(e.contains("is not a baseline") && e.contains("nightly.json"), "{e}");
        let e = format!("{:#}", load_baseline(&d.path().join("missing.json")).unwrap_err());
        assert!(e.contains("reading the baseline"), "{e}");
    }

    #[test]
    fn fuzz_plan_budget() {
        let p = fuzz_plan(1_000_000);
        assert_eq!(p.steps[0].env["BINDER_FUZZ_OPS"], "1000000");
        assert!(p.steps[0].timeout_s > 3600);
    }
}
