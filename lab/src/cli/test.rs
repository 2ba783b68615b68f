//! `lab test` (`cargo make test`): host unit tests, guest unit tests, the kernels through
//! the cache, then the end-to-end tests that boot QEMU.

use crate::harness::outcome::Exit;
use crate::kbuild::{driver_check, kernel};
use crate::support::paths;
use anyhow::{bail, Context, Result};
use std::path::Path;
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
    let all = ignored_tests(&paths::repo())?;
    eprintln!("lab test --slow: the {} ignored tests of the host workspace:\n  {}", all.len(), all.join("\n  "));
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

/// The `#[ignore]`d tests of the host workspace (what [`slow`] runs) as `member: name`, read
/// from the sources of the members `Cargo.toml` names (their `src/` and `tests/`).
pub fn ignored_tests(repo: &Path) -> Result<Vec<String>> {
    let manifest: toml::Value = std::fs::read_to_string(repo.join("Cargo.toml"))?.parse()?;
    let members = manifest.get("workspace").and_then(|w| w.get("members")).and_then(|m| m.as_array());
    let mut out = vec![];
    for m in members.context("Cargo.toml: no [workspace] members")?.iter().filter_map(|m| m.as_str()) {
        for sub in ["src", "tests"].map(|s| repo.join(m).join(s)).into_iter().filter(|d| d.is_dir()) {
            for f in crate::support::artifact::walk(&sub)?.0.iter().filter(|f| f.ends_with(".rs")) {
                let text = std::fs::read_to_string(sub.join(f))?;
                out.extend(ignored_in(&text).into_iter().map(|n| format!("{m}: {n}")));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The names of the functions an `#[ignore]` attribute stands on in `text`.
fn ignored_in(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let fn_name = |l: &str| {
        let rest = l.strip_prefix("pub ").unwrap_or(l).strip_prefix("fn ")?;
        Some(rest.split(['(', '<']).next()?.trim().to_string())
    };
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("#[ignore"))
        .filter_map(|(i, _)| lines[i + 1..].iter().find_map(|l| fn_name(l)))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_tests_are_the_functions_under_ignore() {
        let text =
            "#[test]\n#[ignore = \"slow\"]\nfn a() {}\n#[test]\nfn b() {}\n    #[ignore]\n    #[test]\n    fn c() {}\n";
        assert_eq!(ignored_in(text), ["a", "c"]);
    }

    /// guide/ci.md's table of slower tests names every ignored test (a name ending in `…` in
    /// backticks stands for the tests it starts), so `test-slow` runs nothing it does not list.
    #[test]
    fn the_ci_guide_names_every_ignored_test() {
        let repo = paths::repo();
        let all = ignored_tests(&repo).unwrap();
        assert!(all.iter().any(|t| t == "tests: slow_shell_blocks_of_the_readme_and_the_guide_run"), "{all:?}");
        let ci = std::fs::read_to_string(repo.join("docs/src/guide/ci.md")).unwrap();
        let prefixes: Vec<&str> = ci.split('`').filter_map(|t| t.strip_suffix('…')).filter(|p| !p.is_empty()).collect();
        let missing: Vec<&String> = all
            .iter()
            .filter(|t| {
                let name = t.split_once(": ").map_or(t.as_str(), |(_, n)| n);
                !ci.contains(&format!("`{name}`"))
                    && !ci.contains(&format!("::{name}`"))
                    && !prefixes.iter().any(|p| name.starts_with(p))
            })
            .collect();
        assert!(missing.is_empty(), "docs/src/guide/ci.md's slower tests lack: {missing:?}");
    }
}
