//! The validated board: the types the rest of the crate (and the lab) works with, so
//! nothing downstream has to re-check invariants such as "each CPU in exactly one
//! cluster". [`crate::validate`] builds them from the raw file ([`crate::schema`]).

use serde::{Deserialize, Serialize};

use crate::error::BoardError;

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
    /// The frequency domain's OPPs (`clusters[].dvfs`), for the emulated qcom-cpufreq-hw.
    pub dvfs: Option<ClusterDvfs>,
    /// The CPUs' idle states, shallowest first.
    pub idle: Vec<IdleState>,
}

/// One frequency domain's operating points, lowest first; the last is `max_khz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDvfs {
    /// The OPPs the domain offers (those above `max_khz` are left out, as a lower speed bin's
    /// firmware leaves them out of its lookup table).
    pub opps: Vec<Opp>,
}

/// One operating point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opp {
    /// Frequency in kHz (cpufreq's unit).
    pub khz: u32,
    /// Supply voltage in µV (a whole number of mV: the LUT holds mV).
    pub microvolt: u32,
}

/// An idle state as the DT's `arm,idle-state` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    /// Short name (`idle-state-name`).
    pub name: String,
    /// `entry-latency-us`.
    pub entry_us: u32,
    /// `exit-latency-us`.
    pub exit_us: u32,
    /// `min-residency-us`.
    pub min_residency_us: u32,
    /// PSCI CPU_SUSPEND `arm,psci-suspend-param`; None for WFI.
    pub psci_param: Option<u32>,
    /// `local-timer-stop`.
    pub local_timer_stop: bool,
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
    pub(crate) source: String,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) qemu_machine: String,
    pub(crate) qemu_cpu: String,
    pub(crate) memory: String,
    pub(crate) memory_bytes: u64,
    pub(crate) smp: u32,
    pub(crate) cpu_map: CpuMap,
    pub(crate) clusters: Vec<Cluster>,
    pub(crate) l3: Option<Cache>,
    pub(crate) timing: Option<Timing>,
    pub(crate) cache_model: Option<lab_cache_model::Config>,
    pub(crate) policy: Option<BoardPolicy>,
    pub(crate) cluster_idle: Vec<IdleState>,
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
    pub fn timing(&self) -> Option<&Timing> {
        self.timing.as_ref()
    }
    /// The cache plugin's model (`[cache_model]` with the board's caches), if the board has it.
    pub fn cache_model(&self) -> Option<&lab_cache_model::Config> {
        self.cache_model.as_ref()
    }
    /// The policy a run applies unless told otherwise: `[policy].default`, or mainline for
    /// a board without a `[policy]` section.
    pub fn default_policy(&self) -> Policy {
        self.policy.as_ref().map(|p| p.default).unwrap_or_default()
    }
    /// The files the guest writes at boot for `policy`, in order (none for mainline).
    pub fn policy_writes(&self, policy: Policy) -> Result<Vec<PolicyWrite>, BoardError> {
        match (policy, &self.policy) {
            (Policy::Mainline, _) => Ok(vec![]),
            (Policy::Phone, Some(p)) => Ok(p.phone.clone()),
            (Policy::Phone, None) => Err(BoardError {
                file: self.source.clone(),
                location: String::new(),
                field: "policy".into(),
                problem: format!("board {:?} has no [policy] section, so it has no phone policy", self.name),
                fix: "run it with --policy mainline, or describe the phone's settings in [policy] \
                      (board/sa8155p.toml has one)"
                    .into(),
            }),
        }
    }
    /// Whether every cluster has DVFS data (`clusters[].dvfs`), so `--dvfs` can run.
    pub fn has_dvfs(&self) -> bool {
        self.clusters.iter().all(|c| c.dvfs.is_some())
    }
    /// Idle states shared by a cluster (or all CPUs), shallowest first.
    pub fn cluster_idle(&self) -> &[IdleState] {
        &self.cluster_idle
    }
    /// Index into [`Board::clusters`] of the cluster holding `cpu`.
    pub fn cluster_index_of(&self, cpu: u32) -> Option<usize> {
        self.clusters.iter().position(|c| c.cpus.contains(&cpu))
    }
}

/// The validated timing model.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Picoseconds per instruction of each CPU, by CPU number.
    pub cpu_ps_per_insn: Vec<u64>,
    /// Quantum Q in guest ns: how far a vCPU may run past the second-smallest local time.
    pub quantum_ns: u64,
}

/// Which scheduler policy a run applies at boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Mainline's: the kernel's own defaults, nothing written.
    #[default]
    Mainline,
    /// The phone's: the board's `[policy]` settings.
    Phone,
}

impl Policy {
    /// Every policy, for option parsers and messages.
    pub const ALL: [Policy; 2] = [Policy::Mainline, Policy::Phone];

    /// The name used in board files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Mainline => "mainline",
            Policy::Phone => "phone",
        }
    }

    /// The policy named `s` (`mainline` or `phone`).
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s)
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One file the guest writes at boot for a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyWrite {
    /// The guest file, e.g. `/sys/kernel/debug/sched/features`.
    pub path: String,
    /// What is written to it, e.g. `SYNC_EAS`.
    pub value: String,
    /// Where the phone's system applies it (a repository and path, or a commit).
    pub source: String,
}

/// A validated `[policy]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardPolicy {
    pub(crate) default: Policy,
    pub(crate) phone: Vec<PolicyWrite>,
}
