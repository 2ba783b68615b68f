//! SVG plots for the benchmark report: throughput per mode with its CI, the latency CDF per
//! mode, the share of each tier per mode and each tier's latency change, with their CIs and
//! the seed's own figures as reference marks.

use crate::numbers::samples::{Row, MODE_NAMES};
use anyhow::{anyhow, Result};
use plotters::coord::{types::RangedCoordf64, Shift};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

const COLORS: [RGBColor; 3] = [RGBColor(90, 90, 90), RGBColor(31, 119, 180), RGBColor(214, 39, 40)];

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A white 640x400 SVG at `path`.
fn canvas(path: &Path) -> Result<DrawingArea<SVGBackend<'_>, Shift>> {
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// A chart on `root` with the report's caption font, margin and label areas.
fn chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    font: u32,
    y_area: u32,
    (x, y): (std::ops::Range<f64>, std::ops::Range<f64>),
) -> Result<Chart<'a, 'b>> {
    ChartBuilder::on(root)
        .caption(caption, ("sans-serif", font))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(y_area)
        .build_cartesian_2d(x, y)
        .map_err(err)
}

/// Throughput medians per mode with 95% CI whiskers.
pub fn throughput(path: &Path, rows: &BTreeMap<String, Row>) -> Result<()> {
    let Some(row) = rows.get("throughput.iterations_per_sec") else { return Ok(()) };
    bars(path, "binderThroughputTest: iterations/s (median, 95% CI)", row, &MODE_NAMES)
}

/// One bar per mode (its median) with the 95% CI as a whisker; `labels[mode]` names the bars.
pub fn bars(path: &Path, title: &str, row: &Row, labels: &[&str]) -> Result<()> {
    let top = row.per_mode.values().map(|e| e.hi).fold(0.0, f64::max) * 1.15;
    let n = labels.len() as f64;
    let root = canvas(path)?;
    let mut chart = chart(&root, title, 18, 60, (-0.5f64..n - 0.5, 0f64..top.max(1.0)))?;
    chart
        .configure_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|x| labels.get(x.round() as usize).copied().unwrap_or("").to_string())
        .draw()
        .map_err(err)?;
    for (m, e) in &row.per_mode {
        let x = *m as f64;
        let c = COLORS[(*m as usize).min(2)];
        chart.draw_series([Rectangle::new([(x - 0.3, 0.0), (x + 0.3, e.value)], c.mix(0.6).filled())]).map_err(err)?;
        chart.draw_series([PathElement::new(vec![(x, e.lo), (x, e.hi)], BLACK.stroke_width(2))]).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Seed 002's shape: median ns per call against payload size, one line per mode, CI whiskers.
pub fn sendvec(path: &Path, rows: &BTreeMap<String, Row>, metric: &str, labels: &[&str]) -> Result<()> {
    // (size, mode, estimate) for every sendvec.<size>.<metric> row.
    let pts: Vec<(f64, u32, crate::numbers::stats::Estimate)> = rows
        .iter()
        .filter_map(|(k, r)| {
            let size: f64 = k.strip_prefix("sendvec.")?.strip_suffix(&format!(".{metric}"))?.parse().ok()?;
            Some(r.per_mode.iter().map(move |(m, e)| (size, *m, *e)))
        })
        .flatten()
        .collect();
    if pts.is_empty() {
        return Ok(());
    }
    let top = pts.iter().map(|p| p.2.hi).fold(0.0, f64::max) * 1.15;
    let max_x = pts.iter().map(|p| p.0.log2()).fold(0.0, f64::max) + 0.5;
    let root = canvas(path)?;
    let mut chart = chart(
        &root,
        &format!("BM_sendVec: {metric} per call (median, 95% CI)"),
        18,
        70,
        (1.5f64..max_x, 0f64..top.max(1.0)),
    )?;
    chart
        .configure_mesh()
        .x_desc("payload bytes")
        .x_label_formatter(&|x| format!("{}", 2f64.powf(x.round()) as u64))
        .draw()
        .map_err(err)?;
    let modes: std::collections::BTreeSet<u32> = pts.iter().map(|p| p.1).collect();
    for m in modes {
        let c = COLORS[(m as usize).min(2)];
        let mut line: Vec<(f64, crate::numbers::stats::Estimate)> =
            pts.iter().filter(|p| p.1 == m).map(|p| (p.0.log2(), p.2)).collect();
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let dx = 0.06 * m as f64; // keep the whiskers of the modes apart
        chart
            .draw_series(LineSeries::new(line.iter().map(|(x, e)| (x + dx, e.value)), c.stroke_width(2)))
            .map_err(err)?
            .label(labels.get(m as usize).copied().unwrap_or(""))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        for (x, e) in &line {
            chart
                .draw_series([PathElement::new(vec![(x + dx, e.lo), (x + dx, e.hi)], c.stroke_width(1))])
                .map_err(err)?;
        }
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Empirical CDF of per-call latency, one line per mode (all repetitions pooled).
pub fn latency_cdf(path: &Path, samples_ms: &BTreeMap<u32, Vec<f64>>) -> Result<()> {
    // Up to the 99th percentile: the rare multi-ms outliers would squash the body of the curve.
    cdf(path, "Transaction latency CDF (to p99)", samples_ms, &MODE_NAMES, 99.0)
}

/// An empirical CDF per mode, labelled `labels[mode]`, cut at percentile `upto` of all samples.
pub fn cdf(path: &Path, title: &str, samples_ms: &BTreeMap<u32, Vec<f64>>, labels: &[&str], upto: f64) -> Result<()> {
    if samples_ms.values().all(Vec::is_empty) {
        return Ok(());
    }
    let pooled = crate::numbers::stats::sorted(&samples_ms.values().flatten().copied().collect::<Vec<_>>());
    let max = crate::numbers::stats::percentile_sorted(&pooled, upto).unwrap_or(1.0).max(1e-3);
    let root = canvas(path)?;
    let mut chart = chart(&root, title, 18, 40, (0f64..max, 0f64..1f64))?;
    chart.configure_mesh().x_desc("ms").y_desc("fraction").draw().map_err(err)?;
    for (m, v) in samples_ms {
        let s = crate::numbers::stats::sorted(v);
        let n = s.len() as f64;
        let c = COLORS[(*m as usize).min(2)];
        chart
            .draw_series(LineSeries::new(
                s.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64 / n)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(labels.get(*m as usize).copied().unwrap_or("?"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Step lines over time: each series (its name, then (x, y) at the start and at each change)
/// holds its value until the next point, up to `x_end`. For clocks during a phase (ms, MHz).
pub fn clock_steps(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)], x_end: f64) -> Result<()> {
    let top = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).fold(0.0, f64::max) * 1.1;
    let root = canvas(path)?;
    let mut chart = chart(&root, title, 16, 50, (0f64..x_end.max(1e-3), 0f64..top.max(1.0)))?;
    chart.configure_mesh().x_desc("ms since the phase began").y_desc("MHz").draw().map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut line = vec![];
        for (j, &(x, y)) in pts.iter().enumerate() {
            let next = pts.get(j + 1).map_or(x_end, |p| p.0);
            line.extend([(x, y), (next, y)]);
        }
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

const TIERS: [&str; 3] = ["same_core", "same_cluster", "cross_cluster"];

/// The seed's Baseline share (%) and its Patch 1/2 and 2/2 changes of the average latency
/// (%) for `class`, by tier, from the seeds file (read here as plain TOML: the seed tables'
/// module draws on this one).
fn seed_tiers(class: &str) -> BTreeMap<String, (f64, [f64; 2])> {
    let Ok(v) = include_str!("../../seeds.toml").parse::<toml::Table>() else { return BTreeMap::new() };
    let rows = v.get("seed000").and_then(|s| s.get("tiers")).and_then(|t| t.as_array()).cloned().unwrap_or_default();
    let pct = crate::numbers::table::pct;
    rows.iter()
        .filter(|r| r.get("class").and_then(|c| c.as_str()) == Some(class))
        .filter_map(|r| {
            let ms: Vec<f64> = r.get("avg_ms")?.as_array()?.iter().filter_map(toml::Value::as_float).collect();
            let share = r.get("pct")?.as_float()?;
            let tier = r.get("tier")?.as_str()?.to_string();
            Some((tier, (share, [pct(*ms.first()?, *ms.get(1)?), pct(ms[0], *ms.get(2)?)])))
        })
        .collect()
}

/// Whiskers' colour: near black, told apart from the axes in the SVG.
const WHISKER: RGBColor = RGBColor(20, 20, 20);

/// A 95% CI whisker at `x` with short caps.
fn whisker(chart: &mut Chart<'_, '_>, x: f64, e: &crate::numbers::stats::Estimate) -> Result<()> {
    let cap = 0.03;
    for path in
        [vec![(x, e.lo), (x, e.hi)], vec![(x - cap, e.lo), (x + cap, e.lo)], vec![(x - cap, e.hi), (x + cap, e.hi)]]
    {
        chart.draw_series([PathElement::new(path, WHISKER.stroke_width(1))]).map_err(err)?;
    }
    Ok(())
}

/// The seed's value as a reference: a thick black line across a group of bars.
fn reference(chart: &mut Chart<'_, '_>, (x0, x1): (f64, f64), y: f64) -> Result<()> {
    chart.draw_series([PathElement::new(vec![(x0, y), (x1, y)], BLACK.stroke_width(3))]).map_err(err)?;
    Ok(())
}

/// Share of transactions per tier of `class`, grouped bars per mode (median, 95% CI
/// whiskers), with the seed's Baseline share as a black line over each group.
pub fn tiers(path: &Path, rows: &BTreeMap<String, Row>, class: &str) -> Result<()> {
    let seed = seed_tiers(class);
    let root = canvas(path)?;
    let mut chart = chart(
        &root,
        &format!(
            "{class}: share per tier, median % and 95% CI (grey Baseline, blue P1/2, red P2/2; black: seed Baseline)"
        ),
        13,
        40,
        (-0.5f64..2.5f64, 0f64..105f64),
    )?;
    chart
        .configure_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| TIERS.get(x.round() as usize).copied().unwrap_or("").to_string())
        .draw()
        .map_err(err)?;
    for (t, tier) in TIERS.iter().enumerate() {
        if let Some((pct, _)) = seed.get(*tier) {
            reference(&mut chart, (t as f64 - 0.4, t as f64 + 0.4), *pct)?;
        }
        let Some(row) = rows.get(&format!("tiers.{class}.{tier}.pct")) else { continue };
        for (m, e) in row.per_mode.iter().filter(|(m, _)| **m < 3) {
            let x = t as f64 - 0.3 + 0.2 * *m as f64;
            let c = COLORS[*m as usize];
            chart.draw_series([Rectangle::new([(x, 0.0), (x + 0.18, e.value)], c.filled())]).map_err(err)?;
            whisker(&mut chart, x + 0.09, e)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The change of each tier's average latency of `class` against Baseline, Patch 1/2 (blue)
/// and 2/2 (red), with 95% CI whiskers; the seed's change as a black line over each bar,
/// and the ±1% band inside which a change counts as none shaded.
pub fn tier_deltas(path: &Path, rows: &BTreeMap<String, Row>, class: &str) -> Result<()> {
    let seed = seed_tiers(class);
    let mut bars = vec![];
    for (t, tier) in TIERS.iter().enumerate() {
        let row = rows.get(&format!("tiers.{class}.{tier}.avg_ms"));
        for m in [1u32, 2] {
            let x = t as f64 - 0.2 + 0.25 * f64::from(m - 1);
            let e = row.and_then(|r| r.delta_pct.get(&m)).filter(|e| !crate::numbers::table::too_few(e));
            let s = seed.get(*tier).map(|(_, d)| d[m as usize - 1]);
            bars.push((x, m, e.copied(), s));
        }
    }
    let ys = bars.iter().flat_map(|(_, _, e, s)| [e.map(|e| e.lo), e.map(|e| e.hi), *s]).flatten();
    let (lo, hi) = ys.fold((-2.0f64, 2.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let pad = 0.1 * (hi - lo);
    let root = canvas(path)?;
    let mut chart = chart(
        &root,
        &format!("{class}: avg latency per tier, Δ% vs Baseline and 95% CI (blue P1/2, red P2/2; black: seed)"),
        13,
        50,
        (-0.5f64..2.5f64, lo - pad..hi + pad),
    )?;
    chart
        .configure_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| TIERS.get(x.round() as usize).copied().unwrap_or("").to_string())
        .y_desc("Δ %")
        .draw()
        .map_err(err)?;
    let band = crate::numbers::table::DEAD_BAND_PCT;
    chart
        .draw_series([Rectangle::new([(-0.5, -band), (2.5, band)], RGBColor(200, 200, 200).mix(0.5).filled())])
        .map_err(err)?;
    for (x, m, e, s) in bars {
        if let Some(e) = e {
            let c = COLORS[m as usize];
            chart.draw_series([Rectangle::new([(x - 0.1, 0.0), (x + 0.1, e.value)], c.filled())]).map_err(err)?;
            whisker(&mut chart, x, &e)?;
        }
        if let Some(s) = s {
            reference(&mut chart, (x - 0.12, x + 0.12), s)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The tier plots of both classes into `dir` (the model's report writes these).
pub fn write_tiers(dir: &Path, rows: &BTreeMap<String, Row>) -> Result<()> {
    for class in ["other", "fifo"] {
        tiers(&dir.join(format!("tiers-{class}.svg")), rows, class)?;
        tier_deltas(&dir.join(format!("tier-latency-{class}.svg")), rows, class)?;
    }
    Ok(())
}

/// Every plot of a benchmark run into `dir`.
pub fn write_all(dir: &Path, rows: &BTreeMap<String, Row>, latency_ms: &BTreeMap<u32, Vec<f64>>) -> Result<()> {
    throughput(&dir.join("throughput.svg"), rows)?;
    latency_cdf(&dir.join("latency-cdf.svg"), latency_ms)?;
    write_tiers(dir, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::samples::{summarise, Samples};

    /// Whisker strokes (1) or reference lines (3) in an SVG: plotters draws both as polylines.
    fn lines(svg: &str, width: u32) -> usize {
        let w = if width == 1 { "stroke=\"#141414\" stroke-width=\"1\"" } else { "stroke-width=\"3\"" };
        svg.split("<polyline").skip(1).filter(|p| p.split('>').next().is_some_and(|tag| tag.contains(w))).count()
    }

    #[test]
    fn tier_plots_carry_whiskers_and_the_seeds_marks() {
        let mut s = Samples::new();
        for (tier, pct, ms) in [("same_core", 10.0, 0.10), ("same_cluster", 60.0, 0.12), ("cross_cluster", 30.0, 0.15)]
        {
            for m in 0..3u32 {
                let v = |x: f64| (0..5).map(|i| x * (1.0 + 0.01 * f64::from(m) + 0.002 * f64::from(i))).collect();
                s.entry(format!("tiers.other.{tier}.pct")).or_default().insert(m, v(pct));
                s.entry(format!("tiers.other.{tier}.avg_ms")).or_default().insert(m, v(ms));
            }
        }
        let rows = summarise(&s);
        let dir = tempfile::tempdir().unwrap();
        write_tiers(dir.path(), &rows).unwrap();
        let share = std::fs::read_to_string(dir.path().join("tiers-other.svg")).unwrap();
        // Nine bars, each with a whisker of three strokes; three seed shares (46.2/32.9/20.9%).
        assert_eq!(lines(&share, 1), 27, "{share}");
        assert_eq!(lines(&share, 3), 3);
        let delta = std::fs::read_to_string(dir.path().join("tier-latency-other.svg")).unwrap();
        // Six changes (two patches x three tiers) with whiskers, and the seed's six.
        assert_eq!((lines(&delta, 1), lines(&delta, 3)), (18, 6), "{delta}");
        // No FIFO rows: the seed's marks alone, no bars.
        let fifo = std::fs::read_to_string(dir.path().join("tiers-fifo.svg")).unwrap();
        assert_eq!((lines(&fifo, 1), lines(&fifo, 3)), (0, 3));
    }

    #[test]
    fn clock_steps_draw_one_line_per_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clocks.svg");
        let series =
            vec![("silver".to_string(), vec![(0.0, 300.0), (2.0, 1785.6)]), ("gold".to_string(), vec![(0.0, 710.4)])];
        clock_steps(&path, "clocks", &series, 4.0).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("silver") && svg.contains("gold"), "{svg}");
        // Two series plus their two legend marks, all 2 px wide.
        assert_eq!(svg.matches("stroke-width=\"2\"").count(), 4, "{svg}");
    }
}
