//! `lab gdb` (`cargo make gdb`): attach to a guest started with `--gdb` (or, `--user`, to the
//! gdbserver in one started with `--gdbserver`).

use crate::harness::gdb;
use crate::support::paths;
use anyhow::Result;

pub fn run(run: Option<&std::path::Path>, user: bool, gdb_args: &[String]) -> Result<()> {
    std::process::exit(gdb::run(&paths::runs_dir(), run, user, gdb_args)?)
}
