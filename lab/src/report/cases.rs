//! Test reports from a run's [`Outcome`]: JUnit XML and TAP for CI, and a per-case table
//! for people. Each result a step reported is one test case, named `step/case`; what the
//! harness itself found (a step that failed or timed out, a kernel splat, a panic or
//! another abnormal end of the run, a topology mismatch) becomes a failing test case too,
//! so that a report never shows green for a broken run.

use crate::harness::outcome::{Outcome, Verdict};
use labproto::{Event, Status};
use std::fmt::Write;

/// One entry of a report.
#[derive(Clone, Debug, PartialEq)]
pub struct TestCase {
    /// The step (or `run` / `kernel` for harness findings).
    pub suite: String,
    /// `step/case`.
    pub name: String,
    pub status: Status,
    pub time_s: f64,
    /// One line for the summary.
    pub message: Option<String>,
    /// Full text (reports, console excerpts).
    pub detail: Option<String>,
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// The test cases of a run, in event order, harness findings last.
pub fn test_cases(o: &Outcome) -> Vec<TestCase> {
    let mut out = vec![];
    for e in &o.events {
        if let Event::Result { step, case, status, duration_ms, message, .. } = e {
            out.push(TestCase {
                suite: step.clone(),
                name: format!("{step}/{case}"),
                status: *status,
                time_s: duration_ms / 1000.0,
                message: message.as_deref().map(first_line),
                detail: message.clone(),
            });
        }
    }
    for e in &o.events {
        if let Event::StepEnd { step, exit_code, signal, timed_out, duration_ms } = e {
            let msg = if *timed_out {
                format!("step {step} timed out after {:.1} s", duration_ms / 1000.0)
            } else if *exit_code != Some(0) {
                format!("step {step} {}", labproto::describe_end(*exit_code, *signal, false, *duration_ms))
            } else {
                continue;
            };
            let output = o.step_output.get(step).map(|l| format!("\nits last output lines:\n{}", l.join("\n")));
            let detail = if *timed_out {
                format!("{msg}; last console lines:\n{}", o.console_tail)
            } else {
                format!("{msg}{}", output.unwrap_or_default())
            };
            out.push(TestCase {
                suite: step.clone(),
                name: format!("{step}/(step)"),
                status: Status::Fail,
                time_s: duration_ms / 1000.0,
                message: Some(msg),
                detail: Some(detail),
            });
        }
    }
    let verdict = match &o.verdict {
        Verdict::Completed => None,
        Verdict::Panic { text } => Some(("kernel panic".to_string(), text.clone())),
        Verdict::Timeout { phase, tail } => Some((format!("timeout in {phase}"), tail.clone())),
        Verdict::InitError { message } => Some((format!("guest init failed: {message}"), message.clone())),
        Verdict::QemuExited { status, tail } => {
            Some((format!("QEMU exited ({status}) before the plan finished"), tail.clone()))
        }
        Verdict::Interrupted => Some(("interrupted".to_string(), String::new())),
    };
    if let Some((msg, detail)) = verdict {
        out.push(TestCase {
            suite: "run".into(),
            name: "run/verdict".into(),
            status: Status::Fail,
            time_s: o.wall_s,
            message: Some(msg),
            detail: Some(detail),
        });
    }
    // A panic's report already is the verdict's text.
    if !matches!(o.verdict, Verdict::Panic { .. }) {
        for (i, s) in o.splats.iter().enumerate() {
            out.push(TestCase {
                suite: "kernel".into(),
                name: format!("kernel/splat-{}-{}", i + 1, s.kind),
                status: Status::Fail,
                time_s: 0.0,
                message: Some(format!("kernel splat ({}): {}", s.kind, s.headline())),
                detail: Some(s.text.clone()),
            });
        }
    }
    if !o.topology_mismatches.is_empty() {
        out.push(TestCase {
            suite: "run".into(),
            name: "run/topology".into(),
            status: Status::Fail,
            time_s: 0.0,
            message: Some(first_line(&o.topology_mismatches[0])),
            detail: Some(o.topology_mismatches.join("\n")),
        });
    }
    out
}

/// Text for XML character data and attribute values: markup escaped, and characters XML
/// 1.0 cannot carry at all (most C0 controls, e.g. terminal escapes from a console)
/// written as `\xNN`.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn counts(cases: &[TestCase]) -> (usize, usize, usize) {
    let f = cases.iter().filter(|c| c.status == Status::Fail).count();
    let s = cases.iter().filter(|c| c.status == Status::Skip).count();
    (cases.len(), f, s)
}

/// JUnit XML: one `<testsuite>` per step (plus `run`/`kernel` for harness findings).
pub fn junit_xml(o: &Outcome) -> String {
    let run_name = o.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    junit_merged(&run_name, &[("", o)])
}

/// A run's JUnit properties: kernel key and flavor, board and TCG mode from its manifest,
/// and the fuzzer's seed when it ran.
fn properties(o: &Outcome) -> Vec<quick_junit::Property> {
    let m: serde_json::Value = std::fs::read(o.dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut p = vec![];
    for (name, field) in [("kernel_key", "kernel_key"), ("flavor", "kernel_flavor"), ("board", "board"), ("tcg", "tcg")]
    {
        if let Some(v) = m[field].as_str() {
            p.push(quick_junit::Property::new(name, v));
        }
    }
    if let Some(seed) = o.data("fuzz").and_then(|d| d["seed"].as_str()) {
        p.push(quick_junit::Property::new("fuzz_seed", seed));
    }
    p
}

fn junit_case(c: &TestCase) -> quick_junit::TestCase {
    use quick_junit::{NonSuccessKind, TestCaseStatus};
    let mut status = match c.status {
        Status::Pass => TestCaseStatus::success(),
        Status::Skip => TestCaseStatus::skipped(),
        Status::Fail => TestCaseStatus::non_success(NonSuccessKind::Failure),
    };
    if c.status != Status::Pass {
        status.set_message(xml_text(c.message.as_deref().unwrap_or("")));
    }
    if c.status == Status::Fail {
        status.set_type("failure").set_description(xml_text(c.detail.as_deref().unwrap_or("")));
    }
    let mut t = quick_junit::TestCase::new(xml_text(&c.name), status);
    t.set_classname(xml_text(&format!("binder-lab.{}", c.suite)))
        .set_time(std::time::Duration::from_secs_f64(c.time_s.max(0.0)));
    t
}

/// `s` with the characters XML cannot carry (terminal escapes from a console) written as
/// `\xNN`, as in [`xml_escape`]; quick-junit escapes the markup.
fn xml_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c.to_string(),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => format!("\\x{:02x}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

/// One JUnit document for several runs; each run's suites are named `<prefix>.<step>`
/// (or just `<step>` with an empty prefix), carry the run's properties and, as
/// `<system-out>`, the last console lines of the run.
pub fn junit_merged(name: &str, runs: &[(&str, &Outcome)]) -> String {
    let mut report = quick_junit::Report::new(xml_text(name));
    let mut total = 0.0;
    for (prefix, o) in runs {
        let cases: Vec<TestCase> = test_cases(o)
            .into_iter()
            .map(|mut c| {
                if !prefix.is_empty() {
                    c.suite = format!("{prefix}.{}", c.suite);
                }
                c
            })
            .collect();
        total += cases.iter().filter(|c| !c.name.ends_with("/(step)")).map(|c| c.time_s).sum::<f64>();
        let props = properties(o);
        let mut suites: Vec<&str> = vec![];
        for c in &cases {
            if !suites.contains(&c.suite.as_str()) {
                suites.push(&c.suite);
            }
        }
        for suite in suites {
            let mut ts = quick_junit::TestSuite::new(xml_text(suite));
            ts.add_properties(props.clone());
            let sc: Vec<&TestCase> = cases.iter().filter(|c| c.suite == suite).collect();
            ts.set_time(std::time::Duration::from_secs_f64(sc.iter().map(|c| c.time_s.max(0.0)).sum()));
            ts.add_test_cases(sc.into_iter().map(junit_case));
            ts.set_system_out(xml_text(&o.console_tail));
            report.add_test_suite(ts);
        }
    }
    report.set_time(std::time::Duration::from_secs_f64(total.max(0.0)));
    report.to_string().unwrap_or_else(|e| format!("<!-- JUnit serialization failed: {e} -->\n"))
}

/// A YAML block scalar for a TAP diagnostic, indented under `key`.
fn yaml_block(key: &str, text: &str) -> String {
    let mut s = format!("  {key}: |-\n");
    for l in text.lines() {
        // Keep the document parseable whatever the text holds.
        let l: String = l.chars().map(|c| if c.is_control() && c != '\t' { '?' } else { c }).collect();
        let _ = writeln!(s, "    {l}");
    }
    s
}

/// TAP version 13: one test point per case, with a YAML block for failures.
pub fn tap(o: &Outcome) -> String {
    let cases = test_cases(o);
    let mut t = format!("TAP version 13\n1..{}\n", cases.len());
    for (i, c) in cases.iter().enumerate() {
        // '#' starts a directive in TAP: keep it out of descriptions.
        let name = c.name.replace('#', "\\#");
        match c.status {
            Status::Pass => {
                let _ = writeln!(t, "ok {} - {name}", i + 1);
            }
            Status::Skip => {
                let _ = writeln!(
                    t,
                    "ok {} - {name} # SKIP {}",
                    i + 1,
                    c.message.as_deref().unwrap_or("").replace('\n', " ")
                );
            }
            Status::Fail => {
                let _ = writeln!(t, "not ok {} - {name}", i + 1);
                t.push_str("  ---\n");
                t.push_str(&yaml_block("message", c.detail.as_deref().or(c.message.as_deref()).unwrap_or("failed")));
                let _ = writeln!(t, "  duration_ms: {:.1}", c.time_s * 1000.0);
                t.push_str("  ...\n");
            }
        }
    }
    t
}

fn fmt_time(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{:.0} ms", s * 1000.0)
    }
}

/// Pass/fail/skip per case with its time, and a summary line.
pub fn case_table(o: &Outcome) -> String {
    let cases = test_cases(o);
    let w = cases.iter().map(|c| c.name.len()).max().unwrap_or(4).max(4);
    let mut t = format!("{:<8}{:<w$}  {:>9}  {}\n", "STATUS", "CASE", "TIME", "MESSAGE");
    for c in &cases {
        let st = match c.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        };
        let mut msg = c.message.clone().unwrap_or_default();
        if msg.chars().count() > 100 {
            msg = msg.chars().take(97).collect::<String>() + "...";
        }
        let _ = writeln!(t, "{st:<8}{:<w$}  {:>9}  {msg}", c.name, fmt_time(c.time_s));
    }
    let (n, f, s) = counts(&cases);
    let total: f64 =
        cases.iter().filter(|c| !c.name.ends_with("/(step)") && c.name != "run/verdict").map(|c| c.time_s).sum();
    let _ = writeln!(t, "{n} case(s): {} passed, {f} failed, {s} skipped; {} in cases", n - f - s, fmt_time(total));
    t
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::harness::splat::Splat;

    fn result(step: &str, case: &str, status: Status, ms: f64, message: Option<&str>) -> Event {
        Event::Result {
            step: step.into(),
            case: case.into(),
            status,
            duration_ms: ms,
            message: message.map(String::from),
            data: serde_json::Value::Null,
        }
    }

    fn outcome(events: Vec<Event>, verdict: Verdict, splats: Vec<Splat>) -> Outcome {
        Outcome {
            dir: "/runs/20261130T000000Z-sa8155p-conformance-1".into(),
            verdict,
            events,
            boot_s: Some(1.0),
            splats,
            topology_mismatches: vec![],
            wall_s: 12.5,
            panic_report_s: None,
            console_tail: "last <line>".into(),
            collect_errors: vec![],
            step_output: Default::default(),
            reused: None,
            emulator_fault: None,
        }
    }

    pub(crate) fn sample() -> Outcome {
        outcome(
            vec![
                Event::StepStart { step: "conformance".into() },
                result("conformance", "binder_version", Status::Pass, 28.0, None),
                result(
                    "conformance",
                    "nested_calls",
                    Status::Fail,
                    151.0,
                    Some("A -> B: <bad> & \"worse\"\nsecond line"),
                ),
                result("conformance", "c_only", Status::Skip, 0.0, Some("needs the C driver")),
                Event::StepEnd {
                    step: "conformance".into(),
                    exit_code: Some(1),
                    signal: None,
                    timed_out: false,
                    duration_ms: 2000.0,
                },
                Event::Done,
            ],
            Verdict::Completed,
            vec![Splat {
                kind: "lockdep",
                line: 3,
                text: "WARNING: possible circular locking dependency\n\x1b[0m x".into(),
            }],
        )
    }

    #[test]
    fn cases_include_harness_findings() {
        let c = test_cases(&sample());
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "conformance/binder_version",
                "conformance/nested_calls",
                "conformance/c_only",
                "conformance/(step)",
                "kernel/splat-1-lockdep"
            ]
        );
        assert_eq!(c[1].message.as_deref(), Some("A -> B: <bad> & \"worse\""));
        assert!(c[3].message.as_deref().unwrap().contains("step conformance exited with status 1"));
        // A panic is one failing case, its splat is not repeated.
        let p = outcome(vec![], Verdict::Panic { text: "Kernel panic - not syncing".into() }, sample().splats);
        let c = test_cases(&p);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].name.as_str(), c[0].status), ("run/verdict", Status::Fail));
    }

    #[test]
    fn junit_is_escaped_and_counts_right() {
        let x = junit_xml(&sample());
        assert!(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"));
        assert!(x.contains("tests=\"5\" skipped=\"1\" failures=\"3\" errors=\"0\""), "{x}");
        assert!(x.contains(
            "<testcase name=\"conformance/binder_version\" classname=\"binder-lab.conformance\" time=\"0.028\"/>"
        ));
        assert!(x.contains("message=\"A -&gt; B: &lt;bad&gt; &amp; &quot;worse&quot;\""), "{x}");
        assert!(x.contains("second line</failure>"));
        assert!(x.contains("<skipped message=\"needs the C driver\"/>"));
        // The terminal escape from the console must not reach the XML.
        assert!(!x.contains('\x1b') && x.contains("\\x1b[0m"));
        // Balanced elements; the console tail as each suite's system-out.
        assert_eq!(x.matches("<testsuite ").count(), x.matches("</testsuite>").count());
        assert_eq!(x.matches("<testcase ").count(), 5);
        assert_eq!(x.matches("<system-out>last &lt;line&gt;</system-out>").count(), 2, "{x}");
        assert_eq!(xml_escape("a'b\u{0}c\td"), "a&apos;b\\x00c\td");
    }

    #[test]
    fn junit_carries_the_run_properties() {
        let d = tempfile::tempdir().unwrap();
        let manifest = serde_json::json!({"kernel_key": "bb6914c70394e1a7", "kernel_flavor": "debug",
                                          "board": "sa8155p", "tcg": "icount"});
        std::fs::write(d.path().join("manifest.json"), manifest.to_string()).unwrap();
        let mut o = sample();
        o.dir = d.path().to_path_buf();
        o.events.push(Event::Result {
            step: "fuzz".into(),
            case: "fuzz".into(),
            status: Status::Pass,
            duration_ms: 1.0,
            message: None,
            data: serde_json::json!({"seed": "0x5eed"}),
        });
        let x = junit_xml(&o);
        for (k, v) in [
            ("kernel_key", "bb6914c70394e1a7"),
            ("flavor", "debug"),
            ("board", "sa8155p"),
            ("tcg", "icount"),
            ("fuzz_seed", "0x5eed"),
        ] {
            assert!(x.contains(&format!("<property name=\"{k}\" value=\"{v}\"/>")), "{k}: {x}");
        }
    }

    #[test]
    fn tap_points_and_diagnostics() {
        let t = tap(&sample());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(&lines[..3], ["TAP version 13", "1..5", "ok 1 - conformance/binder_version"]);
        assert_eq!(lines[3], "not ok 2 - conformance/nested_calls");
        assert_eq!(lines[4], "  ---");
        assert_eq!(lines[5], "  message: |-");
        assert_eq!(lines[6], "    A -> B: <bad> & \"worse\"");
        assert!(t.contains("ok 3 - conformance/c_only # SKIP needs the C driver\n"));
        assert!(t.contains("not ok 5 - kernel/splat-1-lockdep\n"));
        assert!(!t.contains('\x1b'));
        assert_eq!(t.matches("  ...\n").count(), 3);
    }

    #[test]
    fn table_has_every_case_and_a_summary() {
        let t = case_table(&sample());
        assert!(t.lines().next().unwrap().starts_with("STATUS"));
        assert!(t.contains("PASS    conformance/binder_version"), "{t}");
        assert!(t.contains("28 ms"));
        assert!(t.contains("FAIL    conformance/nested_calls"));
        assert!(t.contains("SKIP    conformance/c_only"));
        assert!(t.trim_end().ends_with("5 case(s): 1 passed, 3 failed, 1 skipped; 179 ms in cases"), "{t}");
    }
}
