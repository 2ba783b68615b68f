//! `--trace`: unpacks the traces the guest init sent on the trace port into the run
//! directory, turns each step's ring buffers into trace-cmd's trace.dat, and summarises the
//! binder transactions and where the server threads ran.
//!
//! Per step the run directory gets `trace/<step>/trace.txt` (the kernel's ftrace text, which
//! Perfetto's UI and trace_processor open as a systrace file), `trace.dat` (trace-cmd report,
//! KernelShark) when trace-cmd is installed, and `trace/summary.json`.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The chardev file of the trace port in the run directory.
pub const TRACE_STREAM: &str = "trace.cpio";

/// The per-step summaries in a run directory, `trace/summary.json`.
pub const SUMMARY: &str = "trace/summary.json";

/// Perfetto's systrace line pattern (trace_processor's SystraceLineTokenizer): a line it
/// does not match is dropped there, so the lab checks its traces with the same pattern.
const PERFETTO_LINE: &str =
    r"-(\d+)\s+\(?\s*(\d+|-+)?\)?\s?\[(\d+)\]\s*([a-zA-Z.]{3}[0-9a-f.]{1,2}\s*)?(\d+\.\d+):\s+(\S+):";

/// One event line as Perfetto reads it.
#[derive(Debug, PartialEq)]
pub struct Line<'a> {
    pub pid: u32,
    pub cpu: u32,
    pub ts: f64,
    pub event: &'a str,
    pub args: BTreeMap<&'a str, &'a str>,
}

fn line_regex() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(PERFETTO_LINE).expect("valid pattern"))
}

/// Parses an ftrace text line as Perfetto does (`key=value` arguments).
pub fn parse_line(l: &str) -> Option<Line<'_>> {
    let c = line_regex().captures(l)?;
    let rest = &l[c.get(0)?.end()..];
    let args = rest.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
    Some(Line {
        pid: c[1].parse().ok()?,
        cpu: c[3].parse().ok()?,
        ts: c[5].parse().ok()?,
        event: c.get(6)?.as_str(),
        args,
    })
}

/// What a step's trace shows about binder (`trace/summary.json` has one per step).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepSummary {
    /// Event lines, and lines Perfetto's pattern would drop (comments excluded).
    pub events: usize,
    pub unparsed: usize,
    /// Synchronous and oneway calls (binder_transaction reply=0), and replies.
    pub transactions: usize,
    pub replies: usize,
    /// CPU on which the receiving thread picked each call up (binder_transaction_received).
    pub received_on_cpu: BTreeMap<u32, usize>,
    /// "caller CPU->receiving CPU" for each received call.
    pub caller_to_server_cpu: BTreeMap<String, usize>,
    /// Target CPU of the wake-ups (sched_wakeup) of the threads that received calls.
    pub server_wakeup_cpu: BTreeMap<u32, usize>,
    /// Synchronous calls whose receiving thread was woken for them (a sched_wakeup of it
    /// between the call and its receipt): "caller CPU->wake-up target CPU".
    pub woken_server: BTreeMap<String, usize>,
    /// Synchronous calls received by a thread that was not woken for them (it was running).
    pub server_not_woken: usize,
}

/// A call on its way: the caller's CPU, its time, and whether it waits for a reply.
struct Pending {
    cpu: u32,
    ts: f64,
    sync: bool,
}

pub fn summarise(text: &str) -> StepSummary {
    let mut s = StepSummary::default();
    let mut calls: BTreeMap<String, Pending> = BTreeMap::new();
    let mut servers = std::collections::BTreeSet::new();
    let mut wakeups: Vec<(u32, u32)> = vec![];
    // pid -> (target CPU, time) of its latest wake-up.
    let mut last_wakeup: BTreeMap<u32, (u32, f64)> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let Some(e) = parse_line(l) else {
            s.unparsed += 1;
            continue;
        };
        s.events += 1;
        match e.event {
            "binder_transaction" if e.args.get("reply") == Some(&"1") => s.replies += 1,
            "binder_transaction" => {
                s.transactions += 1;
                // TF_ONE_WAY (0x01): nobody waits, so where the server runs is no question
                // of the caller's CPU.
                let flags = e.args.get("flags").and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok());
                if let Some(id) = e.args.get("transaction") {
                    calls.insert(
                        id.to_string(),
                        Pending { cpu: e.cpu, ts: e.ts, sync: flags.is_some_and(|f| f & 1 == 0) },
                    );
                }
            }
            "binder_transaction_received" => {
                let Some(call) = e.args.get("transaction").and_then(|id| calls.remove(*id)) else { continue };
                *s.received_on_cpu.entry(e.cpu).or_default() += 1;
                *s.caller_to_server_cpu.entry(format!("{}->{}", call.cpu, e.cpu)).or_default() += 1;
                servers.insert(e.pid);
                if call.sync {
                    match last_wakeup.remove(&e.pid).filter(|&(_, ts)| ts >= call.ts) {
                        Some((target, _)) => *s.woken_server.entry(format!("{}->{target}", call.cpu)).or_default() += 1,
                        None => s.server_not_woken += 1,
                    }
                }
            }
            "sched_wakeup" => {
                let pid = e.args.get("pid").and_then(|p| p.parse().ok());
                let cpu = e.args.get("target_cpu").and_then(|c| c.parse().ok());
                if let (Some(p), Some(c)) = (pid, cpu) {
                    wakeups.push((p, c));
                    last_wakeup.insert(p, (c, e.ts));
                }
            }
            _ => {}
        }
    }
    for (_, cpu) in wakeups.into_iter().filter(|(p, _)| servers.contains(p)) {
        *s.server_wakeup_cpu.entry(cpu).or_default() += 1;
    }
    s
}

/// Unpacks the trace stream into `<dir>/trace/`, builds trace.dat per step and writes
/// `trace/summary.json`. Returns one line per step for the run summary.
pub fn collect(dir: &Path) -> Result<Vec<String>> {
    let stream = dir.join(TRACE_STREAM);
    let bytes = std::fs::read(&stream).with_context(|| format!("reading {}", stream.display()))?;
    let out = dir.join("trace");
    let steps = unpack(&bytes, &out)?;
    let mut summaries = BTreeMap::new();
    let mut lines = vec![];
    for step in steps {
        let sdir = out.join(&step);
        let text = std::fs::read_to_string(sdir.join("trace.txt")).unwrap_or_default();
        let s = summarise(&text);
        let dat = match trace_dat(&out.join("meta"), &sdir) {
            Ok(p) => p.display().to_string(),
            Err(e) => format!("no trace.dat ({e:#})"),
        };
        lines.push(format!(
            "trace {step}: {} events, {} binder calls received on CPUs {:?}; {}; {dat}",
            s.events,
            s.transactions,
            s.received_on_cpu,
            sdir.join("trace.txt").display()
        ));
        summaries.insert(step, s);
    }
    crate::support::fs::write_atomic(&dir.join(SUMMARY), serde_json::to_string_pretty(&summaries)?.as_bytes())?;
    let _ = std::fs::remove_file(&stream);
    Ok(lines)
}

/// Extracts every archive of the stream; returns the step names in order.
fn unpack(bytes: &[u8], out: &Path) -> Result<Vec<String>> {
    let mut cur = std::io::Cursor::new(bytes);
    let mut steps: Vec<String> = vec![];
    while (cur.position() as usize) < bytes.len() {
        let mut r = cpio::newc::Reader::new(&mut cur).context("reading the trace stream")?;
        if r.entry().is_trailer() {
            continue;
        }
        let name = r.entry().name().to_string();
        let rel = Path::new(&name);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            bail!("trace stream: unsafe path {name:?}");
        }
        let mut data = vec![];
        r.read_to_end(&mut data)?;
        r.finish()?;
        let to = out.join(rel);
        std::fs::create_dir_all(to.parent().unwrap_or(out))?;
        std::fs::write(&to, data)?;
        let top = name.split('/').next().unwrap_or_default().to_string();
        if top != "meta" && !steps.contains(&top) {
            steps.push(top);
        }
    }
    Ok(steps)
}

/// trace-cmd's trace.dat from the guest's event formats and a step's ring buffers.
fn trace_dat(meta: &Path, step: &Path) -> Result<PathBuf> {
    if !crate::support::process::have_tool("trace-cmd") {
        bail!("trace-cmd not installed; `cargo make setup` installs it");
    }
    // trace-cmd reads a tracing directory: the shared formats plus this step's cmdlines.
    let tdir = step.join("tracing-dir");
    std::fs::create_dir_all(&tdir)?;
    copy_tree(meta, &tdir)?;
    std::fs::copy(step.join("saved_cmdlines"), tdir.join("saved_cmdlines"))?;
    let head = step.join("head.dat");
    let dat = step.join("trace.dat");
    let mut c = Command::new("trace-cmd");
    c.arg("restore").arg("-c").arg("-t").arg(&tdir).arg("-k").arg(meta.join("kallsyms")).arg("-o").arg(&head);
    crate::support::process::output(&mut c).context("trace-cmd restore -c")?;
    // One file per CPU, in order: trace-cmd numbers CPUs by position and drops empty files,
    // so a CPU without events gets an empty ring-buffer page (all zero: no commit).
    let cpus: Vec<PathBuf> = (0..).map(|n| step.join(format!("cpu{n}.raw"))).take_while(|p| p.is_file()).collect();
    for c in &cpus {
        if std::fs::metadata(c)?.len() == 0 {
            std::fs::write(c, vec![0u8; 4096])?;
        }
    }
    let mut c = Command::new("trace-cmd");
    c.arg("restore").arg("-i").arg(&head).arg("-o").arg(&dat).args(&cpus);
    crate::support::process::output(&mut c).context("trace-cmd restore -i")?;
    std::fs::remove_file(&head)?;
    std::fs::remove_dir_all(&tdir)?;
    Ok(dat)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for e in std::fs::read_dir(from)?.flatten() {
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            std::fs::create_dir_all(&t)?;
            copy_tree(&e.path(), &t)?;
        } else {
            std::fs::copy(e.path(), &t)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as the 7.2 kernel prints them (Rust binder and sched events).
    const TEXT: &str = "# tracer: nop
#
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
 binder-smoke-120     [002] d..2.    12.000100: sched_waking: comm=binder-smoke pid=121 prio=120 target_cpu=004
 binder-smoke-120     [002] d..2.    12.000101: binder_transaction: transaction=7 dest_node=3 dest_proc=119 dest_thread=121 reply=0 flags=0x10 code=0x1
 binder-smoke-120     [002] d..3.    12.000102: sched_wakeup: comm=binder-smoke pid=121 prio=120 target_cpu=004
 binder-smoke-121     [004] ...1.    12.000200: binder_transaction_received: transaction=7
 binder-smoke-121     [004] ...1.    12.000300: binder_transaction: transaction=8 dest_node=0 dest_proc=120 dest_thread=120 reply=1 flags=0x0 code=0x0
garbage line
";

    #[test]
    fn perfetto_reads_the_kernel_text() {
        let l = parse_line(TEXT.lines().nth(4).unwrap()).unwrap();
        assert_eq!((l.pid, l.cpu, l.event), (120, 2, "binder_transaction"));
        assert_eq!(l.args["dest_thread"], "121");
        assert!((l.ts - 12.000101).abs() < 1e-9);
        // Task names with dashes and a tgid column, as Perfetto's own examples have them.
        let l = parse_line("kworker/u16:1-77    (   77) [004] ....   316.196720: 0: B|77|x|0").unwrap();
        assert_eq!((l.pid, l.cpu, l.event), (77, 4, "0"));
        assert!(parse_line("garbage line").is_none());
    }

    #[test]
    fn summary_finds_calls_and_server_cpus() {
        let s = summarise(TEXT);
        assert_eq!((s.events, s.unparsed, s.transactions, s.replies), (5, 1, 1, 1));
        assert_eq!(s.received_on_cpu, BTreeMap::from([(4, 1)]));
        assert_eq!(s.caller_to_server_cpu, BTreeMap::from([("2->4".to_string(), 1)]));
        assert_eq!(s.server_wakeup_cpu, BTreeMap::from([(4, 1)]));
        assert_eq!((s.woken_server, s.server_not_woken), (BTreeMap::from([("2->4".to_string(), 1)]), 0));
    }

    #[test]
    fn a_server_counts_as_woken_only_for_a_wakeup_after_the_sync_call() {
        let ev = |pid: u32, cpu: u32, ts: &str, what: &str| format!(" t-{pid} [{cpu:03}] ..... {ts}: {what}\n");
        let text = [
            // Woken before the call (for something else), then running when it arrives.
            ev(0, 3, "1.000", "sched_wakeup: comm=s pid=9 prio=120 target_cpu=003"),
            ev(
                5,
                1,
                "1.001",
                "binder_transaction: transaction=1 dest_node=1 dest_proc=8 dest_thread=0 reply=0 flags=0x10 code=0x1",
            ),
            ev(9, 3, "1.002", "binder_transaction_received: transaction=1"),
            // A oneway call (TF_ONE_WAY) with a wake-up: no caller waits, so not counted.
            ev(
                5,
                1,
                "1.003",
                "binder_transaction: transaction=2 dest_node=1 dest_proc=8 dest_thread=0 reply=0 flags=0x11 code=0x1",
            ),
            ev(0, 3, "1.004", "sched_wakeup: comm=s pid=9 prio=120 target_cpu=003"),
            ev(9, 3, "1.005", "binder_transaction_received: transaction=2"),
        ]
        .concat();
        let s = summarise(&text);
        assert_eq!((s.transactions, s.server_not_woken), (2, 1), "{s:?}");
        assert!(s.woken_server.is_empty(), "{s:?}");
    }

    #[test]
    fn unpack_refuses_escaping_paths() {
        let mut a = vec![];
        for (name, data) in [("meta/trace_clock", &b"[local]"[..]), ("s1/trace.txt", b"# tracer: nop\n")] {
            let mut w = cpio::newc::Builder::new(name).mode(0o100644).write(&mut a, data.len() as u32);
            std::io::Write::write_all(&mut w, data).unwrap();
            w.finish().unwrap();
        }
        cpio::newc::trailer(&mut a).unwrap();
        let d = tempfile::tempdir().unwrap();
        assert_eq!(unpack(&a, d.path()).unwrap(), ["s1"]);
        assert_eq!(std::fs::read(d.path().join("s1/trace.txt")).unwrap(), b"# tracer: nop\n");
        let mut bad = vec![];
        cpio::newc::Builder::new("../x").mode(0o100644).write(&mut bad, 0).finish().unwrap();
        cpio::newc::trailer(&mut bad).unwrap();
        assert!(unpack(&bad, d.path()).unwrap_err().to_string().contains("unsafe path"));
    }
}
