//! Wire format between the host harness and the guest init.
//!
//! The host writes a [`Plan`] into the initramfs at [`PLAN_PATH`]. The guest init runs
//! its steps and streams [`Event`]s as JSON lines over the virtio-serial port named
//! [`RESULT_PORT`]; the console stays free for human-readable logs.
//!
//! A step program reports its own results by printing [`Event::Result`] objects, one per
//! line, on stdout. The init forwards them (filling in the step name); other lines go to
//! the console.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod cases;
pub use cases::{conformance_case, CaseInfo, CONFORMANCE_CASES};

/// Where the plan lives inside the initramfs.
pub const PLAN_PATH: &str = "/etc/lab/plan.json";
/// Name of the virtio-serial port that carries results (`/sys/class/virtio-ports/*/name`).
pub const RESULT_PORT: &str = "lab.results";
/// Console prefix of result lines when the guest has no result port (the init's fallback;
/// the only channel under `--tcg icount`). The harness collects them into results.jsonl.
pub const CONSOLE_RESULT_PREFIX: &str = "LABRESULT ";
/// The Rust binder's CTABS mode switch (rust-driver patch 0002) and its pick counters.
pub const CTABS_MODE_FILE: &str = "/sys/kernel/debug/rust_binder/ctabs";
pub const CTABS_STATS_FILE: &str = "/sys/kernel/debug/rust_binder/ctabs_stats";
/// The same switch and counters in the C driver with seed 000's own patches (c-ctabs/).
pub const C_CTABS_MODE_FILE: &str = "/sys/kernel/debug/binder/ctabs";
pub const C_CTABS_STATS_FILE: &str = "/sys/kernel/debug/binder/ctabs_stats";
/// The Rust binder's switch for deferring BR_TRANSACTION_COMPLETE (rust-driver patch 0005).
pub const DEFER_TC_FILE: &str = "/sys/kernel/debug/rust_binder/defer_tc";
/// The Rust binder's switch for Android's priority inheritance (rust-driver patch 0011).
pub const PRIO_INHERIT_FILE: &str = "/sys/kernel/debug/rust_binder/priority_inheritance";

/// The prefix the init puts before each console line a step prints (`[step] `).
pub fn step_console_prefix(step: &str) -> String {
    format!("[{step}] ")
}

/// Kernel command-line key that overrides the plan path (`lab.plan=/path`).
pub const CMDLINE_PLAN_KEY: &str = "lab.plan";

/// An ordered list of programs to run in the guest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    pub steps: Vec<Step>,
    /// Drop to an interactive shell (`/bin/sh` on the console) after the steps.
    #[serde(default)]
    pub shell: bool,
    /// Record these trace events around every step and send them on [`TRACE_PORT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSpec>,
    /// Runs of the whole step list in this boot (0 and 1: once). When it is more than one,
    /// every run's steps are reported as `NAME@N` (see [`iteration_step`]).
    #[serde(default, skip_serializing_if = "is_default")]
    pub repeat: u32,
    /// Stop repeating after the first run in which a step failed (non-zero exit, signal,
    /// timeout or a failed result).
    #[serde(default, skip_serializing_if = "is_default")]
    pub until_fail: bool,
    /// Debian arm64 packages the steps need (`debs = ["strace"]`): the host unpacks them and
    /// their dependencies into the initramfs, as with `--deb`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub debs: Vec<String>,
    /// crates.io crates whose executables the steps run (`crates = ["rsbinder-tools@0.12.0"]`,
    /// exact versions): the host builds them static for the guest, into /bin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crates: Vec<String>,
    /// Android 14's binder userspace (`aosp = true`): the host builds libbinder,
    /// servicemanager and AOSP's binder tests from Debian's source (`aosp/`) and adds them,
    /// with their Debian libraries, as /usr/bin/NAME.
    #[serde(default, skip_serializing_if = "is_default")]
    pub aosp: bool,
    /// Files the init writes, in order, before the first step: the board's scheduler policy
    /// (`--policy`). Empty (mainline's policy) leaves the plan's JSON as it was without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<Setting>,
}

/// One boot-time write of a file (`echo VALUE > PATH`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub path: String,
    pub value: String,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The name a step is reported under in run `n` (1-based) of a repeated plan: the plain name
/// when the plan runs once, `NAME@N` otherwise, so every run's results stay apart.
pub fn iteration_step(name: &str, n: u32, of: u32) -> String {
    if of <= 1 {
        name.to_string()
    } else {
        format!("{name}@{n}")
    }
}

/// The plan's step name behind a reported one (`conformance@3` -> `conformance`).
pub fn plan_step(reported: &str) -> &str {
    match reported.rsplit_once('@') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => reported,
    }
}

/// Name of the virtio-serial port that carries traces: one newc cpio archive per step, holding
/// `<step>/trace.txt` (the ftrace text), `<step>/cpuN.raw` (the ring buffer pages) and, with
/// the first step, `meta/` (event formats, cmdlines, kallsyms) for trace-cmd.
pub const TRACE_PORT: &str = "lab.trace";

/// tracefs events to record around each step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// `system:event` or `system:*` as tracefs' set_event takes them. `binder:` means the
    /// binder driver's events whichever driver runs: the C driver's `binder` system or the Rust
    /// driver's `rust_binder`.
    pub events: Vec<String>,
    /// Ring buffer per CPU, KiB.
    #[serde(default = "default_trace_buffer_kb")]
    pub buffer_kb: u32,
}

fn default_trace_buffer_kb() -> u32 {
    4096
}

impl TraceSpec {
    /// From `--trace binder:*,sched:sched_switch`; names the bad entry and the fix.
    pub fn parse(list: &str) -> Result<TraceSpec, String> {
        let mut events = vec![];
        for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let ok = e.split_once(':').is_some_and(|(sys, ev)| {
                let name = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                name(sys) && (ev == "*" || name(ev))
            });
            if !ok {
                return Err(format!(
                    "trace event {e:?}: expected system:event or system:*, e.g. binder:*,sched:sched_switch"
                ));
            }
            events.push(e.to_string());
        }
        if events.is_empty() {
            return Err("--trace needs at least one event, e.g. binder:*,sched:sched_switch".into());
        }
        Ok(TraceSpec { events, buffer_kb: default_trace_buffer_kb() })
    }
}

/// One program run by the init, with a timeout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    /// argv[0] is an absolute path inside the guest, or a name looked up in /bin.
    pub argv: Vec<String>,
    pub timeout_s: u64,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Guest paths (files or directories) sent to the host when the step ends, as
    /// [`Event::FileChunk`]s and one [`Event::FileEnd`] per file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collect: Vec<String>,
    /// A long-running service rather than a program that runs to its end: the init starts it,
    /// waits for [`Step::ready`] (at most `timeout_s`), reports that as the case `ready` and
    /// goes on with the next step while it runs. At the end of the step list it is stopped
    /// (SIGTERM to its process group, SIGKILL after [`SERVICE_STOP_GRACE_S`]) and reported as
    /// the case `stopped`, which fails if it ended on its own with an error before that.
    #[serde(default, skip_serializing_if = "is_default")]
    pub service: bool,
    /// When a service counts as started (without it: as soon as it is running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Ready>,
}

/// Seconds a service gets between SIGTERM and SIGKILL when the plan ends.
pub const SERVICE_STOP_GRACE_S: u64 = 5;

/// A service's readiness condition (`ready = { path = "/tmp/sock" }` in a plan).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ready {
    /// This guest path exists.
    Path(String),
    /// The service printed a line (stdout or stderr) that contains this text.
    Line(String),
    /// The context manager knows this name: Android's `IServiceManager.getService(name)`
    /// returns a binder (rsbinder's `rsb_hub`, Android's servicemanager).
    Binder(String),
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ready::Path(p) => write!(f, "{p} exists"),
            Ready::Line(l) => write!(f, "a line containing {l:?} was printed"),
            Ready::Binder(n) => write!(f, "binder service {n:?} is registered"),
        }
    }
}

impl Plan {
    /// What the guest cannot run as written, in words that name the step and the fix.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.steps {
            if !seen.insert(s.name.as_str()) {
                return Err(format!("two steps are named {:?}: step names must be unique", s.name));
            }
            if s.ready.is_some() && !s.service {
                return Err(format!(
                    "step {:?} has `ready` but is not a service: add `service = true`, or drop `ready`",
                    s.name
                ));
            }
            if s.service && !s.collect.is_empty() {
                return Err(format!(
                    "service {:?} has `collect`: a service runs past its step; collect in a later step",
                    s.name
                ));
            }
            if s.argv.is_empty() {
                return Err(format!("step {:?} has an empty argv", s.name));
            }
        }
        Ok(())
    }
}

/// How a process ended, in plain words: "exited with status 1", "killed by SIGSEGV",
/// "timed out after 30.0 s and was killed".
pub fn describe_end(exit_code: Option<i32>, signal: Option<i32>, timed_out: bool, duration_ms: f64) -> String {
    if timed_out {
        return format!("timed out after {:.1} s and was killed", duration_ms / 1000.0);
    }
    match (exit_code, signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by {}", signal_name(s)),
        (None, None) => "ended in an unknown way (not reaped)".into(),
    }
}

/// `SIGSEGV` for 11 (the Linux numbers, which aarch64 and x86-64 share); `signal 40` for
/// numbers without a name.
pub fn signal_name(sig: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(sig - 1).ok().and_then(|i| NAMES.get(i)).map_or_else(|| format!("signal {sig}"), |n| n.to_string())
}

/// Outcome of a single test case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// One JSON line on the result port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// First message of the init: the guest is up. `uptime_s` is from /proc/uptime.
    Hello {
        kernel: String,
        uptime_s: f64,
        cmdline: String,
    },
    StepStart {
        step: String,
    },
    /// A test case result. Steps print these on stdout with `step` empty.
    Result {
        #[serde(default)]
        step: String,
        case: String,
        status: Status,
        #[serde(default)]
        duration_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        data: serde_json::Value,
    },
    StepEnd {
        step: String,
        exit_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        duration_ms: f64,
    },
    /// Part of a collected file: `data` is base64 of the bytes at `offset`. Chunks of one
    /// file come in order, before its [`Event::FileEnd`].
    FileChunk {
        step: String,
        path: String,
        offset: u64,
        data: String,
    },
    /// A collected file is complete (`size` bytes were sent), or could not be read
    /// (`error`). `path` is the guest path of the file.
    FileEnd {
        step: String,
        path: String,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The init itself failed; it powers off right after sending this.
    InitError {
        message: String,
    },
    /// All steps ran; the init powers off next.
    Done,
}

impl Event {
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("events always serialize");
        s.push('\n');
        s
    }

    /// Parses one line; `None` for anything that is not an event (plain log output).
    pub fn parse_line(line: &str) -> Option<Event> {
        let t = line.trim();
        if !t.starts_with('{') {
            return None;
        }
        serde_json::from_str(t).ok()
    }
}

/// Bytes of a collected file per [`Event::FileChunk`] (64 KiB of base64 per line).
pub const FILE_CHUNK_BYTES: usize = 48 << 10;

/// The `data` of a [`Event::FileChunk`].
pub fn encode_chunk(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of a [`Event::FileChunk`]'s `data`.
pub fn decode_chunk(data: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("bad base64 in a file chunk: {e}"))
}

/// Helper for step programs: print one result on stdout for the init to forward.
pub fn report(case: &str, status: Status, duration_ms: f64, message: Option<String>, data: serde_json::Value) {
    let ev = Event::Result { step: String::new(), case: case.into(), status, duration_ms, message, data };
    print!("{}", ev.to_line());
}

/// Kernel log lines that start a splat: (needle, kind). Shared by the host's console scanner
/// and the guest's kmsg scanner so both judge a log the same way.
pub const SPLAT_PATTERNS: &[(&str, &str)] = &[
    ("Kernel panic - not syncing", "panic"),
    ("BUG: KASAN:", "kasan"),
    ("WARNING: possible circular locking dependency", "lockdep"),
    ("WARNING: possible recursive locking", "lockdep"),
    ("WARNING: inconsistent lock state", "lockdep"),
    ("WARNING: suspicious RCU usage", "lockdep"),
    ("WARNING: bad unlock balance", "lockdep"),
    ("WARNING: lock held when returning to user space", "lockdep"),
    // PROVE_LOCKING's other reports (the debug flavors set it): a lock taken in a context it
    // may not sleep or spin in (PROVE_RAW_LOCK_NESTING), irq-safety inversions, a freed lock.
    ("BUG: Invalid wait context", "lockdep"),
    ("WARNING: possible irq lock inversion dependency detected", "lockdep"),
    ("-unsafe lock order detected", "lockdep"),
    ("WARNING: held lock freed!", "lockdep"),
    ("still has locks held!", "lockdep"),
    ("BUG: sleeping function called from invalid context", "atomic-sleep"),
    ("BUG: scheduling while atomic", "atomic-sleep"),
    ("BUG: soft lockup", "soft-lockup"),
    ("rcu: INFO: rcu_preempt detected stalls", "rcu-stall"),
    ("BUG:", "bug"),
    ("WARNING:", "warning"),
    ("Internal error: Oops", "oops"),
    ("Oops", "oops"),
    ("panicked at", "rust-panic"),
    ("UBSAN:", "ubsan"),
    ("kernel BUG at", "bug"),
    // pr_warn_once() from __queue_work(): a caller still uses system_wq or system_unbound_wq.
    ("enqueued on deprecated workqueue", "deprecated-workqueue"),
];

/// The kind of splat a kernel log message (without its timestamp) starts, if any.
pub fn splat_kind(msg: &str) -> Option<&'static str> {
    // The trailer of a report repeats its first line.
    if msg.starts_with("---[ end") {
        return None;
    }
    // "INFO: task x:1 blocked for more than 30 seconds." is the hung-task report; other
    // INFO: lines are not splats.
    if msg.starts_with("INFO: task ") {
        return msg.contains("blocked for more than").then_some("hung-task");
    }
    SPLAT_PATTERNS.iter().find(|(needle, _)| msg.contains(needle)).map(|(_, k)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lists() {
        let t = TraceSpec::parse("binder:*, sched:sched_switch,").unwrap();
        assert_eq!(t.events, ["binder:*", "sched:sched_switch"]);
        for bad in ["sched", "sched:", ":x", "sched:sched switch", "a:b*", ""] {
            let e = TraceSpec::parse(bad).unwrap_err();
            assert!(e.contains("e.g. binder:*"), "{bad}: {e}");
        }
        // Plans without a trace stay as they were on the wire.
        let p = Plan { name: "p".into(), ..Default::default() };
        assert!(!serde_json::to_string(&p).unwrap().contains("trace"));
    }

    #[test]
    fn result_round_trip_and_plain_lines() {
        let ev = Event::Result {
            step: "smoke".into(),
            case: "version".into(),
            status: Status::Pass,
            duration_ms: 1.5,
            message: None,
            data: serde_json::json!({"version": 8}),
        };
        let line = ev.to_line();
        assert!(line.contains(r#""type":"result""#));
        assert_eq!(Event::parse_line(&line), Some(ev));
        assert_eq!(Event::parse_line("[    0.1] hello"), None);
        assert_eq!(Event::parse_line("{not json"), None);
    }

    #[test]
    fn splat_kinds() {
        assert_eq!(splat_kind("BUG: KASAN: slab-use-after-free in f"), Some("kasan"));
        assert_eq!(splat_kind("INFO: task a:1 blocked for more than 30 seconds."), Some("hung-task"));
        assert_eq!(splat_kind("INFO: lockdep is turned off."), None);
        assert_eq!(splat_kind("---[ end Kernel panic - not syncing: x ]---"), None);
        assert_eq!(splat_kind("rcu: Hierarchical RCU implementation."), None);
        // lockdep's reports that the generic BUG: and WARNING: patterns would file as bug/warning.
        for l in [
            "[ BUG: Invalid wait context ]",
            "WARNING: possible irq lock inversion dependency detected",
            "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected",
            "WARNING: held lock freed!",
            "WARNING: kworker/1:2/80 still has locks held!",
        ] {
            assert_eq!(splat_kind(l), Some("lockdep"), "{l}");
        }
        assert_eq!(splat_kind("BUG: KASAN: double-free in binder_free_page+0x2c/0x4c"), Some("kasan"));
        assert_eq!(
            splat_kind(
                "workqueue: work func f [m] enqueued on deprecated workqueue. Use system_{percpu|dfl}_wq instead."
            ),
            Some("deprecated-workqueue")
        );
    }

    #[test]
    fn iteration_names_round_trip() {
        assert_eq!(iteration_step("conformance", 1, 1), "conformance");
        assert_eq!(iteration_step("conformance", 3, 20), "conformance@3");
        assert_eq!(plan_step("conformance@3"), "conformance");
        assert_eq!(plan_step("conformance"), "conformance");
        assert_eq!(plan_step("user@host"), "user@host");
        assert_eq!(plan_step("x@"), "x@");
    }

    #[test]
    fn chunks_round_trip() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_chunk(&encode_chunk(&bytes)).unwrap(), bytes);
        assert!(decode_chunk("not base64!").unwrap_err().contains("bad base64"));
    }

    #[test]
    fn services_in_plans() {
        let p: Plan = toml::from_str(
            r#"
            name = "s"
            [[steps]]
            name = "hub"
            argv = ["/bin/rsb_hub"]
            timeout_s = 10
            service = true
            ready = { binder = "manager" }
            [[steps]]
            name = "client"
            argv = ["/bin/c"]
            timeout_s = 10
            "#,
        )
        .unwrap();
        assert!(p.steps[0].service && !p.steps[1].service);
        assert_eq!(p.steps[0].ready, Some(Ready::Binder("manager".into())));
        p.check().unwrap();
        // The wire form keeps plain steps as they were.
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json.matches("service").count(), 1, "{json}");
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
        let mut bad = p.clone();
        bad.steps[1].ready = Some(Ready::Path("/x".into()));
        assert!(bad.check().unwrap_err().contains("add `service = true`"));
        let mut bad = p.clone();
        bad.steps[1].name = "hub".into();
        assert!(bad.check().unwrap_err().contains("two steps are named \"hub\""));
        let mut bad = p.clone();
        bad.steps[0].collect = vec!["/tmp/x".into()];
        assert!(bad.check().unwrap_err().contains("collect in a later step"));
        let e = toml::from_str::<Plan>(
            "name = \"x\"\n[[steps]]\nname = \"a\"\nargv = [\"/a\"]\ntimeout_s = 1\nservice = true\nready = { socket = \"/x\" }",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown variant `socket`") && e.contains("`path`, `line`, `binder`"), "{e}");
    }

    #[test]
    fn ends_in_plain_words() {
        assert_eq!(describe_end(Some(1), None, false, 5.0), "exited with status 1");
        assert_eq!(describe_end(None, Some(11), false, 5.0), "killed by SIGSEGV");
        assert_eq!(describe_end(None, Some(9), true, 30_000.0), "timed out after 30.0 s and was killed");
        assert_eq!(signal_name(31), "SIGSYS");
        assert_eq!(signal_name(40), "signal 40");
        assert_eq!(signal_name(0), "signal 0");
    }

    #[test]
    fn plan_defaults() {
        let p: Plan =
            serde_json::from_str(r#"{"name":"x","steps":[{"name":"a","argv":["/bin/a"],"timeout_s":5}]}"#).unwrap();
        assert!(!p.shell);
        assert!(p.steps[0].env.is_empty() && p.steps[0].collect.is_empty());
        assert_eq!((p.repeat, p.until_fail), (0, false));
        // Defaults stay off the wire, so plans written before these fields read the same.
        assert!(!serde_json::to_string(&p).unwrap().contains("repeat"));
    }
}
