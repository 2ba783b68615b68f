//! Stage 6: the `lab` commands, one file per command (or family), and the nightly's
//! orchestration. May import every stage; nothing imports it.

pub mod args;
pub mod bench;
pub mod compare;
pub mod kernel;
pub mod nightly;
pub mod qemu;
pub mod reproduce;
pub mod run;
pub mod setup;
pub mod test;

use crate::harness::outcome::Exit;
use anyhow::Result;
use args::RunArgs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "lab", about = "Build, boot and measure the Rust binder driver on an emulated SA8155P")]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Install and check everything the builds need (idempotent).
    Setup,
    /// Build (or reuse) the kernel of a flavor.
    Kernel {
        /// perf (benchmarks), debug (lockdep, KASAN, KUnit), ...: kernel-config/<flavor>.config.
        #[arg(long, env = "LAB_FLAVOR", default_value = "perf")]
        flavor: String,
    },
    /// Re-pin kernel-config/kernel.lock to the newest linux-source-7.2 served.
    KernelLock,
    /// Print the prepared kernel tree's path (edit and commit there).
    DriverTree,
    /// Regenerate rust-driver/*.patch and series from the tree's commits.
    DriverExport,
    /// Discard the tree's work and re-apply rust-driver/ from scratch.
    DriverReset,
    /// Build (or reuse) the lab's patched QEMU (qemu/) and print its binary's path.
    Qemu,
    /// Print the prepared QEMU tree's path (edit and commit there, then `qemu-export`).
    QemuTree,
    /// Regenerate qemu/*.patch and series from the QEMU tree's commits.
    QemuExport,
    /// Discard the QEMU tree's work and re-apply qemu/ from scratch.
    QemuReset,
    /// Boot a board, run a plan, print the summary; non-zero exit on any failure.
    Run(RunArgs),
    /// Boot a board with an interactive shell on the console.
    Shell(RunArgs),
    /// Run the binder conformance suite (plan `conformance`) and print a per-case table;
    /// JUnit XML and TAP go into the run directory. Non-zero exit on any failure.
    Conformance(RunArgs),
    /// Run the binder fuzzer (plan `fuzz`: 20k operations; `--plan fuzz-long` for
    /// millions, `--append binder_fuzz.seed=N` to replay a seed) and print the table.
    Fuzz(RunArgs),
    /// Everything `cargo make test` runs: unit tests, kernels, end-to-end tests.
    Test,
    /// Clippy, rustfmtcheck and checkpatch over rust-driver/.
    DriverCheck,
    /// Seed 000's benchmarks under CTABS modes 0, 1, 2 (interleaved, one boot) with CIs.
    Bench {
        #[arg(long, value_enum, default_value = "full")]
        profile: crate::measure::bench::Profile,
        /// Repetitions per mode (the full default takes about 8 minutes here).
        #[arg(long, default_value_t = 12)]
        reps: usize,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Every table of the three seed mails: the seed's figure beside the lab's (median, 95%
    /// CI) and whether the direction matches. Boots the perf and cbinder kernels.
    Reproduce {
        #[arg(long, value_enum, default_value = "full")]
        profile: crate::measure::bench::Profile,
        /// Where reproduce.md and reproduce.json go [default: target/lab/reproduce/<time>].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Re-render the tables of a finished reproduction (a directory with reproduce.json,
        /// e.g. a nightly's `reproduce/`) without running anything.
        #[arg(long)]
        from: Option<std::path::PathBuf>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Everything for nightly CI into one artifact directory: kernels perf/debug/cbinder,
    /// conformance on each, KUnit, a long fuzz on debug, CTABS checks and `reproduce`;
    /// JUnit, JSON, KCIDB JSON and an HTML report. Non-zero exit on any failure, splat or
    /// regression against --baseline.
    Nightly {
        #[arg(long, value_enum, default_value = "full")]
        profile: crate::measure::bench::Profile,
        /// Artifact directory [default: target/lab/nightly/<time>].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// A previous nightly.json to compare against.
        #[arg(long)]
        baseline: Option<std::path::PathBuf>,
        /// Percent by which a gated metric may be worse than the baseline.
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
        /// Fuzzer operations on the debug kernel [default: 1000000; quick profile 20000].
        #[arg(long)]
        fuzz_ops: Option<u64>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Compare two nightly.json files (baseline, current) with the nightly's regression rule.
    Compare {
        baseline: std::path::PathBuf,
        current: std::path::PathBuf,
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
    },
}

/// The `lab` binary: parse, dispatch, exit with the command's [`Exit`] code (an error is a
/// harness error; clap exits 2 on a bad command line).
pub fn main() {
    let cli = Cli::parse();
    let exit = execute(cli.cmd).unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        Exit::HarnessError
    });
    exit.exit()
}

/// Runs one command; the exit it calls for.
pub fn execute(cmd: Cmd) -> Result<Exit> {
    let done = |r: Result<()>| r.map(|()| Exit::Ok);
    match cmd {
        Cmd::Setup => done(setup::run()),
        Cmd::Kernel { flavor } => done(kernel::build(&flavor)),
        Cmd::KernelLock => done(kernel::lock()),
        Cmd::DriverTree => done(kernel::driver_tree()),
        Cmd::DriverExport => done(kernel::driver_export()),
        Cmd::DriverReset => done(kernel::driver_reset()),
        Cmd::Qemu => done(qemu::build()),
        Cmd::QemuTree => done(qemu::tree()),
        Cmd::QemuExport => done(qemu::export()),
        Cmd::QemuReset => done(qemu::reset()),
        Cmd::Shell(args) => done(crate::harness::run::shell(&args.opts("shell"))),
        Cmd::Test => test::run(),
        Cmd::DriverCheck => done(crate::kbuild::driver_check::run()),
        Cmd::Reproduce { from: Some(dir), .. } => done(reproduce::rerender(&dir)),
        // The commands that boot guests exit with what they found.
        Cmd::Run(args) => run::run(&args),
        Cmd::Conformance(args) => run::suite(&args, "conformance"),
        Cmd::Fuzz(args) => run::suite(&args, "fuzz"),
        Cmd::Bench { profile, reps, run } => bench::run(profile, reps, &run),
        Cmd::Reproduce { profile, out, run, from: None } => reproduce::run(profile, out, &run),
        Cmd::Nightly { profile, out, baseline, threshold, fuzz_ops, run } => {
            nightly::command(profile, out, baseline, threshold, fuzz_ops, &run)
        }
        Cmd::Compare { baseline, current, threshold } => compare::run(&baseline, &current, threshold),
    }
}
