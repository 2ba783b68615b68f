//! The Rust binder's switch for Android's priority inheritance (rust-driver 0011, default 0):
//! "1" raises the thread that takes a synchronous call to the caller's priority (a real-time
//! one only when the node has FLAT_BINDER_FLAG_INHERIT_RT), "0" is mainline's Rust driver.

use crate::switch::{Restore, Switch};
pub use labproto::PRIO_INHERIT_FILE as FILE;

pub const SWITCH: Switch = Switch {
    file: FILE,
    option: "prio-inherit",
    missing: "this kernel has no rust_binder/priority_inheritance; it needs rust-driver 0010-0011 (the C driver of mainline has no such switch)",
};

/// Applies `--prio-inherit 0|1` if given, restoring the previous value when the guard drops;
/// a kernel without the switch is an error. Returns the value in effect (also when the option
/// is absent; None on a kernel without the switch) and the guard.
pub fn apply(a: &crate::Args) -> Result<(Option<u32>, Option<Restore>), String> {
    if !a.has(SWITCH.option) {
        return Ok((SWITCH.current(), None));
    }
    let (v, guard) = Restore::set(&SWITCH, a.get(SWITCH.option, 0)?)?;
    println!("priority_inheritance: {v}");
    Ok((Some(v), Some(guard)))
}
