//! What a run boots: the kernel, the board's DTB and the initramfs, built or taken from the
//! cache, and QEMU's spec for them.

use crate::harness::dtb;
use crate::harness::opts::{load_board_file, RunOpts};
use crate::harness::qemu::{Console, VmSpec};
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
    crate::harness::features::check(opts, &board)?;
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
    // features::check saw the timing model and the board's [cache_model].
    let model = board.cache_model().context("--cache without the board's [cache_model]")?;
    let config = dir.join("cache-model.json");
    std::fs::write(&config, serde_json::to_string_pretty(model)?)?;
    let so = crate::kbuild::qemu::build_plugin("lab-plugin-cache")?;
    Ok(Some(format!("{},config={},out={}", so.display(), config.display(), dir.join(CACHE_COUNTERS).display())))
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
        devices: if p.dvfs { board::cpufreq_hw_devices(&p.board) } else { vec![] },
        idle_exit: if p.idle { Some(board::idle_exit_arg(&p.board)?) } else { None },
        sockets: Some(sockets),
    })
}
