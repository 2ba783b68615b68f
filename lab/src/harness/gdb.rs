//! `lab gdb` (`cargo make gdb`): attach gdb-multiarch to a guest started with `--gdb`, with the
//! run's vmlinux and the kernel's own gdb helpers (scripts/gdb) loaded; or, with `--user`, to a
//! `gdbserver` in a guest started with `--gdbserver`, over the guest console `/dev/hvc0`.

use crate::harness::qemu::VmSpec;
use crate::kbuild::kernel::Built;
use crate::support::progress::note;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const GDB: &str = "gdb-multiarch";
/// What `lab gdb` needs to attach: written into the run directory when QEMU starts.
pub const GDB_TARGET: &str = "gdb-target.json";

/// What `lab gdb --user` needs: written into the run directory when QEMU starts.
pub const USER_TARGET: &str = "gdbserver-target.json";

/// Where a userspace gdbserver in the guest is reached (`--gdbserver`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct UserTarget {
    /// The socket behind the guest's `/dev/hvc0`.
    pub socket: PathBuf,
    pub qemu_pid: u32,
}

/// Where to attach gdb, for `lab gdb` and for the user.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct GdbTarget {
    pub socket: PathBuf,
    pub vmlinux: PathBuf,
    /// The kernel's vmlinux-gdb.py, if the build kept the gdb helpers.
    pub gdb_script: Option<PathBuf>,
    pub qemu_pid: u32,
}

/// With `--gdb` or `--gdbserver`: writes the run's target files and tells the user how to attach.
pub fn announce(dir: &Path, kernel: &Built, spec: &VmSpec, pid: u32) -> Result<()> {
    if let Some(socket) = spec.gdbserver.clone() {
        let t = UserTarget { socket, qemu_pid: pid };
        crate::support::fs::write_atomic(&dir.join(USER_TARGET), serde_json::to_string_pretty(&t)?.as_bytes())?;
        note(format!(
            "the guest's /dev/hvc0 is {}: run `gdbserver /dev/hvc0 PROG` in a step, then attach with \
             `cargo make gdb --user`",
            t.socket.display()
        ));
    }
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

/// A target file that names the QEMU it belongs to.
trait Target: serde::de::DeserializeOwned {
    const FILE: &'static str;
    const OPTION: &'static str;
    const START: &'static str;
    fn qemu_pid(&self) -> u32;
}

impl Target for GdbTarget {
    const FILE: &'static str = GDB_TARGET;
    const OPTION: &'static str = "--gdb";
    const START: &'static str = "cargo make run-qemu --gdb --kconfig kernel-config/extra/gdb.config";
    fn qemu_pid(&self) -> u32 {
        self.qemu_pid
    }
}

impl Target for UserTarget {
    const FILE: &'static str = USER_TARGET;
    const OPTION: &'static str = "--gdbserver";
    const START: &'static str = "cargo make run-qemu --gdbserver -- gdbserver /dev/hvc0 /bin/binder-smoke";
    fn qemu_pid(&self) -> u32 {
        self.qemu_pid
    }
}

/// The run to attach to: `run` if given, else the newest run whose QEMU still runs.
pub fn find_target(runs: &Path, run: Option<&Path>) -> Result<GdbTarget> {
    find(runs, run)
}

/// [`find_target`] for `--gdbserver` runs.
pub fn find_user_target(runs: &Path, run: Option<&Path>) -> Result<UserTarget> {
    find(runs, run)
}

fn find<T: Target>(runs: &Path, run: Option<&Path>) -> Result<T> {
    if let Some(dir) = run {
        return load(&dir.join(T::FILE));
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(runs)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join(T::FILE))
                .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    for (_, p) in found.into_iter().rev() {
        let t: T = load(&p)?;
        if alive(t.qemu_pid()) {
            return Ok(t);
        }
    }
    bail!(
        "no running guest started with {} under {}: start one in another terminal with `{}`, or name a run with --run DIR",
        T::OPTION,
        runs.display(),
        T::START
    )
}

fn load<T: Target>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: not a run started with {}", path.display(), T::OPTION))?;
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

/// gdb's argv for a guest gdbserver: the program's file comes from gdbserver itself
/// (gdb's default sysroot `target:`), so only the connection and the user's arguments. The
/// extended protocol keeps gdb connected after the program ends, so `monitor exit` can end
/// gdbserver: a host hang-up never reaches the guest's console, and gdbserver would wait.
pub fn user_argv(t: &UserTarget, extra: &[String]) -> Vec<String> {
    let mut v =
        vec![GDB.to_string(), "-q".into(), "-ex".into(), format!("target extended-remote {}", t.socket.display())];
    v.extend(extra.iter().cloned());
    v
}

/// Runs gdb in the foreground and returns its exit code; `user`: attach to the guest's
/// gdbserver instead of QEMU's gdbstub.
pub fn run(runs: &Path, run: Option<&Path>, user: bool, extra: &[String]) -> Result<i32> {
    let a = if user {
        user_argv(&find_user_target(runs, run)?, extra)
    } else {
        let t = find_target(runs, run)?;
        if t.gdb_script.is_none() {
            note("no scripts/gdb helpers in this kernel (lx-* commands missing); see kernel-config/extra/gdb.config");
        }
        argv(&t, extra)
    };
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
        // A --gdb run is not a --gdbserver run.
        let e = find_user_target(d.path(), None).unwrap_err().to_string();
        assert!(e.contains("--gdbserver"), "{e}");
    }

    #[test]
    fn user_argv_connects_to_the_guest_console() {
        let t = UserTarget { socket: "/r/hvc0.sck".into(), qemu_pid: 1 };
        assert_eq!(
            user_argv(&t, &["-batch".into()]),
            [GDB, "-q", "-ex", "target extended-remote /r/hvc0.sck", "-batch"]
        );
    }
}
