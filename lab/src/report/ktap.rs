//! `results.ktap`: a run's test cases as KTAP version 1 (Documentation/dev-tools/ktap.rst),
//! the format kunit.py, KernelCI and LAVA read natively. Each suite of the JUnit report (a
//! step, or `run`/`kernel` for what the harness found) is one subtest; its cases are the
//! subtest's tests, failures preceded by their details as `#` diagnostic lines.

use crate::harness::outcome::Outcome;
use crate::report::cases::{test_cases, TestCase};
use labproto::Status;
use std::fmt::Write;

/// Console lines at which kunit.py's parser stops reading KTAP (kunit_parser.py `KTAP_END`):
/// inside a diagnostic they would cut the document short.
const KTAP_END_MARKERS: &[&str] =
    &["List of all partitions:", "Kernel panic - not syncing: VFS:", "reboot: System halted"];

/// One line of text as a KTAP diagnostic (`# ...`) that no KTAP reader mistakes for
/// structure.
fn diagnostic(line: &str) -> String {
    let mut l: String = line.chars().map(|c| if c.is_control() && c != '\t' { '?' } else { c }).collect();
    for m in KTAP_END_MARKERS {
        l = l.replace(m, &m.replace(':', " -"));
    }
    // `# Subtest: x` opens a subtest.
    if l.trim_start().starts_with("Subtest:") {
        l.insert_str(0, "> ");
    }
    format!("# {l}")
}

/// A test name for a result line: `#` would start a directive.
fn ktap_name(name: &str) -> String {
    name.replace('#', "_").replace('\n', " ")
}

/// A case's name inside its suite: `step/case` without the `step/`, except where that is the
/// suite's own name (`topology/topology`): kunit.py takes a result line named like the
/// enclosing test for that test's own result, ending it early.
pub fn case_name(suite: &str, full: &str) -> String {
    match full.strip_prefix(&format!("{suite}/")) {
        Some(short) if short != suite => ktap_name(short),
        _ => ktap_name(full),
    }
}

fn result_line(out: &mut String, indent: &str, n: usize, name: &str, status: Status, why: Option<&str>) {
    let name = ktap_name(name);
    let _ = match status {
        Status::Pass => writeln!(out, "{indent}ok {n} {name}"),
        Status::Fail => writeln!(out, "{indent}not ok {n} {name}"),
        Status::Skip => writeln!(out, "{indent}ok {n} {name} # SKIP {}", why.unwrap_or("").replace('\n', " ")),
    };
}

fn suite(out: &mut String, n: usize, name: &str, cases: &[&TestCase]) {
    const IN: &str = "    ";
    let _ = writeln!(out, "{IN}KTAP version 1\n{IN}# Subtest: {}\n{IN}1..{}", ktap_name(name), cases.len());
    for (i, c) in cases.iter().enumerate() {
        if c.status == Status::Fail {
            for l in c.detail.as_deref().or(c.message.as_deref()).unwrap_or("failed").lines() {
                let _ = writeln!(out, "{IN}{}", diagnostic(l));
            }
        }
        result_line(out, IN, i + 1, &case_name(name, &c.name), c.status, c.message.as_deref());
    }
    let count = |s| cases.iter().filter(|c| c.status == s).count();
    let (pass, fail, skip) = (count(Status::Pass), count(Status::Fail), count(Status::Skip));
    let _ = writeln!(out, "# {}: pass:{pass} fail:{fail} skip:{skip} total:{}", ktap_name(name), cases.len());
    let status = if fail > 0 {
        Status::Fail
    } else if pass == 0 && skip > 0 {
        Status::Skip
    } else {
        Status::Pass
    };
    result_line(out, "", n, name, status, Some("every case skipped"));
}

/// The KTAP document of a run.
pub fn ktap(o: &Outcome) -> String {
    let cases = test_cases(o);
    let mut suites: Vec<&str> = vec![];
    for c in &cases {
        if !suites.contains(&c.suite.as_str()) {
            suites.push(&c.suite);
        }
    }
    let mut out = format!("KTAP version 1\n1..{}\n", suites.len());
    for (i, s) in suites.iter().enumerate() {
        let members: Vec<&TestCase> = cases.iter().filter(|c| &c.suite == s).collect();
        suite(&mut out, i + 1, s, &members);
    }
    let count = |s| cases.iter().filter(|c| c.status == s).count();
    let _ = writeln!(
        out,
        "# Totals: pass:{} fail:{} skip:{} total:{}",
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip),
        cases.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_cannot_end_or_open_anything() {
        assert_eq!(
            diagnostic("Kernel panic - not syncing: VFS: no root"),
            "# Kernel panic - not syncing - VFS - no root"
        );
        assert_eq!(diagnostic("  Subtest: x"), "# >   Subtest: x");
        assert_eq!(diagnostic("a\x1b[0mb"), "# a?[0mb");
        assert_eq!(ktap_name("a#b"), "a_b");
        assert_eq!(case_name("smoke", "smoke/version"), "version");
        assert_eq!(case_name("topology", "topology/topology"), "topology/topology");
    }
}
