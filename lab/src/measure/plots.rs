//! SVG plots for the benchmark report: throughput per mode with its CI, the latency CDF per
//! mode, and the share of each tier per mode.

use crate::measure::samples::{Row, MODE_NAMES};
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
    let pts: Vec<(f64, u32, crate::measure::stats::Estimate)> = rows
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
        let mut line: Vec<(f64, crate::measure::stats::Estimate)> =
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
    let pooled = crate::measure::stats::sorted(&samples_ms.values().flatten().copied().collect::<Vec<_>>());
    let max = crate::measure::stats::percentile_sorted(&pooled, upto).unwrap_or(1.0).max(1e-3);
    let root = canvas(path)?;
    let mut chart = chart(&root, title, 18, 40, (0f64..max, 0f64..1f64))?;
    chart.configure_mesh().x_desc("ms").y_desc("fraction").draw().map_err(err)?;
    for (m, v) in samples_ms {
        let s = crate::measure::stats::sorted(v);
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

/// Share of transactions per tier (normal class), grouped bars per mode.
pub fn tiers(path: &Path, rows: &BTreeMap<String, Row>, class: &str) -> Result<()> {
    let tiers = ["same_core", "same_cluster", "cross_cluster"];
    let root = canvas(path)?;
    let mut chart = chart(
        &root,
        &format!("{class}: share per tier, median % (grey Baseline, blue P1/2, red P2/2)"),
        16,
        40,
        (-0.5f64..2.5f64, 0f64..100f64),
    )?;
    chart
        .configure_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| tiers.get(x.round() as usize).copied().unwrap_or("").to_string())
        .draw()
        .map_err(err)?;
    for (t, tier) in tiers.iter().enumerate() {
        let Some(row) = rows.get(&format!("tiers.{class}.{tier}.pct")) else { continue };
        for (m, e) in &row.per_mode {
            let x = t as f64 - 0.3 + 0.2 * *m as f64;
            let c = COLORS[(*m as usize).min(2)];
            chart.draw_series([Rectangle::new([(x, 0.0), (x + 0.18, e.value)], c.filled())]).map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Every plot of a benchmark run into `dir`.
pub fn write_all(dir: &Path, rows: &BTreeMap<String, Row>, latency_ms: &BTreeMap<u32, Vec<f64>>) -> Result<()> {
    throughput(&dir.join("throughput.svg"), rows)?;
    latency_cdf(&dir.join("latency-cdf.svg"), latency_ms)?;
    tiers(&dir.join("tiers-other.svg"), rows, "other")?;
    tiers(&dir.join("tiers-fifo.svg"), rows, "fifo")?;
    Ok(())
}
