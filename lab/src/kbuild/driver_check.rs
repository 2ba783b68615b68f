//! `lab driver-check`: the series must be clippy-clean, rustfmt-clean and checkpatch-clean,
//! as an upstream submission would be.

use crate::kbuild::pin::Lock;
use crate::kbuild::tree::Series;
use crate::kbuild::{kernel, setup};
use crate::support::paths;
use crate::support::process::run_logged;
use anyhow::{bail, Result};
use std::process::Command;

/// Runs the three checks and reports every finding before failing.
pub fn run() -> Result<()> {
    let cache = paths::cache();
    let lock = Lock::load(&Lock::path())?;
    let series = Series::load(&paths::driver_dir())?;
    let tc = setup::toolchain(&cache)?;
    let (src, _tree_lock) = kernel::prepared_tree(&cache, &lock, &series, "driver-check")?;
    let mut problems: Vec<String> = vec![];

    // Clippy on the Rust support code and the driver, in an O= directory of its own so the
    // CLIPPY=1 command lines don't invalidate the perf build.
    let obj = cache.join("kernel/build/clippy");
    std::fs::create_dir_all(&obj)?;
    kernel::configure(&tc, &src, &obj, &kernel::fragment("perf")?)?;
    let log = obj.join("clippy.log");
    let mut warnings = vec![];
    let jobs = std::thread::available_parallelism().map(|n| n.get() + 1).unwrap_or(2);
    crate::support::progress::note(format!("clippy on rust/ and drivers/android/binder/ (log: {})", log.display()));
    let res = run_logged(
        tc.make(&src, &obj).args(["CLIPPY=1", &format!("-j{jobs}"), "rust/", "drivers/android/binder/"]),
        &log,
        |l| {
            if l.starts_with("warning:") || l.starts_with("error:") {
                warnings.push(l.to_string());
            }
        },
    );
    if let Err(e) = res {
        problems.push(format!("clippy build failed: {e:#}"));
    }
    if !warnings.is_empty() {
        problems.push(format!(
            "clippy: {} warning(s), see {}:\n  {}",
            warnings.len(),
            log.display(),
            warnings.join("\n  ")
        ));
    }
    crate::support::progress::note(format!("clippy: {} warning(s)", warnings.len()));

    let fmt = tc.make(&src, &obj).arg("rustfmtcheck").output()?;
    let fmt_out = String::from_utf8_lossy(&fmt.stdout).into_owned() + &String::from_utf8_lossy(&fmt.stderr);
    if !fmt.status.success() {
        let lines: Vec<&str> = fmt_out.lines().filter(|l| l.starts_with("Diff in")).collect();
        problems.push(format!("rustfmtcheck: {} file(s) need rustfmt:\n  {}", lines.len(), lines.join("\n  ")));
    }
    crate::support::progress::note(format!("rustfmtcheck: {}", if fmt.status.success() { "clean" } else { "FAILED" }));

    for p in &series.patches {
        // checkpatch runs scripts/spdxcheck.py with `python3`; use the system one, which has
        // Debian's python3-ply and python3-git, ahead of any pyenv or venv.
        let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
        let out = Command::new("perl")
            .current_dir(&src)
            .env("PATH", path)
            // FILE_PATH_CHANGES asks whether MAINTAINERS needs updating for a new file; the
            // ANDROID DRIVERS entry already covers all of drivers/android/.
            .args(["scripts/checkpatch.pl", "--show-types", "-q", "--ignore", "FILE_PATH_CHANGES"])
            .arg(series.dir.join(p))
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let clean = out.status.success() && !text.contains("WARNING") && !text.contains("ERROR");
        crate::support::progress::note(format!("checkpatch {p}: {}", if clean { "clean" } else { "FAILED" }));
        if !clean {
            problems.push(format!("checkpatch {p}:\n{text}"));
        }
    }
    if !problems.is_empty() {
        bail!("driver-check found problems:\n{}", problems.join("\n"));
    }
    crate::support::progress::note(format!("driver-check: clean ({} patch(es))", series.patches.len()));
    Ok(())
}
