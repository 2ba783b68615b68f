//! Step program: checks BINDER_VERSION and does one synchronous round trip between a
//! forked context manager (child) and a client (parent).
//!
//! Results: `binder_version`, `sync_round_trip`. Exit code 1 if either fails. Both
//! processes arm alarm() so a stuck ioctl kills them instead of hanging the step.

use binder::uapi::BINDER_CURRENT_PROTOCOL_VERSION;
use binder::{Binder, Error};
use labproto::{report, Status};
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

const DEVICE: &str = "/dev/binderfs/binder";
const CODE_ECHO: u32 = 1;
const PAYLOAD: &[u8] = b"binder-lab smoke payload";
const ATTEMPTS: u32 = 50;
const RETRY_SLEEP: Duration = Duration::from_millis(20);
const ALARM_S: u32 = 10;

/// What the manager does to the payload, so the client can tell a real reply.
fn transform(data: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = data.iter().rev().map(|b| b.to_ascii_uppercase()).collect();
    v.extend_from_slice(b"!");
    v
}

fn alarm(s: u32) {
    // SAFETY: alarm has no preconditions; SIGALRM's default action ends the process.
    unsafe { libc::alarm(s) };
}

fn fail(case: &str, msg: String) -> bool {
    report(case, Status::Fail, 0.0, Some(msg), serde_json::Value::Null);
    false
}

fn check_version() -> bool {
    let t = Instant::now();
    let v = match Binder::open(DEVICE).and_then(|b| b.version()) {
        Ok(v) => v,
        Err(e) => return fail("binder_version", format!("{DEVICE}: {e}")),
    };
    let ok = v == BINDER_CURRENT_PROTOCOL_VERSION;
    report(
        "binder_version",
        if ok { Status::Pass } else { Status::Fail },
        t.elapsed().as_secs_f64() * 1000.0,
        (!ok).then(|| format!("protocol_version {v}, expected {BINDER_CURRENT_PROTOCOL_VERSION}")),
        json!({ "protocol_version": v }),
    );
    ok
}

/// Child: become the context manager and answer one call. Exit status tells the parent.
fn manager() -> ! {
    alarm(ALARM_S);
    let r = (|| -> Result<(), Error> {
        let mut b = Binder::open(DEVICE)?;
        b.become_context_manager()?;
        b.enter_looper()?;
        let inc = b.serve_one(|inc| if inc.code == CODE_ECHO { transform(&inc.data) } else { Vec::new() })?;
        if inc.code != CODE_ECHO {
            return Err(Error::Protocol(format!("unexpected code {}", inc.code)));
        }
        Ok(())
    })();
    let code = match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("manager: {e}");
            2
        }
    };
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the forked child without running the parent's atexit state.
    unsafe { libc::_exit(code) }
}

fn wait_child(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer; pid is our child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    (r == pid).then(|| if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
}

/// Waits (up to a second) until the manager sleeps, in practice in its binder read: the call
/// then wakes it, so a `--trace` of this step always shows the server's wake-up (a call that
/// caught it still running showed none). Whether it did is reported, never a failure.
fn wait_asleep(pid: libc::pid_t) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows "(comm) "; 'S' is an interruptible sleep.
        if stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S')) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

fn round_trip() -> bool {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: single-threaded here, so the child may run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return fail("sync_round_trip", format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        manager();
    }
    alarm(ALARM_S);
    let asleep = wait_asleep(pid);
    let mut attempts = 0;
    let result = (|| -> Result<(Vec<u8>, Duration), Error> {
        let mut b = Binder::open(DEVICE)?;
        loop {
            attempts += 1;
            let t = Instant::now();
            match b.transact(0, CODE_ECHO, PAYLOAD, false) {
                Ok(reply) => return Ok((reply, t.elapsed())),
                // No context manager yet: the child is still starting.
                Err(Error::DeadReply | Error::FailedReply) if attempts < ATTEMPTS => std::thread::sleep(RETRY_SLEEP),
                Err(e) => return Err(e),
            }
        }
    })();
    let child = wait_child(pid);
    alarm(0);
    match result {
        Ok((reply, latency)) => {
            let want = transform(PAYLOAD);
            let ok = reply == want && child == Some(0);
            let message = (!ok).then(|| {
                format!(
                    "reply {:?} (want {:?}), manager exit {child:?}",
                    String::from_utf8_lossy(&reply),
                    String::from_utf8_lossy(&want)
                )
            });
            report(
                "sync_round_trip",
                if ok { Status::Pass } else { Status::Fail },
                latency.as_secs_f64() * 1000.0,
                message,
                json!({
                    "latency_us": latency.as_secs_f64() * 1e6,
                    "attempts": attempts,
                    "payload_len": PAYLOAD.len(),
                    "reply_len": reply.len(),
                    "manager_exit": child,
                    "manager_asleep_first": asleep,
                }),
            );
            ok
        }
        Err(e) => fail("sync_round_trip", format!("after {attempts} attempt(s): {e}; manager exit {child:?}")),
    }
}

pub fn main() {
    let v = check_version();
    let rt = round_trip();
    std::process::exit(if v && rt { 0 } else { 1 });
}

#[cfg(test)]
mod tests {
    #[test]
    fn transform_is_not_identity() {
        assert_eq!(super::transform(b"ab"), b"BA!");
    }
}
