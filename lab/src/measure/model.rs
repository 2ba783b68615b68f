//! Seed 000 on the timing model (`lab reproduce --model`): the lab QEMU, `--tcg hicount` and
//! the cache cost plugin (`--cache`), exactly those three and nothing else.
//!
//! The cache plugin writes its counters once, when QEMU exits, so each CTABS mode and each
//! workload gets its own boot: that is what gives the seed's "Cache refs" and "Cache misses"
//! rows a value per mode. One extra boot that only checks the topology gives the boot's own
//! counters, which are subtracted.
//!
//! A boot is deterministic: it repeats itself exactly, so repetitions inside one boot show
//! only the variation inside it. Every mode therefore runs in several boots that differ in
//! QEMU's `-seed` (the guest's entropy: its RNG, hash seeds and address randomisation; no
//! parameter of the timing model), the modes interleaved within each boot number, and the
//! intervals resample boots and then the repetitions inside them.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::harness::prepare::CACHE_COUNTERS;
use crate::harness::qemu::Tcg;
use crate::measure::bench::{self, Job, Profile};
use crate::measure::reproduce::{self, Seeds};
use crate::measure::userspace::{self, Userspace};
use crate::numbers::samples::{self, BootSamples, Row, Samples};
use crate::numbers::stats;
use crate::numbers::table::{big, est, lab_dir, mark, pct, seed_dir, show, show_delta, show_in, LEGEND};
use crate::report::run_plan_and_report;
use anyhow::{bail, Context, Result};
use labproto::{Plan, Step};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The CTABS modes the model runs by default: Baseline, Patch 1/2, Patch 2/2 and the lab's
/// wake-on-the-caller's-CPU variant.
pub const DEFAULT_MODES: [u32; 4] = [0, 1, 2, 3];
/// The seed-000 workloads the model runs (seed 002's sendvec is not seed 000's).
const WORKLOADS: [&str; 2] = ["throughput", "tiers"];
/// The cache plugin's per-CPU counters kept as metrics (`<bench>.cache.<counter>`).
/// The access counters count loads and stores; `charged_*` the loads charged at each place.
const COUNTERS: [&str; 15] = [
    "l1d_refs",
    "l1d_misses",
    "l2_misses",
    "l3_refs",
    "l3_misses",
    "same_cluster_transfers",
    "cross_cluster_transfers",
    "clean_snoops",
    "charged_l2",
    "charged_l3",
    "charged_same_cluster",
    "charged_cross_cluster",
    "charged_dram",
    "charged_ns",
    "l2_refs",
];
/// The seed's simpleperf cache-references / cache-misses: on arm64, perf's generic events
/// are the PMU's L1D_CACHE and L1D_CACHE_REFILL (drivers/perf/arm_pmuv3.c,
/// armv8_pmuv3_perf_map), so the model's L1D references and misses.
const SEED_CACHE_ROWS: [(&str, &str); 2] =
    [("Cache refs", "throughput.cache.l1d_refs"), ("Cache misses", "throughput.cache.l1d_misses")];

/// What `--model` means: the lab QEMU, its timing model and the cache cost plugin.
pub fn opts(base: &RunOpts) -> RunOpts {
    RunOpts {
        qemu: crate::kbuild::qemu::Choice::Lab,
        qemu_resolved: None,
        tcg: Tcg::Hicount,
        cache: true,
        ..base.clone()
    }
}

pub use crate::harness::opts::seed_of;

/// One workload of the profile under one mode, `reps` times, in its own boot.
fn plan(job: &Job, mode: u32, reps: usize) -> Plan {
    let name = format!("model-{}-m{mode}", job.bench);
    bench::interleaved(&name, reps, std::slice::from_ref(job), &[(mode, bench::mode_args(mode))])
}

/// The boot alone (and the topology check), whose counters every other boot also has.
fn boot_plan() -> Plan {
    let step =
        Step { name: "topology".into(), argv: vec!["/bin/topology".into()], timeout_s: 120, ..Default::default() };
    Plan { name: "model-boot".into(), steps: vec![step], ..Default::default() }
}

/// Sum over CPUs of each counter in a run's cache.json.
pub fn counters(run_dir: &Path) -> Result<BTreeMap<String, f64>> {
    let path = run_dir.join(CACHE_COUNTERS);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}: did the run have --cache (the model)?", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let cpus = v["cpus"].as_array().with_context(|| format!("{}: no \"cpus\" array", path.display()))?;
    let mut sum = BTreeMap::new();
    for k in COUNTERS {
        sum.insert(k.to_string(), cpus.iter().filter_map(|c| c[k].as_f64()).sum());
    }
    Ok(sum)
}

/// A workload boot's counters minus the boot's, as one sample per counter for `mode`.
fn put_counters(s: &mut Samples, bench: &str, mode: u32, run: &BTreeMap<String, f64>, boot: &BTreeMap<String, f64>) {
    for (k, v) in run {
        let net = v - boot.get(k).copied().unwrap_or(0.0);
        s.entry(format!("{bench}.cache.{k}")).or_default().entry(mode).or_default().push(net);
    }
}

/// The finished runs of one model reproduction.
pub struct ModelRuns {
    /// The boot alone, by boot number.
    pub boots: Vec<Outcome>,
    /// (bench, mode, boot number, outcome).
    pub runs: Vec<(String, u32, usize, Outcome)>,
}

impl ModelRuns {
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        self.boots.iter().chain(self.runs.iter().map(|(_, _, _, o)| o))
    }

    /// Every sample by boot: the programs' results and each boot's cache counters net of
    /// the boot alone with the same seed.
    pub fn samples(&self) -> Result<BootSamples> {
        let mut all = BootSamples::new();
        for (bench, mode, b, o) in &self.runs {
            let alone = self.boots.get(*b).with_context(|| format!("no boot-alone run for boot {b}"))?;
            let mut s = samples::collect(&o.events);
            put_counters(&mut s, bench, *mode, &counters(&o.dir)?, &counters(&alone.dir)?);
            samples::add_boot(&mut all, *b, &s);
        }
        Ok(all)
    }
}

/// How much the model runs: the profile's workloads, `boots` boots per mode and workload,
/// `reps` repetitions in each, and optionally another `-i` (iterations per throughput
/// worker, per tiers run).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Size {
    pub profile: Profile,
    pub reps: usize,
    pub iterations: Option<usize>,
    pub boots: usize,
    /// Which programs run the workloads (`--userspace`).
    pub userspace: Userspace,
}

/// Boots per mode by default: as many as a figure needs to get a mark.
pub const DEFAULT_BOOTS: usize = crate::numbers::table::MIN_SAMPLES;

/// The profile's seed-000 jobs, with `-i` replaced when `iterations` is given.
fn jobs(size: Size) -> Vec<Job> {
    let mut jobs: Vec<Job> =
        bench::jobs(size.profile, None).into_iter().filter(|j| WORKLOADS.contains(&j.bench)).collect();
    for j in jobs.iter_mut() {
        if let (Some(n), Some(i)) = (size.iterations, j.argv.iter().position(|a| a == "-i")) {
            j.argv[i + 1] = n.to_string();
        }
    }
    jobs
}

/// Runs `plan`, and once more if that boot failed: QEMU 10.0.2 has crashed at exit after the
/// guest's power-off (SIGSEGV in `aio_co_wake`, once in about 20 boots), which loses the cache
/// counters but says nothing about the guest, whose run is deterministic. A second failure
/// stops the model, naming both.
fn run_once_more(plan: &Plan, opts: &RunOpts) -> Result<Outcome> {
    let first = run_plan_and_report(plan, opts)?;
    if first.ok() {
        return Ok(first);
    }
    let why = |o: &Outcome| format!("{}: {}", o.dir.display(), o.problems().join("; "));
    crate::support::progress::note(format!("model: {} failed ({}), running it once more", plan.name, why(&first)));
    let second = run_plan_and_report(plan, opts)?;
    if !second.ok() {
        bail!("{} failed twice: {} / {}", plan.name, why(&first), why(&second));
    }
    Ok(second)
}

/// The modes in the order boot number `boot` runs them: rotated by one each boot, so no mode
/// always comes first.
fn mode_order(modes: &[u32], boot: usize) -> Vec<u32> {
    let mut m = modes.to_vec();
    if !m.is_empty() {
        let k = boot % m.len();
        m.rotate_left(k);
    }
    m
}

/// Runs seed 000's workloads on the model, `size.boots` times: per boot number (QEMU's
/// `-seed`), the boot alone, then each mode and workload in its own boot, `size.reps`
/// repetitions each.
pub fn run(size: Size, modes: &[u32], base: &RunOpts) -> Result<ModelRuns> {
    let reps = size.reps;
    if let Some(m) = modes.iter().find(|m| **m > 3) {
        bail!("--modes {m}: the CTABS modes are 0 (Baseline), 1 (Patch 1/2), 2 (Patch 2/2) and 3 (wake on the caller's CPU)");
    }
    if reps == 0 || size.iterations == Some(0) || size.boots == 0 {
        bail!("--reps 0, --boots 0 or --iterations 0: the model needs at least one boot, repetition and iteration");
    }
    crate::support::progress::note(format!(
        "model: {} boots (QEMU -seed 1..={}), each the boot alone (its cache counters are subtracted), then {} \
         in CTABS modes {modes:?}, {reps} repetitions",
        size.boots,
        size.boots,
        WORKLOADS.join(" and ")
    ));
    // Every run of every boot number, in the order -j 1 runs them.
    let mut items: Vec<BootRun> = vec![];
    for b in 0..size.boots {
        let opts = RunOpts { qemu_seed: seed_of(b), ..opts(base) };
        // AOSP's userspace makes a larger initramfs: the boot alone carries it too, so that
        // what is subtracted is the same boot.
        let alone = Plan { aosp: size.userspace == Userspace::Aosp, ..boot_plan() };
        items.push((b, None, alone, opts.clone()));
        for m in mode_order(modes, b) {
            for job in &jobs(size) {
                let p = userspace::apply(size.userspace, plan(job, m, reps))?;
                items.push((b, Some((job.bench.to_string(), m)), p, opts.clone()));
            }
        }
    }
    let label = |(b, _, p, o): &BootRun| format!("{} (boot {}/{}, -seed {})", p.name, b + 1, size.boots, o.qemu_seed);
    let outcomes = crate::harness::boots::each(&opts(base), &items, label, |(_, _, p, o)| run_once_more(p, o))?;
    let (mut boots, mut runs) = (vec![], vec![]);
    for ((b, what, ..), o) in items.into_iter().zip(outcomes) {
        match what {
            None => boots.push(o),
            Some((bench, m)) => runs.push((bench, m, b, o)),
        }
    }
    Ok(ModelRuns { boots, runs })
}

/// One run of a boot number: (boot, (bench, mode) or None for the boot alone, plan, options).
type BootRun = (usize, Option<(String, u32)>, Plan, RunOpts);

/// The seed's figures with the cache rows pointed at the model's counters.
fn seeds_with_cache() -> Result<Seeds> {
    let mut s = reproduce::seeds()?;
    for r in s.seed000.throughput.iter_mut() {
        if let Some((_, m)) = SEED_CACHE_ROWS.iter().find(|(n, _)| *n == r.name) {
            r.metric = m.to_string();
        }
    }
    Ok(s)
}

/// The seed's Baseline tier ratios (cross-cluster and same-cluster over same-core) per class.
fn seed_ratios(seeds: &Seeds, class: &str) -> Option<(f64, f64)> {
    let avg = |t: &str| seeds.seed000.tiers.iter().find(|r| r.class == class && r.tier == t).map(|r| r.avg_ms[0]);
    let core = avg("same_core")?;
    Some((avg("cross_cluster")? / core, avg("same_cluster")? / core))
}

/// A ratio of two mode-0 medians, or n/a.
fn ratio(rows: &BTreeMap<String, Row>, num: &str, den: &str) -> String {
    ratio_scaled(rows, num, den, 1.0)
}

/// `scale` times a ratio of two mode-0 medians (100: a percentage), or n/a.
fn ratio_scaled(rows: &BTreeMap<String, Row>, num: &str, den: &str, scale: f64) -> String {
    match (est(rows, num, 0), est(rows, den, 0)) {
        (Some(n), Some(d)) if d.value > 0.0 => format!("{:.2}", scale * n.value / d.value),
        _ => "n/a".into(),
    }
}

/// The calibration targets: the Baseline's tier ratios and throughput shape, seed against model.
pub fn calibration(seeds: &Seeds, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<44} {:>8} {:>8}", "Baseline", "seed", "model");
    for (class, name) in [("other", "Normal"), ("fifo", "SCHED_FIFO")] {
        let Some((cross, same)) = seed_ratios(seeds, class) else { continue };
        let m = |t: &str| format!("tiers.{class}.{t}.avg_ms");
        let core = m("same_core");
        let _ = writeln!(
            s,
            "{:<44} {cross:>8.2} {:>8}",
            format!("{name} cross-cluster / same-core"),
            ratio(rows, &m("cross_cluster"), &core)
        );
        let _ = writeln!(
            s,
            "{:<44} {same:>8.2} {:>8}",
            format!("{name} same-cluster / same-core"),
            ratio(rows, &m("same_cluster"), &core)
        );
    }
    let seed = |n: &str| seeds.seed000.throughput.iter().find(|r| r.name == n).map(|r| r.values[0]).unwrap_or(f64::NAN);
    let (avg, p50, p99) = (seed("Avg latency"), seed("p50 latency"), seed("p99 latency"));
    let t = |k: &str| format!("throughput.{k}");
    let _ = writeln!(
        s,
        "{:<44} {:>8.2} {:>8}",
        "throughput avg / p50 latency",
        avg / p50,
        ratio(rows, &t("avg_ms"), &t("p50_exact_ms"))
    );
    let _ = writeln!(
        s,
        "{:<44} {:>8.2} {:>8}",
        "throughput p99 / p50 latency",
        p99 / p50,
        ratio(rows, &t("p99_exact_ms"), &t("p50_exact_ms"))
    );
    let _ = writeln!(
        s,
        "{:<44} {:>8.2} {:>8}",
        "L1D misses / references (%)",
        100.0 * seed("Cache misses") / seed("Cache refs"),
        ratio_scaled(rows, &t("cache.l1d_misses"), &t("cache.l1d_refs"), 100.0)
    );
    s
}

/// The lab's mode 3 (not in the seed) against Baseline, marked by the seed's Patch 2/2 direction.
fn mode3(seeds: &Seeds, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<34} {:>26} {:>26}  dir (vs the seed's P2/2)", "Metric", "Mode 3", "Δ vs Baseline");
    let tiers = seeds.seed000.tiers.iter().map(|r| {
        (format!("{} {}", r.class, r.tier), format!("tiers.{}.{}.avg_ms", r.class, r.tier), "ms".to_string(), r.avg_ms)
    });
    let tput = seeds
        .seed000
        .throughput
        .iter()
        .filter(|r| !r.metric.is_empty())
        .map(|r| (r.name.clone(), r.metric.clone(), r.unit.clone(), r.values));
    for (name, metric, unit, seed) in tiers.chain(tput) {
        let d = rows.get(&metric).and_then(|r| r.delta_pct.get(&3)).copied();
        let dir = mark(seed_dir(pct(seed[0], seed[2])), d.as_ref().map(lab_dir));
        let _ = writeln!(s, "{name:<34} {:>26} {:>26}  {dir}", show_in(est(rows, &metric, 3), &unit), show_delta(d));
    }
    s
}

/// Per mode, the cache model's counters for the throughput workload (net of the boot).
fn cache_detail(rows: &BTreeMap<String, Row>, modes: &[u32]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<26}", "throughput, net of boot");
    for m in modes {
        let _ = write!(s, " {:>16}", format!("mode {m}"));
    }
    let _ = writeln!(s);
    for k in COUNTERS {
        let _ = write!(s, "{k:<26}");
        for &m in modes {
            let _ = write!(
                s,
                " {:>16}",
                show(est(rows, &format!("throughput.cache.{k}"), m), 0).split(' ').next().unwrap_or("n/a")
            );
        }
        let _ = writeln!(s);
    }
    s
}

/// The model's parameters as the board gives them, for the report header.
pub fn describe(board: &board::Board) -> String {
    let mut s = String::new();
    if let Some(t) = board.timing() {
        let ps: Vec<String> = board
            .clusters()
            .iter()
            .map(|c| format!("{} {} ps", c.name, t.cpu_ps_per_insn[c.cpus[0] as usize]))
            .collect();
        let _ = writeln!(s, "- instruction time: {}; quantum {} ns", ps.join(", "), t.quantum_ns);
    }
    if let Some(c) = board.cache_model() {
        let _ = writeln!(
            s,
            "- cache model (load-to-use, as the plugin gets it): {}",
            serde_json::to_string(c).unwrap_or_default()
        );
    }
    s
}

#[derive(Serialize)]
struct ResultsFile<'a> {
    size: Size,
    modes: &'a [u32],
    board_sha256: &'a str,
    metrics: &'a BTreeMap<String, Row>,
    /// metric -> mode -> per boot number its samples.
    samples: &'a BootSamples,
    runs: Vec<String>,
}

/// The seed-000 rows' metrics: each tier's average latency and the throughput rows.
fn table_metrics(seeds: &Seeds) -> Vec<(String, String)> {
    let tiers = seeds
        .seed000
        .tiers
        .iter()
        .map(|r| (format!("{} {}", r.class, r.tier), format!("tiers.{}.{}.avg_ms", r.class, r.tier)));
    let tput =
        seeds.seed000.throughput.iter().filter(|r| !r.metric.is_empty()).map(|r| (r.name.clone(), r.metric.clone()));
    tiers.chain(tput).collect()
}

/// Calls behind a figure of `metric` in `mode`: for a tier's average, the calls of that tier
/// in the repetitions that count (at least TIER_MIN_CALLS); for binder-throughput's, every
/// worker's iterations of every repetition.
fn calls(samples: &BootSamples, metric: &str, mode: u32, workers_iters: u64) -> Option<u64> {
    let values = |m: &str| samples.get(m).and_then(|b| b.get(&mode)).map(|b| b.concat());
    if let Some(prefix) = metric.strip_suffix(".avg_ms").filter(|p| p.starts_with("tiers.")) {
        let counts = values(&format!("{prefix}.count"))?;
        return Some(counts.iter().filter(|c| **c >= samples::TIER_MIN_CALLS).sum::<f64>() as u64);
    }
    let reps = values("throughput.iterations_per_sec")?.len() as u64;
    (!metric.contains(".cache.")).then_some(reps * workers_iters)
}

/// Per row and mode: boots, samples and calls each figure rests on.
fn basis(seeds: &Seeds, samples: &BootSamples, rows: &BTreeMap<String, Row>, modes: &[u32], size: Size) -> String {
    // binder-throughput's -w and -i: calls per repetition.
    let argv = jobs(size).into_iter().find(|j| j.bench == "throughput").map(|j| j.argv).unwrap_or_default();
    let arg = |k: &str| argv.iter().position(|a| a == k).and_then(|i| argv.get(i + 1)?.parse::<u64>().ok());
    let per_rep = arg("-w").unwrap_or(1) * arg("-i").unwrap_or(0);
    let mut s = String::new();
    let _ = write!(s, "{:<28}", "row");
    for m in modes {
        let _ = write!(s, " {:>30}", format!("mode {m}: boots / values / calls"));
    }
    let _ = writeln!(s);
    for (name, metric) in table_metrics(seeds) {
        let _ = write!(s, "{name:<28}");
        for &m in modes {
            let cell = match est(rows, &metric, m) {
                Some(e) => {
                    let c = calls(samples, &metric, m, per_rep).map_or("-".to_string(), |c| c.to_string());
                    format!("{} / {} / {c}", e.boots, e.n)
                }
                None => "0 / 0 / 0".into(),
            };
            let _ = write!(s, " {cell:>30}");
        }
        let _ = writeln!(s);
    }
    s
}

/// The metrics whose boot-to-boot spread the report shows.
const SPREAD: [(&str, &str); 4] = [
    ("throughput it/s", "throughput.iterations_per_sec"),
    ("avg latency ms", "throughput.avg_ms"),
    // Exact whichever program ran: a bucketed p99 moves in 0.39 ms steps.
    ("p99 exact ms", "throughput.p99_exact_ms"),
    ("L1D refs", "throughput.cache.l1d_refs"),
];

/// How much one mode moves from boot to boot: each boot's median with its within-boot 95%
/// CI (over its repetitions), and the boots together: the spread of their medians against
/// the width of a within-boot interval.
pub fn spread(samples: &BootSamples, rows: &BTreeMap<String, Row>, mode: u32) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<14}", "boot");
    for (label, _) in SPREAD {
        let _ = write!(s, " {label:>28}");
    }
    let _ = writeln!(s);
    let boots = SPREAD.iter().filter_map(|(_, m)| Some(samples.get(*m)?.get(&mode)?.len())).max().unwrap_or(0);
    let per_boot = |metric: &str, b: usize| samples.get(metric)?.get(&mode)?.get(b).filter(|v| !v.is_empty()).cloned();
    for b in 0..boots {
        let _ = write!(s, "{:<14}", format!("-seed {}", seed_of(b)));
        for (_, metric) in SPREAD {
            let cell = match per_boot(metric, b) {
                Some(v) if v.len() > 1 => stats::median_ci(&v).map_or("n/a".into(), |e| e.show(3)),
                Some(v) => format!("{:.0} (one value)", v[0]),
                None => "n/a".into(),
            };
            let _ = write!(s, " {cell:>28}");
        }
        let _ = writeln!(s);
    }
    // The boots together: median and its interval over boots, the range of the boots'
    // medians, and the median width of a within-boot interval, each in % of the median.
    for (label, f) in [("all boots", 0), ("boot range %", 1), ("within-boot %", 2)] {
        let _ = write!(s, "{label:<14}");
        for (_, metric) in SPREAD {
            let Some(all) = est(rows, metric, mode) else {
                let _ = write!(s, " {:>28}", "n/a");
                continue;
            };
            let meds: Vec<f64> = (0..boots).filter_map(|b| stats::median(&per_boot(metric, b)?)).collect();
            let widths: Vec<f64> = (0..boots)
                .filter_map(|b| per_boot(metric, b).filter(|v| v.len() > 1))
                .filter_map(|v| stats::median_ci(&v))
                .map(|e| 100.0 * (e.hi - e.lo) / all.value)
                .collect();
            let cell = match f {
                0 if metric.contains(".cache.") => {
                    format!("{} [{}, {}] ({}b)", big(all.value), big(all.lo), big(all.hi), all.boots)
                }
                0 => format!("{} ({}b)", all.show(3), all.boots),
                1 if !meds.is_empty() => {
                    let (lo, hi) = meds.iter().fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
                    format!("{:.1}", 100.0 * (hi - lo) / all.value)
                }
                2 => stats::median(&widths).map_or("n/a".into(), |w| format!("{w:.1}")),
                _ => "n/a".into(),
            };
            let _ = write!(s, " {cell:>28}");
        }
        let _ = writeln!(s);
    }
    s
}

/// The report: header with the model's parameters, calibration targets, the seed's two
/// tables (the cache rows filled), mode 3 and the cache counters per mode.
pub fn render(
    board: &board::Board,
    board_sha: &str,
    size: Size,
    modes: &[u32],
    samples: &BootSamples,
    rows: &BTreeMap<String, Row>,
) -> Result<String> {
    let seeds = seeds_with_cache()?;
    let mut t = String::new();
    let programs: Vec<String> = jobs(size).iter().map(|j| format!("`{}`", j.argv.join(" "))).collect();
    let _ = writeln!(
        t,
        "# Seed 000 on the timing model\n\n`--model`: `--qemu lab --tcg hicount --cache`; {} boots per CTABS mode and \
         workload (QEMU `-seed` 1 to {}: the guest's entropy, nothing of the model; modes interleaved), {} repetitions \
         in each of {}, modes {modes:?}; board {} (sha256 {board_sha}). Intervals resample boots, then the repetitions \
         inside them.\n\n{}\n{LEGEND}\n",
        size.boots,
        seed_of(size.boots.saturating_sub(1)),
        size.reps,
        programs.join(" and "),
        board.source(),
        describe(board)
    );
    let _ = writeln!(t, "Seed 000's programs: {}.\n", size.userspace.describe());
    let _ = writeln!(t, "## Calibration targets (Baseline)\n\n```\n{}```\n", calibration(&seeds, rows));
    let _ = writeln!(t, "## schd-dbg tiered latency\n\n```\n{}```\n", reproduce::seed000_tiers(&seeds.seed000, rows));
    let _ = writeln!(
        t,
        "## binderThroughputTest\n\nCache rows: L1D references and refills of every CPU over the throughput boot, minus the \
         boot alone with the same seed: one value per boot, the interval over boots.\n\n```\n{}```\n",
        reproduce::seed000_throughput(&seeds.seed000, rows)
    );
    if modes.contains(&3) {
        let _ = writeln!(
            t,
            "## Mode 3 (wake on the caller's CPU; the lab's, not the seed's)\n\n```\n{}```\n",
            mode3(&seeds, rows)
        );
    }
    let _ = writeln!(t, "## Cache model counters per mode\n\n```\n{}```\n", cache_detail(rows, modes));
    let _ = writeln!(
        t,
        "## What each figure rests on\n\nBoots with a value, values (repetitions; one per boot for the cache rows) and \
         binder calls.\n\n```\n{}```\n",
        basis(&seeds, samples, rows, modes, size)
    );
    if let Some(&m) = modes.first() {
        let _ = writeln!(
            t,
            "## Boot-to-boot spread (mode {m})\n\nEach boot's median with the 95% CI of its repetitions, then all \
             boots; the range of the boots' medians and the median width of a within-boot CI, in % of the \
             median.\n\n```\n{}```",
            spread(samples, rows, m)
        );
    }
    Ok(t)
}

/// Runs, then writes `model.md` and `model.json` to `out`; returns the runs and the report.
pub fn reproduce(size: Size, modes: &[u32], base: &RunOpts, out: &Path) -> Result<(ModelRuns, String)> {
    let (board, sha) = crate::harness::opts::load_board_file(&base.board, base.smp, base.memory.as_deref())?;
    let runs = run(size, modes, base)?;
    let samples = runs.samples()?;
    let rows = samples::summarise_boots(&samples);
    let text = render(&board, &sha, size, modes, &samples, &rows)?;
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("model.md"), &text).context("writing model.md")?;
    crate::numbers::plots::write_tiers(out, &rows)?;
    let dirs: Vec<PathBuf> = runs.outcomes().map(|o| o.dir.clone()).collect();
    let json = serde_json::to_string_pretty(&ResultsFile {
        size,
        modes,
        board_sha256: &sha,
        metrics: &rows,
        samples: &samples,
        runs: dirs.iter().map(|d| d.display().to_string()).collect(),
    })?;
    std::fs::write(out.join("model.json"), json).context("writing model.json")?;
    Ok((runs, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_json(dir: &Path, refs: [u64; 2], misses: [u64; 2]) {
        let cpu =
            |i: usize| serde_json::json!({"l1d_refs": refs[i], "l1d_misses": misses[i], "l2_refs": 1, "charged_ns": 5});
        let v = serde_json::json!({"charge": true, "refused": 0, "cpus": [cpu(0), cpu(1)]});
        std::fs::write(dir.join(CACHE_COUNTERS), v.to_string()).unwrap();
    }

    #[test]
    fn cache_rows_are_the_boots_net_l1d_counters_per_mode() {
        let (boot, m0, m1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        cache_json(boot.path(), [100, 50], [10, 5]);
        cache_json(m0.path(), [1100, 1050], [60, 62]);
        cache_json(m1.path(), [1000, 950], [40, 35]);
        let b = counters(boot.path()).unwrap();
        assert_eq!(b["l1d_refs"], 150.0);
        let mut s = Samples::new();
        put_counters(&mut s, "throughput", 0, &counters(m0.path()).unwrap(), &b);
        put_counters(&mut s, "throughput", 1, &counters(m1.path()).unwrap(), &b);
        assert_eq!(s["throughput.cache.l1d_refs"][&0], [2000.0]);
        assert_eq!(s["throughput.cache.l1d_misses"][&1], [60.0]);
        let seeds = seeds_with_cache().unwrap();
        let refs_line = |s: &Samples| {
            let t = reproduce::seed000_throughput(&seeds.seed000, &samples::summarise(s));
            t.lines().skip_while(|l| !l.starts_with("Cache refs")).nth(1).unwrap().to_string()
        };
        // One boot per mode is one sample: no interval (not [-10.0, -10.0]) and no mark.
        let cal = calibration(&seeds, &samples::summarise(&s));
        // 107 of 2000: 5.35%, not a rounded ratio times 100.
        assert!(cal.lines().last().unwrap().ends_with("5.35"), "{cal}");
        let one = refs_line(&s);
        assert!(one.contains("n/a (too few: 1)") && !one.contains("-10.0%") && one.ends_with("? ?"), "{one}");
        // Five boots per mode give the interval of their spread, and a mark: the seed's refs
        // fell 3.6%, the model's about 10%.
        for (mode, base) in [(0, 2000.0), (1, 1800.0)] {
            let v = s.get_mut("throughput.cache.l1d_refs").unwrap().get_mut(&mode).unwrap();
            *v = (0..5).map(|i| base + f64::from(i)).collect();
        }
        let five = refs_line(&s);
        assert!(five.contains("2002 [2000, 2004]") && five.contains("-10.0% [-10.") && five.contains('✓'), "{five}");

        // Without --cache there is no cache.json, and the error says what to add.
        let e = counters(Path::new("/nonexistent")).unwrap_err();
        assert!(format!("{e:#}").contains("--cache"), "{e:#}");
    }

    #[test]
    fn tier_ratios_are_cross_and_same_cluster_over_same_core() {
        let seeds = seeds_with_cache().unwrap();
        assert!(seed_ratios(&seeds, "other").is_some_and(|(c, s)| (c - 1.46).abs() < 0.01 && (s - 1.08).abs() < 0.01));
        assert!(seed_ratios(&seeds, "fifo").is_some_and(|(c, s)| (c - 1.57).abs() < 0.01 && (s - 1.35).abs() < 0.01));
        let mut s = Samples::new();
        for (tier, v) in [("same_core", 0.10), ("same_cluster", 0.12), ("cross_cluster", 0.15)] {
            s.entry(format!("tiers.other.{tier}.avg_ms")).or_default().insert(0, vec![v, v]);
        }
        let cal = calibration(&seeds, &samples::summarise(&s));
        let line = |k: &str| cal.lines().find(|l| l.starts_with(k)).unwrap().to_string();
        assert!(
            line("Normal cross-cluster").ends_with("1.50") && line("Normal same-cluster").ends_with("1.20"),
            "{cal}"
        );
        assert!(line("SCHED_FIFO cross-cluster").ends_with("n/a"), "{cal}");
    }

    #[test]
    fn model_means_lab_qemu_hicount_and_cache() {
        let o = opts(&RunOpts::default());
        assert!(o.cache && o.tcg == Tcg::Hicount && o.qemu == crate::kbuild::qemu::Choice::Lab);
        let p = plan(&bench::jobs(Profile::Quick, None)[0], 3, 2);
        assert_eq!(p.steps.len(), 2);
        assert!(p.steps.iter().all(|s| s.name.starts_with("throughput-m3-") && s.argv.ends_with(&bench::mode_args(3))));
        // --iterations replaces -i of both seed-000 programs, and sendvec is not run.
        let j =
            jobs(Size { profile: Profile::Full, reps: 1, iterations: Some(7), boots: 1, userspace: Userspace::Ports });
        let argv: Vec<String> = j.iter().map(|j| j.argv.join(" ")).collect();
        assert_eq!(argv, ["/bin/binder-throughput -w 8 -i 7", "/bin/binder-tiers -i 7"]);
    }

    #[test]
    fn boots_differ_in_seed_and_interleave_the_modes() {
        assert_eq!((seed_of(0), seed_of(4)), (1, 5), "boot 0 is the single boot of before");
        let orders: Vec<Vec<u32>> = (0..4).map(|b| mode_order(&[0, 1, 2, 3], b)).collect();
        assert_eq!(orders[0], [0, 1, 2, 3]);
        assert_eq!(orders[1], [1, 2, 3, 0]);
        // Each mode comes first in one boot of four.
        let firsts: std::collections::BTreeSet<u32> = orders.iter().map(|o| o[0]).collect();
        assert_eq!(firsts.len(), 4);
    }

    /// Baseline and Patch 1/2 of throughput.iterations_per_sec and the cache refs over
    /// `boots` boots: repetitions tight inside a boot (±0.5), boots 4% apart.
    fn boot_samples(boots: usize) -> BootSamples {
        let mut all = BootSamples::new();
        for b in 0..boots {
            let mut s = Samples::new();
            for (mode, base) in [(0, 100.0), (1, 110.0)] {
                let boot = base * (1.0 + 0.04 * (b as f64 - 2.0) / 2.0);
                let reps: Vec<f64> = (0..4).map(|r| boot + 0.5 * (r as f64 - 1.5) / 1.5).collect();
                s.entry("throughput.iterations_per_sec".into()).or_default().insert(mode, reps);
                s.entry("throughput.cache.l1d_refs".into()).or_default().insert(mode, vec![1000.0 * boot]);
            }
            samples::add_boot(&mut all, b, &s);
        }
        all
    }

    #[test]
    fn intervals_and_marks_rest_on_boots() {
        let seeds = seeds_with_cache().unwrap();
        let line = |rows: &BTreeMap<String, Row>, name: &str| {
            let t = reproduce::seed000_throughput(&seeds.seed000, rows);
            t.lines().skip_while(|l| !l.starts_with(name)).nth(1).unwrap().to_string()
        };
        // Four repetitions in each of three boots are 12 values but 3 boots: too few.
        let three = samples::summarise_boots(&boot_samples(3));
        let tput = line(&three, "Throughput");
        assert!(tput.contains("n/a (too few: 3 boots)") && tput.ends_with("? ?"), "{tput}");
        // Five boots: a mark, and an interval as wide as the boots' spread, not the
        // repetitions' (±0.5 around each boot's median).
        let five = boot_samples(5);
        let rows = samples::summarise_boots(&five);
        let e = est(&rows, "throughput.iterations_per_sec", 0).unwrap();
        assert_eq!((e.boots, e.n), (5, 20));
        assert!(e.hi - e.lo > 2.0, "{e:?}");
        let flat = samples::summarise(&samples::pooled(&five));
        let f = est(&flat, "throughput.iterations_per_sec", 0).unwrap();
        assert!(f.hi - f.lo < e.hi - e.lo, "flat {f:?} narrower than over boots {e:?}");
        assert!(line(&rows, "Throughput").contains("+10.0%") && line(&rows, "Throughput").ends_with("✓ ?"));
        let refs = line(&rows, "Cache refs");
        assert!(refs.contains("+10.0%") && refs.ends_with("✗ ?"), "{refs}");
        // The report says what each figure rests on and how far boots spread.
        let size =
            Size { profile: Profile::Full, reps: 4, iterations: Some(10), boots: 5, userspace: Userspace::Ports };
        let b = basis(&seeds, &five, &rows, &[0, 1], size);
        let tline = b.lines().find(|l| l.starts_with("Throughput")).unwrap();
        // 5 boots, 20 repetitions of 8 workers x 10 iterations.
        assert!(tline.contains("5 / 20 / 1600"), "{b}");
        assert!(b.lines().find(|l| l.starts_with("Cache refs")).unwrap().contains("5 / 5 / -"), "{b}");
        let sp = spread(&five, &rows, 0);
        assert_eq!(sp.lines().filter(|l| l.starts_with("-seed ")).count(), 5, "{sp}");
        let range = sp.lines().find(|l| l.starts_with("boot range %")).unwrap();
        assert!(range.split_whitespace().nth(3) == Some("8.0"), "{sp}");
        let within = sp.lines().find(|l| l.starts_with("within-boot %")).unwrap();
        assert!(within.split_whitespace().nth(2) == Some("1.0"), "{sp}");
    }
}
