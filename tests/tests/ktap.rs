//! results.ktap read by the pinned kernel tree's own parser, `tools/testing/kunit/kunit.py
//! parse`: every case the lab reports must come out with the same name and verdict, and
//! the parser must find no errors. Needs the unpacked tree (any kernel build makes it).

use lab::harness::outcome::{Outcome, Verdict};
use lab_tests::assert_ok;
use labproto::{Event, Status};
use std::path::PathBuf;

fn kunit_py() -> PathBuf {
    let lock = lab::kbuild::pin::Lock::load(&lab::kbuild::pin::Lock::path()).unwrap();
    let tree = lab::kbuild::tree::tree_dir(&lab::support::paths::cache(), &lock);
    let py = tree.join("tools/testing/kunit/kunit.py");
    assert!(py.is_file(), "{} missing: build a kernel first (cargo make kernel)", py.display());
    py
}

/// (suite, case, status) as kunit.py's JSON has them, and its error count.
fn kunit_parse(ktap: &str) -> (Vec<(String, String, String)>, u64, bool) {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("results.ktap");
    let json = d.path().join("out.json");
    std::fs::write(&input, ktap).unwrap();
    let out = std::process::Command::new("python3")
        .arg(kunit_py())
        .arg("parse")
        .arg(format!("--json={}", json.display()))
        .arg(&input)
        .output()
        .expect("python3");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("kunit.py wrote no JSON")).unwrap();
    let mut cases = vec![];
    let mut errors = v["misc"]["errors"].as_u64().unwrap_or(0);
    for g in v["sub_groups"].as_array().unwrap() {
        errors += g["misc"]["errors"].as_u64().unwrap_or(0);
        for c in g["test_cases"].as_array().unwrap() {
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            cases.push((g["name"].as_str().unwrap().to_string(), s("name"), s("status")));
        }
    }
    (cases, errors, out.status.success())
}

/// The lab's own view of the same run, grouped by suite as KTAP nests them.
fn lab_cases(o: &Outcome) -> Vec<(String, String, String)> {
    let mut cases: Vec<(String, String, String)> = lab::report::test_cases(o)
        .into_iter()
        .map(|c| {
            let short = lab::report::ktap::case_name(&c.suite, &c.name);
            let st = match c.status {
                Status::Pass => "PASS",
                Status::Fail => "FAIL",
                Status::Skip => "SKIP",
            };
            (c.suite, short, st.to_string())
        })
        .collect();
    let mut order: Vec<String> = vec![];
    for c in &cases {
        if !order.contains(&c.0) {
            order.push(c.0.clone());
        }
    }
    cases.sort_by_key(|c| order.iter().position(|s| s == &c.0));
    cases
}

fn result(step: &str, case: &str, status: Status, message: Option<&str>) -> Event {
    Event::Result {
        step: step.into(),
        case: case.into(),
        status,
        duration_ms: 3.0,
        message: message.map(String::from),
        data: serde_json::Value::Null,
    }
}

fn outcome(events: Vec<Event>, verdict: Verdict) -> Outcome {
    Outcome {
        dir: "/r".into(),
        verdict,
        events,
        boot_s: Some(1.0),
        splats: vec![lab::harness::splat::Splat {
            kind: "warning",
            line: 1,
            text: "WARNING: at x\nKernel panic - not syncing: VFS: Unable to mount root".into(),
        }],
        topology_mismatches: vec!["board: cpu4 capacity 871, guest: 1024".into()],
        wall_s: 2.0,
        panic_report_s: None,
        console_tail: "List of all partitions:\n# Subtest: fake".into(),
        collect_errors: vec![],
        step_output: Default::default(),
        reused: None,
        emulator_fault: None,
    }
}

#[test]
fn kunit_py_reads_the_lab_ktap_like_the_lab() {
    let events = vec![
        Event::StepStart { step: "conformance@2".into() },
        result("conformance@2", "binder_version", Status::Pass, None),
        result("conformance@2", "nested #1", Status::Fail, Some("A -> B\nreboot: System halted\n  Subtest: no")),
        result("conformance@2", "c_only", Status::Skip, Some("needs the C driver")),
        Event::StepEnd {
            step: "conformance@2".into(),
            exit_code: None,
            signal: Some(9),
            timed_out: true,
            duration_ms: 5.0,
        },
        result("kunit", "ctabs.pick_same_cpu", Status::Pass, None),
        // A case named like its step (the default plan's topology/topology).
        result("kunit", "kunit", Status::Pass, None),
        Event::Done,
    ];
    let o = outcome(
        events,
        Verdict::Timeout { phase: "power-off".into(), tail: "Kernel panic - not syncing: VFS: x".into() },
    );
    let ktap = lab::report::ktap::ktap(&o);
    let (cases, errors, ok) = kunit_parse(&ktap);
    assert_eq!(cases, lab_cases(&o), "kunit.py read:\n{ktap}");
    assert_eq!(errors, 0, "{ktap}");
    assert!(!ok, "kunit.py parse exits non-zero when a test failed");
    assert!(cases.iter().any(|c| c.2 == "SKIP") && cases.iter().any(|c| c.2 == "FAIL"));

    // An all-passing run is a passing KTAP document.
    let good = Outcome {
        splats: vec![],
        topology_mismatches: vec![],
        ..outcome(vec![result("default", "topology", Status::Pass, None)], Verdict::Completed)
    };
    let (cases, errors, ok) = kunit_parse(&lab::report::ktap::ktap(&good));
    assert_eq!((cases, errors, ok), (lab_cases(&good), 0, true));
}

#[test]
fn kunit_py_reads_a_real_run() {
    let o = lab::report::run_and_report(&lab::harness::opts::RunOpts::default()).unwrap();
    assert_ok(&o);
    let ktap = std::fs::read_to_string(o.dir.join("results.ktap")).unwrap();
    let (cases, errors, ok) = kunit_parse(&ktap);
    assert_eq!((cases, errors, ok), (lab_cases(&o), 0, true), "{ktap}");
}
