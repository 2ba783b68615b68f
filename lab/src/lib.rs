//! binder-lab host library: setup, kernel builds, the QEMU harness, reports and
//! measurements. The `lab` binary is its CLI, and the end-to-end tests in tests/ drive it
//! directly.
//!
//! One folder per pipeline stage; a module imports only its own stage and the stages below
//! it (`tidy::stage_imports_point_down` enforces this):
//!
//! ```text
//! cli → measure → report → harness → kbuild → provision → numbers → support
//! ```
//!
//! `measure` and `report` sit side by side in ARCHITECTURE.md's picture (both read a run's
//! outcome); measure also uses report to run a plan with its reports, never the reverse.

pub mod cli;
pub mod harness;
pub mod kbuild;
pub mod measure;
pub mod numbers;
pub mod provision;
pub mod report;
pub mod support;

#[cfg(test)]
mod tidy;
