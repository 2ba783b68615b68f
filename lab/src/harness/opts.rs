//! What a run is asked to do: the options, and the plan and board files they name.

use crate::harness::qemu::Tcg;
use crate::support::{fs as paths_fs, paths};
use anyhow::{bail, Context, Result};
use labproto::Plan;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The board a run boots unless `--board` says otherwise.
pub const DEFAULT_BOARD: &str = "sa8155p";
/// Seconds to wait for the guest init's first message unless `--boot-timeout` says otherwise.
pub const DEFAULT_BOOT_TIMEOUT_S: u64 = 60;

/// A LAVA farm that runs the boots instead of a local QEMU (`reproduce --lava`); the report
/// stage sends each boot there as one job.
#[derive(Clone)]
pub struct LavaTarget {
    pub server: String,
    pub user: String,
    pub token: String,
    /// Where the workers fetch artifacts; None: file:// paths (a worker on this machine).
    pub artifact_url: Option<String>,
}

impl std::fmt::Debug for LavaTarget {
    // Never the token: options end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LavaTarget({}@{})", self.user, self.server)
    }
}

#[derive(Clone, Debug, smart_default::SmartDefault)]
pub struct RunOpts {
    /// Board name in board/ (`sa8155p`) or a path to a board file.
    #[default(DEFAULT_BOARD.into())]
    pub board: String,
    /// Plan name in rootfs/plans/ (`default`) or a path to a plan file.
    #[default("default".into())]
    pub plan: String,
    #[default(crate::kbuild::flavor::DEFAULT.into())]
    pub flavor: String,
    /// Boots fastest here: 8 vCPU threads on a 2-core host contend under MTTCG.
    #[default(Tcg::Single)]
    pub tcg: Tcg,
    #[default(DEFAULT_ICOUNT_SHIFT)]
    pub icount_shift: u32,
    /// QEMU's `-seed` under `--tcg icount|hicount`: the guest's entropy (the DTB's rng-seed
    /// and kaslr-seed, so the kernel's RNG, hash seeds, address randomisation), fixed per
    /// seed. Another seed is another boot of the same machine; nothing of the timing model.
    #[default(1)]
    pub qemu_seed: u32,
    /// Extra files for the initramfs (e.g. the user's own static binder clients).
    pub overlay: Option<PathBuf>,
    /// Debian arm64 packages unpacked into the initramfs with their dependencies (`--deb`),
    /// besides the plan's own `debs`.
    pub debs: Vec<String>,
    #[default(Duration::from_secs(DEFAULT_BOOT_TIMEOUT_S))]
    pub boot_timeout: Duration,
    /// Show the console live on stderr.
    pub echo: bool,
    /// Pin vCPU threads to host CPUs (round-robin).
    pub pin: bool,
    /// Appended to the kernel command line.
    pub append: Vec<String>,
    /// Short label for the run directory.
    pub name: String,
    /// `--kconfig` / `--kconfig-add` over the flavor.
    pub kconfig: crate::kbuild::kernel::Extras,
    /// Start halted with QEMU's gdbstub (and `nokaslr`); no timeouts while gdb holds the guest.
    pub gdb: bool,
    /// A guest console `/dev/hvc0` on the run's `hvc0.sck` for a userspace `gdbserver`.
    pub gdbserver: bool,
    /// Write an ELF memory dump here when the plan ends or the guest panics.
    pub dump: Option<PathBuf>,
    /// Trace events around every step (`--trace`), saved under `<run>/trace/`.
    pub trace: Option<labproto::TraceSpec>,
    /// Boot the board without its energy model (no OPP tables, so no cpufreq and no EAS).
    pub no_eas: bool,
    /// The scheduler policy the init applies at boot (`--policy`); None: the board's default.
    pub policy: Option<board::Policy>,
    /// Clusters as frequency domains of the lab QEMU's emulated qcom,cpufreq-hw (`--dvfs`).
    pub dvfs: bool,
    /// The board's per-CPU idle states in the DT; the lab QEMU charges each one's exit latency
    /// to a woken vCPU (`--idle`; hicount only).
    pub idle: bool,
    /// The system QEMU or the lab's build (`qemu/`).
    pub qemu: crate::kbuild::qemu::Choice,
    /// The binary `qemu` resolved to, and the lab build's key, when a command that boots many
    /// times resolved it once ([`RunOpts::with_qemu_resolved`]); else each boot resolves it.
    pub qemu_resolved: Option<(PathBuf, Option<String>)>,
    /// TCG plugins (`path,arg=value`); `{run}` in an argument becomes the run directory.
    pub plugins: Vec<String>,
    /// Load the cache cost plugin with the board's `[cache_model]` (`--cache`; hicount only).
    pub cache: bool,
    /// QEMU's own trace events to enable (`-trace enable=PATTERN`), logged to
    /// `<run>/qemu-trace.log`: for tests and for looking inside the lab QEMU; no CLI option.
    pub qemu_trace: Vec<String>,
    /// Runs of the plan's step list in one boot (`--repeat`; 0 and 1: once).
    pub repeat: u32,
    /// Stop repeating at the first run with a failure (`--until-fail`).
    pub until_fail: bool,
    /// Guest paths every step sends back when it ends (`--collect`).
    pub collect: Vec<String>,
    /// Fewer CPUs than the board has (`--smp`: CPUs 0..N-1).
    pub smp: Option<u32>,
    /// Other memory than the board's (`--memory`, QEMU -m syntax).
    pub memory: Option<String>,
    /// Print the steps' output lines on stdout as they arrive (`lab run -- CMD`).
    pub stream: bool,
    /// Boots at once for a command that boots more than once (`-j`); see
    /// [`crate::harness::boots::width`] for when it is one regardless.
    #[default(1)]
    pub jobs: usize,
    /// Every boot as a LAVA job on this farm instead of a local QEMU (`--lava`).
    pub lava: Option<LavaTarget>,
    /// Take a deterministic boot's results from the cache when one with the same inputs ran
    /// clean before, and keep this one's for the next (harness::boot_cache); no CLI option:
    /// `lab ab` sets it for its base arm.
    pub reuse_boots: bool,
}

impl RunOpts {
    /// These options with `qemu` resolved now, for every boot made from them: the arms of an
    /// experiment must run on one emulator, and a change to the shared QEMU tree in the middle
    /// of it (another session's work, not yet exported) must neither rebuild it between boots
    /// nor fail the boots that follow.
    pub fn with_qemu_resolved(&self) -> Result<RunOpts> {
        let resolved = crate::kbuild::qemu::resolve(self.qemu_choice())?;
        Ok(RunOpts { qemu_resolved: Some(resolved), ..self.clone() })
    }

    /// The QEMU binary of a boot, and the lab build's key.
    pub fn qemu_binary(&self) -> Result<(PathBuf, Option<String>)> {
        match &self.qemu_resolved {
            Some(r) => Ok(r.clone()),
            None => crate::kbuild::qemu::resolve(self.qemu_choice()),
        }
    }

    /// The QEMU these options run on: `auto` is the lab's build for the deterministic modes,
    /// whose boots must be byte-identical wherever and however loaded the host is, except on a
    /// farm, whose workers have only the system's.
    pub fn qemu_choice(&self) -> crate::kbuild::qemu::Choice {
        use crate::kbuild::qemu::Choice;
        match self.qemu {
            Choice::Auto if self.lava.is_none() && matches!(self.tcg, Tcg::Icount | Tcg::Hicount) => Choice::Lab,
            Choice::Auto => Choice::System,
            c => c,
        }
    }

    /// Option combinations that cannot do what they say.
    pub fn check(&self) -> Result<()> {
        if self.pin && self.tcg != Tcg::Multi {
            let mode = format!("{:?}", self.tcg).to_lowercase();
            bail!(
                "--pin pins each vCPU thread to a host CPU, but --tcg {mode} runs all vCPUs in one \
                 thread, so there is nothing to pin: use --pin with --tcg multi, or drop --pin"
            );
        }
        if self.icount_shift != DEFAULT_ICOUNT_SHIFT && self.tcg != Tcg::Icount {
            let mode = format!("{:?}", self.tcg).to_lowercase();
            bail!(
                "--icount-shift {} sets the guest time of an instruction under --tcg icount, but \
                 this run is --tcg {mode}: add --tcg icount, or drop --icount-shift",
                self.icount_shift
            );
        }
        Ok(())
    }
}

/// `--tcg icount`'s shift: 8 ns per instruction, 125 M instructions per guest second.
pub const DEFAULT_ICOUNT_SHIFT: u32 = 3;

/// board/ is also the board crate: its Cargo.toml is not a board.
pub const NOT_BOARDS: &[&str] = &["Cargo"];

/// Resolves `name` as a path, or as a file in `dir` with `ext` whose stem is not in `skip`.
fn resolve(name: &str, dir: &Path, ext: &str, what: &str, skip: &[&str]) -> Result<PathBuf> {
    let p = Path::new(name);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let known = paths_fs::stems(dir, ext, skip);
    if let Some((_, path)) = known.iter().find(|(n, _)| n == name) {
        return Ok(path.clone());
    }
    let names: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
    bail!("no {what} {name:?}: give a path or one of: {}", names.join(", "))
}

pub fn plans_dir() -> PathBuf {
    paths::repo().join("rootfs/plans")
}

pub fn load_plan(name: &str) -> Result<Plan> {
    let path = resolve(name, &plans_dir(), "toml", "plan", &[])?;
    let text = std::fs::read_to_string(&path)?;
    let plan: Plan = toml::from_str(&text).with_context(|| format!("{} is not a valid plan", path.display()))?;
    plan.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(plan)
}

pub fn load_board(name: &str) -> Result<board::Board> {
    Ok(load_board_file(name, None, None)?.0)
}

/// The board with `--smp`/`--memory` applied, and the SHA-256 of the exact bytes of its file
/// (for the manifest).
pub fn load_board_file(name: &str, smp: Option<u32>, memory: Option<&str>) -> Result<(board::Board, String)> {
    let path = resolve(name, &paths::board_dir(), "toml", "board", NOT_BOARDS)?;
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading the board file {}", path.display()))?;
    let board = crate::harness::board_override::load(&path, smp, memory)?;
    Ok((board, crate::support::fs::sha256_hex(text.as_bytes())))
}

/// QEMU's `-seed` of boot number `boot` (from 0) of a deterministic experiment's repeated
/// boots (`reproduce --model`, `ab`): boot 0 is the single boot of before.
pub fn seed_of(boot: usize) -> u32 {
    boot as u32 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolved_qemu_is_used_as_is() {
        // Resolving the lab QEMU would build it: a resolved binary must not be looked up again.
        let bin = (PathBuf::from("/pinned/qemu-system-aarch64"), Some("k".to_string()));
        let o =
            RunOpts { qemu: crate::kbuild::qemu::Choice::Lab, qemu_resolved: Some(bin.clone()), ..Default::default() };
        assert_eq!(o.qemu_binary().unwrap(), bin);
        let sys = RunOpts::default().with_qemu_resolved().unwrap();
        assert_eq!(sys.qemu_resolved, Some((PathBuf::from(crate::kbuild::qemu::BINARY), None)));
    }

    #[test]
    fn icount_shift_needs_icount() {
        let e = RunOpts { icount_shift: 0, tcg: Tcg::Single, ..Default::default() }.check().unwrap_err().to_string();
        assert!(e.contains("--icount-shift 0") && e.contains("add --tcg icount"), "{e}");
        RunOpts { icount_shift: 0, tcg: Tcg::Icount, ..Default::default() }.check().unwrap();
    }

    #[test]
    fn pin_needs_multi_threaded_tcg() {
        for tcg in [Tcg::Single, Tcg::Icount] {
            let e = RunOpts { pin: true, tcg, ..Default::default() }.check().unwrap_err().to_string();
            assert!(e.contains("nothing to pin") && e.contains("--tcg multi"), "{e}");
        }
        RunOpts { pin: true, tcg: Tcg::Multi, ..Default::default() }.check().unwrap();
        RunOpts::default().check().unwrap();
    }

    #[test]
    fn shipped_plans_and_boards_load() {
        let stems = |dir: PathBuf, skip| -> Vec<String> {
            paths_fs::stems(&dir, "toml", skip).into_iter().map(|(n, _)| n).collect()
        };
        let plans = stems(plans_dir(), &[]);
        assert!(plans.len() >= 12, "{plans:?}");
        for plan in &plans {
            load_plan(plan).unwrap_or_else(|e| panic!("plan {plan}: {e:#}"));
        }
        let boards = stems(paths::board_dir(), NOT_BOARDS);
        assert_eq!(boards, ["sa8155p", "sm8150-upstream", "symmetric"]);
        for b in &boards {
            load_board(b).unwrap_or_else(|e| panic!("board {b}: {e:#}"));
        }
        let e = load_plan("nope").unwrap_err().to_string();
        assert!(e.contains("default"), "{e}");
        // board/Cargo.toml is the board crate's manifest: not a board by name, nor in the list.
        let e = load_board("Cargo").unwrap_err().to_string();
        assert_eq!(e, "no board \"Cargo\": give a path or one of: sa8155p, sm8150-upstream, symmetric");
    }
}
