//! The end-to-end tests' fixtures (the tests live in tests/tests/): one way to start the
//! `lab` binary, the run options a test starts from, and the check that a run passed.

pub mod lava;

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use std::path::PathBuf;
use std::process::Command;

/// The `lab` binary the end-to-end tests run: `$LAB_BIN`, else the workspace's
/// `target/debug/lab` (`cargo make test` builds it before the end-to-end tests).
pub fn lab_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LAB_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("debug/lab");
    assert!(bin.is_file(), "{} is missing: run `cargo build -p lab` (or set LAB_BIN)", bin.display());
    bin
}

/// `lab` as a user runs it, from the repository's root ([`lab_bin`]); add the arguments.
pub fn lab() -> Command {
    let mut c = Command::new(lab_bin());
    c.current_dir(lab::support::paths::repo());
    c
}

/// The default run options with `plan` (a name in rootfs/plans/ or a path).
pub fn opts(plan: &str) -> RunOpts {
    RunOpts { plan: plan.into(), ..Default::default() }
}

/// Fails the test with the run's summary unless everything in it passed.
#[track_caller]
pub fn assert_ok(o: &Outcome) {
    assert!(o.ok(), "run failed:\n{}", lab::report::summary::summary(o));
}
