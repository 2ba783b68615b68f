//! Options shared by the commands that boot a guest.

use crate::harness::opts::{RunOpts, DEFAULT_BOARD, DEFAULT_BOOT_TIMEOUT_S, DEFAULT_ICOUNT_SHIFT};
use crate::harness::qemu::Tcg;
use crate::kbuild::flavor;
use anyhow::Result;
use clap::parser::ValueSource;

/// The run options as parsed, and the same options as arguments (for the reproducer).
pub type RunArgs = Given<RunFields>;

/// Arguments of a command as parsed (`T`'s fields, through `Deref`), and the same arguments
/// again as `lab` arguments: every one given on the command line or in the environment, in the
/// order `T` defines them, defaults left out. One source for every reproducer line, so an
/// option added to `T` cannot be missing from it.
#[derive(Debug, Default, Clone)]
pub struct Given<T> {
    fields: T,
    given: Vec<String>,
}

impl<T> Given<T> {
    /// The arguments as given (see [`Given`]).
    pub fn given(&self) -> &[String] {
        &self.given
    }
}

/// Read access to the parsed options (`args.board`, ...).
impl<T> std::ops::Deref for Given<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.fields
    }
}

// The derived parser for the fields, plus `given` read from the matches before the derived
// code takes the values out of them.
impl<T: clap::Args + clap::FromArgMatches> clap::FromArgMatches for Given<T> {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }
    fn from_arg_matches_mut(m: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = given_args::<T>(m);
        Ok(Given { fields: T::from_arg_matches_mut(m)?, given })
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.update_from_arg_matches_mut(&mut m.clone())
    }
    fn update_from_arg_matches_mut(&mut self, m: &mut clap::ArgMatches) -> Result<(), clap::Error> {
        self.given = given_args::<T>(m);
        self.fields.update_from_arg_matches_mut(m)
    }
}

impl<T: clap::Args + clap::FromArgMatches> clap::Args for Given<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
    fn augment_args(cmd: clap::Command) -> clap::Command {
        T::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        T::augment_args_for_update(cmd)
    }
}

/// The arguments of `T` that `m` got from the command line or the environment, in the order
/// they are defined, as arguments that give them again: `--flag`, or `--option VALUE` for
/// each value as it was given (a default is left out, so it stays a default).
fn given_args<T: clap::Args>(m: &clap::ArgMatches) -> Vec<String> {
    let mut out = vec![];
    for arg in T::augment_args(clap::Command::new("lab")).get_arguments() {
        let id = arg.get_id().as_str();
        if !matches!(m.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable)) {
            continue;
        }
        let long = format!("--{}", arg.get_long().expect("every lab option has a long name"));
        if !arg.get_action().takes_values() {
            // A flag: set, or turned off by its environment variable (LAB_CACHE=false).
            if m.get_flag(id) {
                out.push(long);
            }
            continue;
        }
        for v in m.get_raw(id).into_iter().flatten() {
            let v = v.to_string_lossy().into_owned();
            // `--append -x` would read -x as an option.
            if v.starts_with('-') {
                out.push(format!("{long}={v}"));
            } else {
                out.extend([long.clone(), v]);
            }
        }
    }
    out
}

/// The options themselves (see [`RunArgs`]).
#[derive(clap::Args, Debug)]
pub struct RunFields {
    /// Board name in board/ or a path to a board file.
    #[arg(long, env = "LAB_BOARD", default_value = DEFAULT_BOARD, value_parser = crate::cli::catalog::Choice::boards())]
    pub board: String,
    /// Plan name in rootfs/plans/ or a path to a plan file [default: default; shell for
    /// `shell`, conformance for `conformance`, fuzz for `fuzz`].
    #[arg(long, env = "LAB_PLAN", value_parser = crate::cli::catalog::Choice::plans())]
    pub plan: Option<String>,
    /// Kernel flavor (kernel-config/<flavor>.config or kernel-config/flavors.toml).
    #[arg(long, env = "LAB_FLAVOR", default_value = flavor::DEFAULT, value_parser = crate::cli::catalog::Choice::flavors())]
    pub flavor: String,
    /// TCG mode [default: single; icount (deterministic) for bench, reproduce and the
    /// nightly's measurements].
    #[arg(long, value_enum, env = "LAB_TCG")]
    pub tcg: Option<Tcg>,
    /// Under `--tcg icount`: guest time per instruction is 2^N ns, shared by all vCPUs
    /// [default: 3, 125 M instructions per guest second]. 0 for guest-side time limits
    /// written for real hardware (the kselftest harness's 30 s per case).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=10))]
    pub icount_shift: Option<u32>,
    /// Directory whose files are added to the initramfs (e.g. bin/my-client).
    #[arg(long, env = "LAB_OVERLAY")]
    pub overlay: Option<std::path::PathBuf>,
    /// Debian arm64 packages (and their dependencies) unpacked into the initramfs, e.g.
    /// `--deb strace,gdbserver`; `PKG/trixie-backports` for the backport (docs: userland).
    #[arg(long = "deb", value_name = "PKG[,PKG...]", value_delimiter = ',')]
    pub debs: Vec<String>,
    /// Seconds to wait for the guest init's first message.
    #[arg(long, default_value_t = DEFAULT_BOOT_TIMEOUT_S)]
    pub boot_timeout: u64,
    /// Pin vCPU threads to host CPUs.
    #[arg(long)]
    pub pin: bool,
    /// Show the guest console live.
    #[arg(long, short)]
    pub verbose: bool,
    /// Extra kernel command-line arguments.
    #[arg(long)]
    pub append: Vec<String>,
    /// Boot without the board's energy model: no cpufreq, no EAS (as before EAS was board data).
    #[arg(long, env = "LAB_NO_EAS")]
    pub no_eas: bool,
    /// Scheduler policy applied at boot: `phone` writes the board's [policy] switches and
    /// sysctls (android-sched/'s SYNC_EAS and RT_SYNC, ...), `mainline` nothing [default: the
    /// board's: phone on sa8155p, mainline on boards without [policy]].
    #[arg(long, env = "LAB_POLICY", value_name = "mainline|phone", value_parser = parse_policy)]
    pub policy: Option<board::Policy>,
    /// Guest-driven DVFS: the board's clusters become frequency domains of an emulated
    /// qcom,cpufreq-hw with every OPP of the board (needs --qemu lab; with --tcg hicount an OPP
    /// change changes the domain's speed).
    #[arg(long)]
    pub dvfs: bool,
    /// Idle states: the board's per-CPU states (clusters[].idle) in the DT for the guest's
    /// cpuidle, entered through PSCI CPU_SUSPEND; a woken vCPU starts the exit latency of the
    /// state it was in later (needs --qemu lab --tcg hicount).
    #[arg(long)]
    pub idle: bool,
    /// Which QEMU: the lab's patched build (qemu/, built on first use) or the system's; `auto`
    /// takes the lab's for --tcg icount and hicount, whose boots must be byte-identical.
    #[arg(long, value_enum, env = "LAB_QEMU", default_value = "auto")]
    pub qemu: crate::kbuild::qemu::Choice,
    /// A TCG plugin, `path[,arg=value...]` (`{run}` is the run directory); repeatable.
    #[arg(long)]
    pub plugin: Vec<String>,
    /// Charge cache latencies (qemu/plugins/cache, the board's [cache_model]) to each vCPU's
    /// time; counters in the run's cache.json. Needs --qemu lab --tcg hicount. Off by default.
    #[arg(long, env = "LAB_CACHE")]
    pub cache: bool,
    /// Run the plan's steps N times in one boot; results are reported as STEP@1..STEP@N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Stop repeating after the first run with a failure (up to --repeat runs, default 100).
    #[arg(long)]
    pub until_fail: bool,
    /// Guest file or directory every step sends back when it ends, into the run directory's
    /// collect/<step>/<path> (repeatable). A path missing after a step fails the run.
    #[arg(long, value_name = "GUEST_PATH")]
    pub collect: Vec<String>,
    /// Use only CPUs 0..N-1 of the board (clusters keep their remaining CPUs).
    #[arg(long, value_name = "N")]
    pub smp: Option<u32>,
    /// Guest memory instead of the board's, in QEMU's -m syntax (e.g. 4G).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// KUnit suites/cases to run, as kunit.filter_glob=GLOB on the kernel command line
    /// (debug flavor, `--plan kunit`), e.g. 'rust_binder_ctabs*' or 'rust_binder_ctabs.same_cpu*'.
    #[arg(long, value_name = "GLOB")]
    pub filter: Option<String>,
    #[command(flatten)]
    pub kconfig: KconfigArgs,
    /// Start halted with QEMU's gdbstub and `nokaslr`; attach with `cargo make gdb`. No
    /// timeouts apply while the guest waits for gdb.
    #[arg(long)]
    pub gdb: bool,
    /// Give the guest a console, /dev/hvc0, on the run directory's hvc0.sck, and Debian's
    /// gdbserver (as --deb gdbserver): run `gdbserver /dev/hvc0 PROG` in a step and attach
    /// with `cargo make gdb --user` (docs: userland).
    #[arg(long)]
    pub gdbserver: bool,
    /// Write the guest's memory to FILE as an ELF core (readable by drgn and crash) when the
    /// plan ends or the guest panics.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<std::path::PathBuf>,
    /// Record trace events around every step and save them in the run directory (trace/<step>/
    /// trace.txt for Perfetto, trace.dat for trace-cmd), e.g.
    /// binder:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking,sched:sched_migrate_task.
    #[arg(long, value_name = "EVENTS", value_parser = parse_trace)]
    pub trace: Option<labproto::TraceSpec>,
    /// Boots at once for commands that boot more than once (reproduce, reproduce --model,
    /// bench --matrix, profile --compare, the nightly's reproduction), under --tcg
    /// icount|hicount only (results identical to -j 1); other modes boot one at a time
    /// [default: the number of cores].
    #[arg(long, short = 'j', env = "LAB_JOBS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
}

fn parse_policy(s: &str) -> Result<board::Policy, String> {
    board::Policy::parse(s).ok_or_else(|| format!("{s:?} is not a policy: give mainline or phone"))
}

fn parse_trace(s: &str) -> Result<labproto::TraceSpec, String> {
    labproto::TraceSpec::parse(s)
}

/// Kernel config beyond the flavor: a distinct, separately cached kernel.
#[derive(clap::Args, Clone, Debug)]
pub struct KconfigArgs {
    /// A kconfig fragment merged over the flavor (repeatable).
    #[arg(long = "kconfig", value_name = "FILE")]
    pub files: Vec<std::path::PathBuf>,
    /// One symbol merged over the flavor and --kconfig, e.g. CONFIG_DEBUG_INFO_DWARF5=y (repeatable).
    #[arg(long = "kconfig-add", value_name = "CONFIG_X=y")]
    pub adds: Vec<String>,
}

impl KconfigArgs {
    pub fn extras(&self) -> crate::kbuild::kernel::Extras {
        crate::kbuild::kernel::Extras { files: self.files.clone(), adds: self.adds.clone() }
    }

    /// The same options as command-line arguments (for a second lab process).
    pub fn to_args(&self) -> Vec<String> {
        let files = self.files.iter().flat_map(|f| ["--kconfig".to_string(), f.display().to_string()]);
        files.chain(self.adds.iter().flat_map(|a| ["--kconfig-add".to_string(), a.clone()])).collect()
    }
}

/// Runs of `--until-fail` without `--repeat`.
pub const UNTIL_FAIL_RUNS: u32 = 100;

impl RunArgs {
    /// For benchmarks: icount unless --tcg says otherwise, so that repeated runs agree and
    /// the confidence intervals measure the workload, not the host.
    pub fn measure_opts(&self, default_plan: &str) -> Result<RunOpts> {
        if self.repeat.is_some() || self.until_fail {
            anyhow::bail!(
                "--repeat and --until-fail are for run, conformance and fuzz; bench and reproduce take --reps"
            );
        }
        let tcg = self.tcg.unwrap_or(Tcg::Icount);
        Ok(RunOpts { tcg, ..self.opts(default_plan)? })
    }

    pub fn opts(&self, default_plan: &str) -> Result<RunOpts> {
        Ok(RunOpts {
            board: self.board.clone(),
            plan: self.plan.clone().unwrap_or_else(|| default_plan.into()),
            flavor: self.flavor.clone(),
            tcg: self.tcg.unwrap_or(Tcg::Single),
            icount_shift: self.icount_shift.unwrap_or(DEFAULT_ICOUNT_SHIFT),
            overlay: self.overlay.clone(),
            debs: self
                .debs
                .iter()
                .cloned()
                .chain(self.gdbserver.then(|| "gdbserver".to_string()).filter(|g| !self.debs.contains(g)))
                .collect(),
            boot_timeout: std::time::Duration::from_secs(self.boot_timeout),
            echo: self.verbose,
            pin: self.pin,
            qemu: self.qemu,
            plugins: self.plugin.clone(),
            cache: self.cache,
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
            kconfig: self.kconfig.extras(),
            gdb: self.gdb,
            gdbserver: self.gdbserver,
            dump: self.dump.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
            trace: self.trace.clone(),
            no_eas: self.no_eas,
            policy: self.policy,
            dvfs: self.dvfs,
            idle: self.idle,
            jobs: self.jobs.map_or_else(crate::harness::boots::default_jobs, |j| j as usize),
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

    /// The `cargo make TASK ...` line that runs this again: every run option given on the
    /// command line or in the environment, then `extra`.
    pub fn reproducer(&self, task: &str, extra: &[String]) -> String {
        let mut a: Vec<String> = vec!["cargo".into(), "make".into(), task.into()];
        a.extend(self.given.iter().cloned());
        a.extend(extra.iter().cloned());
        // cargo-make splits task arguments at ';' (its argument list is ';'-joined), so such a
        // line runs through the repository's lab.sh, which keeps arguments whole.
        if a[3..].iter().any(|x| x.contains(';')) {
            let sub = if task == "run-qemu" { "run" } else { task };
            a.splice(..3, ["./lab.sh".to_string(), sub.to_string()]);
        }
        crate::harness::qemu::shell_line(&a)
    }
}

/// For each command's round-trip test: `every` gives a value other than the default for each
/// of `T`'s options (none: a flag); parsing them, giving [`Given::given`] back to the parser
/// must give the same fields, and leaving them out gives no argument at all.
#[cfg(test)]
pub(crate) fn assert_round_trip<T: clap::Args + clap::FromArgMatches + std::fmt::Debug>(every: &[(&str, &[&str])]) {
    use clap::FromArgMatches as _;
    let cmd = || <Given<T> as clap::Args>::augment_args(clap::Command::new("lab").no_binary_name(true));
    let parse = |argv: &[String]| Given::<T>::from_arg_matches(&cmd().try_get_matches_from(argv).unwrap()).unwrap();
    let longs: Vec<String> = cmd().get_arguments().map(|a| a.get_long().unwrap().to_string()).collect();
    let listed: Vec<&str> = every.iter().map(|(k, _)| *k).collect();
    assert_eq!(longs, listed, "give the test a value for each option, in the order they are defined");
    let mut argv = vec![];
    for (k, vs) in every {
        if vs.is_empty() {
            argv.push(format!("--{k}"));
        }
        argv.extend(vs.iter().map(|v| format!("--{k}={v}")));
    }
    let first = parse(&argv);
    let again = parse(first.given());
    assert_eq!(format!("{:?}", *again), format!("{:?}", *first), "given: {:?}", first.given());
    for (k, _) in every {
        assert!(first.given().contains(&format!("--{k}")), "--{k} is not in {:?}", first.given());
    }
    assert!(parse(&[]).given().is_empty(), "defaults stay implicit");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Cmd};
    use clap::{Args as _, CommandFactory as _, FromArgMatches as _, Parser as _};

    /// A value other than the default for every run option (none: a flag); values that
    /// need quoting or start with `-` included.
    const EVERY_OPTION: &[(&str, &[&str])] = &[
        ("board", &["symmetric"]),
        ("plan", &["kunit"]),
        ("flavor", &["debug"]),
        ("tcg", &["hicount"]),
        ("icount-shift", &["0"]),
        ("overlay", &["my overlay"]),
        ("deb", &["strace,gdbserver", "trace-cmd"]),
        ("boot-timeout", &["90"]),
        ("pin", &[]),
        ("verbose", &[]),
        ("append", &["a=b c", "-x"]),
        ("no-eas", &[]),
        ("policy", &["mainline"]),
        ("dvfs", &[]),
        ("idle", &[]),
        ("qemu", &["lab"]),
        ("plugin", &["p.so,arg={run}/x", "q.so"]),
        ("cache", &[]),
        ("repeat", &["3"]),
        ("until-fail", &[]),
        ("collect", &["/tmp/x", "/tmp/y"]),
        ("smp", &["4"]),
        ("memory", &["4G"]),
        ("filter", &["rust_binder_ctabs.same_cpu*"]),
        ("kconfig", &["x.config"]),
        ("kconfig-add", &["CONFIG_A=y", "CONFIG_B=n"]),
        ("gdb", &[]),
        ("gdbserver", &[]),
        ("dump", &["core.elf"]),
        ("trace", &["binder:*,sched:sched_switch"]),
        ("jobs", &["2"]),
    ];

    fn run_fields(argv: &[String]) -> String {
        let Cmd::Run { run, .. } = Cli::try_parse_from(argv).unwrap().cmd else { panic!("not run") };
        format!("{:?}", *run)
    }

    #[test]
    fn reproducer_round_trips_every_run_option() {
        let longs: Vec<String> = RunFields::augment_args(clap::Command::new("run"))
            .get_arguments()
            .map(|a| a.get_long().unwrap().to_string())
            .collect();
        let listed: Vec<&str> = EVERY_OPTION.iter().map(|(k, _)| *k).collect();
        assert_eq!(longs, listed, "give the test a value for each run option");
        let mut argv = vec!["lab".to_string(), "run".into()];
        for (k, vs) in EVERY_OPTION {
            if vs.is_empty() {
                argv.push(format!("--{k}"));
            }
            argv.extend(vs.iter().map(|v| format!("--{k}={v}")));
        }
        let Cmd::Run { run, .. } = Cli::try_parse_from(&argv).unwrap().cmd else { panic!("not run") };
        let line = run.reproducer("run-qemu", &[]);
        let words = shlex::split(&line).unwrap();
        assert_eq!(words[..3], ["cargo", "make", "run-qemu"], "{line}");
        let again: Vec<String> =
            ["lab", "run"].into_iter().map(String::from).chain(words[3..].iter().cloned()).collect();
        assert_eq!(run_fields(&again), run_fields(&argv), "{line}");
        // Defaults stay defaults.
        let plain = ["lab".to_string(), "run".into()];
        let Cmd::Run { run, .. } = Cli::try_parse_from(&plain).unwrap().cmd else { panic!() };
        assert_eq!(run.reproducer("run-qemu", &[]), "cargo make run-qemu");
    }

    #[test]
    fn reproducer_spells_out_options_from_the_environment() {
        // Variables of this test's own, so that parallel tests' parses do not see them (clap
        // reads a variable when the argument is given it).
        std::env::set_var("LAB_TEST_REPRODUCER_QEMU", "lab");
        std::env::set_var("LAB_TEST_REPRODUCER_CACHE", "true");
        std::env::set_var("LAB_TEST_REPRODUCER_NO_EAS", "false");
        let cmd = Cli::command().mut_subcommand("run", |c| {
            c.mut_arg("qemu", |a| a.env("LAB_TEST_REPRODUCER_QEMU"))
                .mut_arg("cache", |a| a.env("LAB_TEST_REPRODUCER_CACHE"))
                .mut_arg("no_eas", |a| a.env("LAB_TEST_REPRODUCER_NO_EAS"))
        });
        let m = cmd.try_get_matches_from(["lab", "run", "--tcg", "hicount"]).unwrap();
        let Cmd::Run { run, .. } = Cli::from_arg_matches(&m).unwrap().cmd else { panic!() };
        assert_eq!(run.reproducer("run-qemu", &[]), "cargo make run-qemu --tcg hicount --qemu lab --cache");
    }

    #[test]
    fn kconfig_args_round_trip_as_arguments() {
        let k = KconfigArgs { files: vec!["x.config".into()], adds: vec!["CONFIG_A=y".into(), "CONFIG_B=n".into()] };
        assert_eq!(
            k.to_args(),
            ["--kconfig", "x.config", "--kconfig-add", "CONFIG_A=y", "--kconfig-add", "CONFIG_B=n"]
        );
    }
}
