//! The Rust binder's switch for deferring BR_TRANSACTION_COMPLETE (seed 002), added by
//! rust-driver patch 0005: "1" keeps a synchronous call's completion until the reply (the
//! default), "0" returns it at once.

pub use labproto::DEFER_TC_FILE as FILE;

/// Why `--defer-tc` cannot work on a kernel without the switch.
pub const MISSING: &str =
    "this kernel has no rust_binder/defer_tc; it needs rust-driver patch 0005 (C driver: deferral is always on)";

/// Checks a `--defer-tc` value: 0 or 1.
pub fn check(v: u32) -> Result<u32, String> {
    match v {
        0 | 1 => Ok(v),
        _ => Err(format!("--defer-tc takes 0 or 1, not {v}")),
    }
}

/// Sets the switch and returns the value it reads back; an error when the file is absent.
pub fn set(v: u32) -> Result<u32, String> {
    if !crate::write_switch(FILE, check(v)?)? {
        return Err(MISSING.into());
    }
    current().ok_or_else(|| format!("{FILE}: unreadable after writing {v}"))
}

/// The switch's value, None when the file is absent or unreadable.
pub fn current() -> Option<u32> {
    crate::read_switch(FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(check(0), Ok(0));
        assert_eq!(check(1), Ok(1));
        assert!(check(2).unwrap_err().contains("0 or 1"));
    }
}
