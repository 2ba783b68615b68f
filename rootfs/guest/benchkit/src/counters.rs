//! System-wide perf counters (perf_event_open with pid -1, one event per online CPU,
//! summed). A counter that cannot be opened, or never ran, is `None` (JSON null), never 0.

use serde_json::{json, Value};

pub(crate) const PERF_TYPE_HARDWARE: u32 = 0;
pub(crate) const PERF_TYPE_SOFTWARE: u32 = 1;
pub(crate) const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
pub(crate) const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
pub(crate) const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
pub(crate) const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
pub(crate) const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
/// attr.disabled is bit 0 of the flag word.
const ATTR_DISABLED: u64 = 1;
pub(crate) const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
pub(crate) const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
pub(crate) const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;

/// The first version of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0, 64 bytes); the
/// kernel accepts it and zero-extends the rest.
#[repr(C)]
#[derive(Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
}

/// The counters, in report order: (JSON name, type, config).
const EVENTS: [(&str, u32, u64); 5] = [
    ("cpu_migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS),
    ("context_switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("task_clock_ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
    ("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
];

/// One counter on every CPU; `fds` is empty when it could not be opened on some CPU.
struct Counter {
    fds: Vec<libc::c_int>,
    error: Option<String>,
}

/// Counters opened (and enabled) by [`Counters::start`].
pub struct Counters {
    counters: Vec<Counter>,
}

fn open_one(type_: u32, config: u64, cpu: i32) -> std::io::Result<libc::c_int> {
    open_for(type_, config, -1, cpu)
}

/// A disabled counter of task `pid` (0: the caller, -1: every task) on `cpu` (-1: any).
fn open_for(type_: u32, config: u64, pid: i32, cpu: i32) -> std::io::Result<libc::c_int> {
    open_with(type_, config, pid, cpu, 0)
}

/// [`open_for`] with more attr flag bits (`flags`: inherit, exclude_user, ...).
pub(crate) fn open_with(type_: u32, config: u64, pid: i32, cpu: i32, flags: u64) -> std::io::Result<libc::c_int> {
    let attr = PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags: ATTR_DISABLED | flags,
        ..Default::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares, alive for the call;
    // pid and cpu as the caller says (not both -1); no group fd, no flags.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, pid, cpu, -1, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd as libc::c_int)
}

fn online_cpus() -> Vec<i32> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (0..n.max(1) as i32).collect()
}

impl Counters {
    /// Opens every counter on every online CPU, then resets and enables them.
    pub fn start() -> Counters {
        let cpus = online_cpus();
        let counters = EVENTS
            .iter()
            .map(|&(name, t, c)| {
                let mut fds = vec![];
                for &cpu in &cpus {
                    match open_one(t, c, cpu) {
                        Ok(fd) => fds.push(fd),
                        Err(e) => {
                            close_all(&mut fds);
                            return Counter { fds, error: Some(format!("{name} on cpu{cpu}: {e}")) };
                        }
                    }
                }
                Counter { fds, error: None }
            })
            .collect::<Vec<_>>();
        for c in &counters {
            for &fd in &c.fds {
                // SAFETY: fd is a perf event fd opened above; these ioctls take no argument.
                unsafe {
                    libc::ioctl(fd, PERF_EVENT_IOC_RESET, 0);
                    libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
                }
            }
        }
        Counters { counters }
    }

    /// The counts so far, without stopping them (null where unavailable), for the
    /// difference over a phase.
    pub fn read(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (c, &(name, _, _)) in self.counters.iter().zip(EVENTS.iter()) {
            let v = if c.error.is_some() { None } else { read_sum(&c.fds) };
            out.insert(name.into(), json!(v));
        }
        Value::Object(out)
    }

    /// Disables and reads the counters: a JSON object of counts (null when unavailable)
    /// and, under "counter_errors", why a counter is null.
    pub fn stop(self) -> (Value, Vec<String>) {
        let mut out = serde_json::Map::new();
        let mut errors = vec![];
        for (c, &(name, _, _)) in self.counters.iter().zip(EVENTS.iter()) {
            for &fd in &c.fds {
                // SAFETY: fd is a perf event fd owned by this struct.
                unsafe { libc::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) };
            }
            let v = match &c.error {
                Some(e) => {
                    errors.push(e.clone());
                    None
                }
                None => {
                    let r = read_sum(&c.fds);
                    if r.is_none() {
                        errors.push(format!("{name}: never scheduled on the PMU (or unreadable)"));
                    }
                    r
                }
            };
            out.insert(name.into(), json!(v));
        }
        (Value::Object(out), errors)
    }
}

/// Sum over CPUs, scaled for multiplexing; None if any CPU's counter never ran.
pub(crate) fn read_sum(fds: &[libc::c_int]) -> Option<u64> {
    let mut total = 0f64;
    for &fd in fds {
        let mut buf = [0u64; 3];
        // SAFETY: buf is 24 writable bytes, the size of a {value, enabled, running} read.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), std::mem::size_of_val(&buf)) };
        if n != std::mem::size_of_val(&buf) as isize {
            return None;
        }
        let [value, enabled, running] = buf;
        if running == 0 {
            if enabled == 0 {
                continue;
            }
            return None;
        }
        total += value as f64 * enabled as f64 / running as f64;
    }
    Some(total.round() as u64)
}

pub(crate) fn close_all(fds: &mut Vec<libc::c_int>) {
    for fd in fds.drain(..) {
        // SAFETY: fd is a perf event fd owned by the caller's list.
        unsafe { libc::close(fd) };
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        for c in &mut self.counters {
            close_all(&mut c.fds);
        }
    }
}

/// Names of counters that are null in a [`Counters::stop`] object.
pub fn unavailable(v: &Value) -> Vec<String> {
    v.as_object().map(|o| o.iter().filter(|(_, x)| x.is_null()).map(|(k, _)| k.clone()).collect()).unwrap_or_default()
}

/// "name=value" pairs for the console, "n/a" for unavailable counters.
pub fn summary_line(v: &Value) -> String {
    let Some(o) = v.as_object() else { return String::new() };
    EVENTS
        .iter()
        .map(|(k, _, _)| match o.get(*k).and_then(Value::as_u64) {
            Some(x) => format!("{k}={x}"),
            None => format!("{k}=n/a"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_is_version_zero() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
    }

    #[test]
    fn summary_marks_unavailable() {
        let v = json!({"cpu_migrations": 3, "context_switches": 10, "task_clock_ns": 5, "cycles": null, "instructions": null});
        assert_eq!(
            summary_line(&v),
            "cpu_migrations=3 context_switches=10 task_clock_ns=5 cycles=n/a instructions=n/a"
        );
        assert_eq!(unavailable(&v), vec!["cycles".to_string(), "instructions".to_string()]);
    }
}

/// The calling thread's CPU cycles (the PMU's cycle counter), from [`ThreadCycles::start`].
pub struct ThreadCycles(libc::c_int);

impl ThreadCycles {
    /// Opens, resets and enables the counter for the calling thread, on any CPU.
    pub fn start() -> std::io::Result<ThreadCycles> {
        let fd = open_for(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, -1)?;
        // SAFETY: fd is the perf event fd just opened; these ioctls take no argument.
        unsafe {
            libc::ioctl(fd, PERF_EVENT_IOC_RESET, 0);
            libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
        }
        Ok(ThreadCycles(fd))
    }

    /// Cycles so far; None if the counter never ran.
    pub fn read(&self) -> Option<u64> {
        read_sum(&[self.0])
    }
}

impl Drop for ThreadCycles {
    fn drop(&mut self) {
        close_all(&mut vec![self.0]);
    }
}
