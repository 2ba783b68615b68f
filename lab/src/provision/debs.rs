//! `--deb PKG,...`: Debian arm64 packages and their dependencies, unpacked into an overlay
//! for the initramfs, with the dynamic loader and the libraries they link against.
//!
//! Packages come from Debian **trixie** and **trixie-backports** through a private apt whose
//! sources, lists and cache live under the lab cache (the host's apt is never touched).
//! trixie because it is the release the kernel source already comes from (linux-source-7.2
//! from trixie-backports) and a fixed, signed suite, so an overlay's package set changes only
//! with security updates; trixie-backports for what only it has (libgbinder, newer perf):
//! apt takes a package from there when trixie lacks it, or when asked `PKG/trixie-backports`.
//! Not the host's release: the guest's userland needs nothing from the host.
//!
//! Resolution is apt's (`install --print-uris` against an empty dpkg status: the whole
//! dependency closure, without recommends). The overlay is keyed by the exact .deb files, so
//! the same closure is unpacked once per machine. Maintainer scripts are not run: a package
//! whose scripts do something the guest needs (alternatives, users, capabilities) is refused
//! by name; scripts that only matter on a real system (ldconfig, byte-compiling, services)
//! are skipped and listed in the overlay's manifest.

use crate::provision::apt::PrivateApt;
use crate::support::fs::{sha256_hex, write_atomic};
use crate::support::progress;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The suites `--deb` resolves against (see the module documentation for why).
pub const SUITES: &[&str] = &["trixie", "trixie-backports"];
/// Bumped when the unpacking changes, so old overlays are not reused.
const FORMAT: &str = "debs-v2";
/// Lists older than this are refreshed before resolving.
const LISTS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// What maintainer scripts do that an unpacked package then lacks: (needle, what it makes).
const NEEDED_SCRIPT_ACTIONS: &[(&str, &str)] = &[
    ("update-alternatives --install", "an alternatives symlink"),
    ("adduser", "a system user or group"),
    ("useradd", "a system user"),
    ("addgroup", "a system group"),
    ("groupadd", "a system group"),
    ("setcap", "file capabilities"),
    ("dpkg-statoverride --update", "file ownership or modes"),
];
/// Packages whose scripts the check above would refuse, but whose work the guest does not
/// need: (package, why).
const SCRIPTS_NOT_NEEDED: &[(&str, &str)] = &[];

/// An unpacked package set.
#[derive(Clone, Debug)]
pub struct DebOverlay {
    /// The overlay root (add it to the initramfs).
    pub root: PathBuf,
    /// The .deb files in it.
    pub debs: Vec<String>,
    /// Unpacked bytes.
    pub bytes: u64,
}

/// The private apt of `--deb`: arm64 as the native architecture, trixie and trixie-backports.
pub fn guest_apt(cache: &Path) -> PrivateApt {
    const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
    let sources: String = SUITES
        .iter()
        .map(|s| format!("deb [arch=arm64 signed-by={KEYRING}] http://deb.debian.org/debian {s} main\n"))
        .collect();
    PrivateApt::with_sources(&cache.join("apt/guest-arm64"), sources, "arm64")
}

/// Checks `--deb` names: Debian package names, optionally `/suite` or `=version`.
pub fn check_names(pkgs: &[String]) -> Result<()> {
    for p in pkgs {
        let name = p.split(['/', '=']).next().unwrap_or("");
        let ok = name.len() >= 2
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !ok {
            bail!("--deb {p:?}: not a Debian package name (lowercase letters, digits, + - .), e.g. --deb strace,gdbserver");
        }
        if let Some((_, suite)) = p.split_once('/') {
            if !SUITES.contains(&suite) {
                bail!("--deb {p:?}: the lab's guest apt serves {}; pick one of them", SUITES.join(" and "));
            }
        }
    }
    Ok(())
}

/// One .deb of a resolved closure, from `apt-get install --print-uris`.
#[derive(Clone, Debug, PartialEq)]
pub struct Uri {
    pub url: String,
    /// The file name apt stores it under in its archives directory.
    pub file: String,
    pub size: u64,
}

/// Parses `apt-get -qq --print-uris install` output: `'URL' FILE SIZE HASH` per line.
pub fn parse_print_uris(text: &str) -> Vec<Uri> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let url = f.next()?.trim_matches('\'').to_string();
            let file = f.next()?.to_string();
            let size = f.next()?.parse().ok()?;
            file.ends_with(".deb").then_some(Uri { url, file, size })
        })
        .collect()
}

/// apt's reason for not resolving, as an error that names the package and the fix.
pub fn resolve_error(pkgs: &[String], stderr: &str) -> String {
    for l in stderr.lines() {
        if let Some(p) = l.strip_prefix("E: Unable to locate package ") {
            return format!(
                "--deb {p}: no arm64 package {p:?} in Debian {} (look it up: https://packages.debian.org/search?keywords={p}&searchon=names&suite=trixie&arch=arm64)",
                SUITES.join(" or ")
            );
        }
        if l.contains("has no installation candidate") || l.contains("is a virtual package") {
            return format!("--deb: {l}; name a real package that provides it");
        }
        if let Some(rest) = l.strip_prefix("E: Release '") {
            return format!("--deb: {rest}");
        }
    }
    format!(
        "--deb {}: apt could not resolve the packages against Debian {}:\n{}",
        pkgs.join(","),
        SUITES.join(" and "),
        stderr.trim()
    )
}

/// What a maintainer script of `pkg` does that an unpacked package lacks, if anything.
pub fn needed_script_action(pkg: &str, script: &str) -> Option<&'static str> {
    if SCRIPTS_NOT_NEEDED.iter().any(|(p, _)| *p == pkg) {
        return None;
    }
    script
        .lines()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| NEEDED_SCRIPT_ACTIONS.iter().find(|(needle, _)| l.contains(needle)).map(|(_, what)| *what))
}

/// The overlay with `pkgs` and their dependencies (resolved, downloaded and unpacked once per
/// closure, then reused).
pub fn overlay(cache: &Path, pkgs: &[String]) -> Result<DebOverlay> {
    check_names(pkgs)?;
    let apt = guest_apt(cache);
    // --offline resolves against the lists there are: a cached closure needs no mirror.
    if !crate::support::artifact::offline() && apt.lists_age().is_none_or(|age| age > LISTS_MAX_AGE) {
        apt.update()?;
    }
    let uris = resolve(&apt, pkgs)?;
    let mut files: Vec<&str> = uris.iter().map(|u| u.file.as_str()).collect();
    files.sort();
    let key = sha256_hex(format!("{FORMAT}\n{}\n{}", SUITES.join(" "), files.join("\n")).as_bytes());
    let dir = cache.join("debs").join(&key[..16]);
    let root = dir.join("root");
    let manifest = dir.join("manifest.json");
    if manifest.is_file() {
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest)?)?;
        progress::note(format!("--deb {}: {} packages, cached in {}", pkgs.join(","), uris.len(), dir.display()));
        return Ok(DebOverlay {
            root,
            debs: files.iter().map(|f| f.to_string()).collect(),
            bytes: m["bytes"].as_u64().unwrap_or(0),
        });
    }
    progress::note(format!(
        "--deb {}: {} packages ({:.1} MB of .debs) from Debian {}",
        pkgs.join(","),
        uris.len(),
        uris.iter().map(|u| u.size).sum::<u64>() as f64 / 1e6,
        SUITES.join(" + ")
    ));
    let debs = apt.download_closure(pkgs)?;
    let staging = cache.join("debs").join(format!(".{}-{}", &key[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let sroot = staging.join("root");
    std::fs::create_dir_all(&sroot)?;
    let mut skipped = vec![];
    for u in &uris {
        let deb = debs.join(&u.file);
        let pkg = u.file.split('_').next().unwrap_or(&u.file).to_string();
        // Only the packages asked for are held to it: a dependency's alternatives or users
        // (tar's rmt, say) are not what the tool runs through.
        let asked = pkgs.iter().any(|p| p.split(['/', '=']).next() == Some(pkg.as_str()));
        for (script, text) in maintainer_scripts(&deb, &staging.join("control").join(&pkg))? {
            if let Some(what) = needed_script_action(&pkg, &text).filter(|_| asked) {
                bail!(
                    "--deb {pkg}: the package ({}) needs its {script} maintainer script to work: it creates {what}, \
                     and --deb only unpacks packages. Add what it makes with --overlay, or use another package.",
                    u.file
                );
            }
            skipped.push(format!("{pkg} {script}"));
        }
        let st = Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&sroot).status().context("running dpkg-deb")?;
        if !st.success() {
            bail!("dpkg-deb -x {} failed ({st})", deb.display());
        }
    }
    merge_usr(&sroot)?;
    // Documentation is most of some packages and nothing the guest reads; glibc's iconv
    // modules are 20 of libc6's 24 MB and only iconv(3) to other charsets loads them.
    for d in [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "usr/share/lintian",
        "usr/lib/aarch64-linux-gnu/gconv",
    ] {
        let _ = std::fs::remove_dir_all(sroot.join(d));
    }
    let _ = std::fs::remove_dir_all(staging.join("control"));
    let bytes = dir_bytes(&sroot);
    let m = serde_json::json!({
        "packages": pkgs,
        "suites": SUITES,
        "debs": files,
        "bytes": bytes,
        "skipped_maintainer_scripts": skipped,
    });
    write_atomic(&staging.join("manifest.json"), serde_json::to_string_pretty(&m)?.as_bytes())?;
    std::fs::create_dir_all(dir.parent().expect("under the cache"))?;
    // Another process may have published the same closure meanwhile: theirs is as good.
    if std::fs::rename(&staging, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
        if !manifest.is_file() {
            bail!("cannot publish the --deb overlay at {}", dir.display());
        }
    }
    progress::note(format!("--deb overlay: {:.1} MB unpacked in {}", bytes as f64 / 1e6, dir.display()));
    Ok(DebOverlay { root, debs: files.iter().map(|f| f.to_string()).collect(), bytes })
}

fn resolve(apt: &PrivateApt, pkgs: &[String]) -> Result<Vec<Uri>> {
    let out = apt.print_uris(&[&["--no-install-recommends"][..], &as_strs(pkgs)].concat())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.lines().any(|l| l.starts_with("E: ")) {
        bail!("{}", resolve_error(pkgs, &stderr));
    }
    let uris = parse_print_uris(&String::from_utf8_lossy(&out.stdout));
    if uris.is_empty() {
        bail!("--deb {}: apt resolved nothing to download", pkgs.join(","));
    }
    Ok(uris)
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// (name, text) of the preinst and postinst of `deb`, extracted into `scratch`.
fn maintainer_scripts(deb: &Path, scratch: &Path) -> Result<Vec<(String, String)>> {
    std::fs::create_dir_all(scratch)?;
    let st = Command::new("dpkg-deb").arg("-e").arg(deb).arg(scratch).status().context("running dpkg-deb")?;
    if !st.success() {
        bail!("dpkg-deb -e {} failed ({st})", deb.display());
    }
    let mut out = vec![];
    for s in ["preinst", "postinst"] {
        if let Ok(text) = std::fs::read_to_string(scratch.join(s)) {
            out.push((s.to_string(), text));
        }
    }
    Ok(out)
}

/// Debian's merged /usr: /lib is usr/lib (the loader's path, /lib/ld-linux-aarch64.so.1,
/// goes through it); what a package still ships in /bin, /sbin or /lib moves under usr/,
/// where it does not meet the initramfs's busybox /bin.
fn merge_usr(root: &Path) -> Result<()> {
    for (top, usr) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")] {
        let from = root.join(top);
        if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_dir()) {
            move_tree(&from, &root.join(usr))?;
            std::fs::remove_dir_all(&from)?;
        }
    }
    std::fs::create_dir_all(root.join("usr/lib"))?;
    if std::fs::symlink_metadata(root.join("lib")).is_err() {
        std::os::unix::fs::symlink("usr/lib", root.join("lib"))?;
    }
    Ok(())
}

fn move_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() && dest.is_dir() {
            move_tree(&e.path(), &dest)?;
        } else {
            std::fs::rename(e.path(), &dest)?;
        }
    }
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        check_names(&["strace".into(), "libstdc++6".into(), "linux-perf/trixie-backports".into()]).unwrap();
        let e = check_names(&["Strace".into()]).unwrap_err().to_string();
        assert!(e.contains("--deb \"Strace\": not a Debian package name"), "{e}");
        let e = check_names(&["perf/sid".into()]).unwrap_err().to_string();
        assert!(e.contains("serves trixie and trixie-backports"), "{e}");
    }

    // Recorded from `apt-get -qq --print-uris --no-install-recommends install strace gdbserver`.
    #[test]
    fn print_uris_parse() {
        let text = "'http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.41-12%2bdeb13u5_arm64.deb' libc6_2.41-12+deb13u5_arm64.deb 2488872 MD5Sum:1e84f6e2cba8aca38cc0c64689710562\n\
                    'http://deb.debian.org/debian/pool/main/s/strace/strace_6.13%2bds-1_arm64.deb' strace_6.13+ds-1_arm64.deb 1295248 MD5Sum:b4da37caf9ccc91b7284a3023747ed87\n";
        let u = parse_print_uris(text);
        assert_eq!(u.len(), 2);
        assert_eq!(u[1].file, "strace_6.13+ds-1_arm64.deb");
        assert_eq!(u[0].size, 2488872);
        assert!(u[0].url.starts_with("http://deb.debian.org/debian/pool/main/g/glibc/"));
    }

    #[test]
    fn resolve_errors_name_the_package() {
        let pkgs = vec!["strace".to_string(), "no-such-tool".to_string()];
        let e = resolve_error(&pkgs, "E: Unable to locate package no-such-tool\n");
        assert!(
            e.starts_with("--deb no-such-tool: no arm64 package \"no-such-tool\" in Debian trixie or trixie-backports"),
            "{e}"
        );
        let e = resolve_error(&pkgs, "E: Package 'awk' has no installation candidate\n");
        assert!(e.contains("'awk' has no installation candidate; name a real package"), "{e}");
    }

    #[test]
    fn scripts_that_matter() {
        let alt = "#!/bin/sh\nset -e\nupdate-alternatives --install /usr/bin/awk awk /usr/bin/mawk 5\n";
        assert_eq!(needed_script_action("mawk", alt), Some("an alternatives symlink"));
        let ldconfig =
            "#!/bin/sh\nset -e\n# Automatically added by dh_makeshlibs\nif [ \"$1\" = configure ]; then ldconfig; fi\n";
        assert_eq!(needed_script_action("libfoo1", ldconfig), None);
        let py = "#!/bin/sh\nset -e\nif which py3compile >/dev/null 2>&1; then py3compile -p python3-foo; fi\n";
        assert_eq!(needed_script_action("python3-foo", py), None);
        let user = "#!/bin/sh\nadduser --system --group foo\n";
        assert_eq!(needed_script_action("food", user), Some("a system user or group"));
        // A comment that mentions it is not the action.
        assert_eq!(needed_script_action("x", "# adduser is not used here\ntrue\n"), None);
    }

    #[test]
    fn usr_is_merged() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("bin")).unwrap();
        std::fs::create_dir_all(r.join("lib/aarch64-linux-gnu")).unwrap();
        std::fs::create_dir_all(r.join("usr/lib/aarch64-linux-gnu")).unwrap();
        std::fs::write(r.join("bin/tool"), "t").unwrap();
        std::fs::write(r.join("lib/aarch64-linux-gnu/libold.so.1"), "o").unwrap();
        std::fs::write(r.join("usr/lib/ld-linux-aarch64.so.1"), "ld").unwrap();
        merge_usr(r).unwrap();
        assert_eq!(std::fs::read_to_string(r.join("usr/bin/tool")).unwrap(), "t");
        assert!(!r.join("bin").exists());
        assert_eq!(std::fs::read_link(r.join("lib")).unwrap(), Path::new("usr/lib"));
        assert_eq!(std::fs::read_to_string(r.join("lib/ld-linux-aarch64.so.1")).unwrap(), "ld");
        assert_eq!(std::fs::read_to_string(r.join("usr/lib/aarch64-linux-gnu/libold.so.1")).unwrap(), "o");
    }
}

#[cfg(test)]
mod live_tests {
    /// Resolves, downloads and unpacks strace into the machine's lab cache (run by hand:
    /// `--ignored`; needs the Debian mirror).
    #[test]
    #[ignore = "downloads from the Debian mirror into the machine's lab cache"]
    fn strace_overlay() {
        let o = super::overlay(&crate::support::paths::cache(), &["strace".into()]).unwrap();
        assert!(o.root.join("usr/bin/strace").is_file());
        assert!(o.root.join("lib/ld-linux-aarch64.so.1").exists());
        let e = super::overlay(&crate::support::paths::cache(), &["no-such-tool-x".into()]).unwrap_err().to_string();
        assert!(e.starts_with("--deb no-such-tool-x: no arm64 package"), "{e}");
    }
}
