//! `lab compare OLD.json NEW.json`: the nightly's regression rule on two files.

use crate::cli::nightly::{compare, load_baseline, Verdict};
use anyhow::Result;
use std::path::Path;

pub fn run(baseline: &Path, current: &Path, threshold: f64) -> Result<()> {
    let cur = load_baseline(current)?;
    let c = compare(&load_baseline(baseline)?, &cur, threshold);
    let mut regressed = 0;
    for x in &c {
        if x.verdict != Verdict::Ok {
            println!(
                "{:<9} {} ({:+.1}% worse)",
                format!("{:?}", x.verdict).to_lowercase(),
                x.metric,
                x.worse_pct.unwrap_or(f64::NAN)
            );
        }
        regressed += usize::from(x.verdict == Verdict::Regressed);
    }
    println!("{} gated metrics compared, {regressed} regressed (threshold {threshold}%)", c.len());
    if regressed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
