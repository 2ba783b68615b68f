//! Stage 2: the kernel. The pin (`kernel.lock`) and its download, the merged config
//! fragments, the shared git tree carrying `rust-driver/`, the keyed atomic build, and the
//! series' style checks. Imports `provision` and `support`.

pub mod driver_check;
pub mod kconfig;
pub mod kernel;
pub mod pin;
pub mod setup;
pub mod tree;
