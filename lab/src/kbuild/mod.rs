//! Stage 3: the kernel and the lab QEMU (`qemu`: its tree, keyed build and plugins). The pin
//! (`kernel.lock`) and its download, the merged config fragments, the flavors (fragments and
//! series), the shared git tree carrying a flavor's series, the keyed atomic build, and the
//! series' style checks. Imports `provision` and `support`.

pub mod aosp;
pub mod driver_check;
pub mod driver_text;
pub mod flavor;
pub mod kconfig;
pub mod kernel;
pub mod pin;
pub mod qemu;
pub mod repro;
pub mod setup;
pub mod treatment;
pub mod tree;
