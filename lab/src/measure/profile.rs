//! Per-function guest instruction profiles: the profile plugin's executed kernel translation
//! blocks (qemu/plugins/profile) symbolized with the kernel's System.map, per call of the
//! plan's workload, and the per-function difference between two kernels.
//!
//! The kernels are built without KASLR (`# CONFIG_RANDOMIZE_BASE is not set` in base.config),
//! so a guest PC is its System.map address; [`Profile::check`] refuses a profile whose
//! instructions do not fall into the map's text (another kernel's map, or a relocated kernel).

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use anyhow::{bail, Context, Result};
use labproto::Event;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The plugin's cargo package (built by `kbuild::qemu::build_plugin`).
pub const PLUGIN: &str = "lab-plugin-profile";
/// What the plugin writes into the run directory, and what `lab profile` keeps beside it.
pub const RAW: &str = "profile.txt";
pub const MAP: &str = "System.map";
pub const SUMMARY: &str = "profile.json";
const HEADER: &str = "# lab-profile 1";

/// Least share of the kernel's instructions that must resolve to a text symbol.
const MIN_RESOLVED: f64 = 0.99;

/// Text symbols of a System.map, sorted by address. `None` ends a text region (`_etext`,
/// `_einittext`): a PC there is in no function.
#[derive(Debug)]
pub struct Symbols {
    starts: Vec<u64>,
    names: Vec<Option<String>>,
}

/// Section markers and `__pi_` aliases, which share an address with the function they start
/// or alias: the function's own name wins.
fn is_marker(name: &str) -> bool {
    matches!(name, "_text" | "_stext" | "_sinittext")
        || name.starts_with("__pi_")
        || (name.starts_with("__") && ["_start", "_end", "_begin"].iter().any(|s| name.ends_with(s)))
}

/// The readable name: Rust symbols demangled without their hashes, C ones as they are.
pub fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

impl Symbols {
    /// Parses `nm -n` lines (`ADDR TYPE NAME`); `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Symbols> {
        let mut syms: Vec<(u64, Option<&str>)> = vec![];
        for (i, line) in text.lines().enumerate() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(ty), Some(name)) = (f.next(), f.next(), f.next()) else {
                bail!("{origin}:{}: expected `ADDRESS TYPE NAME`, got {line:?}: is this a System.map?", i + 1)
            };
            let addr = u64::from_str_radix(addr, 16)
                .with_context(|| format!("{origin}:{}: {addr:?} is not a hex address", i + 1))?;
            match (ty, name) {
                (_, "_etext" | "_einittext") => syms.push((addr, None)),
                ("t" | "T" | "w" | "W", n) => syms.push((addr, Some(n))),
                _ => {}
            }
        }
        if syms.iter().all(|s| s.1.is_none()) {
            bail!("{origin}: no text symbols (types t/T/w/W): not a kernel System.map");
        }
        // At one address the first of: a region end (a zero-size symbol that starts nothing),
        // a function, a marker.
        syms.sort_by_key(|&(a, n)| (a, n.map_or(0, |n| 1 + u8::from(is_marker(n)))));
        syms.dedup_by_key(|s| s.0);
        let starts = syms.iter().map(|s| s.0).collect();
        let names = syms.iter().map(|s| s.1.map(demangle)).collect();
        Ok(Symbols { starts, names })
    }

    /// Index of the entry containing `pc`, if that entry is a function.
    fn index(&self, pc: u64) -> Option<usize> {
        let i = self.starts.partition_point(|&s| s <= pc).checked_sub(1)?;
        self.names[i].is_some().then_some(i)
    }

    fn end(&self, i: usize) -> u64 {
        self.starts.get(i + 1).copied().unwrap_or(u64::MAX)
    }
}

/// The plugin's file: user-space instructions, and executions per kernel TB.
#[derive(Debug)]
pub struct Blocks {
    pub user: u64,
    /// (start address, instructions, executions)
    pub rows: Vec<(u64, u32, u64)>,
}

impl Blocks {
    pub fn parse(text: &str, origin: &str) -> Result<Blocks> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            bail!("{origin}: does not start with {HEADER:?}: not written by qemu/plugins/profile of this checkout");
        }
        let user = lines
            .next()
            .and_then(|l| l.strip_prefix("user "))
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{origin}:2: expected `user N`"))?;
        let mut rows = vec![];
        for (i, line) in lines.enumerate() {
            let bad = || format!("{origin}:{}: expected `HEXADDR INSNS EXECS`, got {line:?}", i + 3);
            let f: Vec<&str> = line.split(' ').collect();
            let [a, n, e] = f[..] else { bail!(bad()) };
            let row = (u64::from_str_radix(a, 16).ok(), n.parse().ok(), e.parse().ok());
            let (Some(a), Some(n), Some(e)) = row else { bail!(bad()) };
            rows.push((a, n, e));
        }
        Ok(Blocks { user, rows })
    }
}

/// Instructions per function of one run.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    /// All executed kernel instructions, and those in no function of the map.
    pub kernel: u64,
    pub unresolved: u64,
    pub user: u64,
    /// The workload's calls (see [`calls`]), when the plan reports them.
    pub calls: Option<u64>,
    pub functions: BTreeMap<String, u64>,
}

/// A64 instructions are 4 bytes and a TB is straight-line code.
const INSN: u64 = 4;

impl Profile {
    /// Attributes every instruction of every TB to the function holding its address.
    pub fn attribute(blocks: &Blocks, syms: &Symbols, calls: Option<u64>) -> Profile {
        let mut by_index: BTreeMap<usize, u64> = BTreeMap::new();
        let mut p = Profile { user: blocks.user, calls, ..Default::default() };
        for &(start, n, execs) in &blocks.rows {
            p.kernel += u64::from(n) * execs;
            let mut pc = start;
            let end = start + u64::from(n) * INSN;
            while pc < end {
                // The part of the TB inside one symbol's range (the whole TB, nearly always).
                let (idx, until) = match syms.index(pc) {
                    Some(i) => (Some(i), syms.end(i).min(end)),
                    None => (None, pc + INSN),
                };
                let insns = (until - pc).div_ceil(INSN) * execs;
                match idx {
                    Some(i) => *by_index.entry(i).or_default() += insns,
                    None => p.unresolved += insns,
                }
                pc += (until - pc).div_ceil(INSN) * INSN;
            }
        }
        for (i, n) in by_index {
            let name = syms.names[i].clone().expect("index() returns functions only");
            *p.functions.entry(name).or_default() += n;
        }
        p
    }

    /// Refuses a profile that does not belong to the map: too few instructions in its text.
    pub fn check(&self, map: &str) -> Result<()> {
        if self.kernel == 0 {
            bail!("the profile has no kernel instructions: did the plugin run (qemu/plugins/profile, out=)?");
        }
        let resolved = 1.0 - self.unresolved as f64 / self.kernel as f64;
        if resolved < MIN_RESOLVED {
            bail!(
                "only {:.1}% of the kernel's instructions fall into the text of {map}: the profile is of \
                 another kernel (use the System.map of the kernel that ran) or the kernel was relocated (KASLR: \
                 boot with --append nokaslr)",
                resolved * 100.0
            );
        }
        Ok(())
    }

    fn per_call(&self, n: u64) -> f64 {
        n as f64 / self.calls.unwrap_or(1).max(1) as f64
    }
}

/// The calls of the plan's workload: the `samples` (timed calls) of binder-throughput's
/// `throughput` results. None when the plan has no such result.
pub fn calls(events: &[Event]) -> Option<u64> {
    let n: u64 = events
        .iter()
        .filter_map(|e| match e {
            Event::Result { case, data, .. } if case == "throughput" => data["samples"].as_u64(),
            _ => None,
        })
        .sum();
    (n > 0).then_some(n)
}

/// Runs a plan with the profile plugin and returns its profile, which stays in the run
/// directory with the kernel's System.map (`lab profile --from DIR` reads it again).
pub fn profiled_run(opts: &RunOpts) -> Result<(Outcome, Profile)> {
    let so = crate::kbuild::qemu::build_plugin(PLUGIN)?;
    let mut opts = opts.clone();
    opts.plugins.push(format!("{},out={{run}}/{RAW}", so.display()));
    let o = crate::report::run_and_report(&opts)?;
    // The map of the kernel that ran, as the manifest names it.
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(o.dir.join("manifest.json"))?)?;
    let kernel_dir =
        m["kernel_dir"].as_str().with_context(|| format!("{}: the manifest names no kernel_dir", o.dir.display()))?;
    let map = Path::new(kernel_dir).join(MAP);
    std::fs::copy(&map, o.dir.join(MAP)).with_context(|| format!("copying {}", map.display()))?;
    let p = load(&o.dir)?;
    Ok((o, p))
}

/// The profile of a run directory (`profile.txt`, `System.map`, `results.jsonl`), also
/// written there as `profile.json`.
pub fn load(dir: &Path) -> Result<Profile> {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).with_context(|| {
            format!("reading {}: is {} a `lab profile` run directory?", dir.join(f).display(), dir.display())
        })
    };
    let events: Vec<Event> = read("results.jsonl")?.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let map = dir.join(MAP).display().to_string();
    let syms = Symbols::parse(&read(MAP)?, &map)?;
    let blocks = Blocks::parse(&read(RAW)?, &dir.join(RAW).display().to_string())?;
    let p = Profile::attribute(&blocks, &syms, calls(&events));
    p.check(&map)?;
    crate::support::fs::write_atomic(&dir.join(SUMMARY), serde_json::to_string_pretty(&p)?.as_bytes())?;
    Ok(p)
}

/// Names longer than this are cut in tables (the JSON keeps them whole).
const NAME_WIDTH: usize = 64;

fn short(name: &str) -> String {
    if name.chars().count() <= NAME_WIDTH {
        return name.to_string();
    }
    let cut: String = name.chars().take(NAME_WIDTH - 1).collect();
    format!("{cut}…")
}

/// The top `top` functions of one profile: instructions, per call, share of the kernel's.
pub fn table(p: &Profile, top: usize) -> String {
    let mut rows: Vec<(&String, &u64)> = p.functions.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut s = totals(p);
    let _ = writeln!(s, "{:<w$} {:>14} {:>10} {:>7}", "function", "instructions", "per call", "share", w = NAME_WIDTH);
    for (name, &n) in rows.iter().take(top) {
        let share = n as f64 * 100.0 / p.kernel.max(1) as f64;
        let per = p.calls.map_or("-".into(), |_| format!("{:.1}", p.per_call(n)));
        let _ = writeln!(s, "{:<w$} {n:>14} {per:>10} {share:>6.2}%", short(name), w = NAME_WIDTH);
    }
    let rest: u64 = rows.iter().skip(top).map(|r| r.1).sum::<u64>() + p.unresolved;
    let _ = writeln!(
        s,
        "{:<w$} {rest:>14}",
        format!("({} more functions, unresolved)", rows.len().saturating_sub(top)),
        w = NAME_WIDTH
    );
    s
}

fn totals(p: &Profile) -> String {
    match p.calls {
        Some(c) => format!(
            "kernel {} instructions ({:.1} per call), user {} ({:.1} per call), {c} calls; unresolved {}\n",
            p.kernel,
            p.per_call(p.kernel),
            p.user,
            p.per_call(p.user),
            p.unresolved
        ),
        None => format!(
            "kernel {} instructions, user {}; unresolved {} (no call count: per call shows -)\n",
            p.kernel, p.user, p.unresolved
        ),
    }
}

/// Per-function difference `b - a`, per call when both have a call count (else in
/// instructions), the `top` largest by magnitude.
pub fn compare(a: &Profile, la: &str, b: &Profile, lb: &str, top: usize) -> String {
    let per_call = a.calls.is_some() && b.calls.is_some();
    let v = |p: &Profile, n: u64| if per_call { p.per_call(n) } else { n as f64 };
    let names: std::collections::BTreeSet<&String> = a.functions.keys().chain(b.functions.keys()).collect();
    let mut rows: Vec<(&String, f64, f64)> = names
        .into_iter()
        .map(|n| (n, v(a, a.functions.get(n).copied().unwrap_or(0)), v(b, b.functions.get(n).copied().unwrap_or(0))))
        .collect();
    rows.sort_by(|x, y| (y.2 - y.1).abs().total_cmp(&(x.2 - x.1).abs()).then(x.0.cmp(y.0)));
    let unit = if per_call { "per call" } else { "instructions" };
    let (ka, kb) = (v(a, a.kernel), v(b, b.kernel));
    let mut s = format!("A = {la}: {}B = {lb}: {}", totals(a), totals(b));
    let _ = writeln!(
        s,
        "kernel {unit}: A {ka:.1}, B {kb:.1}, B - A {:+.1} ({:+.2}%)",
        kb - ka,
        (kb - ka) * 100.0 / ka.max(1.0)
    );
    let _ = writeln!(s, "{:<w$} {:>12} {:>12} {:>11} {:>8}", "function", "A", "B", "B - A", "of A", w = NAME_WIDTH);
    for (name, x, y) in rows.iter().take(top) {
        let pct = (y - x) * 100.0 / ka.max(1.0);
        let _ = writeln!(s, "{:<w$} {x:>12.1} {y:>12.1} {:>+11.1} {pct:>+7.3}%", short(name), y - x, w = NAME_WIDTH);
    }
    let rest: f64 = rows.iter().skip(top).map(|r| r.2 - r.1).sum();
    let _ = writeln!(s, "{:<w$} {:>12} {:>12} {rest:>+11.1}", "(the other functions)", "", "", w = NAME_WIDTH);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    // A System.map excerpt of the perf kernel (section markers, C, Rust v0 symbols, data, the
    // end of text and init text) and a profile over it.
    const MAP: &str = include_str!("testdata/profile/System.map");
    const RAW: &str = include_str!("testdata/profile/profile.txt");

    fn profile() -> Profile {
        let syms = Symbols::parse(MAP, "System.map").unwrap();
        Profile::attribute(&Blocks::parse(RAW, "profile.txt").unwrap(), &syms, Some(100))
    }

    #[test]
    fn blocks_are_attributed_to_their_functions() {
        let p = profile();
        let f = |n: &str| p.functions.get(n).copied().unwrap_or_else(|| panic!("no {n} in {:?}", p.functions));
        // 0x...ee2b8: 10 x 50 in the ioctl entry; demangled without the crate hash.
        assert_eq!(f("rust_binder::rust_binder_ioctl"), 500 + 4 * 7);
        // A TB of 6 from 4 instructions before rust_binder_release: 4 + 2, 7 times each.
        assert_eq!(f("rust_binder::rust_binder_release"), 2 * 7);
        // Section markers share these functions' addresses: the functions win.
        assert_eq!(f("__do_softirq"), 3 * 1000);
        assert_eq!(f("set_reset_devices"), 2 * 4);
        assert!(!p.functions.keys().any(|n| n.starts_with("__") && n.ends_with("_start")), "{:?}", p.functions);
        // Beyond _etext (before init text) is in no function.
        assert_eq!(p.unresolved, 2 * 5);
        assert_eq!(f("start_kernel"), 9);
        assert_eq!(p.kernel, p.functions.values().sum::<u64>() + p.unresolved);
        assert_eq!(p.user, 123_456);
    }

    #[test]
    fn calls_are_binder_throughputs_samples() {
        let r = |case: &str, samples: u64| Event::Result {
            step: "s".into(),
            case: case.into(),
            status: labproto::Status::Pass,
            duration_ms: 1.0,
            message: None,
            data: serde_json::json!({ "samples": samples }),
        };
        assert_eq!(calls(&[r("throughput", 10_000), r("throughput", 5), r("other", 7)]), Some(10_005));
        assert_eq!(calls(&[r("other", 7)]), None);
    }

    #[test]
    fn a_profile_of_another_kernel_is_refused() {
        assert!(profile().check("System.map").is_ok());
        // The same blocks against a map whose text lies elsewhere.
        let moved: String = MAP.lines().map(|l| format!("{}\n", l.replacen("ffff8000", "ffff9000", 1))).collect();
        let syms = Symbols::parse(&moved, "moved").unwrap();
        let p = Profile::attribute(&Blocks::parse(RAW, "profile.txt").unwrap(), &syms, None);
        let e = p.check("moved").unwrap_err().to_string();
        assert!(e.contains("another kernel") && e.contains("nokaslr"), "{e}");
    }

    #[test]
    fn bad_files_are_named() {
        let e = Blocks::parse("ffff 1 2\n", "p.txt").unwrap_err().to_string();
        assert!(e.contains("p.txt") && e.contains("qemu/plugins/profile"), "{e}");
        let e = Blocks::parse("# lab-profile 1\nuser 1\nffffx 1 2\n", "p.txt").unwrap_err().to_string();
        assert!(e.contains("p.txt:3"), "{e}");
        let e = Symbols::parse("ffff8000 D data\n", "m").unwrap_err().to_string();
        assert!(e.contains("no text symbols"), "{e}");
        let e = Symbols::parse("hello\n", "m").unwrap_err().to_string();
        assert!(e.contains("m:1") && e.contains("System.map"), "{e}");
    }

    #[test]
    fn tables_show_per_call_and_differences() {
        let a = profile();
        let t = table(&a, 2);
        assert!(t.contains("__do_softirq") && t.contains("30.0"), "{t}");
        assert!(t.lines().nth(1).unwrap().starts_with("function"), "{t}");
        let mut b = profile();
        *b.functions.get_mut("rust_binder::rust_binder_ioctl").unwrap() += 1000;
        b.kernel += 1000;
        let c = compare(&a, "C", &b, "Rust", 1);
        let row = c.lines().find(|l| l.starts_with("rust_binder::rust_binder_ioctl")).expect(&c);
        assert!(row.contains("+10.0"), "{c}");
        assert!(c.contains("B - A +10.0"), "{c}");
    }
}
