//! `lab cache verify` and `lab cache gc`: the cache's published artifacts checked against
//! their manifests (support::artifact), and what pruning by last use would free.

use crate::harness::outcome::Exit;
use crate::kbuild::{kernel, qemu};
use crate::support::artifact::{self, Depth, Kind, State};
use crate::support::paths;
use crate::support::process::{prune_plan, PRUNE_GRACE};
use anyhow::Result;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

#[derive(clap::Subcommand)]
pub enum CacheCmd {
    /// Hash every published artifact (kernels, lab QEMUs, busybox, DTBs, binderfs selftests)
    /// against its manifest and list the damaged ones. Exit 1 if any is damaged.
    Verify {
        /// Remove the damaged artifacts: their next use rebuilds them.
        #[arg(long)]
        repair: bool,
        /// Check as a reuse does: sizes and mtimes, hashing only files whose mtime changed
        /// (misses a flipped bit that kept size and mtime).
        #[arg(long)]
        quick: bool,
    },
    /// Show what pruning would free: kernel builds beyond the 4 most recently used per flavor,
    /// lab QEMUs beyond 3 (never one used within the last hour), leftovers of interrupted
    /// publishes and DTBs in the old layout. Nothing is removed without --apply.
    Gc {
        /// Remove what pruning would free (without it, gc only lists it).
        #[arg(long)]
        apply: bool,
    },
}

pub fn run(cmd: CacheCmd) -> Result<Exit> {
    match cmd {
        CacheCmd::Verify { repair, quick } => {
            verify(&paths::cache(), repair, if quick { Depth::Quick } else { Depth::Full })
        }
        CacheCmd::Gc { apply } => gc(&paths::cache(), apply),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn verify(cache: &Path, repair: bool, depth: Depth) -> Result<Exit> {
    let t0 = Instant::now();
    let (mut good, mut unsealed, mut damaged, mut bytes) = (0, 0, 0, 0u64);
    for kind in Kind::ALL {
        for dir in artifact::list(cache, kind) {
            let size = artifact::size_of(&dir);
            let state = artifact::check(&dir, depth);
            if state != State::Unsealed {
                bytes += size;
            }
            match state {
                State::Good => {
                    good += 1;
                    println!("ok        {:<18} {} ({})", kind.name(), dir.display(), mib(size));
                }
                State::Unsealed => {
                    unsealed += 1;
                    println!(
                        "unsealed  {:<18} {} (published before manifests: rebuilt and recorded on its next use)",
                        kind.name(),
                        dir.display()
                    );
                }
                State::Damaged(d) => {
                    damaged += 1;
                    println!("DAMAGED   {:<18} {}", kind.name(), dir.display());
                    for x in &d {
                        println!("          {x}");
                    }
                    if repair {
                        if artifact::remove_damaged(&dir)? {
                            println!("          removed: its next use rebuilds it");
                        } else {
                            println!("          republished good meanwhile: kept");
                        }
                    }
                }
            }
        }
    }
    let how = match depth {
        Depth::Full => format!("{} hashed", mib(bytes)),
        Depth::Quick => format!("{} checked by size and mtime", mib(bytes)),
    };
    println!(
        "{} artifacts in {}: {good} ok, {damaged} damaged, {unsealed} without a manifest ({how} in {:.1?})",
        good + damaged + unsealed,
        cache.display(),
        t0.elapsed()
    );
    if damaged > 0 && !repair {
        println!("fix: `cargo make cache verify --repair` removes the damaged ones; their next use rebuilds them");
        return Ok(Exit::TestFailure);
    }
    Ok(Exit::Ok)
}

/// One thing pruning removes, and why.
#[derive(Debug, PartialEq)]
struct Prunable {
    path: PathBuf,
    why: String,
}

/// What `gc` removes at time `now`.
fn gc_plan(cache: &Path, now: SystemTime) -> Vec<Prunable> {
    let mut out = vec![];
    let kroot = Kind::Kernel.root(cache);
    let labels: BTreeSet<String> = artifact::list(cache, Kind::Kernel)
        .iter()
        .filter_map(|d| Some(d.file_name()?.to_string_lossy().rsplit_once('-')?.0.to_string()))
        .collect();
    for label in labels {
        for path in prune_plan(&kroot, &format!("{label}-"), None, kernel::KEEP, now) {
            out.push(Prunable {
                path,
                why: format!("kernel {label}: older than its {} most recently used", kernel::KEEP),
            });
        }
    }
    for (path, why) in treatments_to_prune(cache, now) {
        if !out.iter().any(|p| p.path == path) {
            out.push(Prunable { path, why });
        }
    }
    for path in prune_plan(&Kind::Qemu.root(cache), "qemu-", None, qemu::KEEP, now) {
        out.push(Prunable { path, why: format!("lab QEMU: older than the {} most recently used", qemu::KEEP) });
    }
    let boots = crate::harness::boot_cache::KEEP;
    for path in prune_plan(&Kind::Boot.root(cache), "boot-", None, boots, now) {
        out.push(Prunable { path, why: format!("deterministic boot: older than the {boots} most recently used") });
    }
    let old = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= PRUNE_GRACE)
    };
    for kind in Kind::ALL {
        let Ok(rd) = std::fs::read_dir(kind.root(cache)) else { continue };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if artifact::is_leftover(&name) && old(&path) {
                out.push(Prunable { path, why: "left by an interrupted publish".into() });
            } else if kind == Kind::Dtb && name.ends_with(".dtb") && path.is_file() {
                out.push(Prunable { path, why: "DTB of the layout before manifests (unused)".into() });
            }
        }
    }
    out
}

/// `lab ab` treatments kept: their O= directories are a copy of the base's each.
const AB_KEEP: usize = 3;

/// The treatments of `lab ab` beyond the [`AB_KEEP`] most recently used (by their O=
/// directories' last build), none used within the grace period: their O= directories,
/// published kernels and series.
fn treatments_to_prune(cache: &Path, now: SystemTime) -> Vec<(PathBuf, String)> {
    use crate::kbuild::treatment;
    let build = cache.join("kernel/build");
    let Ok(rd) = std::fs::read_dir(&build) else { return vec![] };
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
    // hash -> (last use, O= dirs)
    let mut by_hash: std::collections::BTreeMap<String, (SystemTime, Vec<PathBuf>)> = Default::default();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((_, h)) = treatment::split(&name) else { continue };
        let used = mtime(&e.path()).max(mtime(&e.path().join(".lab-lock")));
        let entry = by_hash.entry(h.to_string()).or_insert((SystemTime::UNIX_EPOCH, vec![]));
        entry.0 = entry.0.max(used);
        entry.1.push(e.path());
    }
    let mut list: Vec<(String, (SystemTime, Vec<PathBuf>))> = by_hash.into_iter().collect();
    list.sort_by_key(|e| std::cmp::Reverse(e.1 .0));
    let mut out = vec![];
    for (h, (used, mut dirs)) in list.into_iter().skip(AB_KEEP) {
        dirs.sort();
        if now.duration_since(used).unwrap_or_default() < PRUNE_GRACE {
            continue;
        }
        let why = format!("`lab ab` treatment {h}: older than the {AB_KEEP} most recently built");
        for d in dirs {
            let label = d.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let published = artifact::list(cache, Kind::Kernel)
                .into_iter()
                .filter(|a| a.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{label}-"))));
            out.extend(published.map(|a| (a, why.clone())));
            out.push((d, why.clone()));
        }
        let series = cache.join(treatment::SERIES_ROOT).join(&h);
        if series.exists() {
            out.push((series, why.clone()));
        }
    }
    out
}

fn gc(cache: &Path, apply: bool) -> Result<Exit> {
    let plan = gc_plan(cache, SystemTime::now());
    let mut total = 0;
    for p in &plan {
        let size = artifact::size_of(&p.path);
        total += size;
        println!("{:>10}  {}  ({})", mib(size), p.path.display(), p.why);
        if apply {
            let r = if p.path.is_dir() { std::fs::remove_dir_all(&p.path) } else { std::fs::remove_file(&p.path) };
            if let Err(e) = r {
                println!("            not removed: {e}");
            }
        }
    }
    if apply {
        println!("freed {} in {} entries of {}", mib(total), plan.len(), cache.display());
    } else {
        println!(
            "pruning would free {} in {} entries of {}; `cargo make cache gc --apply` removes them",
            mib(total),
            plan.len(),
            cache.display()
        );
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn gc_prunes_by_last_use_and_removes_leftovers() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path();
        let now = SystemTime::now() + PRUNE_GRACE * 2;
        let day = Duration::from_secs(86_400);
        let mk = |p: PathBuf, days_ago: u32| {
            std::fs::create_dir_all(&p).unwrap();
            std::fs::File::open(&p).unwrap().set_modified(now - day * days_ago).unwrap();
            p
        };
        let k = Kind::Kernel.root(cache);
        // Six perf builds (the two least recently used go), one perf+extras build, one cbinder-spin.
        for (i, key) in ["aaaa", "bbbb", "cccc", "dddd", "eeee", "ffff"].iter().enumerate() {
            mk(k.join(format!("perf-{key}")), 10 - i as u32);
        }
        mk(k.join("perf+12ab34cd-0000"), 30);
        mk(k.join("cbinder-spin-1111"), 30);
        let q = Kind::Qemu.root(cache);
        for (i, key) in ["01", "02", "03", "04"].iter().enumerate() {
            mk(q.join(format!("qemu-{key}")), 10 - i as u32);
        }
        let stale = mk(q.join(".qemu-05.Ab12.tmp"), 1);
        let old_tmp = mk(k.join("perf-9999.tmp4242"), 1);
        std::fs::create_dir_all(Kind::Dtb.root(cache)).unwrap();
        std::fs::write(Kind::Dtb.root(cache).join("qemu-virt-0123.dtb"), b"dtb").unwrap();
        mk(Kind::Dtb.root(cache).join("qemu-virt-4567"), 100);
        let got: Vec<(String, String)> = gc_plan(cache, now)
            .into_iter()
            .map(|p| (p.path.strip_prefix(cache).unwrap().display().to_string(), p.why))
            .collect();
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "kernel/artifacts/perf-aaaa",
                "kernel/artifacts/perf-bbbb",
                "qemu/artifacts/qemu-01",
                "kernel/artifacts/perf-9999.tmp4242",
                "qemu/artifacts/.qemu-05.Ab12.tmp",
                "dtb/qemu-virt-0123.dtb",
            ],
            "{got:?}"
        );
        assert!(got[0].1.contains("kernel perf: older than its 4 most recently used"), "{got:?}");
        // `lab ab` treatments: the three most recently built stay, with their debug sides.
        let b = cache.join("kernel/build");
        let hashes = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"];
        for (i, h) in hashes.iter().enumerate() {
            mk(b.join(format!("perf+ab-{h}")), 20 - i as u32);
            mk(b.join(format!("debug+ab-{h}")), 20 - i as u32);
            mk(cache.join(crate::kbuild::treatment::SERIES_ROOT).join(h), 20);
        }
        mk(k.join("perf+ab-aaaaaaaaaaaa-0123"), 20);
        let ab: Vec<String> = treatments_to_prune(cache, now)
            .into_iter()
            .map(|(p, _)| p.strip_prefix(cache).unwrap().display().to_string())
            .collect();
        assert_eq!(
            ab,
            [
                "kernel/build/debug+ab-aaaaaaaaaaaa",
                "kernel/artifacts/perf+ab-aaaaaaaaaaaa-0123",
                "kernel/build/perf+ab-aaaaaaaaaaaa",
                "ab/series/aaaaaaaaaaaa"
            ]
        );
        for p in &ab {
            assert!(gc_plan(cache, now).iter().any(|x| x.path == cache.join(p)), "{p}");
        }
        for h in hashes {
            std::fs::remove_dir_all(b.join(format!("perf+ab-{h}"))).unwrap();
            std::fs::remove_dir_all(b.join(format!("debug+ab-{h}"))).unwrap();
        }
        std::fs::remove_dir_all(k.join("perf+ab-aaaaaaaaaaaa-0123")).unwrap();
        // A staging directory younger than the grace period may be a publish in progress.
        std::fs::File::open(&stale).unwrap().set_modified(now).unwrap();
        std::fs::File::open(&old_tmp).unwrap().set_modified(now).unwrap();
        assert_eq!(gc_plan(cache, now).len(), 4);
    }
}
