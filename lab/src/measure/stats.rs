//! Statistics for benchmark reports: exact percentiles, medians with bootstrap confidence
//! intervals, and relative changes against a baseline with their own intervals.
//!
//! The bootstrap uses a fixed seed and a named generator (ChaCha12), so the same samples
//! always give the same interval, also across rand versions.

use rand::{Rng, SeedableRng};
// A named algorithm: rand's StdRng may change between versions. ChaCha12 is what
// StdRng was in rand 0.9, so intervals computed before the switch stay comparable.
use rand_chacha::ChaCha12Rng as Prng;
use serde::Serialize;

/// Resamples drawn for each interval.
pub const BOOTSTRAP_ITERS: usize = 2000;
const SEED: u64 = 0x5a81_55b1;

/// Nearest-rank percentile of sorted samples (`p` in 0..=100): an observed value, never an
/// interpolation, as binderThroughputTest prints them.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// The median (mean of the two middle values for an even count).
pub fn median(samples: &[f64]) -> Option<f64> {
    let s = sorted(samples);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

pub fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Coefficient of variation (sample standard deviation over mean).
pub fn cv(samples: &[f64]) -> Option<f64> {
    let n = samples.len();
    let m = mean(samples)?;
    if n < 2 || m == 0.0 {
        return None;
    }
    let var = samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some(var.sqrt() / m.abs())
}

/// A point estimate with its 95% confidence interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
    /// Samples it rests on (per arm: the smaller arm's).
    pub n: usize,
    /// Boots the interval resampled (the smaller arm's); 0: the samples were resampled on
    /// their own, all from one boot.
    #[serde(skip_serializing_if = "is_zero")]
    pub boots: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Estimate {
    /// `1.23 [1.10, 1.40]` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!("{:.d$} [{:.d$}, {:.d$}]", self.value, self.lo, self.hi, d = digits)
    }
}

fn resample(rng: &mut Prng, xs: &[f64], buf: &mut Vec<f64>) {
    buf.clear();
    buf.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
}

/// The central 95% of bootstrap replicates (the percentile interval).
fn percentile_interval(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(|a, b| a.total_cmp(b));
    let lo = percentile_sorted(values, 2.5).unwrap_or(f64::NAN);
    let hi = percentile_sorted(values, 97.5).unwrap_or(f64::NAN);
    (lo, hi)
}

/// The 95% percentile interval of `BOOTSTRAP_ITERS` replicates from a generator seeded
/// with `seed` (a replicate of None is dropped).
fn interval(seed: u64, mut replicate: impl FnMut(&mut Prng) -> Option<f64>) -> (f64, f64) {
    let mut rng = Prng::seed_from_u64(seed);
    let mut values: Vec<f64> = (0..BOOTSTRAP_ITERS).filter_map(|_| replicate(&mut rng)).collect();
    percentile_interval(&mut values)
}

/// `y` against `x` in percent; None for `x` zero.
fn change_pct(x: f64, y: f64) -> Option<f64> {
    (x != 0.0).then(|| (y - x) / x * 100.0)
}

/// Median of `samples` with a 95% bootstrap interval.
pub fn median_ci(samples: &[f64]) -> Option<Estimate> {
    let xs = sorted(samples);
    let value = median(&xs)?;
    let mut buf = Vec::with_capacity(xs.len());
    let (lo, hi) = interval(SEED, |rng| {
        resample(rng, &xs, &mut buf);
        Some(median(&buf).unwrap_or(f64::NAN))
    });
    Some(Estimate { value, lo, hi, n: xs.len(), boots: 0 })
}

/// Relative change of the median of `other` against `base`, in percent, with a 95% bootstrap
/// interval (both groups resampled independently).
pub fn delta_pct_ci(base: &[f64], other: &[f64]) -> Option<Estimate> {
    let (b, o) = (sorted(base), sorted(other));
    let value = change_pct(median(&b)?, median(&o)?)?;
    let (mut bb, mut ob) = (Vec::with_capacity(b.len()), Vec::with_capacity(o.len()));
    let (lo, hi) = interval(SEED ^ 0xd1, |rng| {
        resample(rng, &b, &mut bb);
        resample(rng, &o, &mut ob);
        change_pct(median(&bb)?, median(&ob)?)
    });
    Some(Estimate { value, lo, hi, n: b.len().min(o.len()), boots: 0 })
}

/// The boots that have samples, each sorted.
fn boots_with_samples(boots: &[Vec<f64>]) -> Vec<Vec<f64>> {
    boots.iter().map(|b| sorted(b)).filter(|b| !b.is_empty()).collect()
}

/// A hierarchical resample: as many boots as there are, drawn with replacement, and within
/// each drawn boot as many of its samples, drawn with replacement, pooled into `buf`.
fn resample_boots(rng: &mut Prng, boots: &[Vec<f64>], buf: &mut Vec<f64>) {
    buf.clear();
    for _ in 0..boots.len() {
        let b = &boots[rng.random_range(0..boots.len())];
        buf.extend((0..b.len()).map(|_| b[rng.random_range(0..b.len())]));
    }
}

/// Median of samples from several boots (one list per boot), with a 95% interval that
/// resamples boots and then samples within them: boot-to-boot variation widens it, where a
/// flat bootstrap of the pooled samples would treat them as independent.
pub fn median_ci_boots(boots: &[Vec<f64>]) -> Option<Estimate> {
    let boots = boots_with_samples(boots);
    let all: Vec<f64> = boots.concat();
    let value = median(&all)?;
    let mut buf = Vec::with_capacity(all.len());
    let (lo, hi) = interval(SEED ^ 0xb0, |rng| {
        resample_boots(rng, &boots, &mut buf);
        Some(median(&buf).unwrap_or(f64::NAN))
    });
    Some(Estimate { value, lo, hi, n: all.len(), boots: boots.len() })
}

/// [`delta_pct_ci`] for samples from several boots per arm, resampled as [`median_ci_boots`]
/// does, each arm on its own.
pub fn delta_pct_ci_boots(base: &[Vec<f64>], other: &[Vec<f64>]) -> Option<Estimate> {
    let (b, o) = (boots_with_samples(base), boots_with_samples(other));
    let (ab, ao) = (b.concat(), o.concat());
    let value = change_pct(median(&ab)?, median(&ao)?)?;
    let (mut bb, mut ob) = (Vec::with_capacity(ab.len()), Vec::with_capacity(ao.len()));
    let (lo, hi) = interval(SEED ^ 0xb1, |rng| {
        resample_boots(rng, &b, &mut bb);
        resample_boots(rng, &o, &mut ob);
        change_pct(median(&bb)?, median(&ob)?)
    });
    Some(Estimate { value, lo, hi, n: ab.len().min(ao.len()), boots: b.len().min(o.len()) })
}

/// Whether an interval excludes zero, i.e. the change is beyond the noise at 95%.
pub fn significant(e: &Estimate) -> bool {
    e.lo > 0.0 || e.hi < 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_sorted(&s, 50.0), Some(50.0));
        assert_eq!(percentile_sorted(&s, 99.0), Some(99.0));
        assert_eq!(percentile_sorted(&s, 100.0), Some(100.0));
        assert_eq!(percentile_sorted(&s, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&[7.0], 90.0), Some(7.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
    }

    #[test]
    fn medians_and_cv() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(cv(&[5.0, 5.0, 5.0]), Some(0.0));
        assert!(cv(&[1.0]).is_none());
    }

    #[test]
    fn intervals_are_deterministic_and_contain_the_median() {
        let xs: Vec<f64> = (0..50).map(|i| 100.0 + (i * 37 % 11) as f64).collect();
        let a = median_ci(&xs).unwrap();
        assert_eq!(a, median_ci(&xs).unwrap());
        assert!(a.lo <= a.value && a.value <= a.hi, "{a:?}");
    }

    #[test]
    fn delta_detects_a_real_shift_and_not_noise() {
        let base: Vec<f64> = (0..40).map(|i| 100.0 + (i % 7) as f64).collect();
        let faster: Vec<f64> = base.iter().map(|x| x * 1.2).collect();
        let d = delta_pct_ci(&base, &faster).unwrap();
        assert!((d.value - 20.0).abs() < 1.0 && significant(&d), "{d:?}");
        // Noise: another draw from the same distribution (the same values, other order and
        // a few swapped) must not look like a change.
        let noise: Vec<f64> = (0..40).map(|i| 100.0 + ((i * 3 + 1) % 7) as f64).collect();
        let n = delta_pct_ci(&base, &noise).unwrap();
        assert!(!significant(&n) && n.lo < 0.0 && n.hi > 0.0, "{n:?}");
        let same = delta_pct_ci(&base, &base).unwrap();
        assert!(same.show(1).starts_with("0.0 ["));
    }

    #[test]
    fn boot_to_boot_variation_widens_the_interval() {
        // Five boots of six samples each: tight inside a boot, the boots 10% apart. Pooled
        // and resampled flat, the 30 samples look like a precise median; resampling boots
        // shows the spread between them.
        let boots: Vec<Vec<f64>> =
            (0..5).map(|b| (0..6).map(|i| 100.0 + 10.0 * f64::from(b) + 0.1 * f64::from(i)).collect()).collect();
        let flat = median_ci(&boots.concat()).unwrap();
        let hier = median_ci_boots(&boots).unwrap();
        assert_eq!((hier.n, hier.boots, flat.boots), (30, 5, 0));
        assert_eq!(hier.value, flat.value);
        assert!(hier.hi - hier.lo > 2.0 * (flat.hi - flat.lo), "flat {flat:?} hierarchical {hier:?}");
        assert!(hier.lo <= 110.0 && hier.hi >= 130.0, "{hier:?}");
        // Boots without samples do not count as boots.
        let mut sparse = boots.clone();
        sparse.push(vec![]);
        assert_eq!(median_ci_boots(&sparse).unwrap().boots, 5);
        // A change between arms: each arm's boots resampled on their own.
        let faster: Vec<Vec<f64>> = boots.iter().map(|b| b.iter().map(|x| x * 1.5).collect()).collect();
        let d = delta_pct_ci_boots(&boots, &faster).unwrap();
        assert!((d.value - 50.0).abs() < 0.01 && significant(&d) && d.boots == 5, "{d:?}");
        let same = delta_pct_ci_boots(&boots, &boots).unwrap();
        assert!(same.lo < -5.0 && same.hi > 5.0, "the boots' spread, not a point: {same:?}");
    }

    #[test]
    fn bootstrap_values_are_pinned() {
        // The gate compares CIs across nights: the resampling stream must never change
        // under us (rand documents StdRng as not reproducible across versions). Samples
        // with many distinct values, so that another stream gives other bounds.
        let xs: Vec<f64> = (0..41).map(|i| 100.0 + 5.0 * f64::from(i).sin()).collect();
        let e = median_ci(&xs).unwrap();
        assert_eq!((e.lo, e.hi), (97.97981177338467, 102.64541343060012));
        let ys: Vec<f64> = (0..40).map(|i| 120.0 + 6.0 * f64::from(i).cos()).collect();
        let d = delta_pct_ci(&xs, &ys).unwrap();
        // rand 0.9's StdRng gave the same; ChaCha8 gives (16.2948..., 23.8150...).
        assert_eq!((d.lo, d.hi), (16.204107172064898, 23.804882893487022));
    }
}
