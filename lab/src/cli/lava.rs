//! `lab lava-job` (`cargo make lava-job`): a LAVA job for a plan, and what lava-run needs;
//! `lab lava-submit`: the plan run as LAVA jobs on a farm, its results read back.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::report::lava::Farm;
use crate::report::summary::summary;
use crate::support::paths;
use anyhow::{bail, Result};
use std::path::PathBuf;

pub fn run(out: Option<PathBuf>, artifact_url: Option<&str>, args: &RunArgs) -> Result<()> {
    let opts = args.opts("default")?;
    let name = format!("{}-{}-{}", opts.plan, opts.board, opts.flavor);
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/lava").join(paths::path_safe(&name)));
    let w = crate::report::lava::write(&opts, &out, artifact_url)?;
    println!("{}", w.job.display());
    println!(
        "run it locally: lava-run --job-id 1 --output-dir {} --device {} {}",
        out.join("lava-out").display(),
        w.device.display(),
        w.job.display()
    );
    Ok(())
}

/// `lab lava-submit`: `boots` LAVA jobs of the plan, submitted together, then collected in
/// order; exits like `lab run` (the first failing boot's code).
pub fn submit(farm: &Farm, artifact_url: Option<&str>, boots: usize, args: &RunArgs) -> Result<Exit> {
    if boots == 0 {
        bail!("--boots 0: submit at least one job");
    }
    let opts = args.opts("default")?;
    let mut exit = Exit::Ok;
    let outcomes = crate::report::lava::submit_and_collect(&opts, farm, artifact_url, boots)?;
    for o in &outcomes {
        print!("{}", summary(o));
        if exit == Exit::Ok {
            exit = o.exit();
        }
    }
    Ok(exit)
}
