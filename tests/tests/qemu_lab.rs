//! The lab's patched QEMU (qemu/): it builds, boots, and its plugins see each vCPU's own
//! instructions under round-robin TCG (`thread=single -smp 8`, qemu/0002).

use lab::qemu::Tcg;
use lab::qemubuild::{self, Choice};
use lab::run::{self, RunOpts};

/// Plugin counts of one run, per vCPU, by key (inline/callback, loop_inline/loop_callback).
fn counts(dir: &std::path::Path, key: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join("insns.json")).expect("the plugin wrote insns.json at exit");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[key].as_array().unwrap_or_else(|| panic!("no {key} in {text}")).iter().map(|x| x.as_u64().unwrap()).collect()
}

fn run_loops(qemu: Choice) -> run::Outcome {
    let so = qemubuild::build_plugin("lab-plugin-insns").unwrap();
    let opts = RunOpts {
        plan: "cpu-loops".into(),
        tcg: Tcg::Single,
        qemu,
        plugins: vec![format!("{},out={{run}}/insns.json", so.display())],
        ..Default::default()
    };
    run::run(&opts).unwrap()
}

/// Stock QEMU 10.0.2 aborts here (arm_mmu_idx_el: code should not be reached), or with the
/// fold alone fixed, reports every loop on the vCPU that translated it first.
#[test]
fn plugin_counts_match_loops_pinned_to_each_cpu() {
    let o = run_loops(Choice::Lab);
    assert!(o.ok(), "{}", run::summary(&o));
    // The plan's loops: 25M, 50M and 100M iterations of 2 instructions on cpus 2, 4 and 7.
    let want = [0, 0, 50_000_000, 0, 100_000_000, 0, 0, 200_000_000];
    assert_eq!(counts(&o.dir, "loop_inline"), want, "inline scoreboard counts of the spin loop per vCPU");
    assert_eq!(counts(&o.dir, "loop_callback"), want, "TB callback counts of the spin loop per vCPU");
    // All instructions: both ways agree, and each loop's vCPU ran at least its loop.
    let all = counts(&o.dir, "inline");
    assert_eq!(all, counts(&o.dir, "callback"));
    assert!(all.iter().zip(want).all(|(&a, w)| a >= w), "{all:?}");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(o.dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["qemu_choice"], "lab");
    assert_eq!(m["qemu_key"].as_str().unwrap().len(), 16);
}
