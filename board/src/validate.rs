//! Validation: the raw file ([`crate::schema`]) into a [`Board`], or a [`BoardError`] that
//! names the field and the fix.

use std::collections::BTreeMap;
use std::path::Path;

use crate::dvfs::mhz_to_khz;
use crate::error::{BoardError, Ctx};
use crate::model::{Board, Cache, Cluster, ClusterEas, CpuMap};
use crate::schema::{BoardFile, CacheFile, ClusterFile, EasFile, ExpectFile, QemuFile};

/// Largest `smp` QEMU's virt machine accepts with GICv3.
const MAX_SMP: u32 = 512;

/// Parses QEMU's `-m` syntax: a number with an optional K/M/G/T suffix (no suffix = MiB).
pub fn parse_memory(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let mult: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return None,
            };
            (&s[..i], mult)
        }
        _ => (s, 1 << 20),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

fn is_dt_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 24
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Validates a parsed board file; also returns its `[expect]` table, which
/// [`crate::expect`] checks against the validated board.
pub(crate) fn validate(raw: BoardFile, file: &str) -> Result<(Board, Option<ExpectFile>), BoardError> {
    let cx = Ctx { file };
    let name = board_name(&cx, raw.name.clone(), file)?;
    let (memory_bytes, smp) = check_qemu(&cx, &raw.qemu)?;
    let clusters = check_clusters(&cx, &raw.clusters, smp)?;
    let l3 = check_cache(&cx, "l3", raw.l3)?;
    if l3.is_some() {
        if let Some((i, c)) = clusters.iter().enumerate().find(|(_, c)| c.l2.is_none()) {
            return Err(cx.err(
                format!("clusters[{i}].l2"),
                format!("cluster {:?} has no l2 but the board has a shared l3", c.name),
                "describe the cluster's l2 (Linux numbers DT cache levels by walking next-level-cache from L1)",
            ));
        }
    }
    let timing = match &raw.timing {
        Some(t) => Some(crate::timing::validate(&cx, t, &clusters, smp)?),
        None => None,
    };
    let cache_model = match &raw.cache_model {
        Some(m) => Some(crate::cache_model::validate(&cx, m, &clusters, l3, timing.as_ref(), smp)?),
        None => None,
    };
    let policy = match &raw.policy {
        Some(p) => Some(crate::policy::validate(&cx, p)?),
        None => None,
    };
    let q = &raw.qemu;
    let board = Board {
        policy,
        timing,
        cache_model,
        source: file.to_string(),
        name,
        description: raw.description.unwrap_or_default(),
        qemu_machine: q.machine.clone(),
        qemu_cpu: q.cpu.clone(),
        memory: q.memory.clone(),
        memory_bytes,
        smp,
        cpu_map: CpuMap { layout: raw.cpu_map.layout, socket: raw.cpu_map.socket },
        clusters,
        l3,
        cluster_idle: crate::dvfs::check_idle(&cx, "cluster_idle", &raw.cluster_idle)?,
    };
    check_eas_board(&cx, &board)?;
    let mut board = board;
    for (i, (c, file)) in board.clusters.iter_mut().zip(&raw.clusters).enumerate() {
        c.dvfs = crate::dvfs::check_dvfs(&cx, &format!("clusters[{i}].dvfs"), file, c.max_khz)?;
    }
    Ok((board, raw.expect))
}

fn board_name(cx: &Ctx<'_>, name: Option<String>, file: &str) -> Result<String, BoardError> {
    let stem = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = name.unwrap_or(stem);
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
        return Err(cx.err(
            "name",
            format!("{name:?} is not a usable board name"),
            "use a short name without spaces or '/', e.g. \"sa8155p\"",
        ));
    }
    Ok(name)
}

/// `[qemu]`: returns the memory in bytes and the CPU count.
fn check_qemu(cx: &Ctx<'_>, q: &QemuFile) -> Result<(u64, u32), BoardError> {
    if !(q.machine == "virt" || q.machine.starts_with("virt,")) {
        return Err(cx.err(
            "qemu.machine",
            format!("{:?} is not QEMU's virt machine", q.machine),
            "use \"virt\" with options, e.g. \"virt,gic-version=3\" (the DTB is generated from virt's)",
        ));
    }
    if q.machine.contains("dumpdtb") || q.machine.contains(' ') {
        return Err(cx.err(
            "qemu.machine",
            format!("{:?} contains dumpdtb= or a space", q.machine),
            "give only the machine and its options; dumpdtb is added when the DTB is dumped",
        ));
    }
    if q.cpu.trim().is_empty() || q.cpu.contains(|c: char| c.is_whitespace()) {
        return Err(cx.err(
            "qemu.cpu",
            format!("{:?} is not a QEMU cpu model", q.cpu),
            "use a model name such as \"cortex-a76\"",
        ));
    }
    let memory_bytes = match parse_memory(&q.memory) {
        Some(b) if b > 0 => b,
        _ => {
            return Err(cx.err(
                "qemu.memory",
                format!("{:?} is not a QEMU memory size", q.memory),
                "write a size like \"2G\", \"2048M\" or \"2048\" (MiB)",
            ))
        }
    };
    if q.smp == 0 || q.smp > MAX_SMP {
        return Err(cx.err(
            "qemu.smp",
            format!("{} CPUs is out of range", q.smp),
            &format!("use 1..={MAX_SMP} (QEMU virt with GICv3)"),
        ));
    }
    Ok((memory_bytes, q.smp))
}

/// `[[clusters]]`: each CPU in exactly one cluster, every CPU in one.
fn check_clusters(cx: &Ctx<'_>, raw: &[ClusterFile], smp: u32) -> Result<Vec<Cluster>, BoardError> {
    if raw.is_empty() {
        return Err(cx.err("clusters", "no clusters", "add at least one [[clusters]] table listing the CPUs"));
    }
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    let mut clusters = Vec::with_capacity(raw.len());
    for (i, c) in raw.iter().enumerate() {
        let f = |k: &str| format!("clusters[{i}].{k}");
        if let Some(j) = raw[..i].iter().position(|o| o.name == c.name) {
            return Err(cx.err(
                f("name"),
                format!("{:?} is also the name of clusters[{j}]", c.name),
                "give each cluster a unique name",
            ));
        }
        for &cpu in &c.cpus {
            if cpu >= smp {
                return Err(cx.err(
                    f("cpus"),
                    format!("cpu {cpu} does not exist: qemu.smp = {smp} means cpus 0-{}", smp - 1),
                    "remove it, or raise qemu.smp",
                ));
            }
            if let Some(&j) = owner.get(&cpu) {
                let problem = if j == i {
                    format!("cpu {cpu} is listed twice in cluster {:?}", c.name)
                } else {
                    format!("cpu {cpu} is in clusters {:?} and {:?}", raw[j].name, c.name)
                };
                return Err(cx.err(f("cpus"), problem, "list each CPU in exactly one cluster"));
            }
            owner.insert(cpu, i);
        }
        clusters.push(check_cluster(cx, i, c)?);
    }
    if let Some(missing) = (0..smp).find(|cpu| !owner.contains_key(cpu)) {
        let listed = owner.len();
        return Err(cx.err(
            "clusters",
            format!("cpu {missing} is in no cluster ({listed} CPUs listed, qemu.smp = {smp})"),
            "list every CPU 0..qemu.smp-1 in exactly one cluster's cpus, or lower qemu.smp",
        ));
    }
    Ok(clusters)
}

/// One cluster's own fields.
fn check_cluster(cx: &Ctx<'_>, i: usize, c: &ClusterFile) -> Result<Cluster, BoardError> {
    let f = |k: &str| format!("clusters[{i}].{k}");
    if !is_dt_name(&c.name) {
        return Err(cx.err(
            f("name"),
            format!("{:?} is not a valid cluster name", c.name),
            "use lowercase letters, digits and '-', starting with a letter (max 24), e.g. \"silver\"",
        ));
    }
    if c.core.trim().is_empty() {
        return Err(cx.err(f("core"), "empty core name", "name the real core, e.g. \"cortex-a55\""));
    }
    if c.cpus.is_empty() {
        return Err(cx.err(
            f("cpus"),
            format!("cluster {:?} has no CPUs", c.name),
            "list its CPUs, e.g. cpus = [0, 1, 2, 3], or remove the cluster",
        ));
    }
    if c.capacity_dmips_mhz == 0 || c.capacity_dmips_mhz > 1024 {
        return Err(cx.err(
            f("capacity_dmips_mhz"),
            format!("{} is out of range", c.capacity_dmips_mhz),
            "use 1..=1024 (the biggest core is usually 1024)",
        ));
    }
    let max_khz = mhz_to_khz(c.max_mhz).map_err(|problem| {
        cx.err(
            f("max_mhz"),
            problem,
            "give the max clock in MHz, > 0 and < 4294.967295 (the DT clock-frequency is a u32 in Hz), at most 3 decimals",
        )
    })?;
    let cache = |key: &str, v: Option<CacheFile>| check_cache(cx, &f(key), v);
    let mut cpus = c.cpus.clone();
    cpus.sort_unstable();
    Ok(Cluster {
        name: c.name.clone(),
        core: c.core.clone(),
        cpus,
        capacity_dmips_mhz: c.capacity_dmips_mhz,
        max_khz,
        l1i: cache("l1i", c.l1i)?,
        l1d: cache("l1d", c.l1d)?,
        l2: cache("l2", c.l2)?,
        eas: check_eas(cx, &f("eas"), c.eas)?,
        // Checked once the board's eas tables are (check_eas_board): it needs them.
        dvfs: None,
        idle: crate::dvfs::check_idle(cx, &f("idle"), &c.idle)?,
    })
}

fn check_cache(cx: &Ctx<'_>, field: &str, c: Option<CacheFile>) -> Result<Option<Cache>, BoardError> {
    let Some(c) = c else { return Ok(None) };
    if c.size_kib == 0 || c.size_kib > 1 << 20 {
        return Err(cx.err(
            format!("{field}.size_kib"),
            format!("{} KiB is out of range", c.size_kib),
            "use 1..=1048576 KiB",
        ));
    }
    if !c.line_bytes.is_power_of_two() || !(16..=1024).contains(&c.line_bytes) {
        return Err(cx.err(
            format!("{field}.line_bytes"),
            format!("{} is not a cache line size", c.line_bytes),
            "use a power of two between 16 and 1024 (64 on Cortex-A55/A76)",
        ));
    }
    let size_bytes = c.size_kib * 1024;
    if c.ways == 0 || size_bytes % (c.line_bytes * c.ways) != 0 {
        return Err(cx.err(
            format!("{field}.ways"),
            format!("{} ways do not divide {} KiB into whole sets of {}-byte lines", c.ways, c.size_kib, c.line_bytes),
            "use the associativity from the core's TRM (e.g. 4, 8 or 16)",
        ));
    }
    Ok(Some(Cache { size_bytes, line_bytes: c.line_bytes, ways: c.ways }))
}

fn check_eas(cx: &Ctx<'_>, field: &str, e: Option<EasFile>) -> Result<Option<ClusterEas>, BoardError> {
    let Some(e) = e else { return Ok(None) };
    if e.dynamic_power_coefficient == 0 {
        return Err(cx.err(
            format!("{field}.dynamic_power_coefficient"),
            "0 gives no energy model",
            "use the cpu nodes' dynamic-power-coefficient from the SoC's dtsi (µW/MHz/V², e.g. 232 for SM8150 silver)",
        ));
    }
    if !(100_000..=2_000_000).contains(&e.microvolt) {
        return Err(cx.err(
            format!("{field}.microvolt"),
            format!("{} µV is not a CPU supply voltage", e.microvolt),
            "give the OPP's voltage in microvolts, 100000..=2000000 (e.g. 900000 for 0.9 V)",
        ));
    }
    Ok(Some(ClusterEas { dynamic_power_coefficient: e.dynamic_power_coefficient, microvolt: e.microvolt }))
}

/// EAS needs an energy model on every CPU and CPUs of different capacities
/// (kernel/sched/topology.c `sched_is_eas_possible`, `build_perf_domains`).
fn check_eas_board(cx: &Ctx<'_>, board: &Board) -> Result<(), BoardError> {
    let with: Vec<usize> = (0..board.clusters.len()).filter(|&i| board.clusters[i].eas.is_some()).collect();
    if with.is_empty() {
        return Ok(());
    }
    if let Some(i) = (0..board.clusters.len()).find(|i| !with.contains(i)) {
        return Err(cx.err(
            format!("clusters[{i}].eas"),
            format!("cluster {:?} has no eas but others do", board.clusters[i].name),
            "give every cluster an eas table (Linux builds perf domains only when every CPU has an energy model), or none",
        ));
    }
    let caps = crate::topology::expected_capacities(board);
    if caps.iter().all(|&c| c == caps[0]) {
        return Err(cx.err(
            "clusters[0].eas",
            format!("every CPU has capacity {}: the scheduler runs EAS only on asymmetric capacities", caps[0]),
            "remove the eas tables (a symmetric board runs without EAS), or make the clusters differ",
        ));
    }
    Ok(())
}
