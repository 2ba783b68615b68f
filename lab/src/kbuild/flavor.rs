//! Kernel flavors: the config fragments (on `base.config`) and the patch series a kernel is
//! built from.
//!
//! - `kernel-config/<name>.config`: a flavor of its own, `base.config` plus that fragment,
//!   with the default series ([`DEFAULT_SERIES`]).
//! - `kernel-config/flavors.toml`: flavors composed of several fragments, inline symbols and
//!   extra series applied after the default ones (e.g. `cbinder-spin`: the `cbinder` config
//!   plus `c-reference/`).
//!
//! The series a flavor applies are part of the tree state, so they reach the cache key.

use crate::kbuild::kconfig::Fragment;
use crate::kbuild::tree::Series;
use crate::support::paths;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Series every flavor applies first, in order (directories of the repository). android-sched/
/// only adds scheduler features that are off until a run's policy sets them (`--policy`), so
/// one kernel runs mainline's policy and the phone's. It comes first so that the driver
/// series stays on top, where `driver-export` takes the developer's commits from.
pub const DEFAULT_SERIES: &[&str] = &["android-sched", "rust-driver"];

/// Flavors that no longer exist, with what replaced them (for the error message).
const RETIRED: &[(&str, &str)] = &[
    ("phone", "perf: android-sched/ is in every kernel now; the phone's policy is a run option (--policy phone, sa8155p's default)"),
    ("phone-debug", "debug: android-sched/ is in every kernel now; the phone's policy is a run option (--policy phone, sa8155p's default)"),
];

/// What replaced a removed flavor, for the CLI's error (`--flavor phone`).
pub fn retired(name: &str) -> Option<&'static str> {
    RETIRED.iter().find(|(n, _)| *n == name).map(|(_, instead)| *instead)
}

/// Where composed flavors are declared.
pub const MANIFEST: &str = "flavors.toml";

/// The flavor a run or a kernel build uses unless `--flavor` says otherwise.
pub const DEFAULT: &str = "perf";

/// The kernels `cargo make test` and every nightly build; cbinder-spin starts from a copy of
/// cbinder's O= directory (two C files and a link), so it comes after cbinder.
pub const TESTED: [&str; 4] = ["perf", "debug", "cbinder", "cbinder-spin"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// One line for `--help` and reports.
    about: String,
    /// Fragments on base.config, by flavor name (`cbinder` is `cbinder.config`); later wins.
    fragments: Vec<String>,
    /// Symbols after the fragments, as a fragment's lines (`CONFIG_X=y`).
    #[serde(default)]
    config: Vec<String>,
    /// Series directories applied after [`DEFAULT_SERIES`], in order.
    #[serde(default)]
    series: Vec<String>,
}

/// A resolved flavor.
#[derive(Clone, Debug)]
pub struct Flavor {
    pub name: String,
    pub about: String,
    /// The merged configuration (base.config first).
    pub config: Fragment,
    /// Fragment files merged, for reports (`base.config`, `cbinder.config`, ...).
    pub fragment_files: Vec<String>,
    /// Every series applied, the default ones first.
    pub series: Vec<String>,
    /// The flavor whose O= directory a new one of this flavor starts as a copy of (a
    /// treatment's base: same config, a few more patches).
    pub seed: Option<String>,
}

impl Flavor {
    /// The series, loaded and checked (each `series` file and the patches it lists).
    pub fn stack(&self) -> Result<Vec<Series>> {
        self.series.iter().map(|d| Series::load(&paths::repo().join(d))).collect()
    }

    /// True when the flavor applies a series beyond the default ones.
    pub fn extra_series(&self) -> &[String] {
        &self.series[DEFAULT_SERIES.len()..]
    }
}

fn manifest(dir: &Path) -> Result<BTreeMap<String, Entry>> {
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        return Ok(BTreeMap::new());
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "kernel-config/{MANIFEST} is malformed: each [name] takes about = \"...\", fragments = [\"cbinder\"], \
             and optionally config = [\"CONFIG_X=y\"] and series = [\"c-reference\"]"
        )
    })
}

fn simple(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
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

/// Every flavor name: the one-fragment ones, then the composed ones.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v = simple(dir);
    v.extend(manifest(dir).map(|m| m.into_keys().collect::<Vec<_>>()).unwrap_or_default());
    v
}

pub fn names() -> Vec<String> {
    names_in(&paths::kernel_config_dir())
}

/// Resolves `name` from `dir` (kernel-config/), checking every fragment and series it names.
pub fn load_in(dir: &Path, repo: &Path, name: &str) -> Result<Flavor> {
    let base = Fragment::load(&dir.join("base.config"))?;
    let default: Vec<String> = DEFAULT_SERIES.iter().map(|s| s.to_string()).collect();
    let m = manifest(dir)?;
    let simple_names = simple(dir);
    if let Some(e) = m.get(name) {
        if simple_names.iter().any(|n| n == name) {
            bail!(
                "flavor {name:?} is both kernel-config/{name}.config and [{name}] in kernel-config/{MANIFEST}; \
                 rename one"
            );
        }
        let mut parts = vec![base];
        let mut files = vec!["base.config".to_string()];
        for f in &e.fragments {
            let path = dir.join(format!("{f}.config"));
            if !path.is_file() {
                bail!("kernel-config/{MANIFEST} [{name}]: fragment {f:?} has no kernel-config/{f}.config");
            }
            parts.push(Fragment::load(&path)?);
            files.push(format!("{f}.config"));
        }
        let origin = format!("kernel-config/{MANIFEST} [{name}]");
        parts.push(Fragment::parse(&e.config.join("\n"), &origin)?);
        let mut series = default;
        for s in &e.series {
            if !repo.join(s).join("series").is_file() {
                bail!("{origin}: series {s:?} has no {s}/series in the repository");
            }
            series.push(s.clone());
        }
        return Ok(Flavor {
            name: name.into(),
            about: e.about.clone(),
            config: Fragment::merge(&parts),
            fragment_files: files,
            series,
            seed: None,
        });
    }
    let path = dir.join(format!("{name}.config"));
    if let Some(instead) = retired(name).filter(|_| !path.is_file()) {
        bail!("kernel flavor {name:?} was removed; use {instead}");
    }
    if !path.is_file() {
        bail!(
            "unknown kernel flavor {name:?}; known: {} (kernel-config/<flavor>.config, or [<flavor>] in \
             kernel-config/{MANIFEST})",
            names_in(dir).join(", ")
        );
    }
    Ok(Flavor {
        name: name.into(),
        about: String::new(),
        config: Fragment::merge(&[base, Fragment::load(&path)?]),
        fragment_files: vec!["base.config".into(), format!("{name}.config")],
        series: default,
        seed: None,
    })
}

/// Resolves `name`: a flavor of kernel-config/, or a treatment of `lab ab` on one
/// (`perf+ab-<hash>`, see [`crate::kbuild::treatment`]).
pub fn load(name: &str) -> Result<Flavor> {
    if let Some((base, hash)) = split_treatment(name) {
        let base = load_in(&paths::kernel_config_dir(), &paths::repo(), base)?;
        return load_treatment(&paths::cache(), base, hash);
    }
    load_in(&paths::kernel_config_dir(), &paths::repo(), name)
}

/// What separates a treatment's base flavor from its hash in its name (`perf+ab-0123abcd4567`).
pub const TREATMENT_TAG: &str = "+ab-";
/// Where the treatments' series live, under the cache.
pub const TREATMENT_ROOT: &str = "ab/series";
/// Hex digits of the patches' hash in a treatment's name.
pub const TREATMENT_HASH_LEN: usize = 12;

/// `perf+ab-<hash>`: (base, hash), when `name` is a treatment's.
pub fn split_treatment(name: &str) -> Option<(&str, &str)> {
    let (base, h) = name.split_once(TREATMENT_TAG)?;
    (h.len() == TREATMENT_HASH_LEN && h.chars().all(|c| c.is_ascii_hexdigit())).then_some((base, h))
}

/// The treatment of `base` whose series is `<cache>/ab/series/<hash>`: the base's fragments
/// and stack plus that series, its O= directory seeded from the base's.
pub fn load_treatment(cache: &Path, base: Flavor, h: &str) -> Result<Flavor> {
    let dir = cache.join(TREATMENT_ROOT).join(h);
    if !dir.join("series").is_file() {
        bail!(
            "kernel flavor {}{TREATMENT_TAG}{h}: its patches are not in {} (pruned?); run `cargo make ab` with them again",
            base.name,
            dir.display()
        );
    }
    let mut f = base;
    f.seed = Some(f.name.clone());
    f.about = format!("{} with the patches of {}", f.name, dir.display());
    f.name = format!("{}{TREATMENT_TAG}{h}", f.name);
    f.series.push(dir.display().to_string());
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(manifest: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let kc = d.path().join("kernel-config");
        std::fs::create_dir_all(&kc).unwrap();
        std::fs::write(kc.join("base.config"), "CONFIG_A=y\n").unwrap();
        std::fs::write(kc.join("c.config"), "CONFIG_C=y\n").unwrap();
        std::fs::write(kc.join("dbg.config"), "CONFIG_D=y\nCONFIG_C=n\n").unwrap();
        std::fs::write(kc.join(MANIFEST), manifest).unwrap();
        for s in ["rust-driver", "android-sched", "extra"] {
            std::fs::create_dir_all(d.path().join(s)).unwrap();
            std::fs::write(d.path().join(s).join("series"), "").unwrap();
        }
        d
    }

    #[test]
    fn composed_flavor_merges_fragments_inline_symbols_and_series() {
        let d = fixture(
            "[c-x]\nabout = \"c with extra\"\nfragments = [\"c\", \"dbg\"]\nconfig = [\"CONFIG_K=y\", \"CONFIG_D=n\"]\nseries = [\"extra\"]\n",
        );
        let kc = d.path().join("kernel-config");
        assert_eq!(names_in(&kc), ["c", "dbg", "c-x"]);
        let f = load_in(&kc, d.path(), "c-x").unwrap();
        assert_eq!(f.config.render(), "CONFIG_A=y\n# CONFIG_C is not set\n# CONFIG_D is not set\nCONFIG_K=y\n");
        assert_eq!(f.config.origin["CONFIG_D"], "kernel-config/flavors.toml [c-x]");
        assert_eq!(f.series, ["android-sched", "rust-driver", "extra"]);
        assert_eq!(f.extra_series(), ["extra"]);
        assert_eq!(f.fragment_files, ["base.config", "c.config", "dbg.config"]);
        let plain = load_in(&kc, d.path(), "c").unwrap();
        assert_eq!(plain.series, DEFAULT_SERIES);
        assert!(plain.extra_series().is_empty());
    }

    #[test]
    fn bad_manifests_name_the_problem() {
        let d = fixture("[x]\nabout = \"\"\nfragments = [\"nope\"]\n");
        let kc = d.path().join("kernel-config");
        let e = load_in(&kc, d.path(), "x").unwrap_err().to_string();
        assert!(e.contains("[x]") && e.contains("kernel-config/nope.config"), "{e}");
        let d = fixture("[x]\nabout = \"\"\nfragments = []\nseries = [\"missing\"]\n");
        let e = load_in(&d.path().join("kernel-config"), d.path(), "x").unwrap_err().to_string();
        assert!(e.contains("missing/series"), "{e}");
        let d = fixture("[c]\nabout = \"\"\nfragments = []\n");
        let e = load_in(&d.path().join("kernel-config"), d.path(), "c").unwrap_err().to_string();
        assert!(e.contains("both kernel-config/c.config"), "{e}");
        let d = fixture("[x]\nfragment = [\"c\"]\n");
        let e = format!("{:#}", load_in(&d.path().join("kernel-config"), d.path(), "x").unwrap_err());
        assert!(e.contains("flavors.toml is malformed"), "{e}");
        let d = fixture("");
        let e = load_in(&d.path().join("kernel-config"), d.path(), "zz").unwrap_err().to_string();
        assert!(e.contains("unknown kernel flavor \"zz\""), "{e}");
        let e = load_in(&d.path().join("kernel-config"), d.path(), "phone").unwrap_err().to_string();
        assert!(e.contains("\"phone\" was removed") && e.contains("--policy phone"), "{e}");
    }

    #[test]
    fn shipped_flavors_resolve() {
        for n in names() {
            let f = load(&n).unwrap();
            f.stack().unwrap();
        }
        // Every kernel carries the phone's scheduler switches (off until a policy sets them).
        assert_eq!(load("perf").unwrap().series, ["android-sched", "rust-driver"]);
        let spin = load("cbinder-spin").unwrap();
        assert_eq!(spin.series, ["android-sched", "rust-driver", "c-reference"]);
        assert_eq!(spin.config.render(), load("cbinder").unwrap().config.render());
        let dbg = load("cbinder-spin-debug").unwrap();
        assert_eq!(dbg.config.values["CONFIG_ANDROID_BINDER_IPC"], "y");
        assert_eq!(dbg.config.values["CONFIG_KASAN"], "y");
        assert_eq!(dbg.series, ["android-sched", "rust-driver", "kbuild-fixes", "c-reference"]);
    }
}
