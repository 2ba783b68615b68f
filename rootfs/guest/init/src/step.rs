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

/// Busybox and the lab's programs first, then what `--deb` packages unpacked under /usr.
pub const PATH_DIRS: &[&str] = &["/bin", "/sbin", "/usr/bin", "/usr/sbin"];
pub const BASE_ENV: &[(&str, &str)] =
    &[("PATH", "/bin:/sbin:/usr/bin:/usr/sbin"), ("HOME", "/root"), ("TERM", "linux")];

/// argv[0] as an absolute path: names without a slash are looked up in [`PATH_DIRS`]
/// (`/bin/NAME` when none has it, so the error names the usual place).
pub fn resolve_program(arg0: &str) -> String {
    if arg0.contains('/') {
        return arg0.to_string();
    }
    PATH_DIRS
        .iter()
        .map(|d| format!("{d}/{arg0}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| format!("/bin/{arg0}"))
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

/// The process of a step (or service) reported as `name`: argv looked up, a clean environment
/// plus its own, stdout and stderr piped, and its own process group, so a timeout or a stop
/// ends everything it started.
pub fn command(step: &Step, name: &str) -> io::Result<Command> {
    let arg0 = step.argv.first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut c = Command::new(resolve_program(arg0));
    c.args(&step.argv[1..])
        .env_clear()
        .envs(BASE_ENV.iter().copied())
        .env("LAB_STEP", name)
        .envs(&step.env)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    Ok(c)
}

/// Runs `step`, reported as `name` (the plan's name, or `NAME@N` in a repeated plan), then
/// sends the files it asked for. Returns whether it failed: a non-zero exit, a signal, a
/// timeout or a failed result.
pub fn run(step: &Step, name: &str, sink: &mut Sink) -> bool {
    sink.send(&Event::StepStart { step: name.to_string() });
    sys::log(&format!("step {name}: start {:?}", step.argv));
    let start = Instant::now();
    let mut out = Output { name, sink, failed_result: false };
    let outcome = match spawn_and_watch(step, &mut out, start) {
        Ok(o) => o,
        Err(e) => {
            let msg = format!("cannot run {:?}: {e}", step.argv);
            sys::log(&format!("step {name}: {msg}"));
            out.sink.send(&Event::Result {
                step: name.to_string(),
                case: "spawn".into(),
                status: Status::Fail,
                duration_ms: 0.0,
                message: Some(msg),
                data: serde_json::Value::Null,
            });
            out.failed_result = true;
            Outcome { exit_code: None, signal: None, timed_out: false }
        }
    };
    let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    sys::log(&format!(
        "step {name}: {} in {:.0} ms",
        labproto::describe_end(outcome.exit_code, outcome.signal, outcome.timed_out, duration_ms),
        duration_ms
    ));
    crate::collect::send(name, &step.collect, out.sink);
    out.sink.send(&Event::StepEnd {
        step: name.to_string(),
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        timed_out: outcome.timed_out,
        duration_ms,
    });
    out.failed_result || outcome.timed_out || outcome.exit_code != Some(0)
}

/// Where a running step's output goes, and whether it reported a failure.
struct Output<'a> {
    name: &'a str,
    sink: &'a mut Sink,
    failed_result: bool,
}

impl Output<'_> {
    fn line(&mut self, is_stdout: bool, line: &str) {
        if is_stdout {
            if let Some(ev) = classify_stdout(self.name, line) {
                self.failed_result |= matches!(ev, Event::Result { status: Status::Fail, .. });
                self.sink.send(&ev);
                return;
            }
        }
        sys::console_line(&format!("{}{line}", labproto::step_console_prefix(self.name)));
    }
}

pub fn decode_status(st: libc::c_int) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(st) {
        (Some(libc::WEXITSTATUS(st)), None)
    } else if libc::WIFSIGNALED(st) {
        (None, Some(libc::WTERMSIG(st)))
    } else {
        (None, None)
    }
}

fn spawn_and_watch(step: &Step, out: &mut Output, start: Instant) -> io::Result<Outcome> {
    let timeout = if step.timeout_s == 0 { DEFAULT_TIMEOUT } else { Duration::from_secs(step.timeout_s) };
    let mut child = command(step, out.name)?.spawn()?;
    let pid = child.id() as libc::pid_t;
    // We reap through waitpid(-1) (PID 1 also collects orphans), never via `child`.
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    drop(child);
    sys::set_nonblocking(stdout.as_raw_fd())?;
    sys::set_nonblocking(stderr.as_raw_fd())?;
    let mut streams = [
        Stream { pipe: Some(File::from(OwnedFd::from(stdout))), lines: LineBuf::default(), is_stdout: true },
        Stream { pipe: Some(File::from(OwnedFd::from(stderr))), lines: LineBuf::default(), is_stdout: false },
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
            } else {
                // A service that ended while this step ran.
                crate::reap::reaped(p, st);
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
                    out.name,
                    timeout.as_secs()
                ));
                sys::kill_group(pid);
                killed_at = Some(now);
            }
            if killed_at.is_some_and(|k| now.duration_since(k) > KILL_WAIT) {
                sys::log(&format!("step {}: pid {pid} did not die after SIGKILL; moving on", out.name));
                break;
            }
        }
        poll_and_read(&mut streams, out, Duration::from_millis(100))?;
    }
    for s in &mut streams {
        // Whatever is still buffered in the pipe, then the unterminated tail.
        if let Some(mut p) = s.pipe.take() {
            let mut rest = Vec::new();
            let _ = p.read_to_end(&mut rest);
            let is_stdout = s.is_stdout;
            s.lines.push(&rest, |l| out.line(is_stdout, l));
        }
        let is_stdout = s.is_stdout;
        s.lines.finish(|l| out.line(is_stdout, l));
    }
    let (exit_code, signal) = status.map_or((None, None), decode_status);
    Ok(Outcome { exit_code, signal, timed_out })
}

fn poll_and_read(streams: &mut [Stream], out: &mut Output, wait: Duration) -> io::Result<()> {
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
                Ok(n) => s.lines.push(&buf[..n], |l| out.line(is_stdout, l)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    sys::log(&format!("step {}: read error: {e}", out.name));
                    s.pipe = None;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// Steps reap with waitpid(-1): tests that run processes must not run at the same time,
    /// or one reaps the other's children.
    pub(crate) static PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());

    pub(crate) fn processes() -> std::sync::MutexGuard<'static, ()> {
        PROCESSES.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn events_of(path: &std::path::Path) -> Vec<Event> {
        std::fs::read_to_string(path).unwrap().lines().filter_map(Event::parse_line).collect()
    }

    // Runs real processes on the host: output forwarding, exit status, timeout kill.
    #[test]
    fn run_steps_end_to_end() {
        let _serial = processes();
        let path = std::env::temp_dir().join(format!("lab-init-test-{}.jsonl", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&path).unwrap();
        let sh = |name: &str, script: &str, timeout_s| Step {
            name: name.into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout_s,
            env: [("X".to_string(), "42".to_string())].into(),
            ..Default::default()
        };
        let res = r#"{"type":"result","case":"c$X","status":"pass"}"#;
        let ok = sh("ok", &format!(r"echo '{res}' | sed s/\$X/$X/; echo plain; echo oops >&2; exit 3"), 10);
        assert!(run(&ok, "ok", &mut sink), "exit 3 is a failure");
        assert!(run(&sh("slow", "sleep 30 & sleep 30; echo never", 1), "slow", &mut sink));
        let missing =
            Step { name: "missing".into(), argv: vec!["/nonexistent".into()], timeout_s: 1, ..Default::default() };
        assert!(run(&missing, "missing", &mut sink));
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

    // A step passes only with exit 0 and no failed result; its LAB_STEP is the reported name.
    #[test]
    fn step_failure_and_reported_name() {
        let _serial = processes();
        let path = std::env::temp_dir().join(format!("lab-init-fail-{}.jsonl", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&path).unwrap();
        let sh = |script: &str| Step {
            name: "s".into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout_s: 10,
            ..Default::default()
        };
        assert!(!run(&sh("exit 0"), "s@2", &mut sink));
        let fail = r#"{"type":"result","case":"c","status":"fail"}"#;
        assert!(run(&sh(&format!("echo '{fail}'")), "s@3", &mut sink), "a failed result fails the step");
        let res = r#"{"type":"result","case":"$LAB_STEP","status":"pass"}"#;
        assert!(!run(&sh(&format!(r#"echo "{}""#, res.replace('"', "\\\""))), "s@4", &mut sink));
        let evs = events_of(&path);
        std::fs::remove_file(&path).ok();
        assert!(evs.contains(&Event::StepStart { step: "s@2".into() }));
        let cases: Vec<(String, String)> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Result { step, case, .. } => Some((step.clone(), case.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(cases, [("s@3".to_string(), "c".to_string()), ("s@4".into(), "s@4".into())]);
    }

    // Collected files come back whole and in order, directories recursively, with an error
    // for what cannot be read.
    #[test]
    fn collect_sends_files_back() {
        let _serial = processes();
        let d = std::env::temp_dir().join(format!("lab-init-collect-{}", std::process::id()));
        std::fs::create_dir_all(d.join("dir/sub")).unwrap();
        let big: Vec<u8> = (0..labproto::FILE_CHUNK_BYTES * 2 + 17).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(d.join("dir/big.bin"), &big).unwrap();
        std::fs::write(d.join("dir/sub/small.txt"), "hello\n").unwrap();
        let events = d.join("events.jsonl");
        std::fs::write(&events, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&events).unwrap();
        let step = Step {
            name: "c".into(),
            argv: vec!["/bin/true".into()],
            timeout_s: 10,
            collect: vec![d.join("dir").display().to_string(), d.join("missing").display().to_string()],
            ..Default::default()
        };
        assert!(!run(&step, "c", &mut sink), "collect errors do not fail the step itself");
        let evs = events_of(&events);
        let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        let mut ends = vec![];
        for e in &evs {
            match e {
                Event::FileChunk { path, offset, data, .. } => {
                    let f = files.entry(path.clone()).or_default();
                    assert_eq!(*offset as usize, f.len(), "chunks in order");
                    f.extend(labproto::decode_chunk(data).unwrap());
                }
                Event::FileEnd { path, size, error, .. } => ends.push((path.clone(), *size, error.clone())),
                _ => {}
            }
        }
        let p = |rel: &str| d.join(rel).display().to_string();
        assert_eq!(files[&p("dir/big.bin")], big);
        assert_eq!(files[&p("dir/sub/small.txt")], b"hello\n");
        assert_eq!(ends.len(), 3, "{ends:?}");
        assert_eq!(ends[0], (p("dir/big.bin"), big.len() as u64, None));
        assert!(ends[2].0 == p("missing") && ends[2].2.as_deref().unwrap().contains("cannot stat"), "{ends:?}");
        // The files come before the step's end.
        assert!(matches!(evs.last(), Some(Event::StepEnd { .. })));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn program_lookup() {
        assert_eq!(resolve_program("no-such-program-here"), "/bin/no-such-program-here");
        // On the host too: the first directory that has it.
        assert_eq!(resolve_program("sh"), "/bin/sh");
        assert_eq!(resolve_program("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(resolve_program("./x"), "./x");
    }
}
