//! The board TOML schema, its loading and its validation.
//!
//! The raw serde structs (`*File`) mirror the TOML exactly and reject unknown fields;
//! [`Board`] is the validated form the rest of the crate (and the lab) works with, so
//! nothing downstream has to re-check invariants such as "each CPU in exactly one
//! cluster".

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// Largest `smp` QEMU's virt machine accepts with GICv3.
const MAX_SMP: u32 = 512;

/// A board file that cannot be used, with everything needed to fix it.
///
/// `Display` gives the full actionable message:
/// `board/x.toml: clusters[1].cpus: cpu 4 is in clusters "silver" and "gold"; list each CPU in exactly one cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardError {
    /// The board file (as given to [`Board::load`] or [`Board::from_str_named`]).
    pub file: String,
    /// `line L, column C` when the TOML parser knows it, else empty.
    pub location: String,
    /// Dotted path of the offending field, e.g. `clusters[1].cpus`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
}

impl fmt::Display for BoardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        if !self.location.is_empty() {
            write!(f, "{}: ", self.location)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}; {}", self.problem, self.fix)
    }
}

impl std::error::Error for BoardError {}

// ---------------------------------------------------------------- raw TOML schema

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BoardFile {
    /// Defaults to the file stem.
    name: Option<String>,
    description: Option<String>,
    qemu: QemuFile,
    #[serde(default)]
    cpu_map: CpuMapFile,
    clusters: Vec<ClusterFile>,
    l3: Option<CacheFile>,
    expect: Option<ExpectFile>,
    timing: Option<crate::timing::TimingFile>,
    cache_model: Option<crate::cache_model::CacheModelFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QemuFile {
    machine: String,
    cpu: String,
    memory: String,
    smp: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CpuMapFile {
    #[serde(default)]
    layout: CpuMapLayout,
    #[serde(default = "yes")]
    socket: bool,
}

impl Default for CpuMapFile {
    fn default() -> Self {
        CpuMapFile { layout: CpuMapLayout::default(), socket: true }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    name: String,
    core: String,
    cpus: Vec<u32>,
    capacity_dmips_mhz: u32,
    max_mhz: f64,
    l1i: Option<CacheFile>,
    l1d: Option<CacheFile>,
    l2: Option<CacheFile>,
    eas: Option<EasFile>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct EasFile {
    dynamic_power_coefficient: u32,
    microvolt: u32,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    size_kib: u32,
    line_bytes: u32,
    ways: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectFile {
    pub(crate) cpu_capacity: Option<Vec<u32>>,
    pub(crate) cluster_id: Option<Vec<i32>>,
    pub(crate) em_cost: Option<Vec<u64>>,
}

// ---------------------------------------------------------------- validated model

/// How the `[[clusters]]` become the DT `cpu-map`, which is what Linux's
/// `topology/cluster_id` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum CpuMapLayout {
    /// One cpu-map `clusterN` per `[[clusters]]` entry, in file order.
    #[default]
    #[serde(rename = "per-cluster")]
    PerCluster,
    /// A single cpu-map `cluster0` holding every CPU (upstream sm8150.dtsi); the
    /// `[[clusters]]` are then only frequency/capacity domains.
    #[serde(rename = "single")]
    Single,
}

/// The cpu-map shape to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMap {
    /// Per-cluster or single cluster.
    pub layout: CpuMapLayout,
    /// Wrap clusters in `socket0 { }`; Linux reports the same cluster_id either way.
    pub socket: bool,
}

/// One cache level as the DT describes it (`*-cache-size`, `*-line-size`, `*-sets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cache {
    /// Total size in bytes.
    pub size_bytes: u32,
    /// Line size in bytes (a power of two).
    pub line_bytes: u32,
    /// Associativity.
    pub ways: u32,
}

impl Cache {
    /// Number of sets; Linux derives ways from size / (sets * line).
    pub fn sets(&self) -> u32 {
        self.size_bytes / (self.line_bytes * self.ways)
    }
}

/// A group of identical CPUs sharing a clock (a real cluster / frequency domain).
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// Short name, e.g. "silver"; used in clock names and messages.
    pub name: String,
    /// The real core (documentation only: QEMU runs every vCPU as `qemu.cpu`).
    pub core: String,
    /// Logical CPU numbers, ascending.
    pub cpus: Vec<u32>,
    /// DT `capacity-dmips-mhz`.
    pub capacity_dmips_mhz: u32,
    /// Max clock in kHz, the unit Linux's arch_topology uses (`clk_get_rate / 1000`).
    pub max_khz: u32,
    /// Per-core L1 instruction cache.
    pub l1i: Option<Cache>,
    /// Per-core L1 data cache.
    pub l1d: Option<Cache>,
    /// Per-core (private) L2.
    pub l2: Option<Cache>,
    /// Energy model of the cluster's single OPP, for EAS.
    pub eas: Option<ClusterEas>,
}

/// One cluster's energy model: a single OPP at the fixed clock (`max_khz`), whose power
/// Linux computes from the cpu nodes' `dynamic-power-coefficient` and the OPP's
/// `opp-microvolt` (drivers/opp/of.c `dev_pm_opp_calc_power`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterEas {
    /// DT `dynamic-power-coefficient`, µW/MHz/V².
    pub dynamic_power_coefficient: u32,
    /// The OPP's `opp-microvolt`.
    pub microvolt: u32,
}

impl Cluster {
    /// Clock rate for the DT `fixed-clock` (`clock-frequency`, u32 Hz).
    pub fn clock_hz(&self) -> u32 {
        // Validation guarantees this fits.
        self.max_khz * 1000
    }
}

/// A validated board.
#[derive(Debug, Clone, PartialEq)]
pub struct Board {
    source: String,
    name: String,
    description: String,
    qemu_machine: String,
    qemu_cpu: String,
    memory: String,
    memory_bytes: u64,
    smp: u32,
    cpu_map: CpuMap,
    clusters: Vec<Cluster>,
    l3: Option<Cache>,
    timing: Option<crate::timing::Timing>,
    cache_model: Option<lab_cache_model::Config>,
}

impl Board {
    /// Board name (TOML `name`, default: the file stem).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// One-line description, may be empty.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// Where the board came from, for messages.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// QEMU `-M` value, e.g. `virt,gic-version=3`.
    pub fn qemu_machine(&self) -> &str {
        &self.qemu_machine
    }
    /// QEMU `-cpu` value for every vCPU.
    pub fn qemu_cpu(&self) -> &str {
        &self.qemu_cpu
    }
    /// QEMU `-m` value exactly as written, e.g. `2G`.
    pub fn memory(&self) -> &str {
        &self.memory
    }
    /// Memory in bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }
    /// QEMU `-smp` value = number of CPUs.
    pub fn smp(&self) -> u32 {
        self.smp
    }
    /// cpu-map shape.
    pub fn cpu_map(&self) -> CpuMap {
        self.cpu_map
    }
    /// Clusters in file order.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }
    /// Shared last-level cache, if described.
    pub fn l3(&self) -> Option<Cache> {
        self.l3
    }
    /// Whether the board describes an energy model (and so runs EAS).
    pub fn has_eas(&self) -> bool {
        self.clusters.iter().any(|c| c.eas.is_some())
    }
    /// The same board without its energy model (`--no-eas`): no OPP tables, no EAS.
    pub fn without_eas(&self) -> Board {
        let mut b = self.clone();
        b.clusters.iter_mut().for_each(|c| c.eas = None);
        b
    }
    /// The heterogeneous-icount parameters (`[timing]`), if the board has them.
    pub fn timing(&self) -> Option<&crate::timing::Timing> {
        self.timing.as_ref()
    }
    /// The cache plugin's model (`[cache_model]` with the board's caches), if the board has it.
    pub fn cache_model(&self) -> Option<&lab_cache_model::Config> {
        self.cache_model.as_ref()
    }
    /// Index into [`Board::clusters`] of the cluster holding `cpu`.
    pub fn cluster_index_of(&self, cpu: u32) -> Option<usize> {
        self.clusters.iter().position(|c| c.cpus.contains(&cpu))
    }
}

// ---------------------------------------------------------------- parsing

pub(crate) fn parse_toml(text: &str, file: &str) -> Result<BoardFile, BoardError> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let location = inner
            .span()
            .map(|s| {
                let (line, col) = line_col(text, s.start);
                format!("line {line}, column {col}")
            })
            .unwrap_or_default();
        let problem = inner.message().trim().to_string();
        let fix = if problem.contains("unknown field") {
            "remove the field or correct its spelling to one of the expected names"
        } else if problem.contains("missing field") {
            "add the field (board/sa8155p.toml is a complete example)"
        } else if problem.contains("unknown variant") {
            "use one of the expected values"
        } else if problem.contains("invalid type") {
            "write the value with the expected type (board/sa8155p.toml is a complete example)"
        } else {
            "correct the TOML (board/sa8155p.toml is a complete example)"
        };
        BoardError {
            file: file.to_string(),
            location,
            field: if field == "." { String::new() } else { field },
            problem,
            fix: fix.into(),
        }
    })
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

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

// ---------------------------------------------------------------- validation

pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn err(&self, field: impl Into<String>, problem: impl Into<String>, fix: &str) -> BoardError {
        BoardError {
            file: self.file.to_string(),
            location: String::new(),
            field: field.into(),
            problem: problem.into(),
            fix: fix.to_string(),
        }
    }
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
        Some(t) => Some(crate::timing::validate(t, &clusters, smp).map_err(|(f, p, fix)| cx.err(f, p, &fix))?),
        None => None,
    };
    let cache_model = match &raw.cache_model {
        Some(m) => Some(
            crate::cache_model::validate(m, &clusters, l3, timing.as_ref(), smp)
                .map_err(|(f, p, fix)| cx.err(f, p, &fix))?,
        ),
        None => None,
    };
    let q = &raw.qemu;
    let board = Board {
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
    };
    check_eas_board(&cx, &board)?;
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
    })
}

fn mhz_to_khz(mhz: f64) -> Result<u32, String> {
    if !mhz.is_finite() || mhz <= 0.0 || mhz >= 10_000.0 {
        return Err(format!("{mhz} MHz is out of range"));
    }
    let khz = (mhz * 1000.0).round();
    if (mhz * 1000.0 - khz).abs() > 1e-6 {
        return Err(format!("{mhz} MHz is not a whole number of kHz"));
    }
    // clock-frequency is u32 Hz.
    if khz * 1000.0 > f64::from(u32::MAX) {
        return Err(format!("{mhz} MHz does not fit the DT's 32-bit clock-frequency"));
    }
    Ok(khz as u32)
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
