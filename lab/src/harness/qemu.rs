//! QEMU: the command line, built from small per-concern pieces, and a handle on the running
//! process that always cleans up after itself.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const QEMU: &str = "qemu-system-aarch64";

/// How TCG runs the vCPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tcg {
    /// One host thread per vCPU (fastest on a multi-core host).
    Multi,
    /// All vCPUs round-robin on one host thread.
    Single,
    /// Single-threaded with instruction counting: deterministic guest time and, with the
    /// options below, bit-identical repeated runs.
    Icount,
    /// The lab QEMU's heterogeneous icount (`--qemu lab`): each vCPU has its own guest time,
    /// advanced at its cluster's speed from the board's `[timing]`; deterministic like icount.
    Hicount,
}

impl Tcg {
    /// Modes whose runs repeat bit for bit (no host time or entropy reaches the guest).
    pub fn deterministic(self) -> bool {
        matches!(self, Tcg::Icount | Tcg::Hicount)
    }
}

/// Where the guest's serial console goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Console {
    /// Piped to the harness, which logs and scans it.
    Pipe,
    /// The user's terminal (interactive shell); Ctrl-A X quits.
    Terminal,
}

/// Everything needed to start one VM.
#[derive(Clone, Debug)]
pub struct VmSpec {
    /// The QEMU binary: the system's `qemu-system-aarch64` or the lab's build.
    pub binary: PathBuf,
    pub machine: String,
    pub cpu: String,
    pub smp: u32,
    pub memory: String,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub dtb: PathBuf,
    pub append: String,
    pub tcg: Tcg,
    pub icount_shift: u32,
    /// `-seed` under deterministic TCG.
    pub seed: u32,
    pub console: Console,
    /// File that receives the guest's result port.
    pub results: Option<PathBuf>,
    /// QMP unix socket.
    pub qmp: Option<PathBuf>,
    pub pvpanic: bool,
    /// gdbstub on this unix socket; the vCPUs stay halted until gdb continues them.
    pub gdb: Option<PathBuf>,
    /// A guest console (`/dev/hvc0`) on this unix socket, for `gdbserver /dev/hvc0 PROG`
    /// in the guest and gdb on the host (`--gdbserver`).
    pub gdbserver: Option<PathBuf>,
    /// Prepared for `dump-guest-memory`: the guest hands over its VMCOREINFO, and a power-off
    /// pauses QEMU (so the harness can still dump) instead of ending it.
    pub dump: bool,
    /// File that receives the guest's trace port (`--trace`).
    pub trace: Option<PathBuf>,
    /// TCG plugins: each a `-plugin` argument (`path,arg=value,...`).
    pub plugins: Vec<String>,
    /// QEMU trace events to enable and the log file they go to (`-trace`, `-D`).
    pub qemu_trace: Option<(Vec<String>, PathBuf)>,
    /// Per-CPU speeds and quantum for `Tcg::Hicount`.
    pub timing: Option<board::Timing>,
    /// `-device` arguments (JSON) of the board's emulated devices: `--dvfs`'s frequency domains.
    pub devices: Vec<String>,
    /// `--idle`: each vCPU's PSCI idle states and exit latencies (`-icount idle-exit=`).
    pub idle_exit: Option<String>,
    /// Keeps a private socket directory alive while the spec or its VM lives.
    pub sockets: Option<crate::harness::sockets::SocketDir>,
}

impl VmSpec {
    fn machine_args(&self) -> Vec<String> {
        let devices = self.devices.iter().flat_map(|d| ["-device".to_string(), d.clone()]);
        vec![
            "-M".into(),
            self.machine.clone(),
            "-cpu".into(),
            self.cpu.clone(),
            "-smp".into(),
            self.smp.to_string(),
            "-m".into(),
            self.memory.clone(),
        ]
        .into_iter()
        .chain(devices)
        .collect()
    }

    fn accel_args(&self) -> Vec<String> {
        match self.tcg {
            Tcg::Multi => vec!["-accel".into(), "tcg,thread=multi".into()],
            Tcg::Single => vec!["-accel".into(), "tcg,thread=single".into()],
            // sleep=off: guest time does not wait for the host clock; align=off keeps it free-running.
            Tcg::Icount => vec![
                "-accel".into(),
                "tcg,thread=single".into(),
                "-icount".into(),
                format!("shift={},sleep=off,align=off", self.icount_shift),
            ],
            // shift only matters for QEMU's own instruction-count conversions here.
            Tcg::Hicount => {
                let t = self.timing.as_ref().expect("hicount runs carry the board's timing");
                let ps: Vec<String> = t.cpu_ps_per_insn.iter().map(u64::to_string).collect();
                let mut icount =
                    format!("shift=0,sleep=off,align=off,cpu-ps={},quantum={}", ps.join(":"), t.quantum_ns);
                if let Some(idle) = &self.idle_exit {
                    icount.push_str(&format!(",idle-exit={idle}"));
                }
                vec!["-accel".into(), "tcg,thread=single".into(), "-icount".into(), icount]
            }
        }
    }

    fn boot_args(&self) -> Vec<String> {
        vec![
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initrd.display().to_string(),
            "-dtb".into(),
            self.dtb.display().to_string(),
            "-append".into(),
            self.append.clone(),
        ]
    }

    fn console_args(&self) -> Vec<String> {
        let serial = match self.console {
            Console::Pipe => "stdio",
            Console::Terminal => "mon:stdio",
        };
        vec!["-display".into(), "none".into(), "-monitor".into(), "none".into(), "-serial".into(), serial.into()]
    }

    /// Whether the guest gets the virtio-serial result port. Not under icount: virtio-serial
    /// is the one device here whose host side completes guest requests at host-timing
    /// dependent points (runs diverge inside the guest's virtio_console probe, and are
    /// identical without it), so the guest init falls back to `LABRESULT` console lines.
    pub fn has_result_port(&self) -> bool {
        self.results.is_some() && !self.tcg.deterministic()
    }

    /// The virtio-serial ports: results (not under icount, above) and `--trace`'s trace port
    /// (under icount too: a traced run is for looking, not for bit-identical repeats).
    fn serial_port_args(&self) -> Vec<String> {
        let mut ports = vec![];
        if let Some(p) = self.results.as_ref().filter(|_| self.has_result_port()) {
            ports.push(("labres", p, labproto::RESULT_PORT));
        }
        if let Some(p) = &self.trace {
            ports.push(("labtrace", p, labproto::TRACE_PORT));
        }
        if ports.is_empty() && self.gdbserver.is_none() {
            return vec![];
        }
        let mut v = vec!["-device".to_string(), "virtio-serial-device".into()];
        for (id, path, name) in ports {
            v.extend([
                "-chardev".into(),
                format!("file,id={id},path={}", path.display()),
                "-device".into(),
                format!("virtserialport,chardev={id},name={name}"),
            ]);
        }
        if let Some(sock) = &self.gdbserver {
            // A console, not a plain port: gdbserver wants a tty (on a virtserialport its first
            // reply fails), and this is the first virtio console, so the guest's hvc0.
            v.extend([
                "-chardev".into(),
                format!("socket,id=labgdbs,path={},server=on,wait=off", sock.display()),
                "-device".into(),
                "virtconsole,chardev=labgdbs,name=lab.gdbserver".into(),
            ]);
        }
        v
    }

    fn qmp_args(&self) -> Vec<String> {
        let Some(path) = &self.qmp else { return vec![] };
        vec!["-qmp".into(), format!("unix:{},server=on,wait=off", path.display())]
    }

    fn panic_args(&self) -> Vec<String> {
        if !self.pvpanic {
            return vec![];
        }
        // Pause on GUEST_PANICKED so the harness reads the event and the console first.
        vec!["-device".into(), "pvpanic-pci".into(), "-action".into(), "panic=pause".into()]
    }

    fn debug_args(&self) -> Vec<String> {
        let mut v = vec![];
        if let Some(sock) = &self.gdb {
            v.extend(["-gdb".into(), format!("unix:{},server=on,wait=off", sock.display()), "-S".into()]);
        }
        if self.dump {
            v.extend(["-device", "vmcoreinfo", "-action", "shutdown=pause"].map(String::from));
        }
        v
    }

    fn misc_args(&self) -> Vec<String> {
        // -no-reboot: the guest's power-off or reboot ends QEMU.
        let mut v: Vec<String> =
            ["-nodefaults", "-no-user-config", "-nic", "none", "-no-reboot"].map(String::from).to_vec();
        if self.tcg.deterministic() {
            // Repeatable runs. The RTC starts at a fixed date and follows guest time; there is
            // no host entropy device; and -seed makes QEMU's guest-visible randomness a fixed
            // PRNG (without it identical runs still diverge).
            v.extend(["-rtc", "base=2026-01-01T00:00:00,clock=vm", "-seed"].map(String::from));
            v.push(self.seed.to_string());
        } else {
            // The RNG keeps early getrandom() from blocking.
            v.extend(["-device", "virtio-rng-device"].map(String::from));
        }
        v
    }

    fn qemu_trace_args(&self) -> Vec<String> {
        let Some((events, log)) = &self.qemu_trace else { return vec![] };
        let mut v: Vec<String> = events.iter().flat_map(|e| ["-trace".to_string(), format!("enable={e}")]).collect();
        v.extend(["-D".to_string(), log.display().to_string()]);
        v
    }

    pub fn argv(&self) -> Vec<String> {
        let mut v = vec![self.binary.display().to_string()];
        for part in [
            self.machine_args(),
            self.accel_args(),
            self.boot_args(),
            self.console_args(),
            self.serial_port_args(),
            self.qmp_args(),
            self.panic_args(),
            self.debug_args(),
            self.misc_args(),
            self.plugins.iter().flat_map(|p| ["-plugin".to_string(), p.clone()]).collect(),
            self.qemu_trace_args(),
        ] {
            v.extend(part);
        }
        v
    }
}

/// Shell-quotes argv into one line a user can paste.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.chars().all(|c| c.is_ascii_alphanumeric() || "-_=,./:+@%".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The system `qemu-system-aarch64 --version`, first line.
pub fn version() -> Result<String> {
    version_of(Path::new(QEMU))
}

/// `BINARY --version`, first line; asked once per binary and process (the DTB cache key and
/// every manifest need it).
pub fn version_of(binary: &Path) -> Result<String> {
    static VERSIONS: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, v)) = VERSIONS.lock().unwrap().iter().find(|(b, _)| b == binary) {
        return Ok(v.clone());
    }
    let out = crate::support::process::output(Command::new(binary).arg("--version"))
        .with_context(|| format!("{} not found; run `cargo make setup`", binary.display()))?;
    let v = out.lines().next().unwrap_or_default().to_string();
    VERSIONS.lock().unwrap().push((binary.to_path_buf(), v.clone()));
    Ok(v)
}

/// A running QEMU. Dropping it ends the process: every QEMU the lab starts is cleaned up.
pub struct Vm {
    child: Option<Child>,
    pub pid: u32,
    pub started: Instant,
    /// Console lines, when the console is piped.
    pub console: Option<Receiver<String>>,
    qmp_path: Option<PathBuf>,
    qmp: Option<Qmp>,
    watch: Option<QmpWatch>,
    _sockets: Option<crate::harness::sockets::SocketDir>,
}

/// Longest a `--dump` may take before the harness gives up on it.
const DUMP_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a QMP command may take to answer.
const QMP_READ_TIMEOUT: Duration = Duration::from_secs(10);

type Qmp = qapi::Qmp<qapi::Stream<BufReader<std::os::unix::net::UnixStream>, std::os::unix::net::UnixStream>>;

/// What QMP told us.
#[derive(Clone, Debug, PartialEq)]
pub enum VmEvent {
    Panicked,
    Shutdown,
    /// The QMP connection stopped answering.
    Lost,
}

/// The QMP connection, moved to its own thread by [`Vm::watch_qmp`].
struct QmpWatch {
    quit: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
    /// A `--dump` is being written: stopping QEMU waits for it.
    dumping: Arc<AtomicBool>,
}

impl Vm {
    pub fn spawn(spec: &VmSpec) -> Result<Vm> {
        if let Some(s) = &spec.sockets {
            for sock in [&spec.qmp, &spec.gdb, &spec.gdbserver].into_iter().flatten() {
                s.link(sock)?;
            }
        }
        let argv = spec.argv();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).stdin(if spec.console == Console::Terminal { Stdio::inherit() } else { Stdio::null() });
        if spec.console == Console::Pipe {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            // Own process group: a terminal Ctrl-C reaches only the harness, which then
            // shuts QEMU down in order.
            cmd.process_group(0);
        }
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of the
        // parent; it makes the kernel kill QEMU if the harness dies without cleaning up.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("starting {}; run `cargo make setup`", argv[0]))?;
        let started = Instant::now();
        let pid = child.id();
        let console = if spec.console == Console::Pipe {
            let (tx, rx) = mpsc::channel();
            for stream in [
                child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
                child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            ]
            .into_iter()
            .flatten()
            {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stream).split(b'\n') {
                        let Ok(line) = line else { break };
                        let text = String::from_utf8_lossy(&line).trim_end_matches('\r').to_string();
                        if tx.send(text).is_err() {
                            break;
                        }
                    }
                });
            }
            Some(rx)
        } else {
            None
        };
        Ok(Vm {
            child: Some(child),
            pid,
            started,
            console,
            qmp_path: spec.qmp.clone(),
            qmp: None,
            watch: None,
            _sockets: spec.sockets.clone(),
        })
    }

    /// Connects to QMP (retrying while QEMU creates the socket) and does the handshake.
    pub fn connect_qmp(&mut self, timeout: Duration) -> Result<()> {
        let path = self.qmp_path.clone().context("VM has no QMP socket")?;
        let deadline = Instant::now() + timeout;
        loop {
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(s) => {
                    s.set_read_timeout(Some(QMP_READ_TIMEOUT))?;
                    let mut q = qapi::Qmp::new(qapi::Stream::new(BufReader::new(s.try_clone()?), s));
                    q.handshake().context("QMP handshake")?;
                    self.qmp = Some(q);
                    return Ok(());
                }
                Err(e) if Instant::now() < deadline => {
                    if let Some(code) = self.exited()? {
                        bail!("QEMU exited ({code}) before its QMP socket came up: {e}");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => bail!("QMP socket {} did not come up: {e}", path.display()),
            }
        }
    }

    /// vCPU index -> host thread id.
    pub fn vcpu_threads(&mut self) -> Result<Vec<(i64, i64)>> {
        let q = self.qmp.as_mut().context("QMP not connected")?;
        let cpus = q.execute(&qapi::qmp::query_cpus_fast {}).context("query-cpus-fast")?;
        Ok(cpus
            .iter()
            .filter_map(|c| match c {
                qapi::qmp::CpuInfoFast::aarch64(b) => Some((b.cpu_index, b.thread_id)),
                _ => None,
            })
            .collect())
    }

    /// Moves the QMP connection to a thread that reads the events QEMU pushes and hands each
    /// to `on_event` (ending with [`VmEvent::Lost`] when the connection closes or fails).
    /// [`Vm::stop`] still asks QEMU to quit through it.
    ///
    /// The thread sends no command of its own while the guest runs: events arrive unasked,
    /// and a poll command is handled in QEMU's main loop, where it raced QEMU's exit after
    /// the guest's power-off (docs/src/results/harness-faults.md).
    ///
    /// With `dump`, a panic or a power-off (QEMU paused by `-action panic=pause` and
    /// `shutdown=pause`) first writes the guest's memory there, over this same connection;
    /// after a power-off QEMU is then told to quit.
    pub fn watch_qmp(&mut self, dump: Option<PathBuf>, mut on_event: impl FnMut(VmEvent) + Send + 'static) {
        let Some(mut q) = self.qmp.take() else { return };
        let mut dumped = false;
        let dumping = Arc::new(AtomicBool::new(false));
        let dumping_w = dumping.clone();
        let (quit, quit_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut events = EventReader::default();
            loop {
                match quit_rx.try_recv() {
                    Ok(()) | Err(mpsc::TryRecvError::Disconnected) => {
                        let _ = q.write_command(&qapi::qmp::quit {});
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => {}
                }
                let got = match events.read(&mut q, EVENT_WAIT) {
                    Ok(got) => got,
                    Err(_) => {
                        on_event(VmEvent::Lost);
                        return;
                    }
                };
                for e in got {
                    if let Some(path) = dump.as_ref().filter(|_| !dumped) {
                        dumped = true;
                        dumping_w.store(true, Ordering::SeqCst);
                        let res = dump_guest_memory(&mut q, path, DUMP_TIMEOUT);
                        dumping_w.store(false, Ordering::SeqCst);
                        match res {
                            Ok(()) => crate::support::progress::note(format!("guest memory dump: {}", path.display())),
                            Err(e) => crate::support::progress::note(format!(
                                "guest memory dump {} failed: {e:#}",
                                path.display()
                            )),
                        }
                        if e == VmEvent::Shutdown {
                            let _ = q.write_command(&qapi::qmp::quit {});
                        }
                    }
                    on_event(e);
                }
            }
        });
        self.watch = Some(QmpWatch { quit, thread, dumping });
    }

    /// Exit status, if QEMU has exited.
    pub fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => Ok(None),
        }
    }

    /// Waits for QEMU to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.exited() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Asks QEMU to quit over QMP, then kills it if it hasn't within a second.
    pub fn stop(&mut self) {
        if let Some(w) = self.watch.take() {
            // A memory dump in progress (--dump after a panic) finishes first.
            let t0 = Instant::now();
            while w.dumping.load(Ordering::SeqCst) && t0.elapsed() < DUMP_TIMEOUT {
                std::thread::sleep(Duration::from_millis(20));
            }
            // Not joined: a hung QMP must not hold up the kill below.
            let _ = w.quit.send(());
            drop(w.thread);
        } else if let Some(q) = self.qmp.as_mut() {
            let _ = q.write_command(&qapi::qmp::quit {});
        }
        if self.wait_exit(Duration::from_secs(1)).is_none() {
            self.kill();
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for an interactive QEMU (terminal console).
    pub fn wait(&mut self) -> Result<std::process::ExitStatus> {
        let st = self.child.as_mut().context("QEMU already reaped")?.wait()?;
        self.child = None;
        Ok(st)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.exited() {
            self.child = None;
        }
        if self.child.is_some() {
            self.stop();
        }
    }
}

/// Writes guest memory as an ELF core (with the guest's VMCOREINFO note, for crash and drgn),
/// detached, and polls until it is done, so a large guest does not trip the QMP read timeout.
fn dump_guest_memory(q: &mut Qmp, path: &std::path::Path, timeout: Duration) -> Result<()> {
    let abs = std::path::absolute(path)?;
    q.execute(&qapi::qmp::dump_guest_memory {
        paging: false,
        protocol: format!("file:{}", abs.display()),
        detach: Some(true),
        begin: None,
        length: None,
        format: Some(qapi::qmp::DumpGuestMemoryFormat::elf),
    })
    .context("dump-guest-memory")?;
    let deadline = Instant::now() + timeout;
    loop {
        let st = q.execute(&qapi::qmp::query_dump {}).context("query-dump")?;
        match st.status {
            qapi::qmp::DumpStatus::completed => return Ok(()),
            qapi::qmp::DumpStatus::failed => bail!("QEMU failed to write the memory dump {}", abs.display()),
            _ if Instant::now() > deadline => bail!("memory dump not done after {timeout:?}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// How long the QMP thread waits for an event before it looks for a stop request.
const EVENT_WAIT: Duration = Duration::from_millis(100);

/// QMP's messages read as they arrive, one JSON object a line, keeping a line that a read
/// timeout cut in two.
#[derive(Default)]
struct EventReader {
    partial: String,
}

impl EventReader {
    /// The events that arrived within `wait` (none on a timeout). An error when the
    /// connection closed (QEMU exited) or failed.
    fn read(&mut self, q: &mut Qmp, wait: Duration) -> std::io::Result<Vec<VmEvent>> {
        let stream = q.inner_mut();
        stream.get_mut_read().get_ref().set_read_timeout(Some(wait))?;
        let res = stream.read_line(&mut self.partial);
        // Commands (the dump, the quit) read their responses with the usual patience.
        stream.get_mut_read().get_ref().set_read_timeout(Some(QMP_READ_TIMEOUT))?;
        match res {
            Ok(0) => Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => Ok(Self::parse(&std::mem::take(&mut self.partial)).into_iter().collect()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Ok(vec![]),
            Err(e) => Err(e),
        }
    }

    /// The event one QMP line announces, if it is one the monitor cares about.
    fn parse(line: &str) -> Option<VmEvent> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        match v.get("event")?.as_str()? {
            "GUEST_PANICKED" => Some(VmEvent::Panicked),
            "SHUTDOWN" => Some(VmEvent::Shutdown),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VmSpec {
        VmSpec {
            binary: QEMU.into(),
            machine: "virt,gic-version=3".into(),
            cpu: "cortex-a76".into(),
            smp: 8,
            memory: "2G".into(),
            kernel: "/k/Image".into(),
            initrd: "/r/initramfs.cpio".into(),
            dtb: "/r/board.dtb".into(),
            append: "console=ttyAMA0 quiet".into(),
            tcg: Tcg::Multi,
            icount_shift: 0,
            seed: 1,
            console: Console::Pipe,
            results: Some("/r/results.jsonl".into()),
            qmp: Some("/r/qmp.sock".into()),
            pvpanic: true,
            gdb: None,
            gdbserver: None,
            dump: false,
            trace: None,
            plugins: vec![],
            qemu_trace: None,
            timing: None,
            devices: vec![],
            idle_exit: None,
            sockets: None,
        }
    }

    /// Events arrive unasked; a line cut by the read timeout is completed by the next read;
    /// a closed connection ends the reader.
    #[test]
    fn qmp_events_are_read_without_sending_commands() {
        use std::io::{Read, Write};
        let (ours, mut qemu) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut q: Qmp = qapi::Qmp::new(qapi::Stream::new(BufReader::new(ours.try_clone().unwrap()), ours));
        let mut r = EventReader::default();
        let wait = Duration::from_millis(20);
        assert_eq!(r.read(&mut q, wait).unwrap(), vec![]);
        qemu.write_all(br#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "SHUT"#).unwrap();
        assert_eq!(r.read(&mut q, wait).unwrap(), vec![]);
        qemu.write_all(b"DOWN\", \"data\": {\"guest\": true, \"reason\": \"guest-shutdown\"}}\r\n").unwrap();
        assert_eq!(r.read(&mut q, wait).unwrap(), vec![VmEvent::Shutdown]);
        qemu.write_all(b"{\"event\": \"RESUME\"}\r\n{\"event\": \"GUEST_PANICKED\"}\r\n").unwrap();
        assert_eq!(r.read(&mut q, wait).unwrap(), vec![]);
        assert_eq!(r.read(&mut q, wait).unwrap(), vec![VmEvent::Panicked]);
        // Nothing was sent to QEMU.
        qemu.set_read_timeout(Some(wait)).unwrap();
        assert!(qemu.read(&mut [0u8; 64]).is_err());
        drop(qemu);
        assert!(r.read(&mut q, wait).is_err());
    }

    fn has_pair(argv: &[String], a: &str, b: &str) -> bool {
        argv.windows(2).any(|w| w[0] == a && w[1] == b)
    }

    #[test]
    fn argv_has_every_concern() {
        let a = spec().argv();
        assert_eq!(a[0], QEMU);
        assert!(has_pair(&a, "-M", "virt,gic-version=3"));
        assert!(has_pair(&a, "-smp", "8"));
        assert!(has_pair(&a, "-accel", "tcg,thread=multi"));
        assert!(has_pair(&a, "-dtb", "/r/board.dtb"));
        assert!(has_pair(&a, "-append", "console=ttyAMA0 quiet"));
        assert!(has_pair(&a, "-serial", "stdio"));
        assert!(has_pair(&a, "-chardev", "file,id=labres,path=/r/results.jsonl"));
        assert!(has_pair(&a, "-device", "virtserialport,chardev=labres,name=lab.results"));
        assert!(has_pair(&a, "-qmp", "unix:/r/qmp.sock,server=on,wait=off"));
        assert!(has_pair(&a, "-device", "pvpanic-pci"));
        assert!(a.contains(&"-no-reboot".to_string()));
        assert!(!a.contains(&"-plugin".to_string()));
        let mut s = spec();
        s.binary = "/c/qemu-x/qemu-system-aarch64".into();
        s.qemu_trace = Some((vec!["icount_hetero_*".into()], "/r/qemu-trace.log".into()));
        let t = s.argv();
        assert!(has_pair(&t, "-trace", "enable=icount_hetero_*") && has_pair(&t, "-D", "/r/qemu-trace.log"));
        s.qemu_trace = None;
        s.plugins = vec!["/p/libinsns.so,out=/r/insns.json".into()];
        let a = s.argv();
        assert_eq!(a[0], "/c/qemu-x/qemu-system-aarch64");
        assert!(has_pair(&a, "-plugin", "/p/libinsns.so,out=/r/insns.json"));
    }

    #[test]
    fn tcg_modes() {
        let mut s = spec();
        s.tcg = Tcg::Icount;
        s.icount_shift = 3;
        let a = s.argv();
        assert!(has_pair(&a, "-accel", "tcg,thread=single"));
        assert!(has_pair(&a, "-icount", "shift=3,sleep=off,align=off"));
        assert!(has_pair(&a, "-rtc", "base=2026-01-01T00:00:00,clock=vm"));
        assert!(has_pair(&a, "-seed", "1"));
        assert!(!a.contains(&"virtio-rng-device".to_string()));
        // No virtio-serial result port: results come on the console.
        assert!(!s.has_result_port());
        assert!(!a.iter().any(|x| x.contains("labres") || x == "virtio-serial-device"));
        s.tcg = Tcg::Single;
        let a = s.argv();
        assert!(!a.contains(&"-icount".to_string()) && !a.contains(&"-seed".to_string()));
        assert!(s.has_result_port() && a.contains(&"virtio-serial-device".to_string()));
    }

    #[test]
    fn hicount_passes_the_board_timing() {
        let mut s = spec();
        s.tcg = Tcg::Hicount;
        s.timing = Some(board::Timing { cpu_ps_per_insn: vec![1175, 1175, 413, 352], quantum_ns: 5000 });
        let a = s.argv();
        assert!(has_pair(&a, "-icount", "shift=0,sleep=off,align=off,cpu-ps=1175:1175:413:352,quantum=5000"));
        assert!(has_pair(&a, "-seed", "1") && !s.has_result_port());
        // Another boot of the model (`reproduce --model --boots N`) is another seed.
        s.seed = 3;
        assert!(has_pair(&s.argv(), "-seed", "3"));
        // --idle: each vCPU's PSCI states and exit latencies go to the same -icount.
        s.idle_exit = Some("0x4@909000:0x4@909000:0x4@1461000:0x4@1461000".into());
        assert!(has_pair(
            &s.argv(),
            "-icount",
            "shift=0,sleep=off,align=off,cpu-ps=1175:1175:413:352,quantum=5000,\
             idle-exit=0x4@909000:0x4@909000:0x4@1461000:0x4@1461000"
        ));
    }

    #[test]
    fn devices_follow_the_machine() {
        let mut s = spec();
        assert!(!s.argv().iter().any(|a| a == "-device") || !s.argv().iter().any(|a| a.contains("qcom")));
        s.devices = vec![r#"{"driver":"qcom-cpufreq-hw","addr":1}"#.into()];
        assert!(has_pair(&s.argv(), "-device", r#"{"driver":"qcom-cpufreq-hw","addr":1}"#));
    }

    #[test]
    fn optional_parts_vanish() {
        let mut s = spec();
        s.results = None;
        s.qmp = None;
        s.pvpanic = false;
        s.console = Console::Terminal;
        let a = s.argv();
        assert!(!a.iter().any(|x| x.contains("labres") || x == "-qmp" || x == "pvpanic-pci"));
        assert!(has_pair(&a, "-serial", "mon:stdio"));
    }

    #[test]
    fn debugging_parts() {
        let mut s = spec();
        let a = s.argv();
        assert!(!a.iter().any(|x| x == "-gdb" || x == "-S" || x == "vmcoreinfo"));
        s.gdb = Some("/r/gdb.sock".into());
        s.dump = true;
        let a = s.argv();
        assert!(has_pair(&a, "-gdb", "unix:/r/gdb.sock,server=on,wait=off"));
        assert!(a.contains(&"-S".to_string()));
        assert!(has_pair(&a, "-device", "vmcoreinfo"));
        assert!(has_pair(&a, "-action", "shutdown=pause"));
    }

    #[test]
    fn gdbserver_console_is_hvc0_even_without_other_ports() {
        let mut s = spec();
        s.tcg = Tcg::Icount;
        s.gdbserver = Some("/r/hvc0.sck".into());
        let a = s.argv();
        assert_eq!(a.iter().filter(|x| *x == "virtio-serial-device").count(), 1);
        assert!(has_pair(&a, "-chardev", "socket,id=labgdbs,path=/r/hvc0.sck,server=on,wait=off"));
        assert!(has_pair(&a, "-device", "virtconsole,chardev=labgdbs,name=lab.gdbserver"));
    }

    #[test]
    fn trace_port_also_under_icount() {
        let mut s = spec();
        s.tcg = Tcg::Icount;
        s.trace = Some("/r/trace.cpio".into());
        let a = s.argv();
        assert!(has_pair(&a, "-device", "virtio-serial-device"));
        assert!(has_pair(&a, "-chardev", "file,id=labtrace,path=/r/trace.cpio"));
        assert!(has_pair(&a, "-device", "virtserialport,chardev=labtrace,name=lab.trace"));
        assert!(!a.iter().any(|x| x.contains("labres")));
        s.tcg = Tcg::Single;
        assert_eq!(s.argv().iter().filter(|x| *x == "virtio-serial-device").count(), 1);
    }

    #[test]
    fn shell_line_quotes() {
        let l = shell_line(&["qemu".into(), "-append".into(), "console=ttyAMA0 lab.x='y'".into()]);
        assert_eq!(l, r"qemu -append 'console=ttyAMA0 lab.x='\''y'\'''");
    }
}
