//! `lab gdb` (`cargo make gdb`): attach gdb-multiarch to a guest started with `--gdb`, with the
//! run's vmlinux and the kernel's own gdb helpers (scripts/gdb) loaded.

use crate::harness::qemu::VmSpec;
use crate::kbuild::kernel::Built;
use crate::support::progress::note;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const GDB: &str = "gdb-multiarch";
/// What `lab gdb` needs to attach: written into the run directory when QEMU starts.
pub const GDB_TARGET: &str = "gdb-target.json";

/// Where to attach gdb, for `lab gdb` and for the user.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct GdbTarget {
    pub socket: PathBuf,
    pub vmlinux: PathBuf,
    /// The kernel's vmlinux-gdb.py, if the build kept the gdb helpers.
    pub gdb_script: Option<PathBuf>,
    pub qemu_pid: u32,
}

/// With `--gdb`: writes the run's gdb target file and tells the user how to attach.
pub fn announce(dir: &Path, kernel: &Built, spec: &VmSpec, pid: u32) -> Result<()> {
    let Some(socket) = spec.gdb.clone() else { return Ok(()) };
    let t = GdbTarget { socket, vmlinux: kernel.vmlinux(), gdb_script: kernel.gdb_script(), qemu_pid: pid };
    crate::support::fs::write_atomic(&dir.join(GDB_TARGET), serde_json::to_string_pretty(&t)?.as_bytes())?;
    note(format!(
        "QEMU is halted with a gdbstub on {}; attach with `cargo make gdb` (no timeouts apply)",
        t.socket.display()
    ));
    if t.gdb_script.is_none() {
        note(
            "this kernel has no DWARF or gdb helpers; for variables and lx-* commands boot with \
             --kconfig kernel-config/extra/gdb.config",
        );
    }
    Ok(())
}

/// The run to attach to: `run` if given, else the newest run whose QEMU still runs.
pub fn find_target(runs: &Path, run: Option<&Path>) -> Result<GdbTarget> {
    if let Some(dir) = run {
        return load(&dir.join(GDB_TARGET));
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(runs)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join(GDB_TARGET))
                .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    for (_, p) in found.into_iter().rev() {
        let t = load(&p)?;
        if alive(t.qemu_pid) {
            return Ok(t);
        }
    }
    bail!(
        "no running guest waits for gdb under {}: start one in another terminal with \
         `cargo make run-qemu --gdb --kconfig kernel-config/extra/gdb.config`, or name a run with --run DIR",
        runs.display()
    )
}

fn load(path: &Path) -> Result<GdbTarget> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("{}: not a run started with --gdb", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a gdb target file", path.display()))
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// gdb's argv: vmlinux, the helpers, the connection, then the user's own arguments.
pub fn argv(t: &GdbTarget, extra: &[String]) -> Vec<String> {
    let mut v = vec![GDB.to_string(), "-q".into(), t.vmlinux.display().to_string()];
    if let Some(script) = &t.gdb_script {
        v.extend(["-ex".into(), format!("source {}", script.display())]);
    }
    v.extend(["-ex".into(), format!("target remote {}", t.socket.display())]);
    v.extend(extra.iter().cloned());
    v
}

/// Runs gdb in the foreground and returns its exit code.
pub fn run(runs: &Path, run: Option<&Path>, extra: &[String]) -> Result<i32> {
    let t = find_target(runs, run)?;
    if t.gdb_script.is_none() {
        note("no scripts/gdb helpers in this kernel (lx-* commands missing); see kernel-config/extra/gdb.config");
    }
    let a = argv(&t, extra);
    let st = Command::new(&a[0])
        .args(&a[1..])
        .status()
        .with_context(|| format!("starting {GDB}; install it with `cargo make setup`"))?;
    Ok(st.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(pid: u32) -> GdbTarget {
        GdbTarget {
            socket: "/r/gdb.sock".into(),
            vmlinux: "/k/vmlinux".into(),
            gdb_script: Some("/k/gdb/vmlinux-gdb.py".into()),
            qemu_pid: pid,
        }
    }

    #[test]
    fn argv_loads_symbols_helpers_then_connects() {
        let a = argv(&target(1), &["-batch".into()]);
        assert_eq!(
            a,
            [
                GDB,
                "-q",
                "/k/vmlinux",
                "-ex",
                "source /k/gdb/vmlinux-gdb.py",
                "-ex",
                "target remote /r/gdb.sock",
                "-batch"
            ]
        );
        let mut t = target(1);
        t.gdb_script = None;
        assert!(!argv(&t, &[]).iter().any(|x| x.starts_with("source")));
    }

    #[test]
    fn finds_the_newest_live_run() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, pid: u32| {
            let dir = d.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(GDB_TARGET), serde_json::to_string(&target(pid)).unwrap()).unwrap();
        };
        let e = find_target(d.path(), None).unwrap_err().to_string();
        assert!(e.contains("--gdb"), "{e}");
        // A QEMU that is gone does not count; this test process is alive.
        write("a", std::process::id());
        std::thread::sleep(std::time::Duration::from_millis(20));
        write("b", u32::MAX / 2);
        assert_eq!(find_target(d.path(), None).unwrap().qemu_pid, std::process::id());
        assert_eq!(find_target(d.path(), Some(&d.path().join("b"))).unwrap().qemu_pid, u32::MAX / 2);
        assert!(find_target(d.path(), Some(Path::new("/nonexistent"))).is_err());
    }
}
