//! What the guest kernel should report for a board, computed the way Linux does, and
//! the comparison with what it actually reported.

use serde::{Deserialize, Serialize};

use crate::model::{Board, CpuMapLayout};

/// Linux's `SCHED_CAPACITY_SHIFT`.
const SCHED_CAPACITY_SHIFT: u32 = 10;

/// What one CPU should look like in the guest's sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuExpect {
    /// Logical CPU number.
    pub cpu: u32,
    /// `/sys/devices/system/cpu/cpuN/cpu_capacity`.
    pub capacity: u32,
    /// `/sys/devices/system/cpu/cpuN/topology/cluster_id`.
    pub cluster_id: i32,
    /// `topology/cluster_cpus_list`, kernel list format ("0-3").
    pub cluster_cpus: String,
}

/// What the guest reported for one CPU (sent by the guest as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuObserved {
    /// Logical CPU number.
    pub cpu: u32,
    /// `cpu_capacity`.
    pub capacity: u32,
    /// `topology/cluster_id`.
    pub cluster_id: i32,
    /// `topology/cluster_cpus_list`, as read (trailing newline allowed).
    pub cluster_cpus: String,
}

/// Per-CPU capacity as `drivers/base/arch_topology.c` computes it at boot.
///
/// `topology_parse_cpu_capacity` stores raw = capacity-dmips-mhz and
/// freq = `clk_get_rate(of_clk_get(cpu_node, 0)) / 1000` (kHz); then
/// `topology_normalize_cpu_scale` sets capacity = (raw * freq << 10) / max(raw * freq),
/// in integer arithmetic (truncating). No cpufreq driver binds on virt, so nothing
/// re-normalises later.
pub fn expected_capacities(board: &Board) -> Vec<u32> {
    let per_cpu: Vec<u64> = (0..board.smp())
        .map(|cpu| {
            let c = &board.clusters()[board.cluster_index_of(cpu).expect("validated")];
            u64::from(c.capacity_dmips_mhz) * u64::from(c.max_khz.max(1))
        })
        .collect();
    let scale = per_cpu.iter().copied().max().unwrap_or(1).max(1);
    per_cpu.iter().map(|&c| ((c << SCHED_CAPACITY_SHIFT) / scale) as u32).collect()
}

/// The cpu-map clusters in emission order, each a list of logical CPUs.
///
/// `parse_cluster` numbers cluster_id by the `clusterN` index inside the socket (or
/// inside cpu-map when there is no socket level), so cluster_id = position here.
pub fn cpu_map_clusters(board: &Board) -> Vec<Vec<u32>> {
    match board.cpu_map().layout {
        CpuMapLayout::PerCluster => board.clusters().iter().map(|c| c.cpus.clone()).collect(),
        CpuMapLayout::Single => vec![(0..board.smp()).collect()],
    }
}

/// Expected capacity, cluster_id and cluster_cpus_list for every CPU.
pub fn expected_topology(board: &Board) -> Vec<CpuExpect> {
    let caps = expected_capacities(board);
    let groups = cpu_map_clusters(board);
    (0..board.smp())
        .map(|cpu| {
            let (id, members) = groups
                .iter()
                .enumerate()
                .find(|(_, g)| g.contains(&cpu))
                .expect("validated: every cpu is in a cluster");
            CpuExpect {
                cpu,
                capacity: caps[cpu as usize],
                cluster_id: id as i32,
                cluster_cpus: format_cpulist(members),
            }
        })
        .collect()
}

/// Compares the guest's report with the board; one message per mismatch, empty = match.
pub fn compare(board: &Board, observed: &[CpuObserved]) -> Vec<String> {
    let mut out = Vec::new();
    let expected = expected_topology(board);
    let mut seen = std::collections::BTreeSet::new();
    let mut dups = std::collections::BTreeSet::new();
    for o in observed {
        if !seen.insert(o.cpu) && dups.insert(o.cpu) {
            out.push(format!("guest: reported cpu{} more than once", o.cpu));
        }
        if o.cpu >= board.smp() && !dups.contains(&o.cpu) {
            out.push(format!("board: no cpu{} (smp {}), guest: reported it", o.cpu, board.smp()));
        }
    }
    for e in &expected {
        let Some(o) = observed.iter().find(|o| o.cpu == e.cpu) else {
            out.push(format!("board: cpu{} exists (smp {}), guest: not reported", e.cpu, board.smp()));
            continue;
        };
        if o.capacity != e.capacity {
            out.push(format!("board: cpu{} capacity {}, guest: {}", e.cpu, e.capacity, o.capacity));
        }
        if o.cluster_id != e.cluster_id {
            out.push(format!("board: cpu{} cluster_id {}, guest: {}", e.cpu, e.cluster_id, o.cluster_id));
        }
        let want = parse_cpulist(&e.cluster_cpus);
        if parse_cpulist(o.cluster_cpus.trim()) != want {
            out.push(format!("board: cpu{} cluster_cpus {}, guest: {}", e.cpu, e.cluster_cpus, o.cluster_cpus.trim()));
        }
    }
    out
}

/// Formats CPUs in the kernel's list format (`%*pbl`): "0-3,5,7-8".
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

/// Parses the kernel's list format; `None` if malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}
