//! AOSP's own binder tests on the Rust driver: Android 14's binderDriverInterfaceTest and
//! binderLibTest, built by the lab from Debian's source (aosp/), with Android's servicemanager
//! as the context manager, on the perf kernel. binderLibTest runs under a named gtest filter;
//! the tests it leaves out are listed with their reason (and counted) in the test's output.
//! The whole suite, on every kernel, is the `aosp-tests` plan
//! (docs/src/results/aosp-userspace.md classifies every failure).

use lab::harness::opts::load_plan;
use lab::report::{self, summary::summary};
use labproto::Status;

/// The filter's name, as the output and the results page call it.
const FILTER: &str = "lab-ci";
/// binderLibTest's tests that `lab-ci` leaves out: (test, why).
/// docs/src/results/aosp-userspace.md classifies them; none is a driver bug.
const EXCLUDED: &[(&str, &str)] = &[(
    "BinderLibTest.GotSid",
    "needs the caller's SELinux context: the perf kernel has no LSM to give one (SELinux comes with gki, issue 37)",
)];

/// `--gtest_filter` for [`EXCLUDED`].
fn gtest_filter() -> String {
    let names: Vec<&str> = EXCLUDED.iter().map(|e| e.0).collect();
    format!("--gtest_filter=-{}", names.join(":"))
}

#[test]
fn aosp_tests_pass_on_perf_with_the_lab_ci_filter() {
    let mut plan = load_plan("aosp-tests").unwrap();
    let lib = plan.steps.iter_mut().find(|s| s.name == "binderLibTest").expect("aosp-tests runs binderLibTest");
    lib.argv.push(gtest_filter());
    eprintln!("gtest filter {FILTER}: {} binderLibTest test(s) excluded", EXCLUDED.len());
    for (t, why) in EXCLUDED {
        eprintln!("  excluded {t}: {why}");
    }
    let o = report::run_plan_and_report(&plan, &lab_tests::opts("aosp-tests")).unwrap();
    lab_tests::assert_ok(&o);
    for step in ["binderDriverInterfaceTest", "binderLibTest"] {
        let count = |st: Status| o.results().filter(|r| r.0 == step && r.2 == st).count();
        let (pass, fail, skip) = (count(Status::Pass), count(Status::Fail), count(Status::Skip));
        eprintln!("{step}: {pass} passed, {fail} failed, {skip} skipped");
        // One case per gtest test, from its XML: a run that lost the report has none.
        assert!(pass >= 10, "{step}: only {pass} tests passed:\n{}", summary(&o));
        for (t, _) in EXCLUDED {
            assert!(
                !o.results().any(|r| r.0 == step && r.1 == *t && r.2 == Status::Pass),
                "{t} ran despite the filter"
            );
        }
    }
}
