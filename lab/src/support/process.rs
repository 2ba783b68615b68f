//! Running external tools: with captured output, or with a log and progress lines.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// The lab builds external commands with xshell's `cmd!` (each interpolated value is one
/// argument, never re-split by a shell) and runs them as `std::process::Command`s through
/// [`output`] or [`run_logged`], which add PDEATHSIG and the log. `sh()` is the shell they
/// are built in.
pub fn sh() -> xshell::Shell {
    xshell::Shell::new().expect("the current directory is readable")
}

/// True when `name` is on PATH (or is a path that exists).
pub fn have_tool(name: &str) -> bool {
    if name.contains('/') {
        return Path::new(name).exists();
    }
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file())).unwrap_or(false)
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
/// (for progress). On failure the error shows the last error lines and the log's path.
pub fn run_logged(cmd: &mut Command, log: &Path, mut on_line: impl FnMut(&str)) -> Result<()> {
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
    let spawned = cmd.stdin(Stdio::null()).stdout(writer).stderr(writer2).spawn();
    // The Command keeps the pipe's write ends until they are replaced: drop them, or the
    // reader never sees EOF.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = spawned.with_context(|| format!("starting {name}"))?;
    let mut tail: std::collections::VecDeque<String> = Default::default();
    for line in BufReader::new(reader).lines() {
        let line = line.unwrap_or_default();
        writeln!(logf, "{line}")?;
        on_line(&line);
        tail.push_back(line);
        if tail.len() > 400 {
            tail.pop_front();
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "{name} failed ({status}); last error lines:\n{}\nfull log: {}",
            error_lines(tail.make_contiguous()),
            log.display()
        );
    }
    Ok(())
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
