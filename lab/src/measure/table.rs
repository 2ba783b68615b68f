//! Shared pieces of the seed tables: directions and their marks, estimates by metric and
//! mode, and the number formats the seed mails use.

use crate::measure::samples::Row;
use crate::measure::stats::Estimate;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Direction of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Up,
    Down,
    Flat,
}

/// The seed's figures carry no error bars: changes under 1% count as no change.
pub fn seed_dir(delta_pct: f64) -> Dir {
    if delta_pct > 1.0 {
        Dir::Up
    } else if delta_pct < -1.0 {
        Dir::Down
    } else {
        Dir::Flat
    }
}

/// The lab's direction: only a change whose 95% CI excludes zero counts.
pub fn lab_dir(e: &Estimate) -> Dir {
    if e.lo > 0.0 {
        Dir::Up
    } else if e.hi < 0.0 {
        Dir::Down
    } else {
        Dir::Flat
    }
}

/// ✓ same direction, ~ no significant change in the lab where the seed saw one, ✗ otherwise.
pub fn mark(seed: Dir, lab: Option<Dir>) -> &'static str {
    match lab {
        None => "?",
        Some(l) if l == seed => "✓",
        Some(Dir::Flat) => "~",
        Some(_) => "✗",
    }
}

pub const LEGEND: &str =
    "Direction: ✓ the lab's change has the seed's sign (95% CI excludes 0, or both show no change); \
~ the lab's CI spans 0 where the seed reports a change; ✗ opposite, or a change where the seed reports none; \
? no lab value. Seed changes under 1% count as no change.";

pub fn pct(from: f64, to: f64) -> f64 {
    (to - from) / from * 100.0
}

pub fn est(rows: &BTreeMap<String, Row>, metric: &str, mode: u32) -> Option<Estimate> {
    rows.get(metric)?.per_mode.get(&mode).copied()
}

pub fn delta(rows: &BTreeMap<String, Row>, metric: &str, mode: u32) -> Option<Estimate> {
    rows.get(metric)?.delta_pct.get(&mode).copied()
}

/// `0.512 [0.50, 0.53]`, or n/a.
pub fn show(e: Option<Estimate>, digits: usize) -> String {
    e.map(|e| e.show(digits)).unwrap_or_else(|| "n/a".into())
}

pub fn show_delta(e: Option<Estimate>) -> String {
    e.map(|e| format!("{:+.1}% [{:+.1}, {:+.1}]", e.value, e.lo, e.hi)).unwrap_or_else(|| "n/a".into())
}

/// Large counts as the seed writes them (143.15 B, 1,078 M).
pub fn big(v: f64) -> String {
    match v.abs() {
        x if x >= 1e9 => format!("{:.2} B", v / 1e9),
        x if x >= 1e6 => format!("{:.1} M", v / 1e6),
        x if x >= 1e4 => format!("{:.1} K", v / 1e3),
        _ => format!("{v:.0}"),
    }
}

/// A lab estimate in the row's unit: ms with 3 decimals, counts as the seed writes them.
pub fn show_in(e: Option<Estimate>, unit: &str) -> String {
    match e {
        Some(e) if unit == "ms" => e.show(3),
        Some(e) => format!("{} [{}, {}]", big(e.value), big(e.lo), big(e.hi)),
        None => "n/a".into(),
    }
}

/// The lab's line under a seed line: `head` (the table's first columns, blank, then the
/// row's label; see [`lab_head`]), the three modes' estimates of `metric` in `unit`, both
/// changes against Baseline with their CIs, and the direction marks against the seed's
/// changes `seed_pct` (Patch 1/2, Patch 2/2).
/// The start of a [`lab_row`]: `lead` (blank first columns) and `label` padded to 5.
pub fn lab_head(lead: &str, label: &str) -> String {
    format!("{lead} {label:<5}")
}

pub fn lab_row(
    s: &mut String,
    head: &str,
    w: usize,
    rows: &BTreeMap<String, Row>,
    metric: &str,
    unit: &str,
    seed_pct: [f64; 2],
) {
    let (d1, d2) = (delta(rows, metric, 1), delta(rows, metric, 2));
    let _ = writeln!(
        s,
        "{head} {:>w$} {:>w$} {:>w$} {:>w$} {:>w$}  {} {}",
        show_in(est(rows, metric, 0), unit),
        show_in(est(rows, metric, 1), unit),
        show_in(est(rows, metric, 2), unit),
        show_delta(d1),
        show_delta(d2),
        mark(seed_dir(seed_pct[0]), d1.as_ref().map(lab_dir)),
        mark(seed_dir(seed_pct[1]), d2.as_ref().map(lab_dir))
    );
}
