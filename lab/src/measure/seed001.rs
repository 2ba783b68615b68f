//! Seed 001 as the seed measured it: the C driver with `alloc->mutex` (`cbinder`) and with the
//! seed's spinlock patch (`cbinder-spin`), the Rust driver (`perf`) beside them. Two
//! workloads per boot: binderThroughputTest `-w 2` (the seed's) and `binder-inversion`
//! (low-priority senders, high-priority ones, CPU hogs: the inversion the seed describes),
//! with its SCHED_FIFO variant. Boots alternate between the drivers (A B C, C B A, ...).

use crate::harness::opts::RunOpts;
use crate::measure::bench::{self, Job};
use crate::numbers::samples::{Row, Samples};
use crate::numbers::stats;
use crate::numbers::table::{
    big, delta, est, lab_dir, lab_head, lab_row, mark, pct, seed_dir, show_delta, show_in as show, Dir,
};
use anyhow::Result;
use labproto::Event;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Seed 001's figures (lab/seeds.toml).
#[derive(Debug, Deserialize)]
pub struct Seed001 {
    pub rows: Vec<RangeRow>,
}

#[derive(Debug, Deserialize)]
pub struct RangeRow {
    pub name: String,
    pub metric: String,
    pub unit: String,
    /// Lowest and highest over the seed's runs.
    pub before: [f64; 2],
    pub after: [f64; 2],
    pub claim: String,
}

/// How much the experiment does: -w 2 runs per driver (the seed: 10) and their iterations;
/// inversion runs per driver (each variant) and calls per high-priority sender.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub runs: usize,
    pub tput_iters: usize,
    pub inv_runs: usize,
    pub inv_iters: usize,
}

/// Mode number, flavor (None: the run's own flavor, `perf` by default) and column label.
pub const DRIVERS: [(u32, Option<&str>, &str); 3] = [
    (0, Some("cbinder"), "C mutex (cbinder)"),
    (1, Some("cbinder-spin"), "C spinlock (cbinder-spin)"),
    (2, None, "Rust (perf)"),
];

/// Boots per driver; each boot runs `runs / rounds` repetitions of every workload. Two boots
/// in alternating order spread host drift under TCG single; under icount or hicount a second
/// boot of the same kernel and initramfs with the same QEMU `-seed` repeats the first one bit
/// for bit (measured: identical iterations/s in every run), so it would only duplicate samples
/// and narrow the CIs falsely. `model_boots` (the timing model's `--boots`) gives that many
/// boots per driver instead, each with its own `-seed`: other boots of the same machine.
fn rounds(base: &RunOpts, model_boots: Option<usize>) -> usize {
    match model_boots {
        Some(n) => n,
        None if base.tcg.deterministic() => 1,
        None => 2,
    }
}

/// The inversion workload: 2 high-priority and 6 low-priority senders, one hog per CPU
/// (binder-inversion's defaults), `-i` calls per high-priority sender.
fn inversion_job(name: &'static str, iters: usize, high_policy: &str) -> Job {
    Job {
        bench: name,
        argv: ["/bin/binder-inversion", "-i", &iters.to_string(), "--high-policy", high_policy]
            .map(String::from)
            .to_vec(),
    }
}

/// One boot of one driver: the -w 2 runs, then the inversion runs, interleaved per job.
fn boot_plan(name: &str, sizes: Size, mode: u32, rounds: usize) -> labproto::Plan {
    let tput = Job {
        bench: "throughput",
        argv: ["/bin/binder-throughput", "-w", "2", "-i", &sizes.tput_iters.to_string()].map(String::from).to_vec(),
    };
    let inv =
        [inversion_job("inversion", sizes.inv_iters, "nice"), inversion_job("inversion-fifo", sizes.inv_iters, "fifo")];
    let mut plan = bench::interleaved(name, sizes.runs.div_ceil(rounds), &[tput], &[(mode, vec![])]);
    plan.steps.extend(bench::interleaved(name, sizes.inv_runs.div_ceil(rounds), &inv, &[(mode, vec![])]).steps);
    plan
}

/// The flavor a mode boots.
pub fn flavor_of(mode: u32, base: &RunOpts) -> String {
    DRIVERS.iter().find(|d| d.0 == mode).and_then(|d| d.1).map(str::to_string).unwrap_or_else(|| base.flavor.clone())
}

/// The experiment's boots, to run in this order: [`rounds`] boots per driver, alternating.
/// With `model_boots`, round `r` boots with QEMU `-seed` [`crate::harness::opts::seed_of`]`(r)`.
pub fn boots(sizes: Size, base: &RunOpts, model_boots: Option<usize>) -> Vec<(labproto::Plan, RunOpts)> {
    let mut boots = vec![];
    let rounds = rounds(base, model_boots);
    // On the model every boot runs all of `sizes` (as seed 000's model boots do); otherwise
    // the runs are split over the rounds.
    let model = model_boots.is_some();
    let split = if model { 1 } else { rounds };
    for round in 0..rounds {
        let mut order: Vec<u32> = DRIVERS.iter().map(|d| d.0).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let qemu_seed = if model { crate::harness::opts::seed_of(round) } else { base.qemu_seed };
        for mode in order {
            let flavor = flavor_of(mode, base);
            let plan = boot_plan(&format!("seed001-{flavor}"), sizes, mode, split);
            boots.push((plan, RunOpts { flavor, qemu_seed, ..base.clone() }));
        }
    }
    boots
}

fn range(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

fn fmt_range(r: Option<(f64, f64)>, unit: &str) -> String {
    match r {
        Some((lo, hi)) if unit == "ms" => format!("{lo:.3}-{hi:.3}ms"),
        Some((lo, hi)) => format!("{}-{} {unit}", big(lo), big(hi)),
        None => "n/a".into(),
    }
}

const W: usize = 26;

/// The column heads, after a label column of `label` characters.
fn header(s: &mut String, label: usize) {
    let _ = writeln!(
        s,
        "{:<label$} {:>W$} {:>W$} {:>W$} {:>W$} {:>W$}  dir",
        "", DRIVERS[0].2, DRIVERS[1].2, DRIVERS[2].2, "Δ spinlock vs mutex", "Δ Rust vs mutex"
    );
}

/// One seed row: the seed's ranges, the lab's ranges over the runs, then medians and Δs.
fn seed_row(s: &mut String, r: &RangeRow, samples: &Samples, rows: &BTreeMap<String, Row>) {
    let runs = |mode: u32| samples.get(&r.metric).and_then(|x| x.get(&mode)).cloned().unwrap_or_default();
    let mid = |x: [f64; 2]| (x[0] + x[1]) / 2.0;
    let sd = pct(mid(r.before), mid(r.after));
    let _ = writeln!(
        s,
        "{:<12} {:<5} {:>W$} {:>W$} {:>W$} {:>W$}",
        format!("{}:", r.name),
        "seed",
        fmt_range(Some((r.before[0], r.before[1])), &r.unit),
        fmt_range(Some((r.after[0], r.after[1])), &r.unit),
        "-",
        format!("{sd:+.0}% ({})", r.claim)
    );
    let _ = writeln!(
        s,
        "{:<12} {:<5} {:>W$} {:>W$} {:>W$}",
        "",
        "lab",
        fmt_range(range(&runs(0)), &r.unit),
        fmt_range(range(&runs(1)), &r.unit),
        fmt_range(range(&runs(2)), &r.unit)
    );
    lab_row(s, &lab_head(&format!("{:<12}", ""), "  med"), W, rows, &r.metric, &r.unit, [sd, sd]);
}

/// Seed 001's table with three columns: its rows (throughput, average, P99 ranges) and its
/// "variance" row (spread of the throughput runs).
pub fn table(seed: &Seed001, samples: &Samples, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    header(&mut s, 18);
    for r in &seed.rows {
        seed_row(&mut s, r, samples, rows);
    }
    let spread = |mode: u32| {
        let t = samples.get("throughput.iterations_per_sec").and_then(|x| x.get(&mode)).cloned().unwrap_or_default();
        range(&t).map(|(lo, hi)| (hi / lo, stats::cv(&t).unwrap_or(f64::NAN) * 100.0))
    };
    let seed_spread = |pick: fn(&RangeRow) -> [f64; 2]| {
        let t = seed.rows.iter().find(|r| r.metric == "throughput.iterations_per_sec").map(pick);
        t.map(|[lo, hi]| hi / lo).unwrap_or(f64::NAN)
    };
    let _ = writeln!(
        s,
        "{:<12} {:<5} {:>W$} {:>W$}",
        "variance:",
        "seed",
        format!("high ({:.1}x spread)", seed_spread(|r| r.before)),
        format!("low ({:.2}x spread)", seed_spread(|r| r.after))
    );
    let show_spread = |x: Option<(f64, f64)>| match x {
        Some((sp, cv)) => format!("{sp:.2}x, CV {cv:.1}%"),
        None => "n/a".into(),
    };
    let (c, sp, r) = (spread(0), spread(1), spread(2));
    // The seed: the spinlock's runs spread less than the mutex's.
    let m = |x: Option<(f64, f64)>| match (c, x) {
        (Some((a, _)), Some((b, _))) => mark(Dir::Down, Some(seed_dir(pct(a, b)))),
        _ => "?",
    };
    let _ = writeln!(
        s,
        "{:<12} {:<5} {:>W$} {:>W$} {:>W$} {:>W$} {:>W$}  {} {}",
        "",
        "lab",
        show_spread(c),
        show_spread(sp),
        show_spread(r),
        "(point values)",
        "",
        m(sp),
        m(r)
    );
    s
}

/// Rows of the inversion table: metric suffix, label, unit, the direction the seed's claim
/// implies for the spinlock (None: the seed says nothing about it).
const INVERSION_ROWS: &[(&str, &str, &str, Option<Dir>)] = &[
    ("high.p50_ms", "high p50", "ms", Some(Dir::Down)),
    ("high.p99_ms", "high p99", "ms", Some(Dir::Down)),
    ("high.p999_ms", "high p99.9", "ms", Some(Dir::Down)),
    ("high.max_ms", "high max", "ms", Some(Dir::Down)),
    ("high.calls_per_sec", "high calls/s", "", Some(Dir::Up)),
    ("low.p50_ms", "low p50", "ms", None),
    ("low.p99_ms", "low p99", "ms", None),
    ("low.p999_ms", "low p99.9", "ms", None),
    ("low.max_ms", "low max", "ms", None),
    ("low.calls_per_sec", "low calls/s", "", None),
    ("iterations_per_sec", "all calls/s", "", Some(Dir::Up)),
    ("high.lock.alloc_sleeps", "high slept on alloc lock", "", Some(Dir::Down)),
    ("high.lock.alloc_spins", "high spun on alloc lock", "", None),
    ("low.lock.alloc_sleeps", "low slept on alloc lock", "", None),
    ("high.sched.block_ms", "high blocked (schedstat)", "ms", Some(Dir::Down)),
];

/// The inversion workload's table for variant `bench` (`inversion`, `inversion-fifo`).
pub fn inversion_table(bench: &str, rows: &BTreeMap<String, Row>) -> String {
    let mut s = String::new();
    header(&mut s, 26);
    for (suffix, label, unit, dir) in INVERSION_ROWS {
        let m = format!("{bench}.{suffix}");
        let (d1, d2) = (delta(rows, &m, 1), delta(rows, &m, 2));
        let marks = match dir {
            Some(d) => format!("{} {}", mark(*d, d1.as_ref().map(lab_dir)), mark(*d, d2.as_ref().map(lab_dir))),
            None => "- -".into(),
        };
        let _ = writeln!(
            s,
            "{:<26} {:>W$} {:>W$} {:>W$} {:>W$} {:>W$}  {marks}",
            label,
            show(est(rows, &m, 0), unit),
            show(est(rows, &m, 1), unit),
            show(est(rows, &m, 2), unit),
            show_delta(d1),
            show_delta(d2)
        );
    }
    s
}

/// The report section: both tables, the plots, and what they can and cannot show.
pub fn render(seed: &Seed001, samples: &Samples, rows: &BTreeMap<String, Row>, sizes: Size) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "## Seed 001: alloc->mutex vs spinlock, binderThroughputTest -w 2, {} runs per driver of {} iterations (one boot per driver under icount or hicount, else two in alternating order; on the model, `--boots` per driver)\n\n```\n{}```\n",
        sizes.runs,
        sizes.tput_iters,
        table(seed, samples, rows)
    );
    let _ = writeln!(t, "![seed 001](seed001-throughput.svg) ![seed 001 CDF](seed001-latency-cdf.svg)\n");
    for (bench, what) in [("inversion", "nice -20"), ("inversion-fifo", "SCHED_FIFO 50")] {
        let _ = writeln!(
            t,
            "## Seed 001: inversion workload, 2 high-priority senders ({what}) and 6 low-priority (nice 19) to one server, one CPU hog per CPU; {} calls per high sender, {} runs per driver\n\nMedian [95% CI] over runs; dir: the direction the seed's claim implies for the spinlock (latency down, throughput up), for the spinlock and for Rust.\n\n```\n{}```\n",
            sizes.inv_iters,
            sizes.inv_runs,
            inversion_table(bench, rows)
        );
        let _ = writeln!(t, "![{bench} CDF](seed001-{bench}-cdf.svg)\n");
    }
    t
}

/// The plots: throughput bars, the throughput latency CDF, and the high-priority senders'
/// latency CDF of each inversion variant, one line per driver.
pub fn write_plots(out: &Path, rows: &BTreeMap<String, Row>, events: &[Event]) -> Result<()> {
    let labels: Vec<&str> = DRIVERS.iter().map(|d| d.2).collect();
    if let Some(row) = rows.get("throughput.iterations_per_sec") {
        crate::numbers::plots::bars(
            &out.join("seed001-throughput.svg"),
            "Seed 001: binderThroughputTest -w 2, iterations/s (median, 95% CI)",
            row,
            &labels,
        )?;
    }
    let t = bench::samples_ms(events, "throughput", "throughput", "/samples_ms");
    crate::numbers::plots::cdf(
        &out.join("seed001-latency-cdf.svg"),
        "Seed 001: -w 2 call latency CDF (to p99)",
        &t,
        &labels,
        99.0,
    )?;
    for b in ["inversion", "inversion-fifo"] {
        let h = bench::samples_ms(events, b, "inversion", "/high/samples_ms");
        let title = format!("{b}: high-priority call latency CDF (to p99.9)");
        crate::numbers::plots::cdf(&out.join(format!("seed001-{b}-cdf.svg")), &title, &h, &labels, 99.9)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_with(data: &[(&str, u32, &[f64])]) -> (Samples, BTreeMap<String, Row>) {
        let mut s: Samples = BTreeMap::new();
        for (metric, m, v) in data {
            s.entry(metric.to_string()).or_default().insert(*m, v.to_vec());
        }
        let rows = crate::numbers::samples::summarise(&s);
        (s, rows)
    }

    #[test]
    fn three_columns_with_marks_per_treatment() {
        #[derive(Deserialize)]
        struct Seeds {
            seed001: Seed001,
        }
        let seeds: Seeds = toml::from_str(include_str!("../../seeds.toml")).unwrap();
        let t = "throughput.iterations_per_sec";
        let (s, rows) = rows_with(&[
            (t, 0, &[1000.0, 1500.0, 2000.0, 1200.0, 1500.0]),
            (t, 1, &[1010.0, 1490.0, 1990.0, 1210.0, 1500.0]),
            (t, 2, &[3000.0, 3100.0, 3050.0, 2990.0, 3020.0]),
        ]);
        let out = table(&seeds.seed001, &s, &rows);
        assert!(out.contains("C spinlock (cbinder-spin)") && out.contains("Rust (perf)"), "{out}");
        assert!(out.contains("27.0 K-59.0 K iter/s") && out.contains("~80% improvement"), "{out}");
        let med = out.lines().find(|l| l.contains("  med") && l.contains("[")).unwrap();
        // Spinlock ~ no change (CI spans 0): "~"; Rust clearly faster: "✓".
        assert!(med.ends_with("~ ✓"), "{out}");
        assert!(out.contains("2.00x, CV 26.3%"), "{out}");
    }

    #[test]
    fn inversion_rows_mark_the_claimed_direction_only() {
        let (_, rows) = rows_with(&[
            ("inversion.high.p99_ms", 0, &[9.0, 10.0, 11.0, 10.5, 10.0]),
            ("inversion.high.p99_ms", 1, &[2.0, 2.1, 1.9, 2.05, 2.0]),
            ("inversion.high.p99_ms", 2, &[2.2, 2.3, 2.1, 2.25, 2.2]),
            ("inversion.low.p99_ms", 0, &[5.0, 5.0, 5.1, 4.9, 5.0]),
            ("inversion.low.p99_ms", 1, &[9.0, 9.0, 9.1, 8.9, 9.0]),
        ]);
        let t = inversion_table("inversion", &rows);
        let high = t.lines().find(|l| l.starts_with("high p99 ")).unwrap();
        assert!(high.ends_with("✓ ✓") && high.contains("-80."), "{t}");
        let low = t.lines().find(|l| l.starts_with("low p99 ")).unwrap();
        assert!(low.ends_with("- -"), "{t}");
        assert!(t.lines().find(|l| l.starts_with("high max")).unwrap().contains("n/a"), "{t}");
    }

    /// Deterministic boots with one `-seed` repeat each other bit for bit: one per driver, or
    /// the model's `--boots`, each with its own seed and all of the runs.
    #[test]
    fn deterministic_boots_are_never_duplicates() {
        use crate::harness::qemu::Tcg;
        let sizes = Size { runs: 4, tput_iters: 10, inv_runs: 2, inv_iters: 5 };
        let steps = |p: &labproto::Plan, bench: &str| {
            p.steps.iter().filter(|s| s.argv[0] == format!("/bin/binder-{bench}")).count()
        };
        for tcg in [Tcg::Icount, Tcg::Hicount] {
            let b = boots(sizes, &RunOpts { tcg, ..RunOpts::default() }, None);
            assert_eq!(b.len(), DRIVERS.len(), "{tcg:?}");
            assert_eq!(steps(&b[0].0, "throughput"), 4);
        }
        let b = boots(sizes, &RunOpts { tcg: Tcg::Single, ..RunOpts::default() }, None);
        assert_eq!((b.len(), steps(&b[0].0, "throughput")), (2 * DRIVERS.len(), 2));
        let b = boots(sizes, &RunOpts { tcg: Tcg::Hicount, ..RunOpts::default() }, Some(3));
        assert_eq!(b.len(), 3 * DRIVERS.len());
        let mut seeds: Vec<(String, u32)> = b.iter().map(|(_, o)| (o.flavor.clone(), o.qemu_seed)).collect();
        seeds.sort();
        seeds.dedup();
        assert_eq!(seeds.len(), 3 * DRIVERS.len(), "a driver booted twice with one -seed: {seeds:?}");
        assert!(b.iter().all(|(p, _)| steps(p, "throughput") == 4 && steps(p, "inversion") == 4));
    }

    #[test]
    fn modes_boot_their_flavors() {
        let base = RunOpts::default();
        assert_eq!(flavor_of(0, &base), "cbinder");
        assert_eq!(flavor_of(1, &base), "cbinder-spin");
        assert_eq!(flavor_of(2, &base), base.flavor);
    }
}
