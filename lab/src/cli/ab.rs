//! `lab ab`: a base flavor against the same flavor plus patches, gated and measured the way
//! the seeds were ([`crate::measure::ab`]).

use crate::cli::args::{Given, RunArgs};
use crate::harness::outcome::Exit;
use crate::harness::qemu::Tcg;
use crate::kbuild::treatment::Source;
use crate::measure::ab::{self, Request};
use crate::measure::bench::Profile;
use crate::measure::userspace::Userspace;
use crate::support::{paths, progress::note, stamp};
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct AbArgs {
    /// A patch (`git format-patch` output or a unified diff) applied on the base; repeatable,
    /// applied in the order given, after --series and --tree.
    #[arg(long, value_name = "FILE")]
    pub patch: Vec<PathBuf>,
    /// A directory of patches with a `series` file (e.g. `c-reference`); repeatable, first.
    #[arg(long, value_name = "DIR")]
    pub series: Vec<PathBuf>,
    /// The commits of a clone of the lab's kernel tree from the base flavor's last patch to
    /// REV [default: HEAD]; repeatable, after --series.
    #[arg(long, value_name = "GIT_DIR[@REV]")]
    pub tree: Vec<String>,
    /// The base flavor (perf: the Rust driver; cbinder: the C driver; or any of `lab list
    /// flavors`). Its debug flavor (debug, cbinder-debug, ...) carries the patches too. The
    /// phone's scheduler placement is the run option `--policy phone`, not a flavor.
    #[arg(long, default_value = crate::kbuild::flavor::DEFAULT, value_parser = crate::cli::catalog::Choice::flavors())]
    pub base: String,
    /// quick: 5 boots per arm, small workloads, a 5k-operation fuzz; full: 8 boots, 3
    /// repetitions, a 100k-operation fuzz.
    #[arg(long, value_enum, default_value = "full")]
    pub profile: Profile,
    /// Boots per arm [default: the profile's]; at least 5 (fewer give no performance verdict),
    /// unless --gates-only.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub boots: Option<u64>,
    /// QEMU `-seed` of the first boot pair; boot i runs with N + i - 1. Another range is
    /// another sample of boots (an A/A run takes its own; stored base boots of other ranges
    /// do not answer for it).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub seed_base: u32,
    /// Runs of each failed conformance case on each kernel, to tell a flake from a regression
    /// (0: compare one run of the base only).
    #[arg(long, value_name = "N", default_value_t = crate::measure::ab::RERUNS)]
    pub reruns: u32,
    /// The changes the patch claims, in lab/seeds.toml's shape (`metric` and `values = [before,
    /// after]`): each row gets a direction mark.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Percent by which a row may get worse (CI excluding 0) before the A/B fails.
    #[arg(long, default_value_t = 5.0)]
    pub threshold: f64,
    /// Measure under --tcg icount on the run's QEMU instead of the timing model (the default
    /// when the lab QEMU is built).
    #[arg(long)]
    pub no_model: bool,
    /// Only the builds and the correctness gates: the verdict covers the gates alone.
    #[arg(long, visible_alias = "gates-only")]
    pub no_perf: bool,
    /// Without the debug kernel (no lockdep/KASAN conformance, KUnit or fuzz gates): for a
    /// first answer when the base's debug flavor is not built yet (a full build).
    #[arg(long)]
    pub no_debug: bool,
    /// The programs of seed 000's throughput and tiers workloads: the lab's ports, or AOSP's
    /// binderThroughputTest and schd-dbg (Android 14, built from aosp/).
    #[arg(long, value_enum, default_value = "ports")]
    pub userspace: Userspace,
    /// Where ab.md, ab.html and ab.json go [default: target/lab/ab/<time>].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl AbArgs {
    fn sources(&self) -> Vec<Source> {
        let s = self.series.iter().map(|d| Source::Series(d.clone()));
        let t = self.tree.iter().map(|t| Source::tree(t));
        s.chain(t).chain(self.patch.iter().map(|p| Source::Patch(p.clone()))).collect()
    }
}

/// The timing model when nothing says otherwise and the lab QEMU is built; a build of it
/// would cost more than a quick A/B.
fn use_model(a: &AbArgs, run: &RunArgs) -> bool {
    if a.no_model || run.tcg.is_some_and(|t| t != Tcg::Hicount) {
        return false;
    }
    let built = std::fs::read_dir(paths::cache().join("qemu/artifacts"))
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("qemu-")))
        .unwrap_or(false);
    if !built {
        note("ab: the lab QEMU is not built (`cargo make qemu`), so the A/B runs under --tcg icount, not the timing model");
    }
    built
}

/// Fewer boots than a verdict needs are refused before anything builds.
fn check_boots(a: &AbArgs) -> Result<()> {
    let min = crate::numbers::table::MIN_SAMPLES as u64;
    match a.boots {
        Some(b) if b < min && !a.no_perf => anyhow::bail!(
            "--boots {b}: a performance verdict needs at least {min} boots per arm (with fewer every row is n/a and \
             the A/B could only pass by default): give --boots {min} or more, or --gates-only for the builds and the \
             correctness gates alone"
        ),
        _ => Ok(()),
    }
}

pub fn run(a: &Given<AbArgs>, run: &RunArgs) -> Result<Exit> {
    check_boots(a)?;
    let out = a.out.clone().unwrap_or_else(|| paths::repo().join("target/lab/ab").join(stamp::utc_stamp()));
    std::fs::create_dir_all(&out)?;
    let req = Request {
        sources: a.sources(),
        base: a.base.clone(),
        profile: a.profile,
        boots: a.boots.map(|b| b as usize),
        expect: a.expect.clone(),
        threshold: a.threshold,
        model: !a.no_perf && use_model(a, run),
        no_perf: a.no_perf,
        seed_base: a.seed_base,
        reruns: a.reruns,
        no_debug: a.no_debug,
        userspace: a.userspace,
        out: std::path::absolute(&out)?,
    };
    let report = ab::run(&req, &run.opts("conformance")?)?;
    let md = ab::write(&report, &run.reproducer("ab", a.given()), &out)?;
    println!("{md}");
    println!("report: {}", out.join("ab.md").display());
    println!("verdict: {}", report.verdict.word());
    Ok(report.verdict.exit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        ab: AbArgs,
    }

    fn parse(args: &[&str]) -> AbArgs {
        Cli::try_parse_from(std::iter::once("ab").chain(args.iter().copied())).unwrap().ab
    }

    #[test]
    fn too_few_boots_are_refused_unless_gates_only() {
        let err = check_boots(&parse(&["--patch", "x.patch", "--boots", "3"])).unwrap_err().to_string();
        assert!(err.contains("--boots 3: a performance verdict needs at least 5 boots per arm"), "{err}");
        assert!(err.contains("--gates-only"), "{err}");
        assert!(check_boots(&parse(&["--boots", "3", "--gates-only"])).is_ok());
        assert!(check_boots(&parse(&["--boots", "5"])).is_ok());
        assert!(check_boots(&parse(&[])).is_ok());
    }

    #[test]
    fn the_reproducer_gives_every_ab_option_back() {
        crate::cli::args::assert_round_trip::<AbArgs>(&[
            ("patch", &["a b.patch", "x.patch"]),
            ("series", &["c-reference"]),
            ("tree", &["/k@HEAD~2"]),
            ("base", &["cbinder"]),
            ("profile", &["quick"]),
            ("boots", &["7"]),
            ("seed-base", &["101"]),
            ("reruns", &["5"]),
            ("expect", &["e.toml"]),
            ("threshold", &["2.5"]),
            ("no-model", &[]),
            ("no-perf", &[]),
            ("no-debug", &[]),
            ("userspace", &["aosp"]),
            ("out", &["o"]),
        ]);
    }
}
