//! apt, two ways:
//! - the host's own apt, for system packages from the host's release and its backports;
//! - a private apt (sources, lists and cache under the lab cache) that only *downloads*
//!   arch-all sources (kernel, rust-src) from trixie-backports/sid and the guest's arm64
//!   busybox. The host's sources and preferences are never written.

use crate::support::fs::write_atomic;
use crate::support::process::{have_tool, output, sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use xshell::cmd;

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const MIRROR: &str = "http://deb.debian.org/debian";

/// `VERSION_CODENAME` from os-release, e.g. `bookworm`; None off Debian.
pub fn host_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    let is_debian = text.lines().any(|l| l == "ID=debian");
    if !is_debian {
        return None;
    }
    text.lines().find_map(|l| l.strip_prefix("VERSION_CODENAME=")).map(|s| s.trim_matches('"').to_string())
}

/// Installed versions of the given Debian packages (absent ones are left out), in one
/// dpkg-query call.
pub fn installed_versions(pkgs: &[&str]) -> std::collections::HashMap<String, String> {
    let sh = sh();
    let format = "-f=${Package}\t${Status}\t${Version}\n";
    let Ok(out) = Command::from(cmd!(sh, "dpkg-query -W {format} {pkgs...}")).output() else {
        return Default::default();
    };
    parse_dpkg_query(&String::from_utf8_lossy(&out.stdout))
}

fn parse_dpkg_query(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (name, status, ver) = (f.next()?, f.next()?, f.next()?);
            // Multi-arch packages print as name:arch only when asked; strip it anyway.
            let name = name.split(':').next()?;
            (status.ends_with(" installed") && !ver.is_empty()).then(|| (name.to_string(), ver.to_string()))
        })
        .collect()
}

/// `dpkg --compare-versions a ge b`.
pub fn version_ge(a: &str, b: &str) -> bool {
    let sh = sh();
    Command::from(cmd!(sh, "dpkg --compare-versions {a} ge {b}")).status().map(|s| s.success()).unwrap_or(false)
}

/// How to become root for apt: `Some([])` as root, `Some(["sudo"])` with passwordless sudo.
fn root_prefix() -> Option<Vec<String>> {
    let uid = output(Command::new("id").arg("-u")).ok()?;
    if uid.trim() == "0" {
        return Some(vec![]);
    }
    let sudo_ok = Command::new("sudo").args(["-n", "true"]).status().map(|s| s.success()).unwrap_or(false);
    sudo_ok.then(|| vec!["sudo".to_string()])
}

/// One `apt-get install` of `pkgs`, optionally from the host release's backports. Backports
/// are added for this one command through a private sources list that *includes* the host's
/// sources; /etc/apt is not touched.
pub fn host_install(pkgs: &[String], backports: Option<&str>, cache: &Path) -> Result<()> {
    if pkgs.is_empty() {
        return Ok(());
    }
    let mut extra: Vec<String> = vec![];
    if let Some(codename) = backports {
        let list = cache.join("apt/host-plus-backports.list");
        let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
        text.push_str(&format!("\ndeb [signed-by={KEYRING}] {MIRROR} {codename}-backports main\n"));
        write_atomic(&list, text.as_bytes())?;
        extra = vec!["-o".into(), format!("Dir::Etc::SourceList={}", list.display())];
    }
    let mut install: Vec<String> = extra.clone();
    install.extend(["install", "-y", "--no-install-recommends"].map(String::from));
    // Packages named `pkg/<codename>-backports` pick that one package from backports; a
    // plain list takes all of them from there.
    let per_package = pkgs.iter().any(|p| p.contains('/'));
    if let Some(codename) = backports.filter(|_| !per_package) {
        install.extend(["-t".into(), format!("{codename}-backports")]);
    }
    install.extend(pkgs.iter().cloned());
    let mut update = extra;
    update.push("update".into());
    let Some(prefix) = root_prefix().filter(|_| host_codename().is_some()) else {
        bail!(
            "missing system packages: {}\nThe lab can't install them here (not root, no passwordless sudo, or not Debian). Run:\n  sudo apt-get {}\n  sudo apt-get {}",
            pkgs.join(" "),
            update.join(" "),
            install.join(" ")
        );
    };
    for args in [update, install] {
        crate::support::progress::note(format!("apt-get {}", args.join(" ")));
        let mut argv = prefix.clone();
        argv.push("apt-get".into());
        argv.extend(args);
        let (sh, program, rest) = (sh(), &argv[0], &argv[1..]);
        let st = Command::from(cmd!(sh, "{program} {rest...}").env("DEBIAN_FRONTEND", "noninteractive"))
            .status()
            .context("running apt-get")?;
        if !st.success() {
            bail!("`{}` failed ({st}); see its output above", argv.join(" "));
        }
    }
    Ok(())
}

/// A download-only apt whose whole state lives in `root`.
pub struct PrivateApt {
    root: PathBuf,
    /// Its sources.list; None for the default (kernel, rust-src and busybox) sources.
    sources: Option<String>,
    /// apt's native architecture: plain package names mean this one.
    arch: &'static str,
}

/// One version of a package as the private apt sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PkgVersion {
    pub version: String,
    pub sha256: String,
    pub filename: String,
}

impl PrivateApt {
    pub fn new(cache: &Path) -> PrivateApt {
        PrivateApt { root: cache.join("apt/private"), sources: None, arch: "amd64" }
    }

    /// A private apt with only a `deb-src` line for `suite`, to fetch one source package's
    /// files. Its lists live apart from the default private apt's.
    pub fn sources_of(cache: &Path, suite: &str) -> PrivateApt {
        let sources = format!("deb-src [signed-by={KEYRING}] {MIRROR} {suite} main\n");
        PrivateApt { root: cache.join("apt").join(format!("src-{suite}")), sources: Some(sources), arch: "amd64" }
    }

    /// A private apt in `root` with these sources, resolving for `arch` (the guest's arm64).
    pub fn with_sources(root: &Path, sources: String, arch: &'static str) -> PrivateApt {
        PrivateApt { root: root.to_path_buf(), sources: Some(sources), arch }
    }

    /// How long ago the lists were refreshed; None before the first `update`.
    pub fn lists_age(&self) -> Option<std::time::Duration> {
        let lists = std::fs::read_dir(self.root.join("state/lists")).ok()?;
        let newest = lists
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("_Packages"))
            .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
            .max()?;
        // The sources changed since: as good as no lists.
        let sources = std::fs::read_to_string(self.root.join("sources.list")).unwrap_or_default();
        (sources == self.sources()).then(|| newest.elapsed().unwrap_or_default())
    }

    /// `apt-get --print-uris install ARGS` with this apt's options: every .deb of the closure
    /// (against an empty archive directory, since apt leaves out what it already has); its
    /// output, whatever the status.
    pub fn print_uris(&self, args: &[&str]) -> Result<std::process::Output> {
        let empty = self.root.join("cache/none");
        std::fs::create_dir_all(empty.join("partial"))?;
        Command::new("apt-get")
            .args(self.opts())
            .arg("-o")
            .arg(format!("Dir::Cache::archives={}", empty.display()))
            .args(["-qq", "--print-uris", "install"])
            .args(args)
            .output()
            .context("running apt-get")
    }

    /// Downloads `pkgs` and their dependencies (no recommends) into this apt's archive
    /// directory, which it returns; apt checks every file against the signed index.
    pub fn download_closure(&self, pkgs: &[String]) -> Result<PathBuf> {
        let _turn = self.turn()?;
        let st = Command::new("apt-get")
            .args(self.opts())
            .args(["-q", "-y", "--download-only", "--no-install-recommends", "install"])
            .args(pkgs)
            .stdout(std::io::stderr())
            .status()
            .context("running apt-get")?;
        if !st.success() {
            bail!(
                "private `apt-get --download-only install {}` failed ({st}); is the Debian mirror reachable?",
                pkgs.join(" ")
            );
        }
        Ok(self.root.join("cache/archives"))
    }

    fn sources(&self) -> String {
        if let Some(s) = &self.sources {
            return s.clone();
        }
        let host = host_codename().unwrap_or_else(|| "stable".into());
        // Arch-all sources come from trixie-backports (which keeps older versions) and sid;
        // arm64 lines are only for the guest's static busybox from the host's release.
        format!(
            "deb [arch=amd64 signed-by={KEYRING}] {MIRROR} trixie-backports main\n\
             deb [arch=amd64 signed-by={KEYRING}] {MIRROR} sid main\n\
             deb [arch=arm64 signed-by={KEYRING}] {MIRROR} {host} main\n"
        )
    }

    /// Holds this apt's turn until dropped. apt-get does not wait for its locks (the lists',
    /// the archives', dpkg's frontend lock): two lab processes, or two tests of one, using
    /// one private apt at once (on a new machine, where nothing is cached yet) failed the
    /// second with "Could not get lock". They take turns here.
    fn turn(&self) -> Result<std::fs::File> {
        // The empty status file, beside which apt takes dpkg's locks (see opts).
        std::fs::create_dir_all(self.root.join("dpkg"))?;
        let status = self.root.join("dpkg/status");
        if !status.is_file() {
            write_atomic(&status, b"")?;
        }
        let path = self.root.join("apt.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        lock.lock().with_context(|| format!("cannot lock {}", path.display()))?;
        Ok(lock)
    }

    fn opts(&self) -> Vec<String> {
        let r = self.root.display();
        [
            format!("Dir::Etc::SourceList={r}/sources.list"),
            format!("Dir::Etc::SourceParts={r}/sources.list.d"),
            format!("Dir::Etc::Preferences={r}/preferences"),
            format!("Dir::Etc::PreferencesParts={r}/preferences.d"),
            format!("Dir::State={r}/state"),
            format!("Dir::Cache={r}/cache"),
            // No package is installed here. apt takes dpkg's locks beside the status file:
            // with /dev/null it took /dev/lock-frontend, one lock for every private apt.
            format!("Dir::State::status={r}/dpkg/status"),
            format!("APT::Architecture={}", self.arch),
            "APT::Architectures::=amd64".into(),
            "APT::Architectures::=arm64".into(),
            "Acquire::Languages=none".into(),
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
            // Downloads land in our cache, which apt's sandbox user may not be able to write.
            "APT::Sandbox::User=root".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn prepare(&self) -> Result<()> {
        if !have_tool("apt-get") {
            bail!("apt-get not found: the lab downloads Debian's linux-source and rust-src packages with apt; run it on Debian or Ubuntu");
        }
        for d in ["sources.list.d", "preferences.d", "state/lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(self.root.join(d))?;
        }
        write_atomic(&self.root.join("sources.list"), self.sources().as_bytes())
    }

    /// Refreshes the package lists (a few seconds).
    pub fn update(&self) -> Result<()> {
        self.prepare()?;
        let _turn = self.turn()?;
        crate::support::progress::note(format!("refreshing private apt lists in {}", self.root.display()));
        let (sh, opts) = (sh(), self.opts());
        // Progress on stderr: `lab run -- CMD` keeps stdout for the guest command's output.
        let st = Command::from(cmd!(sh, "apt-get {opts...} -q update")).stdout(std::io::stderr()).status()?;
        if !st.success() {
            bail!("private `apt-get update` failed ({st}); is the Debian mirror reachable?");
        }
        Ok(())
    }

    /// Every version of `pkg` the private sources serve, newest first.
    pub fn versions(&self, pkg: &str) -> Result<Vec<PkgVersion>> {
        let (sh, opts) = (sh(), self.opts());
        let out = Command::from(cmd!(sh, "apt-cache {opts...} show {pkg}")).output()?;
        let mut v = parse_show(&String::from_utf8_lossy(&out.stdout));
        v.sort_by(|a, b| {
            if a.version == b.version {
                std::cmp::Ordering::Equal
            } else if version_ge(&a.version, &b.version) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        v.dedup_by(|a, b| a.version == b.version);
        Ok(v)
    }

    /// Downloads `pkg=version` into `dest` and returns the .deb's path. apt checks the hash
    /// from the signed index.
    pub fn download(&self, spec: &str, dest: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dest)?;
        let _turn = self.turn()?;
        let (sh, opts) = (sh(), self.opts());
        sh.change_dir(dest);
        let st = Command::from(cmd!(sh, "apt-get {opts...} -q download {spec}")).status()?;
        if !st.success() {
            bail!("apt-get download {spec} failed ({st})");
        }
        let name = spec.split(['=', ':']).next().unwrap_or(spec);
        let prefix = format!("{name}_");
        // apt names files name_version_arch.deb; the newest such file is the one just fetched.
        debs_in(dest)
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with(&prefix)))
            .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
            .with_context(|| format!("apt-get download {spec} left no .deb in {}", dest.display()))
    }
}

impl PrivateApt {
    /// The files of source package `pkg` at exactly `version`, from the signed Sources index.
    pub fn source_files(&self, pkg: &str, version: &str) -> Result<Vec<SrcFile>> {
        let out = Command::new("apt-cache").args(self.opts()).args(["showsrc", pkg]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        parse_showsrc(&text, version)
            .with_context(|| format!("the private apt ({}) does not serve source {pkg} {version}", self.sources()))
    }

    /// Downloads one file to `dest` with apt's own transport; apt refuses a file whose
    /// SHA-256 is not `sha256` and then leaves nothing at `dest`.
    pub fn fetch(&self, file: &SrcFile, dest: &Path) -> Result<()> {
        let url = format!("{MIRROR}/{}", file.path);
        let st = Command::new("/usr/lib/apt/apt-helper")
            .args(self.opts())
            .args(["download-file", &url])
            .arg(dest)
            .arg(format!("SHA256:{}", file.sha256))
            .status()
            .context("running /usr/lib/apt/apt-helper")?;
        if !st.success() {
            bail!("downloading {url} failed ({st}): unreachable mirror, or its SHA-256 is not {}", file.sha256);
        }
        Ok(())
    }
}

/// A source package's orig tarball as a lock file pins it (`qemu/qemu.lock`, `aosp/aosp.lock`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcePin {
    /// Debian source package, e.g. `qemu`.
    pub package: String,
    /// Exact Debian version.
    pub version: String,
    /// Suite whose Sources index serves it.
    pub suite: String,
    /// The orig tarball's file name.
    pub orig: String,
    /// SHA-256 of the orig tarball.
    pub sha256: String,
}

impl SourcePin {
    /// Checks the pin's fields, naming `origin` (the lock) and `section` (its table).
    pub fn check(&self, origin: &str, section: &str) -> Result<()> {
        anyhow::ensure!(
            self.sha256.len() == 64 && self.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
            "{origin}: {section}.sha256 must be the 64 hex digits of {}",
            self.orig
        );
        anyhow::ensure!(
            self.orig.ends_with(".orig.tar.xz") && !self.orig.contains('/'),
            "{origin}: {section}.orig must be a file name like {}_VERSION.orig.tar.xz",
            self.package
        );
        Ok(())
    }
}

/// Downloads the orig tarball `lock` pins to `dest` through a private apt with one `deb-src` line
/// for the pin's suite, after checking that the signed index still serves that version with
/// that hash; apt's transport checks the download itself, so nothing half-written stays.
pub fn fetch_orig(cache: &Path, pin: &SourcePin, lock: &str, dest: &Path) -> Result<()> {
    let apt = PrivateApt::sources_of(cache, &pin.suite);
    apt.update()?;
    let files = apt.source_files(&pin.package, &pin.version).with_context(|| {
        format!(
            "{} pins source {} {}, which Debian {} no longer serves: pin a version it serves, with its orig tarball's SHA-256",
            lock, pin.package, pin.version, pin.suite
        )
    })?;
    let Some(f) = files.iter().find(|f| f.name == pin.orig) else {
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        bail!("source {} {} has no {} (files: {}); fix {}", pin.package, pin.version, pin.orig, names.join(", "), lock);
    };
    if f.sha256 != pin.sha256 {
        bail!(
            "the archive's index gives {} SHA-256 {}, {} pins {}: the archive changed the file, or the lock is wrong",
            pin.orig,
            f.sha256,
            lock,
            pin.sha256
        );
    }
    std::fs::create_dir_all(dest.parent().context("a download goes into a directory")?)?;
    crate::support::progress::note(format!("downloading {} {} ({})", pin.package, pin.version, pin.orig));
    apt.fetch(f, dest)
}

/// One file of a source package: pool path and SHA-256.
#[derive(Clone, Debug, PartialEq)]
pub struct SrcFile {
    pub name: String,
    pub path: String,
    pub sha256: String,
}

/// Files of the `apt-cache showsrc` stanza of `version`.
pub fn parse_showsrc(text: &str, version: &str) -> Option<Vec<SrcFile>> {
    let stanza = text.split("\n\n").find(|s| s.lines().any(|l| l.strip_prefix("Version: ") == Some(version)))?;
    let dir = stanza.lines().find_map(|l| l.strip_prefix("Directory: "))?.trim();
    let mut in_sums = false;
    let mut files = vec![];
    for l in stanza.lines() {
        if !l.starts_with(' ') {
            in_sums = l.starts_with("Checksums-Sha256:");
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if in_sums && f.len() == 3 {
            files.push(SrcFile { name: f[2].into(), path: format!("{dir}/{}", f[2]), sha256: f[0].into() });
        }
    }
    Some(files)
}

fn debs_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "deb")).collect())
        .unwrap_or_default()
}

/// Parses `apt-cache show` stanzas.
pub fn parse_show(text: &str) -> Vec<PkgVersion> {
    text.split("\n\n")
        .filter_map(|stanza| {
            let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
            Some(PkgVersion { version: field("Version:")?, sha256: field("SHA256:")?, filename: field("Filename:")? })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apt_cache_show() {
        let text = "Package: linux-source-7.2\nVersion: 7.2.13-1\nFilename: pool/main/l/linux/a.deb\nSHA256: aa\n\nPackage: linux-source-7.2\nVersion: 7.2.12-1~bpo13+1\nFilename: pool/b.deb\nSize: 1\nSHA256: bb\n";
        let v = parse_show(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].version, "7.2.12-1~bpo13+1");
        assert_eq!(v[1].sha256, "bb");
    }

    #[test]
    fn parses_apt_cache_showsrc() {
        let text = "Package: qemu\nVersion: 1:10.0.2+ds-2\nDirectory: pool/main/q/qemu\nFiles:\n 11 1 qemu_10.dsc\nChecksums-Sha256:\n aa 1 qemu_10.dsc\n bb 2 qemu_10.orig.tar.xz\nPackage-List:\n qemu-utils deb otherosfs optional arch=any\n\nPackage: qemu\nVersion: 1:9\nDirectory: pool/x\n";
        let f = parse_showsrc(text, "1:10.0.2+ds-2").unwrap();
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(
            f[1],
            SrcFile {
                name: "qemu_10.orig.tar.xz".into(),
                path: "pool/main/q/qemu/qemu_10.orig.tar.xz".into(),
                sha256: "bb".into()
            }
        );
        assert!(parse_showsrc(text, "1:11").is_none());
    }

    #[test]
    fn parses_dpkg_query() {
        let m = parse_dpkg_query("bc\tinstall ok installed\t1.07\nflex\tdeinstall ok config-files\t2.6\n");
        assert_eq!(m.get("bc").map(String::as_str), Some("1.07"));
        assert!(!m.contains_key("flex"));
    }

    #[test]
    fn debian_version_order() {
        if have_tool("dpkg") {
            assert!(version_ge("7.2.13-1", "7.2.12-1~bpo13+1"));
            assert!(!version_ge("7.2.12-1~bpo13+1", "7.2.12-1"));
        }
    }
}

#[cfg(test)]
mod live_tests {
    /// Reads the cache's private apt lists (run by hand: `--ignored`; needs `cargo make setup`).
    #[test]
    #[ignore = "reads the machine's lab cache"]
    fn private_apt_serves_the_pinned_kernel() {
        let apt = super::PrivateApt::new(&crate::support::paths::cache());
        let v = apt.versions("linux-source-7.2").unwrap();
        assert!(!v.is_empty());
        assert!(super::version_ge("7.2.12-1", "7.2.1-1") && !super::version_ge("7.2.1-1", "7.2.12-1"));
        assert!(super::installed_versions(&["dpkg"]).contains_key("dpkg"));
    }
}
