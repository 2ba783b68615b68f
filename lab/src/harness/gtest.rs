//! GoogleTest's XML reports (`--gtest_output=xml:PATH`), collected from the guest by a step's
//! `collect`, turned into one result per test: case `Suite.Test` of the step that ran it. AOSP's
//! binderLibTest and binderDriverInterfaceTest report this way (plan `aosp-tests`).

use anyhow::{Context, Result};
use labproto::{Event, Status};
use quick_xml::events::{BytesStart, Event as Xml};
use std::path::Path;

/// One test of a report.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub status: Status,
    pub time_ms: f64,
    pub message: Option<String>,
}

fn attr(e: &BytesStart, key: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key.as_bytes())
        .and_then(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).ok().map(|v| v.into_owned()))
}

/// The tests of one gtest XML report, in file order. A test that did not run (DISABLED_, or
/// left out by a filter that gtest still lists) is a skip; a failure's first line is its
/// message.
pub fn parse(xml: &str) -> Result<Vec<Case>> {
    let mut r = quick_xml::Reader::from_str(xml);
    let mut out = vec![];
    let mut open: Option<Case> = None;
    let mut saw_root = false;
    loop {
        let ev = r.read_event().context("gtest XML is malformed")?;
        let (e, empty) = match &ev {
            Xml::Start(e) => (e, false),
            Xml::Empty(e) => (e, true),
            Xml::End(e) if e.name().as_ref() == b"testcase" => {
                out.extend(open.take());
                continue;
            }
            Xml::Eof => break,
            _ => continue,
        };
        match e.name().as_ref() {
            b"testsuites" => saw_root = true,
            b"testcase" => {
                let suite = attr(e, "classname").unwrap_or_default();
                let name = attr(e, "name").unwrap_or_default();
                let ran = attr(e, "status").is_none_or(|s| s == "run");
                let skipped = attr(e, "result").is_some_and(|r| r == "skipped" || r == "suppressed");
                let c = Case {
                    name: format!("{suite}.{name}"),
                    status: if !ran || skipped { Status::Skip } else { Status::Pass },
                    time_ms: attr(e, "time").and_then(|t| t.parse::<f64>().ok()).unwrap_or(0.0) * 1000.0,
                    message: (!ran).then(|| "not run (disabled)".to_string()),
                };
                if empty {
                    out.push(c);
                } else {
                    open = Some(c);
                }
            }
            b"failure" | b"error" => {
                if let Some(c) = open.as_mut() {
                    // The first failure names it; later ones are in the step's output.
                    if c.status != Status::Fail {
                        c.status = Status::Fail;
                        c.message = attr(e, "message").map(|m| m.lines().take(3).collect::<Vec<_>>().join(" | "));
                    }
                }
            }
            b"skipped" => {
                if let Some(c) = open.as_mut().filter(|c| c.status != Status::Fail) {
                    c.status = Status::Skip;
                    c.message = attr(e, "message").filter(|m| !m.is_empty()).or(Some("skipped".into()));
                }
            }
            _ => {}
        }
    }
    anyhow::ensure!(saw_root, "not a gtest XML report (no <testsuites>)");
    Ok(out)
}

/// Results from the gtest reports a run collected: every collected `*.xml` of a step, under
/// `run_dir/collect/<step>/`. A report that does not parse is a failing case `gtest-xml`.
pub fn from_collected(run_dir: &Path, plan: &labproto::Plan) -> Vec<Event> {
    let mut events = vec![];
    for step in &plan.steps {
        for guest in step.collect.iter().filter(|p| p.ends_with(".xml")) {
            let Ok(host) = crate::harness::collect::host_path(&run_dir.join("collect"), &step.name, guest) else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&host) else { continue };
            let result = |case: String, status, duration_ms, message| Event::Result {
                step: step.name.clone(),
                case,
                status,
                duration_ms,
                message,
                data: serde_json::Value::Null,
            };
            match parse(&text) {
                Ok(cases) => events.extend(cases.into_iter().map(|c| result(c.name, c.status, c.time_ms, c.message))),
                Err(e) => events.push(result("gtest-xml".into(), Status::Fail, 0.0, Some(format!("{guest}: {e:#}")))),
            }
        }
    }
    events
}

/// A test of the `aosp-tests` plan that fails on the lab's kernels for a classified reason
/// (`aosp/known-failures.toml`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownFailure {
    /// `Suite.Test`, as gtest names it.
    pub test: String,
    /// The drivers it fails on: "rust", "c".
    pub drivers: Vec<String>,
    pub why: String,
}

/// `aosp/known-failures.toml`: the classified failures.
pub const KNOWN_FAILURES: &str = "aosp/known-failures.toml";

/// The known failures of the driver that `flavor` builds (the C driver for a flavor with
/// cbinder's fragment, else the Rust one).
pub fn known_failures(flavor: &str) -> Result<Vec<KnownFailure>> {
    #[derive(serde::Deserialize)]
    struct File {
        failure: Vec<KnownFailure>,
    }
    let path = crate::support::paths::repo().join(KNOWN_FAILURES);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let file: File = toml::from_str(&text).with_context(|| {
        format!("{KNOWN_FAILURES} is malformed: each [[failure]] takes test = \"Suite.Test\", drivers = [\"rust\", \"c\"], why = \"...\"")
    })?;
    let f = crate::kbuild::flavor::load(flavor)?;
    let driver = if f.fragment_files.iter().any(|x| x.starts_with("cbinder")) { "c" } else { "rust" };
    Ok(file.failure.into_iter().filter(|k| k.drivers.iter().any(|d| d == driver)).collect())
}

/// `--gtest_filter` leaving `known` out (None: nothing to leave out).
pub fn exclusion_filter(known: &[KnownFailure]) -> Option<String> {
    (!known.is_empty())
        .then(|| format!("--gtest_filter=-{}", known.iter().map(|k| k.test.as_str()).collect::<Vec<_>>().join(":")))
}

/// `plan` (an `aosp-tests`-shaped plan) with binderLibTest's known failures left out, and the
/// lines that say which and why.
pub fn without_known_failures(mut plan: labproto::Plan, flavor: &str) -> Result<(labproto::Plan, Vec<String>)> {
    let known = known_failures(flavor)?;
    let mut notes = vec![format!("binderLibTest: {} known failure(s) left out ({KNOWN_FAILURES})", known.len())];
    notes.extend(known.iter().map(|k| format!("  left out {}: {}", k.test, k.why)));
    if let (Some(filter), Some(lib)) =
        (exclusion_filter(&known), plan.steps.iter_mut().find(|s| s.name == "binderLibTest"))
    {
        lib.argv.push(filter);
    }
    Ok((plan, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped like gtest 1.16's output of binderDriverInterfaceTest, trimmed; one failure, one
    // GTEST_SKIP and one disabled test added.
    const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1" disabled="1" errors="0" time="0.2" timestamp="2026-12-07T16:00:00.000" name="AllTests">
  <testsuite name="BinderDriverInterfaceTest" tests="4" failures="1" disabled="1" skipped="1" errors="0" time="0.2" timestamp="2026-12-07T16:00:00.000">
    <testcase name="Version" file="binderDriverInterfaceTest.cpp" line="120" status="run" result="completed" time="0.003" timestamp="2026-12-07T16:00:00.000" classname="BinderDriverInterfaceTest" />
    <testcase name="RequestDeathNotification" file="binderDriverInterfaceTest.cpp" line="300" status="run" result="completed" time="0.05" timestamp="2026-12-07T16:00:00.000" classname="BinderDriverInterfaceTest">
      <failure message="binderDriverInterfaceTest.cpp:330&#x0A;Expected equality of these values:&#x0A;  BR_DEAD_BINDER&#x0A;    Which is: 2148037135" type=""><![CDATA[binderDriverInterfaceTest.cpp:330
Expected equality of these values:]]></failure>
    </testcase>
    <testcase name="Freeze" status="run" result="skipped" time="0" classname="BinderDriverInterfaceTest">
      <skipped message="binderDriverInterfaceTest.cpp:90&#x0A;no freeze support"><![CDATA[]]></skipped>
    </testcase>
    <testcase name="DISABLED_Old" status="notrun" result="suppressed" time="0" classname="BinderDriverInterfaceTest" />
  </testsuite>
</testsuites>
"#;

    #[test]
    fn known_failures_follow_the_driver() {
        let rust = known_failures("perf").unwrap();
        let c = known_failures("cbinder").unwrap();
        assert!(rust.iter().any(|k| k.test == "BinderLibTest.GotSid"), "{rust:?}");
        assert!(c.len() > rust.len() && c.iter().any(|k| k.test == "BinderLibTest.InheritRt"), "{c:?}");
        assert_eq!(known_failures("cbinder-debug").unwrap().len(), c.len());
        assert_eq!(exclusion_filter(&rust).unwrap(), "--gtest_filter=-BinderLibTest.GotSid");
        assert_eq!(exclusion_filter(&[]), None);
        let plan = crate::harness::opts::load_plan("aosp-tests").unwrap();
        let (p, notes) = without_known_failures(plan, "cbinder").unwrap();
        let lib = p.steps.iter().find(|s| s.name == "binderLibTest").unwrap();
        assert!(lib.argv.last().unwrap().contains("SchedPolicySet"), "{:?}", lib.argv);
        assert!(notes[0].contains("3 known failure(s)") && notes.len() == 4, "{notes:?}");
    }

    #[test]
    fn one_case_per_test() {
        let c = parse(XML).unwrap();
        assert_eq!(c.len(), 4, "{c:?}");
        assert_eq!(
            c[0],
            Case {
                name: "BinderDriverInterfaceTest.Version".into(),
                status: Status::Pass,
                time_ms: 3.0,
                message: None
            }
        );
        assert_eq!(c[1].status, Status::Fail);
        assert_eq!(
            c[1].message.as_deref(),
            Some("binderDriverInterfaceTest.cpp:330 | Expected equality of these values: |   BR_DEAD_BINDER")
        );
        assert_eq!(
            (c[2].status, c[2].message.as_deref()),
            (Status::Skip, Some("binderDriverInterfaceTest.cpp:90\nno freeze support"))
        );
        assert_eq!((c[3].status, c[3].message.as_deref()), (Status::Skip, Some("not run (disabled)")));
    }

    #[test]
    fn not_a_report() {
        assert!(parse("<html/>").unwrap_err().to_string().contains("not a gtest XML report"));
        assert!(parse("<testsuites><testcase").is_err());
    }

    #[test]
    fn collected_reports_become_results() {
        let d = tempfile::tempdir().unwrap();
        let mut plan = crate::harness::opts::load_plan("aosp-tests").unwrap();
        let step = plan.steps.iter().find(|s| s.name == "binderDriverInterfaceTest").unwrap().clone();
        let host = crate::harness::collect::host_path(&d.path().join("collect"), &step.name, &step.collect[0]).unwrap();
        std::fs::create_dir_all(host.parent().unwrap()).unwrap();
        std::fs::write(&host, XML).unwrap();
        let ev = from_collected(d.path(), &plan);
        assert_eq!(ev.len(), 4);
        match &ev[1] {
            Event::Result { step, case, status, .. } => {
                assert_eq!(
                    (step.as_str(), case.as_str(), *status),
                    ("binderDriverInterfaceTest", "BinderDriverInterfaceTest.RequestDeathNotification", Status::Fail)
                );
            }
            e => panic!("{e:?}"),
        }
        std::fs::write(&host, "garbage").unwrap();
        let ev = from_collected(d.path(), &plan);
        assert!(matches!(&ev[0], Event::Result { case, status: Status::Fail, .. } if case == "gtest-xml"), "{ev:?}");
        plan.steps.clear();
        assert!(from_collected(d.path(), &plan).is_empty());
    }
}
