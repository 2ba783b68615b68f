//! Helpers shared by the guest test programs (conformance suite, fuzzer): seeded random
//! numbers, checksummed payloads, the kernel log, binderfs statistics, which driver runs.
//! Everything but [`kmsg`] I/O is pure and tested on the host. Forked helper processes
//! are `syskit::child`.

pub mod genl;
pub mod kmsg;
pub mod logs;
pub mod payload;
pub mod rng;

/// Which binder driver the kernel runs.
///
/// Detected by what each driver registers: the Rust driver is the built-in module
/// `rust_binder` (`/sys/module/rust_binder`, from its `ctabs` parameter) with
/// `/sys/kernel/debug/rust_binder`; the C driver is the module `binder_linux`
/// (`/sys/module/binder_linux/parameters/debug_mask`) with `/sys/kernel/debug/binder`. The
/// sysfs paths do not depend on debugfs being mounted, the debugfs ones do not depend on
/// module parameters; either is enough. The two drivers exclude each other in Kconfig.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Rust,
    C,
}

/// Paths whose existence shows the Rust driver, then those showing the C driver.
const RUST_SIGNS: &[&str] = &["/sys/module/rust_binder", "/sys/kernel/debug/rust_binder"];
const C_SIGNS: &[&str] = &["/sys/module/binder_linux/parameters/debug_mask", "/sys/kernel/debug/binder"];

impl Driver {
    pub fn detect() -> Driver {
        Self::detect_by(|p| std::path::Path::new(p).exists())
    }

    /// Decides from `exists` (tested on the host). With no sign of either driver (no
    /// debugfs, no module parameters), the Rust driver, the lab's default kernel.
    pub fn detect_by(exists: impl Fn(&str) -> bool) -> Driver {
        if RUST_SIGNS.iter().any(|p| exists(p)) {
            Driver::Rust
        } else if C_SIGNS.iter().any(|p| exists(p)) {
            Driver::C
        } else {
            Driver::Rust
        }
    }

    /// The paths that made [`Driver::detect`] decide, for reports.
    pub fn evidence() -> Vec<&'static str> {
        RUST_SIGNS.iter().chain(C_SIGNS).copied().filter(|p| std::path::Path::new(p).exists()).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Driver::Rust => "rust",
            Driver::C => "c",
        }
    }
}

/// A debug kernel (lockdep: /proc/lockdep) runs several times slower under TCG.
pub fn is_debug_kernel() -> bool {
    std::path::Path::new("/proc/lockdep").exists()
}

/// Resident pages of the mapping [`start`, `start+len`) of the calling process (mincore).
pub fn resident_pages(start: u64, len: usize) -> std::io::Result<usize> {
    if len == 0 {
        return Ok(0);
    }
    let page = 4096usize;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: [start, start+len) is a live mapping of this process (the caller's binder
    // mapping), page aligned; vec has one byte per page.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Rss (kB) of the binder mappings of process `pid`, from /proc/PID/smaps.
pub fn binder_rss_kb(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    Some(parse_binder_rss_kb(&text))
}

/// Sums `Rss:` of the smaps blocks whose mapping is a binder device.
pub fn parse_binder_rss_kb(smaps: &str) -> u64 {
    let mut in_binder = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        // A block header starts with "start-end" (hex).
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            // /dev/binderfs/NAME or a static /dev/binder node (not /bin/binder-*).
            in_binder = path.starts_with("/dev/binder");
        } else if in_binder {
            if let Some(v) = line.strip_prefix("Rss:") {
                total += v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::Driver;

    #[test]
    fn driver_detection() {
        let only = |set: &'static [&'static str]| move |p: &str| set.contains(&p);
        assert_eq!(Driver::detect_by(only(&["/sys/module/rust_binder"])), Driver::Rust);
        assert_eq!(Driver::detect_by(only(&["/sys/kernel/debug/rust_binder"])), Driver::Rust);
        assert_eq!(Driver::detect_by(only(&["/sys/module/binder_linux/parameters/debug_mask"])), Driver::C);
        assert_eq!(Driver::detect_by(only(&["/sys/kernel/debug/binder"])), Driver::C);
        assert_eq!(Driver::detect_by(only(&[])), Driver::Rust);
    }

    #[test]
    fn smaps_rss_of_binder_mappings() {
        let smaps = "\
55d0a000-55d0b000 r--p 00000000 00:02 12 /bin/binder-conformance
Rss:                   4 kB
7f0000000000-7f00000fe000 r--p 00000000 00:1a 3 /dev/binderfs/binder
Size:               1016 kB
Rss:                  12 kB
Pss:                  12 kB
7f1000000000-7f1000021000 rw-p 00000000 00:00 0
Rss:                 100 kB
";
        assert_eq!(super::parse_binder_rss_kb(smaps), 12);
    }
}
