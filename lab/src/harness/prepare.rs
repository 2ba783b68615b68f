//! What a run boots: the kernel, the board's DTB and the initramfs, built or taken from the
//! cache, and QEMU's spec for them.

use crate::harness::dtb;
use crate::harness::opts::{load_board_file, RunOpts};
use crate::harness::qemu::{Console, Tcg, VmSpec};
use crate::harness::sockets::SocketDir;
use crate::kbuild::kernel;
use crate::provision::downloads;
use crate::support::{paths, stamp};
use anyhow::{Context, Result};
use labproto::Plan;
use std::path::{Path, PathBuf};

/// Kernel, DTB and initramfs for a run, built or taken from the cache.
pub struct Prepared {
    pub kernel: kernel::Built,
    pub board: board::Board,
    /// SHA-256 of the board file's contents.
    pub board_sha256: String,
    pub dtb: PathBuf,
    pub initrd: PathBuf,
    pub plan: Plan,
    /// The QEMU binary, and the lab build's key (None: the system QEMU).
    pub qemu: PathBuf,
    pub qemu_key: Option<String>,
    /// `--cache`: the cache plugin's argument (`.so,config=..,out=..`).
    pub cache_plugin: Option<String>,
    /// The DTB describes the clusters as qcom,cpufreq-hw frequency domains (`--dvfs`).
    pub dvfs: bool,
    /// The DTB lists the board's idle states and QEMU charges their exit latency (`--idle`).
    pub idle: bool,
}

/// Builds what is missing and writes the DTB and initramfs into `dir`.
pub fn prepare(opts: &RunOpts, plan: Plan, dir: &Path) -> Result<Prepared> {
    let cache = paths::cache();
    // A misspelt crate is refused before anything is built.
    for c in &plan.crates {
        crate::provision::crates::CrateSpec::parse(c)?;
    }
    let (board, board_sha256) = load_board_file(&opts.board, opts.smp, opts.memory.as_deref())?;
    let board = if opts.no_eas { board.without_eas() } else { board };
    let plan = with_policy(plan, &board, opts.policy)?;
    check_hicount(opts, &board)?;
    check_dvfs(opts, &board)?;
    check_idle(opts, &board)?;
    let cache_plugin = cache_plugin(opts, &board, dir)?;
    // The guest programs build beside the kernel: on a new machine the kernel takes minutes
    // and its make leaves the cores idle at times (configuration, the Rust crates' serial
    // steps, the link), which the guest's cargo fills. What the guest build needs of the
    // host comes first (on a new machine, nothing of it is installed yet).
    crate::provision::toolchain::ensure_guest_prerequisites(&cache)?;
    let (kernel, bins) = std::thread::scope(|s| {
        let guest = s.spawn(|| rootfs::build_guest(&rootfs::GuestBuildOpts { quiet: true, ..Default::default() }));
        // LAB_KERNEL boots a kernel built elsewhere, e.g. from a private tree while the shared
        // one is busy; the manifest records its Image's hash as the key.
        let kernel = match std::env::var_os("LAB_KERNEL") {
            Some(dir) => kernel::Built::external(&opts.flavor, Path::new(&dir)),
            None => kernel::build_with(&opts.flavor, &opts.kconfig),
        };
        let bins = guest.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        (kernel, bins)
    });
    // Both errors matter; the kernel's is usually the one to fix first.
    let kernel = match (kernel, &bins) {
        (Err(k), Err(g)) => return Err(k.context(format!("the guest build failed as well: {g:#}"))),
        (k, _) => k?,
    };
    let bins = bins?;
    let (qemu_bin, qemu_key) = opts.qemu_binary()?;
    let base = std::fs::read(dtb::qemu_dtb(&cache, &board, &qemu_bin)?)?;
    let dtb = dir.join("board.dtb");
    std::fs::write(
        &dtb,
        board::generate_dtb_with(&board, &base, board::DtbFeatures { dvfs: opts.dvfs, idle: opts.idle })?,
    )?;

    let mut spec = rootfs::InitramfsSpec::new(&bins, serde_json::to_string_pretty(&plan)?);
    spec.busybox = Some(downloads::busybox(&cache)?);
    if crate::harness::selftest::wanted(&plan) {
        let tree =
            crate::kbuild::tree::tree_dir(&cache, &crate::kbuild::pin::Lock::load(&crate::kbuild::pin::Lock::path())?);
        spec.programs.push((crate::harness::selftest::PROGRAM.into(), crate::harness::selftest::build(&cache, &tree)?));
    }
    spec.overlay = opts.overlay.clone();
    let debs: Vec<String> = opts.debs.iter().chain(&plan.debs).cloned().collect();
    if !debs.is_empty() {
        spec.debs = Some(crate::provision::debs::overlay(&cache, &debs)?.root);
    }
    if !plan.crates.is_empty() {
        spec.crates = Some(crate::provision::crates::overlay(&cache, &plan.crates)?);
    }
    if plan.aosp {
        let built = crate::kbuild::aosp::build(&cache)?;
        spec.extra = vec![built.runtime.clone(), built.root()];
    }
    let initrd = dir.join("initramfs.cpio");
    rootfs::write_initramfs(&spec, &initrd)?;
    Ok(Prepared {
        kernel,
        board,
        board_sha256,
        dtb,
        initrd,
        plan,
        qemu: qemu_bin,
        qemu_key,
        cache_plugin,
        dvfs: opts.dvfs,
        idle: opts.idle,
    })
}

/// The plan with the scheduler policy's boot-time writes: `policy`, else the board's default.
/// Mainline's writes nothing, so its plan (and initramfs) is the plan as given.
pub fn with_policy(mut plan: Plan, board: &board::Board, policy: Option<board::Policy>) -> Result<Plan> {
    let policy = policy.unwrap_or(board.default_policy());
    plan.settings =
        board.policy_writes(policy)?.into_iter().map(|w| labproto::Setting { path: w.path, value: w.value }).collect();
    Ok(plan)
}

/// The run's cache counters (`--cache`).
pub const CACHE_COUNTERS: &str = "cache.json";
/// QEMU's own trace log in the run directory (`RunOpts::qemu_trace`).
pub const QEMU_TRACE_LOG: &str = "qemu-trace.log";

/// `--cache`: the board's model written into the run directory, and the plugin built.
fn cache_plugin(opts: &RunOpts, board: &board::Board, dir: &Path) -> Result<Option<String>> {
    if !opts.cache {
        return Ok(None);
    }
    if opts.tcg != Tcg::Hicount {
        anyhow::bail!(
            "--cache charges cache latencies to each vCPU's own time, which only the lab QEMU's \
             timing model has: add --qemu lab --tcg hicount"
        );
    }
    let model = board.cache_model().with_context(|| {
        format!(
            "--cache needs the board's [cache_model] section, which {} lacks (board/sa8155p.toml has one)",
            board.source()
        )
    })?;
    let config = dir.join("cache-model.json");
    std::fs::write(&config, serde_json::to_string_pretty(model)?)?;
    let so = crate::kbuild::qemu::build_plugin("lab-plugin-cache")?;
    Ok(Some(format!("{},config={},out={}", so.display(), config.display(), dir.join(CACHE_COUNTERS).display())))
}

/// `--tcg hicount` needs what only the lab QEMU and a board with `[timing]` have.
fn check_hicount(opts: &RunOpts, board: &board::Board) -> Result<()> {
    if opts.tcg != Tcg::Hicount {
        return Ok(());
    }
    if opts.qemu != crate::kbuild::qemu::Choice::Lab {
        anyhow::bail!("--tcg hicount is the lab QEMU's timing model: add --qemu lab (or LAB_QEMU=lab)");
    }
    if board.timing().is_none() {
        anyhow::bail!(
            "--tcg hicount needs the board's [timing] section, which {} lacks (board/sa8155p.toml has one)",
            board.source()
        );
    }
    Ok(())
}

/// `--dvfs` needs the lab QEMU (the emulated qcom,cpufreq-hw is its qemu/0011) and OPP lists.
fn check_dvfs(opts: &RunOpts, board: &board::Board) -> Result<()> {
    if !opts.dvfs {
        return Ok(());
    }
    if opts.qemu != crate::kbuild::qemu::Choice::Lab {
        anyhow::bail!("--dvfs emulates a qcom,cpufreq-hw, which only the lab QEMU has: add --qemu lab");
    }
    if !board.has_dvfs() {
        anyhow::bail!(
            "--dvfs needs an OPP list on every cluster (clusters[].dvfs), which {} lacks (board/sa8155p.toml has them)",
            board.source()
        );
    }
    Ok(())
}

/// `--idle` needs the lab QEMU's timing model (qemu/0013 charges the exit latencies to each
/// vCPU's own time; without it the states would cost nothing) and PSCI states on every cluster.
fn check_idle(opts: &RunOpts, board: &board::Board) -> Result<()> {
    if !opts.idle {
        return Ok(());
    }
    if opts.tcg != Tcg::Hicount {
        anyhow::bail!(
            "--idle charges each idle state's exit latency to the woken vCPU's own time, which only the lab \
             QEMU's timing model has: add --qemu lab --tcg hicount"
        );
    }
    if !board::has_idle(board) {
        anyhow::bail!(
            "--idle needs a PSCI idle state on every cluster (clusters[].idle with a psci_param), which {} lacks \
             (board/sa8155p.toml has them)",
            board.source()
        );
    }
    // A StateID QEMU's power_state cannot carry is refused here, before anything is built.
    board::idle_exit_arg(board)?;
    Ok(())
}

/// `-device` arguments of the emulated qcom,cpufreq-hw, one per frequency domain (`--dvfs`):
/// its register block, its vCPUs, the board's LUT words, and picoseconds per instruction
/// per row (0 without `[timing]`: the speed then never changes) and each row's clock.
pub fn cpufreq_hw_devices(board: &board::Board) -> Vec<String> {
    board::cpufreq_domains(board)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::json!({
                "driver": "qcom-cpufreq-hw",
                "addr": board::cpufreq_hw_reg(i).0,
                "cpus": d.cpus.iter().fold(0u64, |m, &c| m | (1 << c)),
                "freq-lut": d.rows.iter().map(|r| r.freq).collect::<Vec<_>>(),
                "volt-lut": d.rows.iter().map(|r| r.volt).collect::<Vec<_>>(),
                "ps-per-insn": d.rows.iter().map(|r| r.ps_per_insn).collect::<Vec<_>>(),
                // The row's clock: the PMU cycle counter counts at it (qemu/0015).
                "khz": d.rows.iter().map(|r| r.khz).collect::<Vec<_>>(),
            })
            .to_string()
        })
        .collect()
}

/// A fresh, unique run directory.
pub fn new_run_dir(name: &str) -> Result<PathBuf> {
    let stamp = stamp::utc_stamp();
    let dir = paths::runs_dir().join(format!("{stamp}-{name}-{}", std::process::id()));
    std::fs::create_dir_all(paths::runs_dir())?;
    // create_dir fails if it exists: two runs never share a directory.
    for n in 0.. {
        let d = if n == 0 { dir.clone() } else { PathBuf::from(format!("{}.{n}", dir.display())) };
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
        }
    }
    unreachable!()
}

/// `--gdb`: the gdbstub's socket, in (or linked from) the run directory.
pub const GDB_SOCKET: &str = "gdb.sock";
/// QMP's socket; as long a name as [`GDB_SOCKET`], so one length check covers both.
pub const QMP_SOCKET: &str = "qmp.sock";
/// `--gdbserver`: the guest's `/dev/hvc0`. Same length again.
pub const GDBSERVER_SOCKET: &str = "hvc0.sck";
const _: () = assert!(GDB_SOCKET.len() == QMP_SOCKET.len() && GDBSERVER_SOCKET.len() == QMP_SOCKET.len());

pub fn vm_spec(p: &Prepared, opts: &RunOpts, dir: &Path, console: Console) -> Result<VmSpec> {
    let sockets = SocketDir::for_run(dir, QMP_SOCKET, &std::env::temp_dir())?;
    let mut append = vec!["console=ttyAMA0".to_string(), "loglevel=5".into(), "rdinit=/init".into()];
    if opts.gdb {
        // Symbols at their link addresses, as in vmlinux.
        append.push("nokaslr".into());
    }
    append.extend(opts.append.iter().cloned());
    let run = dir.display().to_string();
    Ok(VmSpec {
        binary: p.qemu.clone(),
        machine: p.board.qemu_machine().to_string(),
        cpu: p.board.qemu_cpu().to_string(),
        smp: p.board.smp(),
        memory: p.board.memory().to_string(),
        kernel: p.kernel.image(),
        initrd: p.initrd.clone(),
        dtb: p.dtb.clone(),
        append: append.join(" "),
        tcg: opts.tcg,
        icount_shift: opts.icount_shift,
        seed: opts.qemu_seed,
        console,
        results: (console == Console::Pipe).then(|| dir.join("results.jsonl")),
        qmp: Some(sockets.socket(QMP_SOCKET)),
        pvpanic: true,
        gdb: opts.gdb.then(|| sockets.socket(GDB_SOCKET)),
        gdbserver: opts.gdbserver.then(|| sockets.socket(GDBSERVER_SOCKET)),
        dump: opts.dump.is_some(),
        // The plan's own `[trace]` as well as `--trace` (run_plan copies that into the plan).
        trace: p.plan.trace.as_ref().map(|_| dir.join(crate::harness::trace::TRACE_STREAM)),
        plugins: opts.plugins.iter().map(|p| p.replace("{run}", &run)).chain(p.cache_plugin.clone()).collect(),
        qemu_trace: (!opts.qemu_trace.is_empty()).then(|| (opts.qemu_trace.clone(), dir.join(QEMU_TRACE_LOG))),
        timing: p.board.timing().cloned(),
        devices: if p.dvfs { cpufreq_hw_devices(&p.board) } else { vec![] },
        idle_exit: if p.idle { Some(board::idle_exit_arg(&p.board)?) } else { None },
        sockets: Some(sockets),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa8155p() -> board::Board {
        crate::harness::opts::load_board_file("sa8155p", None, None).unwrap().0
    }

    #[test]
    fn cpufreq_hw_devices_carry_the_boards_luts_and_speeds() {
        let b = sa8155p();
        let devs: Vec<serde_json::Value> =
            cpufreq_hw_devices(&b).iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        assert_eq!(devs.len(), 3);
        assert_eq!(
            devs.iter().map(|d| d["addr"].as_u64().unwrap()).collect::<Vec<_>>(),
            [0xb00_0000, 0xb00_2800, 0xb00_4800]
        );
        assert_eq!(devs.iter().map(|d| d["cpus"].as_u64().unwrap()).collect::<Vec<_>>(), [0x0f, 0x70, 0x80]);
        assert_eq!(devs[0]["driver"], "qcom-cpufreq-hw");
        assert_eq!(devs[0]["freq-lut"].as_array().unwrap().len(), 18);
        assert_eq!(devs[0]["khz"][0], 300_000);
        assert_eq!(devs[2]["khz"].as_array().unwrap().last().unwrap(), 2_841_600);
        assert_eq!(devs[2]["volt-lut"].as_array().unwrap().last().unwrap(), 1000);
        // The top row is [timing]'s speed, the one `-icount cpu-ps=` boots with.
        let ps = b.timing().unwrap().cpu_ps_per_insn.clone();
        assert_eq!(devs[1]["ps-per-insn"].as_array().unwrap().last().unwrap().as_u64(), Some(ps[4]));
    }

    #[test]
    fn idle_needs_hicount_and_psci_states() {
        let opts = RunOpts { idle: true, qemu: crate::kbuild::qemu::Choice::Lab, ..Default::default() };
        let e = check_idle(&opts, &sa8155p()).unwrap_err().to_string();
        assert!(e.contains("add --qemu lab --tcg hicount"), "{e}");
        let hicount = RunOpts { tcg: Tcg::Hicount, ..opts };
        assert!(check_idle(&hicount, &sa8155p()).is_ok());
        let up = crate::harness::opts::load_board_file("sm8150-upstream", None, None).unwrap().0;
        if !board::has_idle(&up) {
            let e = check_idle(&hicount, &up).unwrap_err().to_string();
            assert!(e.contains("clusters[].idle"), "{e}");
        }
    }

    #[test]
    fn dvfs_needs_the_lab_qemu_and_opp_lists() {
        let opts = RunOpts { dvfs: true, ..Default::default() };
        let e = check_dvfs(&opts, &sa8155p()).unwrap_err().to_string();
        assert!(e.contains("add --qemu lab"), "{e}");
        let lab = RunOpts { qemu: crate::kbuild::qemu::Choice::Lab, ..opts };
        assert!(check_dvfs(&lab, &sa8155p()).is_ok());
        let up = crate::harness::opts::load_board_file("sm8150-upstream", None, None).unwrap().0;
        let e = check_dvfs(&lab, &up).unwrap_err().to_string();
        assert!(e.contains("clusters[].dvfs"), "{e}");
    }
}
