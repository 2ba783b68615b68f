//! `lab gdb` (`cargo make gdb`): attach to a guest started with `--gdb`.

use crate::harness::gdb;
use crate::support::paths;
use anyhow::Result;

pub fn run(run: Option<&std::path::Path>, gdb_args: &[String]) -> Result<()> {
    std::process::exit(gdb::run(&paths::runs_dir(), run, gdb_args)?)
}
