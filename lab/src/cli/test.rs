//! `lab test` (`cargo make test`): host unit tests, guest unit tests, the kernels through
//! the cache, then the end-to-end tests that boot QEMU.

use crate::harness::outcome::Exit;
use crate::kbuild::{driver_check, kernel};
use crate::support::paths;
use anyhow::{bail, Result};
use std::process::Command;
use std::time::Instant;

/// Runs cargo; false when it ran and failed (a test failure).
fn cargo(args: &[&str], what: &str) -> Result<bool> {
    eprintln!("\n=== {what}: cargo {}", args.join(" "));
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        // Tests that need QEMU fail instead of skipping: setup installed it.
        .env("LAB_REQUIRE_QEMU", "1")
        .current_dir(paths::repo())
        .status()?;
    if !st.success() {
        eprintln!("\nlab test: {what} failed ({st})");
    }
    Ok(st.success())
}

/// `cargo make test-slow`: every `#[ignore]`d test of the host workspace, one at a time:
/// lab's unit tests that download (Debian's mirror, PyPI) or read this machine's cache, the
/// guest workspace's cross-build, and lab-tests' slow end-to-end tests (DWARF and IKCONFIG
/// kernels, LAVA after `cargo make setup --lava`, the guided fuzzer's KCOV kernels, the
/// guides' slow shell blocks). The guest workspace's ignored tests are seed-printing tools,
/// not checks, and stay out.
pub fn slow(filter: &[String]) -> Result<Exit> {
    let t0 = Instant::now();
    if !cargo(&["build", "-p", "lab"], "the lab binary")? {
        bail!("building the lab binary failed");
    }
    let mut args = vec!["test", "--workspace", "--no-fail-fast", "--", "--ignored", "--test-threads=1"];
    args.extend(filter.iter().map(String::as_str));
    if !cargo(&args, "the slower tests (every #[ignore]d one)")? {
        return Ok(Exit::TestFailure);
    }
    eprintln!("\nlab test --slow: all passed in {:.0?}", t0.elapsed());
    Ok(Exit::Ok)
}

pub fn run() -> Result<Exit> {
    let t0 = Instant::now();
    if !cargo(&["test", "--workspace", "--exclude", "lab-tests"], "host unit tests")? {
        return Ok(Exit::TestFailure);
    }
    let guest = paths::repo().join("rootfs/guest/Cargo.toml");
    if !cargo(&["test", "--manifest-path", guest.to_str().unwrap()], "guest unit tests (on the host)")? {
        return Ok(Exit::TestFailure);
    }
    for flavor in crate::kbuild::flavor::TESTED {
        eprintln!("\n=== kernel {flavor}");
        let b = kernel::build(flavor)?;
        eprintln!("kernel {flavor}: {} ({})", b.image().display(), b.kernel_release());
    }
    // The lab QEMU (qemu/) for the tests that boot it; cached like the kernels.
    eprintln!("\n=== lab QEMU");
    let t = Instant::now();
    let q = crate::kbuild::qemu::build()?;
    eprintln!("lab QEMU: {} in {:.0?}", q.binary().display(), t.elapsed());
    eprintln!("\n=== driver-check");
    driver_check::run()?;
    // The end-to-end tests run the lab binary itself (exit codes).
    if !cargo(&["build", "-p", "lab"], "the lab binary")? {
        bail!("building the lab binary failed");
    }
    // --no-fail-fast: one failing test file must not hide the others' results.
    if !cargo(&["test", "-p", "lab-tests", "--no-fail-fast", "--", "--test-threads=2"], "end-to-end tests (QEMU)")? {
        return Ok(Exit::TestFailure);
    }
    eprintln!("\nlab test: all passed in {:.0?}", t0.elapsed());
    Ok(Exit::Ok)
}
