//! binder-lab host library: setup, kernel builds, the QEMU harness. The `lab` binary is its
//! CLI, and the end-to-end tests in tests/ drive it directly.

pub mod apt;
pub mod bench;
pub mod console;
pub mod driver_check;
pub mod html;
pub mod kcidb;
pub mod kconfig;
pub mod kernel;
pub mod kunit;
pub mod lock;
pub mod nightly;
pub mod paths;
pub mod plots;
pub mod qemu;
pub mod qemubuild;
pub mod report;
pub mod reproduce;
pub mod run;
pub mod setup;
pub mod stats;
pub mod testall;
pub mod tree;
pub mod util;
