use super::*;

/// Two clusters: CPUs 0-1 and 2. L1D 1 KiB 2-way (8 sets), L2 4 KiB 2-way (32 sets), L3 16
/// KiB 4-way (64 sets), 64-byte lines; every L2 inclusive.
fn model() -> Model {
    model_with(L2Policy::Inclusive)
}

fn model_with(l2_policy: L2Policy) -> Model {
    let cost = Costs { l2: 10, l3: 30, same_cluster: 40, cross_cluster: 60, dram: 100 };
    let cpu = |cluster| CpuConfig {
        cluster,
        l1d: Geometry { size_kib: 1, ways: 2 },
        l2: Geometry { size_kib: 4, ways: 2 },
        l2_policy,
        cost_ps: cost,
        core_ps: Costs { l2: 10, l3: 6, same_cluster: 6, cross_cluster: 6, dram: 6 },
        top_khz: 2_000_000,
    };
    Model::new(Config { line_bytes: 64, l3: Geometry { size_kib: 16, ways: 4 }, cpus: vec![cpu(0), cpu(0), cpu(1)] })
        .unwrap()
}

/// The n-th line mapping to L1D set 0 (8 sets of 64 bytes): 512 bytes apart.
fn set0(n: u64) -> u64 {
    0x8000_0000 + n * 512
}

#[test]
fn a_line_misses_once_then_hits() {
    let mut m = model();
    assert_eq!(m.access(0, 0x1000, false), (Served::Dram, 100));
    assert_eq!(m.access(0, 0x1000 + 63, false), (Served::L1d, 0), "same line");
    assert_eq!(m.access(0, 0x1040, false).0, Served::Dram, "next line");
    let c = m.counters(0);
    assert_eq!((c.l1d_refs, c.l1d_misses, c.l2_refs, c.l2_misses, c.l3_refs, c.l3_misses), (3, 2, 2, 2, 2, 2));
    assert_eq!(c.charged_ps, 200);
    // Another CPU finds it in the shared L3 (nobody wrote it).
    assert_eq!(m.access(1, 0x1000, false), (Served::L3, 30));
}

#[test]
fn lru_evicts_the_least_recent_way() {
    let mut m = model();
    m.access(0, set0(0), false);
    m.access(0, set0(1), false);
    // Touch line 0: line 1 is now the least recent of the two ways.
    assert_eq!(m.access(0, set0(0), false).0, Served::L1d);
    m.access(0, set0(2), false);
    assert_eq!(m.access(0, set0(0), false).0, Served::L1d, "the recent line stayed");
    // Line 1 left the L1D but is still in the 2-way, 32-set L2 (512 bytes apart: sets 0 and 8).
    assert_eq!(m.access(0, set0(1), false), (Served::L2, 10));
}

#[test]
fn a_written_line_comes_from_its_writer_at_the_cluster_cost() {
    let mut m = model();
    m.access(0, 0x2000, true);
    // CPU 1 shares CPU 0's cluster, CPU 2 does not.
    assert_eq!(m.access(1, 0x2000, false), (Served::SameCluster, 40));
    assert_eq!(m.access(1, 0x2000, false).0, Served::L1d);
    m.access(0, 0x2000, true);
    assert_eq!(m.access(2, 0x2000, false), (Served::CrossCluster, 60));
    // CPU 0's store invalidated CPU 1's copy; CPU 0 no longer holds it modified, so the line
    // is read from the L3 now.
    assert_eq!(m.access(1, 0x2000, false), (Served::L3, 30));
    assert_eq!(m.counters(1).same_cluster_transfers, 1);
    assert_eq!(m.counters(2).cross_cluster_transfers, 1);
    assert_eq!(m.counters(1).charged_ps, 40 + 30);
}

#[test]
fn stores_are_counted_not_charged_and_shared_lines_upgrade() {
    let mut m = model();
    m.access(0, 0x3000, false);
    m.access(1, 0x3000, false);
    // Both hold it shared: CPU 1's store must invalidate CPU 0's copy.
    assert_eq!(m.access(1, 0x3000, true), (Served::L1d, 0));
    assert_eq!(m.access(0, 0x3000, false), (Served::SameCluster, 40));
    // An exclusive line is written without a transfer, but its writer is recorded.
    m.access(2, 0x4000, false);
    m.access(2, 0x4000, true);
    assert_eq!(m.access(0, 0x4000, false).0, Served::CrossCluster);
    assert_eq!(m.counters(2).charged_ps, 100, "only CPU 2's load of 0x4000 was charged");
}

#[test]
fn a_writer_that_evicted_the_line_does_not_serve_it() {
    let mut m = model();
    m.access(0, 0x8000_0000, true);
    // 64 more lines in L2 set 0 (2 KiB apart) push it out of CPU 0's L1D and L2.
    for n in 1..=4 {
        m.access(0, 0x8000_0000 + n * 2048, false);
    }
    assert_eq!(m.access(1, 0x8000_0000, false), (Served::L3, 30));
}

#[test]
fn costs_are_cycles_above_an_l1d_hit() {
    let c = Cycles { l1d: 4.0, l2: 9.0, l3: 31.0, same_cluster: 31.0, cross_cluster: 40.0, dram: 300.0 };
    // 413 ps per cycle (a 2.42 GHz gold core).
    let k = Costs::from_cycles(&c, 413.0);
    assert_eq!(k, Costs { l2: 2065, l3: 11151, same_cluster: 11151, cross_cluster: 14868, dram: 122248 });
}

#[test]
fn the_core_part_follows_the_clock_the_rest_does_not() {
    let mut m = model();
    // No clock known (0) and the top clock: the configured costs.
    m.set_khz(0, 0);
    assert_eq!(m.access(0, 0x1000, false), (Served::Dram, 100));
    m.set_khz(0, 2_000_000);
    assert_eq!(m.access(0, 0x1040, false), (Served::Dram, 100));
    // A quarter of the clock: the L2's 10 ps take 40; DRAM's 6 core ps 24, its 94 stay.
    m.set_khz(0, 500_000);
    assert_eq!(m.access(0, 0x1080, false), (Served::Dram, 94 + 24));
    assert_eq!(m.access(1, 0x1080, false), (Served::L3, 30), "cpu1 keeps its own clock");
    assert_eq!(m.counters(0).charged_ps, 100 + 100 + 118);
    // An L2 hit: evict 0x1000 from the L1D (2 ways of its set; the two lines are in other L2
    // sets), then load it again.
    m.access(0, 0x1000 + 512, false);
    m.access(0, 0x1000 + 1024, false);
    assert_eq!(m.access(0, 0x1000, false), (Served::L2, 40));
    // Back to no clock: as configured.
    m.set_khz(0, 0);
    m.access(0, 0x1000 + 512, false);
    m.access(0, 0x1000 + 1024, false);
    assert_eq!(m.access(0, 0x1000, false), (Served::L2, 10));
}

#[test]
fn costs_at_a_clock_round_the_core_part_only() {
    let cost = Costs { l2: 3360, l3: 11200, same_cluster: 11200, cross_cluster: 31360, dram: 122320 };
    let core = Costs { l2: 3360, l3: 3360, same_cluster: 3360, cross_cluster: 3360, dram: 3360 };
    assert_eq!(cost.at_khz(&core, 1_785_600, 1_785_600), cost);
    // 300 MHz: 3360 x 5.952 = 19998.7 -> 19999 ps; the DSU's 7840 ps of the L3 hit stay.
    let low = cost.at_khz(&core, 1_785_600, 300_000);
    assert_eq!((low.l2, low.l3, low.dram), (19999, 7840 + 19999, 118960 + 19999));
    // A core part larger than the cost is capped at the cost (Config::check refuses it).
    assert_eq!(Costs { l2: 5, ..cost }.at_khz(&core, 2, 1).l2, 10);
}

#[test]
fn a_core_part_above_the_cost_is_refused() {
    let mut cfg = model().cfg;
    cfg.cpus[1].core_ps.l3 = 31;
    let e = Model::new(cfg).err().unwrap();
    assert!(e.contains("cpus[1]: core_ps"), "{e}");
}

#[test]
fn bad_geometry_names_the_cache() {
    let mut cfg = Config {
        line_bytes: 64,
        l3: Geometry { size_kib: 16, ways: 4 },
        cpus: vec![CpuConfig {
            cluster: 0,
            l1d: Geometry { size_kib: 1, ways: 3 },
            l2: Geometry { size_kib: 4, ways: 2 },
            l2_policy: L2Policy::Inclusive,
            cost_ps: Costs::default(),
            core_ps: Costs::default(),
            top_khz: 0,
        }],
    };
    let e = Model::new(cfg.clone()).err().unwrap();
    assert!(e.contains("cpus[0].l1d"), "{e}");
    cfg.cpus[0].l1d.ways = 2;
    cfg.line_bytes = 48;
    assert!(Model::new(cfg).err().unwrap().contains("line_bytes"));
}

/// The n-th line after `0x8000_0000` in L2 set 0 (32 sets: 2 KiB apart), odd n only, so they
/// share no L3 set (64 sets) with the line at n = 0.
fn l2set0(n: u64) -> u64 {
    0x8000_0000 + n * 2048
}

#[test]
fn a_writer_that_reloaded_the_line_clean_does_not_transfer_it() {
    let mut m = model();
    m.access(0, l2set0(0), true);
    // Its dirty copy leaves CPU 0's L1D and L2 (written back), and CPU 0 reads it again: clean.
    for n in [1, 3, 5] {
        m.access(0, l2set0(n), false);
    }
    assert_eq!(m.access(0, l2set0(0), false), (Served::L3, 30));
    // CPU 1 pays the L3, not a transfer for a line nobody holds modified.
    assert_eq!(m.access(1, l2set0(0), false), (Served::L3, 30));
    assert_eq!(m.counters(1).same_cluster_transfers, 0);
}

/// The n-th line in L3 set 0 (64 sets: 4 KiB apart); they share L1D and L2 set 0 too.
fn l3set0(n: u64) -> u64 {
    0x8000_0000 + n * 4096
}

#[test]
fn a_clean_copy_the_l3_lost_is_snooped_not_read_from_dram() {
    let mut m = model();
    m.access(2, l3set0(0), false);
    // CPU 0 pushes the line out of the 4-way L3 (its own L2 keeps 2 of the 4 lines), while
    // CPU 2 still holds it clean.
    for n in 1..=4 {
        m.access(0, l3set0(n), false);
    }
    assert_eq!(m.access(1, l3set0(0), false), (Served::CrossCluster, 60));
    let c = m.counters(1);
    assert_eq!((c.l3_refs, c.l3_misses, c.clean_snoops, c.cross_cluster_transfers), (1, 1, 1, 1));
    // With CPU 1 (same cluster) holding it too, CPU 0 snoops its neighbour's copy.
    for n in 5..=8 {
        m.access(2, l3set0(n), false);
    }
    assert_eq!(m.access(0, l3set0(0), false), (Served::SameCluster, 40));
}

#[test]
fn an_inclusive_l2_takes_its_evictions_out_of_the_l1d() {
    let mut m = model();
    m.access(0, l2set0(0), false);
    // Lines 2 KiB apart share L1D set 0 (2 ways) and L2 set 0 (2 ways). Hitting line 0 in
    // the L1D keeps it there, but the L2 does not see those hits: two other lines evict it
    // from the L2, and so from the L1D, though it was the L1D's most recent.
    m.access(0, l2set0(1), false);
    assert_eq!(m.access(0, l2set0(0), false).0, Served::L1d);
    m.access(0, l2set0(3), false);
    assert_eq!(m.access(0, l2set0(0), false).0, Served::L3, "inclusion victim");
}

#[test]
fn an_exclusive_l2_holds_only_what_the_l1d_evicted() {
    let mut m = model_with(L2Policy::Exclusive);
    // Three lines of L1D set 0 and L2 set 0 (2 ways each): an inclusive L2 keeps only the
    // last two, an exclusive one holds the line the L1D evicted, beside the L1D's two.
    for n in [0, 1, 3] {
        m.access(0, l2set0(n), false);
    }
    assert_eq!(m.access(0, l2set0(0), false), (Served::L2, 10), "evicted from the L1D into the L2");
    // The hit moved it back to the L1D and pushed line 1 (least recent) into the L2, and so
    // on: all three stay in the core.
    assert_eq!(m.access(0, l2set0(1), false).0, Served::L2);
    assert_eq!(m.access(0, l2set0(3), false).0, Served::L2);
    assert_eq!(m.counters(0).l3_refs, 3, "only the three first misses left the core");
    // The same accesses with an inclusive L2: line 0 left the core.
    let mut m = model();
    for n in [0, 1, 3] {
        m.access(0, l2set0(n), false);
    }
    assert_eq!(m.access(0, l2set0(0), false).0, Served::L3);
}

#[test]
fn counters_split_charged_loads_from_uncharged_stores() {
    let mut m = model();
    m.access(0, 0x5000, true);
    // CPU 1's store takes CPU 0's modified line (a transfer, not charged), CPU 2 loads it
    // from CPU 1 (a transfer, charged).
    assert_eq!(m.access(1, 0x5000, true), (Served::SameCluster, 0));
    assert_eq!(m.access(2, 0x5000, false), (Served::CrossCluster, 60));
    assert_eq!(m.access(1, 0x6000, false), (Served::Dram, 100));
    let (c0, c1, c2) = (m.counters(0), m.counters(1), m.counters(2));
    assert_eq!((c0.l3_misses, c0.charged_dram, c0.charged_ps), (1, 0, 0), "a store miss to DRAM");
    assert_eq!((c1.same_cluster_transfers, c1.charged_same_cluster), (1, 0));
    assert_eq!((c1.l3_misses, c1.charged_dram, c1.charged_ps), (1, 1, 100));
    assert_eq!((c2.cross_cluster_transfers, c2.charged_cross_cluster, c2.charged_ps), (1, 1, 60));
}
