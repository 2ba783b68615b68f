//! Running external tools: with captured output, or with a log and progress lines.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support::interrupt::Interrupted;

/// The lab builds external commands with xshell's `cmd!` (each interpolated value is one
/// argument, never re-split by a shell) and runs them as `std::process::Command`s through
/// [`output`] or [`run_logged`], which add PDEATHSIG and the log. `sh()` is the shell they
/// are built in.
pub fn sh() -> xshell::Shell {
    xshell::Shell::new().expect("the current directory is readable")
}

/// True when `name` is on PATH (or is a path that exists).
pub fn have_tool(name: &str) -> bool {
    find_tool(name).is_some()
}

/// Where `name` is: itself when it is a path that exists, else its file in a PATH directory.
pub fn find_tool(name: &str) -> Option<std::path::PathBuf> {
    if name.contains('/') {
        return Path::new(name).exists().then(|| name.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A published build used this recently is never pruned: another checkout (a CI run, a
/// second worktree) may be booting it or reading its vmlinux right now.
pub const PRUNE_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Records that a published build was just used: pruning goes by last use, not by age.
/// Its directory's mtime is the record (nothing inside the artifact changes).
pub fn mark_used(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.set_modified(std::time::SystemTime::now());
    }
}

/// Keeps the `keep` most recently used published builds `<dir>/<prefix><hex key>` (always the
/// one whose key is `keep_key`), and every one used within [`PRUNE_GRACE`]; deletes the rest.
/// The key must be all hex, so `cbinder-` never matches `cbinder-spin-<key>`.
pub fn prune_builds(dir: &Path, prefix: &str, keep_key: &str, keep: usize) {
    prune_builds_at(dir, prefix, keep_key, keep, std::time::SystemTime::now())
}

fn prune_builds_at(dir: &Path, prefix: &str, keep_key: &str, keep: usize, now: std::time::SystemTime) {
    for p in prune_plan(dir, prefix, Some(keep_key), keep, now) {
        let _ = std::fs::remove_dir_all(p);
    }
}

/// The published builds `<dir>/<prefix><hex key>` that pruning removes: all but the `keep`
/// most recently used (`keep_key`'s build is always kept and counts as one of them), and
/// never one used within [`PRUNE_GRACE`] of `now`. `lab cache gc` shows and applies it.
pub fn prune_plan(
    dir: &Path,
    prefix: &str,
    keep_key: Option<&str>,
    keep: usize,
    now: std::time::SystemTime,
) -> Vec<std::path::PathBuf> {
    let ours = |name: &str| {
        name.strip_prefix(prefix).is_some_and(|k| {
            !k.is_empty() && Some(k) != keep_key && k.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    let mut builds: Vec<(std::time::SystemTime, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| ours(&e.file_name().to_string_lossy()))
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    builds.sort();
    let room = if keep_key.is_some() { keep.saturating_sub(1) } else { keep };
    let excess = builds.len().saturating_sub(room);
    builds
        .into_iter()
        .take(excess)
        .filter(|(used, _)| now.duration_since(*used).unwrap_or_default() >= PRUNE_GRACE)
        .map(|(_, p)| p)
        .collect()
}

/// Runs a command and returns its stdout; on failure the error carries stderr.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{:?} failed ({}):\n{}", cmd, out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a long command with its output going to `log`, calling `on_line` for each line
/// (for progress). On failure the error shows the last error lines and the log's path. A
/// Ctrl-C or SIGTERM ends the command with everything it started (see [`run_logged_until`])
/// and returns [`Interrupted`].
pub fn run_logged(cmd: &mut Command, log: &Path, on_line: impl FnMut(&str)) -> Result<()> {
    run_logged_until(cmd, log, on_line, &crate::support::interrupt::flag())
}

/// After a stop, how long the command's process group has between SIGTERM and SIGKILL.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// [`run_logged`], stopped when `stop` is set. The command runs in a process group of its
/// own, and a stop signals that whole group: make's recursive makes, the shells of its
/// recipes and the compilers under them, not only the make the lab started (which, signalled
/// alone, leaves a compile running). The lab's own Ctrl-C then reaches only the lab.
pub fn run_logged_until(cmd: &mut Command, log: &Path, mut on_line: impl FnMut(&str), stop: &AtomicBool) -> Result<()> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut logf = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    writeln!(logf, "$ {cmd:?}")?;
    // One pipe for both streams keeps the log in order.
    let (reader, writer) = std::io::pipe()?;
    let writer2 = writer.try_clone()?;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no parent memory. If
    // the lab dies, the tool (e.g. make, which then stops its own jobs) gets SIGTERM instead of
    // running on unsupervised next to a new build in the same directory.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let spawned = cmd.stdin(Stdio::null()).stdout(writer).stderr(writer2).spawn();
    // The Command keeps the pipe's write ends until they are replaced: drop them, or the
    // reader never sees EOF.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = spawned.with_context(|| format!("starting {name}"))?;
    let group = child.id() as libc::pid_t;
    let done = AtomicBool::new(false);
    let mut tail: std::collections::VecDeque<String> = Default::default();
    let status = std::thread::scope(|s| -> Result<std::process::ExitStatus> {
        s.spawn(|| stop_group_on(stop, &done, group));
        let read = (|| -> Result<()> {
            for line in BufReader::new(reader).lines() {
                let line = line.unwrap_or_default();
                writeln!(logf, "{line}")?;
                on_line(&line);
                tail.push_back(line);
                if tail.len() > 400 {
                    tail.pop_front();
                }
            }
            Ok(())
        })();
        let status = child.wait();
        done.store(true, Ordering::SeqCst);
        read?;
        Ok(status?)
    })?;
    if stop.load(Ordering::SeqCst) {
        return Err(anyhow::Error::new(Interrupted).context(format!("{name} stopped; its log: {}", log.display())));
    }
    if !status.success() {
        bail!(
            "{name} failed ({status}); last error lines:\n{}\nfull log: {}",
            error_lines(tail.make_contiguous()),
            log.display()
        );
    }
    Ok(())
}

/// Until `done`: when `stop` is set, SIGTERM to the process group `group`, then SIGKILL
/// after [`STOP_GRACE`] if it has not ended by then.
fn stop_group_on(stop: &AtomicBool, done: &AtomicBool, group: libc::pid_t) {
    let tick = std::time::Duration::from_millis(50);
    while !done.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
            unsafe { libc::kill(-group, libc::SIGTERM) };
            let until = std::time::Instant::now() + STOP_GRACE;
            while !done.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(tick);
            }
            if !done.load(Ordering::SeqCst) {
                // SAFETY: as above.
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
            return;
        }
        std::thread::sleep(tick);
    }
}

/// The lines worth showing from a failed build's tail: errors if any, else the last 20.
pub fn error_lines(tail: &[String]) -> String {
    let is_err = |l: &&String| {
        let l = l.to_ascii_lowercase();
        l.contains("error") || l.contains("***") || l.contains("failed")
    };
    let errs: Vec<&String> = tail.iter().filter(is_err).collect();
    let pick: Vec<&String> = if errs.is_empty() { tail.iter().collect() } else { errs };
    let n = pick.len().saturating_sub(20);
    pick[n..].iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn prune_keeps_the_recently_used_and_never_a_sibling_flavor() {
        let d = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        // (name, last used this many days ago)
        let builds = [
            ("cbinder-aaaa", 5),
            ("cbinder-bbbb", 4),
            ("cbinder-cccc", 3),
            ("cbinder-spin-dddd", 9),
            ("cbinder+12ab-eeee", 9),
            ("cbinder-ffff", 0),
            ("cbinder-0000", 8),
        ];
        for (n, ago) in builds {
            std::fs::create_dir(d.path().join(n)).unwrap();
            std::fs::File::open(d.path().join(n)).unwrap().set_modified(now - day * ago).unwrap();
        }
        // The oldest build was just used again: it now outranks two others.
        mark_used(&d.path().join("cbinder-0000"));
        prune_builds_at(d.path(), "cbinder-", "cccc", 3, now + Duration::from_secs(1));
        let mut left: Vec<String> =
            std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        left.sort();
        // Kept: the current key (cccc), the two most recently used (0000, ffff); other
        // flavors' builds are not this flavor's to prune.
        assert_eq!(left, ["cbinder+12ab-eeee", "cbinder-0000", "cbinder-cccc", "cbinder-ffff", "cbinder-spin-dddd"]);
        // Within the grace period nothing goes, however many there are.
        prune_builds_at(d.path(), "cbinder-", "cccc", 1, now + Duration::from_secs(1));
        assert!(d.path().join("cbinder-0000").exists() && d.path().join("cbinder-ffff").exists());
        // Without a current key (`lab cache gc`), the `keep` most recently used stay.
        let later = now + PRUNE_GRACE * 2;
        assert_eq!(prune_plan(d.path(), "cbinder-", None, 2, later), [d.path().join("cbinder-cccc")]);
        prune_builds_at(d.path(), "cbinder-", "cccc", 1, later);
        assert!(!d.path().join("cbinder-0000").exists() && d.path().join("cbinder-cccc").exists());
    }

    #[test]
    fn error_lines_prefers_errors() {
        let t: Vec<String> =
            ["  CC a.o", "a.c:1: error: boom", "make: *** [x] Error 1"].iter().map(|s| s.to_string()).collect();
        assert_eq!(error_lines(&t), "a.c:1: error: boom\nmake: *** [x] Error 1");
    }

    #[test]
    fn a_stop_ends_the_commands_whole_process_group() {
        let d = tempfile::tempdir().unwrap();
        let pidf = d.path().join("pid");
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (s2, p2) = (stop.clone(), pidf.clone());
        let stopper = std::thread::spawn(move || {
            while std::fs::read_to_string(&p2).map_or(true, |t| !t.ends_with('\n')) {
                std::thread::sleep(Duration::from_millis(20));
            }
            s2.store(true, Ordering::SeqCst);
        });
        // A shell (make) that waits for a grandchild (a compiler) of its own.
        let script = format!("sleep 60 & echo $! > {}; wait", pidf.display());
        let t0 = std::time::Instant::now();
        let e = run_logged_until(Command::new("sh").args(["-c", &script]), &d.path().join("x.log"), |_| {}, &stop)
            .unwrap_err();
        stopper.join().unwrap();
        assert!(e.downcast_ref::<Interrupted>().is_some(), "{e:#}");
        assert!(t0.elapsed() < Duration::from_secs(30), "the stop waited for the grandchild: {:?}", t0.elapsed());
        let pid = std::fs::read_to_string(&pidf).unwrap().trim().to_string();
        // Gone, or a zombie until init reaps it: not running. SIGKILL to the group is sent
        // before the stop returns but acts when the grandchild is next scheduled, which on a
        // loaded host can be a moment later.
        let state = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = |s: &str| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'));
        let t1 = std::time::Instant::now();
        while running(&state()) && t1.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(&state()), "the grandchild {pid} still runs 5 s after the stop: {}", state());
    }

    #[test]
    fn run_logged_reports_log_path() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("x.log");
        let mut n = 0;
        run_logged(Command::new("sh").args(["-c", "echo one; echo two"]), &log, |_| n += 1).unwrap();
        assert_eq!(n, 2);
        let e =
            run_logged(Command::new("sh").args(["-c", "echo 'fatal error: x' >&2; exit 3"]), &log, |_| {}).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("fatal error: x") && m.contains("x.log"), "{m}");
    }
}
