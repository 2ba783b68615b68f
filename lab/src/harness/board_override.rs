//! `--smp N` and `--memory SIZE`: a board file with fewer CPUs or other memory, validated
//! like any board. `--smp N` keeps CPUs 0..N-1 in their clusters (clusters left empty are
//! dropped), so the DTB, the scheduler's view and the topology check all describe the same
//! smaller SoC; the board's `[expect]` table describes the full SoC and is dropped, and the
//! topology check compares with the values computed from the remaining CPUs.

use anyhow::{bail, Context, Result};
use std::path::Path;
use toml::Value;

/// The board in `path` with the overrides applied (the file itself when there are none).
pub fn load(path: &Path, smp: Option<u32>, memory: Option<&str>) -> Result<board::Board> {
    let full = board::Board::load(path)?;
    if smp.is_none() && memory.is_none() {
        return Ok(full);
    }
    let text = std::fs::read_to_string(path)?;
    let mut t: toml::Table = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let qemu = t.get_mut("qemu").and_then(Value::as_table_mut).context("board without [qemu]")?;
    let mut label = path.display().to_string();
    if let Some(m) = memory {
        if board::parse_memory(m).is_none() {
            bail!("--memory {m:?} is not a size: write it as QEMU's -m does, e.g. 4G or 3072M");
        }
        qemu.insert("memory".into(), Value::String(m.into()));
        label.push_str(&format!(" with --memory {m}"));
    }
    if let Some(n) = smp {
        if n == 0 || n > full.smp() {
            bail!(
                "--smp {n}: board {} has {} CPUs, so --smp takes 1 to {} (it keeps CPUs 0..N-1); \
                 for more CPUs write a board file",
                full.name(),
                full.smp(),
                full.smp()
            );
        }
        qemu.insert("smp".into(), Value::Integer(n.into()));
        restrict_clusters(&mut t, n);
        t.remove("expect");
        label.push_str(&format!(" with --smp {n}"));
    }
    Ok(board::Board::from_str_named(&toml::to_string(&t)?, &label)?)
}

fn restrict_clusters(t: &mut toml::Table, n: u32) {
    let Some(clusters) = t.get_mut("clusters").and_then(Value::as_array_mut) else { return };
    for c in clusters.iter_mut() {
        if let Some(cpus) = c.get_mut("cpus").and_then(Value::as_array_mut) {
            cpus.retain(|v| v.as_integer().is_some_and(|cpu| cpu < n as i64));
        }
    }
    clusters.retain(|c| c.get("cpus").and_then(Value::as_array).is_some_and(|v| !v.is_empty()));
    // Per-cluster tables name only clusters that are left.
    let kept: Vec<String> =
        clusters.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).map(String::from).collect();
    for (section, table) in [("timing", "ps_per_insn"), ("cache_model", "cycles")] {
        if let Some(per) = t.get_mut(section).and_then(|s| s.get_mut(table)).and_then(Value::as_table_mut) {
            per.retain(|name, _| kept.iter().any(|k| k == name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa8155p() -> std::path::PathBuf {
        crate::support::paths::board_dir().join("sa8155p.toml")
    }

    #[test]
    fn smp_keeps_the_first_cpus_in_their_clusters() {
        let b = load(&sa8155p(), Some(5), Some("1G")).unwrap();
        assert_eq!((b.smp(), b.memory(), b.clusters().len()), (5, "1G", 2));
        assert_eq!(b.clusters()[1].cpus, [4]);
        // Capacities follow from the CPUs left: gold is now the biggest (488 * 1785.6 / 2419.2).
        assert_eq!(board::expected_capacities(&b), [360, 360, 360, 360, 1024]);
        assert!(b.source().contains("--smp 5"), "{}", b.source());
        // [cache_model] keeps the CPUs left.
        assert_eq!(b.cache_model().unwrap().cpus.len(), 5);
        let full = load(&sa8155p(), None, None).unwrap();
        assert_eq!(full.smp(), 8);
    }

    #[test]
    fn bad_overrides_say_what_fits() {
        let e = load(&sa8155p(), Some(9), None).unwrap_err().to_string();
        assert!(e.contains("has 8 CPUs") && e.contains("1 to 8"), "{e}");
        let e = load(&sa8155p(), Some(0), None).unwrap_err().to_string();
        assert!(e.contains("1 to 8"), "{e}");
        let e = load(&sa8155p(), None, Some("lots")).unwrap_err().to_string();
        assert!(e.contains("4G"), "{e}");
    }
}
