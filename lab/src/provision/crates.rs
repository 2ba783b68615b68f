//! Registry crates in the guest: a plan's `crates = ["rsbinder-tools@0.12.0"]`. cargo fetches
//! the crate (and checks it against the registry's checksum), the lab builds its executables
//! static for aarch64 exactly as it builds its own guest programs (`guest-build`), and keeps
//! them as an overlay (`root/bin/NAME`) in the cache under a key of the crates asked for, so a plan
//! made of registry packages needs nothing built by hand.

use crate::support::artifact;
use crate::support::fs::{publish_dir, sha256_hex};
use crate::support::progress;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bump when what goes into an overlay changes in a way the crate list does not show.
const FORMAT: &str = "lab-crates-v1";

/// One crate at one exact version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CrateSpec {
    pub name: String,
    pub version: String,
}

impl CrateSpec {
    /// `NAME@VERSION` with an exact version: a plan names what it ran, and a range would let
    /// the registry change the guest under the same plan.
    pub fn parse(s: &str) -> Result<CrateSpec> {
        let hint = "give NAME@VERSION with an exact version, e.g. crates = [\"rsbinder-tools@0.12.0\"]";
        let Some((name, version)) = s.split_once('@') else { bail!("crates: {s:?}: no version; {hint}") };
        let name_ok = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && name.starts_with(|c: char| c.is_ascii_alphabetic());
        if !name_ok {
            bail!("crates: {s:?}: {name:?} is not a crate name; {hint}");
        }
        let mut parts = version.split(['-', '+']).next().unwrap_or("").split('.');
        let exact = (0..3)
            .all(|_| parts.next().is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
            && parts.next().is_none();
        if !exact {
            bail!("crates: {s:?}: {version:?} is not an exact version (MAJOR.MINOR.PATCH); {hint}");
        }
        Ok(CrateSpec { name: name.into(), version: version.into() })
    }
}

impl std::fmt::Display for CrateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// The overlay with the executables of `specs` (built on first use, then from the cache).
pub fn overlay(cache: &Path, specs: &[String]) -> Result<PathBuf> {
    let mut crates = specs.iter().map(|s| CrateSpec::parse(s)).collect::<Result<Vec<_>>>()?;
    crates.sort();
    crates.dedup();
    let list: Vec<String> = crates.iter().map(ToString::to_string).collect();
    let key = sha256_hex(format!("{FORMAT}\n{}", list.join("\n")).as_bytes());
    let dir = cache.join("crates").join(&key[..16]);
    if matches!(artifact::check(&dir, artifact::Depth::Quick), artifact::State::Good) {
        progress::note(format!("crates {}: cached in {}", list.join(", "), dir.display()));
        return Ok(dir.join("root"));
    }
    std::fs::create_dir_all(cache.join("crates"))?;
    progress::note(format!(
        "crates {}: fetching and building for the guest (a few minutes the first time)",
        list.join(", ")
    ));
    // The sources and their target dirs stay in the cache: a second overlay with one of the
    // same crates rebuilds only what changed.
    let work = cache.join("crates/src");
    publish_dir(&dir, |tmp| {
        let bin = tmp.join("root/bin");
        std::fs::create_dir_all(&bin)?;
        for c in &crates {
            let src = fetch(c, &work)?;
            let exes = rootfs::build_user_crate(&src).with_context(|| format!("crates: building {c} for the guest"))?;
            for e in exes {
                let name = e.file_name().context("an executable has a name")?;
                std::fs::copy(&e, bin.join(name))?;
            }
        }
        artifact::seal(tmp)?;
        Ok(())
    })?;
    Ok(dir.join("root"))
}

/// The crate's source, fetched by cargo through a throwaway manifest that depends on it, and
/// copied out of cargo's registry into `work/NAME-VERSION` (a build writes next to it).
fn fetch(c: &CrateSpec, work: &Path) -> Result<PathBuf> {
    let dest = work.join(format!("{}-{}", c.name, c.version));
    if dest.join("Cargo.toml").is_file() {
        return Ok(dest);
    }
    let probe = tempfile::tempdir()?;
    std::fs::create_dir_all(probe.path().join("src"))?;
    std::fs::write(probe.path().join("src/lib.rs"), "")?;
    std::fs::write(
        probe.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"lab-crate-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{} = \"={}\"\n\n[workspace]\n",
            c.name, c.version
        ),
    )?;
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(probe.path().join("Cargo.toml"))
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "crates: {c}: cargo could not fetch it (is the name and version on crates.io?):\n{}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("reading cargo metadata")?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == c.name.as_str() && p["version"] == c.version.as_str())
        .and_then(|p| p["manifest_path"].as_str())
        .with_context(|| format!("crates: {c}: not among the packages cargo resolved"))?;
    let src = Path::new(manifest).parent().context("a manifest has a directory")?;
    let staging = work.join(format!(".{}-{}-{}", c.name, c.version, std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(work)?;
    let st = Command::new("cp").arg("-r").arg(src).arg(&staging).status().context("running cp")?;
    if !st.success() {
        bail!("copying {} to {} failed ({st})", src.display(), staging.display());
    }
    std::fs::rename(&staging, &dest).with_context(|| format!("publishing {}", dest.display()))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_need_a_name_and_an_exact_version() {
        let s = CrateSpec::parse("rsbinder-tools@0.12.0").unwrap();
        assert_eq!((s.name.as_str(), s.version.as_str()), ("rsbinder-tools", "0.12.0"));
        assert_eq!(s.to_string(), "rsbinder-tools@0.12.0");
        assert!(CrateSpec::parse("x@1.0.0-rc.1").is_ok());
        for (bad, why) in [
            ("rsbinder-tools", "no version"),
            ("rsbinder-tools@0.12", "not an exact version"),
            ("rsbinder-tools@^0.12.0", "not an exact version"),
            ("rsbinder-tools@*", "not an exact version"),
            ("../x@1.0.0", "not a crate name"),
            ("@1.0.0", "not a crate name"),
        ] {
            let e = CrateSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("rsbinder-tools@0.12.0\"]"), "{bad}: {e}");
        }
    }
}
