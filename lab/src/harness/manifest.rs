//! `manifest.json` of a run: host, QEMU, kernel, board, command line and a reproducer.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::{Outcome, Verdict};
use crate::harness::prepare::Prepared;
use crate::harness::qemu::{self, Tcg, VmSpec};
use crate::support::fs::{sha256_file, write_atomic};
use crate::support::stamp::utc_stamp;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

#[derive(Serialize)]
struct Manifest<'a> {
    started_utc: String,
    host_cpu: String,
    host_cpus: usize,
    host_loadavg: String,
    qemu: String,
    /// `system` or `lab`, and the lab build's content key.
    qemu_choice: crate::kbuild::qemu::Choice,
    qemu_key: Option<&'a str>,
    plugins: &'a [String],
    kernel_flavor: &'a str,
    kernel_release: String,
    kernel_key: &'a str,
    /// The kernel's artifact directory (Image, System.map, vmlinux), for tools that need the
    /// exact kernel that ran (`lab profile`, gdb).
    kernel_dir: &'a Path,
    kernel_config_sha256: String,
    board: &'a str,
    board_file_sha256: String,
    /// The board's energy model was in the DTB (EAS on).
    eas: bool,
    /// The scheduler policy (`mainline` or `phone`) and the files the init wrote for it.
    policy: board::Policy,
    policy_settings: &'a [labproto::Setting],
    plan: &'a str,
    cmdline: &'a str,
    tcg: Tcg,
    vcpu_threads: &'a [(i64, i64)],
    pinned: bool,
    boot_s: Option<f64>,
    wall_s: f64,
    verdict: &'a Verdict,
    /// QEMU's bad exit after the guest's clean power-off (the run still counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    emulator_fault: Option<&'a str>,
    reproducer: String,
}

pub fn write_manifest(
    dir: &Path,
    p: &Prepared,
    spec: &VmSpec,
    o: &Outcome,
    vcpus: &[(i64, i64)],
    opts: &RunOpts,
) -> Result<()> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let host_cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let m = Manifest {
        started_utc: utc_stamp(),
        host_cpu,
        host_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        host_loadavg: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
        qemu: qemu::version_of(&p.qemu).unwrap_or_default(),
        qemu_choice: opts.qemu_choice(),
        qemu_key: p.qemu_key.as_deref(),
        plugins: &spec.plugins,
        kernel_flavor: &p.kernel.flavor,
        kernel_release: p.kernel.kernel_release(),
        kernel_key: &p.kernel.key,
        kernel_dir: &p.kernel.dir,
        kernel_config_sha256: sha256_file(&p.kernel.config()).unwrap_or_default(),
        board: p.board.name(),
        board_file_sha256: p.board_sha256.clone(),
        eas: p.board.has_eas(),
        policy: opts.policy.unwrap_or(p.board.default_policy()),
        policy_settings: &p.plan.settings,
        plan: &p.plan.name,
        cmdline: &spec.append,
        tcg: opts.tcg,
        vcpu_threads: vcpus,
        pinned: opts.pin,
        boot_s: o.boot_s,
        wall_s: o.wall_s,
        verdict: &o.verdict,
        emulator_fault: o.emulator_fault.as_deref(),
        reproducer: qemu::shell_line(&spec.argv()),
    };
    write_atomic(&dir.join("manifest.json"), serde_json::to_string_pretty(&m)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::opts::load_board_file;
    use crate::harness::outcome::tests::three_problems;
    use crate::harness::prepare::vm_spec;
    use crate::harness::qemu::Console;
    use crate::kbuild::kernel::Built;

    #[test]
    fn board_hash_is_the_file_contents() {
        let d = tempfile::tempdir().unwrap();
        let (board, board_sha256) = load_board_file("sa8155p", None, None).unwrap();
        let p = Prepared {
            kernel: Built { flavor: "perf".into(), key: "0123456789abcdef".into(), dir: d.path().into() },
            board,
            board_sha256,
            dtb: d.path().join("board.dtb"),
            initrd: d.path().join("initramfs.cpio"),
            plan: labproto::Plan { name: "default".into(), ..Default::default() },
            qemu: crate::harness::qemu::QEMU.into(),
            qemu_key: None,
            cache_plugin: None,
            dvfs: false,
            idle: false,
        };
        let opts = RunOpts::default();
        let spec = vm_spec(&p, &opts, d.path(), Console::Pipe).unwrap();
        write_manifest(d.path(), &p, &spec, &three_problems(), &[], &opts).unwrap();
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("manifest.json")).unwrap()).unwrap();
        let file = crate::support::paths::board_dir().join("sa8155p.toml");
        assert_eq!(m["board_file_sha256"], sha256_file(&file).unwrap());
        assert_eq!(m["board"], "sa8155p");
        assert_eq!(m["policy"], "phone");
    }
}
