//! `--dvfs`: the board's clusters as frequency domains of the lab QEMU's emulated
//! qcom,cpufreq-hw (qemu/0011), driven by the unchanged upstream qcom-cpufreq-hw driver.
//! The plan's topology step checks three policies with the board's OPPs, schedutil and an
//! energy model with every OPP (the run fails on a mismatch); under `--tcg hicount` an OPP
//! change changes the domain's speed (qemu/0010).

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::harness::qemu::Tcg;
use lab::kbuild::qemu::Choice;
use lab::report::run_and_report;
use lab::report::summary::summary;
use lab_tests::assert_ok;

fn dvfs(tcg: Tcg) -> RunOpts {
    RunOpts { plan: "dvfs".into(), tcg, qemu: Choice::Lab, dvfs: true, ..Default::default() }
}

/// Guest ns of the loop on cpu0 in step `step`.
fn loop_ns(o: &Outcome, step: &str) -> f64 {
    o.events
        .iter()
        .find_map(|e| match e {
            labproto::Event::Result { step: s, case, data, .. } if s == step && case == "cpu0" => data["ns"].as_f64(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {step}/cpu0 result:\n{}", summary(o)))
}

/// With the userspace governor at three silver OPPs a pinned loop's guest time is
/// instructions x ps_per_insn(f), so time x f is the same at each (within 1%); and the same
/// boot twice gives the same bytes.
#[test]
fn hicount_loop_time_scales_as_one_over_f() {
    let o = run_and_report(&dvfs(Tcg::Hicount)).unwrap();
    assert_ok(&o);
    let at = |khz: u32| loop_ns(&o, &format!("opp-{khz}")) * f64::from(khz);
    let top = at(1_785_600);
    for khz in [300_000, 1_036_800] {
        let r = at(khz) / top;
        assert!((r - 1.0).abs() < 0.01, "time x f at {khz} kHz is {r:.4} x the top OPP's");
    }
    let again = run_and_report(&dvfs(Tcg::Hicount)).unwrap();
    for f in ["results.jsonl", "console.log"] {
        let read = |o: &Outcome| std::fs::read(o.dir.join(f)).unwrap();
        assert!(read(&o) == read(&again), "{f} differs: {} vs {}", o.dir.display(), again.dir.display());
    }
}

/// Without heterogeneous icount the device still works (the policies, OPPs and energy
/// model check passes) and changes no time.
#[test]
fn plain_tcg_runs_the_driver() {
    assert_ok(&run_and_report(&dvfs(Tcg::Single)).unwrap());
}
