//! Busybox from Debian's busybox-static arm64 package (downloaded by the setup step).

use crate::elf;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Applets linked to /bin/busybox in the initramfs. `busybox --list` cannot run on the
/// host (aarch64 binary), so this is a fixed list of common ones; a name the build
/// lacks just prints "applet not found".
pub const BUSYBOX_APPLETS: &[&str] = &[
    "[",
    "ash",
    "awk",
    "basename",
    "cat",
    "chmod",
    "chown",
    "chrt",
    "clear",
    "cmp",
    "cp",
    "cpio",
    "cut",
    "date",
    "dd",
    "df",
    "diff",
    "dirname",
    "dmesg",
    "du",
    "echo",
    "env",
    "false",
    "find",
    "free",
    "grep",
    "gunzip",
    "gzip",
    "halt",
    "head",
    "hexdump",
    "hostname",
    "id",
    "kill",
    "killall",
    "less",
    "ln",
    "ls",
    "lsmod",
    "md5sum",
    "mkdir",
    "mknod",
    "more",
    "mount",
    "mountpoint",
    "mv",
    "nice",
    "nproc",
    "od",
    "pgrep",
    "pidof",
    "pkill",
    "poweroff",
    "printf",
    "ps",
    "pwd",
    "readlink",
    "realpath",
    "reboot",
    "renice",
    "reset",
    "rm",
    "rmdir",
    "sed",
    "seq",
    "setsid",
    "sh",
    "sha256sum",
    "sleep",
    "sort",
    "stat",
    "strings",
    "stty",
    "sync",
    "sysctl",
    "tail",
    "tar",
    "taskset",
    "tee",
    "test",
    "time",
    "timeout",
    "top",
    "touch",
    "tr",
    "true",
    "umount",
    "uname",
    "uniq",
    "uptime",
    "usleep",
    "vi",
    "watch",
    "wc",
    "which",
    "xargs",
    "xxd",
    "yes",
    "zcat",
];

/// The newest `busybox-static_*_arm64.deb` in `dir` (where the setup step downloads it).
pub fn busybox_deb_path(dir: &Path) -> Result<PathBuf> {
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {} (run cargo make setup)", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("busybox-static_") && n.ends_with("_arm64.deb"))
        })
        .collect();
    // Debian versions of one package sort well enough by name for "newest".
    debs.sort();
    debs.pop().with_context(|| format!("no busybox-static_*_arm64.deb in {}: run cargo make setup", dir.display()))
}

/// Unpacks `deb` into `out_dir` with `dpkg-deb -x` and returns the busybox binary,
/// checked to be a static aarch64 ELF.
pub fn extract_busybox(deb: &Path, out_dir: &Path) -> Result<PathBuf> {
    if !deb.is_file() {
        bail!("{} not found: run cargo make setup", deb.display());
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(out_dir)
        .output()
        .context("cannot run dpkg-deb: install dpkg (apt-get install dpkg)")?;
    if !out.status.success() {
        bail!("dpkg-deb -x {} failed: {}", deb.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    // Older packages ship bin/busybox; merged-/usr ones usr/bin/busybox.
    let bin = ["bin/busybox", "usr/bin/busybox"]
        .iter()
        .map(|r| out_dir.join(r))
        .find(|p| p.is_file())
        .with_context(|| format!("{} has no bin/busybox or usr/bin/busybox", deb.display()))?;
    elf::check_static_aarch64(&bin)?;
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn applets_are_unique_plain_names() {
        let mut v = BUSYBOX_APPLETS.to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), BUSYBOX_APPLETS.len());
        assert!(BUSYBOX_APPLETS.iter().all(|a| !a.contains('/') && !a.is_empty() && *a != "busybox"));
        assert!(BUSYBOX_APPLETS.contains(&"sh"));
    }

    #[test]
    fn finds_the_newest_deb() {
        let d = tempfile::tempdir().unwrap();
        for n in ["busybox-static_1.30.1-6_arm64.deb", "busybox-static_1.35.0-4_arm64.deb", "busybox_1.36_arm64.deb"] {
            std::fs::write(d.path().join(n), "").unwrap();
        }
        std::fs::write(d.path().join("busybox-static_1.37_amd64.deb"), "").unwrap();
        let p = busybox_deb_path(d.path()).unwrap();
        assert!(p.ends_with("busybox-static_1.35.0-4_arm64.deb"), "{}", p.display());
        let empty = tempfile::tempdir().unwrap();
        assert!(busybox_deb_path(empty.path()).unwrap_err().to_string().contains("cargo make setup"));
    }

    // Builds a tiny .deb with dpkg-deb and extracts it again.
    #[test]
    fn extracts_from_a_deb() {
        if Command::new("dpkg-deb").arg("--version").output().is_err() {
            eprintln!("skipping: no dpkg-deb");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let pkg = d.path().join("pkg");
        std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
        std::fs::create_dir_all(pkg.join("bin")).unwrap();
        std::fs::write(
            pkg.join("DEBIAN/control"),
            "Package: busybox-static\nVersion: 1.0\nArchitecture: arm64\nMaintainer: t <t@t>\nDescription: t\n",
        )
        .unwrap();
        let bb = pkg.join("bin/busybox");
        std::fs::write(&bb, elf::fake_static_aarch64()).unwrap();
        std::fs::set_permissions(&bb, std::fs::Permissions::from_mode(0o755)).unwrap();
        let deb = d.path().join("busybox-static_1.0_arm64.deb");
        let st = Command::new("dpkg-deb").args(["--root-owner-group", "-b"]).arg(&pkg).arg(&deb).output().unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));

        let out = d.path().join("out");
        let got = extract_busybox(&deb, &out).unwrap();
        assert_eq!(got, out.join("bin/busybox"));
        assert!(extract_busybox(&d.path().join("nope.deb"), &out).is_err());
    }
}
