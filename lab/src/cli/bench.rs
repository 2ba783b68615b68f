//! `lab bench`: seed 000's tables under CTABS modes 0/1/2, and the run's summary.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::bench::{self, Profile};
use crate::report::summary::summary;
use crate::support::{paths, stamp::utc_stamp};
use anyhow::Result;
use std::path::PathBuf;

pub fn run(profile: Profile, reps: usize, threads: Option<usize>, args: &RunArgs) -> Result<Exit> {
    let (outcome, text) = bench::execute(profile, reps, threads, &args.measure_opts("bench")?)?;
    let seed = crate::measure::reproduce::append_seed000(&outcome.dir, &outcome.events)?;
    println!("{text}{seed}");
    print!("{}", summary(&outcome));
    Ok(outcome.exit())
}

/// `lab bench --matrix`: the four configurations of thread pool × EAS and their table.
pub fn matrix(profile: Profile, reps: usize, out: Option<PathBuf>, args: &RunArgs) -> Result<Exit> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/bench-matrix").join(utc_stamp()));
    let (ok, text) = crate::measure::matrix::run(profile, reps, &args.measure_opts("bench")?, &out)?;
    println!("{text}\nreport: {}", out.join("matrix.md").display());
    Ok(if ok { Exit::Ok } else { Exit::TestFailure })
}
