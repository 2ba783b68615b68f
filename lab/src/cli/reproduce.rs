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

pub fn run(profile: Profile, out: Option<PathBuf>, args: &RunArgs) -> Result<Exit> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/reproduce").join(stamp::utc_stamp()));
    let r = reproduce::run(profile, &args.measure_opts("bench")?, &out)?;
    println!("{}", r.text);
    for o in r.outcomes() {
        for p in o.problems() {
            println!("FAILED {}: {p}", o.dir.display());
        }
    }
    println!("report: {}", out.join("reproduce.md").display());
    Ok(r.outcomes().map(|o| o.exit()).max().unwrap_or(Exit::Ok))
}
