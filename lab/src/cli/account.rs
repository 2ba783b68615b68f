//! `lab account`: the per-call account of seed 000's Baseline on the timing model against the
//! phone's column (measure/account.rs), or `--from` a finished one.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::account;
use crate::support::{paths, stamp};
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct AccountArgs {
    /// Iterations per worker (`-i`) of each column, one boot each, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [account::CURRENT_ITERATIONS])]
    pub iterations: Vec<usize>,
    /// Runs of the benchmark in each boot.
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Where account.md, account.json and the clock plots go [default:
    /// target/lab/account/<time>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Re-render a finished account (a directory with account.json) without booting.
    #[arg(long)]
    pub from: Option<PathBuf>,
}

pub fn run(a: &AccountArgs, args: &RunArgs) -> Result<Exit> {
    let opts = args.measure_opts("bench")?;
    let (board, _) = crate::harness::opts::load_board_file(&opts.board, opts.smp, opts.memory.as_deref())?;
    let clusters = account::cluster_names(&board);
    if let Some(dir) = &a.from {
        println!("{}", account::rerender(dir, &clusters)?);
        return Ok(Exit::Ok);
    }
    if a.reps == 0 || a.iterations.contains(&0) {
        anyhow::bail!("--reps 0 or --iterations 0: the account needs at least one run of one call per worker");
    }
    let out = a.out.clone().unwrap_or_else(|| paths::repo().join("target/lab/account").join(stamp::utc_stamp()));
    let (cols, outcomes) = account::run(&a.iterations, a.reps, &opts)?;
    println!("{}", account::report(&out, &cols, &clusters)?);
    for o in &outcomes {
        for p in o.problems() {
            println!("FAILED {}: {p}", o.dir.display());
        }
    }
    println!("report: {}", out.join("account.md").display());
    Ok(outcomes.iter().map(|o| o.exit()).max().unwrap_or(Exit::Ok))
}
