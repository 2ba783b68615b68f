//! Seed 000 on the timing model (`lab reproduce --model`): the lab QEMU, `--tcg hicount` and
//! the cache cost plugin (`--cache`), exactly those three and nothing else.
//!
//! The cache plugin writes its counters once, when QEMU exits, so each CTABS mode and each
//! workload gets its own boot: that is what gives the seed's "Cache refs" and "Cache misses"
//! rows a value per mode. The emulation is deterministic, so separate boots do not need the
//! interleaving that protects `bench` from host drift. One extra boot that only checks the
//! topology gives the boot's own counters, which are subtracted.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::harness::prepare::CACHE_COUNTERS;
use crate::harness::qemu::Tcg;
use crate::measure::bench::{self, Job, Profile};
use crate::measure::reproduce::{self, Seeds};
use crate::measure::samples::{self, Row, Samples};
use crate::measure::table::{est, lab_dir, mark, pct, seed_dir, show, show_delta, show_in, LEGEND};
use crate::report::run_plan;
use anyhow::{bail, Context, Result};
use labproto::{Event, Plan, Step};
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
    RunOpts { qemu: crate::kbuild::qemu::Choice::Lab, tcg: Tcg::Hicount, cache: true, ..base.clone() }
}

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
    pub boot: Outcome,
    /// (bench, mode, outcome).
    pub runs: Vec<(String, u32, Outcome)>,
}

impl ModelRuns {
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        std::iter::once(&self.boot).chain(self.runs.iter().map(|(_, _, o)| o))
    }

    /// Every sample: the programs' results and each boot's net cache counters.
    pub fn samples(&self) -> Result<Samples> {
        let events: Vec<Event> = self.runs.iter().flat_map(|(_, _, o)| o.events.iter().cloned()).collect();
        let mut s = samples::collect(&events);
        let boot = counters(&self.boot.dir)?;
        for (bench, mode, o) in &self.runs {
            put_counters(&mut s, bench, *mode, &counters(&o.dir)?, &boot);
        }
        Ok(s)
    }
}

/// How much the model runs: the profile's workloads, `reps` repetitions per mode, and
/// optionally another `-i` (iterations per throughput worker, per tiers run).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Size {
    pub profile: Profile,
    pub reps: usize,
    pub iterations: Option<usize>,
}

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
    let first = run_plan(plan, opts)?;
    if first.ok() {
        return Ok(first);
    }
    let why = |o: &Outcome| format!("{}: {}", o.dir.display(), o.problems().join("; "));
    crate::support::progress::note(format!("model: {} failed ({}), running it once more", plan.name, why(&first)));
    let second = run_plan(plan, opts)?;
    if !second.ok() {
        bail!("{} failed twice: {} / {}", plan.name, why(&first), why(&second));
    }
    Ok(second)
}

/// Runs seed 000's workloads on the model: the boot alone, then each mode and workload in its
/// own boot, `size.reps` repetitions each.
pub fn run(size: Size, modes: &[u32], base: &RunOpts) -> Result<ModelRuns> {
    let reps = size.reps;
    if let Some(m) = modes.iter().find(|m| **m > 3) {
        bail!("--modes {m}: the CTABS modes are 0 (Baseline), 1 (Patch 1/2), 2 (Patch 2/2) and 3 (wake on the caller's CPU)");
    }
    if reps == 0 || size.iterations == Some(0) {
        bail!("--reps 0 or --iterations 0: the model needs at least one repetition and one iteration");
    }
    let opts = opts(base);
    let note = crate::support::progress::note;
    note("model: the boot alone (its cache counters are subtracted from every run)".to_string());
    let boot = run_once_more(&boot_plan(), &opts)?;
    let mut runs = vec![];
    for &m in modes {
        for job in &jobs(size) {
            note(format!("model: {} in CTABS mode {m}, {reps} repetitions", job.bench));
            runs.push((job.bench.to_string(), m, run_once_more(&plan(job, m, reps), &opts)?));
        }
    }
    Ok(ModelRuns { boot, runs })
}

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
        ratio(rows, &t("avg_ms"), &t("p50_ms"))
    );
    let _ = writeln!(
        s,
        "{:<44} {:>8.2} {:>8}",
        "throughput p99 / p50 latency",
        p99 / p50,
        ratio(rows, &t("p99_ms"), &t("p50_ms"))
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
    samples: &'a Samples,
    runs: Vec<String>,
}

/// The report: header with the model's parameters, calibration targets, the seed's two
/// tables (the cache rows filled), mode 3 and the cache counters per mode.
pub fn render(
    board: &board::Board,
    board_sha: &str,
    size: Size,
    modes: &[u32],
    rows: &BTreeMap<String, Row>,
) -> Result<String> {
    let seeds = seeds_with_cache()?;
    let mut t = String::new();
    let programs: Vec<String> = jobs(size).iter().map(|j| format!("`{}`", j.argv.join(" "))).collect();
    let _ = writeln!(
        t,
        "# Seed 000 on the timing model\n\n`--model`: `--qemu lab --tcg hicount --cache`; one boot per CTABS mode and workload, \
         {} repetitions each of {}, modes {modes:?}; board {} (sha256 {board_sha}).\n\n{}\n{LEGEND}\n",
        size.reps,
        programs.join(" and "),
        board.source(),
        describe(board)
    );
    let _ = writeln!(t, "## Calibration targets (Baseline)\n\n```\n{}```\n", calibration(&seeds, rows));
    let _ = writeln!(t, "## schd-dbg tiered latency\n\n```\n{}```\n", reproduce::seed000_tiers(&seeds.seed000, rows));
    let _ = writeln!(
        t,
        "## binderThroughputTest\n\nCache rows: L1D references and refills of every CPU over the throughput boot, minus the \
         boot alone; one deterministic boot per mode, so no CI.\n\n```\n{}```\n",
        reproduce::seed000_throughput(&seeds.seed000, rows)
    );
    if modes.contains(&3) {
        let _ = writeln!(
            t,
            "## Mode 3 (wake on the caller's CPU; the lab's, not the seed's)\n\n```\n{}```\n",
            mode3(&seeds, rows)
        );
    }
    let _ = writeln!(t, "## Cache model counters per mode\n\n```\n{}```", cache_detail(rows, modes));
    Ok(t)
}

/// Runs, then writes `model.md` and `model.json` to `out`; returns the runs and the report.
pub fn reproduce(size: Size, modes: &[u32], base: &RunOpts, out: &Path) -> Result<(ModelRuns, String)> {
    let (board, sha) = crate::harness::opts::load_board_file(&base.board, base.smp, base.memory.as_deref())?;
    let runs = run(size, modes, base)?;
    let samples = runs.samples()?;
    let rows = samples::summarise(&samples);
    let text = render(&board, &sha, size, modes, &rows)?;
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("model.md"), &text).context("writing model.md")?;
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
        let j = jobs(Size { profile: Profile::Full, reps: 1, iterations: Some(7) });
        let argv: Vec<String> = j.iter().map(|j| j.argv.join(" ")).collect();
        assert_eq!(argv, ["/bin/binder-throughput -w 8 -i 7", "/bin/binder-tiers -i 7"]);
    }
}
