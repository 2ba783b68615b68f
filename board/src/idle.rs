//! Idle states in the guest (`--idle`): the per-CPU states of `clusters[].idle` as the DT's
//! `idle-states` node, entered through PSCI CPU_SUSPEND, and their exit latencies as the lab
//! QEMU's `-icount idle-exit=` list (qemu/0013), which makes a woken vCPU pay them.
//!
//! QEMU's PSCI reports no extended power_state format (PSCI_FEATURES(CPU_SUSPEND) = 0), so
//! Linux checks each `arm,psci-suspend-param` against the original format (StateID in bits
//! 15:0, type in bit 16, affinity level in 25:24) and refuses sm8150.dtsi's `0x40000004`
//! (extended format, power-down bit 30). QEMU would refuse a power-down request anyway, or
//! return from it, which arm64's `cpu_suspend` takes as a failure. The guest therefore gets
//! each state as a retention-type parameter with the StateID kept; the hierarchical cluster
//! state (`cluster_idle`) needs PSCI OS-initiated mode, which QEMU lacks, and is left out.

use anyhow::{bail, Result};

use crate::model::{Board, IdleState};

/// The retention-type, original-format `power_state` of a state whose board parameter is
/// `param` (either format): its StateID, type 0, affinity level 0.
pub fn retention_param(param: u32) -> Result<u32> {
    // Extended format: StateID in 27:0; the original format has only 15:0 for it.
    let id = param & 0x0fff_ffff;
    if id > 0xffff {
        bail!(
            "PSCI parameter {param:#x} has StateID {id:#x}, wider than the 16 bits QEMU's original-format \
             power_state holds: give the state a StateID below 0x10000 or leave it out of clusters[].idle"
        );
    }
    Ok(id)
}

/// The states of CPU `cpu` the guest enters through PSCI (WFI, cpuidle's built-in state 0,
/// has no parameter and is not listed), with the parameter the guest passes.
pub fn cpu_idle_states(board: &Board, cpu: u32) -> Result<Vec<(u32, &IdleState)>> {
    let Some(c) = board.cluster_index_of(cpu) else { bail!("cpu{cpu} is in no cluster of {}", board.source()) };
    board.clusters()[c].idle.iter().filter_map(|s| s.psci_param.map(|p| retention_param(p).map(|r| (r, s)))).collect()
}

/// Whether every CPU has at least one PSCI idle state (what `--idle` needs).
pub fn has_idle(board: &Board) -> bool {
    board.clusters().iter().all(|c| c.idle.iter().any(|s| s.psci_param.is_some()))
}

/// The lab QEMU's `-icount idle-exit=` value: per vCPU (`:`-separated, in CPU order) its
/// states as `PARAM@EXIT_NS`, `+`-joined.
pub fn idle_exit_arg(board: &Board) -> Result<String> {
    let mut cpus = Vec::new();
    for cpu in 0..board.smp() {
        let states: Vec<String> = cpu_idle_states(board, cpu)?
            .iter()
            .map(|(p, s)| format!("{p:#x}@{}", u64::from(s.exit_us) * 1000))
            .collect();
        cpus.push(states.join("+"));
    }
    Ok(cpus.join(":"))
}
