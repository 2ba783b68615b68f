//! `lab`: the binder-lab host CLI. cargo-make tasks are thin wrappers around these commands.

use anyhow::Result;
use clap::{Parser, Subcommand};
use lab::{kernel, lock, paths, qemu, report, run, setup, tree};

#[derive(Parser)]
#[command(name = "lab", about = "Build, boot and measure the Rust binder driver on an emulated SA8155P")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
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
        profile: lab::bench::Profile,
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
        profile: lab::bench::Profile,
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
        profile: lab::bench::Profile,
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

#[derive(clap::Args)]
struct RunArgs {
    /// Board name in board/ (sa8155p, sm8150-upstream, symmetric) or a path.
    #[arg(long, env = "LAB_BOARD", default_value = "sa8155p")]
    board: String,
    /// Plan name in rootfs/plans/ or a path to a plan file [default: default; shell for
    /// `shell`, conformance for `conformance`, fuzz for `fuzz`].
    #[arg(long, env = "LAB_PLAN")]
    plan: Option<String>,
    /// Kernel flavor (kernel-config/<flavor>.config).
    #[arg(long, env = "LAB_FLAVOR", default_value = "perf")]
    flavor: String,
    /// TCG mode [default: single; icount (deterministic) for bench, reproduce and the
    /// nightly's measurements].
    #[arg(long, value_enum, env = "LAB_TCG")]
    tcg: Option<qemu::Tcg>,
    /// Directory whose files are added to the initramfs (e.g. bin/my-client).
    #[arg(long, env = "LAB_OVERLAY")]
    overlay: Option<std::path::PathBuf>,
    /// Seconds to wait for the guest init's first message.
    #[arg(long, default_value_t = 60)]
    boot_timeout: u64,
    /// Pin vCPU threads to host CPUs.
    #[arg(long)]
    pin: bool,
    /// Show the guest console live.
    #[arg(long, short)]
    verbose: bool,
    /// Extra kernel command-line arguments.
    #[arg(long)]
    append: Vec<String>,
    /// Which QEMU: the system's, or the lab's patched build (qemu/, built on first use).
    #[arg(long, value_enum, env = "LAB_QEMU", default_value = "system")]
    qemu: lab::qemubuild::Choice,
    /// A TCG plugin, `path[,arg=value...]` (`{run}` is the run directory); repeatable.
    #[arg(long)]
    plugin: Vec<String>,
}

impl RunArgs {
    /// For benchmarks: icount unless --tcg says otherwise, so that repeated runs agree and
    /// the confidence intervals measure the workload, not the host.
    fn measure_opts(&self, default_plan: &str) -> run::RunOpts {
        run::RunOpts { tcg: self.tcg.unwrap_or(qemu::Tcg::Icount), ..self.opts(default_plan) }
    }

    fn opts(&self, default_plan: &str) -> run::RunOpts {
        run::RunOpts {
            board: self.board.clone(),
            plan: self.plan.clone().unwrap_or_else(|| default_plan.into()),
            flavor: self.flavor.clone(),
            tcg: self.tcg.unwrap_or(qemu::Tcg::Single),
            overlay: self.overlay.clone(),
            boot_timeout: std::time::Duration::from_secs(self.boot_timeout),
            echo: self.verbose,
            pin: self.pin,
            append: self.append.clone(),
            qemu: self.qemu,
            plugins: self.plugin.clone(),
            ..Default::default()
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli.cmd) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cmd: Cmd) -> Result<()> {
    let cache = paths::cache();
    match cmd {
        Cmd::Setup => setup::run(),
        Cmd::Kernel { flavor } => {
            let b = kernel::build(&flavor)?;
            println!("{}", b.image().display());
            Ok(())
        }
        Cmd::KernelLock => setup::kernel_lock(&cache),
        Cmd::DriverTree => {
            println!("{}", prepared_tree(&cache)?.0.display());
            Ok(())
        }
        Cmd::DriverExport => {
            let names = tree::export(&prepared_tree(&cache)?.0, &paths::driver_dir())?;
            println!("exported {} patch(es) to rust-driver/", names.len());
            for n in names {
                println!("  {n}");
            }
            Ok(())
        }
        Cmd::Qemu => {
            println!("{}", lab::qemubuild::build()?.binary().display());
            Ok(())
        }
        Cmd::QemuTree => {
            println!("{}", lab::qemubuild::prepared_tree(&cache)?.0.display());
            Ok(())
        }
        Cmd::QemuExport => {
            let (t, _lock) = lab::qemubuild::unsynced_tree(&cache)?;
            let names = tree::export_named(&t, &paths::qemu_dir(), lab::qemubuild::NAMES, "cargo make qemu")?;
            println!("exported {} patch(es) to qemu/", names.len());
            for n in names {
                println!("  {n}");
            }
            Ok(())
        }
        Cmd::QemuReset => {
            let (t, _lock) = lab::qemubuild::unsynced_tree(&cache)?;
            tree::reset(&t, &lab::qemubuild::series()?)?;
            println!("{} now carries exactly qemu/series", t.display());
            Ok(())
        }
        Cmd::Run(args) => {
            let o = run::run(&args.opts("default"))?;
            print!("{}", run::summary(&o));
            if !o.ok() {
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Shell(args) => run::shell(&args.opts("shell")),
        Cmd::Conformance(args) => suite(&args, "conformance"),
        Cmd::Fuzz(args) => suite(&args, "fuzz"),
        Cmd::Test => lab::testall::run(),
        Cmd::DriverCheck => lab::driver_check::run(),
        Cmd::Bench { profile, reps, run } => {
            if !lab::bench::run(profile, reps, &run.measure_opts("bench"))? {
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Reproduce { from: Some(dir), .. } => {
            println!("{}", lab::reproduce::rerender(&dir)?);
            Ok(())
        }
        Cmd::Reproduce { profile, out, run, from: None } => {
            let out = out.unwrap_or_else(|| paths::repo().join("target/lab/reproduce").join(lab::util::utc_stamp()));
            let r = lab::reproduce::run(profile, &run.measure_opts("bench"), &out)?;
            println!("{}", r.text);
            for o in r.outcomes() {
                for p in o.problems() {
                    println!("FAILED {}: {p}", o.dir.display());
                }
            }
            println!("report: {}", out.join("reproduce.md").display());
            if !r.ok() {
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Nightly { profile, out, baseline, threshold, fuzz_ops, run } => {
            let out = out.unwrap_or_else(|| paths::repo().join("target/lab/nightly").join(lab::util::utc_stamp()));
            let quick = profile == lab::bench::Profile::Quick;
            let opts = lab::nightly::Opts {
                profile,
                out: out.clone(),
                baseline,
                threshold_pct: threshold,
                fuzz_ops: fuzz_ops.unwrap_or(if quick { 20_000 } else { 1_000_000 }),
                base: run.opts("default"),
                measure_tcg: run.tcg.unwrap_or(qemu::Tcg::Icount),
            };
            let n = lab::nightly::run(&opts)?;
            if let Some(r) = &n.reproduce {
                println!("{}", r.text);
            }
            print!("{}", lab::nightly::summary(&n, &out));
            if !n.failures().is_empty() {
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Compare { baseline, current, threshold } => {
            let cur = lab::nightly::load_baseline(&current)?;
            let c = lab::nightly::compare(&lab::nightly::load_baseline(&baseline)?, &cur, threshold);
            let mut regressed = 0;
            for x in &c {
                if x.verdict != lab::nightly::Verdict::Ok {
                    println!(
                        "{:<9} {} ({:+.1}% worse)",
                        format!("{:?}", x.verdict).to_lowercase(),
                        x.metric,
                        x.worse_pct.unwrap_or(f64::NAN)
                    );
                }
                regressed += usize::from(x.verdict == lab::nightly::Verdict::Regressed);
            }
            println!("{} gated metrics compared, {regressed} regressed (threshold {threshold}%)", c.len());
            if regressed > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::DriverReset => {
            let (t, _tree_lock) = prepared_tree(&cache)?;
            tree::reset(&t, &tree::Series::load(&paths::driver_dir())?)?;
            println!("{} now carries exactly rust-driver/series", t.display());
            Ok(())
        }
    }
}

/// Runs a plan and prints the per-case table (with the run's summary below it).
fn suite(args: &RunArgs, default_plan: &str) -> Result<()> {
    let opts = args.opts(default_plan);
    let o = run::run(&opts)?;
    print!("{}", report::case_table(&o));
    println!(
        "kernel: {} flavor; reports: {} and {}",
        opts.flavor,
        o.dir.join("junit.xml").display(),
        o.dir.join("results.tap").display()
    );
    // The summary without its per-result lines (the table has them).
    for l in run::summary(&o).lines() {
        if !["PASS  ", "FAIL  ", "SKIP  "].iter().any(|p| l.starts_with(p)) {
            println!("{l}");
        }
    }
    if !o.ok() {
        std::process::exit(1);
    }
    Ok(())
}

/// The unpacked kernel tree (unpacking it on first use), locked against other lab processes
/// while the caller holds the returned file.
fn prepared_tree(cache: &std::path::Path) -> Result<(std::path::PathBuf, std::fs::File)> {
    let lock = lock::Lock::load(&lock::Lock::path())?;
    let deb = setup::ensure_kernel_deb(cache, &lock)?;
    let t = tree::ensure_unpacked(cache, &lock, &deb)?;
    Ok((t, tree::lock(cache)?))
}
