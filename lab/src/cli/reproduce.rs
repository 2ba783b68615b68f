//! `lab reproduce`: every table of the three seeds, or `--from` a finished reproduction.

use crate::cli::args::RunArgs;
use crate::harness::outcome::{Exit, Outcome};
use crate::measure::bench::Profile;
use crate::measure::reproduce;
use crate::measure::userspace::Userspace;
use crate::support::{paths, stamp};
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn rerender(dir: &Path) -> Result<()> {
    println!("{}", reproduce::rerender(dir)?);
    Ok(())
}

/// `--model`: seed 000 (or, with `--only 001`, seed 001) on the timing model.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// Seed 000 on the timing model: exactly `--qemu lab --tcg hicount --cache`, one boot per
    /// CTABS mode and workload, so the cache counters fill the "Cache refs/misses" rows. With
    /// `--only 001`: seed 001's three drivers on the model instead, `--boots` boots each.
    #[arg(long)]
    pub model: bool,
    /// With --model: the CTABS modes to run (0-3, comma-separated) [default: 0,1,2,3].
    #[arg(long, value_delimiter = ',', requires = "model")]
    pub modes: Vec<u32>,
    /// With --model: repetitions per mode [default: the profile's]; with --only 001, runs of
    /// each workload per driver and boot.
    #[arg(long, requires = "model")]
    pub reps: Option<usize>,
    /// With --model: iterations (`-i`) per throughput worker and per tiers run [default:
    /// the profile's]; with --only 001, calls per high-priority sender of the inversion
    /// workload (its CPU hogs keep every vCPU busy: the model's costly part).
    #[arg(long, requires = "model")]
    pub iterations: Option<usize>,
    /// Boots of each experiment, each with another QEMU `-seed`: the intervals are over boots
    /// (a deterministic boot's repetitions are one sample) and a row needs 5 for a mark. With
    /// --model per mode and workload (with --only 001: per driver) [default: 5]; under icount
    /// per experiment [default: 5; 1 with --profile quick, whose rows are then `?`].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub boots: Option<usize>,
    /// The programs that measure seed 000's rows: the lab's ports, or AOSP's
    /// binderThroughputTest and schd-dbg (Android 14, built from aosp/; the report gives their
    /// bucketed percentiles, the seed's units, beside exact ones).
    #[arg(long, value_enum, default_value = "ports")]
    pub userspace: Userspace,
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
    let boots = model.boots.unwrap_or(reproduce::default_boots(profile));
    let r = reproduce::run_with(profile, model.userspace, &opts, &out, only, boots)?;
    report(&r.text, r.outcomes().collect(), &out.join("reproduce.md"))
}

fn run_model(profile: Profile, out: &Path, only: &[String], model: &ModelArgs, args: &RunArgs) -> Result<Exit> {
    if only == ["001"] {
        return run_seed001_model(profile, out, model, args);
    }
    if only.iter().any(|s| s != "000") {
        anyhow::bail!(
            "--model runs one seed: 000 (the default) or 001 (--only 001); drop --only {} (or run it without --model)",
            only.join(",")
        );
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
            userspace: model.userspace,
        },
        &modes,
        &args.measure_opts("bench")?,
        out,
    )?;
    report(&text, runs.outcomes().collect(), &out.join("model.md"))
}

/// Seed 001's drivers on the timing model: `--reps` runs of each workload per driver and boot,
/// `--iterations` calls per high-priority inversion sender, `--boots` boots per driver.
fn run_seed001_model(profile: Profile, out: &Path, model: &ModelArgs, args: &RunArgs) -> Result<Exit> {
    if !model.modes.is_empty() {
        anyhow::bail!("--modes: seed 001 has no CTABS modes (its columns are the three drivers); drop --modes");
    }
    if model.userspace != Userspace::Ports {
        anyhow::bail!("--userspace {}: chooses seed 000's programs; seed 001 runs the lab's workloads only: drop --userspace or --only 001", model.userspace.name());
    }
    let mut sizes = reproduce::Sizes::of(profile);
    if let Some(r) = model.reps {
        (sizes.tput_runs, sizes.inv_runs) = (r, r);
    }
    if let Some(i) = model.iterations {
        sizes.inv_iters = i;
    }
    let boots = model.boots.unwrap_or(crate::measure::model::DEFAULT_BOOTS);
    if boots == 0 || sizes.tput_runs == 0 || sizes.inv_iters == 0 {
        anyhow::bail!("--boots 0, --reps 0 or --iterations 0: the model needs at least one boot, run and call");
    }
    let base = crate::measure::model::opts(&args.measure_opts("bench")?);
    let r = reproduce::run_seed001_model(profile, sizes, boots, &base, out)?;
    report(&r.text, r.outcomes().collect(), &out.join("reproduce.md"))
}

/// Prints a finished reproduction's text, its failed boots and where its report is; the exit
/// code of its worst boot.
fn report(text: &str, outcomes: Vec<&Outcome>, path: &Path) -> Result<Exit> {
    println!("{text}");
    for o in &outcomes {
        for p in o.problems() {
            println!("FAILED {}: {p}", o.dir.display());
        }
    }
    println!("report: {}", path.display());
    Ok(outcomes.iter().map(|o| o.exit()).max().unwrap_or(Exit::Ok))
}
