//! Where the server of a synchronous binder call runs, with each of android-sched's switches
//! off and on (`android-sched/` in the repository, in every kernel).
//!
//! Binder wakes the server thread with a sync wake-up (`notify_sync()` in the Rust driver).
//! Mainline ignores the hint; the Android Common Kernel honours it in two places, which
//! android-sched/ ports behind sched_feat switches that are off by default:
//! - `SYNC_EAS`: `find_energy_efficient_cpu()` returns the waker's CPU when it runs one task,
//!   is allowed and the woken task fits it;
//! - `RT_SYNC`: `select_task_rq_rt()` keeps an RT task woken by an RT waker on the waker's CPU
//!   (at most two RT tasks queued there), and the enqueue skips the pushable list.
//!
//! Per case a fresh server process (the context manager, one looper: its main thread) starts
//! on `--server-cpu` and is then allowed every CPU, so its previous CPU is known; a client
//! process pinned to `--client-cpu` waits 300 ms (the new server's utilization decays) and
//! makes `--iters` calls, `--pause-us` apart so that the system is not overutilized (EAS
//! stands aside then). The reply says where the server ran. Run it with `--tcg icount`: under
//! plain TCG a loaded host stretches guest time inside calls, and with it utilization.
//!
//! Cases (`--cases LIST`, all by default): `fair_off`, `fair_sync_eas` (both SCHED_OTHER),
//! `fifo_fair_off`, `fifo_fair_sync_eas` (a SCHED_FIFO caller and a SCHED_OTHER server: the
//! seed's FIFO class), `rt_off`, `rt_sync` (both SCHED_FIFO) and `rt_sync_fair_waker`
//! (RT_SYNC on, a SCHED_OTHER caller: ACK honours RT sync only for RT wakers, so this must
//! stay where `rt_off` is). Each case sets the features it needs and clears the others; the
//! boot's values are restored at the end.
//!
//! Judged here: a case with a switch on keeps at least 90% of calls on the caller's CPU; the
//! RT cases without an honoured switch keep at most 10% there (mainline leaves an RT task on
//! its previous CPU). The fair off cases are mainline EAS's choice, reported for the host to
//! compare with a kernel without the series. On a kernel without the switches the cases
//! that need one are reported as skipped.

use benchkit::proc::{fork, Chan};
use benchkit::stats::{clusters, Tier};
use benchkit::{cpu_now, pin, Args};
use binder::{Binder, Device};
use labproto::{report, Status};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const FEATURES: &str = "/sys/kernel/debug/sched/features";
const CODE_WHERE: u32 = 1;
/// The same priority for caller and server: ACK's test is the woken task's priority against
/// the waker's runqueue's next highest (none queued here), not against the waker.
const FIFO_PRIO: i32 = 50;
/// How long the client waits before its first call (see `client`).
const SETTLE: Duration = Duration::from_millis(300);
/// A switch on must keep at least this share of calls on the caller's CPU.
const ON_SHARE_MIN: f64 = 0.9;
/// The RT cases without an honoured switch: at most this share there.
const RT_OFF_SHARE_MAX: f64 = 0.1;
const SWITCHES: [&str; 2] = ["SYNC_EAS", "RT_SYNC"];

type Result<T> = std::result::Result<T, String>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// A switch is on and applies: the server runs on the caller's CPU.
    OnCallerCpu,
    /// RT without an honoured switch: the server stays on its previous CPU.
    StaysAway,
    /// Mainline EAS decides: reported only.
    Reported,
}

struct Case {
    name: &'static str,
    client_fifo: bool,
    server_fifo: bool,
    /// The feature switched on; the others are switched off.
    feature: Option<&'static str>,
    expect: Expect,
}

const CASES: [Case; 7] = [
    Case { name: "fair_off", client_fifo: false, server_fifo: false, feature: None, expect: Expect::Reported },
    Case {
        name: "fair_sync_eas",
        client_fifo: false,
        server_fifo: false,
        feature: Some("SYNC_EAS"),
        expect: Expect::OnCallerCpu,
    },
    Case { name: "fifo_fair_off", client_fifo: true, server_fifo: false, feature: None, expect: Expect::Reported },
    Case {
        name: "fifo_fair_sync_eas",
        client_fifo: true,
        server_fifo: false,
        feature: Some("SYNC_EAS"),
        expect: Expect::OnCallerCpu,
    },
    Case { name: "rt_off", client_fifo: true, server_fifo: true, feature: None, expect: Expect::StaysAway },
    Case {
        name: "rt_sync",
        client_fifo: true,
        server_fifo: true,
        feature: Some("RT_SYNC"),
        expect: Expect::OnCallerCpu,
    },
    Case {
        name: "rt_sync_fair_waker",
        client_fifo: false,
        server_fifo: true,
        feature: Some("RT_SYNC"),
        expect: Expect::StaysAway,
    },
];

/// The scheduler features file's words: `NAME` (on) or `NO_NAME` (off) each.
fn feature_state(text: &str, name: &str) -> Option<bool> {
    text.split_whitespace().find_map(|w| {
        if w == name {
            Some(true)
        } else if w.strip_prefix("NO_") == Some(name) {
            Some(false)
        } else {
            None
        }
    })
}

fn read_features() -> Result<String> {
    std::fs::read_to_string(FEATURES).map_err(|e| format!("{FEATURES}: {e} (debugfs not mounted?)"))
}

fn set_feature(name: &str, on: bool) -> Result<()> {
    let word = if on { name.to_string() } else { format!("NO_{name}") };
    std::fs::write(FEATURES, &word).map_err(|e| format!("{FEATURES}: writing {word}: {e}"))?;
    match feature_state(&read_features()?, name) {
        Some(v) if v == on => Ok(()),
        v => Err(format!("{FEATURES}: {name} reads {v:?} after writing {word}")),
    }
}

fn set_fifo(prio: i32) -> Result<()> {
    let param = libc::sched_param { sched_priority: prio };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(format!("SCHED_FIFO {prio}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Allows the calling thread every CPU again (it stays where it is until it next wakes).
fn unpin() -> Result<()> {
    // SAFETY: a zeroed cpu_set_t with every possible CPU set, applied to the calling thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(format!("unpin: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The server process: the context manager, served by its main thread, which starts on
/// `cpu` and is then allowed every CPU. Replies with the CPU it runs on.
fn serve(cpu: u32, fifo: bool, ready: &mut Chan) -> Result<()> {
    if fifo {
        set_fifo(FIFO_PRIO)?;
    }
    pin(cpu)?;
    let dev = Device::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    dev.set_max_threads(0).map_err(|e| e.to_string())?;
    let mut b = Binder::from_device(dev);
    b.become_context_manager().map_err(|e| format!("context manager: {e}"))?;
    b.enter_looper().map_err(|e| e.to_string())?;
    unpin()?;
    ready.signal().map_err(|e| e.to_string())?;
    let e = b.serve(|_| cpu_now().to_le_bytes().to_vec());
    Err(format!("serve: {e}"))
}

/// What a client saw: calls, errors, then calls per tier (same CPU, same cluster, cross).
#[derive(Debug, Default, PartialEq)]
struct Seen {
    calls: u64,
    errors: u64,
    tiers: [u64; 3],
    /// Calls made from another CPU than the one pinned to (never, if pinning holds).
    off_cpu: u64,
}

impl Seen {
    fn words(&self) -> Vec<u64> {
        vec![self.calls, self.errors, self.tiers[0], self.tiers[1], self.tiers[2], self.off_cpu]
    }

    fn from_words(w: &[u64]) -> Option<Seen> {
        match *w {
            [calls, errors, a, b, c, off_cpu] => Some(Seen { calls, errors, tiers: [a, b, c], off_cpu }),
            _ => None,
        }
    }

    fn same_cpu_share(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.tiers[Tier::SameCore.index()] as f64 / self.calls as f64)
    }
}

fn client(cpu: u32, fifo: bool, iters: u64, pause: Duration) -> Result<Seen> {
    pin(cpu)?;
    if fifo {
        set_fifo(FIFO_PRIO)?;
    }
    // A new process starts with half its CPU's spare capacity as utilization: until that has
    // decayed (PELT halves it every 32 ms) the server overutilizes a silver CPU and EAS, with
    // SYNC_EAS in it, stands aside.
    std::thread::sleep(SETTLE);
    let cl = clusters();
    let mut b = Binder::open(DEVICE).map_err(|e| format!("open: {e}"))?;
    let mut s = Seen::default();
    for _ in 0..iters {
        std::thread::sleep(pause);
        let me = cpu_now();
        match b.transact(0, CODE_WHERE, b"where", false) {
            Ok(r) if r.len() == 4 => {
                let server = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
                s.tiers[Tier::of(me, server, &cl).index()] += 1;
                s.calls += 1;
                s.off_cpu += u64::from(me != cpu);
            }
            _ => s.errors += 1,
        }
    }
    Ok(s)
}

/// One case: a fresh server on `server_cpu`, one client on `client_cpu`.
fn run_case(c: &Case, client_cpu: u32, server_cpu: u32, iters: u64, pause: Duration) -> Result<Seen> {
    let (mut mine, mut theirs) = Chan::pair().map_err(|e| e.to_string())?;
    let fifo = c.server_fifo;
    let mut server = fork(|| match serve(server_cpu, fifo, &mut theirs) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sched-sync server: {e}");
            2
        }
    })
    .map_err(|e| e.to_string())?;
    mine.wait().map_err(|_| "the server did not start (see the console)".to_string())?;
    let (mut to_client, mut from_parent) = Chan::pair().map_err(|e| e.to_string())?;
    let client_fifo = c.client_fifo;
    let mut kid = fork(|| match client(client_cpu, client_fifo, iters, pause) {
        Ok(s) => i32::from(from_parent.send_u64s(&s.words()).is_err()),
        Err(e) => {
            eprintln!("sched-sync client: {e}");
            2
        }
    })
    .map_err(|e| e.to_string())?;
    let words = to_client.recv_u64s().map_err(|_| "the client failed (see the console)".to_string());
    kid.wait();
    server.kill();
    Seen::from_words(&words?).ok_or_else(|| "the client sent malformed results".into())
}

/// Why a case's result is wrong, if it is.
fn problem(expect: Expect, s: &Seen) -> Option<String> {
    if s.errors > 0 || s.calls == 0 {
        return Some(format!("{} of {} calls failed", s.errors, s.calls + s.errors));
    }
    if s.off_cpu > 0 {
        return Some(format!("{} calls were made off the pinned CPU", s.off_cpu));
    }
    let share = s.same_cpu_share().unwrap_or(0.0);
    match expect {
        Expect::OnCallerCpu if share < ON_SHARE_MIN => {
            Some(format!("{:.1}% on the caller's CPU, want >= {:.0}%", 100.0 * share, 100.0 * ON_SHARE_MIN))
        }
        Expect::StaysAway if share > RT_OFF_SHARE_MAX => {
            Some(format!("{:.1}% on the caller's CPU, want <= {:.0}%", 100.0 * share, 100.0 * RT_OFF_SHARE_MAX))
        }
        _ => None,
    }
}

fn run(a: &Args) -> Result<bool> {
    let iters: u64 = a.get("iters", 200)?;
    let client_cpu: u32 = a.get("client-cpu", 1)?;
    let server_cpu: u32 = a.get("server-cpu", 6)?;
    let pause = Duration::from_micros(a.get("pause-us", 1000)?);
    let wanted: Vec<String> =
        a.get("cases", String::new())?.split(',').filter(|s| !s.is_empty()).map(String::from).collect();
    if let Some(bad) = wanted.iter().find(|w| !CASES.iter().any(|c| c.name == w.as_str())) {
        let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        return Err(format!("unknown case {bad:?}; cases: {}", names.join(", ")));
    }
    if client_cpu == server_cpu {
        return Err(
            "--client-cpu and --server-cpu must differ (the server's previous CPU must not be the caller's)".into()
        );
    }
    let boot = read_features()?;
    let present: Vec<&str> = SWITCHES.iter().copied().filter(|s| feature_state(&boot, s).is_some()).collect();
    let mut all_ok = true;
    for c in CASES.iter().filter(|c| wanted.is_empty() || wanted.iter().any(|w| w == c.name)) {
        let t0 = Instant::now();
        if let Some(f) = c.feature.filter(|f| !present.contains(f)) {
            report(
                c.name,
                Status::Skip,
                0.0,
                Some(format!("this kernel has no {f} scheduler feature (a kernel built without android-sched/)")),
                Value::Null,
            );
            continue;
        }
        for s in &present {
            set_feature(s, c.feature == Some(*s))?;
        }
        let seen = run_case(c, client_cpu, server_cpu, iters, pause);
        let features = read_features()?;
        let seen = seen?;
        let bad = problem(c.expect, &seen);
        all_ok &= bad.is_none();
        println!(
            "{:<20} same_cpu {:>5.1}%  tiers {:?}  errors {}",
            c.name,
            100.0 * seen.same_cpu_share().unwrap_or(0.0),
            seen.tiers,
            seen.errors
        );
        let d = json!({
            "calls": seen.calls, "errors": seen.errors, "same_cpu": seen.tiers[0],
            "same_cluster": seen.tiers[1], "cross_cluster": seen.tiers[2],
            "same_cpu_share": seen.same_cpu_share(), "client_cpu": client_cpu, "server_cpu": server_cpu,
            "client_fifo": c.client_fifo, "server_fifo": c.server_fifo, "feature": c.feature,
            "expect": format!("{:?}", c.expect),
            "switches": present.iter().map(|s| (s.to_string(), json!(feature_state(&features, s)))).collect::<serde_json::Map<_, _>>(),
            "pause_us": pause.as_micros() as u64,
        });
        let status = if bad.is_none() { Status::Pass } else { Status::Fail };
        report(c.name, status, t0.elapsed().as_secs_f64() * 1000.0, bad, d);
    }
    for s in &present {
        set_feature(s, feature_state(&boot, s) == Some(true))?;
    }
    Ok(all_ok)
}

pub fn main() {
    benchkit::main("sched_sync", &[], &["iters", "client-cpu", "server-cpu", "pause-us", "cases"], run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_file_words() {
        let t = "GENTLE_FAIR_SLEEPERS START_DEBIT NO_SYNC_EAS RT_SYNC NO_HRTICK\n";
        assert_eq!(feature_state(t, "SYNC_EAS"), Some(false));
        assert_eq!(feature_state(t, "RT_SYNC"), Some(true));
        assert_eq!(feature_state(t, "EAS"), None);
        assert_eq!(feature_state(t, "HRTICK"), Some(false));
    }

    #[test]
    fn judging() {
        let s = |same: u64, errors: u64| Seen { calls: 100, errors, tiers: [same, 100 - same, 0], off_cpu: 0 };
        assert_eq!(problem(Expect::OnCallerCpu, &s(95, 0)), None);
        assert!(problem(Expect::OnCallerCpu, &s(80, 0)).unwrap().contains("80.0% on the caller's CPU"));
        assert_eq!(problem(Expect::StaysAway, &s(0, 0)), None);
        assert!(problem(Expect::StaysAway, &s(50, 0)).is_some());
        assert_eq!(problem(Expect::Reported, &s(50, 0)), None);
        assert!(problem(Expect::Reported, &s(50, 1)).unwrap().contains("1 of 101 calls failed"));
        let w = s(7, 0).words();
        assert_eq!(Seen::from_words(&w), Some(s(7, 0)));
        assert_eq!(Seen::from_words(&w[..3]), None);
    }

    #[test]
    fn every_switch_has_cases_on_and_off() {
        for f in SWITCHES {
            assert!(CASES.iter().any(|c| c.feature == Some(f) && c.expect == Expect::OnCallerCpu), "{f}");
        }
        assert!(CASES.iter().any(|c| c.feature.is_none()));
    }
}
