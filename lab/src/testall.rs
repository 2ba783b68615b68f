//! `lab test` (`cargo make test`): host unit tests, guest unit tests, the three kernels through
//! the cache, then the end-to-end tests that boot QEMU.

use crate::{kernel, paths};
use anyhow::{bail, Result};
use std::process::Command;
use std::time::Instant;

fn cargo(args: &[&str], what: &str) -> Result<()> {
    eprintln!("\n=== {what}: cargo {}", args.join(" "));
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(paths::repo())
        .status()?;
    if !st.success() {
        bail!("{what} failed ({st})");
    }
    Ok(())
}

pub fn run() -> Result<()> {
    let t0 = Instant::now();
    cargo(&["test", "--workspace", "--exclude", "lab-tests"], "host unit tests")?;
    let guest = paths::repo().join("rootfs/guest/Cargo.toml");
    cargo(&["test", "--manifest-path", guest.to_str().unwrap()], "guest unit tests (on the host)")?;
    for flavor in ["perf", "debug", "cbinder"] {
        eprintln!("\n=== kernel {flavor}");
        let b = kernel::build(flavor)?;
        eprintln!("kernel {flavor}: {} ({})", b.image().display(), b.kernel_release());
    }
    // The lab QEMU (qemu/) for the tests that boot it; cached like the kernels.
    eprintln!("\n=== lab QEMU");
    let t = Instant::now();
    let q = crate::qemubuild::build()?;
    eprintln!("lab QEMU: {} in {:.0?}", q.binary().display(), t.elapsed());
    eprintln!("\n=== driver-check");
    crate::driver_check::run()?;
    // --no-fail-fast: one failing test file must not hide the others' results.
    cargo(&["test", "-p", "lab-tests", "--no-fail-fast", "--", "--test-threads=2"], "end-to-end tests (QEMU)")?;
    eprintln!("\nlab test: all passed in {:.0?}", t0.elapsed());
    Ok(())
}
