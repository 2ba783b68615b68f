//! `lab bench --matrix`: seed 000 in the four configurations of thread pool × EAS, one boot
//! each, and one table of every configuration's changes against the seed's, with marks.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::measure::bench::{self, Config, Profile};
use crate::measure::reproduce::{lab_dir, mark, seed_dir, seeds, Seeds, LEGEND};
use crate::numbers::samples::Row;
use crate::numbers::table::show_delta;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// libbinder's pool and a fixed pool of two loopers (the lab's old default), each with and
/// without the board's EAS; the first is the default of `bench` and `reproduce`.
pub const CONFIGS: [Config; 4] = [
    Config { threads: None, eas: true, cache: false },
    Config { threads: Some(2), eas: true, cache: false },
    Config { threads: None, eas: false, cache: false },
    Config { threads: Some(2), eas: false, cache: false },
];

/// A short column name: `AOSP+EAS`, `2thr+EAS`, `AOSP`, `2thr`.
pub fn label(c: &Config) -> String {
    let pool = c.threads.map_or("AOSP".to_string(), |n| format!("{n}thr"));
    if c.eas {
        format!("{pool}+EAS")
    } else {
        pool
    }
}

/// `+1.2% [+0.4, +2.0] ✓` for one change, against the seed's change `seed_pct`.
fn cell(rows: &BTreeMap<String, Row>, metric: &str, mode: u32, seed_pct: Option<f64>) -> String {
    let Some(e) = rows.get(metric).and_then(|r| r.delta_pct.get(&mode)) else { return "n/a".into() };
    let m = seed_pct.map(|s| mark(seed_dir(s), Some(lab_dir(e)))).unwrap_or(" ");
    format!("{} {m}", show_delta(Some(*e)))
}

/// One row per (metric, patch): the lab's Δ in each configuration with its mark, after the
/// seed's Δ; then the selections per mode.
pub fn table(seeds: &Seeds, runs: &[(Config, BTreeMap<String, Row>)]) -> String {
    let w = 24;
    let mut s = format!("{:<30} {:>8}", "Metric", "seed");
    runs.iter().for_each(|(c, _)| s += &format!(" {:>w$}", label(c)));
    s.push('\n');
    let mut line = |name: String, seed: Option<f64>, metric: &str, mode: u32| {
        let _ = write!(s, "{name:<30} {:>8}", seed.map_or("".into(), |v| format!("{v:+.1}%")));
        for (_, rows) in runs {
            let _ = write!(s, " {:>w$}", cell(rows, metric, mode, seed));
        }
        s.push('\n');
    };
    let pct = |a: f64, b: f64| (b - a) / a * 100.0;
    for r in seeds.seed000.throughput.iter().filter(|r| !r.metric.is_empty()) {
        for mode in [1, 2] {
            line(format!("{} Δ P{mode}/2", r.name), Some(pct(r.values[0], r.values[mode as usize])), &r.metric, mode);
        }
    }
    for r in &seeds.seed000.tiers {
        let m = format!("tiers.{}.{}.avg_ms", r.class, r.tier);
        for mode in [1, 2] {
            let name = format!("{} {} avg Δ P{mode}/2", r.class, r.tier);
            line(name, Some(pct(r.avg_ms[0], r.avg_ms[mode as usize])), &m, mode);
        }
    }
    let _ = writeln!(s, "\nThread selections: no_waiter share of binder-throughput's picks, modes 0 / 1 / 2");
    for (c, rows) in runs {
        let v = |m: u32| {
            rows.get("throughput.ctabs.no_waiter_pct")
                .and_then(|r| r.per_mode.get(&m))
                .map_or("n/a".into(), |e| format!("{:.1}%", e.value))
        };
        let _ = writeln!(s, "{:<12} {} / {} / {}", label(c), v(0), v(1), v(2));
    }
    s
}

/// Runs the four configurations, `boots` boots each ([`bench::boot_opts`]; all at once as
/// `-j` allows), and writes `matrix.md` into `out`. Returns whether every run passed and the
/// text.
pub fn run(profile: Profile, reps: usize, boots: usize, base: &RunOpts, out: &Path) -> Result<(bool, String)> {
    let seeds = seeds()?;
    let mut runs: Vec<(Config, BTreeMap<String, Row>)> = vec![];
    let mut outcomes: Vec<Outcome> = vec![];
    let mut sections = String::new();
    let opts =
        |c: &Config| RunOpts { no_eas: !c.eas, name: format!("bench-{}", label(c).replace('+', "-")), ..base.clone() };
    let items: Vec<(Config, RunOpts)> =
        CONFIGS.iter().flat_map(|c| bench::boot_opts(&opts(c), boots).into_iter().map(move |o| (*c, o))).collect();
    let done = crate::harness::boots::each(
        base,
        &items,
        |(c, o)| format!("{} seed {}", label(c), o.qemu_seed),
        |(c, o)| bench::execute(profile, reps, c.threads, o),
    )?;
    for c in CONFIGS {
        let mine: Vec<&(Outcome, String)> =
            items.iter().zip(&done).filter(|((ic, _), _)| *ic == c).map(|(_, d)| d).collect();
        let events: Vec<&[labproto::Event]> = mine.iter().map(|(o, _)| o.events.as_slice()).collect();
        let (_, rows) = crate::numbers::samples::summary(&events, base.tcg.deterministic());
        let dirs: Vec<String> = mine.iter().map(|(o, _)| o.dir.display().to_string()).collect();
        let first = mine.first().map(|(_, t)| t.trim_start_matches('#').to_string()).unwrap_or_default();
        let _ = writeln!(sections, "\n# {} ({}; the first boot's report)\n\n{first}", label(&c), dirs.join(", "));
        runs.push((c, rows));
    }
    outcomes.extend(done.into_iter().map(|(o, _)| o));
    let text = format!(
        "# Seed 000 in four configurations ({boots} boot(s) of {reps} interleaved repetitions per mode each; intervals over boots)\n\n{LEGEND}\n\n```\n{}```\n{sections}",
        table(&seeds, &runs)
    );
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("matrix.md"), &text).context("writing matrix.md")?;
    Ok((outcomes.iter().all(Outcome::ok), text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::stats::Estimate;

    #[test]
    fn table_marks_each_configuration() {
        let e = |v: f64| Estimate { value: v, lo: v - 1.0, hi: v + 1.0, n: 5, boots: 0 };
        let row = |d: f64| Row { per_mode: [(0, e(50.0))].into(), delta_pct: [(1, e(d)), (2, e(d))].into() };
        let up: BTreeMap<String, Row> = [("throughput.iterations_per_sec".to_string(), row(5.0))].into();
        let down: BTreeMap<String, Row> = [("throughput.iterations_per_sec".to_string(), row(-5.0))].into();
        let flat: BTreeMap<String, Row> = [("throughput.ctabs.no_waiter_pct".to_string(), row(0.0))].into();
        let runs = vec![(CONFIGS[0], up), (CONFIGS[1], down), (CONFIGS[2], flat)];
        let t = table(&seeds().unwrap(), &runs);
        let tput = t.lines().find(|l| l.starts_with("Throughput Δ P1/2")).unwrap();
        // The seed's throughput rose 12.7%: up ✓, down ✗, no figure n/a.
        assert!(tput.contains("+12.7%") && tput.contains("+5.0% [+4.0, +6.0] ✓"), "{t}");
        assert!(tput.contains("-5.0% [-6.0, -4.0] ✗") && tput.contains("n/a"), "{t}");
        assert!(t.lines().next().unwrap().contains("AOSP+EAS") && t.contains("2thr+EAS") && t.contains("AOSP "), "{t}");
        assert!(t.contains("other cross_cluster avg Δ P2/2"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("AOSP ") && l.contains("50.0% / n/a / n/a")), "{t}");
    }
}
