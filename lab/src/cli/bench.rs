//! `lab bench`: seed 000's tables under CTABS modes 0/1/2, and the run's summary.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::bench::{self, Profile};
use crate::report::summary::summary;
use crate::support::{paths, stamp::utc_stamp};
use anyhow::Result;
use std::path::PathBuf;

pub fn run(
    profile: Profile,
    reps: usize,
    threads: Option<usize>,
    boots: Option<usize>,
    args: &RunArgs,
) -> Result<Exit> {
    let boots = boots.unwrap_or(crate::measure::reproduce::default_boots(profile));
    let out = paths::repo().join("target/lab/bench").join(utc_stamp());
    let (outcomes, text, rows) =
        bench::execute_boots(profile, reps, threads, &args.measure_opts("bench")?, boots, &out)?;
    let seed = crate::measure::reproduce::append_seed000(&out, &rows)?;
    println!("{text}{seed}");
    for o in &outcomes {
        print!("{}", summary(o));
    }
    println!("report: {}", out.join("report.md").display());
    Ok(outcomes.iter().map(|o| o.exit()).find(|e| *e != Exit::Ok).unwrap_or(Exit::Ok))
}

/// `lab bench --matrix`: the four configurations of thread pool × EAS and their table.
pub fn matrix(
    profile: Profile,
    reps: usize,
    boots: Option<usize>,
    out: Option<PathBuf>,
    args: &RunArgs,
) -> Result<Exit> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/bench-matrix").join(utc_stamp()));
    let boots = boots.unwrap_or(crate::measure::reproduce::default_boots(profile));
    let (ok, text) = crate::measure::matrix::run(profile, reps, boots, &args.measure_opts("bench")?, &out)?;
    println!("{text}\nreport: {}", out.join("matrix.md").display());
    Ok(if ok { Exit::Ok } else { Exit::TestFailure })
}
