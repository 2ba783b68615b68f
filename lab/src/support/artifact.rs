//! Published artifacts carry a manifest: every file's size, SHA-256 and mtime, recorded when
//! the artifact is published (inside the staging directory, so it appears atomically with
//! the files it describes) and checked when the artifact is reused. A damaged artifact (a
//! full disk, a crash during a copy, a user's mistake) is refused and rebuilt, never booted.
//!
//! A reuse checks cheaply: each file's size, then its mtime; only a file whose mtime differs
//! from the record is hashed, and a file hashed good is not hashed again in this process.
//! `lab cache verify` hashes everything.

use crate::support::fs::{sha256_file, write_atomic};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The manifest's name inside an artifact directory.
pub const MANIFEST: &str = "lab-manifest.json";

/// The kinds of published artifacts and where each lives in the cache: one directory per
/// artifact under its root, named `<name>-<hex key>` (busybox: the deb's hash alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Image, vmlinux, .config, System.map, kernel.release (kbuild::kernel).
    Kernel,
    /// The lab QEMU's binary and plugin header (kbuild::qemu).
    Qemu,
    /// The guest's static busybox, unpacked from its deb (provision::downloads).
    Busybox,
    /// QEMU's own virt DTB per machine/cpu/smp/memory and QEMU version (harness::dtb).
    Dtb,
    /// The kernel's binderfs selftest, built static for the guest (harness::selftest).
    Selftest,
    /// A deterministic boot's results, kept by the content key of its inputs (harness::boot_cache).
    Boot,
    /// Android 14's binder userspace built for the guest (kbuild::aosp).
    Aosp,
}

impl Kind {
    pub const ALL: [Kind; 7] =
        [Kind::Kernel, Kind::Qemu, Kind::Busybox, Kind::Dtb, Kind::Selftest, Kind::Boot, Kind::Aosp];

    /// The directory under the cache that holds this kind's artifacts.
    pub fn root(self, cache: &Path) -> PathBuf {
        cache.join(match self {
            Kind::Kernel => "kernel/artifacts",
            Kind::Qemu => "qemu/artifacts",
            Kind::Busybox => "busybox",
            Kind::Dtb => "dtb",
            Kind::Selftest => "selftests",
            Kind::Boot => "boots",
            Kind::Aosp => "aosp/artifacts",
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Qemu => "lab QEMU",
            Kind::Busybox => "busybox",
            Kind::Dtb => "DTB",
            Kind::Selftest => "binderfs selftest",
            Kind::Boot => "deterministic boot",
            Kind::Aosp => "AOSP userspace",
        }
    }
}

/// What was recorded for one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub size: u64,
    pub sha256: String,
    /// Nanoseconds since the epoch: an unchanged size and mtime skip the hash.
    pub mtime_ns: u64,
}

/// Every regular file of an artifact (paths relative to its directory, `/`-separated), and
/// every symlink's target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: BTreeMap<String, Entry>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, String>,
}

fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The files and symlinks under `dir` (relative, sorted), the manifest itself left out.
pub fn walk(dir: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let (mut files, mut links) = (vec![], vec![]);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).with_context(|| format!("listing {}", dir.join(&rel).display()))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let t = e.file_type()?;
            let name = r.to_string_lossy().into_owned();
            if t.is_dir() {
                stack.push(r);
            } else if t.is_symlink() {
                links.push(name);
            } else if name != MANIFEST {
                files.push(name);
            }
        }
    }
    files.sort();
    links.sort();
    Ok((files, links))
}

/// Records every file of the artifact being published in `dir` (its staging directory) into
/// `dir/lab-manifest.json`. Call it last, when the files are complete.
pub fn seal(dir: &Path) -> Result<Manifest> {
    let m = record(dir)?;
    write_manifest(dir, &m)?;
    Ok(m)
}

/// Writes `m` as the manifest of `dir` (atomically: readers see the old one or this one).
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<()> {
    write_atomic(&dir.join(MANIFEST), serde_json::to_string_pretty(m)?.as_bytes())
}

/// What [`seal`] would record for `dir`, without writing it.
pub fn record(dir: &Path) -> Result<Manifest> {
    let (files, links) = walk(dir)?;
    let mut m = Manifest::default();
    for f in files {
        let p = dir.join(&f);
        let meta = std::fs::metadata(&p)?;
        m.files.insert(f, Entry { size: meta.len(), sha256: sha256_file(&p)?, mtime_ns: mtime_ns(&meta) });
    }
    for l in links {
        let target = std::fs::read_link(dir.join(&l))?;
        m.links.insert(l, target.to_string_lossy().into_owned());
    }
    Ok(m)
}

/// The manifest of the artifact `dir`, if it has a readable one.
pub fn manifest(dir: &Path) -> Option<Manifest> {
    serde_json::from_str(&std::fs::read_to_string(dir.join(MANIFEST)).ok()?).ok()
}

/// Whether `path` is the file `want` records (size, then SHA-256).
pub fn matches(path: &Path, want: &Entry) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == want.size)
        && sha256_file(path).is_ok_and(|s| s == want.sha256)
}

/// How a file differs from its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Missing,
    Size {
        found: u64,
        recorded: u64,
    },
    Sha256 {
        found: String,
        recorded: String,
    },
    Link {
        found: Option<String>,
        recorded: String,
    },
    /// The manifest itself cannot be read or parsed.
    Manifest(String),
    Unreadable(String),
}

/// One damaged file of an artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub file: PathBuf,
    pub problem: Problem,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.problem {
            Problem::Missing => write!(f, "{file}: missing"),
            Problem::Size { found, recorded } => write!(f, "{file}: size {found} vs {recorded} bytes recorded"),
            Problem::Sha256 { found, recorded } => {
                write!(
                    f,
                    "{file}: sha256 mismatch ({} vs {} recorded)",
                    &found[..12],
                    &recorded[..12.min(recorded.len())]
                )
            }
            Problem::Link { found, recorded } => {
                write!(f, "{file}: symlink to {} vs {recorded} recorded", found.as_deref().unwrap_or("nothing"))
            }
            Problem::Manifest(e) => write!(f, "{file}: unreadable manifest ({e})"),
            Problem::Unreadable(e) => write!(f, "{file}: unreadable ({e})"),
        }
    }
}

/// The state of a published artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Good,
    /// Published before artifacts had manifests: nothing to check it against.
    Unsealed,
    Damaged(Vec<Damage>),
}

/// How hard to look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Size and mtime; the hash only where the mtime differs from the record (a reuse).
    Quick,
    /// Every file hashed (`lab cache verify`).
    Full,
}

/// Files hashed good in this process, as (path, size, mtime): not hashed again.
static HASHED: Mutex<Option<HashSet<(PathBuf, u64, u64)>>> = Mutex::new(None);

fn hashed_before(p: &Path, size: u64, mtime: u64) -> bool {
    HASHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&(p.to_path_buf(), size, mtime)))
}

fn remember_hashed(p: &Path, size: u64, mtime: u64) {
    HASHED.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashSet::new).insert((
        p.to_path_buf(),
        size,
        mtime,
    ));
}

/// Checks the artifact in `dir` against its manifest.
pub fn check(dir: &Path, depth: Depth) -> State {
    let mpath = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&mpath) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return State::Unsealed,
        Err(e) => return State::Damaged(vec![Damage { file: mpath, problem: Problem::Manifest(e.to_string()) }]),
    };
    let mut m: Manifest = match serde_json::from_str(&text) {
        Ok(m) => m,
        Err(e) => return State::Damaged(vec![Damage { file: mpath, problem: Problem::Manifest(e.to_string()) }]),
    };
    let mut damage = vec![];
    let mut restamped = false;
    for (rel, want) in m.files.iter_mut() {
        let p = dir.join(rel);
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                damage.push(Damage { file: p, problem: Problem::Unreadable("not a regular file".into()) });
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                damage.push(Damage { file: p, problem: Problem::Missing });
                continue;
            }
            Err(e) => {
                damage.push(Damage { file: p, problem: Problem::Unreadable(e.to_string()) });
                continue;
            }
        };
        if meta.len() != want.size {
            damage.push(Damage { file: p, problem: Problem::Size { found: meta.len(), recorded: want.size } });
            continue;
        }
        let mtime = mtime_ns(&meta);
        if depth == Depth::Quick && (mtime == want.mtime_ns || hashed_before(&p, meta.len(), mtime)) {
            continue;
        }
        match sha256_file(&p) {
            Ok(sum) if sum == want.sha256 => {
                remember_hashed(&p, meta.len(), mtime);
                if mtime != want.mtime_ns {
                    // Same bytes at another mtime (a copied cache): record it, so the next
                    // process skips the hash.
                    want.mtime_ns = mtime;
                    restamped = true;
                }
            }
            Ok(sum) => {
                damage.push(Damage { file: p, problem: Problem::Sha256 { found: sum, recorded: want.sha256.clone() } })
            }
            Err(e) => damage.push(Damage { file: p, problem: Problem::Unreadable(format!("{e:#}")) }),
        }
    }
    for (rel, want) in &m.links {
        let p = dir.join(rel);
        let found = std::fs::read_link(&p).ok().map(|t| t.to_string_lossy().into_owned());
        if found.as_deref() != Some(want.as_str()) {
            damage.push(Damage { file: p, problem: Problem::Link { found, recorded: want.clone() } });
        }
    }
    if !damage.is_empty() {
        return State::Damaged(damage);
    }
    if restamped {
        // Best effort: a read-only cache is checked by hash again next time.
        if let Ok(text) = serde_json::to_string_pretty(&m) {
            let _ = write_atomic(&mpath, text.as_bytes());
        }
    }
    State::Good
}

/// `--offline` (set once by the CLI): a damaged artifact is an error, not a rebuild.
static OFFLINE: AtomicBool = AtomicBool::new(false);

pub fn set_offline(on: bool) {
    OFFLINE.store(on, Ordering::Relaxed);
}

/// Whether `--offline` is set: downloads that are not cached are errors, not fetches.
pub fn offline() -> bool {
    OFFLINE.load(Ordering::Relaxed)
}

/// CI (`CI` set to anything but empty, `0` or `false`, as CI services do) or `--offline`:
/// a damaged cache is reported, not silently repaired.
pub fn strict() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"));
    ci || OFFLINE.load(Ordering::Relaxed)
}

/// What a caller does with a published artifact it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    Use,
    Rebuild,
}

/// Decides whether the artifact `dir` of `kind` can be reused: a good one is; one published
/// before manifests existed is rebuilt once (that rebuild seals it); a damaged one is
/// refused with what differs and rebuilt, or, in CI or with `--offline`, an error naming the
/// fix.
pub fn reuse(kind: Kind, dir: &Path) -> Result<Reuse> {
    match check(dir, Depth::Quick) {
        State::Good => Ok(Reuse::Use),
        State::Unsealed => {
            crate::support::progress::note(format!(
                "{} {} was published without a manifest (before the cache verified artifacts): \
                 checking it against a rebuild to record one",
                kind.name(),
                dir.display()
            ));
            Ok(Reuse::Rebuild)
        }
        State::Damaged(d) => {
            let list = d.iter().map(|d| format!("\n  {d}")).collect::<String>();
            if strict() {
                bail!(
                    "the cached {} {} is damaged:{list}\nIt was not used. Remove it with `cargo make cache verify --repair` \
                     (or `rm -rf {}`) and run again to rebuild it (CI and --offline do not rebuild damaged artifacts by themselves).",
                    kind.name(),
                    dir.display(),
                    dir.display()
                );
            }
            crate::support::progress::note(format!(
                "refusing the damaged {} {}:{list}\nrebuilding it",
                kind.name(),
                dir.display()
            ));
            Ok(Reuse::Rebuild)
        }
    }
}

/// The artifact directories of `kind` in `cache`: hidden names are staging directories
/// (support::fs::publish_dir), not artifacts.
pub fn list(cache: &Path, kind: Kind) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(kind.root(cache))
        .map(|rd| {
            rd.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| !is_leftover(&e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A name that is no artifact but something a publish left behind: a hidden staging
/// directory of publish_dir, or an older `<name>.tmp<pid>` one.
pub fn is_leftover(name: &str) -> bool {
    (name.starts_with('.') && name.ends_with(".tmp"))
        || name.rsplit_once(".tmp").is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the damaged artifact `dir` so that its next use rebuilds it. It is first renamed
/// to a hidden name and checked again there: a builder that republished it meanwhile (their
/// rename swaps directories) gets its good one back. Returns whether it was removed.
pub fn remove_damaged(dir: &Path) -> Result<bool> {
    let name = dir.file_name().context("artifact path has no name")?.to_string_lossy().into_owned();
    let aside = dir.with_file_name(format!(".{name}.damaged.tmp"));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(dir, &aside).with_context(|| format!("moving {} aside", dir.display()))?;
    if matches!(check(&aside, Depth::Full), State::Good) {
        // Republished good meanwhile: put it back unless yet another one took its place.
        if std::fs::rename(&aside, dir).is_ok() {
            return Ok(false);
        }
    }
    std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))?;
    Ok(true)
}

/// Bytes under `p` (files' lengths; a file or directory).
pub fn size_of(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p).map(|rd| rd.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sealed artifact with a file, a nested file and a symlink.
    fn artifact() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("perf-0123456789abcdef");
        std::fs::create_dir_all(a.join("gdb/scripts")).unwrap();
        std::fs::write(a.join("Image"), vec![7u8; 4096]).unwrap();
        std::fs::write(a.join("gdb/scripts/x.py"), "print(1)\n").unwrap();
        std::os::unix::fs::symlink("Image", a.join("Image.link")).unwrap();
        let m = seal(&a).unwrap();
        assert_eq!(m.files.keys().collect::<Vec<_>>(), ["Image", "gdb/scripts/x.py"]);
        assert_eq!(m.links["Image.link"], "Image");
        (d, a)
    }

    fn damaged(s: State) -> Vec<String> {
        match s {
            State::Damaged(d) => d.iter().map(|d| d.to_string()).collect(),
            other => panic!("not damaged: {other:?}"),
        }
    }

    #[test]
    fn a_sealed_artifact_checks_good_both_ways() {
        let (_d, a) = artifact();
        assert_eq!(check(&a, Depth::Quick), State::Good);
        assert_eq!(check(&a, Depth::Full), State::Good);
        assert!(a.join(MANIFEST).is_file());
    }

    #[test]
    fn truncation_is_caught_by_size_alone() {
        let (_d, a) = artifact();
        let f = std::fs::OpenOptions::new().write(true).open(a.join("Image")).unwrap();
        f.set_len(1000).unwrap();
        let msgs = damaged(check(&a, Depth::Quick));
        assert_eq!(msgs, [format!("{}: size 1000 vs 4096 bytes recorded", a.join("Image").display())]);
    }

    #[test]
    fn a_flipped_byte_is_caught_by_its_hash() {
        let (_d, a) = artifact();
        let p = a.join("gdb/scripts/x.py");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[3] ^= 0x01;
        std::fs::write(&p, bytes).unwrap();
        // A write moves the mtime, though not always within the clock's tick: make sure.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(later).unwrap();
        let msgs = damaged(check(&a, Depth::Quick));
        assert_eq!(msgs.len(), 1);
        assert!(msgs[0].contains("gdb/scripts/x.py: sha256 mismatch ("), "{msgs:?}");
    }

    #[test]
    fn a_flip_that_keeps_the_mtime_needs_the_full_check() {
        // Bit rot changes neither size nor mtime: only `lab cache verify` (Full) sees it.
        let (_d, a) = artifact();
        let p = a.join("Image");
        let before = std::fs::metadata(&p).unwrap().modified().unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[100] ^= 0x80;
        std::fs::write(&p, bytes).unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(before).unwrap();
        assert_eq!(check(&a, Depth::Quick), State::Good);
        assert!(damaged(check(&a, Depth::Full))[0].contains("Image: sha256 mismatch"));
    }

    #[test]
    fn missing_files_links_and_manifests_are_named() {
        let (_d, a) = artifact();
        std::fs::remove_file(a.join("gdb/scripts/x.py")).unwrap();
        std::fs::remove_file(a.join("Image.link")).unwrap();
        std::os::unix::fs::symlink("vmlinux", a.join("Image.link")).unwrap();
        let msgs = damaged(check(&a, Depth::Quick));
        assert!(msgs[0].ends_with("gdb/scripts/x.py: missing"), "{msgs:?}");
        assert!(msgs[1].ends_with("Image.link: symlink to vmlinux vs Image recorded"), "{msgs:?}");
        std::fs::write(a.join(MANIFEST), "{ half").unwrap();
        assert!(damaged(check(&a, Depth::Quick))[0].contains("unreadable manifest"));
        std::fs::remove_file(a.join(MANIFEST)).unwrap();
        assert_eq!(check(&a, Depth::Full), State::Unsealed);
    }

    #[test]
    fn same_bytes_at_another_mtime_are_hashed_once_and_restamped() {
        let (_d, a) = artifact();
        let p = a.join("Image");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
        assert_eq!(check(&a, Depth::Quick), State::Good);
        let m: Manifest = serde_json::from_str(&std::fs::read_to_string(a.join(MANIFEST)).unwrap()).unwrap();
        assert_eq!(m.files["Image"].mtime_ns, mtime_ns(&std::fs::metadata(&p).unwrap()), "the record follows the copy");
    }

    #[test]
    fn strict_in_ci_or_offline() {
        let (_d, a) = artifact();
        std::fs::write(a.join("Image"), b"short").unwrap();
        // Not strict: refused and rebuilt. (CI may be set for the test process itself.)
        if !strict() {
            assert_eq!(reuse(Kind::Kernel, &a).unwrap(), Reuse::Rebuild);
        }
        set_offline(true);
        let e = reuse(Kind::Kernel, &a).unwrap_err().to_string();
        set_offline(false);
        assert!(e.contains("is damaged") && e.contains("Image: size 5 vs 4096"), "{e}");
        assert!(
            e.contains("cargo make cache verify --repair") && e.contains(&format!("rm -rf {}", a.display())),
            "{e}"
        );
    }

    #[test]
    fn repair_removes_only_a_damaged_artifact() {
        let (d, a) = artifact();
        assert!(!remove_damaged(&a).unwrap(), "a good one is put back");
        assert_eq!(check(&a, Depth::Full), State::Good);
        std::fs::write(a.join("Image"), b"x").unwrap();
        assert!(remove_damaged(&a).unwrap());
        assert!(!a.exists());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "nothing left aside");
    }

    #[test]
    fn leftovers_are_not_artifacts() {
        for n in [".perf-0123.abcd.tmp", "qemu-0123.tmp4242", "binderfs-ab12.tmp7"] {
            assert!(is_leftover(n), "{n}");
        }
        for n in ["perf-0123456789abcdef", "perf+1a2b3c4d-0123456789abcdef", "qemu-virt-0123", "tmpfoo"] {
            assert!(!is_leftover(n), "{n}");
        }
        let d = tempfile::tempdir().unwrap();
        let root = Kind::Qemu.root(d.path());
        for n in ["qemu-aa", "qemu-bb.tmp12", ".qemu-cc.x.tmp"] {
            std::fs::create_dir_all(root.join(n)).unwrap();
        }
        assert_eq!(list(d.path(), Kind::Qemu), [root.join("qemu-aa")]);
        std::fs::write(root.join("qemu-aa/f"), b"12345").unwrap();
        assert_eq!(size_of(&root), 5);
    }
}
