//! `lab bench`: seed 000's tables under CTABS modes 0/1/2, and the run's summary.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::bench::{self, Profile};
use crate::report::summary::summary;
use anyhow::Result;

pub fn run(profile: Profile, reps: usize, args: &RunArgs) -> Result<Exit> {
    let (outcome, text) = bench::execute(profile, reps, &args.measure_opts("bench")?)?;
    println!("{text}");
    print!("{}", summary(&outcome));
    Ok(outcome.exit())
}
