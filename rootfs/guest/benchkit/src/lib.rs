//! Helpers shared by the guest benchmark programs (`binder-throughput`, `binder-tiers`,
//! `binder-sendvec`): latency statistics in the AOSP binderThroughputTest format,
//! Google-Benchmark-shaped rows, tier classification, system-wide perf counters, the CTABS
//! and `defer_tc` debugfs files, forked workers talking over pipes and a small argument parser.
//! Everything except [`counters`], [`ctabs`] and [`defer`] I/O and [`proc`] is pure and tested
//! on the host.

pub mod counters;
pub mod ctabs;
pub mod defer;
pub mod pool;
pub mod prio;
pub mod proc;
pub mod stats;
pub mod switch;
pub mod timed;

use std::collections::BTreeMap;

/// Command-line options: `-k value`, `--key value` and boolean flags.
#[derive(Debug, Default)]
pub struct Args {
    values: BTreeMap<String, String>,
    flags: Vec<String>,
}

impl Args {
    /// Parses `argv` (without the program name). Names in `flags` take no value, names in
    /// `options` take one; anything else is an error, so a mistyped option never silently
    /// runs the default.
    pub fn parse<I: IntoIterator<Item = String>>(argv: I, flags: &[&str], options: &[&str]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut it = argv.into_iter();
        while let Some(k) = it.next() {
            let name = k.trim_start_matches('-').to_string();
            if !k.starts_with('-') || name.is_empty() {
                return Err(format!("unexpected argument {k:?}"));
            }
            if !flags.contains(&name.as_str()) && !options.contains(&name.as_str()) {
                let dash = |n: &&str| if n.len() == 1 { format!("-{n}") } else { format!("--{n}") };
                let known: Vec<String> = options.iter().chain(flags).map(dash).collect();
                return Err(format!("unknown option {k}; this program takes {}", known.join(", ")));
            }
            if flags.contains(&name.as_str()) {
                a.flags.push(name);
            } else {
                let v = it.next().ok_or_else(|| format!("{k} requires an argument"))?;
                a.values.insert(name, v);
            }
        }
        Ok(a)
    }

    pub fn flag(&self, k: &str) -> bool {
        self.flags.iter().any(|f| f == k)
    }

    pub fn has(&self, k: &str) -> bool {
        self.values.contains_key(k)
    }

    /// The value of `k` parsed as `T`, `default` when absent.
    pub fn get<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T, String> {
        match self.values.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("bad value {v:?} for -{k}")),
        }
    }
}

/// Counters and CTABS statistics around one benchmark run.
pub struct Measure {
    counters: counters::Counters,
    ctabs_before: Option<std::collections::BTreeMap<String, BTreeMap<String, u64>>>,
    phase: Option<timed::TimedPhase>,
}

impl Measure {
    pub fn start() -> Measure {
        let ctabs_before = ctabs::snapshot();
        Measure { counters: counters::Counters::start(), ctabs_before, phase: None }
    }

    /// Also counts a timed phase in simpleperf's scope ([`timed`]); call before forking the
    /// workers, then [`Measure::phase_begin`] and [`Measure::phase_end`] around the phase.
    pub fn with_timed_phase(mut self) -> Measure {
        self.phase = Some(timed::TimedPhase::open());
        self
    }

    /// The timed phase starts; `pids` are the benchmark's processes besides this one.
    pub fn phase_begin(&mut self, pids: &[libc::pid_t]) {
        if let Some(p) = &mut self.phase {
            p.begin(&self.counters, pids);
        }
    }

    /// The timed phase ended after `calls` calls.
    pub fn phase_end(&mut self, pids: &[libc::pid_t], calls: u64) {
        if let Some(p) = &mut self.phase {
            p.end(&self.counters, pids, calls);
        }
    }

    /// Stops counting; adds "counters", "counter_errors", "ctabs_stats_delta" and, after a
    /// timed phase, "timed_phase" to `data` and prints the counters on the console.
    pub fn finish(self, data: &mut serde_json::Value) {
        if let (Some(t), Some(o)) = (self.phase.as_ref().and_then(|p| p.result()), data.as_object_mut()) {
            o.insert("timed_phase".into(), t.clone());
        }
        let (c, errors) = self.counters.stop();
        let delta = ctabs::delta(&self.ctabs_before, &ctabs::snapshot());
        println!("counters: {}", counters::summary_line(&c));
        if let Some(o) = data.as_object_mut() {
            o.insert("counters".into(), c);
            o.insert("counter_errors".into(), serde_json::json!(errors));
            o.insert("ctabs_stats_delta".into(), delta);
        }
    }
}

/// Applies `--ctabs-mode N` if given (a missing mode file is ignored, with a note).
pub fn apply_ctabs_mode(a: &Args) -> Result<Option<u32>, String> {
    if !a.has("ctabs-mode") {
        return Ok(None);
    }
    let m: u32 = a.get("ctabs-mode", 0)?;
    if !ctabs::set_mode(m)? {
        println!("note: {} is absent, --ctabs-mode {m} ignored", ctabs::mode_file());
        return Ok(None);
    }
    Ok(Some(m))
}

/// Applies `--defer-tc 0|1` if given; a kernel without the switch is an error. Returns the
/// switch's value in effect (also when the option is absent), None on a kernel without it.
pub fn apply_defer_tc(a: &Args) -> Result<Option<u32>, String> {
    if !a.has("defer-tc") {
        return Ok(defer::current());
    }
    let v = defer::set(a.get("defer-tc", 1)?)?;
    println!("defer_tc: {v}");
    Ok(Some(v))
}

/// Writes `value` to a debugfs switch; Ok(false) when the file does not exist.
pub fn write_switch(path: &str, value: u32) -> Result<bool, String> {
    if !std::path::Path::new(path).exists() {
        return Ok(false);
    }
    std::fs::write(path, format!("{value}\n")).map_err(|e| format!("{path}: {e}"))?;
    Ok(true)
}

/// A debugfs switch's value, None when the file is absent or does not hold a number.
pub fn read_switch(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: u32) -> Result<(), String> {
    // SAFETY: the cpu_set_t is zero-initialised plain data; CPU_SET writes inside it and
    // sched_setaffinity(0) applies it to the calling thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(format!("pin to cpu{cpu}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The CPU the calling thread runs on.
pub fn cpu_now() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    unsafe { libc::sched_getcpu() as u32 }
}

/// The `main` of every benchmark: arm a watchdog, parse the arguments (`flags` take no value,
/// `options` one), run, and turn the outcome into the exit code (1: failed, 2: could not run,
/// reported as `case`).
pub fn main(case: &str, flags: &[&str], options: &[&str], run: impl FnOnce(&Args) -> Result<bool, String>) -> ! {
    // SAFETY: alarm has no preconditions; SIGALRM's default action ends a stuck run.
    unsafe { libc::alarm(3600) };
    match Args::parse(std::env::args().skip(1), flags, options).and_then(|a| run(&a)) {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            labproto::report(case, labproto::Status::Fail, 0.0, Some(e), serde_json::Value::Null);
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_values_and_flags() {
        let opts = ["w", "i", "ctabs-mode", "defer-tc"];
        let a = Args::parse(argv("-w 4 -p --ctabs-mode 1 --defer-tc 0 -i 200"), &["p", "t"], &opts).unwrap();
        assert_eq!(a.get("w", 2u32).unwrap(), 4);
        assert_eq!(a.get("i", 0u64).unwrap(), 200);
        assert_eq!(a.get("ctabs-mode", 0u32).unwrap(), 1);
        assert_eq!(a.get("defer-tc", 1u32).unwrap(), 0);
        assert_eq!(a.get("s", 7usize).unwrap(), 7);
        assert!(a.flag("p") && !a.flag("t"));
        assert!(Args::parse(argv("-w"), &[], &opts).is_err());
        assert!(Args::parse(argv("x"), &[], &opts).is_err());
        assert!(Args::parse(argv("-w x"), &[], &opts).unwrap().get("w", 1u32).is_err());
        let e = Args::parse(argv("--defer 0"), &["p"], &opts).unwrap_err();
        assert_eq!(e, "unknown option --defer; this program takes -w, -i, --ctabs-mode, --defer-tc, -p");
    }
}
