//! Shared pieces of the seed tables: directions and their marks, estimates by metric and
//! mode, and the number formats the seed mails use.

use crate::numbers::samples::Row;
use crate::numbers::stats::Estimate;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Changes within this many percent count as no change, for the seed's figure and the lab's
/// alike (the seed's carry no error bars; the lab's interval must then lie inside the band).
pub const DEAD_BAND_PCT: f64 = 1.0;

/// Fewest independent samples per arm a lab figure needs (repetitions, or boots where each
/// boot gives one value, as the cache counters do). A bootstrap of fewer is far too narrow:
/// with n values, the range [min, max] holds the median with probability 1 - 2^(1-n), which
/// first reaches 90% at n = 5.
pub const MIN_SAMPLES: usize = 5;

/// Direction of a change; the lab's may also be unclear or rest on too few samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Up,
    Down,
    Flat,
    /// The interval neither shows a change beyond the dead band nor lies inside it.
    Unclear,
    /// Fewer than [`MIN_SAMPLES`] per arm.
    TooFew,
}

/// The seed's figures carry no error bars: changes within the dead band count as no change.
pub fn seed_dir(delta_pct: f64) -> Dir {
    if delta_pct > DEAD_BAND_PCT {
        Dir::Up
    } else if delta_pct < -DEAD_BAND_PCT {
        Dir::Down
    } else {
        Dir::Flat
    }
}

/// The independent samples an interval rests on: its boots where it resampled boots (the
/// timing model's boots differ, the repetitions inside one boot less so), else its samples.
pub fn units(e: &Estimate) -> usize {
    if e.boots > 0 {
        e.boots
    } else {
        e.n
    }
}

/// Whether `e` rests on too few samples (or boots) to be shown or marked.
pub fn too_few(e: &Estimate) -> bool {
    units(e) < MIN_SAMPLES
}

/// The lab's direction by the seed's rule: a change is beyond the dead band with a 95% CI that
/// excludes zero; no change needs the whole CI inside the band.
pub fn lab_dir(e: &Estimate) -> Dir {
    let band = DEAD_BAND_PCT;
    if too_few(e) {
        Dir::TooFew
    } else if e.value > band && e.lo > 0.0 {
        Dir::Up
    } else if e.value < -band && e.hi < 0.0 {
        Dir::Down
    } else if e.lo >= -band && e.hi <= band {
        Dir::Flat
    } else {
        Dir::Unclear
    }
}

/// ✓ the seed's direction (or both no change), ~ unclear in the lab, ✗ otherwise, ? no lab
/// value or too few samples.
pub fn mark(seed: Dir, lab: Option<Dir>) -> &'static str {
    match lab {
        None | Some(Dir::TooFew) => "?",
        Some(Dir::Unclear) => "~",
        Some(l) if l == seed => "✓",
        Some(_) => "✗",
    }
}

pub const LEGEND: &str = "Direction, one rule for both sides: a change is one beyond ±1% (the lab's also with a \
95% CI that excludes 0), no change is within ±1% (the lab's whole CI inside ±1%). ✓ the lab's direction is the seed's \
(or both show no change); ~ the lab's CI is neither; ✗ opposite, or a change on one side and none on the other; \
? no lab value, or fewer than 5 samples per arm (repetitions; boots where the interval resamples boots), shown as n/a (too few).";

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
    match e {
        Some(e) if too_few(&e) => few(&e),
        Some(e) => e.show(digits),
        None => "n/a".into(),
    }
}

/// What a figure on too few samples shows instead of its value.
pub fn few(e: &Estimate) -> String {
    if e.boots > 0 {
        format!("n/a (too few: {} boots)", e.boots)
    } else {
        format!("n/a (too few: {})", e.n)
    }
}

pub fn show_delta(e: Option<Estimate>) -> String {
    match e {
        Some(e) if too_few(&e) => few(&e),
        Some(e) => format!("{:+.1}% [{:+.1}, {:+.1}]", e.value, e.lo, e.hi),
        None => "n/a".into(),
    }
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
        Some(e) if too_few(&e) => few(&e),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn e(value: f64, lo: f64, hi: f64, n: usize) -> Estimate {
        Estimate { value, lo, hi, n, boots: 0 }
    }

    #[test]
    fn the_dead_band_applies_to_the_lab_too() {
        // +0.1% [+0.0, +0.2] is no change by the seed's own 1% rule: not the seed's +7.7%.
        assert_eq!(mark(seed_dir(7.7), Some(lab_dir(&e(0.1, 0.0, 0.2, 6)))), "✗");
        // The lab's +0.6% [+0.1, +0.9] is inside the band, as is the seed's 0.0%: both none.
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(0.6, 0.1, 0.9, 6)))), "✓");
        // A change beyond the band whose interval excludes zero is a change.
        assert_eq!(mark(seed_dir(7.7), Some(lab_dir(&e(7.4, 1.6, 12.4, 6)))), "✓");
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(-23.5, -27.7, -17.4, 6)))), "✓");
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(1.5, 1.0, 2.0, 6)))), "✗");
    }

    #[test]
    fn no_change_needs_the_interval_inside_the_band() {
        // Spanning zero is not enough: [-1, +2] could be a 2% change.
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(0.5, -1.0, 2.0, 6)))), "~");
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(0.0, -0.9, 0.9, 6)))), "✓");
        // Significant but the point inside the band, the interval reaching out of it: unclear.
        assert_eq!(mark(seed_dir(0.0), Some(lab_dir(&e(0.8, 0.3, 1.4, 6)))), "~");
        assert_eq!(mark(seed_dir(-20.9), Some(lab_dir(&e(-0.5, -3.0, 2.0, 6)))), "~");
    }

    #[test]
    fn too_few_samples_give_no_mark_and_say_so() {
        // 2-3 repetitions (the Baseline tier averages with >= 20 calls): no interval worth
        // a mark, whatever it says.
        for n in [2, 3] {
            let d = e(-9.6, -11.1, -7.8, n);
            assert_eq!(mark(seed_dir(-13.1), Some(lab_dir(&d))), "?", "n={n}");
            assert!(show_delta(Some(d)).starts_with("n/a (too few"), "{}", show_delta(Some(d)));
            assert!(show_in(Some(d), "ms").starts_with("n/a (too few"), "n={n}");
        }
        // One boot per mode (the cache rows): a point, not the interval [-1.3, -1.3].
        let point = e(-1.3, -1.3, -1.3, 1);
        assert_eq!(mark(seed_dir(-3.6), Some(lab_dir(&point))), "?");
        assert_eq!(show_delta(Some(point)), "n/a (too few: 1)");
        // Resampled over boots, the boots count: 30 samples from 3 boots are 3.
        let three_boots = Estimate { boots: 3, ..e(-9.6, -11.1, -7.8, 30) };
        assert_eq!(mark(seed_dir(-13.1), Some(lab_dir(&three_boots))), "?");
        assert_eq!(show_delta(Some(three_boots)), "n/a (too few: 3 boots)");
        let enough = e(-9.6, -11.1, -7.8, MIN_SAMPLES);
        assert_eq!(mark(seed_dir(-13.1), Some(lab_dir(&enough))), "✓");
        assert_eq!(show_delta(Some(enough)), "-9.6% [-11.1, -7.8]");
    }

    /// The published held-out prediction (README, "Prediction (held out)": one boot per mode,
    /// 6 repetitions) re-marked: (row, seed Δ P1/2 and P2/2, the model's Δ and CI, samples,
    /// the published marks, the marks now).
    #[test]
    fn the_published_prediction_remarked() {
        type Published = (&'static str, [f64; 2], [(f64, f64, f64); 2], usize, &'static str, &'static str);
        let rows: [Published; 11] = [
            ("FIFO cross-cluster", [-7.1, -7.1], [(0.7, -0.6, 1.3), (0.7, -0.5, 1.2)], 6, "~ ~", "~ ~"),
            // The normal class landed in same-core in 2 or 3 of 6 repetitions, same-cluster in
            // the others: 3 or 4 samples.
            ("Normal same-core", [7.7, 7.7], [(-0.1, -0.2, -0.0), (0.1, 0.0, 0.2)], 3, "✗ ✓", "? ?"),
            ("Normal same-cluster", [0.0, -7.1], [(0.6, 0.1, 0.9), (0.3, 0.0, 0.9)], 3, "✗ ✗", "? ?"),
            ("Throughput", [12.7, 12.5], [(8.0, -4.0, 13.4), (4.1, -1.5, 10.6)], 6, "~ ~", "~ ~"),
            ("Avg latency", [-13.1, -13.7], [(-9.8, -10.6, -9.2), (-9.7, -11.5, -8.6)], 6, "✓ ✓", "✓ ✓"),
            ("p50 latency", [0.0, -40.0], [(-22.4, -25.5, -20.0), (-23.1, -26.2, -20.5)], 6, "✗ ✓", "✗ ✓"),
            ("p99 latency", [0.0, -4.8], [(3.7, -0.2, 9.8), (3.4, -2.3, 8.3)], 6, "✓ ~", "~ ~"),
            ("CPU cycles", [-10.1, -9.9], [(16.2, -6.7, 33.9), (-0.5, -18.3, 22.7)], 6, "~ ~", "~ ~"),
            // One boot per mode: one sample.
            ("Cache refs", [-3.6, -2.7], [(-1.3, -1.3, -1.3), (-0.9, -0.9, -0.9)], 1, "✓ ✓", "? ?"),
            ("CPU migrations", [-20.9, -19.9], [(-23.5, -27.7, -17.4), (-22.3, -28.0, -14.6)], 6, "✓ ✓", "✓ ✓"),
            ("Ctx switches", [-0.4, -0.3], [(-6.5, -8.9, -4.0), (-5.4, -8.1, -3.3)], 6, "✗ ✗", "✗ ✗"),
        ];
        for (row, seed, lab, n, _published, now) in rows {
            let marks: Vec<&str> =
                (0..2).map(|i| mark(seed_dir(seed[i]), Some(lab_dir(&e(lab[i].0, lab[i].1, lab[i].2, n))))).collect();
            assert_eq!(marks.join(" "), now, "{row}");
        }
    }
}
