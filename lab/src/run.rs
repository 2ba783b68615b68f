//! One guest run: build what is missing, boot QEMU, follow the plan's results, catch
//! panics, hangs and Ctrl-C, and leave everything in a run directory.

use crate::console::{self, Splat};
use crate::qemu::{self, Console, Tcg, Vm, VmEvent, VmSpec};
use crate::{kernel, paths, util};
use anyhow::{bail, Context, Result};
use labproto::{Event, Plan, Status};
use serde::Serialize;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Grace on top of a step's own timeout: the guest init enforces it first.
const STEP_GRACE: Duration = Duration::from_secs(15);
/// After Done (or an init error), the guest has this long to power off.
const POWEROFF_TIMEOUT: Duration = Duration::from_secs(15);
/// How long to keep reading the console after a panic for the rest of its report.
const PANIC_LINGER: Duration = Duration::from_millis(700);
/// Console prefix of results when the guest has no result port (the init's fallback; the
/// only channel under `--tcg icount`).
const CONSOLE_RESULT_PREFIX: &str = "LABRESULT ";

/// Events among console lines, from `*pos` on; advances `*pos`.
fn console_events(lines: &[String], pos: &mut usize) -> Vec<Event> {
    let out = lines[*pos..]
        .iter()
        .filter_map(|l| l.split_once(CONSOLE_RESULT_PREFIX).and_then(|(_, ev)| Event::parse_line(ev)))
        .collect();
    *pos = lines.len();
    out
}

/// Without a result port, the run directory still gets `results.jsonl`: the events the
/// harness collected from the console.
fn write_console_results(spec: &VmSpec, events: &[Event]) -> Result<()> {
    let Some(path) = spec.results.as_ref().filter(|_| !spec.has_result_port()) else { return Ok(()) };
    let text: String = events.iter().map(Event::to_line).collect();
    util::write_atomic(path, text.as_bytes())
}

#[derive(Clone, Debug)]
pub struct RunOpts {
    /// Board name in board/ (`sa8155p`) or a path to a board file.
    pub board: String,
    /// Plan name in rootfs/plans/ (`default`) or a path to a plan file.
    pub plan: String,
    pub flavor: String,
    pub tcg: Tcg,
    pub icount_shift: u32,
    /// Extra files for the initramfs (e.g. the user's own static binder clients).
    pub overlay: Option<PathBuf>,
    pub boot_timeout: Duration,
    /// Show the console live on stderr.
    pub echo: bool,
    /// Pin vCPU threads to host CPUs (round-robin).
    pub pin: bool,
    /// Appended to the kernel command line.
    pub append: Vec<String>,
    /// Short label for the run directory.
    pub name: String,
    /// The system QEMU or the lab's build (`qemu/`).
    pub qemu: crate::qemubuild::Choice,
    /// TCG plugins (`path,arg=value`); `{run}` in an argument becomes the run directory.
    pub plugins: Vec<String>,
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts {
            board: "sa8155p".into(),
            plan: "default".into(),
            flavor: "perf".into(),
            // Boots fastest here: 8 vCPU threads on a 2-core host contend under MTTCG.
            tcg: Tcg::Single,
            icount_shift: 3,
            overlay: None,
            boot_timeout: Duration::from_secs(60),
            echo: false,
            pin: false,
            append: vec![],
            name: String::new(),
            qemu: Default::default(),
            plugins: vec![],
        }
    }
}

/// How the run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The plan ran to the end and the guest powered off.
    Completed,
    /// The guest kernel panicked; `text` is the report from the console.
    Panic { text: String },
    /// A phase overran; `tail` holds the last console lines.
    Timeout { phase: String, tail: String },
    /// The guest init failed and powered off.
    InitError { message: String },
    /// QEMU ended without the guest finishing the plan.
    QemuExited { status: String, tail: String },
    /// Ctrl-C / SIGTERM.
    Interrupted,
}

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub dir: PathBuf,
    pub verdict: Verdict,
    pub events: Vec<Event>,
    /// QEMU start to the init's first message.
    pub boot_s: Option<f64>,
    pub splats: Vec<Splat>,
    pub topology_mismatches: Vec<String>,
    pub wall_s: f64,
    /// Seconds from the first sign of a panic to the harness's verdict.
    pub panic_report_s: Option<f64>,
    /// Last console lines, shown with timed-out steps.
    pub console_tail: String,
}

impl Outcome {
    /// Results reported by steps.
    pub fn results(&self) -> impl Iterator<Item = (&str, &str, Status, Option<&str>)> {
        self.events.iter().filter_map(|e| match e {
            Event::Result { step, case, status, message, .. } => {
                Some((step.as_str(), case.as_str(), *status, message.as_deref()))
            }
            _ => None,
        })
    }

    /// Steps that exited non-zero or timed out.
    pub fn failed_steps(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::StepEnd { step, timed_out: true, duration_ms, .. } => Some(format!(
                    "{step}: timed out after {:.1} s; last console lines:\n{}",
                    duration_ms / 1000.0,
                    self.console_tail
                )),
                Event::StepEnd { step, exit_code, signal, .. } if *exit_code != Some(0) => {
                    Some(format!("{step}: exit code {exit_code:?}, signal {signal:?}"))
                }
                _ => None,
            })
            .collect()
    }

    /// Everything that makes this run a failure, as readable lines.
    pub fn problems(&self) -> Vec<String> {
        let mut p = vec![];
        match &self.verdict {
            Verdict::Completed => {}
            Verdict::Panic { text } => p.push(format!("guest kernel panic:\n{text}")),
            Verdict::Timeout { phase, tail } => p.push(format!("timeout in {phase}; last console lines:\n{tail}")),
            Verdict::InitError { message } => p.push(format!("guest init failed: {message}")),
            Verdict::QemuExited { status, tail } => {
                p.push(format!("QEMU exited ({status}) before the plan finished; last console lines:\n{tail}"))
            }
            Verdict::Interrupted => p.push("interrupted".into()),
        }
        p.extend(self.failed_steps().into_iter().map(|s| format!("step {s}")));
        for (step, case, status, msg) in self.results() {
            if status == Status::Fail {
                p.push(format!("{step}/{case} failed{}", msg.map(|m| format!(": {m}")).unwrap_or_default()));
            }
        }
        p.extend(self.topology_mismatches.iter().cloned());
        if !matches!(self.verdict, Verdict::Panic { .. }) {
            p.extend(self.splats.iter().map(|s| format!("kernel splat ({}):\n{}", s.kind, s.text)));
        }
        p
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }

    /// The data of the first result named `case`.
    pub fn data(&self, case: &str) -> Option<&serde_json::Value> {
        case_data(&self.events, case)
    }
}

/// The data of the first result named `case` among `events`.
fn case_data<'a>(events: &'a [Event], case: &str) -> Option<&'a serde_json::Value> {
    events.iter().find_map(|e| match e {
        Event::Result { case: c, data, .. } if c == case => Some(data),
        _ => None,
    })
}

/// Resolves `name` as a file in `dir` with `ext`, or as a path.
fn resolve(name: &str, dir: &Path, ext: &str, what: &str) -> Result<PathBuf> {
    let p = Path::new(name);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let in_dir = dir.join(format!("{name}.{ext}"));
    if in_dir.is_file() {
        return Ok(in_dir);
    }
    let known: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(&format!(".{ext}")).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    bail!("no {what} {name:?}: give a path or one of: {}", known.join(", "))
}

pub fn plans_dir() -> PathBuf {
    paths::repo().join("rootfs/plans")
}

pub fn load_plan(name: &str) -> Result<Plan> {
    let path = resolve(name, &plans_dir(), "toml", "plan")?;
    let text = std::fs::read_to_string(&path)?;
    let plan: Plan = toml::from_str(&text).with_context(|| format!("{} is not a valid plan", path.display()))?;
    Ok(plan)
}

pub fn load_board(name: &str) -> Result<board::Board> {
    let path = resolve(name, &paths::board_dir(), "toml", "board")?;
    Ok(board::Board::load(&path)?)
}

/// Kernel, DTB and initramfs for a run, built or taken from the cache.
pub struct Prepared {
    pub kernel: kernel::Built,
    pub board: board::Board,
    pub dtb: PathBuf,
    pub initrd: PathBuf,
    pub plan: Plan,
    /// The QEMU binary, and the lab build's key (None: the system QEMU).
    pub qemu: PathBuf,
    pub qemu_key: Option<String>,
}

/// Builds what is missing and writes the DTB and initramfs into `dir`.
pub fn prepare(opts: &RunOpts, plan: Plan, dir: &Path) -> Result<Prepared> {
    let cache = paths::cache();
    let board = load_board(&opts.board)?;
    check_hicount(opts, &board)?;
    let kernel = kernel::build(&opts.flavor)?;
    let (qemu_bin, qemu_key) = crate::qemubuild::resolve(opts.qemu)?;
    let base = std::fs::read(qemu::qemu_dtb(&cache, &board, &qemu_bin)?)?;
    let dtb = dir.join("board.dtb");
    std::fs::write(&dtb, board::generate_dtb(&board, &base)?)?;

    let bins = rootfs::build_guest(&rootfs::GuestBuildOpts { quiet: true, ..Default::default() })?;
    let mut spec = rootfs::InitramfsSpec::new(&bins, serde_json::to_string_pretty(&plan)?);
    spec.busybox = Some(crate::setup::busybox(&cache)?);
    spec.overlay = opts.overlay.clone();
    let initrd = dir.join("initramfs.cpio");
    rootfs::write_initramfs(&spec, &initrd)?;
    Ok(Prepared { kernel, board, dtb, initrd, plan, qemu: qemu_bin, qemu_key })
}

/// `--tcg hicount` needs what only the lab QEMU and a board with `[timing]` have.
fn check_hicount(opts: &RunOpts, board: &board::Board) -> Result<()> {
    if opts.tcg != Tcg::Hicount {
        return Ok(());
    }
    if opts.qemu != crate::qemubuild::Choice::Lab {
        bail!("--tcg hicount is the lab QEMU's timing model: add --qemu lab (or LAB_QEMU=lab)");
    }
    if board.timing().is_none() {
        bail!(
            "--tcg hicount needs the board's [timing] section, which {} lacks (board/sa8155p.toml has one)",
            board.source()
        );
    }
    Ok(())
}

/// A fresh, unique run directory.
pub fn new_run_dir(name: &str) -> Result<PathBuf> {
    let stamp = util::utc_stamp();
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

pub fn vm_spec(p: &Prepared, opts: &RunOpts, dir: &Path, console: Console) -> VmSpec {
    let mut append = vec!["console=ttyAMA0".to_string(), "loglevel=5".into(), "rdinit=/init".into()];
    append.extend(opts.append.iter().cloned());
    let run = dir.display().to_string();
    VmSpec {
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
        console,
        results: (console == Console::Pipe).then(|| dir.join("results.jsonl")),
        qmp: Some(dir.join("qmp.sock")),
        pvpanic: true,
        plugins: opts.plugins.iter().map(|p| p.replace("{run}", &run)).collect(),
        timing: p.board.timing().cloned(),
    }
}

/// Ctrl-C and SIGTERM set this; the run loop then stops QEMU and reports.
fn interrupted_flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
    .clone()
}

/// Reads complete lines appended to the results file.
struct ResultTail {
    path: PathBuf,
    pos: u64,
    partial: String,
}

impl ResultTail {
    fn poll(&mut self) -> Vec<Event> {
        let Ok(mut f) = std::fs::File::open(&self.path) else { return vec![] };
        if f.seek(std::io::SeekFrom::Start(self.pos)).is_err() {
            return vec![];
        }
        let mut buf = String::new();
        let n = f.read_to_string(&mut buf).unwrap_or(0);
        self.pos += n as u64;
        self.partial.push_str(&buf);
        let mut out = vec![];
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            if let Some(ev) = Event::parse_line(&line) {
                out.push(ev);
            }
        }
        out
    }
}

enum Phase {
    Boot,
    Idle,
    Step(String),
    PowerOff,
}

/// Boots and follows one run of the plan `opts.plan` names. Never leaves QEMU running.
pub fn run(opts: &RunOpts) -> Result<Outcome> {
    run_plan(&load_plan(&opts.plan)?, opts)
}

/// Boots and follows one run of `plan` (e.g. one generated by `bench`); `opts.plan` is not
/// read. Never leaves QEMU running.
pub fn run_plan(plan: &Plan, opts: &RunOpts) -> Result<Outcome> {
    let plan = plan.clone();
    let name = if opts.name.is_empty() { format!("{}-{}", opts.board, plan.name) } else { opts.name.clone() };
    let dir = new_run_dir(&paths::path_safe(&name))?;
    let prepared = prepare(opts, plan, &dir)?;
    let spec = vm_spec(&prepared, opts, &dir, Console::Pipe);
    let interrupted = interrupted_flag();
    interrupted.store(false, Ordering::SeqCst);

    let t0 = Instant::now();
    let mut vm = Vm::spawn(&spec)?;
    let mut consolef = std::io::BufWriter::new(std::fs::File::create(dir.join("console.log"))?);
    let mut tail = ResultTail { path: spec.results.clone().unwrap(), pos: 0, partial: String::new() };
    let mut lines: Vec<String> = vec![];
    let mut events: Vec<Event> = vec![];
    let mut boot_s = None;
    let mut phase = Phase::Boot;
    let mut deadline = Instant::now() + opts.boot_timeout;
    let mut verdict: Option<Verdict> = None;
    let mut panic_seen: Option<Instant> = None;
    let mut panic_report_s = None;
    let mut last_qmp = Instant::now();
    let mut console_pos = 0;
    let qmp_ok = vm.connect_qmp(Duration::from_secs(10));
    let vcpus = if qmp_ok.is_ok() { vm.vcpu_threads().unwrap_or_default() } else { vec![] };
    if opts.pin {
        pin_vcpus(&vcpus);
    }

    // With `until`, waits for the reader threads to reach EOF (their channel disconnects) up to
    // that instant: after QEMU exited, a fixed pause lost the console's tail on a loaded host.
    let drain_console_until = |lines: &mut Vec<String>,
                               vm: &mut Vm,
                               consolef: &mut std::io::BufWriter<std::fs::File>,
                               until: Option<Instant>| {
        if let Some(rx) = vm.console.as_ref() {
            let next = || match until {
                Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())).ok(),
                None => rx.try_recv().ok(),
            };
            while let Some(l) = next() {
                let _ = writeln!(consolef, "{l}");
                if opts.echo {
                    eprintln!("  | {l}");
                }
                lines.push(l);
            }
        }
    };
    let drain_console = |lines: &mut Vec<String>, vm: &mut Vm, consolef: &mut std::io::BufWriter<std::fs::File>| {
        drain_console_until(lines, vm, consolef, None)
    };

    while verdict.is_none() {
        let now = Instant::now();
        let before = lines.len();
        drain_console(&mut lines, &mut vm, &mut consolef);
        if panic_seen.is_none() && lines[before..].iter().any(|l| l.contains("Kernel panic - not syncing")) {
            panic_seen = Some(now);
        }
        let mut new_events = tail.poll();
        new_events.extend(console_events(&lines, &mut console_pos));
        for ev in new_events {
            match &ev {
                Event::Hello { .. } => {
                    boot_s.get_or_insert(t0.elapsed().as_secs_f64());
                    phase = Phase::Idle;
                    deadline = now + STEP_GRACE;
                }
                Event::StepStart { step } => {
                    let t = prepared.plan.steps.iter().find(|s| &s.name == step).map(|s| s.timeout_s).unwrap_or(60);
                    phase = Phase::Step(step.clone());
                    deadline = now + Duration::from_secs(t) + STEP_GRACE;
                }
                Event::StepEnd { .. } => {
                    phase = Phase::Idle;
                    deadline = now + STEP_GRACE;
                }
                Event::Done => {
                    phase = Phase::PowerOff;
                    deadline = now + POWEROFF_TIMEOUT;
                }
                Event::InitError { message } => {
                    verdict = Some(Verdict::InitError { message: message.clone() });
                }
                _ => {}
            }
            events.push(ev);
        }
        if now.duration_since(last_qmp) > Duration::from_millis(100) {
            last_qmp = now;
            if vm.poll_events().contains(&VmEvent::Panicked) && panic_seen.is_none() {
                panic_seen = Some(now);
            }
        }
        if let Some(t) = panic_seen {
            if now.duration_since(t) > PANIC_LINGER || vm.exited()?.is_some() {
                drain_console(&mut lines, &mut vm, &mut consolef);
                let text = console::panic_text(&lines).unwrap_or_else(|| console::tail(&lines, 50));
                verdict = Some(Verdict::Panic { text });
                panic_report_s = Some(t.elapsed().as_secs_f64());
                break;
            }
        } else if let Some(st) = vm.exited()? {
            // Let the reader threads and the chardev file catch up.
            drain_console_until(&mut lines, &mut vm, &mut consolef, Some(Instant::now() + Duration::from_secs(5)));
            std::thread::sleep(Duration::from_millis(100));
            events.extend(tail.poll());
            events.extend(console_events(&lines, &mut console_pos));
            let done = events.iter().any(|e| matches!(e, Event::Done));
            if let Some(text) = console::panic_text(&lines) {
                verdict = Some(Verdict::Panic { text });
            } else if done && st.success() {
                verdict = Some(Verdict::Completed);
            } else if verdict.is_none() {
                verdict = Some(Verdict::QemuExited { status: st.to_string(), tail: console::tail(&lines, 50) });
            }
        } else if interrupted.load(Ordering::SeqCst) {
            verdict = Some(Verdict::Interrupted);
        } else if now > deadline {
            let what = match &phase {
                Phase::Boot => format!("boot (no message from the guest init within {:?})", opts.boot_timeout),
                Phase::Idle => "the guest init between steps".into(),
                Phase::Step(s) => format!("step {s}"),
                Phase::PowerOff => "power-off after the plan".into(),
            };
            verdict = Some(Verdict::Timeout { phase: what, tail: console::tail(&lines, 50) });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    vm.stop();
    drain_console(&mut lines, &mut vm, &mut consolef);
    consolef.flush()?;
    events.extend(tail.poll());
    events.extend(console_events(&lines, &mut console_pos));
    write_console_results(&spec, &events)?;

    events.extend(crate::kunit::from_console(&lines));
    let verdict = verdict.expect("loop ends with a verdict");
    let splats = console::scan(&lines);
    let topology_mismatches = check_topology(&prepared.board, &events);
    let outcome = Outcome {
        dir: dir.clone(),
        verdict,
        events,
        boot_s,
        splats,
        topology_mismatches,
        wall_s: t0.elapsed().as_secs_f64(),
        panic_report_s,
        console_tail: console::tail(&lines, 50),
    };
    write_manifest(&dir, &prepared, &spec, &outcome, &vcpus, opts)?;
    crate::report::write_reports(&dir, &outcome)?;
    Ok(outcome)
}

/// Compares the guest's topology report (if the plan had one) with the board.
fn check_topology(board: &board::Board, events: &[Event]) -> Vec<String> {
    let Some(report) = case_data(events, "topology") else { return vec![] };
    let mut problems = match serde_json::from_value::<Vec<board::CpuObserved>>(report["cpus"].clone()) {
        Ok(obs) => board::compare(board, &obs),
        Err(e) => vec![format!("topology report unreadable: {e}")],
    };
    if let Some(sd) = report.get("sched_domains") {
        problems.extend(check_sched_domains(board, sd));
    }
    problems
}

/// The scheduler must see what the board describes: a cluster (CLS) level for each CPU that
/// shares a cluster when there are several clusters, and asymmetric capacities exactly when
/// the board's capacities differ.
fn check_sched_domains(board: &board::Board, sd: &serde_json::Value) -> Vec<String> {
    let expect = board::expected_topology(board);
    let asym = expect.iter().map(|e| e.capacity).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let clusters = expect.iter().map(|e| e.cluster_id).collect::<std::collections::BTreeSet<_>>().len();
    let mut out = vec![];
    for e in &expect {
        let Some(domains) = sd.get(format!("cpu{}", e.cpu)).and_then(|d| d.as_array()) else {
            out.push(format!("guest: no scheduler domains reported for cpu{}", e.cpu));
            continue;
        };
        let names: Vec<&str> = domains.iter().filter_map(|d| d["name"].as_str()).collect();
        let has_flag =
            |f: &str| domains.iter().any(|d| d["flags"].as_array().is_some_and(|fl| fl.iter().any(|x| x == f)));
        let cluster_size = board::parse_cpulist(&e.cluster_cpus).map(|v| v.len()).unwrap_or(0);
        if clusters > 1 && cluster_size > 1 && !names.contains(&"CLS") {
            out.push(format!(
                "board: cpu{} in a cluster of {cluster_size}, guest sched domains: {names:?} (no CLS)",
                e.cpu
            ));
        }
        if asym != has_flag("SD_ASYM_CPUCAPACITY") {
            out.push(format!(
                "board: cpu{} capacities {}, guest sched domains {} SD_ASYM_CPUCAPACITY",
                e.cpu,
                if asym { "differ" } else { "are equal" },
                if asym { "lack" } else { "have" }
            ));
        }
    }
    out
}

fn pin_vcpus(vcpus: &[(i64, i64)]) {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    for (idx, tid) in vcpus {
        // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
        // sched_setaffinity reads it for the given thread id.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET((*idx as usize) % n, &mut set);
            libc::sched_setaffinity(*tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

#[derive(Serialize)]
struct Manifest<'a> {
    started_utc: String,
    host_cpu: String,
    host_cpus: usize,
    host_loadavg: String,
    qemu: String,
    /// `system` or `lab`, and the lab build's content key.
    qemu_choice: crate::qemubuild::Choice,
    qemu_key: Option<&'a str>,
    plugins: &'a [String],
    kernel_flavor: &'a str,
    kernel_release: String,
    kernel_key: &'a str,
    kernel_config_sha256: String,
    board: &'a str,
    board_file_sha256: String,
    plan: &'a str,
    cmdline: &'a str,
    tcg: Tcg,
    vcpu_threads: &'a [(i64, i64)],
    pinned: bool,
    boot_s: Option<f64>,
    wall_s: f64,
    verdict: &'a Verdict,
    reproducer: String,
}

fn write_manifest(
    dir: &Path,
    p: &Prepared,
    spec: &VmSpec,
    o: &Outcome,
    vcpus: &[(i64, i64)],
    opts: &RunOpts,
) -> Result<()> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let host_cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let m = Manifest {
        started_utc: util::utc_stamp(),
        host_cpu,
        host_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        host_loadavg: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
        qemu: qemu::version_of(&p.qemu).unwrap_or_default(),
        qemu_choice: opts.qemu,
        qemu_key: p.qemu_key.as_deref(),
        plugins: &spec.plugins,
        kernel_flavor: &p.kernel.flavor,
        kernel_release: p.kernel.kernel_release(),
        kernel_key: &p.kernel.key,
        kernel_config_sha256: util::sha256_file(&p.kernel.config()).unwrap_or_default(),
        board: p.board.name(),
        board_file_sha256: util::sha256_hex(p.board.source().as_bytes()),
        plan: &p.plan.name,
        cmdline: &spec.append,
        tcg: opts.tcg,
        vcpu_threads: vcpus,
        pinned: opts.pin,
        boot_s: o.boot_s,
        wall_s: o.wall_s,
        verdict: &o.verdict,
        reproducer: qemu::shell_line(&spec.argv()),
    };
    util::write_atomic(&dir.join("manifest.json"), serde_json::to_string_pretty(&m)?.as_bytes())
}

/// Human summary: topology table, step results, boot time, problems.
pub fn summary(o: &Outcome) -> String {
    let mut s = String::new();
    if let Some(cpus) = o.data("topology").and_then(|d| d.get("cpus")).and_then(|c| c.as_array()) {
        s.push_str("cpu  capacity  cluster  cluster_cpus\n");
        for c in cpus {
            let f = |k: &str| c[k].as_str().map(String::from).unwrap_or_else(|| c[k].to_string());
            s.push_str(&format!(
                "{:>3}  {:>8}  {:>7}  {}\n",
                f("cpu"),
                f("capacity"),
                f("cluster_id"),
                f("cluster_cpus")
            ));
        }
    }
    for (step, case, status, msg) in o.results() {
        s.push_str(&format!(
            "{:<5} {step}/{case}{}\n",
            format!("{status:?}").to_uppercase(),
            msg.map(|m| format!(": {m}")).unwrap_or_default()
        ));
    }
    if let Some(b) = o.boot_s {
        s.push_str(&format!("boot: {b:.2} s to the init's first message\n"));
    }
    s.push_str(&format!("run directory: {}\n", o.dir.display()));
    let problems = o.problems();
    if problems.is_empty() {
        s.push_str("result: OK\n");
    } else {
        s.push_str(&format!("result: FAILED ({} problem(s))\n", problems.len()));
        for p in problems {
            s.push_str(&format!("- {p}\n"));
        }
    }
    s
}

/// Interactive: boots with the console on the terminal and a shell after the plan.
pub fn shell(opts: &RunOpts) -> Result<()> {
    let mut plan = load_plan(&opts.plan)?;
    plan.shell = true;
    let dir = new_run_dir("shell")?;
    let prepared = prepare(opts, plan, &dir)?;
    let spec = vm_spec(&prepared, opts, &dir, Console::Terminal);
    eprintln!("lab: booting {} (Ctrl-A X quits QEMU; `poweroff -f` ends the guest)", prepared.board.name());
    let mut vm = Vm::spawn(&spec)?;
    let st = vm.wait()?;
    if !st.success() {
        bail!("QEMU exited with {st}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_tail_reads_whole_lines_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.jsonl");
        let mut t = ResultTail { path: p.clone(), pos: 0, partial: String::new() };
        assert!(t.poll().is_empty());
        let hello = Event::Hello { kernel: "7.2".into(), uptime_s: 0.5, cmdline: "x".into() }.to_line();
        let (a, b) = hello.split_at(10);
        std::fs::write(&p, a).unwrap();
        assert!(t.poll().is_empty());
        std::fs::write(&p, format!("{a}{b}{}", Event::Done.to_line())).unwrap();
        assert_eq!(t.poll().len(), 2);
    }

    #[test]
    fn console_results_are_events() {
        let done = Event::Done.to_line();
        let mut lines = vec!["[    0.1] boot".to_string(), format!("LABRESULT {done}"), "LABRESULT {bad".into()];
        let mut pos = 0;
        assert_eq!(console_events(&lines, &mut pos).len(), 1);
        assert_eq!(pos, 3);
        lines.push(format!("[tiers] LABRESULT {done}"));
        assert_eq!(console_events(&lines, &mut pos).len(), 1);
        assert!(console_events(&lines, &mut pos).is_empty());
    }

    #[test]
    fn shipped_plans_and_boards_load() {
        for plan in ["default", "panic", "hang"] {
            load_plan(plan).unwrap();
        }
        for b in ["sa8155p", "sm8150-upstream", "symmetric"] {
            load_board(b).unwrap();
        }
        let e = load_plan("nope").unwrap_err().to_string();
        assert!(e.contains("default"), "{e}");
    }

    #[test]
    fn sched_domains_must_match_the_board() {
        let b = load_board("sa8155p").unwrap();
        let dom = |name: &str, flags: &[&str]| serde_json::json!({"name": name, "flags": flags});
        let mut sd = serde_json::Map::new();
        for cpu in 0..8 {
            let mut d = vec![dom("MC", &["SD_ASYM_CPUCAPACITY"])];
            if cpu < 7 {
                d.insert(0, dom("CLS", &["SD_CLUSTER"]));
            }
            sd.insert(format!("cpu{cpu}"), serde_json::Value::Array(d));
        }
        assert!(check_sched_domains(&b, &serde_json::Value::Object(sd.clone())).is_empty());
        sd.insert("cpu0".into(), serde_json::json!([dom("MC", &[])]));
        let p = check_sched_domains(&b, &serde_json::Value::Object(sd));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("cpu0 in a cluster of 4") && p[1].contains("lack SD_ASYM_CPUCAPACITY"));
    }

    #[test]
    fn problems_collect_everything() {
        let o = Outcome {
            dir: "/r".into(),
            verdict: Verdict::Completed,
            events: vec![
                Event::Result {
                    step: "s".into(),
                    case: "c".into(),
                    status: Status::Fail,
                    duration_ms: 0.0,
                    message: Some("bad".into()),
                    data: serde_json::Value::Null,
                },
                Event::StepEnd {
                    step: "s".into(),
                    exit_code: Some(1),
                    signal: None,
                    timed_out: false,
                    duration_ms: 1.0,
                },
            ],
            boot_s: Some(0.8),
            splats: vec![],
            topology_mismatches: vec!["board: cpu4 capacity 871, guest: 1024".into()],
            wall_s: 1.0,
            panic_report_s: None,
            console_tail: String::new(),
        };
        let p = o.problems();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(!o.ok());
        assert!(summary(&o).contains("result: FAILED (3 problem(s))"));
    }
}
