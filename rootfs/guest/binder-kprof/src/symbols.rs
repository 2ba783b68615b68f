//! /proc/kallsyms as a sorted table of text symbols, and sample attribution to functions.

use std::collections::BTreeMap;

/// Functions of the idle loop: a CPU with nothing to run waits there (WFI).
const IDLE: &[&str] =
    &["cpu_do_idle", "arch_cpu_idle", "default_idle_call", "do_idle", "cpuidle_idle_call", "cpu_idle_poll"];

/// arm64 kernel addresses are in the upper half (TTBR1).
const KERNEL_START: u64 = 0xffff_0000_0000_0000;

pub struct Symbols {
    /// (address, name), sorted by address.
    text: Vec<(u64, String)>,
}

/// Samples per function, most first, and what could not go to a function.
pub struct Profile {
    pub by_function: Vec<(String, u64)>,
    pub idle: u64,
    pub unresolved: u64,
    /// Samples taken in user mode: the PMU interrupt arrived after the return to EL0 (the
    /// counter itself counts EL1 only).
    pub user: u64,
}

impl Profile {
    /// Samples outside the idle loop.
    pub fn busy(&self) -> u64 {
        self.by_function.iter().map(|(_, n)| n).sum::<u64>() + self.unresolved
    }
}

/// A readable name for a Rust v0-mangled symbol (`_RNv...`): its identifiers joined with
/// `::` (`rust_binder::process::Process::buffer_alloc`); other names as they are. Generic
/// arguments and disambiguators are dropped, which is enough to tell functions apart here.
pub fn short_name(name: &str) -> String {
    let Some(rest) = name.strip_prefix("_R") else { return name.to_string() };
    let b = rest.as_bytes();
    let (mut i, mut parts) = (0, vec![]);
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && b[i - 1].is_ascii_digit()) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n: usize = rest[start..i].parse().unwrap_or(0);
        // An identifier may start with `_` separating it from the length (for a leading digit).
        let from = if b.get(i) == Some(&b'_') { i + 1 } else { i };
        if n == 0 || from + n > b.len() {
            continue;
        }
        let ident = &rest[from..from + n];
        if ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !ident.starts_with(char::is_numeric) {
            parts.push(ident);
            i = from + n;
        }
    }
    if parts.is_empty() {
        name.to_string()
    } else {
        parts.join("::")
    }
}

impl Symbols {
    pub fn load() -> Result<Symbols, String> {
        let text = std::fs::read_to_string("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
        let s = Symbols::parse(&text);
        if s.text.is_empty() {
            return Err("/proc/kallsyms has no text symbols with addresses (CONFIG_KALLSYMS, kptr_restrict)".into());
        }
        Ok(s)
    }

    /// `ffff800080010000 T _stext` lines; text symbols (t/T) only, zero addresses dropped.
    pub fn parse(text: &str) -> Symbols {
        let mut v: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok().filter(|a| *a != 0)?;
                let kind = it.next()?;
                let name = it.next()?;
                matches!(kind, "t" | "T").then(|| (addr, short_name(name)))
            })
            .collect();
        v.sort();
        Symbols { text: v }
    }

    /// The function containing `ip`: the last symbol at or below it.
    pub fn lookup(&self, ip: u64) -> Option<&str> {
        let i = self.text.partition_point(|(a, _)| *a <= ip);
        (i > 0).then(|| self.text[i - 1].1.as_str())
    }

    pub fn attribute(&self, ips: &[u64]) -> Profile {
        let mut m: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut idle, mut unresolved, mut user) = (0, 0, 0);
        for &ip in ips {
            if ip < KERNEL_START {
                user += 1;
                continue;
            }
            match self.lookup(ip) {
                Some(f) if IDLE.contains(&f) => idle += 1,
                Some(f) => *m.entry(f).or_default() += 1,
                None => unresolved += 1,
            }
        }
        let mut by_function: Vec<(String, u64)> = m.into_iter().map(|(f, n)| (f.to_string(), n)).collect();
        by_function.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Profile { by_function, idle, unresolved, user }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "ffff800080010000 T _stext\nffff800080010100 t cpu_do_idle\nffff800080010200 T binder_ioctl\n\
                            ffff800080010300 d some_data\nffff800080010400 T binder_transaction\n0000000000000000 T hidden\n";

    #[test]
    fn rust_names_are_shortened() {
        assert_eq!(
            short_name("_RNvMs_NtCsabc123_11rust_binder7processNtB4_7Process12buffer_alloc"),
            "rust_binder::process::Process::buffer_alloc"
        );
        assert_eq!(short_name("binder_ioctl"), "binder_ioctl");
    }

    #[test]
    fn samples_go_to_the_enclosing_function_and_idle_apart() {
        let s = Symbols::parse(KALLSYMS);
        assert_eq!(s.lookup(0xffff800080010250), Some("binder_ioctl"));
        // Data symbols do not split functions.
        assert_eq!(s.lookup(0xffff800080010350), Some("binder_ioctl"));
        assert_eq!(s.lookup(0x1000), None);
        let p = s.attribute(&[
            0xffff800080010250,
            0xffff800080010410,
            0xffff800080010414,
            0xffff800080010104,
            5,
            0xffff000000000001,
        ]);
        assert_eq!(p.by_function, vec![("binder_transaction".to_string(), 2), ("binder_ioctl".to_string(), 1)]);
        assert_eq!((p.idle, p.unresolved, p.user, p.busy()), (1, 1, 1, 4));
    }
}
