//! Options shared by the commands that boot a guest.

use crate::harness::opts::RunOpts;
use crate::harness::qemu::Tcg;
use anyhow::Result;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Board name in board/ or a path to a board file.
    #[arg(long, env = "LAB_BOARD", default_value = "sa8155p", value_parser = crate::cli::catalog::Choice::boards())]
    pub board: String,
    /// Plan name in rootfs/plans/ or a path to a plan file [default: default; shell for
    /// `shell`, conformance for `conformance`, fuzz for `fuzz`].
    #[arg(long, env = "LAB_PLAN", value_parser = crate::cli::catalog::Choice::plans())]
    pub plan: Option<String>,
    /// Kernel flavor (kernel-config/<flavor>.config or kernel-config/flavors.toml).
    #[arg(long, env = "LAB_FLAVOR", default_value = "perf", value_parser = crate::cli::catalog::Choice::flavors())]
    pub flavor: String,
    /// TCG mode [default: single; icount (deterministic) for bench, reproduce and the
    /// nightly's measurements].
    #[arg(long, value_enum, env = "LAB_TCG")]
    pub tcg: Option<Tcg>,
    /// Directory whose files are added to the initramfs (e.g. bin/my-client).
    #[arg(long, env = "LAB_OVERLAY")]
    pub overlay: Option<std::path::PathBuf>,
    /// Debian arm64 packages (and their dependencies) unpacked into the initramfs, e.g.
    /// `--deb strace,gdbserver`; `PKG/trixie-backports` for the backport (docs: userland).
    #[arg(long = "deb", value_name = "PKG[,PKG...]", value_delimiter = ',')]
    pub debs: Vec<String>,
    /// Seconds to wait for the guest init's first message.
    #[arg(long, default_value_t = 60)]
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
    /// Which QEMU: the system's, or the lab's patched build (qemu/, built on first use).
    #[arg(long, value_enum, env = "LAB_QEMU", default_value = "system")]
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
    /// (debug flavor, `--plan kunit`), e.g. 'ctabs*' or 'ctabs.pick_*'.
    #[arg(long, value_name = "GLOB")]
    pub filter: Option<String>,
    #[command(flatten)]
    pub kconfig: KconfigArgs,
    /// Start halted with QEMU's gdbstub and `nokaslr`; attach with `cargo make gdb`. No
    /// timeouts apply while the guest waits for gdb.
    #[arg(long)]
    pub gdb: bool,
    /// Write the guest's memory to FILE as an ELF core (readable by drgn and crash) when the
    /// plan ends or the guest panics.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<std::path::PathBuf>,
    /// Record trace events around every step and save them in the run directory (trace/<step>/
    /// trace.txt for Perfetto, trace.dat for trace-cmd), e.g.
    /// binder:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking,sched:sched_migrate_task.
    #[arg(long, value_name = "EVENTS", value_parser = parse_trace)]
    pub trace: Option<labproto::TraceSpec>,
}

fn parse_trace(s: &str) -> Result<labproto::TraceSpec, String> {
    labproto::TraceSpec::parse(s)
}

/// Kernel config beyond the flavor: a distinct, separately cached kernel.
#[derive(clap::Args, Clone)]
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
            overlay: self.overlay.clone(),
            debs: self.debs.clone(),
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
            dump: self.dump.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
            trace: self.trace.clone(),
            no_eas: self.no_eas,
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
    pub fn reproducer(&self, task: &str, extra: &[String]) -> String {
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
        if !self.debs.is_empty() {
            opt("deb", Some(self.debs.join(",")));
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
        // cargo-make splits task arguments at ';' (its argument list is ';'-joined), so such a
        // line runs through the repository's lab.sh, which keeps arguments whole.
        if a[3..].iter().any(|x| x.contains(';')) {
            let sub = if task == "run-qemu" { "run" } else { task };
            a.splice(..3, ["./lab.sh".to_string(), sub.to_string()]);
        }
        crate::harness::qemu::shell_line(&a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kconfig_args_round_trip_as_arguments() {
        let k = KconfigArgs { files: vec!["x.config".into()], adds: vec!["CONFIG_A=y".into(), "CONFIG_B=n".into()] };
        assert_eq!(
            k.to_args(),
            ["--kconfig", "x.config", "--kconfig-add", "CONFIG_A=y", "--kconfig-add", "CONFIG_B=n"]
        );
    }
}
