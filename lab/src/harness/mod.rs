//! Stage 4: one guest run. Options and inputs, QEMU's argv, the DTB cache, the run itself,
//! here or as a LAVA job on a farm (`lava`), its outcome and manifest, the console's splat
//! scanner and KTAP parser, the board's `[expect]` check. Imports `kbuild`, `provision` and `support`.

pub mod adhoc;
pub mod aosp_output;
pub mod board_override;
pub mod boot_cache;
pub mod boots;
pub mod collect;
pub mod dtb;
pub mod expect;
pub mod features;
pub mod gdb;
pub mod gtest;
pub mod ktap;
pub mod lava;
pub mod manifest;
pub mod monitor;
pub mod opts;
pub mod outcome;
pub mod prepare;
pub mod qemu;
pub mod run;
pub mod selftest;
pub mod sockets;
pub mod splat;
pub mod trace;
