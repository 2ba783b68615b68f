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
//!
//! The modules: `schema` is the file as written, `model` the validated types, `validate`
//! (with `timing`, `cache_model`, `policy` and `expect` for their sections) turns one into the
//! other, `error` is the one error type; `topology`, `eas` and `dtb` read the model, and
//! [`Board::policy_writes`] the scheduler policy the guest init applies at boot.
//!
//! ```
//! // Four small and four big CPUs: the small ones at half the big ones' capacity.
//! let toml = r#"
//! [qemu]
//! machine = "virt,gic-version=3"
//! cpu = "cortex-a76"
//! memory = "2G"
//! smp = 8
//!
//! [[clusters]]
//! name = "little"
//! core = "cortex-a55"
//! cpus = [0, 1, 2, 3]
//! capacity_dmips_mhz = 512
//! max_mhz = 2000
//!
//! [[clusters]]
//! name = "big"
//! core = "cortex-a76"
//! cpus = [4, 5, 6, 7]
//! capacity_dmips_mhz = 1024
//! max_mhz = 2000
//! "#;
//! let board = board::Board::from_str_named(toml, "board/example.toml")?;
//! let capacities: Vec<u32> = board::expected_topology(&board).iter().map(|c| c.capacity).collect();
//! assert_eq!(capacities, [512, 512, 512, 512, 1024, 1024, 1024, 1024]);
//!
//! // A mistake is an error that names the file, the field and the fix.
//! let e = board::Board::from_str_named(&toml.replace("smp = 8", "smp = 9"), "board/example.toml").unwrap_err();
//! assert_eq!(e.field, "clusters");
//! assert!(e.to_string().starts_with("board/example.toml: clusters: cpu 8 is in no cluster"), "{e}");
//! # Ok::<(), board::BoardError>(())
//! ```

#![deny(missing_docs)]

mod cache_model;
mod dtb;
mod dvfs;
mod eas;
mod error;
mod expect;
mod idle;
mod load;
mod model;
mod policy;
mod schema;
mod timing;
mod topology;
mod validate;

pub use dtb::{dtb_to_dts, generate_dtb, generate_dtb_with, qemu_dtb_key, DtbFeatures};
pub use dvfs::{
    cpufreq_domains, cpufreq_hw_devices, cpufreq_hw_reg, lut_words, CpufreqDomain, LutRow, ALTERNATE_HZ,
    CPUFREQ_HW_BASE, XO_HZ,
};
pub use eas::{
    compare_eas, compare_eas_with, em_cost, expected_domains, expected_states, opp_power_uw, perf_domains,
    DomainExpect, DomainObserved, EasObserved, PolicyObserved, StateExpect, StateObserved,
};
pub use error::BoardError;
pub use idle::{cpu_idle_states, has_idle, idle_exit_arg, retention_param};
pub use model::{
    Board, Cache, Cluster, ClusterDvfs, ClusterEas, CpuMap, CpuMapLayout, IdleState, Opp, Policy, PolicyWrite, Timing,
};
pub use policy::SCHED_FEATURES;
pub use timing::derived_ps_per_insn;
pub use topology::{
    compare, cpu_map_clusters, expected_capacities, expected_topology, format_cpulist, parse_cpulist, CpuExpect,
    CpuObserved,
};
pub use validate::parse_memory;

#[cfg(test)]
mod tests;
