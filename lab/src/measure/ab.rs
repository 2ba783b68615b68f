//! `lab ab`: any binder patch evaluated the way the seeds were. The treatment kernel is the
//! base flavor plus the patches ([`crate::kbuild::treatment`]); it passes the correctness
//! gates (conformance on the perf and debug kernels, KUnit and a fuzz budget on debug), then
//! base and treatment run the seed workloads in alternating boots, each boot with another
//! QEMU `-seed`, on the timing model when the lab QEMU is there. Intervals resample boots
//! and the marks follow [`crate::measure::table`]'s rules. One report: ab.md, ab.html, ab.json.

use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::Outcome;
use crate::harness::qemu::Tcg;
use crate::kbuild::treatment::{self, Source};
use crate::kbuild::{flavor, kernel, pin::Lock, tree};
use crate::measure::bench::{self, Job, Profile};
use crate::measure::samples::{self, BootSamples, Row};
use crate::measure::stats::Estimate;
use crate::measure::table::{self, Dir};
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
    /// Gates only: no performance runs and no profile.
    pub no_perf: bool,
    /// No debug kernel: the gates run on the perf-side treatment only.
    pub no_debug: bool,
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
pub fn better(metric: &str) -> Option<crate::measure::gate::Better> {
    use crate::measure::gate::Better;
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
        for k in ["iterations_per_sec", "avg_ms", "p50_ms", "p99_ms"] {
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
    use crate::measure::gate::Better;
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

/// One row of the performance table.
#[derive(Clone, Debug, Serialize)]
pub struct PerfRow {
    pub metric: String,
    pub base: Option<Estimate>,
    pub treatment: Option<Estimate>,
    pub delta_pct: Option<Estimate>,
    pub verdict: String,
    /// Worse by more than the threshold.
    pub regressed: bool,
    /// Against `--expect`: ✓ ~ ✗ ?, and the claimed change in %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<(String, f64)>,
}

pub fn perf_rows(rows: &BTreeMap<String, Row>, threshold: f64, expect: &BTreeMap<String, f64>) -> Vec<PerfRow> {
    table_metrics(rows)
        .into_iter()
        .map(|m| {
            let r = &rows[&m];
            let d = r.delta_pct.get(&1).copied();
            let v = verdict(&m, d.as_ref());
            let regressed = v == "worse" && d.is_some_and(|d| d.value.abs() > threshold);
            let expect = expect.get(&m).map(|claim| {
                let mark = table::mark(table::seed_dir(*claim), d.as_ref().map(table::lab_dir));
                (mark.to_string(), *claim)
            });
            PerfRow {
                metric: m,
                base: r.per_mode.get(&0).copied(),
                treatment: r.per_mode.get(&1).copied(),
                delta_pct: d,
                verdict: v.into(),
                regressed,
                expect,
            }
        })
        .collect()
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
    /// When the treatment failed: whether the base fails the same gate too (then it is not
    /// the patch's doing and does not fail the A/B).
    pub base_fails_too: Option<bool>,
}

impl Gate {
    pub fn fails_ab(&self) -> bool {
        !self.ok && self.base_fails_too != Some(true)
    }
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
}

/// Per function, kernel instructions per call on each side.
#[derive(Clone, Debug, Serialize)]
pub struct FnDiff {
    pub function: String,
    pub base: f64,
    pub treatment: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub base: String,
    pub treatment: String,
    pub patches: Vec<String>,
    pub profile: Profile,
    pub size: Size,
    pub timing: String,
    pub builds: Vec<BuildRec>,
    pub gates: Vec<Gate>,
    pub boots: Vec<BootRec>,
    pub rows: Vec<PerfRow>,
    pub perf_problems: Vec<String>,
    pub functions: Vec<FnDiff>,
    pub threshold: f64,
    pub passed: bool,
    pub wall_s: f64,
    #[serde(skip)]
    pub profile_text: String,
    #[serde(skip)]
    pub metrics: BTreeMap<String, Row>,
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

/// The binder_alloc KUnit suite of the pinned tree panics the boot in its first case's exit
/// (see the nightly's stages): the gates other than KUnit boot such kernels without KUnit.
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
    run_plan_and_report(plan, &o)
}

/// The gates, in order: conformance on the perf-side treatment, then on the debug one, KUnit
/// and the fuzzer there. A failing gate runs once more on its base kernel, to tell the
/// patch's failures from the base's own.
fn gates(t_perf: &str, perf: &str, debug: Option<(&str, &str)>, size: Size, base: &RunOpts) -> Result<Vec<Gate>> {
    let conformance = load_plan("conformance")?;
    let mut list: Vec<(String, String, String, &str, Plan)> =
        vec![(format!("conformance-{perf}"), t_perf.into(), perf.into(), "conformance", conformance.clone())];
    if let Some((t_dbg, dbg)) = debug {
        list.push((format!("conformance-{dbg}"), t_dbg.into(), dbg.into(), "conformance", conformance));
        list.push((format!("kunit-{dbg}"), t_dbg.into(), dbg.into(), "kunit", load_plan("kunit")?));
        list.push((format!("fuzz-{dbg}"), t_dbg.into(), dbg.into(), "fuzz", fuzz_plan(size.fuzz_ops)?));
    }
    let mut out = vec![];
    for (name, fl, base_fl, kind, plan) in list {
        note(format!("ab: gate {name} on {fl}"));
        let o = gate_run(&plan, &fl, kind, base)?;
        let mut g = Gate {
            name: name.clone(),
            flavor: fl,
            run_dir: o.dir.clone(),
            ok: o.ok(),
            problems: o.problems(),
            excerpt: if o.ok() { String::new() } else { excerpt(&o) },
            base_fails_too: None,
        };
        if !g.ok {
            note(format!(
                "ab: gate {name} failed on the treatment; running it on {base_fl} to see whether the base does too"
            ));
            g.base_fails_too = Some(!gate_run(&plan, &base_fl, kind, base)?.ok());
        }
        out.push(g);
        if crate::harness::run::interrupted() {
            break;
        }
    }
    Ok(out)
}

/// Base and treatment in alternating boots: per boot number (QEMU's `-seed`), both arms, the
/// order rotated each boot; every workload `reps` times per boot.
fn perf_runs(
    flavors: [&str; 2],
    size: Size,
    profile: Profile,
    opts: &RunOpts,
    model: bool,
) -> Result<Vec<(u32, usize, Outcome)>> {
    let mut items: Vec<(u32, usize, Plan, RunOpts)> = vec![];
    for b in 0..size.boots {
        let order: Vec<u32> = if b % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
        for arm in order {
            let plan =
                bench::interleaved(&format!("ab-{}", ARMS[arm as usize]), size.reps, &jobs(profile), &[(arm, vec![])]);
            let o = RunOpts {
                flavor: flavors[arm as usize].into(),
                qemu_seed: crate::measure::model::seed_of(b),
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
        "ab: {} boots per arm ({}), base and treatment alternating, {} repetition(s) of {} workloads each",
        size.boots,
        if model { "the timing model: lab QEMU, hicount, cache plugin" } else { "icount" },
        size.reps,
        jobs(profile).len()
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
    let gate_list =
        gates(&t_perf, &req.base, debug.as_deref().zip(t_debug.as_deref()).map(|(d, td)| (td, d)), size, opts)?;

    let (mut metrics, mut perf_problems, mut functions, mut profile_text, mut boots) =
        (BTreeMap::new(), vec![], vec![], String::new(), vec![]);
    let timing = if req.model { "timing model (--qemu lab --tcg hicount --cache)" } else { "--tcg icount" };
    // A treatment that fails a gate has no performance worth measuring: its report is the failure.
    let gate_failed = gate_list.iter().any(Gate::fails_ab);
    if gate_failed && !req.no_perf {
        perf_problems.push("not run: a gate failed on the treatment".into());
    }
    if !req.no_perf && !gate_failed && !crate::harness::run::interrupted() {
        let popts = if req.model {
            crate::measure::model::opts(opts).with_qemu_resolved()?
        } else {
            RunOpts { tcg: Tcg::Icount, ..opts.clone() }
        };
        let runs = perf_runs([&req.base, &t_perf], size, req.profile, &popts, req.model)?;
        boots = runs
            .iter()
            .map(|(arm, b, o)| BootRec {
                arm: ARMS[*arm as usize].into(),
                boot: b + 1,
                seed: crate::measure::model::seed_of(*b),
                run_dir: o.dir.clone(),
                wall_s: o.wall_s,
                reused: o.reused.clone(),
            })
            .collect();
        for (arm, b, o) in &runs {
            for p in o.problems() {
                perf_problems.push(format!("{} boot {}: {p} ({})", ARMS[*arm as usize], b + 1, o.dir.display()));
            }
        }
        metrics = samples::summarise_boots(&boot_samples(&runs, req.model));
        match profile_diff([&req.base, &t_perf], &req.out, req.profile, opts) {
            Ok((text, f)) => (profile_text, functions) = (text, f),
            Err(e) => perf_problems.push(format!("profile: {e:#}")),
        }
    }
    let rows = perf_rows(&metrics, req.threshold, &expect.unwrap_or_default());
    let passed = !gate_list.iter().any(Gate::fails_ab) && !rows.iter().any(|r| r.regressed);
    Ok(Report {
        base: req.base.clone(),
        treatment: t_perf,
        patches: t.origins.clone(),
        profile: req.profile,
        size,
        timing: timing.into(),
        builds,
        gates: gate_list,
        boots,
        rows,
        perf_problems,
        functions,
        threshold: req.threshold,
        passed,
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

/// ab.md.
pub fn render(r: &Report, reproducer: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# A/B: {} against {}\n", r.treatment, r.base);
    let failing: Vec<&Gate> = r.gates.iter().filter(|g| g.fails_ab()).collect();
    let regressed: Vec<&PerfRow> = r.rows.iter().filter(|x| x.regressed).collect();
    let _ = writeln!(
        s,
        "**Result: {}** ({} gate(s) failed, {} row(s) worse by more than {}%)\n",
        if r.passed { "PASS" } else { "FAIL" },
        failing.len(),
        regressed.len(),
        r.threshold
    );
    // What failed comes first, with the console.
    for g in &failing {
        let _ = writeln!(s, "## FAILED gate {} on {}\n\n{}\n", g.name, g.flavor, g.problems.join("; "));
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
        // One line per cell: the first line of each problem (the whole text is above).
        let brief: Vec<String> = g
            .problems
            .iter()
            .map(|p| {
                let l = p.lines().next().unwrap_or("").replace('|', "/");
                if l.chars().count() > 120 {
                    format!("{}…", l.chars().take(120).collect::<String>())
                } else {
                    l
                }
            })
            .collect();
        let res = match (g.ok, g.base_fails_too) {
            (true, _) => "pass".to_string(),
            (false, Some(true)) => format!("fail, the base too (not the patch's): {}", brief.join("; ")),
            (false, _) => format!("**FAIL**: {}", brief.join("; ")),
        };
        let _ = writeln!(s, "| {} | {} | {} | `{}` |", g.name, g.flavor, res, g.run_dir.display());
    }
    if !r.rows.is_empty() {
        let _ = writeln!(
            s,
            "\n## Performance: seed workloads, {} boots per arm alternating ({}), {} repetition(s) per boot\n",
            r.size.boots, r.timing, r.size.reps
        );
        let _ = writeln!(
            s,
            "Median [95% CI]; the intervals resample boots, then the repetitions in them. Verdict: a change beyond \
             ±{}% whose CI excludes 0; no change when the whole CI of the change lies within ±{}%; fewer than {} \
             boots per arm: n/a. A row fails the A/B when it is worse by more than {}%.\n",
            table::DEAD_BAND_PCT,
            table::DEAD_BAND_PCT,
            table::MIN_SAMPLES,
            r.threshold
        );
        let has_expect = r.rows.iter().any(|x| x.expect.is_some());
        let _ = write!(s, "| metric | base | treatment | Δ% [CI] | verdict |");
        let _ = writeln!(s, "{}", if has_expect { " claimed | mark |" } else { "" });
        let _ = writeln!(s, "| --- | --- | --- | --- | --- |{}", if has_expect { " --- | --- |" } else { "" });
        for x in &r.rows {
            let v = if x.regressed { format!("**{}**", x.verdict) } else { x.verdict.clone() };
            let _ = write!(
                s,
                "| {} | {} | {} | {} | {v} |",
                x.metric,
                show(x.base, &x.metric),
                show(x.treatment, &x.metric),
                table::show_delta(x.delta_pct)
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
        crate::measure::plots::bars(&path, &format!("{title}, median and 95% CI"), row, &ARMS)?;
        page.svg(&path);
    }
    let rows = &r.metrics;
    if rows.keys().any(|k| k.starts_with("sendvec.")) {
        let path = out.join("ab-sendvec.svg");
        crate::measure::plots::sendvec(&path, rows, "time_ns", &ARMS)?;
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

    #[test]
    fn rows_regress_beyond_the_threshold_and_carry_expect_marks() {
        let mut rows = BTreeMap::new();
        let row = |d: Estimate| Row {
            per_mode: [(0, est(100.0, 99.0, 101.0, 5)), (1, est(100.0 + d.value, 0.0, 0.0, 5))].into(),
            delta_pct: [(1, d)].into(),
        };
        rows.insert("throughput.iterations_per_sec".to_string(), row(est(-3.0, -4.0, -2.0, 5)));
        rows.insert("throughput.p99_ms".to_string(), row(est(8.0, 6.0, 10.0, 5)));
        rows.insert("unlisted.metric".to_string(), row(est(8.0, 6.0, 10.0, 5)));
        let expect: BTreeMap<String, f64> = [("throughput.iterations_per_sec".to_string(), 12.7)].into();
        let r = perf_rows(&rows, 5.0, &expect);
        assert_eq!(
            r.iter().map(|x| x.metric.as_str()).collect::<Vec<_>>(),
            ["throughput.iterations_per_sec", "throughput.p99_ms"]
        );
        assert_eq!((r[0].verdict.as_str(), r[0].regressed), ("worse", false), "3% is within a 5% threshold");
        assert_eq!((r[1].verdict.as_str(), r[1].regressed), ("worse", true));
        assert_eq!(r[0].expect, Some(("✗".to_string(), 12.7)));
        assert_eq!(r[1].expect, None);
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

    #[test]
    fn a_failed_gate_comes_first_with_its_console_and_one_table_line() {
        let gate = |name: &str, ok: bool, base: Option<bool>| Gate {
            name: name.into(),
            flavor: "perf+ab-0123456789ab".into(),
            run_dir: "/runs/x".into(),
            ok,
            problems: if ok { vec![] } else { vec!["kernel splat (warning):\n[ 5.6] WARNING: x | y".into()] },
            excerpt: if ok { String::new() } else { "warning (console line 12):\n[ 5.6] WARNING: x".into() },
            base_fails_too: base,
        };
        let r = Report {
            base: "perf".into(),
            treatment: "perf+ab-0123456789ab".into(),
            patches: vec!["a.patch".into()],
            profile: Profile::Quick,
            size: Size::of(Profile::Quick),
            timing: "--tcg icount".into(),
            builds: vec![],
            gates: vec![gate("conformance-perf", false, Some(false)), gate("kunit-debug", false, Some(true))],
            boots: vec![],
            rows: vec![],
            perf_problems: vec![],
            functions: vec![],
            threshold: 5.0,
            passed: false,
            wall_s: 1.0,
            profile_text: String::new(),
            metrics: BTreeMap::new(),
        };
        let md = render(&r, "cargo make ab --patch a.patch");
        let first = md.find("## FAILED gate conformance-perf").expect(&md);
        assert!(first < md.find("## Gates on the treatment").unwrap(), "{md}");
        assert!(md.contains("```\nwarning (console line 12):"), "{md}");
        // The base fails KUnit too: listed, not a failure of the A/B.
        assert!(!md.contains("## FAILED gate kunit-debug"), "{md}");
        let rows: Vec<&str> =
            md.lines().filter(|l| l.starts_with("| conformance-perf") || l.starts_with("| kunit")).collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(rows[0].contains("**FAIL**: kernel splat (warning):") && rows[0].ends_with("`/runs/x` |"), "{md}");
        assert!(rows[1].contains("the base too"), "{md}");
    }

    #[test]
    fn the_report_names_the_reused_boots() {
        let boot = |arm: &str, b: usize, reused: bool| BootRec {
            arm: arm.into(),
            boot: b,
            seed: b as u32,
            run_dir: "/runs/x".into(),
            wall_s: 1.0,
            reused: reused.then(|| "0123".into()),
        };
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
