//! `lab kernel`: cached, incremental, atomic kernel builds per flavor.
//!
//! - The O= directory of a flavor is kept, so an edit rebuilds only what it touches.
//! - Artifacts are published under a content key (kernel pin, fragments, tree state,
//!   toolchain) by rename, only after make succeeded: an interrupted build never leaves
//!   something that looks complete, and an unchanged input is a no-op.

use crate::kbuild::flavor;
use crate::kbuild::kconfig::Fragment;
use crate::kbuild::pin::{ensure_kernel_deb, Lock};
use crate::kbuild::setup;
use crate::kbuild::tree::{self, Series};

use crate::provision::toolchain::Toolchain;
use crate::support::artifact::{self, Depth, Kind, Reuse, State};
use crate::support::fs::{publish_dir, sha256_hex, write_atomic};
use crate::support::paths;
use crate::support::process::run_logged;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Bump when the build recipe changes in a way the inputs don't show.
const RECIPE: &str = "lab-kernel-v3";
/// Files published per build.
const ARTIFACTS: [&str; 4] = ["Image", "vmlinux", ".config", "System.map"];
/// Published builds kept per flavor.
pub const KEEP: usize = 4;

/// Kernel flavors: `kernel-config/<flavor>.config` on base.config, and the composed ones of
/// `kernel-config/flavors.toml` (see [`crate::kbuild::flavor`]).
pub fn flavors() -> Vec<String> {
    flavor::names()
}

/// Symbols asked for on the command line (`--kconfig FILE`, `--kconfig-add CONFIG_X=y`), merged
/// over the flavor in that order. A kernel with extras is its own variant: its own O=
/// directory and published artifact, so it never rebuilds or replaces the plain flavor's.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    pub files: Vec<PathBuf>,
    pub adds: Vec<String>,
}

impl Extras {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.adds.is_empty()
    }

    /// The extras as one fragment, each symbol's origin naming the option that set it.
    pub fn fragment(&self) -> Result<Fragment> {
        let mut parts = vec![];
        for f in &self.files {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("--kconfig {}: cannot read the fragment file", f.display()))?;
            parts.push(Fragment::parse(&text, &format!("--kconfig {}", f.display()))?);
        }
        for a in &self.adds {
            let ok = a.starts_with("CONFIG_") && a.split_once('=').is_some_and(|(_, v)| !v.is_empty());
            if !ok {
                bail!("--kconfig-add {a:?}: expected CONFIG_NAME=value, e.g. --kconfig-add CONFIG_DEBUG_INFO_DWARF5=y");
            }
            parts.push(Fragment::parse(a, &format!("--kconfig-add {a}"))?);
        }
        Ok(Fragment::merge(&parts))
    }

    /// The flavor's fragment with the extras merged over it, and the kernel's label. Extras
    /// that change no symbol (CONFIG_USER_NS=y is in base.config) are the flavor itself.
    pub fn over(&self, base: &Fragment, flavor: &str) -> Result<(Fragment, String)> {
        let merged = Fragment::merge(&[base.clone(), self.fragment()?]);
        let label = if merged.values == base.values { flavor.to_string() } else { self.label(flavor)? };
        Ok((merged, label))
    }

    /// The line that says extras changed nothing: every symbol already has the flavor's value.
    pub fn no_change_note(&self, flavor: &str) -> Result<String> {
        let f = self.fragment()?;
        let syms: Vec<String> = f.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(format!("{} already set so by the {flavor} flavor: using the {flavor} kernel", syms.join(" ")))
    }

    /// `perf` without extras, `perf+<hash of the extras>` with them.
    pub fn label(&self, flavor: &str) -> Result<String> {
        if self.is_empty() {
            return Ok(flavor.to_string());
        }
        Ok(format!("{flavor}+{}", &sha256_hex(self.fragment()?.render().as_bytes())[..8]))
    }
}

/// The merged fragment for a flavor.
pub fn fragment(name: &str) -> Result<Fragment> {
    Ok(flavor::load(name)?.config)
}

/// A published build.
#[derive(Clone, Debug)]
pub struct Built {
    /// The flavor, with `+<hash>` when built with extras ([`Extras::label`]).
    pub flavor: String,
    pub key: String,
    pub dir: PathBuf,
}

impl Built {
    /// A kernel built outside the cache (`LAB_KERNEL=DIR`): a directory laid out like a
    /// published build, at least `Image` and `.config`. Keyed by the Image's content.
    pub fn external(flavor: &str, dir: &Path) -> Result<Built> {
        let image = std::fs::read(dir.join("Image")).with_context(|| {
            format!(
                "LAB_KERNEL={}: no readable Image there (it must name a kernel build's output directory)",
                dir.display()
            )
        })?;
        if !dir.join(".config").is_file() {
            bail!("LAB_KERNEL={}: no .config next to the Image (copy the build's .config there)", dir.display());
        }
        let key = format!("external-{}", &sha256_hex(&image)[..16]);
        Ok(Built { flavor: flavor.into(), key, dir: dir.to_path_buf() })
    }

    pub fn image(&self) -> PathBuf {
        self.dir.join("Image")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join(".config")
    }
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    /// The kernel's gdb helpers, if the build had CONFIG_GDB_SCRIPTS.
    pub fn gdb_script(&self) -> Option<PathBuf> {
        Some(self.dir.join(GDB_DIR).join("vmlinux-gdb.py")).filter(|p| p.is_file())
    }
    pub fn kernel_release(&self) -> String {
        std::fs::read_to_string(self.dir.join("kernel.release")).unwrap_or_default().trim().to_string()
    }
}

/// Cache key of a build: every input that changes the output.
pub fn cache_key(lock: &Lock, merged: &Fragment, tree_state: &str, toolchain: &str) -> String {
    let text = format!(
        "{RECIPE}\n{}={} {}\n--config--\n{}--tree--\n{tree_state}\n--toolchain--\n{toolchain}",
        lock.kernel.package,
        lock.kernel.version,
        lock.kernel.sha256,
        merged.render()
    );
    sha256_hex(text.as_bytes())[..16].to_string()
}

fn artifacts_dir(cache: &Path, flavor: &str, key: &str) -> PathBuf {
    Kind::Kernel.root(cache).join(format!("{flavor}-{key}"))
}

/// Builds (or finds) the kernel for `flavor`.
pub fn build(name: &str) -> Result<Built> {
    build_with(name, &Extras::default())
}

/// Builds (or finds) the kernel for `name` plus command-line extras.
pub fn build_with(name: &str, extras: &Extras) -> Result<Built> {
    let cache = paths::cache();
    let fl = flavor::load(name)?;
    let (merged, label) = extras.over(&fl.config, &fl.name)?;
    if !extras.is_empty() && label == fl.name {
        crate::support::progress::note(extras.no_change_note(&fl.name)?);
    }
    let flavor_name = fl.name.as_str();
    let flavor = label.as_str();
    let lock = Lock::load(&Lock::path())?;
    let series = fl.stack()?;
    let tc = setup::toolchain(&cache)?;
    let fingerprint = tc.fingerprint()?;
    // A published build of the tree as it is needs no tree lock: another flavor may hold it
    // for minutes while it builds. One found damaged is remembered, so that the check under
    // the lock does not report it a second time.
    let mut refused = None;
    if let Some(built) = published(&cache, flavor, &lock, &merged, &series, &fingerprint)? {
        if artifact::reuse(Kind::Kernel, &built.dir)? == Reuse::Use {
            crate::support::progress::note(format!("kernel {flavor} is up to date: {}", built.dir.display()));
            crate::support::process::mark_used(&built.dir);
            return Ok(built);
        }
        let obj = cache.join("kernel/build").join(flavor);
        let how = match artifact::manifest(&built.dir) {
            Some(_) => restore_from_obj(&obj, &built.dir)?.then_some("restored from"),
            None => record_if_obj_agrees(&obj, &built.dir)?.then_some("recorded: its files equal the outputs in"),
        };
        if let Some(how) = how {
            crate::support::progress::note(format!(
                "kernel {flavor} {how} the build directory {}: {}",
                obj.display(),
                built.dir.display()
            ));
            crate::support::process::mark_used(&built.dir);
            return Ok(built);
        }
        refused = Some(built.dir);
    }
    let (src, _tree_lock) = prepared_tree(&cache, &lock, &series, &format!("building kernel {flavor}"))?;

    let state = tree::state_hash(&src)?;
    let key = cache_key(&lock, &merged, &state, &fingerprint);
    let out = artifacts_dir(&cache, flavor, &key);
    let built = Built { flavor: flavor.into(), key: key.clone(), dir: out.clone() };
    // Under the tree lock no one publishes this key meanwhile; another process may have
    // rebuilt a refused artifact while this one waited.
    let usable = out.exists()
        && if refused.as_ref() == Some(&out) {
            artifact::check(&out, Depth::Quick) == State::Good
        } else {
            artifact::reuse(Kind::Kernel, &out)? == Reuse::Use
        };
    if usable {
        crate::support::progress::note(format!("kernel {flavor} is up to date: {}", out.display()));
        crate::support::process::mark_used(&out);
        return Ok(built);
    }

    let obj = cache.join("kernel/build").join(flavor);
    // A treatment (`lab ab`) starts from its base's objects: the same config, a few more
    // patches, so make rebuilds only what they touch. The base's O= directory moves on with
    // the base (another tree state, a rebuilt series): a treatment's copy of an older one
    // would rebuild most of the kernel, so it is seeded again from the base's current one.
    let base_obj = fl
        .seed
        .as_ref()
        .filter(|_| label == fl.name)
        .map(|b| cache.join("kernel/build").join(b))
        .filter(|b| b.join("vmlinux").is_file());
    if let Some(from) = &base_obj {
        if needs_reseed(&obj, from) {
            crate::support::progress::note(format!(
                "{} was seeded from another build of {} than its current one: seeding it again",
                obj.display(),
                from.display()
            ));
            set_aside(&obj)?;
        }
    }
    if !obj.exists() {
        match &base_obj {
            Some(from) => seed_from(from, &obj, "its base flavor")?,
            None => seed_from_sibling(&cache.join("kernel/build"), &obj, &merged)?,
        }
    }
    std::fs::create_dir_all(&obj)?;
    // One build per O= directory at a time; a second caller waits.
    let lockf = std::fs::File::create(obj.join(".lab-lock"))?;
    lockf.lock().context("locking the build directory")?;

    configure(&tc, &src, &obj, &merged)?;
    let t0 = Instant::now();
    // The gdb helpers (vmlinux-gdb.py and the generated constants) when the config asks for them.
    let gdb = merged.values.get("CONFIG_GDB_SCRIPTS").is_some_and(|v| v == "y");
    let targets: &[&str] = if gdb { &["Image", "vmlinux", "scripts_gdb"] } else { &["Image", "vmlinux"] };
    make_with_progress(&tc, &src, &obj, flavor, targets)?;
    // The key names the tree state before the build: publish only if it still holds (someone
    // may have edited the tree meanwhile; other lab processes wait for the tree lock).
    if tree::state_hash(&src)? != state {
        bail!(
            "the kernel tree {} changed during the build, so the result matches no known state; \
             nothing was published. Rerun `cargo make kernel --flavor {flavor}`.",
            src.display()
        );
    }
    let extra_text = (label != flavor_name).then(|| extras.fragment()).transpose()?.map(|f| f.render());
    publish(&obj, &out, &tc, &src, extra_text.as_deref())?;
    prune(&cache, flavor, &key);
    crate::support::progress::note(format!("kernel {flavor} built in {:.0?}: {}", t0.elapsed(), out.display()));
    Ok(built)
}

/// Reads of a moving tree before [`published`] gives up (2 s apart).
const SETTLE_TRIES: u32 = 5;

/// Most config lines a sibling may differ by for its O= directory to seed a new flavor's.
const SEED_MAX_DIFF: usize = 8;

/// Starts a new flavor's O= directory as a copy of the built flavor whose merged fragment is
/// closest, when that one differs in a few symbols only. kbuild tracks dependencies per config
/// symbol (include/config/) and the compile lines name the object tree relatively, so the
/// next make rebuilds only what the difference touches: a C-driver flavor beside perf costs
/// minutes instead of a full build.
fn seed_from_sibling(build_root: &Path, obj: &Path, merged: &Fragment) -> Result<()> {
    let Some((diff, from)) = closest_sibling(build_root, &merged.render()) else { return Ok(()) };
    seed_from(&from, obj, &format!("{diff} config lines differ"))
}

/// Which build of it a seeded O= directory was copied from, inside the copy.
const SEEDED_FROM: &str = ".lab-seeded-from";

/// A build of an O= directory: its vmlinux's size and mtime (every link rewrites it).
fn build_id(obj: &Path) -> Option<String> {
    let m = std::fs::metadata(obj.join("vmlinux")).ok()?;
    let t = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(format!("{} {}", m.len(), t.as_nanos()))
}

/// The [`build_id`] of the O= directory `obj` was seeded from (None: not seeded, or before
/// the lab recorded it).
fn seeded_from(obj: &Path) -> Option<String> {
    std::fs::read_to_string(obj.join(SEEDED_FROM)).ok().map(|s| s.trim().to_string())
}

/// Whether the O= directory `obj` exists and was not seeded from `base`'s current build.
fn needs_reseed(obj: &Path, base: &Path) -> bool {
    obj.exists() && seeded_from(obj) != build_id(base)
}

/// Removes the O= directory `obj` (under its build lock, renamed away first, so no one
/// builds in half of it).
fn set_aside(obj: &Path) -> Result<()> {
    let lockf = std::fs::File::create(obj.join(".lab-lock"))?;
    lockf.lock().context("locking the build directory")?;
    let name = obj.file_name().context("an O= directory has a name")?.to_string_lossy().into_owned();
    let aside = obj.with_file_name(format!(".{name}.stale.tmp"));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(obj, &aside).with_context(|| format!("moving {} aside", obj.display()))?;
    drop(lockf);
    std::fs::remove_dir_all(&aside).with_context(|| format!("removing {}", aside.display()))
}

/// Copies the O= directory `from` to `obj` (atomically: a copy in progress has a hidden name).
fn seed_from(from: &Path, obj: &Path, why: &str) -> Result<()> {
    // Not while the sibling builds: its build holds the same lock exclusively.
    let lockf = std::fs::File::create(from.join(".lab-lock"))?;
    lockf.lock_shared().context("locking the sibling build directory")?;
    crate::support::progress::note(format!("seeding {} from {} ({why})", obj.display(), from.display()));
    publish_dir(obj, |tmp| {
        let st = Command::new("cp").args(["-a", "--reflink=auto"]).arg(from.join(".")).arg(tmp).status()?;
        if !st.success() {
            bail!("copying {} to {} failed ({st})", from.display(), tmp.display());
        }
        // The copy must configure afresh for its own fragment.
        let _ = std::fs::remove_file(tmp.join(".lab-config.sha256"));
        if let Some(id) = build_id(from) {
            std::fs::write(tmp.join(SEEDED_FROM), id)?;
        }
        Ok(())
    })
}

/// The built O= directory under `build_root` whose merged fragment differs least from `want`
/// (by lines), if it differs by at most SEED_MAX_DIFF; ties go to the first name.
fn closest_sibling(build_root: &Path, want: &str) -> Option<(usize, PathBuf)> {
    let lines = |t: &str| t.lines().map(str::to_string).collect::<std::collections::BTreeSet<_>>();
    let want = lines(want);
    // Hidden names are copies in progress (support::fs::publish_dir).
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(build_root)
        .ok()?
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut best: Option<(usize, PathBuf)> = None;
    for dir in dirs {
        let Ok(text) = std::fs::read_to_string(dir.join("lab-merged.config")) else { continue };
        if !dir.join("vmlinux").is_file() {
            continue; // never built to the end
        }
        let diff = want.symmetric_difference(&lines(&text)).count();
        if diff <= SEED_MAX_DIFF && best.as_ref().is_none_or(|(d, _)| diff < *d) {
            best = Some((diff, dir));
        }
    }
    best
}

/// The published build of `flavor` for this checkout, found without the tree lock. When the
/// tree carries `series` (the flavor's stack), for the tree as it is (read twice: no other
/// process is changing it); when it carries another stack, for the clean state a sync to
/// this one recorded before. Either way the key names what a locked sync and build would name.
pub fn published(
    cache: &Path,
    flavor: &str,
    lock: &Lock,
    merged: &Fragment,
    series: &[Series],
    fingerprint: &str,
) -> Result<Option<Built>> {
    let src = tree::tree_dir(cache, lock);
    // A tree that moved between two reads is being synced by another process, which takes
    // seconds (its build after that takes minutes, under the tree lock): read it again
    // rather than wait for that lock.
    let mut tries = 0;
    let state = loop {
        match tree::settled_state(&src, series)? {
            Some(s) => break s,
            None if !tree::carries(&src, series)? => match tree::recorded_state(&src, series)? {
                Some(s) => break s,
                None => return Ok(None),
            },
            None if tries < SETTLE_TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_secs(2));
            }
            None => return Ok(None),
        }
    };
    let key = cache_key(lock, merged, &state, fingerprint);
    let dir = artifacts_dir(cache, flavor, &key);
    Ok(dir.join("Image").is_file().then(|| Built { flavor: flavor.into(), key, dir }))
}

/// The kernel tree carrying the stack of series, provisioning what is missing. The tree is shared by
/// every checkout on the machine: hold the returned lock for as long as the tree must stay
/// at this series (a build, a check); `purpose` tells waiting processes why it is held.
pub fn prepared_tree(cache: &Path, lock: &Lock, series: &[Series], purpose: &str) -> Result<(PathBuf, std::fs::File)> {
    let deb = ensure_kernel_deb(cache, lock)?;
    let src = tree::ensure_unpacked(cache, lock, &deb)?;
    let guard = tree::lock(cache, purpose)?;
    tree::sync_series(&src, series)?;
    Ok((src, guard))
}

/// allnoconfig + the merged fragment, then olddefconfig, then a check that kconfig kept
/// every symbol asked for. Skipped when the fragment is unchanged since the last run.
pub fn configure(tc: &Toolchain, src: &Path, obj: &Path, merged: &Fragment) -> Result<()> {
    let rendered = merged.render();
    let stamp = obj.join(".lab-config.sha256");
    let want = sha256_hex(rendered.as_bytes());
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && obj.join(".config").is_file() {
        return Ok(());
    }
    let allconfig = obj.join("lab-merged.config");
    write_atomic(&allconfig, rendered.as_bytes())?;
    let log = obj.join("config.log");
    run_logged(
        tc.make(src, obj).arg(format!("KCONFIG_ALLCONFIG={}", allconfig.display())).arg("allnoconfig"),
        &log,
        |_| {},
    )?;
    run_logged(tc.make(src, obj).arg("olddefconfig"), &obj.join("olddefconfig.log"), |_| {})?;
    let dot = std::fs::read_to_string(obj.join(".config"))?;
    let bad = merged.check(&dot);
    if !bad.is_empty() {
        bail!(
            "kconfig dropped or changed {} symbol(s) asked for by the fragments (usually an unmet dependency):\n  {}\nFix the fragment (kernel-config/, --kconfig FILE or --kconfig-add): also ask for what the symbol depends on (its `depends on` in the Kconfig file; `make menuconfig` shows it).",
            bad.len(),
            bad.join("\n  ")
        );
    }
    write_atomic(&stamp, want.as_bytes())
}

fn make_with_progress(tc: &Toolchain, src: &Path, obj: &Path, flavor: &str, targets: &[&str]) -> Result<()> {
    let jobs = std::thread::available_parallelism().map(|n| n.get() + 1).unwrap_or(2);
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} kernel {prefix} [{elapsed}] {pos} objects  {msg}").unwrap());
    pb.set_prefix(flavor.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    let log = obj.join("build.log");
    let res = run_logged(tc.make(src, obj).arg(format!("-j{jobs}")).args(targets), &log, |line| {
        // kbuild's quiet lines: "  CC      mm/mmap.o", "  RUSTC L rust/core.o", "  LD      vmlinux".
        let t = line.trim_start();
        if let Some((stage, rest)) = t.split_once(char::is_whitespace) {
            if stage.chars().all(|c| c.is_ascii_uppercase() || c == '_') && stage.len() <= 8 {
                pb.inc(1);
                pb.set_message(format!("{stage} {}", rest.trim()));
            }
        }
    });
    pb.finish_and_clear();
    res
}

/// Copies the outputs into a temporary directory, records their sizes and hashes there
/// (support::artifact) and renames it into place. A variant's extras are kept beside them as
/// `lab-extras.config`, the gdb helpers in `gdb/`.
fn publish(obj: &Path, out: &Path, tc: &Toolchain, src: &Path, extras: Option<&str>) -> Result<()> {
    publish_dir(out, |tmp| {
        for f in ARTIFACTS {
            let from = if f == "Image" { obj.join("arch/arm64/boot/Image") } else { obj.join(f) };
            std::fs::copy(&from, tmp.join(f)).with_context(|| format!("copying {}", from.display()))?;
        }
        let release = tc.make(src, obj).arg("-s").arg("kernelrelease").output()?;
        std::fs::write(tmp.join("kernel.release"), &release.stdout)?;
        if let Some(text) = extras {
            std::fs::write(tmp.join("lab-extras.config"), text)?;
        }
        if obj.join("vmlinux-gdb.py").exists() {
            copy_gdb_scripts(obj, &tmp.join(GDB_DIR))?;
        }
        artifact::seal(tmp)?;
        for f in std::fs::read_dir(tmp)?.flatten() {
            if f.path().is_file() {
                std::fs::File::open(f.path())?.sync_all()?;
            }
        }
        Ok(())
    })
}

/// Where a published file comes from in the O= directory (see [`publish`]); None for the
/// ones a build does not leave there (`lab-extras.config`).
fn source_in_obj(rel: &str) -> Option<PathBuf> {
    match rel {
        "Image" => Some("arch/arm64/boot/Image".into()),
        "vmlinux" | ".config" | "System.map" => Some(rel.into()),
        "kernel.release" => Some("include/config/kernel.release".into()),
        _ => rel.strip_prefix(&format!("{GDB_DIR}/")).map(PathBuf::from),
    }
}

/// Repairs the damaged published build `out` without make or the tree lock: each file that
/// no longer matches its manifest entry is copied back from the flavor's kept O= directory
/// `obj` if the copy there hashes to the recorded value (so it is this build's own output),
/// and the intact files are kept. The result is checked against the manifest and published
/// by rename. Holds only `obj`'s lock, and only if it is free (a build there may be changing
/// the outputs). False, with nothing changed, when there is no readable manifest or a damaged
/// file has no matching copy: then the caller rebuilds with make.
fn restore_from_obj(obj: &Path, out: &Path) -> Result<bool> {
    let Some(m) = artifact::manifest(out) else { return Ok(false) };
    let Ok(lockf) = std::fs::File::open(obj.join(".lab-lock")) else { return Ok(false) };
    if lockf.try_lock().is_err() {
        return Ok(false);
    }
    // Where each file comes from: the artifact itself if intact, else the O= directory.
    let mut plan = vec![];
    for (rel, want) in &m.files {
        let here = out.join(rel);
        let from = if artifact::matches(&here, want) {
            here
        } else {
            match source_in_obj(rel).map(|r| obj.join(r)).filter(|p| artifact::matches(p, want)) {
                Some(p) => p,
                None => return Ok(false),
            }
        };
        plan.push((rel.clone(), from));
    }
    let restored = publish_dir(out, |tmp| {
        for (rel, from) in &plan {
            let to = tmp.join(rel);
            std::fs::create_dir_all(to.parent().unwrap_or(tmp))?;
            std::fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
        }
        for (rel, target) in &m.links {
            std::os::unix::fs::symlink(target, tmp.join(rel))?;
        }
        let got = artifact::seal(tmp)?;
        let same = got.files.len() == m.files.len()
            && got
                .files
                .iter()
                .all(|(k, e)| m.files.get(k).is_some_and(|w| (w.size, &w.sha256) == (e.size, &e.sha256)));
        anyhow::ensure!(same, "the restored files do not match the manifest");
        Ok(())
    });
    Ok(restored.is_ok())
}

/// A build published before manifests (`out`, none there) gets one when every file equals
/// its counterpart among the flavor's kept O= outputs: two copies that agree byte for byte
/// are taken as good, without make or the tree lock. Holds `obj`'s lock, only if free. False
/// (nothing written) when a file differs or has no counterpart: then make rebuilds it.
fn record_if_obj_agrees(obj: &Path, out: &Path) -> Result<bool> {
    let Ok(lockf) = std::fs::File::open(obj.join(".lab-lock")) else { return Ok(false) };
    if lockf.try_lock().is_err() {
        return Ok(false);
    }
    let m = artifact::record(out)?;
    let agree = m.files.iter().all(|(rel, e)| source_in_obj(rel).is_some_and(|r| artifact::matches(&obj.join(r), e)));
    if agree && artifact::manifest(out).is_none() {
        artifact::write_manifest(out, &m)?;
    }
    Ok(agree)
}

/// Where a published build keeps the kernel's gdb helpers ([`Built::gdb_script`]).
pub const GDB_DIR: &str = "gdb";

/// `vmlinux-gdb.py` and `scripts/gdb/` of the O= directory, symlinks resolved: the scripts
/// include constants generated from this build's .config, so they belong to the artifact.
fn copy_gdb_scripts(obj: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::copy(obj.join("vmlinux-gdb.py"), to.join("vmlinux-gdb.py")).context("copying vmlinux-gdb.py")?;
    let mut stack = vec![PathBuf::from("scripts/gdb")];
    while let Some(rel) = stack.pop() {
        std::fs::create_dir_all(to.join(&rel))?;
        for e in std::fs::read_dir(obj.join(&rel))?.flatten() {
            let r = rel.join(e.file_name());
            let meta = std::fs::metadata(e.path())?;
            if meta.is_dir() {
                stack.push(r);
            } else if r.extension().is_some_and(|x| x == "py") {
                std::fs::copy(e.path(), to.join(&r)).with_context(|| format!("copying {}", r.display()))?;
            }
        }
    }
    Ok(())
}

/// Keeps the most recently used few published builds of a flavor.
fn prune(cache: &Path, flavor: &str, keep_key: &str) {
    crate::support::process::prune_builds(&Kind::Kernel.root(cache), &format!("{flavor}-"), keep_key, KEEP);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kbuild::pin::KernelPin;

    const PINNED_KEY: &str = "d5bc654fc59d46c1";

    fn lock() -> Lock {
        Lock {
            kernel: KernelPin {
                package: "p".into(),
                version: "7.2.1-1".into(),
                suite: "sid".into(),
                sha256: "0".repeat(64),
            },
        }
    }

    #[test]
    fn cache_key_is_stable_and_sensitive() {
        let f = Fragment::parse("CONFIG_A=y\n", "a").unwrap();
        let k = cache_key(&lock(), &f, "tree1", "rustc 1.95");
        assert_eq!(k, cache_key(&lock(), &f, "tree1", "rustc 1.95"));
        assert_eq!(k.len(), 16);
        // Fixed value: the key must not depend on the machine, map order, or time.
        assert_eq!(
            k,
            cache_key(&lock(), &Fragment::parse("# x\nCONFIG_A=y\n", "other").unwrap(), "tree1", "rustc 1.95")
        );
        assert_ne!(k, cache_key(&lock(), &f, "tree2", "rustc 1.95"));
        assert_ne!(k, cache_key(&lock(), &f, "tree1", "rustc 1.96"));
        assert_ne!(k, cache_key(&lock(), &Fragment::parse("CONFIG_A=n\n", "a").unwrap(), "tree1", "rustc 1.95"));
        let mut l = lock();
        l.kernel.version = "7.2.2-1".into();
        assert_ne!(k, cache_key(&l, &f, "tree1", "rustc 1.95"));
    }

    #[test]
    fn extras_make_a_distinct_variant() {
        let none = Extras::default();
        assert_eq!(none.label("perf").unwrap(), "perf");
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("dwarf.config");
        std::fs::write(&file, "CONFIG_DEBUG_KERNEL=y\nCONFIG_DEBUG_INFO_DWARF5=n\n").unwrap();
        let x = Extras { files: vec![file], adds: vec!["CONFIG_DEBUG_INFO_DWARF5=y".into()] };
        let f = x.fragment().unwrap();
        // --kconfig-add wins over --kconfig, and each symbol names the option that set it.
        assert_eq!(f.values["CONFIG_DEBUG_INFO_DWARF5"], "y");
        assert_eq!(f.origin["CONFIG_DEBUG_INFO_DWARF5"], "--kconfig-add CONFIG_DEBUG_INFO_DWARF5=y");
        assert!(f.origin["CONFIG_DEBUG_KERNEL"].starts_with("--kconfig "));
        let label = x.label("perf").unwrap();
        assert!(label.starts_with("perf+") && label.len() == 13, "{label}");
        let other = Extras { adds: vec!["CONFIG_USER_NS=y".into()], ..Default::default() };
        assert_ne!(label, other.label("perf").unwrap());
        // The check after olddefconfig names the option that asked for a dropped symbol.
        let bad = f.check("CONFIG_DEBUG_KERNEL=y\n");
        assert!(bad[0].contains("--kconfig-add CONFIG_DEBUG_INFO_DWARF5=y asks for y"), "{bad:?}");
        for wrong in ["DEBUG_INFO=y", "CONFIG_X", "CONFIG_X="] {
            let e = Extras { adds: vec![wrong.into()], ..Default::default() }.fragment().unwrap_err().to_string();
            assert!(e.contains("expected CONFIG_NAME=value"), "{e}");
        }
        let perf = fragment("perf").unwrap();
        let same = Extras { adds: vec!["CONFIG_USER_NS=y".into()], ..Default::default() };
        assert_eq!(same.over(&perf, "perf").unwrap().1, "perf", "a no-op extra is the plain flavor");
        assert_eq!(
            same.no_change_note("perf").unwrap(),
            "CONFIG_USER_NS=y already set so by the perf flavor: using the perf kernel"
        );
        let (merged, l) = x.over(&perf, "perf").unwrap();
        assert_eq!((l.as_str(), merged.values["CONFIG_DEBUG_INFO_DWARF5"].as_str()), (label.as_str(), "y"));
        let e = Extras { files: vec!["/no/such.config".into()], ..Default::default() }.fragment().unwrap_err();
        assert!(format!("{e:#}").contains("--kconfig /no/such.config"), "{e:#}");
    }

    #[test]
    fn gdb_scripts_are_copied_with_symlinks_resolved() {
        // An O= directory after `make scripts_gdb`: symlinks into the tree plus generated files.
        let d = tempfile::tempdir().unwrap();
        let (src, obj) = (d.path().join("src"), d.path().join("obj"));
        std::fs::create_dir_all(src.join("scripts/gdb/linux")).unwrap();
        std::fs::create_dir_all(obj.join("scripts/gdb/linux")).unwrap();
        std::fs::write(src.join("scripts/gdb/vmlinux-gdb.py"), "import linux\n").unwrap();
        std::fs::write(src.join("scripts/gdb/linux/utils.py"), "# utils\n").unwrap();
        std::os::unix::fs::symlink(src.join("scripts/gdb/vmlinux-gdb.py"), obj.join("vmlinux-gdb.py")).unwrap();
        std::os::unix::fs::symlink(src.join("scripts/gdb/linux/utils.py"), obj.join("scripts/gdb/linux/utils.py"))
            .unwrap();
        std::fs::write(obj.join("scripts/gdb/linux/constants.py"), "LX_CONFIG_X = 1\n").unwrap();
        std::fs::write(obj.join("scripts/gdb/linux/.constants.py.cmd"), "x").unwrap();
        let to = d.path().join("artifact").join(GDB_DIR);
        copy_gdb_scripts(&obj, &to).unwrap();
        assert_eq!(std::fs::read_to_string(to.join("vmlinux-gdb.py")).unwrap(), "import linux\n");
        assert!(!to.join("vmlinux-gdb.py").is_symlink());
        assert_eq!(std::fs::read_to_string(to.join("scripts/gdb/linux/utils.py")).unwrap(), "# utils\n");
        assert!(to.join("scripts/gdb/linux/constants.py").is_file());
        assert!(!to.join("scripts/gdb/linux/.constants.py.cmd").exists());
        let b = Built { flavor: "perf+x".into(), key: "k".into(), dir: d.path().join("artifact") };
        assert_eq!(b.gdb_script(), Some(to.join("vmlinux-gdb.py")));
    }

    #[test]
    fn a_damaged_build_is_restored_from_its_o_directory() {
        let d = tempfile::tempdir().unwrap();
        let (obj, out) = (d.path().join("obj"), d.path().join("artifacts/perf-0123"));
        std::fs::create_dir_all(obj.join("arch/arm64/boot")).unwrap();
        std::fs::create_dir_all(obj.join("include/config")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        for (rel, at, body) in [
            ("Image", "arch/arm64/boot/Image", "image bytes"),
            ("vmlinux", "vmlinux", "elf bytes"),
            ("kernel.release", "include/config/kernel.release", "7.2.12-binderlab\n"),
        ] {
            std::fs::write(obj.join(at), body).unwrap();
            std::fs::write(out.join(rel), body).unwrap();
        }
        std::fs::write(out.join("lab-extras.config"), "CONFIG_X=y\n").unwrap();
        std::fs::write(obj.join(".lab-lock"), "").unwrap();
        artifact::seal(&out).unwrap();
        let damaged = |rel: &str| {
            std::fs::write(out.join(rel), "garbage!").unwrap();
            assert!(matches!(artifact::check(&out, Depth::Full), State::Damaged(_)));
        };
        damaged("Image");
        damaged("vmlinux");
        assert!(restore_from_obj(&obj, &out).unwrap());
        assert_eq!(artifact::check(&out, Depth::Full), State::Good);
        assert_eq!(std::fs::read_to_string(out.join("Image")).unwrap(), "image bytes");
        // Busy O= directory (a build there holds its lock): not now.
        damaged("Image");
        let held = std::fs::File::open(obj.join(".lab-lock")).unwrap();
        held.lock().unwrap();
        assert!(!restore_from_obj(&obj, &out).unwrap());
        drop(held);
        // The O= copy is of another build: make has to do it.
        std::fs::write(obj.join("arch/arm64/boot/Image"), "other build").unwrap();
        assert!(!restore_from_obj(&obj, &out).unwrap());
        // A file the build does not leave in O=.
        std::fs::write(obj.join("arch/arm64/boot/Image"), "image bytes").unwrap();
        assert!(restore_from_obj(&obj, &out).unwrap());
        damaged("lab-extras.config");
        assert!(!restore_from_obj(&obj, &out).unwrap());
        assert!(matches!(artifact::check(&out, Depth::Full), State::Damaged(_)), "left as it was");
    }

    #[test]
    fn a_build_from_before_manifests_is_recorded_if_its_o_directory_agrees() {
        let d = tempfile::tempdir().unwrap();
        let (obj, out) = (d.path().join("obj"), d.path().join("artifacts/perf-0123"));
        std::fs::create_dir_all(obj.join("arch/arm64/boot")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(obj.join(".lab-lock"), "").unwrap();
        std::fs::write(obj.join("arch/arm64/boot/Image"), "image bytes").unwrap();
        std::fs::write(obj.join("vmlinux"), "elf bytes").unwrap();
        std::fs::write(out.join("Image"), "image bytes").unwrap();
        std::fs::write(out.join("vmlinux"), "elf bytez").unwrap();
        assert!(!record_if_obj_agrees(&obj, &out).unwrap(), "vmlinux differs");
        assert_eq!(artifact::check(&out, Depth::Full), State::Unsealed);
        std::fs::write(out.join("vmlinux"), "elf bytes").unwrap();
        assert!(record_if_obj_agrees(&obj, &out).unwrap());
        assert_eq!(artifact::check(&out, Depth::Full), State::Good);
        // A file the O= directory does not have (a variant's extras): make decides.
        std::fs::remove_file(out.join(artifact::MANIFEST)).unwrap();
        std::fs::write(out.join("lab-extras.config"), "CONFIG_X=y\n").unwrap();
        assert!(!record_if_obj_agrees(&obj, &out).unwrap());
    }

    #[test]
    fn cache_key_value_is_pinned() {
        // Published kernels are keyed by this: a change rebuilds every flavor everywhere.
        let f = Fragment::parse("CONFIG_A=y\n", "a").unwrap();
        assert_eq!(cache_key(&lock(), &f, "tree1", "rustc 1.95"), PINNED_KEY);
    }

    #[test]
    fn published_build_is_found_without_the_tree_lock() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let src = tree::tree_dir(&cache, &lock());
        let series = crate::kbuild::tree::tests::synced_tree(&src, &d.path().join("rust-driver"));
        let merged = fragment("perf").unwrap();
        let key = cache_key(&lock(), &merged, &tree::state_hash(&src).unwrap(), "tc");
        std::fs::create_dir_all(artifacts_dir(&cache, "perf", &key)).unwrap();
        std::fs::write(artifacts_dir(&cache, "perf", &key).join("Image"), "").unwrap();
        // Another process holds the tree lock (e.g. building another flavor).
        let _held = tree::lock(&cache, "building kernel debug").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, m, s) = (cache.clone(), merged.clone(), series.clone());
        std::thread::spawn(move || {
            tx.send(published(&c, "perf", &lock(), &m, &[s], "tc").map_err(|e| format!("{e:#}")))
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("published() waited for the tree lock");
        assert_eq!(got.unwrap().map(|b| b.key), Some(key.clone()));
        // An edit in the tree names another state: no published build for it.
        std::fs::write(src.join("drivers/a.rs"), "edited\n").unwrap();
        assert!(published(&cache, "perf", &lock(), &merged, std::slice::from_ref(&series), "tc").unwrap().is_none());
        // Nor for a series the tree never carried.
        std::fs::write(src.join("drivers/a.rs"), "fn a() {}\n").unwrap();
        let other_dir = d.path().join("other-driver");
        std::fs::create_dir_all(&other_dir).unwrap();
        std::fs::write(other_dir.join("0001-x.patch"), "x\n").unwrap();
        std::fs::write(other_dir.join("series"), "0001-x.patch\n").unwrap();
        let other = Series::load(&other_dir).unwrap();
        assert!(published(&cache, "perf", &lock(), &merged, std::slice::from_ref(&other), "tc").unwrap().is_none());
        // While the tree carries another checkout's series, ours is still found by the clean
        // state its last sync recorded.
        crate::kbuild::tree::tests::stamp_as(&src, &other);
        assert_eq!(
            published(&cache, "perf", &lock(), &merged, std::slice::from_ref(&series), "tc").unwrap().map(|b| b.key),
            Some(key)
        );
    }

    #[test]
    fn a_treatment_is_seeded_again_when_its_base_was_rebuilt() {
        let root = tempfile::tempdir().unwrap();
        let (base, obj) = (root.path().join("perf"), root.path().join("perf+ab-0123456789ab"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("vmlinux"), "v1").unwrap();
        assert!(!needs_reseed(&obj, &base), "nothing to seed again yet");
        seed_from(&base, &obj, "test").unwrap();
        assert!(!needs_reseed(&obj, &base), "fresh");
        // A treatment O= directory of before the record: seeded again, once.
        std::fs::remove_file(obj.join(SEEDED_FROM)).unwrap();
        assert!(needs_reseed(&obj, &base));
        set_aside(&obj).unwrap();
        assert!(!obj.exists() && std::fs::read_dir(root.path()).unwrap().count() == 1, "nothing left aside");
        seed_from(&base, &obj, "test").unwrap();
        // The base links again (another tree state): the copy is stale.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::write(base.join("vmlinux"), "v2").unwrap();
        std::fs::File::options().write(true).open(base.join("vmlinux")).unwrap().set_modified(later).unwrap();
        assert!(needs_reseed(&obj, &base));
    }

    #[test]
    fn closest_built_sibling_seeds_a_new_flavor() {
        let root = tempfile::tempdir().unwrap();
        let mk = |name: &str, cfg: &str, built: bool| {
            let d = root.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("lab-merged.config"), cfg).unwrap();
            if built {
                std::fs::write(d.join("vmlinux"), "").unwrap();
            }
        };
        let base: String = (0..40).map(|i| format!("CONFIG_S{i}=y\n")).collect();
        mk("perf", &format!("{base}CONFIG_P=y\n"), true);
        mk("half", &format!("{base}CONFIG_C=y\n"), false);
        mk("debug", &format!("{base}{}", (0..20).map(|i| format!("CONFIG_D{i}=y\n")).collect::<String>()), true);
        let want = format!("{base}CONFIG_C=y\n");
        let (diff, dir) = closest_sibling(root.path(), &want).expect("perf is close");
        assert_eq!((diff, dir.file_name().unwrap().to_str().unwrap()), (2, "perf"));
        // Too different: a full build is as cheap as a copy.
        let far = format!("{base}{}", (0..9).map(|i| format!("CONFIG_F{i}=y\n")).collect::<String>());
        assert_eq!(closest_sibling(root.path(), &far).map(|(_, d)| d), None);
    }

    #[test]
    fn external_kernel_needs_image_and_config() {
        let d = tempfile::tempdir().unwrap();
        let e = Built::external("perf", d.path()).unwrap_err().to_string();
        assert!(e.contains("no readable Image"), "{e}");
        std::fs::write(d.path().join("Image"), b"image").unwrap();
        assert!(Built::external("perf", d.path()).unwrap_err().to_string().contains("no .config"));
        std::fs::write(d.path().join(".config"), b"CONFIG_A=y\n").unwrap();
        let b = Built::external("debug", d.path()).unwrap();
        assert_eq!((b.flavor.as_str(), b.key.len()), ("debug", "external-".len() + 16));
        assert_eq!(b.image(), d.path().join("Image"));
    }

    #[test]
    fn flavors_are_listed() {
        let f = flavors();
        assert!(f.contains(&"perf".to_string()) && f.contains(&"debug".to_string()), "{f:?}");
        assert!(fragment("nope").unwrap_err().to_string().contains("unknown kernel flavor"));
        let perf = fragment("perf").unwrap();
        assert_eq!(perf.values["CONFIG_ANDROID_BINDER_IPC_RUST"], "y");
    }
}
