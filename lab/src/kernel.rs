//! `lab kernel`: cached, incremental, atomic kernel builds per flavor.
//!
//! - The O= directory of a flavor is kept, so an edit rebuilds only what it touches.
//! - Artifacts are published under a content key (kernel pin, fragments, tree state,
//!   toolchain) by rename, only after make succeeded: an interrupted build never leaves
//!   something that looks complete, and an unchanged input is a no-op.

use crate::kconfig::Fragment;
use crate::lock::Lock;
use crate::setup::Toolchain;
use crate::tree::{self, Series};
use crate::util::{run_logged, sha256_hex, write_atomic};
use crate::{paths, setup};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bump when the build recipe changes in a way the inputs don't show.
const RECIPE: &str = "lab-kernel-v2";
/// Files published per build.
const ARTIFACTS: [&str; 4] = ["Image", "vmlinux", ".config", "System.map"];
/// Published builds kept per flavor.
const KEEP: usize = 4;

/// Kernel flavors: base.config plus `<flavor>.config`.
pub fn flavors() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(paths::kernel_config_dir())
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".config").map(str::to_string))
                .filter(|n| n != "base")
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The merged fragment for a flavor.
pub fn fragment(flavor: &str) -> Result<Fragment> {
    let dir = paths::kernel_config_dir();
    let f = dir.join(format!("{flavor}.config"));
    if !f.is_file() {
        bail!(
            "unknown kernel flavor {flavor:?}; known: {} (each is kernel-config/<flavor>.config)",
            flavors().join(", ")
        );
    }
    Ok(Fragment::merge(&[Fragment::load(&dir.join("base.config"))?, Fragment::load(&f)?]))
}

/// A published build.
#[derive(Clone, Debug)]
pub struct Built {
    pub flavor: String,
    pub key: String,
    pub dir: PathBuf,
}

impl Built {
    pub fn image(&self) -> PathBuf {
        self.dir.join("Image")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join(".config")
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
    cache.join("kernel/artifacts").join(format!("{flavor}-{key}"))
}

/// Builds (or finds) the kernel for `flavor`.
pub fn build(flavor: &str) -> Result<Built> {
    let cache = paths::cache();
    let merged = fragment(flavor)?;
    let lock = Lock::load(&Lock::path())?;
    if let Some(b) = published_unlocked(&cache, &lock, flavor, &merged) {
        eprintln!("lab: kernel {flavor} is up to date: {}", b.dir.display());
        return Ok(b);
    }
    let (tc, src, _tree_lock) = prepared_tree(&cache, &lock)?;

    let state = tree::state_hash(&src)?;
    let key = cache_key(&lock, &merged, &state, &tc.fingerprint()?);
    let out = artifacts_dir(&cache, flavor, &key);
    let built = Built { flavor: flavor.into(), key: key.clone(), dir: out.clone() };
    if out.join("Image").is_file() {
        eprintln!("lab: kernel {flavor} is up to date: {}", out.display());
        return Ok(built);
    }

    let obj = cache.join("kernel/build").join(flavor);
    std::fs::create_dir_all(&obj)?;
    // One build per O= directory at a time; a second caller waits.
    let lockf = std::fs::File::create(obj.join(".lab-lock"))?;
    lockf.lock().context("locking the build directory")?;

    configure(&tc, &src, &obj, &merged)?;
    let t0 = Instant::now();
    make_with_progress(&tc, &src, &obj, flavor)?;
    // The key names the tree state before the build: publish only if it still holds (someone
    // may have edited the tree meanwhile; other lab processes wait for the tree lock).
    if tree::state_hash(&src)? != state {
        bail!(
            "the kernel tree {} changed during the build, so the result matches no known state; \
             nothing was published. Rerun `cargo make kernel --flavor {flavor}`.",
            src.display()
        );
    }
    publish(&obj, &out, &tc, &src)?;
    prune(&cache, flavor, &key);
    eprintln!("lab: kernel {flavor} built in {:.0?}: {}", t0.elapsed(), out.display());
    Ok(built)
}

/// The published build a locked `build` would find, looked up without the tree lock: another
/// process may hold it for many minutes while it builds another flavor. Only when the tree
/// already carries exactly our series, unedited.
fn published_unlocked(cache: &Path, lock: &Lock, flavor: &str, merged: &Fragment) -> Option<Built> {
    let tc = Toolchain::probe(cache)?;
    let src = tree::tree_dir(cache, lock);
    if !tree::carries_exactly(&src, &Series::load(&paths::driver_dir()).ok()?) {
        return None;
    }
    let key = cache_key(lock, merged, &tree::state_hash(&src).ok()?, &tc.fingerprint().ok()?);
    let dir = artifacts_dir(cache, flavor, &key);
    dir.join("Image").is_file().then(|| Built { flavor: flavor.into(), key, dir })
}

/// The toolchain and the kernel tree carrying the series, provisioning what is missing.
/// The tree is shared by every checkout on the machine: hold the returned lock for as long as
/// the tree must stay at this series (a build, a check).
pub fn prepared_tree(cache: &Path, lock: &Lock) -> Result<(Toolchain, PathBuf, std::fs::File)> {
    let tc = setup::toolchain(cache)?;
    let deb = setup::ensure_kernel_deb(cache, lock)?;
    let src = tree::ensure_unpacked(cache, lock, &deb)?;
    let guard = tree::lock(cache)?;
    tree::sync_series(&src, &Series::load(&paths::driver_dir())?)?;
    Ok((tc, src, guard))
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
            "kconfig dropped or changed {} symbol(s) asked for by the fragments (usually an unmet dependency):\n  {}\nFix the fragment in kernel-config/ (see `make menuconfig` help for the symbol's depends on).",
            bad.len(),
            bad.join("\n  ")
        );
    }
    write_atomic(&stamp, want.as_bytes())
}

fn make_with_progress(tc: &Toolchain, src: &Path, obj: &Path, flavor: &str) -> Result<()> {
    let jobs = std::thread::available_parallelism().map(|n| n.get() + 1).unwrap_or(2);
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} kernel {prefix} [{elapsed}] {pos} objects  {msg}").unwrap());
    pb.set_prefix(flavor.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    let log = obj.join("build.log");
    let res = run_logged(tc.make(src, obj).arg(format!("-j{jobs}")).args(["Image", "vmlinux"]), &log, |line| {
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

/// Copies the outputs into a temporary directory and renames it into place.
fn publish(obj: &Path, out: &Path, tc: &Toolchain, src: &Path) -> Result<()> {
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    for f in ARTIFACTS {
        let from = if f == "Image" { obj.join("arch/arm64/boot/Image") } else { obj.join(f) };
        std::fs::copy(&from, tmp.join(f)).with_context(|| format!("copying {}", from.display()))?;
    }
    let release = tc.make(src, obj).arg("-s").arg("kernelrelease").output()?;
    std::fs::write(tmp.join("kernel.release"), &release.stdout)?;
    for f in std::fs::read_dir(&tmp)?.flatten() {
        std::fs::File::open(f.path())?.sync_all()?;
    }
    std::fs::rename(&tmp, out).with_context(|| format!("publishing {}", out.display()))?;
    Ok(())
}

/// Keeps the newest few published builds of a flavor.
fn prune(cache: &Path, flavor: &str, keep_key: &str) {
    crate::util::prune_builds(&cache.join("kernel/artifacts"), &format!("{flavor}-"), keep_key, KEEP);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::KernelPin;

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
    fn flavors_are_listed() {
        let f = flavors();
        assert!(f.contains(&"perf".to_string()) && f.contains(&"debug".to_string()), "{f:?}");
        assert!(fragment("nope").unwrap_err().to_string().contains("unknown kernel flavor"));
        let perf = fragment("perf").unwrap();
        assert_eq!(perf.values["CONFIG_ANDROID_BINDER_IPC_RUST"], "y");
    }
}
