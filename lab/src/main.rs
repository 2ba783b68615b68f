//! `lab`: the binder-lab host CLI. cargo-make tasks are thin wrappers around these commands.

use anyhow::Result;
use clap::{Parser, Subcommand};
use lab::{kernel, lock, paths, qemu, report, run, setup, tree};

#[derive(Parser)]
#[command(name = "lab", version, about = "Build, boot and measure the Rust binder driver on an emulated SA8155P")]
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
        #[arg(long, env = "LAB_FLAVOR", default_value = "perf", value_parser = lab::catalog::Choice::flavors())]
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
    /// Boot a board, run a plan (or one command: `lab run [OPTIONS] -- CMD ARGS...`), print
    /// the summary. Exit code: 0, or the first failure's (README "Exit codes"); with a
    /// command, the command's own exit code.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// Seconds the command may run (with `-- CMD`).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// A guest command instead of a plan: an absolute path, or a name in /bin (busybox
        /// applets, the lab's programs, an --overlay's bin/). Its output streams to stdout.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Boot a board with an interactive shell on the console.
    Shell(RunArgs),
    /// Run the binder conformance suite (plan `conformance`) and print a per-case table;
    /// JUnit XML and TAP go into the run directory. Non-zero exit on any failure.
    Conformance {
        #[command(flatten)]
        cases: CaseArgs,
        #[command(flatten)]
        run: RunArgs,
    },
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
    /// List boards, plans, kernel flavors or conformance cases.
    List {
        #[arg(value_enum)]
        what: lab::catalog::Kind,
    },
    /// Print a shell completion script, e.g. `lab completions bash > ~/.local/share/bash-completion/completions/lab`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Compare two nightly.json files (baseline, current) with the nightly's regression rule.
    Compare {
        baseline: std::path::PathBuf,
        current: std::path::PathBuf,
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
    },
}

/// Which conformance cases run.
#[derive(clap::Args, Default)]
struct CaseArgs {
    /// Print the suite's cases and exit (no boot).
    #[arg(long)]
    list: bool,
    /// Run only this case (repeatable; opt-in cases run only when named).
    #[arg(long = "case", value_name = "NAME")]
    cases: Vec<String>,
    /// Leave this case out (repeatable).
    #[arg(long = "skip", value_name = "NAME")]
    skip: Vec<String>,
}

/// The conformance cases, one line each.
fn case_list() -> String {
    let w = labproto::CONFORMANCE_CASES.iter().map(|c| c.name.len()).max().unwrap_or(0);
    labproto::CONFORMANCE_CASES
        .iter()
        .map(|c| format!("{:<w$}  {}{}\n", c.name, if c.opt_in { "(opt-in) " } else { "" }, c.summary))
        .collect()
}

#[derive(clap::Args)]
struct RunArgs {
    /// Board name in board/ or a path to a board file.
    #[arg(long, env = "LAB_BOARD", default_value = "sa8155p", value_parser = lab::catalog::Choice::boards())]
    board: String,
    /// Plan name in rootfs/plans/ or a path to a plan file [default: default; shell for
    /// `shell`, conformance for `conformance`, fuzz for `fuzz`].
    #[arg(long, env = "LAB_PLAN", value_parser = lab::catalog::Choice::plans())]
    plan: Option<String>,
    /// Kernel flavor (kernel-config/<flavor>.config).
    #[arg(long, env = "LAB_FLAVOR", default_value = "perf", value_parser = lab::catalog::Choice::flavors())]
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
    /// Run the plan's steps N times in one boot; results are reported as STEP@1..STEP@N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    repeat: Option<u32>,
    /// Stop repeating after the first run with a failure (up to --repeat runs, default 100).
    #[arg(long)]
    until_fail: bool,
    /// Guest file or directory every step sends back when it ends, into the run directory's
    /// collect/<step>/<path> (repeatable). A path missing after a step fails the run.
    #[arg(long, value_name = "GUEST_PATH")]
    collect: Vec<String>,
    /// Use only CPUs 0..N-1 of the board (clusters keep their remaining CPUs).
    #[arg(long, value_name = "N")]
    smp: Option<u32>,
    /// Guest memory instead of the board's, in QEMU's -m syntax (e.g. 4G).
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// KUnit suites/cases to run, as kunit.filter_glob=GLOB on the kernel command line
    /// (debug flavor, `--plan kunit`), e.g. 'ctabs*' or 'ctabs.pick_*'.
    #[arg(long, value_name = "GLOB")]
    filter: Option<String>,
}

/// Runs of `--until-fail` without `--repeat`.
const UNTIL_FAIL_RUNS: u32 = 100;

impl RunArgs {
    /// For benchmarks: icount unless --tcg says otherwise, so that repeated runs agree and
    /// the confidence intervals measure the workload, not the host.
    fn measure_opts(&self, default_plan: &str) -> Result<run::RunOpts> {
        if self.repeat.is_some() || self.until_fail {
            anyhow::bail!(
                "--repeat and --until-fail are for run, conformance and fuzz; bench and reproduce take --reps"
            );
        }
        let tcg = self.tcg.unwrap_or(qemu::Tcg::Icount);
        Ok(run::RunOpts { tcg, ..self.opts(default_plan)? })
    }

    fn opts(&self, default_plan: &str) -> Result<run::RunOpts> {
        Ok(run::RunOpts {
            board: self.board.clone(),
            plan: self.plan.clone().unwrap_or_else(|| default_plan.into()),
            flavor: self.flavor.clone(),
            tcg: self.tcg.unwrap_or(qemu::Tcg::Single),
            overlay: self.overlay.clone(),
            boot_timeout: std::time::Duration::from_secs(self.boot_timeout),
            echo: self.verbose,
            pin: self.pin,
            append: self
                .append
                .iter()
                .cloned()
                .chain(self.filter.iter().map(|g| format!("kunit.filter_glob={g}")))
                .collect(),
            repeat: self.repeat.unwrap_or(if self.until_fail { UNTIL_FAIL_RUNS } else { 1 }),
            until_fail: self.until_fail,
            collect: self.collect_paths()?,
            smp: self.smp,
            memory: self.memory.clone(),
            ..Default::default()
        })
    }

    fn collect_paths(&self) -> Result<Vec<String>> {
        for p in &self.collect {
            let path = std::path::Path::new(p);
            if !path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
                anyhow::bail!("--collect {p:?}: give an absolute guest path without `..`, e.g. /tmp/out.txt");
            }
        }
        Ok(self.collect.clone())
    }

    /// The `cargo make TASK ...` line that runs this again: every option that differs from
    /// its default (environment variables included), then `extra`.
    fn reproducer(&self, task: &str, extra: &[String]) -> String {
        let mut a: Vec<String> = vec!["cargo".into(), "make".into(), task.into()];
        let mut opt = |k: &str, v: Option<String>| {
            a.push(format!("--{k}"));
            a.extend(v);
        };
        if self.board != "sa8155p" {
            opt("board", Some(self.board.clone()));
        }
        if let Some(p) = &self.plan {
            opt("plan", Some(p.clone()));
        }
        if self.flavor != "perf" {
            opt("flavor", Some(self.flavor.clone()));
        }
        if let Some(t) = self.tcg {
            opt("tcg", Some(format!("{t:?}").to_lowercase()));
        }
        if let Some(o) = &self.overlay {
            opt("overlay", Some(o.display().to_string()));
        }
        if self.boot_timeout != 60 {
            opt("boot-timeout", Some(self.boot_timeout.to_string()));
        }
        for x in &self.append {
            opt("append", Some(x.clone()));
        }
        if self.pin {
            opt("pin", None);
        }
        if let Some(n) = self.repeat {
            opt("repeat", Some(n.to_string()));
        }
        if self.until_fail {
            opt("until-fail", None);
        }
        for p in &self.collect {
            opt("collect", Some(p.clone()));
        }
        if let Some(n) = self.smp {
            opt("smp", Some(n.to_string()));
        }
        if let Some(m) = &self.memory {
            opt("memory", Some(m.clone()));
        }
        if let Some(g) = &self.filter {
            opt("filter", Some(g.clone()));
        }
        a.extend(extra.iter().cloned());
        qemu::shell_line(&a)
    }
}

/// `lab --version`: the lab's version, its source commit, the pinned kernel and the QEMU
/// it runs (asked only when --version is given: it starts QEMU once).
fn long_version() -> String {
    let commit = std::process::Command::new("git")
        .args(["-C", &paths::repo().display().to_string(), "describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let kernel = lock::Lock::load(&lock::Lock::path())
        .map(|l| format!("{} {}", l.kernel.package, l.kernel.version))
        .unwrap_or_else(|e| format!("no kernel.lock ({e})"));
    let qemu = qemu::version().unwrap_or_else(|e| format!("{e:#}"));
    format!(
        "{}\nsource: {commit}\nkernel: {kernel} (kernel-config/kernel.lock)\nqemu: {qemu}",
        env!("CARGO_PKG_VERSION")
    )
}

fn main() {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    if std::env::args().any(|a| a == "--version") {
        cmd = cmd.long_version(long_version());
    }
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    if let Err(e) = run(cli.cmd) {
        eprintln!("error: {e:#}");
        std::process::exit(lab::adhoc::code::HARNESS_ERROR);
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
        Cmd::Run { run, timeout, command } if !command.is_empty() => run_command(&run, timeout, &command),
        Cmd::Run { run, .. } => {
            let o = run::run(&run.opts("default")?)?;
            print!("{}", run::summary(&o));
            if !o.ok() {
                println!("reproduce: {}", run.reproducer("run-qemu", &[]));
                std::process::exit(lab::adhoc::plan_exit_code(&o));
            }
            Ok(())
        }
        Cmd::Shell(args) => run::shell(&args.opts("shell")?),
        Cmd::Conformance { cases, .. } if cases.list => {
            print!("{}", case_list());
            Ok(())
        }
        Cmd::Conformance { cases, run } => suite(&run, "conformance", &cases),
        Cmd::Fuzz(args) => suite(&args, "fuzz", &CaseArgs::default()),
        Cmd::Test => lab::testall::run(),
        Cmd::DriverCheck => lab::driver_check::run(),
        Cmd::Bench { profile, reps, run } => {
            if !lab::bench::run(profile, reps, &run.measure_opts("bench")?)? {
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
            let r = lab::reproduce::run(profile, &run.measure_opts("bench")?, &out)?;
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
                base: run.opts("default")?,
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
        Cmd::List { what } => {
            print!("{}", lab::catalog::render(what));
            Ok(())
        }
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "lab", &mut std::io::stdout());
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

/// `lab run -- CMD`: the command's output on stdout, the lab's on stderr, its exit code ours.
fn run_command(args: &RunArgs, timeout_s: u64, command: &[String]) -> Result<()> {
    if args.plan.is_some() {
        anyhow::bail!("give either --plan or a command after `--`, not both");
    }
    let plan = lab::adhoc::command_plan(command, timeout_s);
    let opts = run::RunOpts { stream: true, ..args.opts("default")? };
    let o = run::run_plan(&plan, &opts)?;
    let code = lab::adhoc::exit_code(&o);
    eprint!("{}", run::summary(&o));
    if code != 0 {
        let mut extra = vec![];
        if timeout_s != 600 {
            extra.extend(["--timeout".to_string(), timeout_s.to_string()]);
        }
        extra.push("--".into());
        extra.extend(command.iter().cloned());
        eprintln!("lab: exit code {code}; reproduce: {}", args.reproducer("run-qemu", &extra));
    }
    std::process::exit(code);
}

/// Runs a plan and prints the per-case table (with the run's summary below it).
fn suite(args: &RunArgs, default_plan: &str, sel: &CaseArgs) -> Result<()> {
    let opts = args.opts(default_plan)?;
    let plan = lab::adhoc::select_cases(&run::load_plan(&opts.plan)?, &sel.cases, &sel.skip)?;
    let o = run::run_plan(&plan, &opts)?;
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
        let task = if default_plan == "fuzz" { "fuzz" } else { "conformance" };
        let failed = lab::adhoc::failed_cases(&o);
        for case in &failed {
            println!("reproduce {case}: {}", args.reproducer(task, &["--case".into(), case.clone()]));
        }
        if failed.is_empty() {
            println!("reproduce: {}", args.reproducer(task, &sel.cli_args()));
        }
        std::process::exit(lab::adhoc::plan_exit_code(&o));
    }
    Ok(())
}

impl CaseArgs {
    fn cli_args(&self) -> Vec<String> {
        let c = self.cases.iter().flat_map(|n| ["--case".to_string(), n.clone()]);
        c.chain(self.skip.iter().flat_map(|n| ["--skip".to_string(), n.clone()])).collect()
    }
}

/// The unpacked kernel tree (unpacking it on first use), locked against other lab processes
/// while the caller holds the returned file.
fn prepared_tree(cache: &std::path::Path) -> Result<(std::path::PathBuf, std::fs::File)> {
    let lock = lock::Lock::load(&lock::Lock::path())?;
    let deb = setup::ensure_kernel_deb(cache, &lock)?;
    let t = tree::ensure_unpacked(cache, &lock, &deb)?;
    Ok((t, tree::lock(cache)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Cmd {
        Cli::try_parse_from(std::iter::once("lab").chain(args.iter().copied())).unwrap().cmd
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_a_command_and_reproduces_it() {
        let Cmd::Run { run, command, timeout } = parse(&[
            "run",
            "--flavor",
            "debug",
            "--append",
            "a=b c",
            "--collect",
            "/tmp/x",
            "--",
            "/bin/sh",
            "-c",
            "exit 7",
        ]) else {
            panic!("not run")
        };
        assert_eq!((command.as_slice(), timeout), (&["/bin/sh", "-c", "exit 7"].map(String::from)[..], 600));
        let mut extra = vec!["--".to_string()];
        extra.extend(command);
        assert_eq!(
            run.reproducer("run-qemu", &extra),
            "cargo make run-qemu --flavor debug --append 'a=b c' --collect /tmp/x -- /bin/sh -c 'exit 7'"
        );
        let e = run.opts("default").unwrap();
        assert_eq!(e.collect, ["/tmp/x"]);
    }

    #[test]
    fn bad_values_are_refused_with_the_choices() {
        let e = Cli::try_parse_from(["lab", "run", "--flavor", "perff"]).err().unwrap().to_string();
        assert!(e.contains("perff") && e.contains("debug") && e.contains("perf"), "{e}");
        let Cmd::Run { run, .. } = parse(&["run", "--collect", "relative/path"]) else { panic!() };
        assert!(run.opts("default").unwrap_err().to_string().contains("absolute guest path"));
        let Cmd::Run { run, .. } = parse(&["run", "--filter", "ctabs*", "--until-fail"]) else { panic!() };
        let o = run.opts("kunit").unwrap();
        assert!(o.append.contains(&"kunit.filter_glob=ctabs*".to_string()));
        assert_eq!((o.repeat, o.until_fail), (UNTIL_FAIL_RUNS, true));
        assert!(Cli::try_parse_from(["lab", "run", "--repeat", "0"]).is_err());
    }

    #[test]
    fn conformance_selection_parses() {
        let Cmd::Conformance { cases, run } = parse(&["conformance", "--case", "tc_deferral", "--repeat", "20"]) else {
            panic!()
        };
        assert_eq!((cases.cases.as_slice(), run.repeat), (&["tc_deferral".to_string()][..], Some(20)));
        assert!(case_list().lines().any(|l| l.starts_with("fd_cycle_leak") && l.contains("(opt-in)")));
    }
}
