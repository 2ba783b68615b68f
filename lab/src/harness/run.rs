//! One guest run: build what is missing, boot QEMU, feed what it does to the run monitor
//! (one reader thread per source: console, results file, QMP, a ticker for timers and
//! Ctrl-C), stop it when the monitor decides, and leave everything in a run directory.

use crate::harness::collect::Collector;
use crate::harness::expect::check_topology;
use crate::harness::manifest::write_manifest;
use crate::harness::monitor::{Finished, Input, Monitor};
use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::Outcome;
use crate::harness::outcome::Verdict;
use crate::harness::prepare::{new_run_dir, prepare, vm_spec, Prepared};
use crate::harness::qemu::{Console, Vm, VmSpec};
use crate::harness::{boot_cache, ktap, splat};
use crate::support::{fs, paths, progress};
use anyhow::{bail, Context, Result};
use labproto::{Event, Plan};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the ticker wakes the monitor (timeouts, QEMU's exit, Ctrl-C).
const TICK: Duration = Duration::from_millis(10);
/// After the stop, how long the readers may take to deliver their last lines.
const DRAIN: Duration = Duration::from_secs(2);
/// With `--trace` the init reads and sends each step's trace after the step (the ftrace text
/// of full ring buffers takes a while under emulation).
const TRACE_GRACE: Duration = Duration::from_secs(300);

/// Without a result port, the run directory still gets `results.jsonl`: the events the
/// harness collected from the console.
fn write_console_results(spec: &VmSpec, events: &[Event]) -> Result<()> {
    let Some(path) = spec.results.as_ref().filter(|_| !spec.has_result_port()) else { return Ok(()) };
    let text: String = events.iter().map(Event::to_line).collect();
    fs::write_atomic(path, text.as_bytes())
}

/// Held while a run prepares its inputs (see [`run_plan`]).
static PREPARE: std::sync::Mutex<()> = std::sync::Mutex::new(());

use crate::support::interrupt::flag as interrupted_flag;
pub use crate::support::interrupt::{interrupted, Interrupted};

/// Complete lines appended to a file, read through one open handle.
struct LineTail {
    file: Option<std::fs::File>,
    path: PathBuf,
    partial: String,
}

impl LineTail {
    fn new(path: &Path) -> LineTail {
        LineTail { file: None, path: path.to_path_buf(), partial: String::new() }
    }

    /// The complete lines written since the last call.
    fn poll(&mut self) -> Vec<String> {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(f) = self.file.as_mut() else { return vec![] };
        let mut buf = String::new();
        let _ = f.read_to_string(&mut buf);
        self.partial.push_str(&buf);
        let mut out = vec![];
        while let Some(i) = self.partial.find('\n') {
            out.push(self.partial.drain(..=i).collect());
        }
        out
    }
}

/// The reader threads: console lines, result lines from the results file (with a result
/// port), QMP events, and a ticker that also reports Ctrl-C. They end when `stop` is set
/// (the results reader after a last read) or their source closes.
fn start_readers(vm: &mut Vm, spec: &VmSpec, stop: &Arc<AtomicBool>, dump: Option<PathBuf>) -> Receiver<Input> {
    let (tx, rx) = mpsc::channel();
    if let Some(console) = vm.console.take() {
        let tx = tx.clone();
        std::thread::spawn(move || console.iter().try_for_each(|l| tx.send(Input::Console(l))));
    }
    if let Some(path) = spec.results.clone().filter(|_| spec.has_result_port()) {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::spawn(move || results_reader(&path, &tx, &stop));
    }
    let qmp_tx = tx.clone();
    vm.watch_qmp(dump, move |e| {
        let _ = qmp_tx.send(Input::Qmp(e));
    });
    let (interrupted, stop) = (interrupted_flag(), stop.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let input = if interrupted.load(Ordering::SeqCst) { Input::Interrupted } else { Input::Tick };
            if tx.send(input).is_err() {
                break;
            }
            std::thread::sleep(TICK);
        }
    });
    rx
}

fn results_reader(path: &Path, tx: &Sender<Input>, stop: &AtomicBool) {
    let mut tail = LineTail::new(path);
    loop {
        let last = stop.load(Ordering::SeqCst);
        for ev in tail.poll().iter().filter_map(|l| Event::parse_line(l)) {
            if tx.send(Input::Result(ev)).is_err() {
                return;
            }
        }
        if last {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Feeds the monitor until it decides, writing and echoing console lines on the way; QEMU's
/// exit is looked at on every tick.
fn follow(vm: &mut Vm, rx: &Receiver<Input>, monitor: &mut Monitor, out: &mut Outputs) -> Result<()> {
    loop {
        let input = rx.recv().context("the run's readers all ended")?;
        let tick = input == Input::Tick;
        if record(monitor, input, out) {
            return Ok(());
        }
        if tick {
            if let Some(st) = vm.exited()? {
                let exited = Input::Exited { success: st.success(), status: st.to_string() };
                if record(monitor, exited, out) {
                    return Ok(());
                }
            }
        }
    }
}

/// Where a run's inputs go besides the monitor.
struct Outputs<'a> {
    /// console.log
    log: std::io::BufWriter<std::fs::File>,
    /// Console lines to the reporter (`-v`).
    echo: bool,
    /// Steps' output lines to stdout (`lab run -- CMD`).
    stream: Option<&'a Plan>,
    /// Collected files into the run directory.
    collector: Collector,
}

/// One input to the monitor (console lines also to the log and, with `echo`, the reporter;
/// collected-file chunks to the collector).
fn record(monitor: &mut Monitor, input: Input, out: &mut Outputs) -> bool {
    if let Input::Console(l) = &input {
        let _ = writeln!(out.log, "{l}");
        if out.echo {
            progress::console(l);
        } else if let Some(plan) = out.stream {
            crate::harness::adhoc::stream_line(plan, l);
        }
    }
    let decided = monitor.step(Instant::now(), input);
    for chunk in monitor.take_chunks() {
        out.collector.take(&chunk);
    }
    decided
}

/// After the stop: what the readers still deliver until they end (or `DRAIN` passes).
fn drain(rx: &Receiver<Input>, monitor: &mut Monitor, out: &mut Outputs) {
    let until = Instant::now() + DRAIN;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(Input::Tick | Input::Interrupted) => {}
            Ok(input) => {
                record(monitor, input, out);
            }
            Err(_) => return,
        }
    }
}

/// A `--board` for a run directory's name: a board file's stem, not its whole path (a deep
/// path made names too long for the run's sockets).
fn board_label(board: &str) -> &str {
    Path::new(board).file_stem().and_then(|s| s.to_str()).unwrap_or(board)
}

/// Boots and follows one run of `plan` (e.g. one generated by `bench`); `opts.plan` is not
/// read. Never leaves QEMU running.
pub fn run_plan(plan: &Plan, opts: &RunOpts) -> Result<Outcome> {
    if interrupted() {
        return Err(Interrupted.into());
    }
    opts.check()?;
    let mut plan = crate::harness::adhoc::apply_opts(plan, opts);
    if opts.trace.is_some() {
        plan.trace = opts.trace.clone();
    }
    let plan = &plan;
    let traced = plan.trace.is_some();
    let name =
        if opts.name.is_empty() { format!("{}-{}", board_label(&opts.board), plan.name) } else { opts.name.clone() };
    let dir = new_run_dir(&paths::path_safe(&name))?;
    let prepared = {
        // Boots on several threads (`-j`) prepare one at a time: the kernel, guest-program and
        // QEMU builds and the DTB cache are shared, and a cached preparation is quick.
        let _one = PREPARE.lock().unwrap_or_else(|e| e.into_inner());
        if interrupted() {
            return Err(Interrupted.into());
        }
        prepare(opts, plan.clone(), &dir)?
    };
    let spec = vm_spec(&prepared, opts, &dir, Console::Pipe)?;

    let t0 = Instant::now();
    // A deterministic boot that ran clean before with the same inputs gives the same results.
    let reuse = match (opts.reuse_boots, boot_cache::ineligible(opts, plan)) {
        // The cache only saves time: a boot whose inputs cannot be read for a key boots.
        (true, None) => boot_cache::inputs(&spec, &dir)
            .inspect_err(|e| progress::note(format!("booting {}: no key for its results: {e:#}", plan.name)))
            .ok(),
        (true, Some(why)) => {
            progress::note(format!("booting {}: its results cannot be reused: {why}", plan.name));
            None
        }
        (false, _) => None,
    };
    let cache = paths::cache();
    let stored = reuse.as_ref().and_then(|i| {
        boot_cache::reuse(&cache, i, &dir)
            .inspect_err(|e| progress::note(format!("booting {}: the stored boot is unreadable: {e:#}", plan.name)))
            .ok()
            .flatten()
    });
    if let Some(r) = stored {
        let run = Finished {
            verdict: Verdict::Completed,
            events: r.events,
            lines: r.lines,
            boot_s: r.boot_s,
            panic_report_s: None,
            qmp_lost: false,
            emulator_fault: None,
        };
        let mut outcome = outcome(dir, &prepared, run, t0);
        outcome.reused = Some(r.key);
        return Ok(outcome);
    }
    let mut vm = Vm::spawn(&spec)?;
    let log = std::io::BufWriter::new(std::fs::File::create(dir.join("console.log"))?);
    let qmp_ok = vm.connect_qmp(Duration::from_secs(10));
    crate::harness::gdb::announce(&dir, &prepared.kernel, &spec, vm.pid)?;
    let vcpus = if qmp_ok.is_ok() { vm.vcpu_threads().unwrap_or_default() } else { vec![] };
    if opts.pin {
        pin_vcpus(&vcpus);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rx = start_readers(&mut vm, &spec, &stop, opts.dump.clone());
    let mut monitor = Monitor::new(&prepared.plan, opts.boot_timeout, t0);
    if traced {
        monitor = monitor.idle_grace(TRACE_GRACE);
    }
    if opts.gdb {
        monitor = monitor.without_timeouts();
    }
    let stream = opts.stream.then_some(&prepared.plan);
    let mut out = Outputs { log, echo: opts.echo, stream, collector: Collector::new(&dir) };
    let followed = follow(&mut vm, &rx, &mut monitor, &mut out);
    stop.store(true, Ordering::SeqCst);
    vm.stop();
    drain(&rx, &mut monitor, &mut out);
    out.log.flush()?;
    followed?;
    let run = monitor.finish().context("the run ended without a verdict")?;
    write_console_results(&spec, &run.events)?;
    let events = run.events.clone();
    let mut outcome = outcome(dir, &prepared, run, t0);
    outcome.collect_errors = out.collector.errors;
    write_manifest(&outcome.dir, &prepared, &spec, &outcome, &vcpus, opts)?;
    // Only a clean boot is kept: a failure or a timeout may be the host's doing.
    if let Some(inputs) = reuse.filter(|_| outcome.ok() && !interrupted()) {
        if let Err(e) = boot_cache::store(&cache, &inputs, &outcome.dir, &events, outcome.boot_s) {
            progress::note(format!("keeping the boot {} for reuse failed: {e:#}", outcome.dir.display()));
        }
    }
    if traced {
        match crate::harness::trace::collect(&outcome.dir) {
            Ok(notes) => notes.into_iter().for_each(progress::note),
            Err(e) => progress::note(format!("--trace: {e:#}")),
        }
    }
    Ok(outcome)
}

/// The outcome of a boot that ran elsewhere (a LAVA job): its console lines, in order,
/// through the same monitor a local boot uses (results from the `LABRESULT` lines), and how
/// the remote run ended. Guest timing is the farm's, so there is no boot time.
pub fn outcome_from_console(
    dir: PathBuf,
    prepared: &Prepared,
    lines: Vec<String>,
    ended_ok: bool,
    status: &str,
) -> Result<Outcome> {
    let t0 = Instant::now();
    let mut monitor = Monitor::new(&prepared.plan, Duration::from_secs(1), t0).without_timeouts();
    for line in lines {
        monitor.step(t0, Input::Console(line));
    }
    monitor.step(t0, Input::Exited { success: ended_ok, status: status.to_string() });
    // Past the exit drain: decide now, on what arrived.
    monitor.step(t0 + Duration::from_secs(3600), Input::Tick);
    let run = monitor.finish().context("the remote run ended without a verdict")?;
    let text: String = run.events.iter().map(Event::to_line).collect();
    fs::write_atomic(&dir.join("results.jsonl"), text.as_bytes())?;
    let mut o = outcome(dir, prepared, run, t0);
    o.boot_s = None;
    Ok(o)
}

/// The outcome of a finished run: its events plus KUnit's, splats, the topology check.
fn outcome(dir: PathBuf, prepared: &Prepared, run: Finished, t0: Instant) -> Outcome {
    let mut events = run.events;
    events.extend(ktap::from_console(&run.lines));
    events.extend(crate::harness::selftest::from_console(&run.lines));
    events.extend(crate::harness::gtest::from_collected(&dir, &prepared.plan));
    events.extend(crate::harness::aosp_output::from_console(&run.lines));
    let topology_mismatches = check_topology(&prepared.board, &events, prepared.dvfs);
    let step_output = crate::harness::outcome::step_output(&run.lines, &events);
    Outcome {
        dir,
        verdict: run.verdict,
        splats: splat::scan(&run.lines),
        topology_mismatches,
        events,
        boot_s: run.boot_s,
        wall_s: t0.elapsed().as_secs_f64(),
        panic_report_s: run.panic_report_s,
        console_tail: splat::tail(&run.lines, 50),
        collect_errors: vec![],
        step_output,
        reused: None,
        emulator_fault: run.emulator_fault,
    }
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

/// Interactive: boots with the console on the terminal and a shell after the plan.
pub fn shell(opts: &RunOpts) -> Result<()> {
    opts.check()?;
    let mut plan = load_plan(&opts.plan)?;
    plan.shell = true;
    let dir = new_run_dir("shell")?;
    let prepared = prepare(opts, plan, &dir)?;
    let spec = vm_spec(&prepared, opts, &dir, Console::Terminal)?;
    progress::note(format!("booting {} (Ctrl-A X quits QEMU; `poweroff -f` ends the guest)", prepared.board.name()));
    let mut vm = Vm::spawn(&spec)?;
    crate::harness::gdb::announce(&dir, &prepared.kernel, &spec, vm.pid)?;
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
    fn a_board_file_is_named_by_its_stem() {
        assert_eq!(board_label("sa8155p"), "sa8155p");
        assert_eq!(board_label("/tmp/.tmpsMQO8E/one-speed.toml"), "one-speed");
        assert_eq!(board_label("board/x.toml"), "x");
    }

    #[test]
    fn line_tail_reads_whole_lines_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.jsonl");
        let mut t = LineTail::new(&p);
        assert!(t.poll().is_empty());
        let hello = Event::Hello { kernel: "7.2".into(), uptime_s: 0.5, cmdline: "x".into() }.to_line();
        let (a, b) = hello.split_at(10);
        std::fs::write(&p, a).unwrap();
        assert!(t.poll().is_empty());
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        write!(f, "{b}{}", Event::Done.to_line()).unwrap();
        let lines = t.poll();
        assert_eq!(lines.len(), 2);
        assert_eq!(Event::parse_line(&lines[1]), Some(Event::Done));
    }
}
