//! `lab freeze check` and `lab freeze trust`: the latest freeze record (`freeze/`) against the
//! working tree, and what the model got right and wrong at that freeze.

use crate::harness::outcome::Exit;
use crate::measure::freeze;
use crate::support::paths;
use anyhow::Result;

#[derive(clap::Subcommand)]
pub enum FreezeCmd {
    /// Compare the latest freeze record's SHA-256 of every parameter file (board, kernel
    /// configuration, patch series, QEMU series and plugins, guest programs) with the working
    /// tree; list what changed, is missing or is new. Exit 1 if anything differs.
    Check,
    /// Print what the timing model got right and wrong on the seeds at the latest freeze, from
    /// its record and its results page.
    Trust,
}

pub fn run(cmd: FreezeCmd) -> Result<Exit> {
    let f = freeze::latest()?;
    match cmd {
        FreezeCmd::Check => {
            let repo = paths::repo();
            let diff = freeze::check(&f, &repo, &freeze::parameter_files(&repo)?);
            for d in &diff {
                println!("{d}");
            }
            println!(
                "freeze {} (`{}`): {}",
                f.number,
                f.commit,
                if diff.is_empty() {
                    "the tree's parameter files are the frozen ones".to_string()
                } else {
                    format!("{} parameter file(s) differ from the frozen model", diff.len())
                }
            );
            Ok(if diff.is_empty() { Exit::Ok } else { Exit::TestFailure })
        }
        FreezeCmd::Trust => {
            for l in freeze::trust_lines()? {
                println!("{l}");
            }
            Ok(Exit::Ok)
        }
    }
}
