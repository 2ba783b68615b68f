//! Stage 7: the `lab` commands, one file per command (or family): arguments in, a stage's
//! work, its output printed. May import every stage; nothing imports it.

pub mod ab;
pub mod account;
pub mod args;
pub mod bench;
pub mod cache;
pub mod catalog;
pub mod compare;
pub mod doc_blocks;
pub mod docs;
pub mod freeze;
pub mod fuzz;
pub mod gdb;
pub mod guest_build;
pub mod kernel;
pub mod lava;
pub mod nightly;
pub mod profile;
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
#[command(name = "lab", version, about = "Build, boot and measure the Rust binder driver on an emulated SA8155P")]
pub struct Cli {
    /// Use the cache as it is: a damaged artifact is an error naming the fix, not a rebuild
    /// (as in CI, `CI=true`). Before the command (`lab --offline run`), or `LAB_OFFLINE=1`.
    #[arg(long, env = "LAB_OFFLINE")]
    offline: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Install and check everything the builds need (idempotent).
    Setup {
        /// Also LAVA from Debian: lava-dispatcher (`lava-run` of `lava-job`'s jobs), lava-server and
        /// lavacli (a local LAVA instance for `lava-submit`, in the slower tests).
        #[arg(long)]
        lava: bool,
    },
    /// Build (or reuse) the kernel of a flavor.
    Kernel {
        /// perf (benchmarks), debug (lockdep, KASAN, KUnit), cbinder (C driver), cbinder-spin
        /// (C driver + seed 001), ...: kernel-config/<flavor>.config or kernel-config/flavors.toml.
        #[arg(long, env = "LAB_FLAVOR", default_value = crate::kbuild::flavor::DEFAULT, value_parser = catalog::Choice::flavors())]
        flavor: String,
        #[command(flatten)]
        kconfig: args::KconfigArgs,
        /// Then build it again from a second unpack of the source in a scratch cache (other
        /// paths everywhere) and check that the Image bytes are the same.
        #[arg(long)]
        check_reproducible: bool,
        /// The scratch cache for --check-reproducible [default: target/lab/repro/<flavor>].
        #[arg(long, requires = "check_reproducible")]
        scratch: Option<std::path::PathBuf>,
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
    /// Boot a board, run a plan (or one command: `lab run [OPTIONS] -- CMD ARGS...`), print
    /// the summary. Exit code: 0, or the first failure's (docs/src/reference/exit-codes.md); with a
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
        cases: args::Given<run::CaseArgs>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run the binder fuzzer (plan `fuzz`: 20k operations; `--plan fuzz-long` for
    /// millions, `--append binder_fuzz.seed=N` to replay a seed) and print the table;
    /// `--guided` fuzzes by KCOV coverage, `--replay FILE` replays a saved sequence.
    Fuzz {
        #[command(flatten)]
        fuzz: fuzz::FuzzArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Attach gdb-multiarch to a guest started with `--gdb` (the newest running one, or
    /// --run DIR), with its vmlinux and the kernel's gdb helpers; arguments after `--` go to gdb.
    Gdb {
        /// Run directory of the guest to attach to.
        #[arg(long)]
        run: Option<std::path::PathBuf>,
        /// Attach to `gdbserver /dev/hvc0 PROG` in a guest started with `--gdbserver`, not
        /// to the kernel.
        #[arg(long)]
        user: bool,
        /// Passed to gdb, e.g. `-- -batch -ex 'break rust_binder_ioctl' -ex continue`.
        #[arg(last = true)]
        gdb_args: Vec<String>,
    },
    /// Build your own crate static for aarch64 exactly as the lab builds its guest programs,
    /// and put its executables into an overlay directory (OUT/bin) for `--overlay OUT`.
    GuestBuild {
        /// The crate's Cargo.toml (or its directory).
        #[arg(long)]
        manifest: std::path::PathBuf,
        /// Overlay directory [default: <crate>/target/lab-overlay].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Write a LAVA job (device type qemu) that boots this kernel, DTB and initramfs with the
    /// lab's QEMU argv and reports the plan's results as LAVA test cases; also writes the
    /// artifacts, a device dictionary and the rendered device config for a local `lava-run`.
    LavaJob {
        /// Output directory [default: target/lab/lava/<plan>-<board>-<flavor>].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Where the farm serves the artifacts (Image, initramfs.cpio, board.dtb) [default:
        /// file:// paths into the output directory].
        #[arg(long, value_name = "URL")]
        artifact_url: Option<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run the plan on a LAVA farm: one LAVA job per boot (as `lava-job` writes it), submitted
    /// with lavacli; waits for each and reads the plan's results from the job's console into
    /// the usual run directory and summary.
    LavaSubmit {
        /// The LAVA server's base URL (http or https), e.g. https://lava.example.org.
        #[arg(long, env = "LAVA_SERVER", value_name = "URL")]
        server: String,
        /// The LAVA user whose API token is given.
        #[arg(long, env = "LAVA_USER")]
        user: String,
        /// A file of mode 0600 holding that user's API token [default: the environment's
        /// LAVA_TOKEN]; never the token itself on a command line.
        #[arg(long, env = "LAVA_TOKEN_FILE", value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// Where the farm's workers fetch the artifacts (Image, initramfs.cpio, board.dtb) from:
        /// upload each run directory's artifacts there [default: file:// paths, for a worker on
        /// this machine].
        #[arg(long, value_name = "URL")]
        artifact_url: Option<String>,
        /// Jobs (boots) to submit; they run in parallel on the farm's devices.
        #[arg(long, default_value_t = 1, value_name = "N")]
        boots: usize,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Everything `cargo make test` runs: unit tests, kernels, end-to-end tests. With --slow,
    /// what `cargo make test-slow` runs instead: every `#[ignore]`d test of the workspace.
    Test {
        /// Every ignored test of the host workspace, one at a time (`cargo make test-slow`).
        #[arg(long)]
        slow: bool,
        /// With --slow: only the tests whose name contains one of these (cargo test's filter).
        #[arg(requires = "slow", value_name = "FILTER")]
        filter: Vec<String>,
    },
    /// Clippy, rustfmtcheck and checkpatch over rust-driver/.
    DriverCheck,
    /// Seed 000's benchmarks under CTABS modes 0, 1, 2 (interleaved, one boot) with CIs.
    Bench {
        /// How much each repetition does: quick (about two minutes, the report's shape) or full.
        #[arg(long, value_enum, default_value = "full")]
        profile: crate::measure::bench::Profile,
        /// Repetitions per mode (the full default takes about 8 minutes here).
        #[arg(long, default_value_t = 12)]
        reps: usize,
        /// A fixed pool of N looper threads per server instead of libbinder's (max threads 15).
        #[arg(long)]
        threads: Option<usize>,
        /// Boots (per configuration with --matrix), each with its own QEMU `-seed` under a
        /// deterministic TCG mode: the intervals are over boots and a row needs 5 for a mark
        /// [default: 5; 1 with --profile quick, whose rows are then `?`].
        #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        boots: Option<usize>,
        /// All four configurations (libbinder's pool / --threads 2, with / without EAS),
        /// `--boots` boots each, and one table of their changes against the seed's (matrix.md).
        #[arg(long, conflicts_with_all = ["threads"])]
        matrix: bool,
        /// Where matrix.md goes [default: target/lab/bench-matrix/<time>].
        #[arg(long, requires = "matrix")]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Every table of the three seed mails: the seed's figure beside the lab's (median, 95%
    /// CI) and whether the direction matches. Boots four kernels: perf, cbinder-ctabs (seed 000
    /// on the C driver), cbinder and cbinder-spin (seed 001).
    Reproduce {
        /// quick (about a minute, checks the tables' shape) or full (the figures).
        #[arg(long, value_enum, default_value = "full")]
        profile: crate::measure::bench::Profile,
        /// Where reproduce.md and reproduce.json go [default: target/lab/reproduce/<time>].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Re-render the tables of a finished reproduction (a directory with reproduce.json,
        /// e.g. a nightly's `reproduce/`) without running anything.
        #[arg(long)]
        from: Option<std::path::PathBuf>,
        /// Run only these seeds' experiments (000, 001, 002, comma-separated); the others'
        /// tables show n/a.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        #[command(flatten)]
        model: reproduce::ModelArgs,
        #[command(flatten)]
        farm: lava::FarmArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Everything for nightly CI into one artifact directory: kernels perf/debug/cbinder,
    /// conformance on each, KUnit, a long fuzz on debug, CTABS checks and `reproduce`;
    /// JUnit, JSON, KCIDB JSON and an HTML report. Non-zero exit on any failure, splat or
    /// regression against --baseline.
    Nightly {
        /// quick (what `cargo make test` runs) or full (the nightly's benchmarks and fuzz).
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
    /// The cache's published artifacts: `verify` checks them against their manifests,
    /// `gc` shows (and with --apply does) what pruning by last use would free.
    Cache {
        #[command(subcommand)]
        cmd: cache::CacheCmd,
    },
    /// The timing model's freeze records (`freeze/`): `check` compares the latest with the
    /// tree, `trust` prints what the model got right and wrong at it.
    Freeze {
        #[command(subcommand)]
        cmd: freeze::FreezeCmd,
    },
    /// List boards, plans, kernel flavors or conformance cases.
    List {
        /// What to list.
        #[arg(value_enum)]
        what: catalog::Kind,
    },
    /// Print a shell completion script, e.g. `lab completions bash > ~/.local/share/bash-completion/completions/lab`.
    Completions {
        /// The shell the script is for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Executed kernel instructions per function while a plan runs (default ctabs-cost, under
    /// icount), per call of its binder-throughput workload; --compare FLAVOR for the difference.
    Profile {
        #[command(flatten)]
        profile: profile::ProfileArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Build the documentation book (docs/) into target/lab/book and check it: every internal
    /// link, and that the command reference matches these definitions.
    Docs(docs::DocsArgs),
    /// A/B of a binder patch: the base flavor against base + patches (--patch, --series,
    /// --tree), conformance/KUnit/fuzz gates on the treatment, the seed workloads in alternating
    /// boots on the timing model, the per-function instruction difference; ab.md/html/json.
    /// Exit 0 when the gates pass and no row got worse beyond --threshold, 1 otherwise.
    Ab {
        #[command(flatten)]
        ab: args::Given<ab::AbArgs>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// The per-call account of seed 000's Baseline on the timing model (use with --dvfs --idle):
    /// the benchmark's own counters per call of its timed phase, the system-wide ones, its
    /// on-CPU and run-queue time and each cluster's clock, beside the phone's column.
    Account {
        #[command(flatten)]
        account: account::AccountArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Compare two nightly.json files (baseline, current) with the nightly's regression rule.
    Compare {
        /// The earlier nightly.json.
        baseline: std::path::PathBuf,
        /// The later nightly.json, checked against the baseline.
        current: std::path::PathBuf,
        /// Percent by which a gated metric may be worse than the baseline.
        #[arg(long, default_value_t = 10.0)]
        threshold: f64,
    },
}

/// `lab --version`: the lab's version, its source commit, the pinned kernel and the QEMU
/// it runs (asked only when --version is given: it starts QEMU once).
fn long_version() -> String {
    let commit = crate::support::paths::source_commit();
    let kernel = crate::kbuild::pin::Lock::load(&crate::kbuild::pin::Lock::path())
        .map(|l| format!("{} {}", l.kernel.package, l.kernel.version))
        .unwrap_or_else(|e| format!("no kernel.lock ({e})"));
    let qemu = crate::harness::qemu::version().unwrap_or_else(|e| format!("{e:#}"));
    format!(
        "{}\nsource: {commit}\nkernel: {kernel} (kernel-config/kernel.lock)\nqemu: {qemu}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The `lab` binary: parse, dispatch, exit with the command's [`Exit`] code (an error is a
/// harness error; clap exits 2 on a bad command line).
pub fn main() {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    if std::env::args().any(|a| a == "--version") {
        cmd = cmd.long_version(long_version());
    }
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    crate::support::artifact::set_offline(cli.offline);
    let exit = execute(cli.cmd).unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        if e.downcast_ref::<crate::harness::run::Interrupted>().is_some() {
            Exit::Interrupted
        } else {
            Exit::HarnessError
        }
    });
    exit.exit()
}

/// Runs one command; the exit it calls for.
pub fn execute(cmd: Cmd) -> Result<Exit> {
    let done = |r: Result<()>| r.map(|()| Exit::Ok);
    match cmd {
        Cmd::Setup { lava } => done(setup::run(lava)),
        Cmd::Kernel { flavor, kconfig, check_reproducible: false, .. } => {
            done(kernel::build(&flavor, &kconfig.extras()))
        }
        Cmd::Kernel { flavor, kconfig, check_reproducible: true, scratch } => {
            done(kernel::check_reproducible(&flavor, &kconfig, scratch))
        }
        Cmd::KernelLock => done(kernel::lock()),
        Cmd::DriverTree => done(kernel::driver_tree()),
        Cmd::DriverExport => done(kernel::driver_export()),
        Cmd::DriverReset => done(kernel::driver_reset()),
        Cmd::Qemu => done(qemu::build()),
        Cmd::QemuTree => done(qemu::tree()),
        Cmd::QemuExport => done(qemu::export()),
        Cmd::QemuReset => done(qemu::reset()),
        Cmd::Shell(args) => done(crate::harness::run::shell(&args.opts("shell")?)),
        Cmd::Test { slow: false, .. } => test::run(),
        Cmd::Test { slow: true, filter } => test::slow(&filter),
        Cmd::DriverCheck => done(crate::kbuild::driver_check::run()),
        Cmd::Reproduce { from: Some(dir), .. } => done(reproduce::rerender(&dir)),
        // gdb's own exit code is passed on.
        Cmd::Gdb { run, user, gdb_args } => done(gdb::run(run.as_deref(), user, &gdb_args)),
        Cmd::GuestBuild { manifest, out } => done(guest_build::run(&manifest, out)),
        Cmd::LavaJob { out, artifact_url, run } => done(lava::run(out, artifact_url.as_deref(), &run)),
        Cmd::LavaSubmit { server, user, token_file, artifact_url, boots, run } => {
            let token = lava::token(token_file.as_deref(), "--token-file")?;
            let farm = crate::harness::lava::Farm::new(&server, &user, &token)?;
            lava::submit(&farm, artifact_url.as_deref(), boots, &run)
        }
        Cmd::Conformance { cases, .. } if cases.list => {
            print!("{}", run::case_list());
            Ok(Exit::Ok)
        }
        Cmd::Cache { cmd } => cache::run(cmd),
        Cmd::Freeze { cmd } => freeze::run(cmd),
        Cmd::List { what } => {
            print!("{}", catalog::render(what));
            Ok(Exit::Ok)
        }
        Cmd::Completions { shell } => {
            // A reader that stops early (`| head`) is no error.
            match std::io::Write::write_all(&mut std::io::stdout(), &completion_script(shell)) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(Exit::Ok),
            }
        }
        // The commands that boot guests exit with what they found.
        Cmd::Run { run, timeout, command } if !command.is_empty() => run::command(&run, timeout, &command),
        Cmd::Run { run, .. } => run::run(&run),
        Cmd::Conformance { cases, run } => run::suite(&run, "conformance", &cases),
        Cmd::Fuzz { fuzz, run } => fuzz::command(&run, &fuzz),
        Cmd::Bench { profile, reps, matrix: true, boots, out, run, .. } => {
            bench::matrix(profile, reps, boots, out, &run)
        }
        Cmd::Bench { profile, reps, threads, boots, run, .. } => bench::run(profile, reps, threads, boots, &run),
        Cmd::Reproduce { profile, out, run, from: None, only, model, farm } => {
            reproduce::run(profile, out, &only, &model, &farm, &run)
        }
        Cmd::Nightly { profile, out, baseline, threshold, fuzz_ops, run } => {
            nightly::command(profile, out, baseline, threshold, fuzz_ops, &run)
        }
        Cmd::Ab { ab: a, run } => ab::run(&a, &run),
        Cmd::Compare { baseline, current, threshold } => compare::run(&baseline, &current, threshold),
        Cmd::Profile { profile: p, run } => profile::run(&run, &p),
        Cmd::Account { account: a, run } => account::run(&a, &run),
        Cmd::Docs(args) => docs::run(&args, <Cli as clap::CommandFactory>::command()),
    }
}

/// `lab completions SHELL`: the completion script for the `lab` binary.
fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = vec![];
    clap_complete::generate(shell, &mut Cli::command(), "lab", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn docs_install_completions_that_bash_loads() {
        let page = crate::support::paths::repo().join("docs/src/guide/running.md");
        let text = std::fs::read_to_string(&page).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("completions bash >"))
            .expect("docs/src/guide/running.md: how to install them");
        assert!(line.contains("~/.local/share/bash-completion/completions/lab"), "{line}");
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("lab");
        std::fs::write(&f, completion_script(clap_complete::Shell::Bash)).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source {}; complete -p lab", f.display()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("-F _lab") && text.trim_end().ends_with(" lab"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

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
        let semi = ["--".to_string(), "/bin/sh".into(), "-c".into(), "echo a; exit 7".into()];
        assert_eq!(run.reproducer("run-qemu", &semi)[..13], *"./lab.sh run ");
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
        assert_eq!((o.repeat, o.until_fail), (args::UNTIL_FAIL_RUNS, true));
        assert!(Cli::try_parse_from(["lab", "run", "--repeat", "0"]).is_err());
    }

    #[test]
    fn conformance_selection_parses() {
        let Cmd::Conformance { cases, run } = parse(&["conformance", "--case", "tc_deferral", "--repeat", "20"]) else {
            panic!()
        };
        assert_eq!((cases.cases.as_slice(), run.repeat), (&["tc_deferral".to_string()][..], Some(20)));
        // fd_cycle_leak became a default case with the driver fix (rust-driver 0009).
        assert!(run::case_list().lines().any(|l| l.starts_with("fd_cycle_leak") && !l.contains("(opt-in)")));
    }
}
