//! `lab profile`: executed kernel instructions per function while a plan runs (the profile
//! plugin, qemu/plugins/profile, symbolized with the kernel's System.map), per call of the
//! plan's workload; with `--compare FLAVOR` the same plan on another kernel and the
//! per-function difference; with `--from DIR` (once or twice) the same from finished runs.

use crate::cli::args::RunArgs;
use crate::harness::outcome::Exit;
use crate::measure::profile::{self, load, profiled_run};
use crate::report::summary::summary;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ProfileArgs {
    /// Also run the plan on this flavor and print the per-function difference (it minus
    /// --flavor), largest first.
    #[arg(long, value_name = "FLAVOR", value_parser = crate::cli::catalog::Choice::flavors())]
    pub compare: Option<String>,
    /// Profile a finished `lab profile` run directory instead of booting; twice to compare
    /// them (the second minus the first).
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "compare")]
    pub from: Vec<PathBuf>,
    /// Functions shown.
    #[arg(long, default_value_t = 40)]
    pub top: usize,
}

pub fn run(args: &RunArgs, p: &ProfileArgs) -> Result<Exit> {
    if !p.from.is_empty() {
        return from_runs(&p.from, p.top);
    }
    if p.compare.is_some() && std::env::var_os("LAB_KERNEL").is_some() {
        bail!(
            "LAB_KERNEL boots one kernel for both sides of --compare: profile each kernel in its own \
             `lab profile` run, then compare them with `lab profile --from RUN_A --from RUN_B`"
        );
    }
    let opts = args.measure_opts("ctabs-cost")?;
    let Some(other) = &p.compare else {
        let (oa, a) = profiled_run(&opts)?;
        eprint!("{}", summary(&oa));
        print!("{}", profile::table(&a, p.top));
        return Ok(oa.exit());
    };
    let sides = [opts.clone(), crate::harness::opts::RunOpts { flavor: other.clone(), ..opts.clone() }];
    let mut done = crate::harness::boots::each(&opts, &sides, |o| format!("profile {}", o.flavor), profiled_run)?;
    let (ob, b) = done.pop().expect("two sides");
    let (oa, a) = done.pop().expect("two sides");
    eprint!("{}", summary(&oa));
    eprint!("{}", summary(&ob));
    print!("{}", profile::compare(&a, &label(&oa.dir), &b, &label(&ob.dir), p.top));
    Ok(oa.exit().max(ob.exit()))
}

fn from_runs(dirs: &[PathBuf], top: usize) -> Result<Exit> {
    match dirs {
        [a] => print!("{}", profile::table(&load(a)?, top)),
        [a, b] => print!("{}", profile::compare(&load(a)?, &label(a), &load(b)?, &label(b), top)),
        _ => bail!("--from takes one run directory (a table) or two (their difference), not {}", dirs.len()),
    }
    Ok(Exit::Ok)
}

/// `flavor key (run directory name)` from the run's manifest.
fn label(dir: &Path) -> String {
    let m: serde_json::Value =
        std::fs::read(dir.join("manifest.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    format!("{} {} ({name})", m["kernel_flavor"].as_str().unwrap_or("?"), m["kernel_key"].as_str().unwrap_or("?"))
}
