//! AOSP's own binder tests on the Rust driver: Android 14's binderDriverInterfaceTest and
//! binderLibTest, built by the lab from Debian's source (aosp/), with Android's servicemanager
//! as the context manager, on the perf kernel. binderLibTest runs with its known failures left
//! out by a gtest filter (`aosp/known-failures.toml`, each with its reason, printed and
//! counted in the test's output). The whole suite, on every kernel, is the `aosp-tests` plan;
//! the full nightly runs it the same way on perf, debug and cbinder
//! (docs/src/results/aosp-userspace.md classifies every failure).

use lab::harness::gtest::{known_failures, without_known_failures};
use lab::harness::opts::load_plan;
use lab::report::{self, summary::summary};
use labproto::Status;

#[test]
fn aosp_tests_pass_on_perf_without_their_known_failures() {
    let (plan, notes) = without_known_failures(load_plan("aosp-tests").unwrap(), "perf").unwrap();
    for n in &notes {
        eprintln!("{n}");
    }
    let o = report::run_plan_and_report(&plan, &lab_tests::opts("aosp-tests")).unwrap();
    lab_tests::assert_ok(&o);
    let known = known_failures("perf").unwrap();
    for step in ["binderDriverInterfaceTest", "binderLibTest"] {
        let count = |st: Status| o.results().filter(|r| r.0 == step && r.2 == st).count();
        let (pass, fail, skip) = (count(Status::Pass), count(Status::Fail), count(Status::Skip));
        eprintln!("{step}: {pass} passed, {fail} failed, {skip} skipped");
        // One case per gtest test, from its XML: a run that lost the report has none.
        assert!(pass >= 10, "{step}: only {pass} tests passed:\n{}", summary(&o));
        for k in &known {
            assert!(
                !o.results().any(|r| r.0 == step && r.1 == k.test && r.2 == Status::Pass),
                "{} ran despite the filter",
                k.test
            );
        }
    }
}
