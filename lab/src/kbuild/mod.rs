//! Stage 2: the kernel. The pin (`kernel.lock`) and its download, the merged config
//! fragments, the flavors (fragments and series), the shared git tree carrying a flavor's series, the keyed atomic build, and the
//! series' style checks. Imports `provision` and `support`.

pub mod driver_check;
pub mod flavor;
pub mod kconfig;
pub mod kernel;
pub mod pin;
pub mod setup;
pub mod tree;
