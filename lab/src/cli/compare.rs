//! `lab compare OLD.json NEW.json`: the nightly's regression rule on two files.

use crate::harness::outcome::Exit;
use crate::numbers::gate::{compare, load_baseline, Verdict};
use anyhow::Result;
use std::path::Path;

pub fn run(baseline: &Path, current: &Path, threshold: f64) -> Result<Exit> {
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
    Ok(if regressed > 0 { Exit::TestFailure } else { Exit::Ok })
}
