use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dtoolkit::fdt::{Fdt, FdtNode};
use dtoolkit::model::DeviceTree;
use dtoolkit::{Node, Property};

use crate::*;

/// Recorded with QEMU 10.0.2:
/// `qemu-system-aarch64 -M virt,gic-version=3,dumpdtb=... -cpu cortex-a76 -smp 8 -m 2G -nographic -nic none`
const FIXTURE: &[u8] = include_bytes!("../tests/fixtures/virt-gicv3-a76-smp8-2G.dtb");
const SA8155P: &str = include_str!("../sa8155p.toml");
const UPSTREAM: &str = include_str!("../sm8150-upstream.toml");
const SYMMETRIC: &str = include_str!("../symmetric.toml");

fn board(text: &str, file: &str) -> Board {
    Board::from_str_named(text, file).unwrap_or_else(|e| panic!("{e}"))
}

fn sa8155p() -> Board {
    board(SA8155P, "board/sa8155p.toml")
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------ boards & capacities

#[test]
fn board_files_load() {
    for (f, name, machine) in [
        ("sa8155p.toml", "sa8155p", "virt,gic-version=3"),
        ("sm8150-upstream.toml", "sm8150-upstream", "virt,gic-version=3"),
        ("symmetric.toml", "symmetric", "virt,gic-version=3"),
    ] {
        let b = Board::load(&manifest_dir().join(f)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.name(), name);
        assert_eq!(b.qemu_machine(), machine);
        assert_eq!(b.qemu_cpu(), "cortex-a76");
        assert_eq!(b.memory(), "2G");
        assert_eq!(b.memory_bytes(), 2 << 30);
        assert_eq!(b.smp(), 8);
    }
}

#[test]
fn sa8155p_capacities_match_linux_formula() {
    let b = sa8155p();
    assert_eq!(expected_capacities(&b), [306, 306, 306, 306, 871, 871, 871, 1024]);
    // The same arithmetic spelled out as in topology_normalize_cpu_scale().
    let scale: u64 = 1024 * 2_841_600;
    assert_eq!(((488u64 * 1_785_600) << 10) / scale, 306);
    assert_eq!(((1024u64 * 2_419_200) << 10) / scale, 871);
    let c = &b.clusters()[0];
    assert_eq!((c.name.as_str(), c.core.as_str(), c.max_khz), ("silver", "cortex-a55", 1_785_600));
    assert_eq!(c.clock_hz(), 1_785_600_000);
}

#[test]
fn expected_topology_per_board() {
    let t = expected_topology(&sa8155p());
    let got: Vec<_> = t.iter().map(|e| (e.cpu, e.capacity, e.cluster_id, e.cluster_cpus.as_str())).collect();
    assert_eq!(
        got,
        [
            (0, 306, 0, "0-3"),
            (1, 306, 0, "0-3"),
            (2, 306, 0, "0-3"),
            (3, 306, 0, "0-3"),
            (4, 871, 1, "4-6"),
            (5, 871, 1, "4-6"),
            (6, 871, 1, "4-6"),
            (7, 1024, 2, "7"),
        ]
    );

    let up = expected_topology(&board(UPSTREAM, "board/sm8150-upstream.toml"));
    assert_eq!(up.iter().map(|e| e.capacity).collect::<Vec<_>>(), [306, 306, 306, 306, 871, 871, 871, 1024]);
    assert!(up.iter().all(|e| e.cluster_id == 0 && e.cluster_cpus == "0-7"));

    let sym = expected_topology(&board(SYMMETRIC, "board/symmetric.toml"));
    assert!(sym.iter().all(|e| e.capacity == 1024 && e.cluster_id == 0 && e.cluster_cpus == "0-7"));
}

#[test]
fn cpulist_roundtrip() {
    assert_eq!(format_cpulist(&[0, 1, 2, 3]), "0-3");
    assert_eq!(format_cpulist(&[7]), "7");
    assert_eq!(format_cpulist(&[5, 0, 1, 7, 8]), "0-1,5,7-8");
    assert_eq!(parse_cpulist("0-3,5\n"), Some(vec![0, 1, 2, 3, 5]));
    assert_eq!(parse_cpulist("3-1"), None);
    assert_eq!(parse_cpulist("x"), None);
}

#[test]
fn memory_syntax() {
    assert_eq!(parse_memory("2G"), Some(2 << 30));
    assert_eq!(parse_memory("2048M"), Some(2 << 30));
    assert_eq!(parse_memory("2048"), Some(2 << 30));
    assert_eq!(parse_memory("512k"), Some(512 << 10));
    for bad in ["", "G", "2X", "-1G", "1.5G", "two"] {
        assert_eq!(parse_memory(bad), None, "{bad:?}");
    }
}

#[test]
fn dtb_key_is_filename_safe() {
    assert_eq!(qemu_dtb_key(&sa8155p()), "virt,gic-version=3-cortex-a76-smp8-m2048");
    let weird = SA8155P.replace("memory = \"2G\"", "memory = \"2048M\"");
    assert_eq!(
        qemu_dtb_key(&board(&weird, "x.toml")),
        qemu_dtb_key(&sa8155p()),
        "same memory in another spelling gives the same DTB"
    );
}

// ------------------------------------------------------------------ validation errors

/// Asserts the error names the file, the field and contains every `needles` text.
fn assert_err(text: &str, field: &str, needles: &[&str]) -> BoardError {
    let e = Board::from_str_named(text, "board/x.toml").expect_err("board should be rejected");
    let msg = e.to_string();
    assert!(msg.starts_with("board/x.toml: "), "{msg}");
    assert_eq!(e.field, field, "{msg}");
    assert!(msg.contains(&format!("{field}: ")), "{msg}");
    assert!(!e.fix.is_empty() && msg.ends_with(&e.fix), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg:?} lacks {n:?}");
    }
    e
}

#[test]
fn error_cpu_in_two_clusters() {
    let t = SA8155P.replace("cpus = [4, 5, 6]", "cpus = [3, 4, 5, 6]");
    assert_eq!(
        assert_err(&t, "clusters[1].cpus", &[]).to_string(),
        "board/x.toml: clusters[1].cpus: cpu 3 is in clusters \"silver\" and \"gold\"; \
         list each CPU in exactly one cluster"
    );
}

#[test]
fn error_missing_cpu() {
    let t = SA8155P.replace("cpus = [4, 5, 6]", "cpus = [4, 6]");
    assert_err(&t, "clusters", &["cpu 5 is in no cluster", "7 CPUs listed, qemu.smp = 8", "exactly one cluster"]);
}

#[test]
fn error_unknown_field_has_line_and_column() {
    let t = SA8155P.replace(
        "capacity_dmips_mhz = 1024\nmax_mhz = 2419.2",
        "capacity_dmips_mhz = 1024\nmax_mhz = 2419.2\nturbo = true",
    );
    let line = t.lines().position(|l| l == "turbo = true").unwrap() + 1;
    let e = assert_err(&t, "clusters[1].turbo", &["unknown field `turbo`", "remove the field or correct its spelling"]);
    assert_eq!(e.location, format!("line {line}, column 1"));

    let t = SA8155P.replace("[qemu]", "[qemu]\nkvm = true");
    assert_err(&t, "qemu.kvm", &["unknown field `kvm`", "expected one of"]);
}

#[test]
fn error_type_and_enum_values() {
    let t = SA8155P.replace("capacity_dmips_mhz = 488", "capacity_dmips_mhz = \"488\"");
    assert_err(&t, "clusters[0].capacity_dmips_mhz", &["invalid type", "line "]);
    let t = SA8155P.replace("layout = \"per-cluster\"", "layout = \"flat\"");
    assert_err(&t, "cpu_map.layout", &["unknown variant `flat`", "use one of the expected values"]);
    let t = SA8155P.replace("smp = 8\n", "");
    assert_err(&t, "qemu", &["missing field `smp`", "add the field"]);
}

#[test]
fn error_dmips_zero_and_too_big() {
    let t = SA8155P.replace("capacity_dmips_mhz = 488", "capacity_dmips_mhz = 0");
    assert_err(&t, "clusters[0].capacity_dmips_mhz", &["0 is out of range", "1..=1024"]);
    let t = SA8155P.replace("capacity_dmips_mhz = 488", "capacity_dmips_mhz = 2000");
    assert_err(&t, "clusters[0].capacity_dmips_mhz", &["2000 is out of range"]);
}

#[test]
fn error_smp_mismatch() {
    // Fewer vCPUs than the clusters list.
    let t = SA8155P.replace("smp = 8", "smp = 6");
    assert_err(&t, "clusters[1].cpus", &["cpu 6 does not exist: qemu.smp = 6 means cpus 0-5", "raise qemu.smp"]);
    // More vCPUs than the clusters list.
    let t = SA8155P.replace("smp = 8", "smp = 12");
    assert_err(&t, "clusters", &["cpu 8 is in no cluster", "qemu.smp = 12"]);
    let t = SA8155P.replace("smp = 8", "smp = 0");
    assert_err(&t, "qemu.smp", &["out of range"]);
}

#[test]
fn error_clock_memory_and_clusters() {
    let t = SA8155P.replace("max_mhz = 2841.6", "max_mhz = 0");
    assert_err(&t, "clusters[2].max_mhz", &["0 MHz is out of range", "> 0"]);
    let t = SA8155P.replace("max_mhz = 2841.6", "max_mhz = 12000");
    assert_err(&t, "clusters[2].max_mhz", &["out of range"]);
    let t = SA8155P.replace("max_mhz = 2841.6", "max_mhz = 5000");
    assert_err(&t, "clusters[2].max_mhz", &["32-bit clock-frequency"]);
    let t = SA8155P.replace("max_mhz = 2841.6", "max_mhz = 2841.6001");
    assert_err(&t, "clusters[2].max_mhz", &["whole number of kHz"]);
    let t = SA8155P.replace("memory = \"2G\"", "memory = \"lots\"");
    assert_err(&t, "qemu.memory", &["\"lots\" is not a QEMU memory size", "\"2G\""]);
    let t = SA8155P.replace("cpus = [7]", "cpus = []");
    assert_err(&t, "clusters[2].cpus", &["cluster \"prime\" has no CPUs"]);
    let t = SA8155P.replace("name = \"gold\"", "name = \"silver\"");
    assert_err(&t, "clusters[1].name", &["also the name of clusters[0]", "unique"]);
    let t = SA8155P.replace("machine = \"virt,gic-version=3\"", "machine = \"sbsa-ref\"");
    assert_err(&t, "qemu.machine", &["not QEMU's virt machine"]);
    let t = SA8155P.replace("l2 = { size_kib = 512, line_bytes = 64, ways = 8 }", "");
    assert_err(&t, "clusters[2].l2", &["has no l2 but the board has a shared l3"]);
    let t = SA8155P.replace(
        "l2 = { size_kib = 512, line_bytes = 64, ways = 8 }",
        "l2 = { size_kib = 512, line_bytes = 48, ways = 8 }",
    );
    assert_err(&t, "clusters[2].l2.line_bytes", &["power of two"]);
}

#[test]
fn error_stated_expectations_disagree() {
    let t = SA8155P.replace(
        "cpu_capacity = [306, 306, 306, 306, 871, 871, 871, 1024]",
        "cpu_capacity = [307, 306, 306, 306, 871, 871, 871, 1024]",
    );
    assert_err(&t, "expect.cpu_capacity[0]", &["states 307 for cpu 0 but the board data gives 306", "arch_topology.c"]);
    let t = SA8155P.replace("cluster_id = [0, 0, 0, 0, 1, 1, 1, 2]", "cluster_id = [0, 0, 0, 0, 1, 1, 1, 1]");
    assert_err(&t, "expect.cluster_id[7]", &["gives 2"]);
    let t = SA8155P.replace("cluster_id = [0, 0, 0, 0, 1, 1, 1, 2]", "cluster_id = [0, 0, 0]");
    assert_err(&t, "expect.cluster_id", &["3 values for qemu.smp = 8 CPUs"]);
}

#[test]
fn error_unreadable_file() {
    let e = Board::load(Path::new("/nonexistent/board.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/board.toml: cannot read"), "{e}");
}

// ------------------------------------------------------------------ compare

#[test]
fn compare_reports_mismatches() {
    let b = sa8155p();
    let mut obs: Vec<CpuObserved> = expected_topology(&b)
        .into_iter()
        .map(|e| CpuObserved {
            cpu: e.cpu,
            capacity: e.capacity,
            cluster_id: e.cluster_id,
            cluster_cpus: format!("{}\n", e.cluster_cpus),
        })
        .collect();
    assert!(compare(&b, &obs).is_empty(), "{:?}", compare(&b, &obs));

    obs[4].capacity = 1024;
    obs[7].cluster_id = 0;
    obs[0].cluster_cpus = "0-7".into();
    obs.remove(5);
    assert_eq!(
        compare(&b, &obs),
        [
            "board: cpu0 cluster_cpus 0-3, guest: 0-7",
            "board: cpu4 capacity 871, guest: 1024",
            "board: cpu5 exists (smp 8), guest: not reported",
            "board: cpu7 cluster_id 2, guest: 0",
        ]
    );
}

#[test]
fn observed_from_guest_json() {
    let json = r#"[{"cpu":0,"capacity":306,"cluster_id":0,"cluster_cpus":"0-3"},
                   {"cpu":9,"capacity":1024,"cluster_id":-1,"cluster_cpus":"9"}]"#;
    let obs: Vec<CpuObserved> = serde_json::from_str(json).unwrap();
    assert_eq!(obs[1].cluster_id, -1);
    let msgs = compare(&sa8155p(), &obs);
    assert!(msgs.contains(&"board: no cpu9 (smp 8), guest: reported it".to_string()));
    assert!(msgs.contains(&"board: cpu1 exists (smp 8), guest: not reported".to_string()));
}

// ------------------------------------------------------------------ DTB

fn u32_prop(n: &FdtNode<'_>, name: &str) -> u32 {
    n.property(name).unwrap_or_else(|| panic!("{} has no {name}", n.name())).value_as::<u32>().unwrap()
}

/// phandle -> node path, panicking on duplicates.
fn phandle_map(fdt: &Fdt<'_>) -> BTreeMap<u32, String> {
    fn walk(n: FdtNode<'_>, path: String, out: &mut BTreeMap<u32, String>) {
        for p in n.properties() {
            if p.name() == "phandle" || p.name() == "linux,phandle" {
                let v = p.value_as::<u32>().unwrap();
                if let Some(prev) = out.insert(v, path.clone()) {
                    assert_eq!(prev, path, "phandle {v:#x} used by {prev} and {path}");
                }
            }
        }
        for c in n.children() {
            let p = if path == "/" { format!("/{}", c.name()) } else { format!("{path}/{}", c.name()) };
            walk(c, p, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(fdt.root(), "/".into(), &mut out);
    out
}

fn cpu_nodes<'a>(fdt: &Fdt<'a>) -> Vec<FdtNode<'a>> {
    fdt.find_node("/cpus").unwrap().children().filter(|c| c.name().starts_with("cpu@")).collect()
}

#[test]
fn fixture_is_qemu_virt_with_eight_cpus() {
    let fdt = Fdt::new(FIXTURE).unwrap();
    assert_eq!(cpu_nodes(&fdt).len(), 8);
    // QEMU >= 8 gives cpu nodes phandles (its own cpu-map uses them).
    assert!(cpu_nodes(&fdt).iter().all(|c| c.property("phandle").is_some()));
}

#[test]
fn sa8155p_dtb() {
    let b = sa8155p();
    let out = generate_dtb(&b, FIXTURE).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let orig = Fdt::new(FIXTURE).unwrap();
    let phandles = phandle_map(&fdt); // asserts uniqueness
    let orig_max = *phandle_map(&orig).keys().max().unwrap();
    let by_phandle = |ph: u32| fdt.find_node(&phandles[&ph]).unwrap();

    // cpu nodes: QEMU's properties preserved, ours added.
    let cpus = cpu_nodes(&fdt);
    let orig_cpus = cpu_nodes(&orig);
    assert_eq!(cpus.len(), 8);
    let l3_ph = u32_prop(&fdt.find_node("/cpus/l3-cache").unwrap(), "phandle");
    for (i, (c, o)) in cpus.iter().zip(&orig_cpus).enumerate() {
        assert_eq!(c.name(), o.name());
        for p in o.properties() {
            assert_eq!(
                c.property(p.name()).map(|x| x.value().to_vec()),
                Some(p.value().to_vec()),
                "cpu{i} {}",
                p.name()
            );
        }
        assert_eq!(u32_prop(c, "reg"), i as u32, "QEMU's MPIDR reg kept");
        let (dmips, hz, l2) = match i {
            0..=3 => (488, 1_785_600_000, 128 << 10),
            4..=6 => (1024, 2_419_200_000, 256 << 10),
            _ => (1024, 2_841_600_000, 512 << 10),
        };
        assert_eq!(u32_prop(c, "capacity-dmips-mhz"), dmips);
        let clk = by_phandle(u32_prop(c, "clocks"));
        assert_eq!(clk.property("compatible").unwrap().value_as::<&str>().unwrap(), "fixed-clock");
        assert_eq!(u32_prop(&clk, "#clock-cells"), 0);
        assert_eq!(u32_prop(&clk, "clock-frequency"), hz);
        assert!(u32_prop(c, "clocks") > orig_max, "new phandles above QEMU's");
        // Caches: L1 on the cpu node, L2 child, shared L3.
        assert_eq!(u32_prop(c, "d-cache-size"), if i < 4 { 32 << 10 } else { 64 << 10 });
        assert_eq!(u32_prop(c, "i-cache-sets"), if i < 4 { 128 } else { 256 });
        let l2n = by_phandle(u32_prop(c, "next-level-cache"));
        assert_eq!(phandles[&u32_prop(c, "next-level-cache")], format!("/cpus/{}/l2-cache", c.name()));
        assert_eq!(u32_prop(&l2n, "cache-level"), 2);
        assert_eq!(u32_prop(&l2n, "cache-size"), l2);
        assert!(l2n.property("cache-unified").is_some());
        assert_eq!(u32_prop(&l2n, "next-level-cache"), l3_ph);
    }
    let l3 = fdt.find_node("/cpus/l3-cache").unwrap();
    assert_eq!(u32_prop(&l3, "cache-level"), 3);
    assert_eq!(u32_prop(&l3, "cache-size"), 2 << 20);
    assert_eq!(u32_prop(&l3, "cache-sets"), 2048);
}

#[test]
fn sa8155p_dtb_cpu_map_and_the_rest_untouched() {
    let out = generate_dtb(&sa8155p(), FIXTURE).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let orig = Fdt::new(FIXTURE).unwrap();
    let phandles = phandle_map(&fdt);
    let by_phandle = |ph: u32| fdt.find_node(&phandles[&ph]).unwrap();

    // cpu-map: socket0 with clusters of 4/3/1, cores pointing at the right cpus.
    let socket = fdt.find_node("/cpus/cpu-map/socket0").unwrap();
    let clusters: Vec<_> = socket.children().collect();
    assert_eq!(clusters.iter().map(|c| c.name()).collect::<Vec<_>>(), ["cluster0", "cluster1", "cluster2"]);
    let mut next_cpu = 0;
    for (cl, want) in clusters.iter().zip([4, 3, 1]) {
        let cores: Vec<_> = cl.children().collect();
        assert_eq!(cores.len(), want, "{}", cl.name());
        for (m, core) in cores.iter().enumerate() {
            assert_eq!(core.name(), format!("core{m}"));
            let cpu = by_phandle(u32_prop(core, "cpu"));
            assert_eq!(u32_prop(&cpu, "reg"), next_cpu);
            next_cpu += 1;
        }
    }
    assert_eq!(next_cpu, 8);

    // Everything else is untouched: compare every other root child and /cpus's props.
    let (new_tree, old_tree) = (DeviceTree::from_fdt(&fdt), DeviceTree::from_fdt(&orig));
    for old in old_tree.root.children().filter(|c| c.name() != "cpus" && c.name() != "chosen") {
        let new = new_tree.root.child(old.name()).unwrap();
        assert_eq!(new, old, "/{} changed", old.name());
    }
    // /chosen: only QEMU's random seeds are replaced, by fixed bytes (a reproducible DTB).
    let (new_chosen, old_chosen) = (new_tree.root.child("chosen").unwrap(), old_tree.root.child("chosen").unwrap());
    for p in old_chosen.properties() {
        let n = new_chosen.property(p.name()).unwrap();
        match p.name() {
            "rng-seed" | "kaslr-seed" => {
                assert!(n.value().iter().all(|&b| b == 0x5a) && n.value().len() == p.value().len())
            }
            _ => assert_eq!(n, p),
        }
    }
    assert_eq!(new_chosen.properties().count(), old_chosen.properties().count());
    for must in ["intc", "pl011", "psci", "timer", "apb-pclk", "memory", "chosen"] {
        assert!(fdt.root().child(must).is_some(), "/{must} missing");
    }
    assert_eq!(old_tree.root.properties().collect::<Vec<_>>(), new_tree.root.properties().collect::<Vec<_>>());
    let (nc, oc) = (fdt.find_node("/cpus").unwrap(), orig.find_node("/cpus").unwrap());
    assert_eq!(
        nc.properties().map(|p| (p.name().to_string(), p.value().to_vec())).collect::<Vec<_>>(),
        oc.properties().map(|p| (p.name().to_string(), p.value().to_vec())).collect::<Vec<_>>()
    );
    let added: Vec<_> = new_tree
        .root
        .children()
        .filter(|c| old_tree.root.child(c.name()).is_none())
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(
        added,
        [
            "clk-cluster0",
            "clk-cluster1",
            "clk-cluster2",
            "opp-table-cluster0",
            "opp-table-cluster1",
            "opp-table-cluster2"
        ]
    );
}

#[test]
fn sa8155p_dtb_eas() {
    let out = generate_dtb(&sa8155p(), FIXTURE).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let phandles = phandle_map(&fdt);
    let by_phandle = |ph: u32| fdt.find_node(&phandles[&ph]).unwrap();
    let cpus = cpu_nodes(&fdt);
    // EAS: every cpu links its cluster's OPP table (one shared OPP at the fixed clock) and
    // carries sm8150.dtsi's dynamic-power-coefficient.
    for (i, c) in cpus.iter().enumerate() {
        let (dpc, hz, uv) = match i {
            0..=3 => (232, 1_785_600_000u64, 900_000),
            4..=6 => (369, 2_419_200_000, 950_000),
            _ => (421, 2_841_600_000, 1_000_000),
        };
        assert_eq!(u32_prop(c, "dynamic-power-coefficient"), dpc, "cpu{i}");
        let table = by_phandle(u32_prop(c, "operating-points-v2"));
        assert_eq!(table.property("compatible").unwrap().value_as::<&str>().unwrap(), "operating-points-v2");
        assert!(table.property("opp-shared").is_some());
        let opps: Vec<_> = table.children().collect();
        assert_eq!(opps.len(), 1, "a single OPP: the fixed clock cannot change rate");
        assert_eq!(opps[0].name(), format!("opp-{hz}"));
        assert_eq!(opps[0].property("opp-hz").unwrap().value(), hz.to_be_bytes());
        assert_eq!(u32_prop(&opps[0], "opp-microvolt"), uv);
    }
}

#[test]
fn no_eas_board_has_no_opp_tables() {
    for b in [sa8155p().without_eas(), board(SYMMETRIC, "board/symmetric.toml")] {
        assert!(!b.has_eas());
        let out = generate_dtb(&b, FIXTURE).unwrap();
        let fdt = Fdt::new(&out).unwrap();
        assert!(fdt.root().children().all(|c| !c.name().starts_with("opp-table")), "{}", b.name());
        for c in cpu_nodes(&fdt) {
            assert!(c.property("operating-points-v2").is_none() && c.property("dynamic-power-coefficient").is_none());
        }
    }
    assert!(sa8155p().has_eas());
}

#[test]
fn eas_power_and_cost_follow_the_kernel() {
    let b = sa8155p();
    let power: Vec<_> = b.clusters().iter().map(|c| opp_power_uw(c).unwrap()).collect();
    // coefficient x mV² x MHz / 10^6, in integers.
    assert_eq!(
        power,
        [232 * 900 * 900 * 1785 / 1_000_000, 369 * 950 * 950 * 2419 / 1_000_000, 421 * 1000 * 1000 * 2841 / 1_000_000]
    );
    let d = expected_domains(&b);
    assert_eq!(d.iter().map(|d| d.cpus.as_str()).collect::<Vec<_>>(), ["0-3", "4-6", "7"]);
    assert_eq!(
        d.iter().map(|d| d.cost).collect::<Vec<_>>(),
        [power[0] * 10 / 306, power[1] * 10 / 871, power[2] * 10 / 1024]
    );
    assert!(expected_domains(&b.without_eas()).is_empty());
}

#[test]
fn error_eas_on_symmetric_or_partial() {
    let eas = "eas = { dynamic_power_coefficient = 369, microvolt = 950000 }\n";
    let sym = SYMMETRIC.replace(
        "l2 = { size_kib = 256, line_bytes = 64, ways = 8 }\n",
        &format!("l2 = {{ size_kib = 256, line_bytes = 64, ways = 8 }}\n{eas}"),
    );
    assert_err(&sym, "clusters[0].eas", &["asymmetric capacities", "remove the eas tables"]);
    let partial = SA8155P.replace("eas = { dynamic_power_coefficient = 421, microvolt = 1000000 }\n", "");
    assert_err(&partial, "clusters[2].eas", &["\"prime\" has no eas", "every cluster"]);
    let zero = SA8155P.replace("dynamic_power_coefficient = 232", "dynamic_power_coefficient = 0");
    assert_err(&zero, "clusters[0].eas.dynamic_power_coefficient", &["no energy model"]);
    let volts = SA8155P.replace("microvolt = 900000", "microvolt = 900");
    assert_err(&volts, "clusters[0].eas.microvolt", &["900 µV", "microvolts"]);
    let cost = SA8155P.replace("em_cost = [10961, 9248, 11680]", "em_cost = [10961, 9000, 11680]");
    assert_err(&cost, "expect.em_cost[1]", &["states 9000 for cluster 1", "em_cost = [10961, 9248, 11680]"]);
}

fn eas_report(b: &Board) -> EasObserved {
    let domains = expected_domains(b);
    EasObserved {
        sched_energy_aware: Some("1".into()),
        policies: domains
            .iter()
            .enumerate()
            .map(|(i, d)| PolicyObserved {
                policy: i as u32,
                cpus: Some(d.cpus.clone()),
                governor: Some("schedutil".into()),
                driver: Some("cpufreq-dt".into()),
                cur_khz: Some(d.khz.into()),
                max_khz: Some(d.khz.into()),
                available_khz: Some(vec![d.khz.into()]),
            })
            .collect(),
        energy_model: domains
            .iter()
            .map(|d| DomainObserved {
                name: "cpuN".into(),
                cpus: Some(d.cpus.clone()),
                states: vec![StateObserved {
                    khz: Some(d.khz.into()),
                    power: Some(d.power_uw),
                    cost: Some(d.cost),
                    performance: None,
                }],
            })
            .collect(),
        log: vec![
            "sched_energy_set: stopping EAS".into(),
            "sched_energy_set: starting EAS".into(),
            "root_domain 0-7: pd7:{ cpus=7 nr_pstate=1 } pd4:{ cpus=4-6 nr_pstate=1 } pd0:{ cpus=0-3 nr_pstate=1 }"
                .into(),
        ],
    }
}

#[test]
fn compare_eas_reports_mismatches() {
    let b = sa8155p();
    let good = eas_report(&b);
    assert_eq!(compare_eas(&b, &good), Vec::<String>::new());
    let mut bad = good.clone();
    bad.sched_energy_aware = Some(String::new());
    bad.policies[1].governor = Some("performance".into());
    bad.policies[2].cur_khz = Some(576_000);
    bad.energy_model[0].states[0].cost = Some(1);
    bad.energy_model.pop();
    bad.log.clear();
    let m = compare_eas(&b, &bad);
    assert_eq!(m.len(), 7, "{m:#?}");
    assert!(m.iter().any(|l| l.contains("perf domains") && l.contains("guest scheduler: []")), "{m:#?}");
    let mut three_opps = good.clone();
    three_opps.log[2] = three_opps.log[2].replace("cpus=7 nr_pstate=1", "cpus=7 nr_pstate=3");
    assert_eq!(perf_domains(&three_opps.log)[0], ("7".to_string(), 3));
    assert_eq!(compare_eas(&b, &three_opps).len(), 1);
    assert!(m[0].contains("sched_energy_aware Some(\"\")"), "{m:#?}");
    assert!(m.iter().any(|l| l.contains("cpus 4-6 governor schedutil, guest: Some(\"performance\")")), "{m:#?}");
    assert!(m.iter().any(|l| l.contains("cpus 7 at 2841600 kHz")), "{m:#?}");
    assert!(m.iter().any(|l| l.contains("energy-model domain for cpus 7, guest: none")), "{m:#?}");
    // Without EAS (symmetric, --no-eas) the guest must not run it.
    let sym = board(SYMMETRIC, "board/symmetric.toml");
    assert_eq!(
        compare_eas(&sym, &EasObserved { sched_energy_aware: Some(String::new()), ..Default::default() }),
        Vec::<String>::new()
    );
    let m = compare_eas(&b.without_eas(), &good);
    assert!(m.len() == 1 && m[0].contains("no energy model (no EAS)"), "{m:#?}");
}

#[test]
fn upstream_dtb_has_one_flat_cluster() {
    let b = board(UPSTREAM, "board/sm8150-upstream.toml");
    let out = generate_dtb(&b, FIXTURE).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    phandle_map(&fdt);
    let map = fdt.find_node("/cpus/cpu-map").unwrap();
    assert_eq!(map.children().map(|c| c.name()).collect::<Vec<_>>(), ["cluster0"]);
    assert_eq!(map.child("cluster0").unwrap().children().count(), 8);
    // Three frequency domains remain: capacities still differ.
    let dmips: Vec<_> = cpu_nodes(&fdt).iter().map(|c| u32_prop(c, "capacity-dmips-mhz")).collect();
    assert_eq!(dmips, [488, 488, 488, 488, 1024, 1024, 1024, 1024]);
    let clocks: Vec<_> = cpu_nodes(&fdt).iter().map(|c| u32_prop(c, "clocks")).collect();
    assert_eq!(clocks.iter().collect::<std::collections::BTreeSet<_>>().len(), 3);
}

#[test]
fn symmetric_dtb() {
    let b = board(SYMMETRIC, "board/symmetric.toml");
    let fdt_bytes = generate_dtb(&b, FIXTURE).unwrap();
    let fdt = Fdt::new(&fdt_bytes).unwrap();
    let cl = fdt.find_node("/cpus/cpu-map/socket0").unwrap();
    assert_eq!(cl.children().count(), 1);
    assert_eq!(cl.child("cluster0").unwrap().children().count(), 8);
    assert!(cpu_nodes(&fdt).iter().all(|c| u32_prop(c, "capacity-dmips-mhz") == 1024));
}

#[test]
fn dtb_without_cpu_phandles_gets_fresh_ones() {
    // Older QEMU: no phandles on cpu nodes and no cpu-map.
    let mut tree = DeviceTree::from_fdt(&Fdt::new(FIXTURE).unwrap());
    let cpus = tree.root.child_mut("cpus").unwrap();
    cpus.remove_child("cpu-map");
    for c in cpus.children_mut() {
        c.remove_property("phandle");
    }
    let old = tree.to_dtb();
    let old_max = *phandle_map(&Fdt::new(&old).unwrap()).keys().max().unwrap();
    let out = generate_dtb(&sa8155p(), &old).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let phandles = phandle_map(&fdt);
    for c in cpu_nodes(&fdt) {
        assert!(u32_prop(&c, "phandle") > old_max);
    }
    let core = fdt.find_node("/cpus/cpu-map/socket0/cluster2/core0").unwrap();
    assert_eq!(phandles[&u32_prop(&core, "cpu")], "/cpus/cpu@7");
}

#[test]
fn dtb_smp_mismatch_is_an_error() {
    // A consistent 4-CPU board (no [expect] section) against the 8-CPU fixture.
    let t = SA8155P[..SA8155P.find("[expect]").unwrap()]
        .replace("smp = 8", "smp = 4")
        .replace("cpus = [0, 1, 2, 3]", "cpus = [0, 1]")
        .replace("cpus = [4, 5, 6]", "cpus = [2]")
        .replace("cpus = [7]", "cpus = [3]");
    let b = board(&t, "board/four.toml");
    let e = generate_dtb(&b, FIXTURE).unwrap_err().to_string();
    assert!(e.contains("8 cpu nodes but board board/four.toml has smp 4"), "{e}");
    assert!(generate_dtb(&b, b"not a dtb").is_err());
}

// ------------------------------------------------------------------ scheduler policy

#[test]
fn sa8155p_applies_the_phone_policy_by_default() {
    let b = sa8155p();
    assert_eq!(b.default_policy(), Policy::Phone);
    assert!(b.policy_writes(Policy::Mainline).unwrap().is_empty());
    let writes = b.policy_writes(Policy::Phone).unwrap();
    let w: Vec<(&str, &str)> = writes.iter().map(|w| (w.path.as_str(), w.value.as_str())).collect();
    assert_eq!(
        w,
        [
            (SCHED_FEATURES, "SYNC_EAS"),
            (SCHED_FEATURES, "RT_SYNC"),
            // The period first: the kernel refuses a runtime above the period.
            ("/proc/sys/kernel/sched_rt_period_us", "1350000"),
            ("/proc/sys/kernel/sched_rt_runtime_us", "1250000"),
        ]
    );
    assert!(writes.iter().all(|w| !w.source.is_empty()));
    // Boards without [policy] run mainline's and refuse a phone policy with the fix.
    for text in [UPSTREAM, SYMMETRIC] {
        let b = board(text, "board/x.toml");
        assert_eq!(b.default_policy(), Policy::Mainline);
        let e = b.policy_writes(Policy::Phone).unwrap_err().to_string();
        assert!(e.contains("no [policy] section") && e.contains("--policy mainline"), "{e}");
    }
}

#[test]
fn policy_settings_need_a_source_and_a_valid_name() {
    let with = |policy: &str| Board::from_str_named(&format!("{SYMMETRIC}\n{policy}"), "board/x.toml");
    let ok = with("[policy]\n[[policy.sysctl]]\nname = \"kernel.x\"\nvalue = \"a b\"\nsource = \"s\"\n").unwrap();
    assert_eq!(ok.default_policy(), Policy::Mainline);
    assert_eq!(ok.policy_writes(Policy::Phone).unwrap()[0].path, "/proc/sys/kernel/x");
    for (policy, field, needle) in [
        (
            "[policy]\n[[policy.features]]\nname = \"SYNC_EAS\"\nsource = \" \"\n",
            "policy.features[0].source",
            "no source",
        ),
        (
            "[policy]\n[[policy.features]]\nname = \"NO_SYNC_EAS\"\nsource = \"s\"\n",
            "policy.features[0].name",
            "not a scheduler feature",
        ),
        (
            "[policy]\n[[policy.sysctl]]\nname = \"/proc/sys/x\"\nvalue = 1\nsource = \"s\"\n",
            "policy.sysctl[0].name",
            "not a sysctl",
        ),
        ("[policy]\ndefault = \"phone\"\n", "policy", "no features and no sysctl"),
    ] {
        let e = with(policy).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    let e = with("[policy]\ndefault = \"android\"\n").unwrap_err().to_string();
    assert!(e.contains("unknown variant") && e.contains("mainline"), "{e}");
}

// ------------------------------------------------------------------ DVFS and idle states

fn be_u32s(n: &FdtNode<'_>, name: &str) -> Vec<u32> {
    let p = n.property(name).unwrap_or_else(|| panic!("{} has no {name}", n.name()));
    p.value().chunks(4).map(|c| u32::from_be_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn sa8155p_opps_are_sm8150_tables() {
    let b = sa8155p();
    assert!(b.has_dvfs());
    let opps: Vec<&[Opp]> = b.clusters().iter().map(|c| c.dvfs.as_ref().unwrap().opps.as_slice()).collect();
    // sm8150.dtsi (Linux 7.2): 18 / 17 / 20 OPPs; the top of each is the cluster's max clock.
    assert_eq!(opps.iter().map(|o| o.len()).collect::<Vec<_>>(), [18, 17, 20]);
    let ends: Vec<(u32, u32)> = opps.iter().map(|o| (o[0].khz, o[o.len() - 1].khz)).collect();
    assert_eq!(ends, [(300_000, 1_785_600), (710_400, 2_419_200), (825_600, 2_841_600)]);
    // Voltages: the assumption's ends (0.60 V, eas.microvolt), linear, whole mV.
    let v: Vec<(u32, u32)> = opps.iter().map(|o| (o[0].microvolt, o[o.len() - 1].microvolt)).collect();
    assert_eq!(v, [(600_000, 900_000), (600_000, 950_000), (600_000, 1_000_000)]);
    assert!(opps.iter().all(|o| o.windows(2).all(|w| w[0].microvolt <= w[1].microvolt && w[0].khz < w[1].khz)));
    assert!(opps.iter().flat_map(|o| o.iter()).all(|o| o.microvolt % 1000 == 0));
}

#[test]
fn lut_rows_encode_what_the_upstream_driver_reads() {
    let d = cpufreq_domains(&sa8155p());
    assert_eq!(d.iter().map(|d| d.cpus.clone()).collect::<Vec<_>>(), [vec![0, 1, 2, 3], vec![4, 5, 6], vec![7]]);
    // 300 MHz: source 0 (alternate GPLL0 600 MHz / 2); 403.2 MHz: source 1, L = 21 x 19.2.
    assert_eq!((d[0].rows[0].freq, d[0].rows[0].volt), (0, 600));
    assert_eq!(d[0].rows[1].freq, (1 << 30) | 21);
    // Prime's top: L = 148 (2841.6 / 19.2); the driver's frequency is xo x L / 1000 kHz.
    let top = d[2].rows.last().unwrap();
    assert_eq!((top.freq, top.volt, top.khz), ((1 << 30) | 148, 1000, 2_841_600));
    for row in d.iter().flat_map(|d| &d.rows) {
        let (src, l) = (row.freq >> 30, row.freq & 0xff);
        let khz = if src != 0 { XO_HZ / 1000 * l } else { ALTERNATE_HZ / 2 / 1000 };
        assert_eq!(khz, row.khz);
        assert_ne!((row.freq >> 16) & 7, 1, "core count 1 marks a turbo row the driver skips");
    }
    // Time per instruction scales as 1/f from [timing]'s top-clock figure.
    let t = sa8155p().timing().unwrap().cpu_ps_per_insn.clone();
    assert_eq!(d[0].rows.last().unwrap().ps_per_insn, t[0]);
    assert_eq!(d[2].rows.last().unwrap().ps_per_insn, t[7]);
    assert_eq!(d[0].rows[0].ps_per_insn, (t[0] as f64 * 1785.6 / 300.0).round() as u64);
}

#[test]
fn cpufreq_hw_devices_carry_the_boards_luts_and_speeds() {
    let b = sa8155p();
    let devs: Vec<serde_json::Value> =
        cpufreq_hw_devices(&b).iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(devs.len(), 3);
    assert_eq!(
        devs.iter().map(|d| d["addr"].as_u64().unwrap()).collect::<Vec<_>>(),
        [0xb00_0000, 0xb00_2800, 0xb00_4800]
    );
    assert_eq!(devs.iter().map(|d| d["cpus"].as_u64().unwrap()).collect::<Vec<_>>(), [0x0f, 0x70, 0x80]);
    assert_eq!(devs[0]["driver"], "qcom-cpufreq-hw");
    assert_eq!(devs[0]["freq-lut"].as_array().unwrap().len(), 18);
    assert_eq!(devs[0]["khz"][0], 300_000);
    assert_eq!(devs[2]["khz"].as_array().unwrap().last().unwrap(), 2_841_600);
    assert_eq!(devs[2]["volt-lut"].as_array().unwrap().last().unwrap(), 1000);
    // The top row is [timing]'s speed, the one `-icount cpu-ps=` boots with.
    let ps = b.timing().unwrap().cpu_ps_per_insn.clone();
    assert_eq!(devs[1]["ps-per-insn"].as_array().unwrap().last().unwrap().as_u64(), Some(ps[4]));
}

#[test]
fn a_lower_speed_bin_drops_the_opps_above_max_mhz() {
    // The SA8155P's clocks per the secondary source: gold tops at 2131.2 MHz.
    let t = SA8155P.replacen("max_mhz = 2419.2", "max_mhz = 2131.2", 1);
    let t = &t[..t.find("[expect]").unwrap()];
    let b = board(t, "board/bin.toml");
    let gold = &b.clusters()[1].dvfs.as_ref().unwrap().opps;
    assert_eq!((gold.len(), gold.last().unwrap().khz, gold.last().unwrap().microvolt), (14, 2_131_200, 950_000));
}

#[test]
fn dvfs_errors_name_the_field_and_fix() {
    let bad = SA8155P.replacen("300, 403.2", "300, 1000", 1);
    assert_err(&bad, "clusters[0].dvfs.opp_mhz[1]", &["1000 MHz is neither a multiple of the 19.2 MHz xo"]);
    let bad = SA8155P.replacen("300, 403.2, 499.2", "300, 499.2, 403.2", 1);
    assert_err(&bad, "clusters[0].dvfs.opp_mhz[2]", &["not above the OPP before it", "ascending"]);
    let bad = SA8155P.replacen(", 1785.6 ] }", " ] }", 1);
    assert_err(&bad, "clusters[0].dvfs.opp_mhz", &["max_mhz 1785.6 is not one of the OPPs"]);
    let bad = SA8155P.replacen("min_microvolt = 600000", "min_microvolt = 950000", 1);
    assert_err(&bad, "clusters[0].dvfs.min_microvolt", &["950000 µV", "at most eas.microvolt"]);
    let bad = SA8155P.replace("eas = { dynamic_power_coefficient = 421, microvolt = 1000000 }\n", "");
    assert_err(&bad, "clusters[2].eas", &["\"prime\" has no eas"]);
}

#[test]
fn idle_states_are_the_dtsi_and_downstream_ones() {
    let b = sa8155p();
    let names = |s: &[IdleState]| s.iter().map(|s| (s.name.clone(), s.exit_us, s.psci_param)).collect::<Vec<_>>();
    assert_eq!(
        names(&b.clusters()[0].idle),
        [("wfi".to_string(), 43, None), ("little-rail-power-collapse".into(), 909, Some(0x4000_0004))]
    );
    assert_eq!(names(&b.clusters()[2].idle)[1], ("big-rail-power-collapse".to_string(), 1461, Some(0x4000_0004)));
    assert_eq!(
        names(b.cluster_idle()),
        [("l3-wfi".to_string(), 51, None), ("cluster-power-collapse".into(), 6562, Some(0x4100_c244))]
    );
    let bad = SA8155P.replacen("exit_us = 909, min_residency_us = 3934", "exit_us = 909, min_residency_us = 900", 1);
    assert_err(&bad, "clusters[0].idle[1].exit_us", &["longer than the min residency"]);
    let bad = SA8155P.replacen("exit_us = 909, min_residency_us = 3934", "exit_us = 9, min_residency_us = 3934", 1);
    assert_err(&bad, "clusters[0].idle[1]", &["shallower than \"wfi\"", "shallowest first"]);
}

#[test]
fn sa8155p_dtb_dvfs_describes_the_cpufreq_hw() {
    let out = generate_dtb_with(&sa8155p(), FIXTURE, DtbFeatures { dvfs: true, idle: false }).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let phandles = phandle_map(&fdt);
    let hw = fdt.find_node("/cpufreq@b000000").expect("the cpufreq-hw node");
    assert_eq!(
        hw.property("compatible").unwrap().value(),
        b"qcom,sm8150-cpufreq-hw\0qcom,cpufreq-hw\0",
        "sm8150.dtsi's compatibles"
    );
    assert_eq!(be_u32s(&hw, "reg"), [0, 0x0b00_0000, 0, 0x1400, 0, 0x0b00_2800, 0, 0x1400, 0, 0x0b00_4800, 0, 0x1400]);
    assert_eq!(hw.property("clock-names").unwrap().value(), b"xo\0alternate\0");
    let rates: Vec<u32> = be_u32s(&hw, "clocks")
        .iter()
        .map(|ph| u32_prop(&fdt.find_node(&phandles[ph]).unwrap(), "clock-frequency"))
        .collect();
    assert_eq!(rates, [19_200_000, 600_000_000]);
    assert_eq!(u32_prop(&hw, "#freq-domain-cells"), 1);
    let hw_ph = u32_prop(&hw, "phandle");
    for (i, c) in cpu_nodes(&fdt).iter().enumerate() {
        let domain = [0, 0, 0, 0, 1, 1, 1, 2][i];
        assert_eq!(be_u32s(c, "qcom,freq-domain"), [hw_ph, domain], "cpu{i}");
        assert!(c.property("operating-points-v2").is_none(), "cpu{i}: an OPP table would take fast_switch away");
        assert_eq!(u32_prop(c, "dynamic-power-coefficient"), [232, 369, 421][domain as usize]);
    }
    assert!(fdt.find_node("/opp-table-cluster0").is_none());
    // Without OPP lists there is no frequency domain to describe.
    let up = board(UPSTREAM, "board/sm8150-upstream.toml");
    let e = generate_dtb_with(&up, FIXTURE, DtbFeatures { dvfs: true, idle: false }).unwrap_err().to_string();
    assert!(e.contains("no OPP list on every cluster") && e.contains("--dvfs"), "{e}");
}

/// A guest report as `--dvfs` should give it, built from the board.
fn dvfs_report(b: &Board) -> EasObserved {
    let mut o = EasObserved { sched_energy_aware: Some("1".into()), ..Default::default() };
    let mut log = String::from("root_domain 0-7:");
    for (i, c) in b.clusters().iter().enumerate() {
        let states = expected_states(b, c);
        let cpus = format_cpulist(&c.cpus);
        log.push_str(&format!(" pd{}:{{ cpus={cpus} nr_pstate={} }}", c.cpus[0], states.len()));
        o.policies.push(PolicyObserved {
            policy: c.cpus[0],
            cpus: Some(cpus.clone()),
            governor: Some("schedutil".into()),
            driver: Some("qcom-cpufreq-hw".into()),
            cur_khz: Some(u64::from(states[0].khz)),
            max_khz: Some(u64::from(c.max_khz)),
            available_khz: Some(states.iter().rev().map(|s| u64::from(s.khz)).collect()),
        });
        o.energy_model.push(DomainObserved {
            name: format!("cpu{i}"),
            cpus: Some(cpus),
            states: states
                .iter()
                .map(|s| StateObserved {
                    khz: Some(u64::from(s.khz)),
                    power: Some(s.power_uw),
                    cost: Some(s.cost),
                    performance: None,
                })
                .collect(),
        });
    }
    o.log = vec![log, "sched_energy_set: starting EAS".into()];
    o
}

#[test]
fn dvfs_energy_model_has_every_opp() {
    let b = sa8155p();
    let silver = expected_states(&b, &b.clusters()[0]);
    // The top OPP is the single-OPP model's state; 300 MHz at 0.6 V: 232 x 600² x 300 / 10⁶.
    assert_eq!((silver[17].power_uw, silver[17].cost), (opp_power_uw(&b.clusters()[0]).unwrap(), 10961));
    assert_eq!(silver[0].power_uw, 232 * 600 * 600 * 300 / 1_000_000);
    // With one assumed 0.60 V floor for every cluster, gold's lowest OPP (710.4 MHz) is still
    // cheaper per unit of capacity than silver's 300 MHz: sm8150.dtsi's coefficients per unit
    // of capacity are 232 x 1785.6 / 306 = 1354 (silver) against 369 x 2419.2 / 871 = 1025
    // (gold), so silver wins only below sqrt(1025 / 1354) x 0.60 V = 0.52 V at 300 MHz.
    // Pinned here because EAS's placement of light work follows from it (docs/src/design/dvfs.md).
    let gold = expected_states(&b, &b.clusters()[1]);
    assert_eq!((silver[0].cost, gold[0].cost), (4912, 3698));
    assert!(silver.windows(2).all(|w| w[0].cost <= w[1].cost), "no inefficient OPPs");
    let ok = dvfs_report(&b);
    assert_eq!(compare_eas_with(&b, &ok, true), Vec::<String>::new());
    let mut short = ok.clone();
    short.policies[1].available_khz.as_mut().unwrap().pop();
    short.energy_model[2].states.pop();
    let p = compare_eas_with(&b, &short, true);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].starts_with("board: cpus 4-6 OPPs") && p[1].starts_with("board: cpus 7 energy model"), "{p:?}");
    let mut dt = ok;
    dt.policies[0].driver = Some("cpufreq-dt".into());
    assert!(compare_eas_with(&b, &dt, true)[0].contains("qcom-cpufreq-hw with schedutil"));
}

#[test]
fn sa8155p_dtb_idle_lists_each_clusters_psci_states() {
    let out = generate_dtb_with(&sa8155p(), FIXTURE, DtbFeatures { dvfs: false, idle: true }).unwrap();
    let fdt = Fdt::new(&out).unwrap();
    let phandles = phandle_map(&fdt);
    let states = fdt.find_node("/cpus/idle-states").expect("the idle-states node");
    assert_eq!(states.property("entry-method").unwrap().value(), b"psci\0");
    for (i, c) in cpu_nodes(&fdt).iter().enumerate() {
        let refs = be_u32s(c, "cpu-idle-states");
        assert_eq!(refs.len(), 1, "cpu{i}: one PSCI state (WFI is cpuidle's own)");
        let s = fdt.find_node(&phandles[&refs[0]]).unwrap();
        assert_eq!(s.property("compatible").unwrap().value(), b"arm,idle-state\0");
        // Retention type, StateID kept: QEMU's PSCI has the original power_state format only.
        assert_eq!(u32_prop(&s, "arm,psci-suspend-param"), 0x4, "cpu{i}");
        let (entry, exit, residency) = if i < 4 { (355, 909, 3934) } else { (241, 1461, 4488) };
        assert_eq!(
            [u32_prop(&s, "entry-latency-us"), u32_prop(&s, "exit-latency-us"), u32_prop(&s, "min-residency-us")],
            [entry, exit, residency],
            "cpu{i}"
        );
        assert!(s.property("local-timer-stop").is_some(), "cpu{i}");
    }
    assert_eq!(
        idle_exit_arg(&sa8155p()).unwrap(),
        ["0x4@909000"; 4].into_iter().chain(["0x4@1461000"; 4]).collect::<Vec<_>>().join(":")
    );
    // Without --idle the DT has no states.
    let plain = generate_dtb(&sa8155p(), FIXTURE).unwrap();
    assert!(Fdt::new(&plain).unwrap().find_node("/cpus/idle-states").is_none());
}

#[test]
fn retention_params_keep_the_state_id() {
    assert_eq!(retention_param(0x4000_0004).unwrap(), 0x4);
    assert_eq!(retention_param(0x4).unwrap(), 0x4);
    let e = retention_param(0x4100_c244).unwrap_err().to_string();
    assert!(e.contains("0x100c244") && e.contains("16 bits"), "{e}");
    let up = board(UPSTREAM, "board/sm8150-upstream.toml");
    if !has_idle(&up) {
        let e = generate_dtb_with(&up, FIXTURE, DtbFeatures { dvfs: false, idle: true }).unwrap_err().to_string();
        assert!(e.contains("--idle") && e.contains("clusters[].idle"), "{e}");
    }
}
