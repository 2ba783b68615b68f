//! `lab run`, `lab conformance` and `lab fuzz`: one run of a plan, its summary (and per-case
//! table), non-zero exit on any failure.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::report::{self, summary::summary};
use anyhow::Result;

pub fn run(args: &RunArgs) -> Result<Exit> {
    let o = report::run(&args.opts("default"))?;
    print!("{}", summary(&o));
    Ok(o.exit())
}

/// Runs a plan and prints the per-case table (with the run's summary below it).
pub fn suite(args: &RunArgs, default_plan: &str) -> Result<Exit> {
    let opts = args.opts(default_plan);
    let o = report::run(&opts)?;
    print!("{}", report::case_table(&o));
    println!(
        "kernel: {} flavor; reports: {} and {}",
        opts.flavor,
        o.dir.join("junit.xml").display(),
        o.dir.join("results.tap").display()
    );
    // The summary without its per-result lines (the table has them).
    for l in summary(&o).lines() {
        if !["PASS  ", "FAIL  ", "SKIP  "].iter().any(|p| l.starts_with(p)) {
            println!("{l}");
        }
    }
    Ok(o.exit())
}
