//! Deterministic boots kept by content key. Under `--tcg icount|hicount` a boot's results are
//! a function of what QEMU is given: its binary, its command line (seed, TCG mode, machine,
//! timing, plugins), the kernel Image, the DTB and the initramfs (which holds the plan and
//! the guest programs). A boot that ran clean is published under the SHA-256 of those inputs
//! (`<cache>/boots/boot-<key>`, sealed like every artifact: sizes and SHA-256 recorded and
//! checked on reuse), and a later boot with the same key takes its results instead of
//! booting: `lab ab` does so for its base arm, which is the same boot in every A/B of that
//! base.
//!
//! The key hashes the inputs' bytes, not their paths: the run directory, the socket directory
//! and the artifacts' locations are replaced by placeholders in QEMU's argv, and every file
//! the argv names is replaced by its SHA-256 (a published artifact's from its manifest).

use crate::harness::opts::RunOpts;
use crate::harness::qemu::VmSpec;
use crate::support::artifact::{self, Kind, Reuse, MANIFEST};
use crate::support::fs::{publish_dir, sha256_file, sha256_hex, write_atomic};
use anyhow::{Context, Result};
use labproto::{Event, Plan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bumped when what a stored boot holds, or how the key is made, changes.
const FORMAT: u32 = 1;
/// The stored boot's own record inside its artifact directory.
const RECORD: &str = "boot.json";
/// Written into a run directory whose results came from the cache.
pub const REUSED_NOTE: &str = "reused-boot.txt";
/// Run-directory files not kept with a stored boot: the initramfs is an input (its hash is
/// in the key) and the largest file of a run.
const NOT_KEPT: [&str; 1] = ["initramfs.cpio"];
/// Stored boots kept by `lab cache gc` (the most recently used).
pub const KEEP: usize = 200;

/// Why a run of `plan` with `opts` must boot even when asked to reuse, if it must.
pub fn ineligible(opts: &RunOpts, plan: &Plan) -> Option<&'static str> {
    if !opts.tcg.deterministic() {
        return Some("its TCG mode measures in host time, so no two boots are the same");
    }
    if opts.gdb || opts.gdbserver || opts.dump.is_some() || opts.echo || opts.stream {
        return Some("it is watched live (gdb, a dump, the console)");
    }
    // The plan's `[trace]`: its own, or `--trace` copied into it.
    if plan.trace.is_some() || opts.trace.is_some() || !opts.plugins.is_empty() || !opts.qemu_trace.is_empty() {
        return Some("its traces and plugins' outputs are not kept");
    }
    if opts.lava.is_some() {
        return Some("it runs on a LAVA farm");
    }
    None
}

/// What the key hashes (kept in the stored boot's record, for a reader).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    pub format: u32,
    /// QEMU's argv with the placeholders.
    pub argv: Vec<String>,
    /// Placeholder -> SHA-256 of the file it stands for.
    pub files: BTreeMap<String, String>,
}

impl Inputs {
    pub fn key(&self) -> String {
        let text = serde_json::to_string(self).expect("plain data serialises");
        sha256_hex(text.as_bytes())[..32].to_string()
    }
}

/// The SHA-256 of `path`: from the manifest of the published artifact it belongs to (checked
/// when the artifact was taken for this run), else hashed, once per file version and process.
fn file_sha(path: &Path) -> Result<String> {
    for dir in path.ancestors().skip(1).take(3) {
        let Some(m) = artifact::manifest(dir) else { continue };
        let rel = path.strip_prefix(dir).expect("an ancestor").to_string_lossy().into_owned();
        let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        // The record holds only while the file is the one it describes.
        if let Some(e) = m.files.get(&rel).filter(|e| e.size == meta.len()) {
            return Ok(e.sha256.clone());
        }
    }
    type Seen = Vec<((PathBuf, u64, std::time::SystemTime), String)>;
    static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let id = (path.to_path_buf(), meta.len(), meta.modified()?);
    if let Some((_, s)) = SEEN.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == id) {
        return Ok(s.clone());
    }
    let s = sha256_file(path)?;
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).push((id, s.clone()));
    Ok(s)
}

/// The key inputs of the boot `spec` describes, run in `run_dir`.
pub fn inputs(spec: &VmSpec, run_dir: &Path) -> Result<Inputs> {
    let mut files = BTreeMap::new();
    // (text in the argv, placeholder), the longest first so a file in the run directory is
    // named as the file, not as a path under {run}.
    let mut subst: Vec<(String, String)> = vec![];
    let mut file = |path: &Path, name: String, subst: &mut Vec<(String, String)>| -> Result<()> {
        files.insert(name.clone(), file_sha(path)?);
        subst.push((path.display().to_string(), format!("{{{name}}}")));
        Ok(())
    };
    // The system QEMU is a bare name, found on PATH.
    let qemu = crate::support::process::find_tool(&spec.binary.to_string_lossy())
        .with_context(|| format!("{} not found on PATH; run `cargo make setup`", spec.binary.display()))?;
    file(&qemu, "qemu".into(), &mut subst)?;
    file(&spec.kernel, "kernel".into(), &mut subst)?;
    file(&spec.initrd, "initrd".into(), &mut subst)?;
    file(&spec.dtb, "dtb".into(), &mut subst)?;
    for (i, p) in spec.plugins.iter().enumerate() {
        for (j, part) in p.split(',').enumerate() {
            let (name, value) = match part.split_once('=') {
                Some((k, v)) => (format!("plugin{i}.{k}"), v),
                None if j == 0 => (format!("plugin{i}"), part),
                None => continue,
            };
            // A plugin's inputs (its .so, a config) are files by now; its outputs are not yet.
            if Path::new(value).is_file() {
                file(Path::new(value), name, &mut subst)?;
            }
        }
    }
    for (sock, name) in [(&spec.qmp, "qmp"), (&spec.gdb, "gdb"), (&spec.gdbserver, "gdbserver")] {
        if let Some(s) = sock {
            subst.push((s.display().to_string(), format!("{{{name}}}")));
        }
    }
    subst.push((run_dir.display().to_string(), "{run}".into()));
    subst.sort_by_key(|(text, _)| std::cmp::Reverse(text.len()));
    let argv = std::iter::once("{qemu}".to_string())
        .chain(spec.argv().into_iter().skip(1))
        .map(|mut a| {
            for (text, to) in &subst {
                a = a.replace(text.as_str(), to);
            }
            a
        })
        .collect();
    Ok(Inputs { format: FORMAT, argv, files })
}

/// What a stored boot keeps besides the run directory's files.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    key: String,
    inputs: Inputs,
    /// The run the results came from.
    from_run: PathBuf,
    /// The monitor's events (the console's are parsed again from console.log on reuse).
    events: Vec<Event>,
    boot_s: Option<f64>,
}

/// A stored boot's directory.
pub fn dir(cache: &Path, key: &str) -> PathBuf {
    Kind::Boot.root(cache).join(format!("boot-{key}"))
}

/// A clean boot of `inputs`, whose run directory is `run_dir` and whose monitor saw `events`,
/// published under its key.
pub fn store(cache: &Path, inputs: &Inputs, run_dir: &Path, events: &[Event], boot_s: Option<f64>) -> Result<PathBuf> {
    let key = inputs.key();
    let dest = dir(cache, &key);
    publish_dir(&dest, |tmp| {
        copy_files(run_dir, tmp, &NOT_KEPT)?;
        let rec = Record {
            key: key.clone(),
            inputs: inputs.clone(),
            from_run: run_dir.into(),
            events: events.to_vec(),
            boot_s,
        };
        std::fs::write(tmp.join(RECORD), serde_json::to_string(&rec)?)?;
        artifact::seal(tmp)?;
        Ok(())
    })?;
    Ok(dest)
}

/// A reused boot: its events and console lines, and where it came from.
pub struct Reused {
    pub key: String,
    pub events: Vec<Event>,
    pub lines: Vec<String>,
    pub boot_s: Option<f64>,
    pub from: PathBuf,
}

/// The stored boot of `inputs`, copied into `run_dir`, if there is a good one (a damaged one
/// is refused, and replaced by the boot that follows).
pub fn reuse(cache: &Path, inputs: &Inputs, run_dir: &Path) -> Result<Option<Reused>> {
    let key = inputs.key();
    let from = dir(cache, &key);
    if !from.join(RECORD).is_file() || artifact::reuse(Kind::Boot, &from)? != Reuse::Use {
        return Ok(None);
    }
    let rec: Record = serde_json::from_str(&std::fs::read_to_string(from.join(RECORD))?)
        .with_context(|| format!("reading {}", from.join(RECORD).display()))?;
    if rec.inputs != *inputs {
        return Ok(None);
    }
    copy_files(&from, run_dir, &[RECORD, MANIFEST])?;
    let console = std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
    write_atomic(
        &run_dir.join(REUSED_NOTE),
        format!(
            "The results of this run are those of {} (run {}): a deterministic boot with the same inputs \
             (key {key}: QEMU, its argv, kernel, DTB, initramfs). Nothing was booted.\n",
            from.display(),
            rec.from_run.display()
        )
        .as_bytes(),
    )?;
    crate::support::process::mark_used(&from);
    Ok(Some(Reused {
        key,
        events: rec.events,
        lines: console.lines().map(str::to_string).collect(),
        boot_s: rec.boot_s,
        from,
    }))
}

/// Copies the regular files under `from` into `to` (sockets and links are not results),
/// leaving out the names in `skip` at the top.
fn copy_files(from: &Path, to: &Path, skip: &[&str]) -> Result<()> {
    let (files, _links) = artifact::walk(from)?;
    for rel in files.iter().filter(|r| !skip.contains(&r.as_str())) {
        let (src, dst) = (from.join(rel), to.join(rel));
        if !std::fs::symlink_metadata(&src)?.is_file() {
            continue;
        }
        std::fs::create_dir_all(dst.parent().expect("under `to`"))?;
        std::fs::copy(&src, &dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::prepare::{vm_spec, Prepared};
    use crate::harness::qemu::{Console, Tcg};
    use crate::kbuild::kernel::Built;

    /// A run's inputs as files: QEMU, a published kernel, and a run directory with the DTB
    /// and initramfs.
    struct Fixture {
        _d: tempfile::TempDir,
        root: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let d = tempfile::tempdir().unwrap();
            let root = d.path().to_path_buf();
            std::fs::create_dir_all(root.join("kernel")).unwrap();
            std::fs::write(root.join("kernel/Image"), b"kernel image").unwrap();
            artifact::seal(&root.join("kernel")).unwrap();
            std::fs::write(root.join("qemu-system-aarch64"), b"qemu binary").unwrap();
            Fixture { _d: d, root }
        }

        /// A run directory `name` with the DTB and initramfs given.
        fn run(&self, name: &str, dtb: &[u8], initrd: &[u8]) -> PathBuf {
            let r = self.root.join(name);
            std::fs::create_dir_all(&r).unwrap();
            std::fs::write(r.join("board.dtb"), dtb).unwrap();
            std::fs::write(r.join("initramfs.cpio"), initrd).unwrap();
            r
        }

        fn inputs(&self, run: &Path, opts: &RunOpts) -> Inputs {
            inputs(&vm_spec(&self.prepared(run), opts, run, Console::Pipe).unwrap(), run).unwrap()
        }

        fn prepared(&self, run: &Path) -> Prepared {
            let (board, board_sha256) = crate::harness::opts::load_board_file("sa8155p", None, None).unwrap();
            Prepared {
                kernel: Built { flavor: "perf".into(), key: "0123456789abcdef".into(), dir: self.root.join("kernel") },
                board,
                board_sha256,
                dtb: run.join("board.dtb"),
                initrd: run.join("initramfs.cpio"),
                plan: labproto::Plan { name: "ab-base".into(), ..Default::default() },
                qemu: self.root.join("qemu-system-aarch64"),
                qemu_key: Some("k".into()),
                cache_plugin: None,
                dvfs: false,
                idle: false,
            }
        }
    }

    fn icount() -> RunOpts {
        RunOpts { tcg: Tcg::Icount, ..Default::default() }
    }

    #[test]
    fn the_key_follows_every_input_and_nothing_else() {
        let f = Fixture::new();
        let a = f.run("run-a", b"dtb", b"initramfs");
        let key = f.inputs(&a, &icount()).key();
        // Another run directory with the same bytes: the same boot.
        let b = f.run("run-b-with-a-longer-name", b"dtb", b"initramfs");
        assert_eq!(f.inputs(&b, &icount()).key(), key, "{:?}", f.inputs(&b, &icount()).argv);
        assert!(f.inputs(&a, &icount()).argv.iter().all(|x| !x.contains(&f.root.display().to_string())));
        // Each input changes it.
        let other_dtb = f.run("run-c", b"dtb2", b"initramfs");
        let other_initrd = f.run("run-d", b"dtb", b"initramfs, another plan");
        let changed = [
            ("dtb", f.inputs(&other_dtb, &icount()).key()),
            ("initramfs", f.inputs(&other_initrd, &icount()).key()),
            ("seed", f.inputs(&a, &RunOpts { qemu_seed: 2, ..icount() }).key()),
            ("icount shift", f.inputs(&a, &RunOpts { icount_shift: 4, ..icount() }).key()),
            ("append", f.inputs(&a, &RunOpts { append: vec!["quiet".into()], ..icount() }).key()),
            ("timing model", f.inputs(&a, &RunOpts { tcg: Tcg::Hicount, ..icount() }).key()),
        ];
        for (what, k) in &changed {
            assert_ne!(k, &key, "{what}");
        }
        // The kernel's bytes (from its manifest) and QEMU's.
        std::fs::write(f.root.join("kernel/Image"), b"kernel image 2").unwrap();
        artifact::seal(&f.root.join("kernel")).unwrap();
        let k_kernel = f.inputs(&a, &icount()).key();
        assert_ne!(k_kernel, key, "kernel");
        std::fs::write(f.root.join("qemu-system-aarch64"), b"qemu binary, rebuilt").unwrap();
        assert_ne!(f.inputs(&a, &icount()).key(), k_kernel, "qemu");
        // The system QEMU is named bare and found on PATH (here: a shell stands in for it).
        let mut spec = vm_spec(&f.prepared(&a), &icount(), &a, Console::Pipe).unwrap();
        spec.binary = "sh".into();
        let i = inputs(&spec, &a).unwrap();
        assert_eq!(i.files["qemu"], sha256_file(&crate::support::process::find_tool("sh").unwrap()).unwrap());
        assert_eq!(i.argv[0], "{qemu}");
    }

    #[test]
    fn only_deterministic_unwatched_runs_reuse() {
        assert_eq!(ineligible(&icount(), &Plan::default()), None);
        assert_eq!(ineligible(&RunOpts { tcg: Tcg::Hicount, cache: true, ..icount() }, &Plan::default()), None);
        for tcg in [Tcg::Single, Tcg::Multi] {
            assert!(
                ineligible(&RunOpts { tcg, ..icount() }, &Plan::default()).unwrap().contains("host time"),
                "{tcg:?}"
            );
        }
        assert!(ineligible(&RunOpts { gdb: true, ..icount() }, &Plan::default()).is_some());
        assert!(ineligible(&RunOpts { plugins: vec!["x.so".into()], ..icount() }, &Plan::default()).is_some());
        let traced = Plan { trace: Some(labproto::TraceSpec::parse("sched:sched_switch").unwrap()), ..Plan::default() };
        assert!(ineligible(&icount(), &traced).is_some(), "a plan's own [trace]");
    }

    #[test]
    fn a_stored_boot_comes_back_whole_and_a_damaged_one_is_refused() {
        let f = Fixture::new();
        let run = f.run("run-a", b"dtb", b"initramfs");
        std::fs::write(run.join("console.log"), "[    0.1] Booting\nlab: done\n").unwrap();
        std::fs::create_dir_all(run.join("collected")).unwrap();
        std::fs::write(run.join("collected/x.txt"), b"x").unwrap();
        std::fs::write(run.join("cache.json"), b"{\"l1d_refs\": 1}").unwrap();
        let inputs = f.inputs(&run, &icount());
        let cache = f.root.join("cache");
        let events = vec![Event::Done];
        let stored = store(&cache, &inputs, &run, &events, Some(1.5)).unwrap();
        assert!(!stored.join("initramfs.cpio").exists(), "an input, not a result");
        let again = f.run("run-b", b"dtb", b"initramfs");
        let r = reuse(&cache, &f.inputs(&again, &icount()), &again).unwrap().expect("stored");
        assert_eq!((r.events, r.boot_s, r.lines.len()), (events, Some(1.5), 2));
        assert_eq!(std::fs::read(again.join("collected/x.txt")).unwrap(), b"x");
        assert_eq!(std::fs::read(again.join("cache.json")).unwrap(), b"{\"l1d_refs\": 1}");
        assert!(std::fs::read_to_string(again.join(REUSED_NOTE)).unwrap().contains("Nothing was booted"));
        // Another seed is another boot.
        assert!(reuse(&cache, &f.inputs(&again, &RunOpts { qemu_seed: 3, ..icount() }), &again).unwrap().is_none());
        // A stored result that changed is not taken.
        std::fs::write(stored.join("cache.json"), b"{\"l1d_refs\": 2}").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(stored.join("cache.json")).unwrap().set_modified(later).unwrap();
        if !artifact::strict() {
            let third = f.run("run-c", b"dtb", b"initramfs");
            assert!(reuse(&cache, &f.inputs(&third, &icount()), &third).unwrap().is_none());
        }
    }
}
