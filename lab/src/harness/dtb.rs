//! QEMU's own virt DTB for a board, dumped once per machine/cpu/smp/memory and QEMU version
//! and cached; `board` then replaces its /cpus.

use crate::harness::qemu::version_of;
use crate::support::artifact::{self, Kind, Reuse};
use crate::support::fs::{publish_dir, sha256_hex};
use anyhow::{anyhow, bail, Context, Result};
use board::Board;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long QEMU may take to dump a DTB (it exits right after building the machine).
const DUMP_TIMEOUT: Duration = Duration::from_secs(60);

/// The DTB's name inside its artifact directory.
const DTB: &str = "virt.dtb";

/// Path to `qemu-system-aarch64`'s DTB dump, cached per machine/cpu/smp/memory and QEMU
/// version: one artifact directory with the DTB and its manifest (support::artifact).
pub fn qemu_dtb(cache: &Path, board: &board::Board, binary: &Path) -> Result<PathBuf> {
    let ver = version_of(binary)?;
    let key = sha256_hex(format!("{}\n{ver}", board::qemu_dtb_key(board)).as_bytes());
    let dir = Kind::Dtb.root(cache).join(format!("qemu-virt-{}", &key[..16]));
    if dir.exists() && artifact::reuse(Kind::Dtb, &dir)? == Reuse::Use {
        crate::support::process::mark_used(&dir);
        return Ok(dir.join(DTB));
    }
    publish_dir(&dir, |tmp| {
        dump_qemu_dtb(binary, board, &tmp.join(DTB))?;
        artifact::seal(tmp)
    })?;
    Ok(dir.join(DTB))
}

/// Runs QEMU only to dump its DTB for the board's machine/cpu/smp/memory into `out`.
///
/// `-nic none` keeps QEMU from loading the default NIC's option ROM (efi-virtio.rom,
/// absent on some hosts); a PCI NIC never appears in the DTB anyway.
pub fn dump_qemu_dtb(qemu: &Path, board: &Board, out: &Path) -> Result<()> {
    let out_str = out.to_str().ok_or_else(|| anyhow!("{}: DTB output path is not UTF-8", out.display()))?;
    // QEMU option values escape ',' by doubling it.
    let machine = format!("{},dumpdtb={}", board.qemu_machine(), out_str.replace(',', ",,"));
    let _ = std::fs::remove_file(out);
    let mut cmd = Command::new(qemu);
    cmd.args(["-M", &machine, "-cpu", board.qemu_cpu()])
        .args(["-smp", &board.smp().to_string(), "-m", board.memory()])
        .args(["-nographic", "-nic", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", qemu.display()))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > DUMP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{shown} did not exit within {DUMP_TIMEOUT:?} (does this QEMU support dumpdtb?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output()?;
    if !status.success() {
        bail!("{shown} failed ({status}): {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    let dtb = std::fs::read(out).with_context(|| format!("{shown} exited 0 but wrote no {}", out.display()))?;
    board::dtb_to_dts(&dtb).with_context(|| format!("{}: QEMU wrote an invalid DTB", out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::opts::load_board;
    use crate::harness::qemu::QEMU;
    use crate::support::process::have_tool;
    use board::generate_dtb;
    use dtoolkit::fdt::Fdt;
    use dtoolkit::model::DeviceTree;

    /// QEMU 10's virt DTB for sa8155p's machine/cpu/smp/memory, recorded in board/.
    const FIXTURE: &[u8] = include_bytes!("../../../board/tests/fixtures/virt-gicv3-a76-smp8-2G.dtb");

    /// Whether QEMU is there; without it the test is skipped with a message, except where
    /// it must run (`CI`, or `LAB_REQUIRE_QEMU`, which `lab test` sets): there it fails.
    fn qemu_present() -> bool {
        if have_tool(QEMU) {
            return true;
        }
        let required = std::env::var_os("CI").is_some() || std::env::var_os("LAB_REQUIRE_QEMU").is_some();
        assert!(!required, "no {QEMU} on PATH: install it with `cargo make setup`");
        eprintln!("skipped: no {QEMU} on PATH (`cargo make setup` installs it)");
        false
    }

    fn sa8155p() -> Board {
        load_board("sa8155p").unwrap()
    }

    /// QEMU's current dump equals the committed fixture except /chosen's random seeds.
    #[test]
    fn dump_matches_fixture_when_qemu_present() {
        if !qemu_present() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a,b.dtb"); // a comma exercises QEMU's ',,' escaping
        dump_qemu_dtb(Path::new(QEMU), &sa8155p(), &out).unwrap();
        let dumped = std::fs::read(&out).unwrap();
        let mut a = DeviceTree::from_fdt(&Fdt::new(&dumped).unwrap());
        let mut b = DeviceTree::from_fdt(&Fdt::new(FIXTURE).unwrap());
        for t in [&mut a, &mut b] {
            let chosen = t.root.child_mut("chosen").unwrap();
            chosen.remove_property("rng-seed");
            chosen.remove_property("kaslr-seed");
        }
        assert_eq!(a, b, "QEMU's virt DTB changed: re-record the fixture");
    }

    /// QEMU accepts the generated DTB: with a missing kernel, the kernel is all it complains about.
    #[test]
    fn qemu_accepts_generated_dtb() {
        if !qemu_present() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dtb = dir.path().join("sa8155p.dtb");
        std::fs::write(&dtb, generate_dtb(&sa8155p(), FIXTURE).unwrap()).unwrap();
        let out = std::process::Command::new(QEMU)
            .args(["-M", "virt,gic-version=3", "-cpu", "cortex-a76", "-smp", "8", "-m", "2G"])
            .args(["-nographic", "-nic", "none", "-dtb"])
            .arg(&dtb)
            .args(["-kernel", "/nonexistent/Image"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("/nonexistent/Image"), "{err}");
        assert!(!err.to_lowercase().contains("dtb"), "{err}");
    }
}
