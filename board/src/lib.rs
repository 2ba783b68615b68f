//! Boards as data.
//!
//! A board TOML (board/*.toml) describes the SoC we pretend to be: QEMU command-line
//! settings plus the CPU clusters, their capacities, clocks and caches. From it this
//! crate
//! - validates the file with errors that name file, field and fix ([`Board::load`]),
//! - patches QEMU's own virt DTB so the guest sees that topology ([`generate_dtb`]; the
//!   harness runs QEMU to dump that DTB: this crate is pure, TOML in and DTB bytes out),
//! - says what the guest must report in sysfs and diffs the guest's report against it
//!   ([`expected_topology`], [`compare`]; for EAS [`expected_domains`], [`compare_eas`]).
//!
//! QEMU's virt machine cannot mix core models, so every vCPU runs `qemu.cpu`; the
//! asymmetry lives entirely in the DT (capacity-dmips-mhz + per-cluster clocks), which
//! is all Linux's arch_topology uses to compute `cpu_capacity`.

mod cache_model;
mod dtb;
mod eas;
mod expect;
mod load;
mod schema;
mod timing;
mod topology;

pub use dtb::{dtb_to_dts, generate_dtb, qemu_dtb_key};
pub use eas::{
    compare_eas, em_cost, expected_domains, opp_power_uw, perf_domains, DomainExpect, DomainObserved, EasObserved,
    PolicyObserved, StateObserved,
};
pub use schema::{parse_memory, Board, BoardError, Cache, Cluster, ClusterEas, CpuMap, CpuMapLayout};
pub use timing::{derived_ps_per_insn, Timing};
pub use topology::{
    compare, cpu_map_clusters, expected_capacities, expected_topology, format_cpulist, parse_cpulist, CpuExpect,
    CpuObserved,
};

#[cfg(test)]
mod tests;
