//! The kernel's own binderfs selftest (tools/testing/selftests/filesystems/binderfs of the
//! pinned tree), built static for the guest with the cross gcc setup installs, and its TAP
//! output turned into one result per case.

use crate::support::artifact::{self, Kind, Reuse};
use crate::support::fs::{publish_dir, sha256_hex};
use crate::support::process::output;
use anyhow::{Context, Result};
use labproto::{Event, Status};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest program (/bin/binderfs_test) and the plan step that runs it.
pub const PROGRAM: &str = "binderfs_test";
pub const STEP: &str = "binderfs";
const DIR: &str = "tools/testing/selftests/filesystems/binderfs";
const CC: &str = "aarch64-linux-gnu-gcc";

/// Whether the plan runs the selftest (so the initramfs needs it).
pub fn wanted(plan: &labproto::Plan) -> bool {
    plan.steps.iter().any(|s| s.argv.iter().any(|a| a.contains(PROGRAM)))
}

/// Builds (or finds in the cache) the static aarch64 binderfs_test of the kernel tree `tree`.
/// The binder UAPI headers come from the tree, the rest from the cross toolchain's sysroot.
pub fn build(cache: &Path, tree: &Path) -> Result<PathBuf> {
    let src = tree.join(DIR).join("binderfs_test.c");
    let harness = tree.join("tools/testing/selftests");
    let uapi = tree.join("include/uapi/linux/android");
    let mut key_text =
        output(Command::new(CC).arg("--version")).with_context(|| format!("{CC} not found; run `cargo make setup`"))?;
    for f in [
        src.clone(),
        harness.join("kselftest_harness.h"),
        harness.join("kselftest.h"),
        uapi.join("binder.h"),
        uapi.join("binderfs.h"),
    ] {
        key_text.push_str(&std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?);
    }
    let dir = Kind::Selftest.root(cache).join(format!("binderfs-{}", &sha256_hex(key_text.as_bytes())[..16]));
    let bin = dir.join(PROGRAM);
    if dir.exists() && artifact::reuse(Kind::Selftest, &dir)? == Reuse::Use && bin.is_file() {
        crate::support::process::mark_used(&dir);
        return Ok(bin);
    }
    // Built in a staging directory, recorded (support::artifact) and renamed into place.
    publish_dir(&dir, |tmp| {
        std::fs::create_dir_all(tmp.join("include/linux/android"))?;
        for h in ["binder.h", "binderfs.h"] {
            std::fs::copy(uapi.join(h), tmp.join("include/linux/android").join(h))?;
        }
        let mut cc = Command::new(CC);
        cc.args(["-static", "-O2", "-pthread", "-o"]).arg(tmp.join(PROGRAM)).arg("-I").arg(tmp.join("include"));
        cc.arg("-I").arg(&harness).arg(&src);
        output(&mut cc).with_context(|| format!("building {}", src.display()))?;
        rootfs::check_static_aarch64(&tmp.join(PROGRAM))?;
        artifact::seal(tmp)
    })?;
    Ok(bin)
}

/// Results from the selftest's TAP on the console (`[binderfs] ok 1 global.binderfs_stress`).
/// A case with a failed expectation in its log fails, whatever TAP says; a TAP plan with fewer
/// results than announced (a crash) is a failing `tap` case.
pub fn from_console(console: &[String]) -> Vec<Event> {
    let prefix = format!("[{STEP}] ");
    let lines: Vec<&str> = console.iter().filter_map(|l| l.strip_prefix(&prefix)).collect();
    let mut out = vec![];
    let mut planned = None;
    for l in &lines {
        if let Some(n) = l.strip_prefix("1..") {
            planned = n.trim().parse::<usize>().ok();
        }
        let (ok, rest) = match l.strip_prefix("not ok ") {
            Some(r) => (false, r),
            None => match l.strip_prefix("ok ") {
                Some(r) => (true, r),
                None => continue,
            },
        };
        let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or_default();
        let (name, directive) = rest.split_once(" #").map(|(n, d)| (n.trim(), d.trim())).unwrap_or((rest.trim(), ""));
        let (status, message) = match (ok, directive.to_ascii_uppercase().starts_with("SKIP")) {
            (true, true) => (Status::Skip, Some(directive.to_string())),
            (true, false) => (Status::Pass, None),
            (false, _) => (Status::Fail, (!directive.is_empty()).then(|| directive.to_string())),
        };
        out.push(match judge_log(&lines, name) {
            Some((status, why)) => result(name, status, Some(why)),
            None => result(name, status, message),
        });
    }
    match planned {
        Some(n) if out.len() < n => {
            out.push(result("tap", Status::Fail, Some(format!("{} of {n} planned cases reported", out.len()))))
        }
        None if !lines.is_empty() => out.push(result("tap", Status::Fail, Some("no TAP plan line (1..N)".into()))),
        _ => {}
    }
    out
}

/// The harness logs as `# .../binderfs_test.c:163:<test>:<message>`. A failed expectation
/// fails the case whatever TAP says: binderfs_test turns its own failures into "SKIP The
/// Android binderfs filesystem is not available", which would hide a driver that lost a
/// binderfs feature (as the Rust driver lacked features/transaction_report before
/// rust-driver 0013).
fn judge_log(lines: &[&str], case: &str) -> Option<(Status, String)> {
    let test = case.rsplit('.').next().unwrap_or(case);
    let tag = format!(":{test}:");
    let first = lines.iter().copied().find(|l| l.contains(&tag) && l.contains(":Expected "))?;
    let what = first.split_once(&tag).map(|(_, m)| m).unwrap_or(first);
    Some((Status::Fail, format!("failed expectation: {what}")))
}

fn result(case: &str, status: Status, message: Option<String>) -> Event {
    Event::Result {
        step: STEP.into(),
        case: case.into(),
        status,
        duration_ms: 0.0,
        message,
        data: serde_json::Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(text: &str) -> Vec<String> {
        text.lines().map(|l| format!("[{STEP}] {l}")).collect()
    }

    fn cases(ev: &[Event]) -> Vec<(String, Status, Option<String>)> {
        ev.iter()
            .map(|e| match e {
                Event::Result { case, status, message, .. } => (case.clone(), *status, message.clone()),
                _ => unreachable!(),
            })
            .collect()
    }

    // The 7.2 selftest on the Rust driver before it had features/transaction_report, as the
    // perf kernel printed it (paths shortened); the third case is changed to fail one more
    // expectation.
    const RUST: &str = "TAP version 13
1..3
# Starting 3 tests from 1 test cases.
#  RUN           global.binderfs_stress ...
#            OK  global.binderfs_stress
ok 1 global.binderfs_stress
#  RUN           global.binderfs_test_privileged ...
# /t/binderfs_test.c:109:binderfs_test_privileged:Allocated new binder device with major 253, minor 8, and name my-binder
# /t/binderfs_test.c:132:binderfs_test_privileged:Detected binder version: 8
# /t/binderfs_test.c:163:binderfs_test_privileged:Expected fd (-1) >= 0 (0)
# /t/binderfs_test.c:164:binderfs_test_privileged:No such file or directory - Failed to open binder feature: transaction_report
# /t/binderfs_test.c:177:binderfs_test_privileged:No such file or directory - Failed to unmount binderfs
#      SKIP      The Android binderfs filesystem is not available
#            OK  global.binderfs_test_privileged
ok 2 global.binderfs_test_privileged # SKIP The Android binderfs filesystem is not available
#  RUN           global.binderfs_test_unprivileged ...
# /t/binderfs_test.c:100:binderfs_test_unprivileged:Expected ret (-1) == 0 (0)
# /t/binderfs_test.c:163:binderfs_test_unprivileged:Expected fd (-1) >= 0 (0)
# /t/binderfs_test.c:164:binderfs_test_unprivileged:No such file or directory - Failed to open binder feature: transaction_report
#      SKIP      The Android binderfs filesystem is not available
ok 3 global.binderfs_test_unprivileged # SKIP The Android binderfs filesystem is not available
# PASSED: 3 / 3 tests passed.";

    #[test]
    fn a_failed_expectation_fails_whatever_tap_says() {
        let got = cases(&from_console(&console(RUST)));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], ("global.binderfs_stress".into(), Status::Pass, None));
        // A missing feature file: a failure, not the selftest's SKIP (no gap is excused).
        assert_eq!(got[1].1, Status::Fail);
        assert_eq!(got[1].2.as_deref(), Some("failed expectation: Expected fd (-1) >= 0 (0)"));
        // The first failed expectation is named.
        assert_eq!(got[2].1, Status::Fail);
        assert_eq!(got[2].2.as_deref(), Some("failed expectation: Expected ret (-1) == 0 (0)"));
    }

    #[test]
    fn crash_and_skip() {
        let got = cases(&from_console(&console("1..3\nok 1 global.a # SKIP not root\n")));
        assert_eq!(got[0], ("global.a".into(), Status::Skip, Some("SKIP not root".into())));
        assert_eq!(got[1].0, "tap");
        assert_eq!(got[1].1, Status::Fail);
        assert!(from_console(&["[other] ok 1 x".to_string()]).is_empty());
    }

    #[test]
    fn plan_detection() {
        let mut p = crate::harness::opts::load_plan("binderfs").unwrap();
        assert!(wanted(&p));
        p.steps[0].argv = vec!["/bin/topology".into()];
        assert!(!wanted(&p));
    }
}
