//! The binder driver's text in a built kernel, for KCOV filtering (`lab fuzz --guided`):
//! the functions its object files define (`llvm-nm`), placed by the build's System.map, as
//! address ranges. A range ends where the next System.map symbol that is not the driver's
//! starts, so the driver's last function is whole.

use crate::provision::toolchain::LLVM_SUFFIX;
use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::path::Path;

/// The driver's objects below the O= directory: the Rust driver's, or the C driver's.
pub fn objects(obj: &Path, config: &str) -> Vec<std::path::PathBuf> {
    if config.lines().any(|l| l == "CONFIG_ANDROID_BINDER_IPC_RUST=y") {
        let dir = obj.join("drivers/android/binder");
        let mut v: Vec<_> = std::fs::read_dir(&dir)
            .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "o")).collect())
            .unwrap_or_default();
        v.sort();
        v
    } else {
        ["binder.o", "binder_alloc.o", "binderfs.o"].iter().map(|f| obj.join("drivers/android").join(f)).collect()
    }
}

/// Names of the text symbols an `nm --defined-only` listing defines.
pub fn defined_text(nm: &str) -> HashSet<String> {
    nm.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_addr, ty, name) = (it.next()?, it.next()?, it.next()?);
            matches!(ty, "t" | "T").then(|| name.to_string())
        })
        .collect()
}

/// Address ranges [start, end) of the System.map text symbols named in `names`. A name can
/// also be another object's (KASAN's `asan.module_ctor`, a generic instantiated in the
/// `kernel` crate too): a run counts only if it holds a name System.map has once.
pub fn ranges(system_map: &str, names: &HashSet<String>) -> Vec<(u64, u64)> {
    let syms: Vec<(u64, &str)> = system_map
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let addr = u64::from_str_radix(it.next()?, 16).ok()?;
            let ty = it.next()?;
            let name = it.next()?;
            matches!(ty, "t" | "T").then_some((addr, name))
        })
        .collect();
    let mut count: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for (_, n) in &syms {
        *count.entry(n).or_default() += 1;
    }
    // Per address (aliases share one): (the driver's, a unique driver name).
    let mut at: std::collections::BTreeMap<u64, (bool, bool)> = std::collections::BTreeMap::new();
    for (a, n) in &syms {
        let ours = names.contains(*n);
        let e = at.entry(*a).or_default();
        e.0 |= ours;
        e.1 |= ours && count[n] == 1;
    }
    let mut out: Vec<(u64, u64)> = vec![];
    let mut run: Option<(u64, bool)> = None;
    for (addr, (ours, unique)) in at {
        run = match (ours, run) {
            (true, None) => Some((addr, unique)),
            (true, Some((s, u))) => Some((s, u || unique)),
            (false, Some((s, true))) => {
                out.push((s, addr));
                None
            }
            (false, _) => None,
        };
    }
    if let Some((s, true)) = run {
        // The last symbol of the map: give it a page (no next symbol bounds it).
        out.push((s, s + 4096));
    }
    out
}

/// Whether the kernel configuration at `config` (a build's `.config`) has KCOV.
pub fn kcov_enabled(config: &Path) -> bool {
    std::fs::read_to_string(config).is_ok_and(|c| has_kcov(&c))
}

fn has_kcov(config: &str) -> bool {
    config.lines().any(|l| l == "CONFIG_KCOV=y")
}

/// The driver's text ranges of a build of `flavor`: System.map in `dir`, objects in `obj`
/// (its O= dir).
pub fn for_build(flavor: &str, dir: &Path, obj: &Path) -> Result<Vec<(u64, u64)>> {
    let config = std::fs::read_to_string(obj.join(".config"))
        .with_context(|| format!("reading {}/.config (the kernel's build directory)", obj.display()))?;
    if !has_kcov(&config) {
        bail!(
            "kernel flavor {flavor} has no CONFIG_KCOV: coverage-guided fuzzing needs a KCOV flavor, e.g. --flavor fuzz"
        );
    }
    let objs = objects(obj, &config);
    let mut names = HashSet::new();
    for o in &objs {
        let out = std::process::Command::new(format!("llvm-nm{LLVM_SUFFIX}"))
            .arg("--defined-only")
            .arg(o)
            .output()
            .with_context(|| format!("running llvm-nm{LLVM_SUFFIX} (`lab setup` installs llvm-19)"))?;
        if !out.status.success() {
            bail!(
                "llvm-nm{LLVM_SUFFIX} {}: {}; rebuild the kernel (`lab kernel --flavor ...`) so its objects exist",
                o.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        names.extend(defined_text(&String::from_utf8_lossy(&out.stdout)));
    }
    let map = std::fs::read_to_string(dir.join("System.map"))
        .with_context(|| format!("reading {}/System.map", dir.display()))?;
    let r = ranges(&map, &names);
    if r.is_empty() {
        bail!("no binder driver function of {} is in {}/System.map", obj.display(), dir.display());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_runs_of_driver_functions_up_to_the_next_symbol() {
        let map = "ffff000000000800 t asan.module_ctor\nffff000000001000 T other\n\
                   ffff000000002000 t _RNvCs1_11rust_binder3foo\nffff000000002040 T rust_binder_bar\n\
                   ffff000000002040 T alias_of_bar\nffff000000002100 d some_data\nffff000000002200 T other2\n\
                   ffff000000002300 t asan.module_ctor\nffff000000002400 T other3\n\
                   ffff000000003000 t binderfs_x\n";
        let names = defined_text(
            "0000 t _RNvCs1_11rust_binder3foo\n0040 T rust_binder_bar\n         U printk\n0000 t binderfs_x\n\
             0080 t asan.module_ctor\n",
        );
        assert_eq!(names.len(), 4);
        assert_eq!(
            ranges(map, &names),
            [(0xffff000000002000, 0xffff000000002200), (0xffff000000003000, 0xffff000000004000)]
        );
    }

    #[test]
    fn kcov_is_read_from_the_builds_config() {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join(".config");
        std::fs::write(&config, "CONFIG_KASAN=y\n# CONFIG_KCOV is not set\n").unwrap();
        assert!(!kcov_enabled(&config));
        std::fs::write(&config, "CONFIG_KASAN=y\nCONFIG_KCOV=y\n").unwrap();
        assert!(kcov_enabled(&config));
        assert!(!kcov_enabled(&tmp.path().join("missing")), "no .config: no KCOV");
    }
}
