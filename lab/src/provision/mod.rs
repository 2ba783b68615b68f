//! Stage 2: the host toolchain and downloads (apt, rust-src, bindgen, busybox). Imports only
//! `support`.

pub mod aosp_src;
pub mod apt;
pub mod crates;
pub mod debs;
pub mod downloads;
pub mod kcidb_io;
pub mod postgres;
pub mod qemu_src;
pub mod toolchain;
