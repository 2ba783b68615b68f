//! What the kernel can tell about lock waits: `lock:contention_begin` trace events with their
//! kernel stacks (tracefs), and a task's scheduler statistics (`/proc/<pid>/sched`, needs
//! CONFIG_SCHEDSTATS). Parsing is pure and tested on the host; tracefs I/O is in [`Trace`].

use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const TRACEFS: &str = "/sys/kernel/tracing";
/// include/trace/events/lock.h: LCB_F_SPIN and LCB_F_MUTEX. A mutex waiter that goes to
/// sleep emits `flags == LCB_F_MUTEX` (kernel/locking/mutex.c, before schedule()); a
/// spinlock waiter entering the queued slow path emits `flags == LCB_F_SPIN`.
pub const LCB_F_SPIN: u32 = 1;
pub const LCB_F_MUTEX: u32 = 32;

/// Counts of contention events of one class of tasks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LockCounts {
    /// Slept on a mutex whose acquisition is in the binder allocator.
    pub alloc_sleeps: u64,
    /// Spun in the queued-spinlock slow path in the binder allocator.
    pub alloc_spins: u64,
    /// The same elsewhere (other binder locks, mmap lock, ...).
    pub other_sleeps: u64,
    pub other_spins: u64,
}

impl LockCounts {
    pub fn json(&self) -> Value {
        json!({"alloc_sleeps": self.alloc_sleeps, "alloc_spins": self.alloc_spins,
               "other_sleeps": self.other_sleeps, "other_spins": self.other_spins})
    }
}

/// A frame of the binder allocator: the C driver's `binder_alloc_*`, or the Rust driver's
/// buffer allocation and freeing (mangled v0 names contain the plain identifiers).
pub fn is_alloc_frame(f: &str) -> bool {
    f.starts_with("binder_alloc")
        || (f.contains("rust_binder")
            && ["buffer_alloc", "buffer_raw_free", "buffer_get", "buffer_make_freeable", "range_alloc"]
                .iter()
                .any(|k| f.contains(k)))
}

struct Event {
    pid: i32,
    flags: String,
    alloc: bool,
}

/// Parses the `trace` file: `contention_begin` lines, each followed by its `<stack trace>`
/// (the event's stacktrace trigger), and counts them per class (`class_of` a pid).
pub fn count_contentions(
    trace: &str,
    class_of: impl Fn(i32) -> Option<&'static str>,
) -> BTreeMap<&'static str, LockCounts> {
    let mut events: Vec<Event> = vec![];
    for line in trace.lines() {
        if let Some((head, rest)) = line.split_once(": contention_begin: ") {
            let task = head.split(" [").next().unwrap_or("").trim();
            let pid = task.rsplit('-').next().and_then(|p| p.parse().ok()).unwrap_or(-1);
            let flags = rest.split("(flags=").nth(1).unwrap_or("").trim_end_matches(')').to_string();
            events.push(Event { pid, flags, alloc: false });
        } else if let Some(frame) = line.trim_start().strip_prefix("=> ") {
            if let Some(e) = events.last_mut() {
                e.alloc |= is_alloc_frame(frame.trim());
            }
        }
    }
    let mut out: BTreeMap<&'static str, LockCounts> = BTreeMap::new();
    for e in events {
        let Some(class) = class_of(e.pid) else { continue };
        let c = out.entry(class).or_default();
        match (e.flags.as_str(), e.alloc) {
            ("MUTEX", true) => c.alloc_sleeps += 1,
            ("MUTEX", false) => c.other_sleeps += 1,
            ("SPIN", true) => c.alloc_spins += 1,
            ("SPIN", false) => c.other_spins += 1,
            _ => {}
        }
    }
    out
}

/// The fields of `/proc/<pid>/sched` used here, in nanoseconds or counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedStat {
    /// Uninterruptible sleep (a mutex wait; binder's own waits are interruptible).
    pub block_ns: u64,
    /// Runnable but waiting for a CPU.
    pub wait_ns: u64,
    pub involuntary: u64,
    pub voluntary: u64,
}

/// `key : value` lines; `12.345678` values are milliseconds with ns precision.
pub fn parse_sched(text: &str) -> SchedStat {
    let mut s = SchedStat::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let v = v.trim();
        let ns = || -> u64 {
            match v.split_once('.') {
                Some((ms, frac)) => ms.parse::<u64>().unwrap_or(0) * 1_000_000 + frac.parse::<u64>().unwrap_or(0),
                None => v.parse::<u64>().unwrap_or(0) * 1_000_000,
            }
        };
        match k.trim() {
            "sum_block_runtime" => s.block_ns = ns(),
            "wait_sum" => s.wait_ns = ns(),
            "nr_involuntary_switches" => s.involuntary = v.parse().unwrap_or(0),
            "nr_voluntary_switches" => s.voluntary = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    s
}

impl SchedStat {
    pub fn to_u64s(&self) -> [u64; 4] {
        [self.block_ns, self.wait_ns, self.involuntary, self.voluntary]
    }
    pub fn from_u64s(v: &[u64]) -> SchedStat {
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        SchedStat { block_ns: g(0), wait_ns: g(1), involuntary: g(2), voluntary: g(3) }
    }
    pub fn add(&mut self, o: &SchedStat) {
        self.block_ns += o.block_ns;
        self.wait_ns += o.wait_ns;
        self.involuntary += o.involuntary;
        self.voluntary += o.voluntary;
    }
    pub fn json(&self) -> Value {
        json!({"block_ms": self.block_ns as f64 / 1e6, "wait_ms": self.wait_ns as f64 / 1e6,
               "involuntary_switches": self.involuntary, "voluntary_switches": self.voluntary})
    }
}

/// CONFIG_SCHEDSTATS collects only while `kernel.sched_schedstats` is 1 (a static key, off by
/// default): on while this lives, then back to what it was.
pub struct Schedstats {
    before: Option<String>,
}

const SCHEDSTATS: &str = "/proc/sys/kernel/sched_schedstats";

impl Schedstats {
    pub fn enable() -> Schedstats {
        let before = std::fs::read_to_string(SCHEDSTATS).ok();
        if before.is_some() && std::fs::write(SCHEDSTATS, "1").is_err() {
            println!("note: cannot enable {SCHEDSTATS}: blocked and wait times will read 0");
        }
        Schedstats { before }
    }
}

impl Drop for Schedstats {
    fn drop(&mut self) {
        if let Some(b) = &self.before {
            let _ = std::fs::write(SCHEDSTATS, b.trim());
        }
    }
}

/// Lock contention tracing for a set of pids, on while it lives.
pub struct Trace {
    dir: String,
}

fn write(path: &str, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{path}: {e}"))
}

impl Trace {
    /// Mounts tracefs if needed and traces `contention_begin` (sleeps and spins, with the
    /// kernel stack) of `pids`. Err names what is missing (the caller reports it and goes on).
    pub fn start(pids: &[i32]) -> Result<Trace, String> {
        let ev = format!("{TRACEFS}/events/lock/contention_begin");
        if !std::path::Path::new(&ev).exists() {
            let _ = std::fs::create_dir_all(TRACEFS);
            // SAFETY: plain mount(2) with NUL-terminated strings and no data.
            let r = unsafe {
                libc::mount(
                    c"tracefs".as_ptr(),
                    c"/sys/kernel/tracing".as_ptr(),
                    c"tracefs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if r != 0 && !std::path::Path::new(&ev).exists() {
                return Err(format!("no {ev} (tracefs with CONFIG_TRACING is needed)"));
            }
        }
        let who: Vec<String> = pids.iter().map(|p| format!("common_pid == {p}")).collect();
        let filter = format!("(flags == {LCB_F_MUTEX} || flags == {LCB_F_SPIN}) && ({})", who.join(" || "));
        write(&format!("{TRACEFS}/tracing_on"), "0")?;
        write(&format!("{TRACEFS}/trace"), "")?;
        write(&format!("{TRACEFS}/buffer_size_kb"), "4096")?;
        write(&format!("{ev}/filter"), &filter)?;
        write(&format!("{ev}/trigger"), &format!("stacktrace if {filter}"))?;
        write(&format!("{ev}/enable"), "1")?;
        write(&format!("{TRACEFS}/tracing_on"), "1")?;
        Ok(Trace { dir: ev })
    }

    /// Stops tracing and returns the trace text, leaving tracefs as it was.
    pub fn finish(self) -> Result<String, String> {
        write(&format!("{TRACEFS}/tracing_on"), "0")?;
        let text = std::fs::read_to_string(format!("{TRACEFS}/trace")).map_err(|e| format!("trace: {e}"))?;
        let lost = std::fs::read_to_string(format!("{TRACEFS}/per_cpu/cpu0/stats")).unwrap_or_default();
        if lost.lines().any(|l| l.starts_with("overrun:") && l.trim() != "overrun: 0") {
            println!("note: the trace ring buffer overran; contention counts are a lower bound");
        }
        Ok(text)
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = write(&format!("{TRACEFS}/tracing_on"), "0");
        let _ = write(&format!("{}/enable", self.dir), "0");
        let trig = std::fs::read_to_string(format!("{}/trigger", self.dir)).unwrap_or_default();
        for t in trig.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let name = t.split_whitespace().next().unwrap_or("").split(':').next().unwrap_or("");
            let _ = write(&format!("{}/trigger", self.dir), &format!("!{name}"));
        }
        let _ = write(&format!("{}/filter", self.dir), "0");
        let _ = write(&format!("{TRACEFS}/trace"), "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
# tracer: nop
 binder-inversi-120     [003] d..1.    12.000001: contention_begin: 0xffff0000c1a2b3c0 (flags=MUTEX)
 binder-inversi-120     [003] d..1.    12.000002: <stack trace>
 => __mutex_lock.constprop.0
 => __mutex_lock_slowpath
 => mutex_lock
 => binder_alloc_new_buf
 => binder_transaction
 binder-inversi-121     [001] d..1.    12.000100: contention_begin: 0xffff0000c1a2b3c0 (flags=MUTEX|SPIN)
 binder-inversi-121     [001] d..1.    12.000101: <stack trace>
 => binder_alloc_new_buf
 binder-inversi-121     [001] d..1.    12.000200: contention_begin: 0xffff0000c1a2b400 (flags=SPIN)
 binder-inversi-121     [001] d..1.    12.000201: <stack trace>
 => queued_spin_lock_slowpath
 => _RNvMs_NtCsabc_11rust_binder7processNtB4_7Process12buffer_alloc
 binder-inversi-130     [002] d..1.    12.000300: contention_begin: 0xffff0000c1a2b500 (flags=MUTEX)
 binder-inversi-130     [002] d..1.    12.000301: <stack trace>
 => __mutex_lock.constprop.0
 => binder_ioctl
 binder-inversi-999     [002] d..1.    12.000400: contention_begin: 0xffff0000c1a2b500 (flags=MUTEX)
";

    #[test]
    fn contentions_are_classified_by_pid_flags_and_stack() {
        let class = |pid: i32| match pid {
            120 | 121 => Some("high"),
            130 => Some("low"),
            _ => None,
        };
        let c = count_contentions(TRACE, class);
        assert_eq!(c["high"], LockCounts { alloc_sleeps: 1, alloc_spins: 1, other_sleeps: 0, other_spins: 0 });
        assert_eq!(c["low"], LockCounts { other_sleeps: 1, ..Default::default() });
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn sched_fields_parse() {
        let t = "binder-inversi (120, #threads: 1)\n-------\nse.sum_exec_runtime                          :           812.345678\n\
                 sum_block_runtime                            :            14.000250\nwait_sum                                     :             3.000005\n\
                 nr_voluntary_switches                        :                  900\nnr_involuntary_switches                      :                   17\n";
        let s = parse_sched(t);
        assert_eq!(s, SchedStat { block_ns: 14_000_250, wait_ns: 3_000_005, involuntary: 17, voluntary: 900 });
        assert_eq!(SchedStat::from_u64s(&s.to_u64s()), s);
    }
}
