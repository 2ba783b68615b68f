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

/// The loop on cpu0 in step `step`: `key` of its result (`ns`, `cycles`).
fn loop_value(o: &Outcome, step: &str, key: &str) -> f64 {
    o.events
        .iter()
        .find_map(|e| match e {
            labproto::Event::Result { step: s, case, data, .. } if s == step && case == "cpu0" => data[key].as_f64(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {step}/cpu0 {key}:\n{}", summary(o)))
}

/// Guest ns of the loop on cpu0 in step `step`.
fn loop_ns(o: &Outcome, step: &str) -> f64 {
    loop_value(o, step, "ns")
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
    // Cycles follow the clock (qemu/0014-0015): the PMU counts the loop's time x f, the
    // same number of cycles at every OPP.
    for khz in [300_000, 1_036_800, 1_785_600] {
        let step = format!("opp-{khz}");
        let cycles = loop_value(&o, &step, "cycles");
        let r = cycles / (loop_ns(&o, &step) * f64::from(khz) / 1e6);
        assert!((r - 1.0).abs() < 0.01, "{step}: {cycles} cycles are {r:.4} x time x f");
        let top = loop_value(&o, "opp-1785600", "cycles");
        assert!((cycles / top - 1.0).abs() < 0.01, "{step}: {cycles} cycles against {top} at the top OPP");
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

fn idle(states: bool) -> RunOpts {
    RunOpts { plan: "idle".into(), tcg: Tcg::Hicount, qemu: Choice::Lab, idle: states, ..Default::default() }
}

/// The wake-latency result of step `step`.
fn wake(o: &Outcome, step: &str) -> serde_json::Value {
    o.events
        .iter()
        .find_map(|e| match e {
            labproto::Event::Result { step: s, data, .. } if s == step => Some(data.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {step} result:\n{}", summary(o)))
}

/// `--idle`: a periodic sleeper's wake-ups on an idle silver and gold CPU come from the power
/// collapse state cpuidle chose (its usage count) and each pays that state's exit latency
/// (qemu/0013): the median wake-up latency is the exit latency longer than without states.
/// Two boots with states give the same bytes.
#[test]
fn hicount_idle_wakeups_pay_the_exit_latency() {
    let with = run_and_report(&idle(true)).unwrap();
    assert_ok(&with);
    let without = run_and_report(&idle(false)).unwrap();
    assert_ok(&without);
    for (step, state, exit_ns) in
        [("wake-silver", "little-rail-power-collapse", 909_000), ("wake-gold", "big-rail-power-collapse", 1_461_000)]
    {
        let (w, n) = (wake(&with, step), wake(&without, step));
        let used = w["idle_usage"][state].as_u64().unwrap_or_else(|| panic!("{step}: no {state} in {w}"));
        assert!(used >= 45, "{step}: cpuidle chose {state} for {used} of 50 wake-ups: {w}");
        assert!(n["idle_usage"].get(state).is_none(), "{step}: {state} without --idle: {n}");
        let extra = w["p50_ns"].as_i64().unwrap() - n["p50_ns"].as_i64().unwrap();
        assert!(
            (exit_ns..exit_ns + 100_000).contains(&extra),
            "{step}: the median wake-up is {extra} ns longer with idle states, expected {exit_ns} ns (+ < 100 us): \
             with {w}, without {n}"
        );
    }
    let again = run_and_report(&idle(true)).unwrap();
    for f in ["results.jsonl", "console.log"] {
        let read = |o: &Outcome| std::fs::read(o.dir.join(f)).unwrap();
        assert!(read(&with) == read(&again), "{f} differs: {} vs {}", with.dir.display(), again.dir.display());
    }
}

/// Picoseconds of a silver L3 hit that are the DSU's, not the core's: the part of the
/// cache cost that does not follow the core clock (`board/src/cache_model.rs`).
fn silver_dsu_l3_ps() -> f64 {
    let b = board::Board::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../board/sa8155p.toml")))
        .unwrap();
    let cpu0 = &b.cache_model().expect("sa8155p has [cache_model]").cpus[0];
    (cpu0.cost_ps.l3 - cpu0.core_ps.l3) as f64
}

/// `--dvfs --cache`: the cache plugin converts the core's own cycles at the vCPU's current
/// clock (qemu/0016), the DSU's part of a load that leaves the core at its own. A walk over a
/// buffer that fits the silver L2 but not the L1D (all L2 hits) takes time x f the same at
/// 300 and 1785.6 MHz (within 1%); one over a buffer that fits only the L3 spends, per load, a
/// part that does not scale with 1/f: the DSU's ps of an L3 hit (within 5%).
#[test]
fn hicount_cache_costs_follow_the_clock() {
    let opts = RunOpts { plan: "dvfs-cache".into(), cache: true, ..dvfs(Tcg::Hicount) };
    let o = run_and_report(&opts).unwrap();
    assert_ok(&o);
    let counters = std::fs::read_to_string(o.dir.join(lab::harness::prepare::CACHE_COUNTERS)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&counters).unwrap();
    let (l2, l3) = (v["cpus"][0]["charged_l2"].as_u64().unwrap(), v["cpus"][0]["charged_l3"].as_u64().unwrap());
    assert!(l2 >= 2_000_000 && l3 >= 2_000_000, "cpu0 had {l2} L2 and {l3} L3 hits, want 2 M each: {counters}");
    // (time, loads) of a walk at `khz`.
    let walk = |level: &str, khz: u32| {
        let step = format!("{level}-{khz}");
        (loop_ns(&o, &step), loop_value(&o, &step, "iters"))
    };
    let (lo, hi) = (300_000.0, 1_785_600.0);
    let ((l2_lo, _), (l2_hi, _)) = (walk("l2", 300_000), walk("l2", 1_785_600));
    let r = l2_lo * lo / (l2_hi * hi);
    assert!((r - 1.0).abs() < 0.01, "the L2 walk's time x f at 300 MHz is {r:.4} x the top OPP's");
    // time(f) = core cycles / f + loads x DSU ps: two clocks give the DSU's part.
    let ((l3_lo, loads), (l3_hi, _)) = (walk("l3", 300_000), walk("l3", 1_785_600));
    let dsu_ps = (l3_hi * hi - l3_lo * lo) / (hi - lo) / loads * 1000.0;
    let want = silver_dsu_l3_ps();
    assert!((dsu_ps / want - 1.0).abs() < 0.05, "the L3 walk's fixed part is {dsu_ps:.0} ps per load, want {want} ps");
}
