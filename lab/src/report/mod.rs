//! Stage 5: what a run or a nightly means for people and CI tools: JUnit XML, TAP, the
//! per-case table, the run summary, HTML and KCIDB. Imports `harness` and below.

pub mod browser;
pub mod cases;
pub mod html;
pub mod kcidb;
pub mod ktap;
pub mod nightly;
pub mod summary;

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::support::fs::write_atomic;
use anyhow::Result;
use labproto::Plan;
use std::path::Path;

pub use cases::{case_table, junit_merged, junit_xml, tap, test_cases, xml_escape, TestCase};

/// Writes `junit.xml`, `results.tap` and `results.ktap` into the run directory.
pub fn write_reports(dir: &Path, o: &Outcome) -> Result<()> {
    write_atomic(&dir.join("junit.xml"), junit_xml(o).as_bytes())?;
    write_atomic(&dir.join("results.tap"), tap(o).as_bytes())?;
    write_atomic(&dir.join("results.ktap"), ktap::ktap(o).as_bytes())
}

/// Boots a guest, runs `plan` in it (here, or on the farm `opts.lava` names: see
/// [`crate::harness::lava::run_plan`]) and leaves its JUnit, TAP and KTAP reports in the run
/// directory: how every command and test runs a plan.
pub fn run_plan_and_report(plan: &Plan, opts: &RunOpts) -> Result<Outcome> {
    let o = crate::harness::lava::run_plan(plan, opts)?;
    write_reports(&o.dir, &o)?;
    Ok(o)
}

/// [`run_plan_and_report`] for the plan `opts.plan` names.
pub fn run_and_report(opts: &RunOpts) -> Result<Outcome> {
    run_plan_and_report(&crate::harness::opts::load_plan(&opts.plan)?, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_land_in_the_run_directory() {
        let d = tempfile::tempdir().unwrap();
        write_reports(d.path(), &cases::tests::sample()).unwrap();
        assert!(std::fs::read_to_string(d.path().join("junit.xml")).unwrap().contains("<testsuites"));
        assert!(std::fs::read_to_string(d.path().join("results.tap")).unwrap().starts_with("TAP version 13"));
    }
}
