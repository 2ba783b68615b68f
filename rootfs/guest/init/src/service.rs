//! Plan steps with `service = true`: started, waited for until ready, left running for the
//! later steps, and stopped at the end of the step list.
//!
//! A service is reported as two cases of its step: `ready` when its start phase ends (its
//! `StepEnd` then says 0 when it is up, or how it ended when it did not come up) and `stopped`
//! when the step list is done. Its output goes to the console as `[name] ` lines like a
//! step's, read by one thread per pipe so a chatty service never blocks on a full pipe while
//! other steps run; result lines it prints are forwarded between steps.

use crate::reap;
use crate::sink::Sink;
use crate::step;
use crate::sys;
use labproto::{describe_end, signal_name, Event, Ready, Status, Step, SERVICE_STOP_GRACE_S};
use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often readiness is checked.
const POLL: Duration = Duration::from_millis(20);
/// A binder check (one getService call) waits this long for the context manager's reply.
const BINDER_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait for a SIGKILLed service to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Output lines of a service kept for its readiness and its failure report.
const KEEP_LINES: usize = 40;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Output of a service, filled by its reader threads.
#[derive(Default)]
struct Shared {
    /// The last [`KEEP_LINES`] console lines.
    lines: std::collections::VecDeque<String>,
    /// Result lines not yet forwarded.
    results: Vec<Event>,
    /// A line containing the `ready = { line = ... }` text was printed.
    saw_line: bool,
}

struct Service {
    name: String,
    pid: libc::pid_t,
    started: Instant,
    status: Option<libc::c_int>,
    ended_at: Option<Instant>,
    shared: Arc<Mutex<Shared>>,
}

impl Service {
    /// Collects its exit status if it ended (reaped here or by a step's loop).
    fn poll_exit(&mut self) {
        if self.status.is_some() {
            return;
        }
        while let Some((p, st)) = sys::reap_one() {
            reap::reaped(p, st);
        }
        if let Some(st) = reap::take(self.pid) {
            self.status = Some(st);
            self.ended_at = Some(Instant::now());
            reap::untrack(self.pid);
            // What it left running in its group goes with it, as with a step.
            sys::kill_group(self.pid);
        }
    }

    fn wait_exit(&mut self, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            self.poll_exit();
            if self.status.is_some() || Instant::now() >= until {
                return self.status.is_some();
            }
            std::thread::sleep(POLL);
        }
    }

    fn end_text(&self) -> String {
        let (code, sig) = self.status.map_or((None, None), step::decode_status);
        describe_end(code, sig, false, 0.0)
    }

    fn forward(&self, sink: &mut Sink) {
        let results = std::mem::take(&mut lock(&self.shared).results);
        for r in results {
            sink.send(&r);
        }
    }
}

/// The services started so far in this run of the step list.
#[derive(Default)]
pub struct Services {
    running: Vec<Service>,
}

impl Services {
    /// Starts the service step `s` (reported as `name`) and waits until it is ready. Returns
    /// whether that failed (it was then stopped).
    pub fn start(&mut self, s: &Step, name: &str, sink: &mut Sink) -> bool {
        sink.send(&Event::StepStart { step: name.to_string() });
        sys::log(&format!("service {name}: start {:?}", s.argv));
        let started = Instant::now();
        let mut svc = match spawn(s, name) {
            Ok(svc) => svc,
            Err(e) => {
                let msg = format!("cannot run {:?}: {e}", s.argv);
                sys::log(&format!("service {name}: {msg}"));
                send_case(sink, name, "ready", Status::Fail, 0.0, msg);
                send_end(sink, name, None, None, false, started);
                return true;
            }
        };
        let timeout = if s.timeout_s == 0 { step::DEFAULT_TIMEOUT } else { Duration::from_secs(s.timeout_s) };
        let waited = wait_ready(&mut svc, s.ready.as_ref(), timeout);
        svc.forward(sink);
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        let what = s.ready.as_ref().map_or_else(|| "running".to_string(), |r| r.to_string());
        match waited {
            Ok(()) => {
                sys::log(&format!("service {name}: ready ({what}) after {took_ms:.0} ms"));
                send_case(
                    sink,
                    name,
                    "ready",
                    Status::Pass,
                    took_ms,
                    format!("ready after {:.2} s: {what}", took_ms / 1000.0),
                );
                send_end(sink, name, Some(0), None, false, started);
                self.running.push(svc);
                false
            }
            Err(why) => {
                let timed_out = svc.status.is_none();
                if timed_out {
                    sys::kill_group(svc.pid);
                    svc.wait_exit(KILL_WAIT);
                }
                reap::untrack(svc.pid);
                svc.forward(sink);
                let msg = format!("not ready ({what}): {why}");
                sys::log(&format!("service {name}: {msg}"));
                send_case(sink, name, "ready", Status::Fail, took_ms, msg);
                let (code, sig) = svc.status.map_or((None, None), step::decode_status);
                send_end(sink, name, code, sig, timed_out, started);
                true
            }
        }
    }

    /// Forwards the results services printed since the last call, and notes which ended.
    pub fn forward(&mut self, sink: &mut Sink) {
        for s in &mut self.running {
            s.poll_exit();
            s.forward(sink);
        }
    }

    /// Stops every service, the last started first, and reports each as the case `stopped`.
    /// Returns whether one had failed (ended on its own with an error before this).
    pub fn stop_all(&mut self, sink: &mut Sink) -> bool {
        let mut failed = false;
        while let Some(mut svc) = self.running.pop() {
            svc.poll_exit();
            let (status, msg) = match svc.ended_at {
                Some(at) => {
                    // Seen when it was reaped: between steps, or by a step's own loop.
                    let after = at.duration_since(svc.started).as_secs_f64();
                    let text = svc.end_text();
                    if text == "exited with status 0" {
                        (Status::Pass, format!("ended by itself (seen after {after:.2} s): {text}"))
                    } else {
                        failed = true;
                        (Status::Fail, format!("ended by itself before the plan did (seen after {after:.2} s): {text}"))
                    }
                }
                None => {
                    // SAFETY: kill has no memory preconditions; a gone group gives ESRCH.
                    unsafe { libc::kill(-svc.pid, libc::SIGTERM) };
                    let up = svc.started.elapsed().as_secs_f64();
                    if svc.wait_exit(Duration::from_secs(SERVICE_STOP_GRACE_S)) {
                        (Status::Pass, format!("stopped with SIGTERM after {up:.2} s running: {}", svc.end_text()))
                    } else {
                        sys::kill_group(svc.pid);
                        svc.wait_exit(KILL_WAIT);
                        let msg = format!(
                            "did not end within {SERVICE_STOP_GRACE_S} s of SIGTERM; killed with {} after {up:.2} s running",
                            signal_name(libc::SIGKILL)
                        );
                        (Status::Pass, msg)
                    }
                }
            };
            reap::untrack(svc.pid);
            // Give the reader threads a moment for the last lines and results.
            std::thread::sleep(Duration::from_millis(50));
            svc.forward(sink);
            sys::log(&format!("service {}: {msg}", svc.name));
            let ms = svc.started.elapsed().as_secs_f64() * 1000.0;
            send_case(sink, &svc.name, "stopped", status, ms, msg);
        }
        failed
    }
}

fn send_case(sink: &mut Sink, step: &str, case: &str, status: Status, duration_ms: f64, message: String) {
    sink.send(&Event::Result {
        step: step.to_string(),
        case: case.into(),
        status,
        duration_ms,
        message: Some(message),
        data: serde_json::Value::Null,
    });
}

fn send_end(sink: &mut Sink, step: &str, exit_code: Option<i32>, signal: Option<i32>, timed_out: bool, t0: Instant) {
    sink.send(&Event::StepEnd {
        step: step.to_string(),
        exit_code,
        signal,
        timed_out,
        duration_ms: t0.elapsed().as_secs_f64() * 1000.0,
    });
}

fn spawn(s: &Step, name: &str) -> std::io::Result<Service> {
    let mut child = step::command(s, name)?.spawn()?;
    let pid = child.id() as libc::pid_t;
    // Registered before anything can reap it.
    reap::track(pid);
    let shared: Arc<Mutex<Shared>> = Arc::default();
    let needle = match &s.ready {
        Some(Ready::Line(l)) => Some(l.clone()),
        _ => None,
    };
    let out: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("piped"));
    let err: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("piped"));
    for (pipe, is_stdout) in [(out, true), (err, false)] {
        let (shared, name, needle) = (shared.clone(), name.to_string(), needle.clone());
        std::thread::spawn(move || read_lines(pipe, is_stdout, &name, needle.as_deref(), &shared));
    }
    // Reaped through waitpid(-1) like a step, never via `child`.
    drop(child);
    Ok(Service { name: name.to_string(), pid, started: Instant::now(), status: None, ended_at: None, shared })
}

fn read_lines(pipe: Box<dyn Read + Send>, is_stdout: bool, name: &str, needle: Option<&str>, shared: &Mutex<Shared>) {
    let mut r = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if is_stdout {
            if let Some(ev) = step::classify_stdout(name, line) {
                lock(shared).results.push(ev);
                continue;
            }
        }
        sys::console_line(&format!("{}{line}", labproto::step_console_prefix(name)));
        let mut sh = lock(shared);
        if needle.is_some_and(|n| line.contains(n)) {
            sh.saw_line = true;
        }
        sh.lines.push_back(line.to_string());
        if sh.lines.len() > KEEP_LINES {
            sh.lines.pop_front();
        }
    }
}

/// Waits until `ready` holds; the error says why it never did (it ended, or the time ran out).
fn wait_ready(svc: &mut Service, ready: Option<&Ready>, timeout: Duration) -> Result<(), String> {
    let deadline = svc.started + timeout;
    let mut binder: Option<binder::Binder> = None;
    let mut last_binder_error = None;
    loop {
        svc.poll_exit();
        if svc.status.is_some() {
            // Its last lines may still be in the pipe.
            std::thread::sleep(Duration::from_millis(50));
            return Err(format!("it {} after {:.2} s", svc.end_text(), svc.started.elapsed().as_secs_f64()));
        }
        let ok = match ready {
            None => true,
            Some(Ready::Path(p)) => std::path::Path::new(p).exists(),
            Some(Ready::Line(_)) => lock(&svc.shared).saw_line,
            Some(Ready::Binder(n)) => match binder_has(&mut binder, n) {
                Ok(found) => found,
                Err(e) => {
                    last_binder_error = Some(e);
                    false
                }
            },
        };
        if ok {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let last = last_binder_error.map(|e| format!(" (last service manager check: {e})")).unwrap_or_default();
            return Err(format!("still not ready after {} s{last}, stopped it", timeout.as_secs()));
        }
        std::thread::sleep(if matches!(ready, Some(Ready::Binder(_))) { POLL * 5 } else { POLL });
    }
}

/// One `getService(name)` call to the context manager of /dev/binderfs/binder.
fn binder_has(b: &mut Option<binder::Binder>, name: &str) -> Result<bool, String> {
    if b.is_none() {
        *b = Some(binder::Binder::open("/dev/binderfs/binder").map_err(|e| format!("open /dev/binderfs/binder: {e}"))?);
    }
    let dev = b.as_mut().expect("opened above");
    binder::sm::android_has_service(dev, name, BINDER_CALL_TIMEOUT).map_err(|e| {
        // A failed call can leave the thread's state behind; start afresh next time.
        *b = None;
        e.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_of(path: &std::path::Path) -> Vec<Event> {
        std::fs::read_to_string(path).unwrap().lines().filter_map(Event::parse_line).collect()
    }

    fn cases(evs: &[Event]) -> Vec<(String, String, Status, String)> {
        evs.iter()
            .filter_map(|e| match e {
                Event::Result { step, case, status, message, .. } => {
                    Some((step.clone(), case.clone(), *status, message.clone().unwrap_or_default()))
                }
                _ => None,
            })
            .collect()
    }

    fn svc(name: &str, script: &str, ready: Option<Ready>, timeout_s: u64) -> Step {
        Step {
            name: name.into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout_s,
            service: true,
            ready,
            ..Default::default()
        }
    }

    // Real processes on the host: a service outlives the step after it, which talks to it,
    // and is stopped at the end; readiness by path and by line; failures in plain words.
    #[test]
    fn services_stay_up_and_are_stopped() {
        let _serial = crate::step::tests::processes();
        let d = std::env::temp_dir().join(format!("lab-init-svc-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let events = d.join("events.jsonl");
        std::fs::write(&events, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&events).unwrap();
        let fifo_dir = d.display().to_string();
        let mut services = Services::default();
        // Ready once it made its file, which it does after a while; it serves until stopped.
        let by_path = svc(
            "server",
            &format!("sleep 0.3; echo up > {fifo_dir}/ready; while :; do sleep 0.05; done"),
            Some(Ready::Path(format!("{fifo_dir}/ready"))),
            10,
        );
        assert!(!services.start(&by_path, "server", &mut sink));
        let res = r#"{"type":"result","case":"hello","status":"pass"}"#;
        let by_line = svc(
            "talker",
            &format!("echo '{res}'; echo listening now; exec sleep 60"),
            Some(Ready::Line("listening".into())),
            10,
        );
        assert!(!services.start(&by_line, "talker", &mut sink));
        // A client step between: the services are still up.
        let client = Step {
            name: "client".into(),
            argv: vec!["/bin/sh".into(), "-c".into(), format!("test -f {fifo_dir}/ready")],
            timeout_s: 10,
            ..Default::default()
        };
        assert!(!crate::step::run(&client, "client", &mut sink));
        services.forward(&mut sink);
        // One that crashes while the plan runs fails at the end, in plain words.
        assert!(!services.start(&svc("crasher", "sleep 0.2; kill -SEGV $$", None, 10), "crasher", &mut sink));
        std::thread::sleep(Duration::from_millis(600));
        assert!(services.stop_all(&mut sink), "the crashed service fails the run");
        // One that never gets ready, and one that exits before it is: the start fails.
        let never = svc("never", "exec sleep 60", Some(Ready::Path(format!("{fifo_dir}/nope"))), 1);
        assert!(services.start(&never, "never", &mut sink));
        let quits = svc("quits", "echo bad config >&2; exit 1", Some(Ready::Line("listening".into())), 10);
        assert!(services.start(&quits, "quits", &mut sink));
        assert!(!services.stop_all(&mut sink), "nothing left running");
        let evs = events_of(&events);
        let c = cases(&evs);
        let find = |step: &str, case: &str| {
            c.iter().find(|x| x.0 == step && x.1 == case).unwrap_or_else(|| panic!("{step}/{case}: {c:?}")).clone()
        };
        assert_eq!(find("server", "ready").2, Status::Pass);
        assert!(find("server", "ready").3.contains("/ready exists"), "{c:?}");
        assert_eq!(find("talker", "hello").2, Status::Pass, "a service's results are forwarded");
        assert_eq!(find("talker", "ready").2, Status::Pass);
        for s in ["server", "talker"] {
            let (_, _, st, msg) = find(s, "stopped");
            assert!(st == Status::Pass && msg.starts_with("stopped with SIGTERM after"), "{msg}");
        }
        let (_, _, st, msg) = find("crasher", "stopped");
        assert!(
            st == Status::Fail
                && msg.contains("before the plan did (seen after")
                && msg.ends_with("): killed by SIGSEGV"),
            "{msg}"
        );
        let (_, _, st, msg) = find("never", "ready");
        assert!(st == Status::Fail && msg.contains("still not ready after 1 s"), "{msg}");
        let (_, _, st, msg) = find("quits", "ready");
        assert!(st == Status::Fail && msg.contains("exited with status 1"), "{msg}");
        // The start phases' ends: 0 when up, the real end otherwise; the order of the stops
        // is the reverse of the starts.
        let ends: Vec<_> = evs
            .iter()
            .filter_map(|e| match e {
                Event::StepEnd { step, exit_code, timed_out, .. } => Some((step.as_str(), *exit_code, *timed_out)),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            [
                ("server", Some(0), false),
                ("talker", Some(0), false),
                ("client", Some(0), false),
                ("crasher", Some(0), false),
                ("never", None, true),
                ("quits", Some(1), false)
            ]
        );
        let stops: Vec<_> = c.iter().filter(|x| x.1 == "stopped").map(|x| x.0.as_str()).collect();
        assert_eq!(stops, ["crasher", "talker", "server"]);
        assert!(reap::none_tracked());
        std::fs::remove_dir_all(&d).ok();
    }
}
