//! The board TOML as written: raw serde structs (`*File`) that mirror the file exactly and
//! reject unknown fields, and the parser whose errors carry line and column.
//! [`crate::validate`] turns them into the [`crate::model`] types.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::BoardError;
use crate::model::CpuMapLayout;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BoardFile {
    /// Defaults to the file stem.
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) qemu: QemuFile,
    #[serde(default)]
    pub(crate) cpu_map: CpuMapFile,
    pub(crate) clusters: Vec<ClusterFile>,
    pub(crate) l3: Option<CacheFile>,
    pub(crate) expect: Option<ExpectFile>,
    pub(crate) timing: Option<TimingFile>,
    pub(crate) cache_model: Option<CacheModelFile>,
    pub(crate) policy: Option<PolicyFile>,
    /// Idle states of a whole cluster / the CPU subsystem, shallowest first.
    #[serde(default)]
    pub(crate) cluster_idle: Vec<IdleStateFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QemuFile {
    pub(crate) machine: String,
    pub(crate) cpu: String,
    pub(crate) memory: String,
    pub(crate) smp: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CpuMapFile {
    #[serde(default)]
    pub(crate) layout: CpuMapLayout,
    #[serde(default = "yes")]
    pub(crate) socket: bool,
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
pub(crate) struct ClusterFile {
    pub(crate) name: String,
    pub(crate) core: String,
    pub(crate) cpus: Vec<u32>,
    pub(crate) capacity_dmips_mhz: u32,
    pub(crate) max_mhz: f64,
    pub(crate) l1i: Option<CacheFile>,
    pub(crate) l1d: Option<CacheFile>,
    pub(crate) l2: Option<CacheFile>,
    pub(crate) eas: Option<EasFile>,
    pub(crate) dvfs: Option<DvfsFile>,
    /// The CPUs' own idle states, shallowest first.
    #[serde(default)]
    pub(crate) idle: Vec<IdleStateFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DvfsFile {
    pub(crate) opp_mhz: Vec<f64>,
    pub(crate) min_microvolt: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdleStateFile {
    pub(crate) name: String,
    pub(crate) entry_us: u32,
    pub(crate) exit_us: u32,
    pub(crate) min_residency_us: u32,
    /// PSCI CPU_SUSPEND power_state; absent for WFI (cpuidle's built-in state 0).
    pub(crate) psci_param: Option<u32>,
    #[serde(default)]
    pub(crate) local_timer_stop: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EasFile {
    pub(crate) dynamic_power_coefficient: u32,
    pub(crate) microvolt: u32,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheFile {
    pub(crate) size_kib: u32,
    pub(crate) line_bytes: u32,
    pub(crate) ways: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectFile {
    pub(crate) cpu_capacity: Option<Vec<u32>>,
    pub(crate) cluster_id: Option<Vec<i32>>,
    pub(crate) em_cost: Option<Vec<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimingFile {
    pub(crate) ipc_1024: f64,
    pub(crate) quantum_ns: u64,
    /// Per-cluster overrides (by cluster name) of the derived figure.
    #[serde(default)]
    pub(crate) ps_per_insn: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheModelFile {
    pub(crate) dram_ns: f64,
    /// Per cluster name.
    pub(crate) cycles: BTreeMap<String, CyclesFile>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CyclesFile {
    pub(crate) l1d: f64,
    pub(crate) l2: f64,
    pub(crate) l3: f64,
    pub(crate) same_cluster: f64,
    pub(crate) cross_cluster: f64,
}

/// `[policy]`: the phone's scheduler switches and boot-time sysctls, each with its source.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// The policy a run applies without `--policy`.
    #[serde(default)]
    pub(crate) default: crate::model::Policy,
    #[serde(default)]
    pub(crate) features: Vec<FeatureFile>,
    #[serde(default)]
    pub(crate) sysctl: Vec<SysctlFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FeatureFile {
    pub(crate) name: String,
    pub(crate) source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SysctlFile {
    pub(crate) name: String,
    pub(crate) value: SysctlValue,
    pub(crate) source: String,
}

/// A sysctl's value: a number or a string, written as text.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum SysctlValue {
    Int(i64),
    Text(String),
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
