//! EAS as board data: the energy model Linux builds from a board's single OPP per cluster,
//! and the check of what the guest reports against it.
//!
//! The DT gives each cluster one OPP at its fixed clock (a `fixed-clock` cannot change rate,
//! so more OPPs would be frequencies that never happen) with `opp-microvolt`, and its cpu
//! nodes `dynamic-power-coefficient`. cpufreq-dt registers the energy model from them.

use serde::{Deserialize, Serialize};

use crate::model::{Board, Cluster};
use crate::topology::{expected_capacities, format_cpulist, parse_cpulist};

/// The OPP's power in µW, as drivers/opp/of.c `dev_pm_opp_calc_power` computes it:
/// coefficient × mV² × MHz / 10⁶, in integers (mV and MHz truncated).
pub fn opp_power_uw(c: &Cluster) -> Option<u64> {
    let e = c.eas?;
    let mv = u64::from(e.microvolt / 1000);
    let mhz = u64::from(c.max_khz) / 1000;
    Some(u64::from(e.dynamic_power_coefficient) * mv * mv * mhz / 1_000_000)
}

/// The EM cost of the cluster's OPP, as kernel/power/energy_model.c `em_compute_costs`
/// computes it: power × 10 / performance, where performance at the only (top) OPP is the
/// CPU's capacity.
pub fn em_cost(board: &Board, c: &Cluster) -> Option<u64> {
    let cap = u64::from(*expected_capacities(board).get(*c.cpus.first()? as usize)?);
    Some(opp_power_uw(c)? * 10 / cap.max(1))
}

/// One performance state of a `--dvfs` domain as the guest's energy model should have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateExpect {
    /// The OPP's frequency.
    pub khz: u32,
    /// drivers/opp/of.c `dev_pm_opp_calc_power`: coefficient x mV² x MHz / 10⁶ (integers).
    pub power_uw: u64,
    /// kernel/power/energy_model.c: power x 10 / performance, performance = capacity x f / fmax.
    pub cost: u64,
}

/// The energy model of a cluster's OPPs (`--dvfs`), lowest first; empty without dvfs or eas.
pub fn expected_states(board: &Board, c: &Cluster) -> Vec<StateExpect> {
    let (Some(d), Some(e)) = (&c.dvfs, c.eas) else { return vec![] };
    let Some(cap) = c.cpus.first().and_then(|&cpu| expected_capacities(board).get(cpu as usize).copied()) else {
        return vec![];
    };
    d.opps
        .iter()
        .map(|o| {
            let mv = u64::from(o.microvolt / 1000);
            let power_uw = u64::from(e.dynamic_power_coefficient) * mv * mv * (u64::from(o.khz) / 1000) / 1_000_000;
            let performance = (u64::from(cap) * u64::from(o.khz) / u64::from(c.max_khz)).max(1);
            StateExpect { khz: o.khz, power_uw, cost: power_uw * 10 / performance }
        })
        .collect()
}

/// One perf domain as the guest should report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DomainExpect {
    /// The domain's CPUs in the kernel's list format ("0-3").
    pub cpus: String,
    /// The only OPP's frequency: the cluster's fixed clock.
    pub khz: u32,
    /// The OPP's power ([`opp_power_uw`]).
    pub power_uw: u64,
    /// The OPP's energy-model cost ([`em_cost`]).
    pub cost: u64,
}

/// The perf domains (one per cluster) of a board with EAS; empty without.
pub fn expected_domains(board: &Board) -> Vec<DomainExpect> {
    board
        .clusters()
        .iter()
        .filter_map(|c| {
            Some(DomainExpect {
                cpus: format_cpulist(&c.cpus),
                khz: c.max_khz,
                power_uw: opp_power_uw(c)?,
                cost: em_cost(board, c)?,
            })
        })
        .collect()
}

/// A cpufreq policy as the guest reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyObserved {
    /// N of `cpufreq/policyN`.
    pub policy: u32,
    /// `related_cpus`, in the kernel's list format.
    pub cpus: Option<String>,
    /// `scaling_governor`.
    pub governor: Option<String>,
    /// `scaling_driver`.
    pub driver: Option<String>,
    /// `scaling_cur_freq`.
    pub cur_khz: Option<u64>,
    /// `cpuinfo_max_freq`.
    pub max_khz: Option<u64>,
    /// `scaling_available_frequencies`.
    #[serde(default)]
    pub available_khz: Option<Vec<u64>>,
}

/// One performance state of an energy-model domain (debugfs `energy_model/<dev>/ps:<f>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateObserved {
    /// `frequency`.
    pub khz: Option<u64>,
    /// `power` (µW).
    pub power: Option<u64>,
    /// `cost`.
    pub cost: Option<u64>,
    /// `performance`.
    pub performance: Option<u64>,
}

/// One energy-model domain (debugfs `energy_model/<dev>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainObserved {
    /// The domain's debugfs directory name, e.g. `cpu4`.
    pub name: String,
    /// `cpus`, in the kernel's list format.
    pub cpus: Option<String>,
    /// Its performance states.
    pub states: Vec<StateObserved>,
}

/// The guest's EAS report (the topology step's `eas` object).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EasObserved {
    /// /proc/sys/kernel/sched_energy_aware as read ("" when EAS is impossible, None if absent).
    pub sched_energy_aware: Option<String>,
    /// The cpufreq policies.
    pub policies: Vec<PolicyObserved>,
    /// The energy-model domains.
    pub energy_model: Vec<DomainObserved>,
    /// Kernel log lines about EAS ("sched_energy_set: starting EAS", "Checking EAS ...").
    pub log: Vec<String>,
}

/// The scheduler's perf domains (cpus, number of performance states) from its last
/// `root_domain 0-7: pd7:{ cpus=7 nr_pstate=1 } pd4:{ ... }` line (sched_verbose).
pub fn perf_domains(log: &[String]) -> Vec<(String, u32)> {
    let Some(line) = log.iter().rev().find(|l| l.contains("root_domain") && l.contains("nr_pstate=")) else {
        return vec![];
    };
    let field = |part: &str, key: &str| part.split(key).nth(1)?.split_whitespace().next().map(str::to_string);
    line.split(" pd")
        .skip(1)
        .filter_map(|part| Some((field(part, "cpus=")?, field(part, "nr_pstate=")?.parse().ok()?)))
        .collect()
}

fn same_cpus(a: Option<&str>, b: &str) -> bool {
    a.and_then(parse_cpulist).is_some_and(|v| Some(v) == parse_cpulist(b))
}

/// Compares the guest's EAS report with the board; one message per mismatch.
pub fn compare_eas(board: &Board, o: &EasObserved) -> Vec<String> {
    compare_eas_with(board, o, false)
}

/// [`compare_eas`] for a boot with or without `--dvfs`: with it every cluster is a
/// `qcom-cpufreq-hw` policy offering the board's OPPs, and its energy model has them all.
pub fn compare_eas_with(board: &Board, o: &EasObserved, dvfs: bool) -> Vec<String> {
    if dvfs {
        return compare_dvfs(board, o);
    }
    let mut out = Vec::new();
    let aware = o.sched_energy_aware.as_deref().map(str::trim);
    if !board.has_eas() {
        if aware == Some("1") || !o.energy_model.is_empty() {
            out.push(format!(
                "board: no energy model (no EAS), guest: sched_energy_aware {aware:?}, {} energy-model domains",
                o.energy_model.len()
            ));
        }
        return out;
    }
    if aware != Some("1") {
        out.push(format!("board: EAS, guest: sched_energy_aware {aware:?} (want \"1\")"));
    }
    if !o.log.iter().any(|l| l.contains("starting EAS")) {
        out.push(format!("board: EAS, guest: no \"starting EAS\" in the kernel log ({:?})", o.log));
    }
    let mut pds = perf_domains(&o.log);
    pds.sort();
    let mut want: Vec<(String, u32)> = expected_domains(board).into_iter().map(|d| (d.cpus, 1)).collect();
    want.sort();
    if pds != want {
        out.push(format!("board: perf domains (cpus, OPPs) {want:?}, guest scheduler: {pds:?}"));
    }
    for d in expected_domains(board) {
        match o.policies.iter().find(|p| same_cpus(p.cpus.as_deref(), &d.cpus)) {
            None => out.push(format!("board: cpufreq policy for cpus {}, guest: none", d.cpus)),
            Some(p) => {
                if p.governor.as_deref() != Some("schedutil") {
                    out.push(format!("board: cpus {} governor schedutil, guest: {:?}", d.cpus, p.governor));
                }
                if p.cur_khz != Some(u64::from(d.khz)) || p.max_khz != Some(u64::from(d.khz)) {
                    let (cur, max) = (p.cur_khz, p.max_khz);
                    out.push(format!("board: cpus {} at {} kHz, guest: cur {cur:?} max {max:?}", d.cpus, d.khz));
                }
            }
        }
        let Some(em) = o.energy_model.iter().find(|e| same_cpus(e.cpus.as_deref(), &d.cpus)) else {
            out.push(format!("board: energy-model domain for cpus {}, guest: none", d.cpus));
            continue;
        };
        let want = (Some(u64::from(d.khz)), Some(d.power_uw), Some(d.cost));
        // (a single state: the fixed clock's)
        let got: Vec<_> = em.states.iter().map(|s| (s.khz, s.power, s.cost)).collect();
        if got != [want] {
            out.push(format!(
                "board: cpus {} one state ({} kHz, {} µW, cost {}), guest {}: {got:?}",
                d.cpus, d.khz, d.power_uw, d.cost, em.name
            ));
        }
    }
    out
}

fn compare_dvfs(board: &Board, o: &EasObserved) -> Vec<String> {
    let mut out = Vec::new();
    if o.sched_energy_aware.as_deref().map(str::trim) != Some("1") {
        out.push(format!("board: EAS, guest: sched_energy_aware {:?} (want \"1\")", o.sched_energy_aware));
    }
    let mut pds = perf_domains(&o.log);
    pds.sort();
    let mut want_pds: Vec<(String, u32)> =
        board.clusters().iter().map(|c| (format_cpulist(&c.cpus), expected_states(board, c).len() as u32)).collect();
    want_pds.sort();
    if pds != want_pds {
        out.push(format!("board: perf domains (cpus, OPPs) {want_pds:?}, guest scheduler: {pds:?}"));
    }
    for c in board.clusters() {
        let cpus = format_cpulist(&c.cpus);
        let states = expected_states(board, c);
        let khz: Vec<u64> = states.iter().map(|s| u64::from(s.khz)).collect();
        match o.policies.iter().find(|p| same_cpus(p.cpus.as_deref(), &cpus)) {
            None => out.push(format!("board: cpufreq policy for cpus {cpus}, guest: none")),
            Some(p) => {
                if p.driver.as_deref() != Some("qcom-cpufreq-hw") || p.governor.as_deref() != Some("schedutil") {
                    out.push(format!(
                        "board: cpus {cpus} qcom-cpufreq-hw with schedutil, guest: {:?} with {:?}",
                        p.driver, p.governor
                    ));
                }
                if p.max_khz != Some(u64::from(c.max_khz)) {
                    out.push(format!("board: cpus {cpus} max {} kHz, guest: {:?}", c.max_khz, p.max_khz));
                }
                let mut avail = p.available_khz.clone().unwrap_or_default();
                avail.sort_unstable();
                if avail != khz {
                    out.push(format!("board: cpus {cpus} OPPs {khz:?} kHz, guest: {:?}", p.available_khz));
                }
            }
        }
        let Some(em) = o.energy_model.iter().find(|e| same_cpus(e.cpus.as_deref(), &cpus)) else {
            out.push(format!("board: energy-model domain for cpus {cpus}, guest: none"));
            continue;
        };
        let want: Vec<_> = states.iter().map(|s| (Some(u64::from(s.khz)), Some(s.power_uw), Some(s.cost))).collect();
        let mut got: Vec<_> = em.states.iter().map(|s| (s.khz, s.power, s.cost)).collect();
        got.sort();
        if got != want {
            out.push(format!("board: cpus {cpus} energy model (kHz, µW, cost) {want:?}, guest {}: {got:?}", em.name));
        }
    }
    out
}
