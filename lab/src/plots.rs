//! SVG plots for the benchmark report: throughput per mode with its CI, the latency CDF per
//! mode, and the share of each tier per mode.

use crate::bench::{Row, MODE_NAMES};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

const COLORS: [RGBColor; 3] = [RGBColor(90, 90, 90), RGBColor(31, 119, 180), RGBColor(214, 39, 40)];

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}

/// Throughput medians per mode with 95% CI whiskers.
pub fn throughput(path: &Path, rows: &BTreeMap<String, Row>) -> Result<()> {
    let Some(row) = rows.get("throughput.iterations_per_sec") else { return Ok(()) };
    let top = row.per_mode.values().map(|e| e.hi).fold(0.0, f64::max) * 1.15;
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("binderThroughputTest: iterations/s (median, 95% CI)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..2.5f64, 0f64..top.max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| MODE_NAMES.get(x.round() as usize).copied().unwrap_or("").to_string())
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

/// Empirical CDF of per-call latency, one line per mode (all repetitions pooled).
pub fn latency_cdf(path: &Path, samples_ms: &BTreeMap<u32, Vec<f64>>) -> Result<()> {
    if samples_ms.values().all(Vec::is_empty) {
        return Ok(());
    }
    // Up to the 99th percentile: the rare multi-ms outliers would squash the body of the curve.
    let pooled = crate::stats::sorted(&samples_ms.values().flatten().copied().collect::<Vec<_>>());
    let max = crate::stats::percentile_sorted(&pooled, 99.0).unwrap_or(1.0).max(1e-3);
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Transaction latency CDF (to p99)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..max, 0f64..1f64)
        .map_err(err)?;
    chart.configure_mesh().x_desc("ms").y_desc("fraction").draw().map_err(err)?;
    for (m, v) in samples_ms {
        let s = crate::stats::sorted(v);
        let n = s.len() as f64;
        let c = COLORS[(*m as usize).min(2)];
        chart
            .draw_series(LineSeries::new(
                s.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64 / n)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(MODE_NAMES[(*m as usize).min(2)])
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Share of transactions per tier (normal class), grouped bars per mode.
pub fn tiers(path: &Path, rows: &BTreeMap<String, Row>, class: &str) -> Result<()> {
    let tiers = ["same_core", "same_cluster", "cross_cluster"];
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{class}: share per tier, median % (grey Baseline, blue P1/2, red P2/2)"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(-0.5f64..2.5f64, 0f64..100f64)
        .map_err(err)?;
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
