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
    /// Which QEMU: the system's, or the lab's patched build (qemu/, built on first use).
    #[arg(long, value_enum, env = "LAB_QEMU", default_value = "system")]
    pub qemu: crate::kbuild::qemu::Choice,
    /// A TCG plugin, `path[,arg=value...]` (`{run}` is the run directory); repeatable.
    #[arg(long)]
    pub plugin: Vec<String>,
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
            qemu: self.qemu,
            plugins: self.plugin.clone(),
            ..Default::default()
        }
    }
}
