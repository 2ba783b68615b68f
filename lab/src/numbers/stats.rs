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

/// [`delta_pct_ci_boots`] for boots paired by their number (base and treatment boot `i` ran
/// with the same QEMU `-seed`): the resample draws pair numbers, so whatever a seed does to
/// both arms alike cancels out of the change. Only the numbers with samples in both arms count.
pub fn delta_pct_ci_paired(base: &[Vec<f64>], other: &[Vec<f64>]) -> Option<Estimate> {
    let pairs: Vec<(Vec<f64>, Vec<f64>)> = base
        .iter()
        .zip(other)
        .map(|(b, o)| (sorted(b), sorted(o)))
        .filter(|(b, o)| !b.is_empty() && !o.is_empty())
        .collect();
    let (ab, ao): (Vec<f64>, Vec<f64>) =
        (pairs.iter().flat_map(|p| p.0.clone()).collect(), pairs.iter().flat_map(|p| p.1.clone()).collect());
    let value = change_pct(median(&ab)?, median(&ao)?)?;
    let (mut bb, mut ob) = (Vec::with_capacity(ab.len()), Vec::with_capacity(ao.len()));
    let (lo, hi) = interval(SEED ^ 0xb2, |rng| {
        bb.clear();
        ob.clear();
        for _ in 0..pairs.len() {
            let (b, o) = &pairs[rng.random_range(0..pairs.len())];
            bb.extend((0..b.len()).map(|_| b[rng.random_range(0..b.len())]));
            ob.extend((0..o.len()).map(|_| o[rng.random_range(0..o.len())]));
        }
        change_pct(median(&bb)?, median(&ob)?)
    });
    Some(Estimate { value, lo, hi, n: ab.len().min(ao.len()), boots: pairs.len() })
}

/// Splits enumerated exactly up to this many; beyond, a fixed-seed Monte Carlo sample.
const EXACT_SPLITS: u64 = 200_000;
const MONTE_CARLO_SPLITS: usize = 20_000;

fn choose(n: u64, k: u64) -> u64 {
    (0..k).fold(1u64, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// The one-sided permutation p-value that `y`'s mean exceeds `x`'s: the share of all ways
/// to split the pooled values into groups of these sizes whose difference of means is at
/// least the observed one (ties count, the observed split is one of them). Exact under
/// exchangeability (an A/A), whatever the values' distribution; its smallest value is
/// 1 / C(n_x + n_y, n_y): 1/252 = 0.004 for 5 against 5.
pub fn perm_p_greater(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.is_empty() || y.is_empty() {
        return None;
    }
    let all: Vec<f64> = x.iter().chain(y).copied().collect();
    let (n, k) = (all.len(), y.len());
    // The difference of means is monotone in the sum of the `y` group for fixed sizes.
    let observed: f64 = y.iter().sum();
    let tol = 1e-9 * (1.0 + observed.abs());
    let splits = choose(n as u64, k as u64);
    if splits <= EXACT_SPLITS && n < 64 {
        let (mut hits, mut count) = (0u64, 0u64);
        let mut idx: Vec<usize> = (0..k).collect();
        loop {
            count += 1;
            if idx.iter().map(|&i| all[i]).sum::<f64>() >= observed - tol {
                hits += 1;
            }
            // The next k-combination in lexicographic order.
            let Some(pos) = (0..k).rev().find(|&i| idx[i] != i + n - k) else { break };
            idx[pos] += 1;
            for j in pos + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
        }
        return Some(hits as f64 / count as f64);
    }
    let mut rng = Prng::seed_from_u64(SEED ^ 0x9e);
    let mut v = all.clone();
    let mut hits = 1usize;
    for _ in 0..MONTE_CARLO_SPLITS {
        // A partial Fisher-Yates shuffle: the first k are a uniform draw of the y group.
        for i in 0..k {
            let j = rng.random_range(i..n);
            v.swap(i, j);
        }
        if v[..k].iter().sum::<f64>() >= observed - tol {
            hits += 1;
        }
    }
    Some(hits as f64 / (MONTE_CARLO_SPLITS + 1) as f64)
}

/// The smallest p-value [`perm_p_greater`] can give for groups of these sizes.
pub fn perm_min_p(nx: usize, ny: usize) -> f64 {
    1.0 / choose((nx + ny) as u64, ny as u64).max(1) as f64
}

/// Holm's step-down procedure at family-wise level `alpha`: which hypotheses are rejected.
/// Sorted by p, the i-th smallest (from 0) is rejected while each so far is <= alpha / (m - i).
pub fn holm(p: &[Option<f64>], alpha: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| p[i].is_some()).collect();
    order.sort_by(|&a, &b| p[a].unwrap_or(1.0).total_cmp(&p[b].unwrap_or(1.0)));
    let m = p.len();
    let mut out = vec![false; m];
    for (i, &k) in order.iter().enumerate() {
        if p[k].is_some_and(|v| v <= alpha / (m - i) as f64) {
            out[k] = true;
        } else {
            break;
        }
    }
    out
}

/// The smallest true shift (in the values' own units) that a one-sided test at level `alpha`
/// would detect with probability `power`, from the groups' pooled spread (Student's t with
/// n_x + n_y - 2 degrees of freedom). None: the groups are too small for any shift to reach
/// `alpha` with the permutation test ([`perm_min_p`]), or too small to estimate a spread.
pub fn min_detectable(x: &[f64], y: &[f64], alpha: f64, power: f64) -> Option<f64> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let (nx, ny) = (x.len(), y.len());
    if nx < 2 || ny < 2 || perm_min_p(nx, ny) > alpha {
        return None;
    }
    let ss = |v: &[f64]| {
        let m = mean(v).unwrap_or(0.0);
        v.iter().map(|a| (a - m).powi(2)).sum::<f64>()
    };
    let df = (nx + ny - 2) as f64;
    let sd = ((ss(x) + ss(y)) / df).sqrt();
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    let z = t.inverse_cdf(1.0 - alpha) + t.inverse_cdf(power);
    Some(z * sd * (1.0 / nx as f64 + 1.0 / ny as f64).sqrt())
}

/// Fisher's exact test, one-sided: the probability of `fail_a` or more failures in group a
/// (`n_a` runs) when the `fail_a + fail_b` failures fell on the `n_a + n_b` runs at random,
/// i.e. when both groups fail at the same rate. Small: a fails more often than b.
pub fn fisher_greater(fail_a: u64, n_a: u64, fail_b: u64, n_b: u64) -> f64 {
    use statrs::distribution::{DiscreteCDF, Hypergeometric};
    if fail_a == 0 {
        return 1.0;
    }
    match Hypergeometric::new(n_a + n_b, fail_a + fail_b, n_a) {
        Ok(h) => h.sf(fail_a - 1),
        Err(_) => 1.0,
    }
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

    #[test]
    fn permutation_p_values_are_exact_and_bounded_below() {
        let base = [100.0, 101.0, 99.5, 100.5, 100.2];
        let worse: Vec<f64> = base.iter().map(|x| x + 5.0).collect();
        // Every treatment value above every base value: the one split of 252 as extreme.
        assert_eq!(perm_p_greater(&base, &worse), Some(1.0 / 252.0));
        assert_eq!(perm_min_p(5, 5), 1.0 / 252.0);
        // The other way round, and no difference at all: nothing to see.
        assert_eq!(perm_p_greater(&worse, &base), Some(1.0));
        assert!(perm_p_greater(&base, &base).unwrap() > 0.5);
        assert_eq!(perm_p_greater(&[], &base), None);
        // Large groups: Monte Carlo, still small for a clear shift and 1 for none.
        let big: Vec<f64> = (0..30).map(|i| f64::from(i % 7)).collect();
        let shifted: Vec<f64> = big.iter().map(|x| x + 10.0).collect();
        assert!(perm_p_greater(&big, &shifted).unwrap() < 1e-3);
        assert!(perm_p_greater(&big, &big).unwrap() > 0.4);
    }

    #[test]
    fn holm_steps_down() {
        let p = [Some(0.004), Some(0.04), Some(0.012), None];
        // m = 4: 0.004 <= 0.0125, 0.012 <= 0.0167, 0.04 > 0.025: stop.
        assert_eq!(holm(&p, 0.05), [true, false, true, false]);
        assert_eq!(holm(&[Some(0.03), Some(0.04)], 0.05), [false, false], "0.03 > 0.05 / 2");
        assert_eq!(holm(&[Some(0.02), Some(0.03)], 0.05), [true, true]);
    }

    #[test]
    fn the_smallest_detectable_change_follows_spread_boots_and_level() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5];
        let other = [100.2, 100.8, 99.4, 100.1, 99.9];
        let m = min_detectable(&base, &other, 0.0125, 0.8).unwrap();
        assert!(m > 1.0 && m < 3.0, "{m}");
        // A careless design: Holm over 29 rows, two-sided, at 5 boots per arm needs
        // p <= 0.05 / 29 / 2 = 0.00086, below the test's smallest p (0.004): no change of
        // any size can be detected.
        assert_eq!(min_detectable(&base, &other, 0.05 / 29.0 / 2.0, 0.8), None);
        // More boots, a smaller detectable change.
        let more: Vec<f64> = base.iter().chain(&base).copied().collect();
        assert!(min_detectable(&more, &more, 0.0125, 0.8).unwrap() < m);
    }

    #[test]
    fn fisher_exact_tail() {
        // 7 of 20 against 0 of 20: C(20,7) / C(40,7).
        let p = fisher_greater(7, 20, 0, 20);
        assert!((p - 77520.0 / 18643560.0).abs() < 1e-9, "{p}");
        assert_eq!(fisher_greater(0, 20, 0, 20), 1.0);
        assert!(fisher_greater(20, 20, 20, 20) > 0.99);
        assert!(fisher_greater(6, 20, 0, 20) > 0.01 && fisher_greater(7, 20, 0, 20) < 0.01);
    }

    #[test]
    fn pairing_by_seed_narrows_the_interval() {
        // Each seed moves both arms alike (+-10%), the treatment is 3% slower on every seed.
        let base: Vec<Vec<f64>> =
            (0..5).map(|b| vec![100.0 + 5.0 * f64::from(b), 100.5 + 5.0 * f64::from(b)]).collect();
        let other: Vec<Vec<f64>> = base.iter().map(|v| v.iter().map(|x| x * 1.03).collect()).collect();
        let unpaired = delta_pct_ci_boots(&base, &other).unwrap();
        let paired = delta_pct_ci_paired(&base, &other).unwrap();
        assert_eq!(paired.value, unpaired.value);
        assert!(paired.hi - paired.lo < 0.25 * (unpaired.hi - unpaired.lo), "paired {paired:?} unpaired {unpaired:?}");
        assert!(significant(&paired) && !significant(&unpaired), "{paired:?} {unpaired:?}");
        // A boot number missing in one arm is no pair.
        let mut gap = other.clone();
        gap[2].clear();
        assert_eq!(delta_pct_ci_paired(&base, &gap).unwrap().boots, 4);
    }
}
