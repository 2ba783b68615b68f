//! The Rust binder's switch for deferring BR_TRANSACTION_COMPLETE (seed 002), added by
//! the lab-only series rust-driver/lab/: "1" keeps a synchronous call's completion until the reply (the
//! default), "0" returns it at once.

use crate::switch::Switch;
pub use labproto::DEFER_TC_FILE as FILE;

pub const SWITCH: Switch = Switch {
    file: FILE,
    option: "defer-tc",
    missing: "this kernel has no rust_binder/defer_tc; it needs the lab-only series rust-driver/lab/ (C driver: deferral is always on)",
};

/// Sets the switch and returns the value it reads back; an error when the file is absent.
pub fn set(v: u32) -> Result<u32, String> {
    SWITCH.set(v)
}

/// The switch's value, None when the file is absent or unreadable.
pub fn current() -> Option<u32> {
    SWITCH.current()
}
