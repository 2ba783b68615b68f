//! Runs one plan step: spawn, stream its output, enforce the timeout, collect status.

use crate::sink::Sink;
use crate::sys;
use labproto::{Event, Status, Step};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Timeout for steps that say 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// A single output line longer than this is cut into pieces.
const MAX_LINE: usize = 16 << 20;
/// How long leftover processes of a finished step may keep its pipes open.
const LINGER: Duration = Duration::from_millis(500);
/// How long to wait for a SIGKILLed step to be reaped (it can be stuck in the kernel).
const KILL_WAIT: Duration = Duration::from_secs(5);

pub const BASE_ENV: &[(&str, &str)] = &[("PATH", "/bin:/sbin"), ("HOME", "/root"), ("TERM", "linux")];

/// argv[0] as an absolute path: names without a slash are looked up in /bin.
pub fn resolve_program(arg0: &str) -> String {
    if arg0.contains('/') {
        arg0.to_string()
    } else {
        format!("/bin/{arg0}")
    }
}

/// Splits a byte stream into lines; keeps the unfinished tail.
#[derive(Default)]
pub struct LineBuf {
    buf: Vec<u8>,
}

impl LineBuf {
    pub fn push(&mut self, data: &[u8], mut on_line: impl FnMut(&str)) {
        self.buf.extend_from_slice(data);
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            on_line(&String::from_utf8_lossy(&self.buf[start..start + pos]));
            start += pos + 1;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE {
            on_line(&String::from_utf8_lossy(&self.buf));
            self.buf.clear();
        }
    }

    pub fn finish(&mut self, mut on_line: impl FnMut(&str)) {
        if !self.buf.is_empty() {
            on_line(&String::from_utf8_lossy(&self.buf));
            self.buf.clear();
        }
    }
}

/// What a step's stdout line becomes: a result to forward (with `step` filled) or
/// console text.
pub fn classify_stdout(step: &str, line: &str) -> Option<Event> {
    match Event::parse_line(line) {
        Some(Event::Result { step: _, case, status, duration_ms, message, data }) => {
            Some(Event::Result { step: step.to_string(), case, status, duration_ms, message, data })
        }
        _ => None,
    }
}

struct Stream {
    pipe: Option<File>,
    lines: LineBuf,
    is_stdout: bool,
}

pub struct Outcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
}

pub fn run(step: &Step, sink: &mut Sink) {
    let name = step.name.as_str();
    sink.send(&Event::StepStart { step: name.to_string() });
    sys::log(&format!("step {name}: start {:?}", step.argv));
    let start = Instant::now();
    let outcome = match spawn_and_watch(step, sink, start) {
        Ok(o) => o,
        Err(e) => {
            let msg = format!("cannot run {:?}: {e}", step.argv);
            sys::log(&format!("step {name}: {msg}"));
            sink.send(&Event::Result {
                step: name.to_string(),
                case: "spawn".into(),
                status: Status::Fail,
                duration_ms: 0.0,
                message: Some(msg),
                data: serde_json::Value::Null,
            });
            Outcome { exit_code: None, signal: None, timed_out: false }
        }
    };
    let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    sys::log(&format!(
        "step {name}: end exit={:?} signal={:?} timed_out={} in {:.0} ms",
        outcome.exit_code, outcome.signal, outcome.timed_out, duration_ms
    ));
    sink.send(&Event::StepEnd {
        step: name.to_string(),
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        timed_out: outcome.timed_out,
        duration_ms,
    });
}

fn decode_status(st: libc::c_int) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(st) {
        (Some(libc::WEXITSTATUS(st)), None)
    } else if libc::WIFSIGNALED(st) {
        (None, Some(libc::WTERMSIG(st)))
    } else {
        (None, None)
    }
}

fn spawn_and_watch(step: &Step, sink: &mut Sink, start: Instant) -> io::Result<Outcome> {
    let arg0 = step.argv.first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let timeout = if step.timeout_s == 0 { DEFAULT_TIMEOUT } else { Duration::from_secs(step.timeout_s) };
    let mut child = Command::new(resolve_program(arg0))
        .args(&step.argv[1..])
        .env_clear()
        .envs(BASE_ENV.iter().copied())
        .env("LAB_STEP", &step.name)
        .envs(&step.env)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Own process group, so a timeout kills everything the step started.
        .process_group(0)
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    // We reap through waitpid(-1) (PID 1 also collects orphans), never via `child`.
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    drop(child);
    sys::set_nonblocking(out.as_raw_fd())?;
    sys::set_nonblocking(err.as_raw_fd())?;
    let mut streams = [
        Stream { pipe: Some(File::from(OwnedFd::from(out))), lines: LineBuf::default(), is_stdout: true },
        Stream { pipe: Some(File::from(OwnedFd::from(err))), lines: LineBuf::default(), is_stdout: false },
    ];

    let deadline = start + timeout;
    let mut status: Option<libc::c_int> = None;
    let mut exited_at: Option<Instant> = None;
    let mut timed_out = false;
    let mut killed_at: Option<Instant> = None;
    loop {
        while let Some((p, st)) = sys::reap_one() {
            if p == pid {
                status = Some(st);
                exited_at = Some(Instant::now());
                // Leftovers of the step (its process group) do not outlive it.
                sys::kill_group(pid);
            }
        }
        let open = streams.iter().any(|s| s.pipe.is_some());
        let now = Instant::now();
        if let Some(t) = exited_at {
            if !open || now.duration_since(t) > LINGER {
                break;
            }
        }
        if status.is_none() {
            if killed_at.is_none() && now >= deadline {
                timed_out = true;
                sys::log(&format!(
                    "step {}: timed out after {} s, killing its process group",
                    step.name,
                    timeout.as_secs()
                ));
                sys::kill_group(pid);
                killed_at = Some(now);
            }
            if killed_at.is_some_and(|k| now.duration_since(k) > KILL_WAIT) {
                sys::log(&format!("step {}: pid {pid} did not die after SIGKILL; moving on", step.name));
                break;
            }
        }
        poll_and_read(&mut streams, step, sink, Duration::from_millis(100))?;
    }
    for s in &mut streams {
        // Whatever is still buffered in the pipe, then the unterminated tail.
        if let Some(mut p) = s.pipe.take() {
            let mut rest = Vec::new();
            let _ = p.read_to_end(&mut rest);
            let is_stdout = s.is_stdout;
            s.lines.push(&rest, |l| handle_line(is_stdout, l, step, sink));
        }
        let is_stdout = s.is_stdout;
        s.lines.finish(|l| handle_line(is_stdout, l, step, sink));
    }
    let (exit_code, signal) = status.map_or((None, None), decode_status);
    Ok(Outcome { exit_code, signal, timed_out })
}

fn handle_line(is_stdout: bool, line: &str, step: &Step, sink: &mut Sink) {
    if is_stdout {
        if let Some(ev) = classify_stdout(&step.name, line) {
            sink.send(&ev);
            return;
        }
    }
    sys::console_line(&format!("{}{line}", labproto::step_console_prefix(&step.name)));
}

fn poll_and_read(streams: &mut [Stream], step: &Step, sink: &mut Sink, wait: Duration) -> io::Result<()> {
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut idx = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        if let Some(p) = &s.pipe {
            fds.push(libc::pollfd { fd: p.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            idx.push(i);
        }
    }
    if fds.is_empty() {
        std::thread::sleep(wait);
        return Ok(());
    }
    // SAFETY: fds is a valid array of fds.len() pollfds.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait.as_millis() as libc::c_int) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
    }
    let mut buf = [0u8; 16384];
    for (pfd, &i) in fds.iter().zip(&idx) {
        if pfd.revents == 0 {
            continue;
        }
        let s = &mut streams[i];
        let is_stdout = s.is_stdout;
        while let Some(p) = s.pipe.as_mut() {
            match p.read(&mut buf) {
                Ok(0) => {
                    s.pipe = None;
                }
                Ok(n) => s.lines.push(&buf[..n], |l| handle_line(is_stdout, l, step, sink)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    sys::log(&format!("step {}: read error: {e}", step.name));
                    s.pipe = None;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_and_tail() {
        let mut lb = LineBuf::default();
        let mut got = Vec::new();
        lb.push(b"a\nbc", |l| got.push(l.to_string()));
        lb.push(b"d\n\ne", |l| got.push(l.to_string()));
        lb.finish(|l| got.push(l.to_string()));
        assert_eq!(got, ["a", "bcd", "", "e"]);
    }

    #[test]
    fn stdout_results_get_the_step_name() {
        let line = r#"{"type":"result","case":"c","status":"pass","data":{"x":1}}"#;
        match classify_stdout("s1", line) {
            Some(Event::Result { step, case, status, .. }) => {
                assert_eq!((step.as_str(), case.as_str(), status), ("s1", "c", Status::Pass));
            }
            other => panic!("{other:?}"),
        }
        assert!(classify_stdout("s1", "hello").is_none());
        // Only results are forwarded; other events from a step are just text.
        assert!(classify_stdout("s1", r#"{"type":"done"}"#).is_none());
    }

    fn events_of(path: &std::path::Path) -> Vec<Event> {
        std::fs::read_to_string(path).unwrap().lines().filter_map(Event::parse_line).collect()
    }

    // Runs real processes on the host: output forwarding, exit status, timeout kill.
    #[test]
    fn run_steps_end_to_end() {
        let path = std::env::temp_dir().join(format!("lab-init-test-{}.jsonl", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&path).unwrap();
        let sh = |name: &str, script: &str, timeout_s| Step {
            name: name.into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout_s,
            env: [("X".to_string(), "42".to_string())].into(),
        };
        let res = r#"{"type":"result","case":"c$X","status":"pass"}"#;
        run(&sh("ok", &format!(r"echo '{res}' | sed s/\$X/$X/; echo plain; echo oops >&2; exit 3"), 10), &mut sink);
        run(&sh("slow", "sleep 30 & sleep 30; echo never", 1), &mut sink);
        run(
            &Step { name: "missing".into(), argv: vec!["/nonexistent".into()], timeout_s: 1, env: Default::default() },
            &mut sink,
        );
        let evs = events_of(&path);
        std::fs::remove_file(&path).ok();
        let kinds: Vec<String> = evs.iter().map(|e| e.to_line().split('"').nth(3).unwrap().to_string()).collect();
        assert_eq!(
            kinds,
            ["step_start", "result", "step_end", "step_start", "step_end", "step_start", "result", "step_end"]
        );
        match &evs[1] {
            Event::Result { step, case, .. } => {
                assert_eq!((step.as_str(), case.as_str()), ("ok", "c42"))
            }
            e => panic!("{e:?}"),
        }
        match &evs[2] {
            Event::StepEnd { exit_code, signal, timed_out, .. } => {
                assert_eq!((*exit_code, *signal, *timed_out), (Some(3), None, false))
            }
            e => panic!("{e:?}"),
        }
        match &evs[4] {
            Event::StepEnd { exit_code, signal, timed_out, duration_ms, .. } => {
                assert_eq!((*exit_code, *signal, *timed_out), (None, Some(libc::SIGKILL), true));
                assert!(*duration_ms < 5000.0, "{duration_ms}");
            }
            e => panic!("{e:?}"),
        }
        match &evs[6] {
            Event::Result { case, status, .. } => {
                assert_eq!((case.as_str(), *status), ("spawn", Status::Fail))
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn program_lookup() {
        assert_eq!(resolve_program("topology"), "/bin/topology");
        assert_eq!(resolve_program("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(resolve_program("./x"), "./x");
    }
}
