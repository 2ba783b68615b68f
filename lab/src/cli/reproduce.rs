//! `lab reproduce`: every table of the three seeds, or `--from` a finished reproduction.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::bench::Profile;
use crate::measure::reproduce;
use crate::support::{paths, stamp};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn rerender(dir: &Path) -> Result<()> {
    println!("{}", reproduce::rerender(dir)?);
    Ok(())
}

/// `--model`: seed 000 on the timing model.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// Seed 000 on the timing model: exactly `--qemu lab --tcg hicount --cache`, one boot per
    /// CTABS mode and workload, so the cache counters fill the "Cache refs/misses" rows.
    #[arg(long)]
    pub model: bool,
    /// With --model: the CTABS modes to run (0-3, comma-separated) [default: 0,1,2,3].
    #[arg(long, value_delimiter = ',', requires = "model")]
    pub modes: Vec<u32>,
    /// With --model: repetitions per mode [default: the profile's].
    #[arg(long, requires = "model")]
    pub reps: Option<usize>,
    /// With --model: iterations (`-i`) per throughput worker and per tiers run [default:
    /// the profile's].
    #[arg(long, requires = "model")]
    pub iterations: Option<usize>,
    /// With --model: boots per mode and workload, each with another QEMU `-seed` [default: 5,
    /// the fewest a figure needs for a mark].
    #[arg(long, requires = "model")]
    pub boots: Option<usize>,
}

pub fn run(
    profile: Profile,
    out: Option<PathBuf>,
    only: &[String],
    model: &ModelArgs,
    farm: &crate::cli::lava::FarmArgs,
    args: &RunArgs,
) -> Result<Exit> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/reproduce").join(stamp::utc_stamp()));
    if model.model {
        if farm.lava.is_some() {
            anyhow::bail!("--model runs on the lab's QEMU (hicount and the cache plugin), which a LAVA farm's qemu devices do not have: drop --lava or --model");
        }
        return run_model(profile, &out, only, model, args);
    }
    let mut opts = args.measure_opts("bench")?;
    farm.apply(&mut opts)?;
    let r = reproduce::run_only(profile, &opts, &out, only)?;
    println!("{}", r.text);
    for o in r.outcomes() {
        for p in o.problems() {
            println!("FAILED {}: {p}", o.dir.display());
        }
    }
    println!("report: {}", out.join("reproduce.md").display());
    Ok(r.outcomes().map(|o| o.exit()).max().unwrap_or(Exit::Ok))
}

fn run_model(profile: Profile, out: &Path, only: &[String], model: &ModelArgs, args: &RunArgs) -> Result<Exit> {
    if only.iter().any(|s| s != "000") {
        anyhow::bail!("--model runs seed 000 only; drop --only {} (or run it without --model)", only.join(","));
    }
    let modes =
        if model.modes.is_empty() { crate::measure::model::DEFAULT_MODES.to_vec() } else { model.modes.clone() };
    let reps = model.reps.unwrap_or(reproduce::Sizes::of(profile).bench_reps);
    let (runs, text) = crate::measure::model::reproduce(
        crate::measure::model::Size {
            profile,
            reps,
            iterations: model.iterations,
            boots: model.boots.unwrap_or(crate::measure::model::DEFAULT_BOOTS),
        },
        &modes,
        &args.measure_opts("bench")?,
        out,
    )?;
    println!("{text}");
    for o in runs.outcomes() {
        for p in o.problems() {
            println!("FAILED {}: {p}", o.dir.display());
        }
    }
    println!("report: {}", out.join("model.md").display());
    Ok(runs.outcomes().map(|o| o.exit()).max().unwrap_or(Exit::Ok))
}
