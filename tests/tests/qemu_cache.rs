//! The cache cost plugin (`--cache`: qemu/plugins/cache with the board's `[cache_model]`,
//! charging through qemu/0004): it counts per CPU, and binder calls between two clusters are
//! charged more guest time than calls within one.

use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::harness::qemu::Tcg;
use lab::kbuild::qemu::Choice;
use lab::report::run_and_report;
use lab::report::summary::summary;
use lab_tests::assert_ok;

/// sa8155p with every cluster at the gold's speed: same- and cross-cluster calls then differ
/// only in where the other CPU sits, not in how fast it runs.
fn one_speed_board(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../board/sa8155p.toml")).unwrap();
    let from = "[timing]\n";
    assert!(text.contains(from), "board/sa8155p.toml has no [timing]");
    let text = text.replace(from, &format!("{from}ps_per_insn = {{ silver = 413, gold = 413, prime = 413 }}\n"));
    let path = dir.join("one-speed.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn sharing(board: &str, cache: bool, plugins: Vec<String>) -> Outcome {
    let opts = RunOpts {
        board: board.into(),
        plan: "cache-sharing".into(),
        tcg: Tcg::Hicount,
        qemu: Choice::Lab,
        cache,
        plugins,
        ..Default::default()
    };
    let o = run_and_report(&opts).unwrap();
    assert_ok(&o);
    o
}

/// Mean guest µs per call of step `step`.
fn call_us(o: &Outcome, step: &str) -> f64 {
    o.events
        .iter()
        .find_map(|e| match e {
            labproto::Event::Result { step: s, case, data, .. } if s == step && case == "scan_cost" => {
                data["rows"][0]["avg_us"].as_f64()
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {step}/scan_cost result:\n{}", summary(o)))
}

#[test]
fn cache_counts_per_cpu_and_charges_cross_cluster_calls_more() {
    let tmp = tempfile::tempdir().unwrap();
    let board = one_speed_board(tmp.path());
    let (plain, cached) = (sharing(&board, false, vec![]), sharing(&board, true, vec![]));
    let text = std::fs::read_to_string(cached.dir.join(lab::harness::prepare::CACHE_COUNTERS)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["refused"], 0, "QEMU refused charges under hicount: {text}");
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 8, "{text}");
    for (i, c) in cpus.iter().enumerate() {
        let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("cpu{i} has no {k}: {text}"));
        assert!(n("l1d_refs") > n("l1d_misses") && n("l1d_misses") > 0, "cpu{i}: {c}");
        assert!(n("l2_refs") == n("l1d_misses") && n("l2_misses") >= n("l3_refs"), "cpu{i}: {c}");
        assert!(n("charged_ns") > 0, "cpu{i}: {c}");
    }
    // The client on cpu1 gets the server's (cpu0's) lines from its cluster; on cpu4 from another.
    let n = |cpu: usize, k: &str| cpus[cpu][k].as_u64().unwrap();
    assert!(n(1, "same_cluster_transfers") > n(1, "cross_cluster_transfers"), "{text}");
    assert!(n(4, "cross_cluster_transfers") > n(4, "same_cluster_transfers"), "{text}");
    // Without the plugin the two placements cost the same here (one speed everywhere); the
    // cache makes the cross-cluster call dearer than the same-cluster one.
    let gap = |o: &Outcome| call_us(o, "cross-cluster") - call_us(o, "same-cluster");
    let (without, with) = (gap(&plain), gap(&cached));
    assert!(with - without > 0.2, "cross minus same cluster: {with:.3} µs with the cache, {without:.3} µs without");
    assert!(call_us(&cached, "same-cluster") > call_us(&plain, "same-cluster"), "the cache charged nothing");
    // And it is the cross-cluster price that does it, not only where the lines come from: the
    // same model with cross-cluster transfers at the same-cluster price narrows the gap.
    let flat = flat_price_plugin(&board, tmp.path());
    let one_price = gap(&sharing(&board, false, vec![flat]));
    assert!(with - one_price > 0.1, "cross minus same cluster: {with:.3} µs, {one_price:.3} µs at one price");
}

/// The cache plugin with the board's model, except cross-cluster transfers priced as
/// same-cluster ones.
fn flat_price_plugin(board: &str, dir: &std::path::Path) -> String {
    let mut model = board::Board::load(std::path::Path::new(board)).unwrap().cache_model().unwrap().clone();
    for c in &mut model.cpus {
        c.cost_ps.cross_cluster = c.cost_ps.same_cluster;
    }
    let config = dir.join("flat-price.json");
    std::fs::write(&config, serde_json::to_string(&model).unwrap()).unwrap();
    let so = lab::kbuild::qemu::build_plugin("lab-plugin-cache").unwrap();
    format!("{},config={},out={{run}}/cache.json", so.display(), config.display())
}

#[test]
fn cache_is_refused_without_hicount() {
    let opts = RunOpts { cache: true, qemu: Choice::Lab, tcg: Tcg::Icount, ..Default::default() };
    let e = run_and_report(&opts).expect_err("--cache under icount must fail");
    assert!(format!("{e:#}").contains("add --qemu lab --tcg hicount"), "{e:#}");
}
