//! `[cache_model]`: the latencies of the cache plugin (`qemu/plugins/cache`, `--cache`), per
//! cluster in the core's own cycles (load-to-use), and DRAM in ns. The geometry is the
//! board's: each cluster's `l1d` and `l2`, and the shared `[l3]`.
//!
//! Cycles become picoseconds at `ps_per_insn x capacity_dmips_mhz / 1024` of the CPU's
//! `[timing]`: the time of one instruction of a capacity-1024 core at ipc 1. With the
//! derived `ps_per_insn` that is `1 / (max_mhz x ipc_1024)`, the real clock period when
//! `ipc_1024 = 1`, and an override of `ps_per_insn` scales the cache costs with it, so they
//! stay in proportion to instruction time. DRAM's ns become cycles at `max_mhz`.
//!
//! Those costs are at the cluster's top clock. The core's own part of each (`core_ps`: an L2
//! hit, and the L2 look-up before anything farther) is in the core's cycles, so under
//! `--dvfs` the plugin converts it at the vCPU's current clock (qemu/0016); the DSU's L3, its
//! snoops and DRAM run on their own clocks and cost the same time at every core OPP.

use lab_cache_model::{Config, Costs, CpuConfig, Cycles, Geometry, L2Policy};

use crate::error::{BoardError, Ctx};
use crate::model::{Cache, Cluster, Timing};
use crate::schema::{CacheModelFile, CyclesFile};

fn bad(cx: &Ctx<'_>, f: &str, p: String, fix: &str) -> BoardError {
    cx.err(format!("cache_model.{f}"), p, fix)
}

fn geometry(cx: &Ctx<'_>, c: Option<Cache>, field: &str) -> Result<Geometry, BoardError> {
    let c = c.ok_or_else(|| {
        cx.err(field, "missing, but the board has [cache_model]", "describe the cache's size_kib, line_bytes and ways")
    })?;
    Ok(Geometry { size_kib: c.size_bytes / 1024, ways: c.ways })
}

fn cycles(cx: &Ctx<'_>, name: &str, f: &CyclesFile, dram_ns: f64, cluster: &Cluster) -> Result<Cycles, BoardError> {
    let all = [
        ("l1d", f.l1d),
        ("l2", f.l2),
        ("l3", f.l3),
        ("same_cluster", f.same_cluster),
        ("cross_cluster", f.cross_cluster),
    ];
    if let Some((k, v)) = all.iter().find(|(_, v)| !(v.is_finite() && *v >= 1.0 && *v <= 1000.0)) {
        return Err(bad(
            cx,
            &format!("cycles.{name}.{k}"),
            format!("{v} cycles is out of range"),
            "use load-to-use cycles in 1..=1000",
        ));
    }
    // A farther level cannot be faster, and a transfer from another core follows a miss in
    // this core's own L2 (the clock-following split of the costs relies on it).
    let order = [
        (
            f.l1d <= f.l2 && f.l2 <= f.l3,
            format!("l1d {} / l2 {} / l3 {} do not grow", f.l1d, f.l2, f.l3),
            "a farther level cannot be faster: l1d <= l2 <= l3",
        ),
        (
            f.l2 <= f.same_cluster && f.l2 <= f.cross_cluster,
            format!("same_cluster {} / cross_cluster {} are below l2 {}", f.same_cluster, f.cross_cluster, f.l2),
            "another core's line comes after an own-L2 miss: same_cluster and cross_cluster >= l2",
        ),
    ];
    if let Some((_, problem, fix)) = order.into_iter().find(|(ok, ..)| !ok) {
        return Err(bad(cx, &format!("cycles.{name}"), problem, fix));
    }
    let dram = dram_ns * f64::from(cluster.max_khz) / 1e6;
    Ok(Cycles { l1d: f.l1d, l2: f.l2, l3: f.l3, same_cluster: f.same_cluster, cross_cluster: f.cross_cluster, dram })
}

/// How the core's L2 holds its L1D's lines, from its Technical Reference Manual (see
/// [`L2Policy`]); the model knows the two cores the boards use.
fn l2_policy(cx: &Ctx<'_>, core: &str, i: usize) -> Result<L2Policy, BoardError> {
    match core {
        "cortex-a76" => Ok(L2Policy::Inclusive),
        "cortex-a55" => Ok(L2Policy::Exclusive),
        other => Err(cx.err(
            format!("clusters[{i}].core"),
            format!(
                "{other:?}: the cache model knows the L2 of cortex-a76 (inclusive) and cortex-a55 (exclusive) only"
            ),
            "use one of those, or add the core's L2 policy from its TRM to board/src/cache_model.rs",
        )),
    }
}

/// Checks `[cache_model]` against the clusters, their caches and `[timing]`.
pub(crate) fn validate(
    cx: &Ctx<'_>,
    m: &CacheModelFile,
    clusters: &[Cluster],
    l3: Option<Cache>,
    timing: Option<&Timing>,
    smp: u32,
) -> Result<Config, BoardError> {
    let timing = timing
        .ok_or_else(|| bad(cx, "", "needs the board's [timing]".into(), "add [timing] (see board/sa8155p.toml)"))?;
    if !(m.dram_ns.is_finite() && m.dram_ns > 0.0 && m.dram_ns <= 10_000.0) {
        return Err(bad(
            cx,
            "dram_ns",
            format!("{} ns is out of range", m.dram_ns),
            "use the DRAM load latency in ns, e.g. 124",
        ));
    }
    if let Some(name) = m.cycles.keys().find(|n| !clusters.iter().any(|c| &c.name == *n)) {
        let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        return Err(bad(cx, "cycles", format!("{name:?} is not a cluster"), &format!("use one of {names:?}")));
    }
    let l3 = geometry(cx, l3, "l3")?;
    let mut cpus = vec![None; smp as usize];
    let mut line_bytes = None;
    for (i, c) in clusters.iter().enumerate() {
        let f = m.cycles.get(&c.name).ok_or_else(|| {
            bad(
                cx,
                &format!("cycles.{}", c.name),
                "missing".into(),
                "give the cluster's l1d, l2, l3, same_cluster and cross_cluster cycles",
            )
        })?;
        let lat = cycles(cx, &c.name, f, m.dram_ns, c)?;
        let (l1d, l2) =
            (geometry(cx, c.l1d, &format!("clusters[{i}].l1d"))?, geometry(cx, c.l2, &format!("clusters[{i}].l2"))?);
        line_bytes = line_bytes.or(c.l1d.map(|x| x.line_bytes));
        let l2_policy = l2_policy(cx, &c.core, i)?;
        for &cpu in &c.cpus {
            let ps_per_cycle = timing.cpu_ps_per_insn[cpu as usize] as f64 * f64::from(c.capacity_dmips_mhz) / 1024.0;
            let cost_ps = Costs::from_cycles(&lat, ps_per_cycle);
            // Under --dvfs the plugin converts the core's own cycles at the current clock.
            let core_ps = Costs::core_part(&lat, ps_per_cycle);
            let top_khz = u64::from(c.max_khz);
            cpus[cpu as usize] = Some(CpuConfig { cluster: i as u32, l1d, l2, l2_policy, cost_ps, core_ps, top_khz });
        }
    }
    let cfg = Config { line_bytes: line_bytes.unwrap_or(64), l3, cpus: cpus.into_iter().flatten().collect() };
    cfg.check().map_err(|e| bad(cx, "", e, "use caches of a power-of-two number of sets and one line size"))?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use crate::Board;

    fn sa8155p_with(model: &str) -> Result<Board, crate::BoardError> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let start = text.find("[cache_model]").unwrap();
        let end = text[start..].find("\n# What the guest").unwrap() + start;
        Board::from_str_named(&format!("{}{model}\n{}", &text[..start], &text[end..]), "board/sa8155p.toml")
    }

    #[test]
    fn sa8155p_costs_follow_the_clock_and_the_geometry() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml"));
        let b = Board::load(path).unwrap();
        let m = b.cache_model().expect("sa8155p has [cache_model]");
        assert_eq!(m.cpus.len(), 8);
        assert_eq!((m.l3.size_kib, m.l3.ways, m.line_bytes), (2048, 16, 64));
        let (silver, gold, prime) = (&m.cpus[0], &m.cpus[4], &m.cpus[7]);
        assert_eq!((silver.cluster, gold.cluster, prime.cluster), (0, 1, 2));
        assert_eq!((silver.l1d.size_kib, silver.l2.size_kib, prime.l2.size_kib), (32, 128, 512));
        // The A55's L2 is exclusive of its L1D, the A76's inclusive (their TRMs).
        use lab_cache_model::L2Policy;
        assert_eq!(
            (silver.l2_policy, gold.l2_policy, prime.l2_policy),
            (L2Policy::Exclusive, L2Policy::Inclusive, L2Policy::Inclusive)
        );
        // DRAM is the board's ns on every core at ipc_1024 = 1 (within the rounding of
        // ps_per_insn to whole picoseconds), less the L1D hit the instruction includes.
        for c in [silver, gold, prime] {
            let dram_ns = c.cost_ps.dram as f64 / 1000.0;
            assert!((dram_ns - 124.0).abs() < 3.0, "{dram_ns}");
            assert!(c.cost_ps.l2 < c.cost_ps.l3 && c.cost_ps.same_cluster < c.cost_ps.cross_cluster, "{c:?}");
        }
        // A gold cycle is 413 ps: its L2 costs 9 - 4 cycles.
        assert_eq!(gold.cost_ps.l2, 5 * 413);
        // The core's own part: all of an L2 hit, the L2 look-up of anything farther; at the
        // cluster's top clock.
        for c in [silver, gold, prime] {
            let l2 = c.cost_ps.l2;
            assert_eq!(c.core_ps, lab_cache_model::Costs { l2, l3: l2, same_cluster: l2, cross_cluster: l2, dram: l2 });
        }
        assert_eq!((silver.top_khz, gold.top_khz, prime.top_khz), (1_785_600, 2_419_200, 2_841_600));
    }

    #[test]
    fn ipc_scales_the_costs_with_instruction_time() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml");
        let text = std::fs::read_to_string(path).unwrap().replace("ipc_1024 = 1.0", "ipc_1024 = 2.0");
        let b = Board::from_str_named(&text, "board/sa8155p.toml").unwrap();
        let gold = &b.cache_model().unwrap().cpus[4];
        // Half the instruction time, half the cache time.
        assert_eq!(gold.cost_ps.l2, 5 * 207);
    }

    #[test]
    fn errors_name_the_field() {
        let ok = "[cache_model]\ndram_ns = 124\n[cache_model.cycles]\n";
        let c = "silver = { l1d = 3, l2 = 9, l3 = 31, same_cluster = 31, cross_cluster = 40 }\n\
                 gold = { l1d = 4, l2 = 9, l3 = 31, same_cluster = 31, cross_cluster = 40 }\n";
        let e = sa8155p_with(&format!("{ok}{c}")).unwrap_err();
        assert_eq!(e.field, "cache_model.cycles.prime", "{e}");
        let e = sa8155p_with(&format!(
            "{ok}{c}prime = {{ l1d = 4, l2 = 3, l3 = 31, same_cluster = 31, cross_cluster = 40 }}\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("cache_model.cycles.prime: l1d 4 / l2 3"), "{e}");
        let e = sa8155p_with(&format!(
            "{ok}{c}prime = {{ l1d = 4, l2 = 9, l3 = 31, same_cluster = 8, cross_cluster = 40 }}\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("cache_model.cycles.prime: same_cluster 8"), "{e}");
        let e = sa8155p_with(&format!(
            "{ok}{c}big = {{ l1d = 4, l2 = 9, l3 = 31, same_cluster = 31, cross_cluster = 40 }}\n"
        ))
        .unwrap_err();
        assert!(e.fix.contains("silver"), "{e}");
        let e = sa8155p_with(&format!("[cache_model]\ndram_ns = 0\n[cache_model.cycles]\n{c}")).unwrap_err();
        assert_eq!(e.field, "cache_model.dram_ns");
        // A core whose L2 policy the model does not know is named, not guessed.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml");
        let text = std::fs::read_to_string(path).unwrap().replacen("core = \"cortex-a55\"", "core = \"cortex-a53\"", 1);
        let e = Board::from_str_named(&text, "board/sa8155p.toml").unwrap_err();
        assert!(e.to_string().contains("cortex-a53") && e.field.ends_with("core"), "{e}");
    }
}
