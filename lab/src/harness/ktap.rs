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

/// The kernel's own console lines (`[    1.234567] text`) with the timestamp and the one
/// space after it stripped and the rest as printed: KTAP's indentation is its structure.
/// Lines without a timestamp (the init's, a step's) are left out.
pub fn kernel_lines(console: &[String]) -> Vec<&str> {
    console
        .iter()
        .filter_map(|l| {
            let (stamp, rest) = l.strip_prefix('[')?.split_once("] ")?;
            crate::harness::splat::is_timestamp(stamp.trim()).then_some(rest)
        })
        .collect()
}

/// A KUnit suite as one run showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suite {
    pub name: String,
    /// The `# module:` attribute the kernel prints under the suite's header: what
    /// `kunit.filter=module!=NAME` matches (a suite whose cases carry no module has none).
    pub module: Option<String>,
    /// The failed cases (`suite.case`) with the kernel's directive, or the suite itself.
    pub failures: Vec<String>,
    /// The output ended inside it: the boot crashed or hung while the suite ran.
    pub cut_off: bool,
}

impl Suite {
    pub fn failed(&self) -> bool {
        self.cut_off || !self.failures.is_empty()
    }
}

/// The suites of KTAP `lines`, and the number the first top-level plan line (`1..N`)
/// announced: the boot's KTAP (the kernel prints it at KERN_INFO, on the console at
/// `loglevel=7`) announces every suite the kernel runs, also those a crash left unrun.
pub fn suites(lines: &[&str]) -> (Option<usize>, Vec<Suite>) {
    let planned = lines.iter().find_map(|l| l.strip_prefix("1..")?.trim().parse().ok());
    // `# module: M` right under `# Subtest: S`, at the header's indentation.
    let mut modules: Vec<(String, String)> = vec![];
    let mut header: Option<(usize, &str)> = None;
    for raw in lines {
        let body = raw.trim_start();
        let indent = raw.len() - body.len();
        if let Some(name) = body.strip_prefix("# Subtest: ") {
            header = Some((indent, name.trim()));
        } else if let (Some(m), Some((i, s))) = (body.strip_prefix("# module: "), header) {
            if i == indent && !m.trim().is_empty() {
                modules.push((s.to_string(), m.trim().to_string()));
            }
        }
    }
    let suites = tree(lines)
        .into_iter()
        .map(|t| {
            let mut ev = vec![];
            emit(&t, "", &mut ev);
            let failures = ev
                .iter()
                .filter_map(|e| match e {
                    Event::Result { case, status: Status::Fail, message, .. } => {
                        Some(message.as_ref().map_or(case.clone(), |m| format!("{case} ({m})")))
                    }
                    _ => None,
                })
                .collect();
            let module = modules.iter().rev().find(|(s, _)| *s == t.name).map(|(_, m)| m.clone());
            Suite { module, failures, cut_off: t.missing, name: t.name }
        })
        .collect();
    (planned, suites)
}

/// The KUnit expectation and assertion failures among kernel lines ([`kernel_lines`]), one
/// signature each, with the suite when its header came before and without the line number
/// (a patch that moves the line does not make it another failure):
/// `kunit binder_alloc.binder_alloc_test_init_freelist: EXPECTATION FAILED at drivers/android/tests/binder_alloc_kunit.c:N`.
/// The kernel prints them at KERN_ERR as the case runs, so they are on the console at the
/// lab's loglevel and show a case's failure even when the boot crashes before its result line.
pub fn console_failures(lines: &[&str]) -> Vec<String> {
    let mut suite: Option<&str> = None;
    let mut out: Vec<String> = vec![];
    for raw in lines {
        let body = raw.trim();
        if let Some(name) = body.strip_prefix("# Subtest: ") {
            // A suite's header is indented once; a parameterised case's deeper.
            if raw.len() - raw.trim_start().len() <= 4 {
                suite = Some(name.trim());
            }
            continue;
        }
        let Some((case, what)) = body.strip_prefix("# ").and_then(|b| b.split_once(": ")) else { continue };
        let Some((kind, at)) = what.split_once(" FAILED at ") else { continue };
        if !matches!(kind, "EXPECTATION" | "ASSERTION") {
            continue;
        }
        let file = at.rsplit_once(':').filter(|(_, n)| n.bytes().all(|b| b.is_ascii_digit())).map_or(at, |(f, _)| f);
        let case = suite.map_or(case.to_string(), |s| format!("{s}.{case}"));
        let sig = format!("kunit {case}: {kind} FAILED at {file}:N");
        if !out.contains(&sig) {
            out.push(sig);
        }
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

    /// A boot's console at loglevel 7: KUnit's KTAP among other kernel lines, one suite
    /// passed, the second failed a case and the boot crashed in its next case's exit.
    const BOOT: &str = "[    0.000000] Kernel command line: console=ttyAMA0 loglevel=7
[    9.100000] KTAP version 1
[    9.100100] 1..3
[    9.100200]     KTAP version 1
[    9.100300]     # Subtest: first
[    9.100400]     # module: first_kunit
[    9.100500]     1..1
[    9.100600]     ok 1 a
[    9.100700] ok 1 first
[    9.200000]     KTAP version 1
[    9.200100]     # Subtest: binder_alloc
[    9.200200]     # module: binder_alloc_kunit
[    9.200300]     1..3
[    9.200400]     # binder_alloc_test_init_freelist: EXPECTATION FAILED at drivers/android/tests/binder_alloc_kunit.c:416
[    9.200400]     Expected priv->alloc.freelist == &priv->binder_test_freelist, but
[    9.200500]     not ok 1 binder_alloc_test_init_freelist
[   15.852238] kernel BUG at drivers/android/binder_alloc.c:971!
[   15.868295] CPU: 6 UID: 0 PID: 76 Comm: kunit_try_catch Tainted: G                 N  7.2.12-binderlab #1
lab-init: not a kernel line
[kunit]     ok 9 not_the_boot";

    fn boot() -> Vec<String> {
        BOOT.lines().map(String::from).collect()
    }

    #[test]
    fn kernel_lines_keep_ktap_indentation() {
        let console = boot();
        let lines = kernel_lines(&console);
        assert_eq!(lines[1], "KTAP version 1");
        assert_eq!(lines[4], "    # Subtest: first");
        assert!(!lines.iter().any(|l| l.contains("not a kernel line") || l.contains("not_the_boot")));
    }

    #[test]
    fn suites_name_their_module_and_the_one_a_crash_cut_off() {
        let console = boot();
        let (planned, found) = suites(&kernel_lines(&console));
        assert_eq!(planned, Some(3));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            Suite { name: "first".into(), module: Some("first_kunit".into()), failures: vec![], cut_off: false }
        );
        assert!(!found[0].failed());
        let b = &found[1];
        assert_eq!(
            (b.name.as_str(), b.module.as_deref(), b.cut_off),
            ("binder_alloc", Some("binder_alloc_kunit"), true)
        );
        assert_eq!(b.failures, ["binder_alloc.binder_alloc_test_init_freelist"]);
        // The kunit step's results (debugfs) name a failing suite without a crash.
        let step: Vec<&str> = LOG.lines().filter_map(|l| l.strip_prefix("[kunit] ")).collect();
        let (_, s) = suites(&step);
        assert_eq!((s[0].name.as_str(), s[0].cut_off), ("rust_binder_ctabs", false));
        assert_eq!(s[0].failures, ["rust_binder_ctabs.b"]);
    }

    #[test]
    fn expectation_failures_before_a_crash_are_signatures() {
        let console = boot();
        assert_eq!(
            console_failures(&kernel_lines(&console)),
            ["kunit binder_alloc.binder_alloc_test_init_freelist: EXPECTATION FAILED at drivers/android/tests/binder_alloc_kunit.c:N"]
        );
        // The same failure at another line is the same signature; a message that only looks
        // like one is not.
        let moved = ["    # Subtest: binder_alloc", "    # binder_alloc_test_init_freelist: EXPECTATION FAILED at drivers/android/tests/binder_alloc_kunit.c:420"];
        assert_eq!(console_failures(&moved), console_failures(&kernel_lines(&console)));
        assert!(console_failures(&["    # x: NOTHING FAILED at a.c:1", "    # x.speed: slow"]).is_empty());
    }
}
