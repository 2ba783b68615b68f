//! Small helpers shared by the commands: hashing, atomic writes, running tools with logs.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Writes via a temporary file and rename, so readers never see half a file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().context("path has no parent")?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp{}", path.file_name().unwrap().to_string_lossy(), std::process::id()));
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// True when `name` is on PATH (or is a path that exists).
pub fn have_tool(name: &str) -> bool {
    if name.contains('/') {
        return Path::new(name).exists();
    }
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file())).unwrap_or(false)
}

/// Keeps the newest `keep` published builds `<dir>/<prefix><key>` (always the one ending in
/// `keep_key`), deleting older ones.
pub fn prune_builds(dir: &Path, prefix: &str, keep_key: &str, keep: usize) {
    let mut builds: Vec<(std::time::SystemTime, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with(prefix) && !n.ends_with(keep_key)
                })
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    builds.sort();
    let excess = builds.len().saturating_sub(keep - 1);
    for (_, p) in builds.into_iter().take(excess) {
        let _ = std::fs::remove_dir_all(p);
    }
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

/// UTC time as `20261130T041308Z`, for run directory names and manifests.
pub fn utc_stamp() -> String {
    jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// UTC time as RFC 3339 (`2026-11-30T04:13:08Z`), for reports other tools read.
pub fn rfc3339_now() -> String {
    jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod stamp_tests {
    #[test]
    fn utc_stamp_shape() {
        let s = super::utc_stamp();
        assert_eq!(s.len(), 16, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'));
        let r = super::rfc3339_now();
        assert!(r.parse::<jiff::Timestamp>().is_ok() && r.ends_with('Z') && r.len() == 20, "{r}");
    }
}
