//! The timed phase in simpleperf's scope: perf counters of the benchmark's own tasks,
//! inherited over its process tree (`perf_event_open` with pid 0 and `inherit`, as
//! `simpleperf stat CMD` counts), beside the system-wide counters' difference over the same
//! phase, the scheduler's accounting of the benchmark's threads (`/proc/PID/task/*/schedstat`:
//! on-CPU and run-queue time) and trace markers at the phase's ends that carry each cpufreq
//! policy's clock (the host reads the clocks in between from `power:cpu_frequency`).
//!
//! Open it before the workers are forked (they inherit the counters, disabled), then
//! [`TimedPhase::begin`] and [`TimedPhase::end`] around the timed loop: the parent's
//! enable and disable reach every inherited counter.

use crate::counters::{
    close_all, open_with, Counters, PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS,
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_MIGRATIONS, PERF_COUNT_SW_TASK_CLOCK, PERF_EVENT_IOC_DISABLE,
    PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_RESET, PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// perf's generic cache events; on arm64 the PMU's L1D_CACHE and L1D_CACHE_REFILL
/// (drivers/perf/arm_pmuv3.c, armv8_pmuv3_perf_map), when the PMU lists them in PMCEID0.
const PERF_COUNT_HW_CACHE_REFERENCES: u64 = 2;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
/// perf_event_attr flag bits (after `disabled`, bit 0).
const INHERIT: u64 = 1 << 1;
const EXCLUDE_USER: u64 = 1 << 4;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;

/// The per-task counters: (JSON name, type, config, flags). Six hardware events with the
/// system-wide cycles and instructions fill the emulated PMU (six counters and the cycle
/// counter) without multiplexing, so cycles are not split by privilege level.
const TASK_EVENTS: [(&str, u32, u64, u64); 8] = [
    ("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0),
    ("instructions_user", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, EXCLUDE_KERNEL | EXCLUDE_HV),
    ("instructions_kernel", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, EXCLUDE_USER | EXCLUDE_HV),
    ("l1d_refs", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, 0),
    ("l1d_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 0),
    ("cpu_migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, 0),
    ("context_switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 0),
    ("task_clock_ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0),
];

const TRACEFS: &str = "/sys/kernel/tracing";
const CPUFREQ: &str = "/sys/devices/system/cpu/cpufreq";

/// What [`TimedPhase::begin`] saw.
struct Begin {
    at: Instant,
    system: Value,
    sched: BTreeMap<String, [u64; 3]>,
    khz: BTreeMap<String, u64>,
}

/// The inherited per-task counters and the phase's snapshots.
pub struct TimedPhase {
    /// (name, fd or why it could not be opened).
    counters: Vec<(&'static str, Result<libc::c_int, String>)>,
    begin: Option<Begin>,
    result: Option<Value>,
}

impl TimedPhase {
    /// Opens the counters of the calling process, disabled and inherited by every task it
    /// creates from now on.
    pub fn open() -> TimedPhase {
        let counters = TASK_EVENTS
            .iter()
            .map(|&(name, t, c, f)| (name, open_with(t, c, 0, -1, INHERIT | f).map_err(|e| format!("{name}: {e}"))))
            .collect();
        TimedPhase { counters, begin: None, result: None }
    }

    fn ioctl_all(&self, req: libc::c_ulong) {
        for (_, fd) in &self.counters {
            if let Ok(fd) = fd {
                // SAFETY: fd is a perf event fd owned by self; the request takes no argument
                // and, without PERF_IOC_FLAG_GROUP, reaches every inherited child counter.
                unsafe { libc::ioctl(*fd, req, 0) };
            }
        }
    }

    /// The phase starts: `pids` are the benchmark's processes besides the caller.
    pub fn begin(&mut self, system: &Counters, pids: &[libc::pid_t]) {
        let khz = policy_khz();
        mark(&format!("lab-timed-phase begin {}", khz_text(&khz)));
        let sched = schedstat(pids);
        let system = system.read();
        self.ioctl_all(PERF_EVENT_IOC_RESET);
        self.ioctl_all(PERF_EVENT_IOC_ENABLE);
        self.begin = Some(Begin { at: Instant::now(), system, sched, khz });
    }

    /// The phase ends after `calls` calls.
    pub fn end(&mut self, system: &Counters, pids: &[libc::pid_t], calls: u64) {
        self.ioctl_all(PERF_EVENT_IOC_DISABLE);
        let Some(b) = self.begin.take() else { return };
        let ns = b.at.elapsed().as_nanos() as u64;
        let sys_now = system.read();
        let sched = schedstat(pids);
        let khz = policy_khz();
        mark(&format!("lab-timed-phase end {}", khz_text(&khz)));
        let mut task = serde_json::Map::new();
        let mut errors = vec![];
        for (name, fd) in &self.counters {
            let v = match fd {
                Ok(fd) => match read_one(*fd) {
                    Some([v, enabled, running]) if running == enabled => Some(v),
                    Some([_, enabled, running]) => {
                        errors.push(format!("{name}: multiplexed ({running} of {enabled} ns on the PMU)"));
                        None
                    }
                    None => {
                        errors.push(format!("{name}: unreadable"));
                        None
                    }
                },
                Err(e) => {
                    errors.push(e.clone());
                    None
                }
            };
            task.insert(name.to_string(), json!(v));
        }
        let mut sys = serde_json::Map::new();
        for (k, v) in sys_now.as_object().into_iter().flatten() {
            let d = v.as_u64().zip(b.system[k].as_u64()).map(|(n, o)| n.saturating_sub(o));
            sys.insert(k.clone(), json!(d));
        }
        let [exec, delay, slices] = sched_delta(&b.sched, &sched);
        self.result = Some(json!({
            "ns": ns, "calls": calls, "task": task, "task_errors": errors, "system": sys,
            "schedstat": {"exec_ns": exec, "run_delay_ns": delay, "timeslices": slices, "threads": sched.len()},
            "policy_khz_begin": b.khz, "policy_khz_end": khz,
        }));
    }

    /// The finished phase's figures (None before [`TimedPhase::end`]).
    pub fn result(&self) -> Option<&Value> {
        self.result.as_ref()
    }
}

impl Drop for TimedPhase {
    fn drop(&mut self) {
        let mut fds: Vec<libc::c_int> = self.counters.iter().filter_map(|(_, f)| f.as_ref().ok().copied()).collect();
        close_all(&mut fds);
    }
}

/// {value, time enabled, time running} of one counter (its inherited children summed).
fn read_one(fd: libc::c_int) -> Option<[u64; 3]> {
    let mut buf = [0u64; 3];
    // SAFETY: buf is 24 writable bytes, the size of a {value, enabled, running} read.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), std::mem::size_of_val(&buf)) };
    (n == std::mem::size_of_val(&buf) as isize).then_some(buf)
}

/// `schedstat` of every thread of the caller and of `pids`: "pid/tid" -> [on-CPU ns,
/// run-queue ns, time slices].
fn schedstat(pids: &[libc::pid_t]) -> BTreeMap<String, [u64; 3]> {
    let mut out = BTreeMap::new();
    let own = std::process::id() as libc::pid_t;
    for pid in std::iter::once(own).chain(pids.iter().copied()) {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in dir.flatten() {
            let tid = t.file_name().to_string_lossy().to_string();
            if let Some(v) = std::fs::read_to_string(t.path().join("schedstat")).ok().and_then(|s| parse_schedstat(&s))
            {
                out.insert(format!("{pid}/{tid}"), v);
            }
        }
    }
    out
}

/// "exec_ns run_delay_ns pcount" (CONFIG_SCHED_INFO).
fn parse_schedstat(s: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
    Some([*v.first()?, *v.get(1)?, *v.get(2)?])
}

/// Sum over the threads at the end of what each did since the start (a thread born in the
/// phase counts from zero).
fn sched_delta(then: &BTreeMap<String, [u64; 3]>, now: &BTreeMap<String, [u64; 3]>) -> [u64; 3] {
    let mut sum = [0u64; 3];
    for (k, n) in now {
        let o = then.get(k).copied().unwrap_or([0; 3]);
        for i in 0..3 {
            sum[i] += n[i].saturating_sub(o[i]);
        }
    }
    sum
}

/// Each cpufreq policy's current clock: "policyN" -> kHz.
fn policy_khz() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(CPUFREQ).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("policy") {
            continue;
        }
        if let Some(k) =
            std::fs::read_to_string(e.path().join("scaling_cur_freq")).ok().and_then(|s| s.trim().parse().ok())
        {
            out.insert(name, k);
        }
    }
    out
}

fn khz_text(khz: &BTreeMap<String, u64>) -> String {
    khz.iter().map(|(p, k)| format!("{p}={k}")).collect::<Vec<_>>().join(" ")
}

/// Writes `text` into the ftrace ring buffer when tracing is on (a traced run), else nothing.
fn mark(text: &str) {
    let on = std::fs::read_to_string(format!("{TRACEFS}/tracing_on")).is_ok_and(|s| s.trim() == "1");
    if on {
        let _ = std::fs::write(format!("{TRACEFS}/trace_marker"), text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_and_deltas() {
        assert_eq!(parse_schedstat("1200 300 7\n"), Some([1200, 300, 7]));
        assert_eq!(parse_schedstat("1200 x 7"), None);
        let then = BTreeMap::from([("1/1".to_string(), [100, 10, 1]), ("1/2".to_string(), [50, 5, 1])]);
        // 1/2 exited (gone), 1/3 was born in the phase.
        let now = BTreeMap::from([("1/1".to_string(), [400, 30, 4]), ("1/3".to_string(), [70, 7, 2])]);
        assert_eq!(sched_delta(&then, &now), [370, 27, 5]);
    }

    #[test]
    fn markers_name_each_policy() {
        let k = BTreeMap::from([("policy0".to_string(), 300000u64), ("policy4".to_string(), 710400)]);
        assert_eq!(khz_text(&k), "policy0=300000 policy4=710400");
    }
}
