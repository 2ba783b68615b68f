//! `lab lava-job` (`cargo make lava-job`): a LAVA job for a plan, and what lava-run needs.

use crate::cli::args::RunArgs;
use crate::support::paths;
use anyhow::Result;
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
