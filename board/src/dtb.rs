//! Turning QEMU's own virt DTB into one that describes the board's CPUs.
//!
//! We start from QEMU's `dumpdtb` output rather than writing a DTB from scratch so
//! every device QEMU wires up (GIC, UART, virtio-mmio, PCIe, PSCI, timer) stays exactly
//! as QEMU expects; only `/cpus` and a few root clock nodes change.

use anyhow::{anyhow, ensure, Result};
use dtoolkit::fdt::Fdt;
use dtoolkit::model::{DeviceTree, DeviceTreeNode, DeviceTreeProperty};
use dtoolkit::{Node, Property};

use crate::model::{Board, Cache};
use crate::topology::cpu_map_clusters;

/// QEMU's dump carries fresh random `/chosen` `rng-seed` and `kaslr-seed` bytes, so the same
/// board gave a different DTB on every machine. Fixed bytes make it reproducible; QEMU
/// re-randomizes both at reset anyway (qemu_fdt_randomize_seeds, from `-seed` when given).
fn fix_random_seeds(tree: &mut DeviceTree) -> Result<()> {
    let Some(chosen) = tree.root.child_mut("chosen") else { return Ok(()) };
    for (name, len) in [("rng-seed", 32usize), ("kaslr-seed", 8)] {
        if chosen.remove_property(name).is_some() {
            chosen.add_property(prop(name, vec![0x5au8; len])?);
        }
    }
    Ok(())
}

/// Cache key for a dumped QEMU DTB: everything in the board that changes it.
/// Filename-safe; the caller adds the QEMU version.
pub fn qemu_dtb_key(board: &Board) -> String {
    let safe = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || "._,=-".contains(c) { c } else { '_' }).collect()
    };
    let mem = board.memory_bytes();
    let mem = if mem.is_multiple_of(1 << 20) { format!("m{}", mem >> 20) } else { format!("b{mem}") };
    format!("{}-{}-smp{}-{mem}", safe(board.qemu_machine()), safe(board.qemu_cpu()), board.smp())
}

/// Renders a DTB as DTS text (for logs and debugging).
pub fn dtb_to_dts(dtb: &[u8]) -> Result<String> {
    let fdt = Fdt::new(dtb).map_err(|e| anyhow!("invalid DTB: {e}"))?;
    Ok(fdt.to_string())
}

/// Returns QEMU's DTB with `/cpus` describing the board.
///
/// Every QEMU cpu node keeps its properties (`reg`, `enable-method`, `compatible`,
/// `device_type`, `phandle`); each gains `capacity-dmips-mhz`, `clocks` (a root
/// `fixed-clock` per cluster: arch_topology reads the rate with `of_clk_get(cpu, 0)`),
/// L1 cache properties and `next-level-cache` to a per-core `l2-cache` child, whose
/// `next-level-cache` is the shared `/cpus/l3-cache`. QEMU's `cpu-map` is replaced.
/// Logical CPU N is the Nth cpu node, which is how arm64 Linux numbers them.
/// New phandles are allocated above the largest one already in the tree.
pub fn generate_dtb(board: &Board, qemu_dtb: &[u8]) -> Result<Vec<u8>> {
    generate_dtb_with(board, qemu_dtb, DtbFeatures::default())
}

/// What a run adds to the board's DTB beyond its CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DtbFeatures {
    /// The clusters as frequency domains of the emulated `qcom,cpufreq-hw` (`--dvfs`).
    pub dvfs: bool,
    /// The per-CPU idle states of `clusters[].idle` (`--idle`).
    pub idle: bool,
}

/// [`generate_dtb`], with `features.dvfs` the board's clusters as frequency domains of the
/// lab QEMU's emulated `qcom,cpufreq-hw` at [`crate::CPUFREQ_HW_BASE`] (`--dvfs`): the node
/// sm8150.dtsi has (clocks `xo` and `alternate`, `#freq-domain-cells`), each cpu node's
/// `qcom,freq-domain`, and no `operating-points-v2`: without one the driver takes its OPPs
/// from the LUTs, may switch from the scheduler (`fast_switch`), and cpufreq-dt stays away.
/// With `features.idle`, `/cpus/idle-states` holds each cluster's PSCI states (as
/// retention-type parameters, see [`crate::retention_param`]) and each cpu node lists its
/// cluster's in `cpu-idle-states`, as sm8150.dtsi does.
pub fn generate_dtb_with(board: &Board, qemu_dtb: &[u8], features: DtbFeatures) -> Result<Vec<u8>> {
    let DtbFeatures { dvfs, idle } = features;
    ensure!(
        !dvfs || board.has_dvfs(),
        "board {} has no OPP list on every cluster (clusters[].dvfs): add them or run without --dvfs",
        board.source()
    );
    ensure!(
        !idle || crate::idle::has_idle(board),
        "board {} has no PSCI idle state (clusters[].idle with a psci_param) on every cluster: add them or run \
         without --idle",
        board.source()
    );
    let fdt = Fdt::new(qemu_dtb).map_err(|e| anyhow!("QEMU DTB does not parse: {e}"))?;
    // The writer always emits boot_cpuid_phys 0; refuse rather than silently change it.
    ensure!(fdt.boot_cpuid_phys() == 0, "QEMU DTB has boot_cpuid_phys {}, expected 0", fdt.boot_cpuid_phys());
    let mut tree = DeviceTree::from_fdt(&fdt);
    fix_random_seeds(&mut tree)?;
    let mut phandles = Phandles::new(max_phandle(&tree.root))?;
    let clk_phandles = add_cluster_clocks(&mut tree.root, board, &mut phandles)?;

    let (opp_phandles, cpufreq_hw) = if dvfs {
        (vec![None; board.clusters().len()], Some(add_cpufreq_hw(&mut tree.root, board, &mut phandles)?))
    } else {
        (add_opp_tables(&mut tree, board, &mut phandles)?, None)
    };

    let cpus = tree.root.child_mut("cpus").ok_or_else(|| anyhow!("QEMU DTB has no /cpus node"))?;
    let idle_phandles =
        if idle { add_idle_states(cpus, board, &mut phandles)? } else { vec![vec![]; board.clusters().len()] };
    let cpu_names: Vec<String> = (*cpus).children().filter(|n| is_cpu_node(n)).map(|n| n.name().to_string()).collect();
    ensure!(
        cpu_names.len() == board.smp() as usize,
        "QEMU DTB has {} cpu nodes but board {} has smp {}: dump it with -smp {}",
        cpu_names.len(),
        board.source(),
        board.smp(),
        board.smp()
    );
    let l3_phandle = match board.l3() {
        Some(_) => Some(phandles.alloc()?),
        None => None,
    };
    let mut cpu_phandles = Vec::with_capacity(cpu_names.len());
    for (idx, name) in cpu_names.iter().enumerate() {
        let cluster_idx = board.cluster_index_of(idx as u32).expect("validated: every cpu in a cluster");
        let node = cpus.child_mut(name).expect("just listed");
        let cluster = &board.clusters()[cluster_idx];
        cpu_phandles.push(describe_cpu(node, cluster, clk_phandles[cluster_idx], l3_phandle, &mut phandles)?);
        if let (Some(e), Some(opp)) = (cluster.eas, opp_phandles[cluster_idx]) {
            node.add_property(prop("operating-points-v2", opp)?);
            node.add_property(prop("dynamic-power-coefficient", e.dynamic_power_coefficient)?);
        }
        if !idle_phandles[cluster_idx].is_empty() {
            node.add_property(prop("cpu-idle-states", idle_phandles[cluster_idx].as_slice())?);
        }
        if let Some(hw) = cpufreq_hw {
            node.add_property(prop("qcom,freq-domain", [hw, cluster_idx as u32].as_slice())?);
            if let Some(e) = cluster.eas {
                node.add_property(prop("dynamic-power-coefficient", e.dynamic_power_coefficient)?);
            }
        }
    }
    if let (Some(l3), Some(ph)) = (board.l3(), l3_phandle) {
        cpus.remove_child("l3-cache");
        cpus.add_child(cache_node("l3-cache", 3, l3, ph)?);
    }
    cpus.remove_child("cpu-map");
    cpus.add_child(cpu_map(board, &cpu_phandles)?);
    Ok(tree.to_dtb())
}

/// `/cpus/idle-states` with one `arm,idle-state` node per cluster and PSCI state (WFI is
/// cpuidle's own state 0); returns each cluster's state phandles, shallowest first.
fn add_idle_states(cpus: &mut DeviceTreeNode, board: &Board, phandles: &mut Phandles) -> Result<Vec<Vec<u32>>> {
    ensure!(cpus.child("idle-states").is_none(), "QEMU DTB already has a /cpus/idle-states node");
    let mut node = DeviceTreeNode::builder("idle-states")?.property(prop("entry-method", "psci")?).build();
    let mut out = Vec::new();
    for (c, cluster) in board.clusters().iter().enumerate() {
        let cpu = cluster.cpus[0];
        let mut phs = Vec::new();
        for (i, (param, s)) in crate::idle::cpu_idle_states(board, cpu)?.into_iter().enumerate() {
            let ph = phandles.alloc()?;
            let mut state = DeviceTreeNode::builder(format!("cpu-sleep-{c}-{i}"))?
                .property(prop("compatible", "arm,idle-state")?)
                .property(prop("idle-state-name", s.name.as_str())?)
                .property(prop("arm,psci-suspend-param", param)?)
                .property(prop("entry-latency-us", s.entry_us)?)
                .property(prop("exit-latency-us", s.exit_us)?)
                .property(prop("min-residency-us", s.min_residency_us)?)
                .property(prop("phandle", ph)?)
                .build();
            if s.local_timer_stop {
                state.add_property(prop("local-timer-stop", &[] as &[u8])?);
            }
            node.add_child(state);
            phs.push(ph);
        }
        out.push(phs);
    }
    cpus.add_child(node);
    Ok(out)
}

/// A root `fixed-clock` node; returns its phandle.
fn add_fixed_clock(
    root: &mut DeviceTreeNode,
    name: &str,
    hz: u32,
    output: &str,
    phandles: &mut Phandles,
) -> Result<u32> {
    ensure!(root.child(name).is_none(), "QEMU DTB already has a /{name} node");
    let ph = phandles.alloc()?;
    root.add_child(
        DeviceTreeNode::builder(name)?
            .property(prop("compatible", "fixed-clock")?)
            .property(prop("#clock-cells", 0u32)?)
            .property(prop("clock-frequency", hz)?)
            .property(prop("clock-output-names", output)?)
            .property(prop("phandle", ph)?)
            .build(),
    );
    Ok(ph)
}

/// Root fixed clocks, one per board cluster; returns their phandles.
fn add_cluster_clocks(root: &mut DeviceTreeNode, board: &Board, phandles: &mut Phandles) -> Result<Vec<u32>> {
    let mut clk_phandles = Vec::new();
    for (i, c) in board.clusters().iter().enumerate() {
        let output = format!("cpu-clk-{}", c.name);
        clk_phandles.push(add_fixed_clock(root, &format!("clk-cluster{i}"), c.clock_hz(), &output, phandles)?);
    }
    Ok(clk_phandles)
}

/// One cpu node: capacity, clock, L1 properties and its own L2 node; returns its phandle.
fn describe_cpu(
    node: &mut DeviceTreeNode,
    cluster: &crate::model::Cluster,
    clock: u32,
    l3_phandle: Option<u32>,
    phandles: &mut Phandles,
) -> Result<u32> {
    let existing =
        ["phandle", "linux,phandle"].iter().find_map(|p| (*node).property(p).and_then(|v| v.value_as::<u32>().ok()));
    let ph = match existing {
        Some(p) => p,
        None => {
            let p = phandles.alloc()?;
            node.add_property(prop("phandle", p)?);
            p
        }
    };
    node.add_property(prop("capacity-dmips-mhz", cluster.capacity_dmips_mhz)?);
    node.add_property(prop("clocks", clock)?);
    if let Some(c) = cluster.l1i {
        add_cache_props(node, "i-cache-", c)?;
    }
    if let Some(c) = cluster.l1d {
        add_cache_props(node, "d-cache-", c)?;
    }
    node.remove_child("l2-cache");
    node.remove_property("next-level-cache");
    if let Some(l2) = cluster.l2 {
        let l2_ph = phandles.alloc()?;
        let mut l2_node = cache_node("l2-cache", 2, l2, l2_ph)?;
        if let Some(l3) = l3_phandle {
            l2_node.add_property(prop("next-level-cache", l3)?);
        }
        node.add_child(l2_node);
        node.add_property(prop("next-level-cache", l2_ph)?);
    }
    Ok(ph)
}

/// cpu-map: Linux's parse_socket/parse_cluster give cluster_id = clusterN index.
fn cpu_map(board: &Board, cpu_phandles: &[u32]) -> Result<DeviceTreeNode> {
    let mut map = DeviceTreeNode::new("cpu-map")?;
    let mut clusters = Vec::new();
    for (n, members) in cpu_map_clusters(board).iter().enumerate() {
        let mut cl = DeviceTreeNode::new(format!("cluster{n}"))?;
        for (m, &cpu) in members.iter().enumerate() {
            cl.add_child(
                DeviceTreeNode::builder(format!("core{m}"))?.property(prop("cpu", cpu_phandles[cpu as usize])?).build(),
            );
        }
        clusters.push(cl);
    }
    if board.cpu_map().socket {
        let mut socket = DeviceTreeNode::new("socket0")?;
        clusters.into_iter().for_each(|c| socket.add_child(c));
        map.add_child(socket);
    } else {
        clusters.into_iter().for_each(|c| map.add_child(c));
    }
    Ok(map)
}

/// The `qcom,cpufreq-hw` node with its two input clocks (root fixed clocks); returns its
/// phandle. Register blocks as on the SM8150, at [`crate::CPUFREQ_HW_BASE`] instead of
/// 0x18323000 (inside virt's PCIe MMIO window).
fn add_cpufreq_hw(root: &mut DeviceTreeNode, board: &Board, phandles: &mut Phandles) -> Result<u32> {
    let clocks = [
        add_fixed_clock(root, "clk-xo", crate::XO_HZ, "xo", phandles)?,
        add_fixed_clock(root, "clk-gpll0", crate::ALTERNATE_HZ, "gpll0", phandles)?,
    ];
    let name = format!("cpufreq@{:x}", crate::CPUFREQ_HW_BASE);
    ensure!(root.child(&name).is_none(), "QEMU DTB already has a /{name} node");
    let mut reg = Vec::new();
    let mut reg_names = Vec::new();
    for i in 0..board.clusters().len() {
        let (addr, size) = crate::cpufreq_hw_reg(i);
        // virt's root has #address-cells = #size-cells = 2.
        reg.extend([(addr >> 32) as u32, addr as u32, (size >> 32) as u32, size as u32]);
        reg_names.push(format!("freq-domain{i}"));
    }
    let ph = phandles.alloc()?;
    root.add_child(
        DeviceTreeNode::builder(name)?
            .property(prop("compatible", ["qcom,sm8150-cpufreq-hw", "qcom,cpufreq-hw"].as_slice())?)
            .property(prop("reg", reg.as_slice())?)
            .property(prop("reg-names", reg_names.iter().map(String::as_str).collect::<Vec<_>>().as_slice())?)
            .property(prop("clocks", clocks.as_slice())?)
            .property(prop("clock-names", ["xo", "alternate"].as_slice())?)
            .property(prop("#freq-domain-cells", 1u32)?)
            .property(prop("#clock-cells", 1u32)?)
            .property(prop("phandle", ph)?)
            .build(),
    );
    Ok(ph)
}

/// One `operating-points-v2` table per cluster with EAS data (phandle per cluster, None
/// without): `opp-shared` (one clock per cluster) and a single OPP at the fixed clock, so
/// cpufreq never believes in a rate the clock cannot take. The root compatible stays
/// QEMU's: cpufreq-dt-platdev blocklists qcom,sm8150 and qcom,sa8155p.
fn add_opp_tables(tree: &mut DeviceTree, board: &Board, phandles: &mut Phandles) -> Result<Vec<Option<u32>>> {
    let mut out = Vec::new();
    for (i, c) in board.clusters().iter().enumerate() {
        let Some(e) = c.eas else {
            out.push(None);
            continue;
        };
        let name = format!("opp-table-cluster{i}");
        ensure!(tree.root.child(&name).is_none(), "QEMU DTB already has a /{name} node");
        let ph = phandles.alloc()?;
        let hz = u64::from(c.clock_hz());
        let opp = DeviceTreeNode::builder(format!("opp-{hz}"))?
            .property(prop("opp-hz", hz)?)
            .property(prop("opp-microvolt", e.microvolt)?)
            .build();
        let mut table = DeviceTreeNode::builder(name)?
            .property(prop("compatible", "operating-points-v2")?)
            .property(prop("opp-shared", &[] as &[u8])?)
            .property(prop("phandle", ph)?)
            .build();
        table.add_child(opp);
        tree.root.add_child(table);
        out.push(Some(ph));
    }
    Ok(out)
}

fn prop<T: dtoolkit::ToPropertyValue>(name: &str, value: T) -> Result<DeviceTreeProperty> {
    Ok(DeviceTreeProperty::new(name, value)?)
}

fn is_cpu_node(n: &DeviceTreeNode) -> bool {
    n.property("device_type").and_then(|p| p.value_as::<&str>().ok()) == Some("cpu")
}

/// `i-cache-size` etc. on the cpu node (L1), per the DT spec / drivers/base/cacheinfo.c.
fn add_cache_props(node: &mut DeviceTreeNode, prefix: &str, c: Cache) -> Result<()> {
    node.add_property(prop(&format!("{prefix}size"), c.size_bytes)?);
    node.add_property(prop(&format!("{prefix}line-size"), c.line_bytes)?);
    node.add_property(prop(&format!("{prefix}sets"), c.sets())?);
    Ok(())
}

/// A unified cache node as in sm8150.dtsi, plus size/line/sets.
fn cache_node(name: &str, level: u32, c: Cache, phandle: u32) -> Result<DeviceTreeNode> {
    Ok(DeviceTreeNode::builder(name)?
        .property(prop("compatible", "cache")?)
        .property(prop("cache-level", level)?)
        .property(prop("cache-unified", &[] as &[u8])?)
        .property(prop("cache-size", c.size_bytes)?)
        .property(prop("cache-line-size", c.line_bytes)?)
        .property(prop("cache-sets", c.sets())?)
        .property(prop("phandle", phandle)?)
        .build())
}

/// Largest `phandle`/`linux,phandle` anywhere in the tree (0 if none).
pub(crate) fn max_phandle<N: Node>(node: &N) -> u32 {
    let own = node
        .properties()
        .filter(|p| p.name() == "phandle" || p.name() == "linux,phandle")
        .filter_map(|p| p.value_as::<u32>().ok())
        .max()
        .unwrap_or(0);
    node.children().map(|c| max_phandle(&c)).fold(own, u32::max)
}

/// Allocates phandles above every existing one, so none collide with QEMU's.
struct Phandles {
    next: u32,
}

impl Phandles {
    fn new(max_existing: u32) -> Result<Self> {
        Ok(Phandles {
            next: max_existing.checked_add(1).ok_or_else(|| anyhow!("QEMU DTB phandle space is exhausted"))?,
        })
    }

    fn alloc(&mut self) -> Result<u32> {
        // 0 and 0xffffffff are not valid phandles.
        ensure!(self.next < u32::MAX, "ran out of phandles");
        let p = self.next;
        self.next += 1;
        Ok(p)
    }
}
