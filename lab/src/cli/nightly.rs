//! `lab nightly`: the options, then [`crate::measure::nightly`]'s run, printed.

use crate::harness::outcome::Exit;
use crate::harness::qemu;
use crate::measure::bench::Profile;
use crate::measure::nightly::{run, summary, Opts};
use crate::support::{paths, stamp::utc_stamp};
use anyhow::Result;
use std::path::PathBuf;

/// `lab nightly`: runs everything into `out` and prints the reproduction and the summary.
pub fn command(
    profile: Profile,
    out: Option<PathBuf>,
    baseline: Option<PathBuf>,
    threshold: f64,
    fuzz_ops: Option<u64>,
    run_args: &crate::cli::args::RunArgs,
) -> Result<Exit> {
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/nightly").join(utc_stamp()));
    let quick = profile == Profile::Quick;
    let opts = Opts {
        profile,
        out: out.clone(),
        baseline,
        threshold_pct: threshold,
        fuzz_ops: fuzz_ops.unwrap_or(if quick { 20_000 } else { 1_000_000 }),
        base: run_args.opts("default")?,
        measure_tcg: run_args.tcg.unwrap_or(qemu::Tcg::Icount),
    };
    let n = run(&opts)?;
    if let Some(r) = &n.reproduce {
        println!("{}", r.text);
    }
    print!("{}", summary(&n, &out));
    Ok(n.exit())
}
