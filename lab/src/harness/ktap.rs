//! KTAP from the debug kernel's KUnit run (printed by the `kunit` plan step from
//! /sys/kernel/debug/kunit/*/results) turned into one result per test case.

use labproto::{Event, Status};

/// The prefix the guest init puts before a step's output lines on the console.
pub const STEP_PREFIX: &str = "[kunit] ";

/// Parses KTAP: suites are `# Subtest: NAME` blocks, cases their indented `ok`/`not ok` lines.
pub fn parse(lines: &[&str]) -> Vec<Event> {
    let mut out = vec![];
    let mut suite = String::new();
    for raw in lines {
        let indented = raw.starts_with(' ') || raw.starts_with('\t');
        let line = raw.trim();
        if let Some(name) = line.strip_prefix("# Subtest: ") {
            suite = name.trim().to_string();
            continue;
        }
        // Only the cases inside a suite; the top-level line summarises the suite itself.
        if !indented || suite.is_empty() {
            continue;
        }
        let (ok, rest) = if let Some(r) = line.strip_prefix("not ok ") {
            (false, r)
        } else if let Some(r) = line.strip_prefix("ok ") {
            (true, r)
        } else {
            continue;
        };
        // "3 name # SKIP why" / "3 name"
        let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or("");
        let (name, directive) = match rest.split_once(" # ") {
            Some((n, d)) => (n.trim(), Some(d.trim())),
            None => (rest.trim(), None),
        };
        let skip = directive.is_some_and(|d| d.to_ascii_uppercase().starts_with("SKIP"));
        let status = if skip {
            Status::Skip
        } else if ok {
            Status::Pass
        } else {
            Status::Fail
        };
        out.push(Event::Result {
            step: "kunit".into(),
            case: format!("{suite}.{name}"),
            status,
            duration_ms: 0.0,
            message: directive.map(str::to_string),
            data: serde_json::Value::Null,
        });
    }
    out
}

/// KUnit results found among console lines, if the `kunit` step ran.
pub fn from_console(console: &[String]) -> Vec<Event> {
    let lines: Vec<&str> = console.iter().filter_map(|l| l.strip_prefix(STEP_PREFIX)).collect();
    parse(&lines)
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

    #[test]
    fn cases_with_status() {
        let console: Vec<String> = LOG.lines().map(String::from).collect();
        let ev = from_console(&console);
        let got: Vec<(String, Status)> = ev
            .iter()
            .map(|e| match e {
                Event::Result { case, status, .. } => (case.clone(), *status),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            got,
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
}
