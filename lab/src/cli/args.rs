//! Options shared by the commands that boot a guest.

use crate::harness::opts::RunOpts;
use crate::harness::qemu::Tcg;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Board name in board/ (sa8155p, sm8150-upstream, symmetric) or a path.
    #[arg(long, env = "LAB_BOARD", default_value = "sa8155p")]
    pub board: String,
    /// Plan name in rootfs/plans/ or a path to a plan file [default: default; shell for
    /// `shell`, conformance for `conformance`, fuzz for `fuzz`].
    #[arg(long, env = "LAB_PLAN")]
    pub plan: Option<String>,
    /// Kernel flavor (kernel-config/<flavor>.config).
    #[arg(long, env = "LAB_FLAVOR", default_value = "perf")]
    pub flavor: String,
    /// TCG mode [default: single; icount (deterministic) for bench, reproduce and the
    /// nightly's measurements].
    #[arg(long, value_enum, env = "LAB_TCG")]
    pub tcg: Option<Tcg>,
    /// Directory whose files are added to the initramfs (e.g. bin/my-client).
    #[arg(long, env = "LAB_OVERLAY")]
    pub overlay: Option<std::path::PathBuf>,
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
}

impl RunArgs {
    /// For benchmarks: icount unless --tcg says otherwise, so that repeated runs agree and
    /// the confidence intervals measure the workload, not the host.
    pub fn measure_opts(&self, default_plan: &str) -> RunOpts {
        RunOpts { tcg: self.tcg.unwrap_or(Tcg::Icount), ..self.opts(default_plan) }
    }

    pub fn opts(&self, default_plan: &str) -> RunOpts {
        RunOpts {
            board: self.board.clone(),
            plan: self.plan.clone().unwrap_or_else(|| default_plan.into()),
            flavor: self.flavor.clone(),
            tcg: self.tcg.unwrap_or(Tcg::Single),
            overlay: self.overlay.clone(),
            boot_timeout: std::time::Duration::from_secs(self.boot_timeout),
            echo: self.verbose,
            pin: self.pin,
            append: self.append.clone(),
            kconfig: self.kconfig.extras(),
            gdb: self.gdb,
            dump: self.dump.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
            trace: self.trace.clone(),
            ..Default::default()
        }
    }
}
