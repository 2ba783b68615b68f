//! KTAP from the debug kernel's KUnit run (printed by the `kunit` plan step from
//! /sys/kernel/debug/kunit/*/results) turned into one result per test case.
//!
//! KTAP nests by indentation: a test's subtests are the lines indented deeper than its own
//! `ok`/`not ok` line, which follows them. Suites hold cases, parameterised cases hold one
//! subtest per parameter. A test is reported as `suite.case[.param]`; a test with subtests
//! is reported itself only when it failed and none of its subtests did (a suite whose init
//! failed, or one with no case lines at all), so a failure is never lost.

use labproto::{Event, Status};

/// The step of the `kunit` plan whose console output is the KTAP.
pub const STEP: &str = "kunit";

/// One `ok`/`not ok` line and the subtests above it.
#[derive(Debug)]
struct Test {
    name: String,
    ok: bool,
    /// `SKIP reason`, `TODO`, ...
    directive: Option<String>,
    /// Set for a test whose own result line never came (the output ended inside it).
    missing: bool,
    subtests: Vec<Test>,
}

/// A test line: indent, ok, name, directive.
fn test_line(raw: &str) -> Option<(usize, bool, &str, Option<&str>)> {
    let body = raw.trim_start();
    let indent = raw[..raw.len() - body.len()].chars().map(|c| if c == '\t' { 4 } else { 1 }).sum();
    let (ok, rest) = match body.strip_prefix("not ok ") {
        Some(r) => (false, r),
        None => (true, body.strip_prefix("ok ")?),
    };
    // "3 name # SKIP why", "3 - name" (TAP 14), "3"
    let (num, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    num.parse::<u64>().ok()?;
    let rest = rest.strip_prefix("- ").unwrap_or(rest);
    let (name, directive) = match rest.split_once(" # ").or_else(|| rest.strip_prefix("# ").map(|d| ("", d))) {
        Some((n, d)) => (n.trim(), Some(d.trim())),
        None => (rest.trim().trim_end_matches(" #"), None),
    };
    Some((indent, ok, name, directive))
}

/// The test tree of KTAP lines (several concatenated documents are fine).
fn tree(lines: &[&str]) -> Vec<Test> {
    // Finished tests not yet claimed by a parent, and open `# Subtest:` headers with the
    // number of finished tests when they opened.
    let mut done: Vec<(usize, Test)> = vec![];
    let mut headers: Vec<(usize, String, usize)> = vec![];
    for raw in lines {
        let body = raw.trim_start();
        if let Some(name) = body.strip_prefix("# Subtest: ") {
            headers.push((raw.len() - body.len(), name.trim().to_string(), done.len()));
            continue;
        }
        let Some((indent, ok, name, directive)) = test_line(raw) else { continue };
        let first = done.iter().position(|(i, _)| *i > indent).unwrap_or(done.len());
        let subtests = done.drain(first..).map(|(_, t)| t).collect();
        headers.retain(|(i, _, _)| *i <= indent);
        let (name, directive) = (name.to_string(), directive.map(str::to_string));
        done.push((indent, Test { name, ok, directive, missing: false, subtests }));
    }
    // Headers still open: the output ended inside them (a crash, a timeout).
    while let Some((indent, name, at)) = headers.pop() {
        let subtests = done.drain(at.min(done.len())..).map(|(_, t)| t).collect();
        let t = Test { name, ok: false, directive: None, missing: true, subtests };
        done.push((indent.saturating_sub(1), t));
    }
    done.into_iter().map(|(_, t)| t).collect()
}

fn skipped(t: &Test) -> bool {
    t.directive.as_deref().is_some_and(|d| d.to_ascii_uppercase().starts_with("SKIP"))
}

/// Whether `t` or a subtest below it is reported as failed.
fn any_failed(t: &Test) -> bool {
    t.subtests.iter().any(|s| (!s.ok && !skipped(s)) || any_failed(s))
}

fn emit(t: &Test, parent: &str, out: &mut Vec<Event>) {
    let name = if parent.is_empty() { t.name.clone() } else { format!("{parent}.{}", t.name) };
    for s in &t.subtests {
        emit(s, &name, out);
    }
    let failed = !t.ok && !skipped(t);
    let message = if t.missing {
        Some("no result line: the output ended inside this test (a crash or a timeout?)".to_string())
    } else if !t.subtests.is_empty() {
        Some(format!("failed, though none of its {} subtest(s) did (e.g. its init or exit failed)", t.subtests.len()))
    } else {
        t.directive.clone()
    };
    if t.subtests.is_empty() || (failed && !any_failed(t)) {
        let status = if skipped(t) {
            Status::Skip
        } else if t.ok {
            Status::Pass
        } else {
            Status::Fail
        };
        out.push(result(name, status, message));
    }
}

fn result(case: String, status: Status, message: Option<String>) -> Event {
    Event::Result { step: STEP.into(), case, status, duration_ms: 0.0, message, data: serde_json::Value::Null }
}

/// One result per test case of KTAP `lines`.
pub fn parse(lines: &[&str]) -> Vec<Event> {
    let mut out = vec![];
    for t in tree(lines) {
        emit(&t, "", &mut out);
    }
    out
}

/// KUnit results found among console lines, if the `kunit` step ran. A step whose output
/// holds no test at all is a failure (KUnit or its debugfs results are missing).
pub fn from_console(console: &[String]) -> Vec<Event> {
    let prefix = labproto::step_console_prefix(STEP);
    let lines: Vec<&str> = console.iter().filter_map(|l| l.strip_prefix(prefix.as_str())).collect();
    let out = parse(&lines);
    if out.is_empty() && !lines.is_empty() {
        let msg = format!("the kunit step printed no KTAP test line ({} line(s) of output)", lines.len());
        return vec![result("(ktap)".into(), Status::Fail, Some(msg))];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "[kunit] KTAP version 1
[kunit] 1..1
[kunit]     KTAP version 1
[kunit]     # Subtest: rust_binder_ctabs
[kunit]     1..3
[kunit]     # a.speed: normal
[kunit]     ok 1 a
[kunit]     not ok 2 b
[kunit]     ok 3 c # SKIP no topology
[kunit] # rust_binder_ctabs: pass:1 fail:1 skip:1 total:3
[kunit] not ok 1 rust_binder_ctabs
[other] ok 9 unrelated";

    fn cases(ev: &[Event]) -> Vec<(String, Status)> {
        ev.iter()
            .map(|e| match e {
                Event::Result { case, status, .. } => (case.clone(), *status),
                _ => unreachable!(),
            })
            .collect()
    }

    /// The kernel's fixture `name`, with the prefix before its first `[K]TAP version` line
    /// stripped from every line (as kunit_parser.py isolates KTAP in a console log).
    fn fixture(name: &str) -> Vec<(String, Status)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/ktap").join(format!("{name}.log"));
        let text = std::fs::read_to_string(&path).unwrap();
        let at = |l: &str| l.find("KTAP version").or_else(|| l.find("TAP version"));
        let start = text.lines().find_map(|l| at(l).map(|i| &l[..i])).unwrap_or("").to_string();
        let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix(start.as_str())).collect();
        cases(&parse(&lines))
    }

    fn all(status: Status, names: &[&str]) -> Vec<(String, Status)> {
        names.iter().map(|n| (n.to_string(), status)).collect()
    }

    #[test]
    fn cases_with_status() {
        let console: Vec<String> = LOG.lines().map(String::from).collect();
        assert_eq!(
            cases(&from_console(&console)),
            [
                ("rust_binder_ctabs.a".to_string(), Status::Pass),
                ("rust_binder_ctabs.b".to_string(), Status::Fail),
                ("rust_binder_ctabs.c".to_string(), Status::Skip),
            ]
        );
    }

    #[test]
    fn nothing_without_the_step() {
        assert!(from_console(&["[    1.0] ok 1 x".to_string()]).is_empty());
    }

    #[test]
    fn a_step_without_ktap_fails() {
        let ev = from_console(&["[kunit] cat: can't open '/sys/kernel/debug/kunit/*/results'".to_string()]);
        assert_eq!(cases(&ev), [("(ktap)".to_string(), Status::Fail)]);
    }

    #[test]
    fn suite_failure_without_case_lines_is_kept() {
        let ev = parse(&[
            "KTAP version 1",
            "1..2",
            "not ok 1 broken_suite",
            "    # Subtest: fine",
            "    ok 1 a",
            "ok 2 fine",
        ]);
        assert_eq!(cases(&ev), [("broken_suite".into(), Status::Fail), ("fine.a".into(), Status::Pass)]);
    }

    #[test]
    fn kernel_fixture_failure_nested() {
        // A suite that fails although its case passed, and a nested failure without headers.
        assert_eq!(
            fixture("test_is_test_passed-failure-nested"),
            [
                ("subtest 1.test 1".into(), Status::Pass),
                ("subtest 1".into(), Status::Fail),
                ("subtest 2.subsubtest 1".into(), Status::Fail),
            ]
        );
    }

    #[test]
    fn kernel_fixture_nested_subtests() {
        // A suite nested in a suite, TAP 14's "ok 1 - name", tabs, and non-KTAP lines between.
        assert_eq!(
            fixture("test_is_test_passed-all_passed_nested"),
            all(
                Status::Pass,
                &[
                    "sysctl_test.sysctl_test_dointvec_null_tbl_data",
                    "sysctl_test.example.example_simple_test",
                    "sysctl_test.example.example_mock_test",
                    "sysctl_test.sysctl_test_dointvec_table_len_is_zero",
                    "sysctl_test.sysctl_test_dointvec_table_read_but_position_set",
                    "example.example_simple_test",
                    "example.example_mock_test",
                ]
            )
        );
    }

    #[test]
    fn kernel_fixture_failure_and_skips() {
        let f = fixture("test_is_test_passed-failure");
        assert_eq!(f.len(), 10);
        assert_eq!(
            f.iter().filter(|(_, s)| *s == Status::Fail).collect::<Vec<_>>(),
            [&("example.example_simple_test".to_string(), Status::Fail)]
        );
        let s = fixture("test_skip_all_tests");
        assert_eq!(s.len(), 5);
        assert!(s.iter().all(|(_, st)| *st == Status::Skip), "{s:?}");
        assert_eq!(
            fixture("test_strip_hyphen"),
            all(Status::Pass, &["sysctl_test.sysctl_test_dointvec_null_tbl_data", "example.example_simple_test"])
        );
    }

    #[test]
    fn kernel_fixture_headers_optional() {
        assert_eq!(fixture("test_parse_subtest_header"), all(Status::Pass, &["suite.test"]));
        assert_eq!(
            fixture("test_parse_ktap_output"),
            all(Status::Pass, &["suite.case_1", "suite.case_2", "suite.case_3"])
        );
    }

    #[test]
    fn kernel_fixture_panic_mid_suite() {
        let f = fixture("test_kernel_panic_interrupt");
        assert_eq!(f.len(), 9, "{f:?}");
        assert_eq!(f[7], ("string-stream-test.string_stream_test_empty_on_creation".into(), Status::Pass));
        assert_eq!(f[8], ("string-stream-test".into(), Status::Fail));
    }
}
