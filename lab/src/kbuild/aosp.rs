//! Android 14's binder userspace for the guest: libbinder (kernel IPC), servicemanager,
//! binderThroughputTest, schd-dbg, binderLibTest and binderDriverInterfaceTest, built for
//! arm64 from the pinned source (`provision::aosp_src`) with the lab's own build description
//! (`aosp/build.toml`; no Android build system) and the patch series in `aosp/patches`.
//!
//! Toolchain: the host's clang-19 and lld against a trixie arm64 sysroot unpacked from the
//! private apt (`provision::debs`): the Android libraries Debian packages (34.0.5) are built
//! with trixie's glibc and libstdc++, which bookworm's cross gcc cannot link against. The
//! interfaces libbinder generates with aidl come from the host's `aidl` (Debian's, Android
//! 10's), which reads Android 14's .aidl files after patch 0001.
//!
//! The result is an overlay for the initramfs (`usr/bin/PROGRAM`, libbinder.so beside
//! Debian's Android libraries), cached by the content of every input and sealed with a
//! manifest like every artifact (`support::artifact`).

use crate::provision::aosp_src::{self, AospLock};
use crate::support::artifact::{self, Kind, Reuse};
use crate::support::fs::{publish_dir, sha256_file, sha256_hex, write_atomic};
use crate::support::{paths, progress};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bumped when the build itself (not its description) changes.
const FORMAT: &str = "aosp-v1";
pub const CXX: &str = "clang++-19";
pub const AIDL: &str = "aidl";
/// Compile jobs at once (the machine has two cores).
const JOBS: usize = 2;
/// Where Debian keeps its Android libraries, in the sysroot and in the guest.
pub const LIBDIR: &str = "usr/lib/aarch64-linux-gnu/android";
const TRIPLE: &str = "aarch64-linux-gnu";

/// `aosp/build.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Desc {
    pub extract: Vec<String>,
    pub sysroot: Vec<String>,
    pub runtime: Vec<String>,
    pub compiler: Compiler,
    pub aidl: Aidl,
    pub library: Unit,
    pub program: Vec<Unit>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compiler {
    pub std: String,
    pub flags: Vec<String>,
    pub force_include: Vec<String>,
    pub include: Vec<String>,
    pub defines: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aidl {
    pub dir: String,
    pub files: Vec<String>,
}

/// A library or a program: its sources in `dir`, extra flags and defines, and what it links.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unit {
    pub name: String,
    pub dir: String,
    pub srcs: Vec<String>,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub defines: Vec<String>,
    /// Shared libraries (`-lNAME`): Debian's Android libraries, or `binder`.
    #[serde(default)]
    pub libs: Vec<String>,
    /// Static libraries from the sysroot (gtest, gmock).
    #[serde(default)]
    pub r#static: Vec<String>,
}

impl Desc {
    pub fn dir() -> PathBuf {
        paths::repo().join("aosp")
    }

    pub fn parse(text: &str) -> Result<Desc> {
        let d: Desc = toml::from_str(text).context("aosp/build.toml is malformed; restore it from git")?;
        let mut names = std::collections::BTreeSet::new();
        for u in std::iter::once(&d.library).chain(&d.program) {
            anyhow::ensure!(!u.srcs.is_empty(), "aosp/build.toml: {} has no srcs", u.name);
            anyhow::ensure!(names.insert(u.name.as_str()), "aosp/build.toml: two units are named {}", u.name);
        }
        Ok(d)
    }

    pub fn load() -> Result<Desc> {
        let p = Desc::dir().join("build.toml");
        Desc::parse(&std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?)
    }

    /// The program names (`/usr/bin/NAME` in the guest).
    pub fn programs(&self) -> Vec<&str> {
        self.program.iter().map(|p| p.name.as_str()).collect()
    }
}

/// The paths `{src}`, `{gen}`, `{aosp}` and `{sysroot}` stand for.
struct Vars {
    src: PathBuf,
    gen: PathBuf,
    aosp: PathBuf,
    sysroot: PathBuf,
}

impl Vars {
    fn expand(&self, s: &str) -> PathBuf {
        let mut out = s.to_string();
        for (k, v) in [("{src}", &self.src), ("{gen}", &self.gen), ("{aosp}", &self.aosp), ("{sysroot}", &self.sysroot)]
        {
            out = out.replace(k, &v.display().to_string());
        }
        PathBuf::from(out)
    }
}

/// The built userspace.
#[derive(Clone, Debug)]
pub struct Built {
    /// The artifact directory; `root/` is the guest overlay.
    pub dir: PathBuf,
    /// Debian's runtime packages for the guest, unpacked (an overlay too).
    pub runtime: PathBuf,
    /// Whether it came from the cache.
    pub cached: bool,
}

impl Built {
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

/// The patch series against the orig tarball, in order (`aosp/patches/series`).
pub fn series() -> Result<Vec<PathBuf>> {
    let dir = Desc::dir().join("patches");
    let text = std::fs::read_to_string(dir.join("series")).context("reading aosp/patches/series")?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(|l| dir.join(l)).collect())
}

/// Version lines of the host tools, for the key; a missing tool names the fix.
fn tool_versions() -> Result<String> {
    let mut out = String::new();
    for (tool, arg) in [(CXX, "--version"), ("ld.lld-19", "--version")] {
        let v = crate::support::process::output(Command::new(tool).arg(arg))
            .with_context(|| format!("{tool} not found; run `./lab.sh setup` (it installs clang-19 and lld-19)"))?;
        out.push_str(v.lines().next().unwrap_or_default());
        out.push('\n');
    }
    // Debian's aidl has no --version; its package version stands for it.
    let v = crate::provision::apt::installed_versions(&[AIDL]);
    let Some(aidl) = v.get(AIDL) else {
        bail!("the `aidl` compiler is not installed; run `./lab.sh setup` (it installs Debian's aidl package)")
    };
    out.push_str(&format!("aidl {aidl}\n"));
    Ok(out)
}

/// Every input's content, in a stable order, for the cache key.
fn key_text(desc_text: &str, pin: &aosp_src::SourcePin, sysroot_debs: &[String]) -> Result<String> {
    let mut k = format!("{FORMAT}\n{}\n{}\n{}\n", pin.package, pin.version, pin.sha256);
    k.push_str(&tool_versions()?);
    k.push_str(desc_text);
    for p in series()? {
        k.push_str(&std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?);
    }
    let (files, _) = artifact::walk(&Desc::dir().join("include"))?;
    for f in files {
        k.push_str(&f);
        k.push_str(&sha256_file(&Desc::dir().join("include").join(&f))?);
    }
    k.push_str(&sysroot_debs.join("\n"));
    Ok(k)
}

/// Builds the userspace, or finds it in the cache.
pub fn build(cache: &Path) -> Result<Built> {
    let desc_text = std::fs::read_to_string(Desc::dir().join("build.toml")).context("reading aosp/build.toml")?;
    let desc = Desc::parse(&desc_text)?;
    let pin = AospLock::load()?.source;
    let orig = aosp_src::ensure_orig(cache, &pin)?;
    let sysroot = crate::provision::debs::overlay(cache, &desc.sysroot)
        .context("the AOSP build's arm64 sysroot (aosp/build.toml `sysroot`)")?;
    let runtime = crate::provision::debs::overlay(cache, &desc.runtime)
        .context("the AOSP programs' runtime packages (aosp/build.toml `runtime`)")?
        .root;
    let key = sha256_hex(key_text(&desc_text, &pin, &sysroot.debs)?.as_bytes());
    let dir = Kind::Aosp.root(cache).join(format!("aosp-{}", &key[..16]));
    if dir.exists() && artifact::reuse(Kind::Aosp, &dir)? == Reuse::Use {
        crate::support::process::mark_used(&dir);
        return Ok(Built { dir, runtime, cached: true });
    }
    let t0 = std::time::Instant::now();
    progress::note(format!(
        "building Android 14's binder userspace ({} {}) into {}",
        pin.package,
        pin.version,
        dir.display()
    ));
    publish_dir(&dir, |tmp| {
        let work = tempfile::Builder::new().prefix(".aosp-work.").tempdir_in(dir.parent().expect("under the cache"))?;
        let vars = Vars {
            src: work.path().join("src"),
            gen: work.path().join("gen"),
            aosp: Desc::dir(),
            sysroot: std::fs::canonicalize(&sysroot.root)?,
        };
        unpack(&orig, &desc, &vars.src)?;
        apply_series(&vars.src)?;
        run_aidl(&desc, &vars)?;
        let objs = work.path().join("obj");
        compile_all(&desc, &vars, &objs)?;
        link_all(&desc, &vars, &objs, &tmp.join("root"))?;
        let info = serde_json::json!({
            "source": format!("{} {}", pin.package, pin.version),
            "sysroot": sysroot.debs,
            "patches": series()?.iter().filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned())).collect::<Vec<_>>(),
            "build_s": t0.elapsed().as_secs_f64(),
        });
        write_atomic(&tmp.join("build.json"), serde_json::to_string_pretty(&info)?.as_bytes())?;
        artifact::seal(tmp)
    })?;
    progress::note(format!("AOSP userspace built in {:.0} s", t0.elapsed().as_secs_f64()));
    Ok(Built { dir, runtime, cached: false })
}

/// Extracts the parts of the orig tarball the build reads (its paths start with `./`).
fn unpack(orig: &Path, desc: &Desc, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest)?;
    let members: Vec<String> = desc.extract.iter().map(|m| format!("./{m}")).collect();
    let out = Command::new("tar").arg("-xJf").arg(orig).arg("-C").arg(dest).args(&members).output()?;
    if !out.status.success() {
        bail!(
            "unpacking {} from {} failed: {}\n(aosp/build.toml `extract` names paths of the tarball)",
            desc.extract.join(", "),
            orig.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Applies `aosp/patches/series` with `git apply` (no repository needed), each patch whole or
/// not at all.
fn apply_series(src: &Path) -> Result<()> {
    for p in series()? {
        let out = Command::new("git").current_dir(src).args(["apply", "--whitespace=nowarn"]).arg(&p).output()?;
        if !out.status.success() {
            bail!(
                "patch {} does not apply to the pinned source: {}\nRefresh it against the tarball of aosp/aosp.lock.",
                p.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

fn run_aidl(desc: &Desc, vars: &Vars) -> Result<()> {
    let dir = vars.expand(&desc.aidl.dir);
    for f in &desc.aidl.files {
        let out = Command::new(AIDL)
            .arg("--lang=cpp")
            .arg(format!("-I{}", dir.display()))
            .arg(dir.join(f))
            .arg(format!("-h{}", vars.gen.join("include").display()))
            .arg(format!("-o{}", vars.gen.join("src").display()))
            .output()
            .context("running aidl")?;
        if !out.status.success() {
            bail!("aidl {f} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
    }
    Ok(())
}

/// One compile: source, object, and the unit it belongs to.
struct Job<'a> {
    src: PathBuf,
    obj: PathBuf,
    unit: &'a Unit,
}

/// The clang++ command for one translation unit.
fn compile_cmd(desc: &Desc, vars: &Vars, unit: &Unit, src: &Path, obj: &Path) -> Command {
    let c = &desc.compiler;
    let mut cmd = Command::new(CXX);
    cmd.arg(format!("--target={TRIPLE}")).arg(format!("--sysroot={}", vars.sysroot.display()));
    cmd.arg(format!("-std={}", c.std)).args(&c.flags).args(&unit.flags);
    for h in &c.force_include {
        cmd.args(["-include", h]);
    }
    for i in &c.include {
        cmd.arg(format!("-I{}", vars.expand(i).display()));
    }
    for d in c.defines.iter().chain(&unit.defines) {
        cmd.arg(format!("-D{d}"));
    }
    // Paths in the objects are the work directory's; map them to the tree's own.
    cmd.arg(format!("-ffile-prefix-map={}/=", vars.src.display()));
    cmd.arg("-c").arg(src).arg("-o").arg(obj);
    cmd
}

fn compile_all(desc: &Desc, vars: &Vars, objs: &Path) -> Result<()> {
    let lib = &desc.library;
    let mut jobs = vec![];
    for u in std::iter::once(lib).chain(&desc.program) {
        for s in &u.srcs {
            // A source outside the unit's directory is written `{src}/path`.
            let src = vars.expand(&u.dir).join(vars.expand(s));
            let obj = objs.join(&u.name).join(s.trim_start_matches("{src}/")).with_extension("o");
            jobs.push(Job { src, obj, unit: u });
        }
    }
    // The generated interfaces belong to libbinder.
    for f in &desc.aidl.files {
        let rel = Path::new(f).with_extension("cpp");
        let src = vars.gen.join("src").join(&rel);
        if src.is_file() {
            jobs.push(Job { obj: objs.join("aidl").join(&rel).with_extension("o"), src, unit: lib });
        }
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let errors: Mutex<Vec<String>> = Mutex::new(vec![]);
    let stop = crate::support::interrupt::flag();
    let worker = || {
        while !failed.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(j) = jobs.get(i) else { break };
            let r = std::fs::create_dir_all(j.obj.parent().expect("objects sit in a directory"))
                .map_err(anyhow::Error::from)
                .and_then(|()| compile_cmd(desc, vars, j.unit, &j.src, &j.obj).output().context("running clang++-19"));
            match r {
                Ok(o) if o.status.success() => {
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    let rel =
                        j.src.strip_prefix(&vars.src).or_else(|_| j.src.strip_prefix(&vars.gen)).unwrap_or(&j.src);
                    progress::note(format!("aosp: [{n}/{}] {}", jobs.len(), rel.display()));
                }
                Ok(o) => {
                    failed.store(true, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&o.stderr).replace(&format!("{}/", vars.src.display()), "");
                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                        "compiling {} ({}) failed:\n{}",
                        j.src.strip_prefix(&vars.src).unwrap_or(&j.src).display(),
                        j.unit.name,
                        first_errors(&text, 40)
                    ));
                }
                Err(e) => {
                    failed.store(true, Ordering::SeqCst);
                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{e:#}"));
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..JOBS {
            s.spawn(worker);
        }
    });
    if stop.load(Ordering::SeqCst) {
        return Err(crate::support::interrupt::Interrupted.into());
    }
    let errors = errors.into_inner().unwrap_or_default();
    if !errors.is_empty() {
        bail!("the AOSP userspace build failed (aosp/build.toml, aosp/patches):\n{}", errors.join("\n"));
    }
    Ok(())
}

/// The first `max` lines of compiler output, from its first error on.
pub fn first_errors(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.contains("error:")).unwrap_or(0);
    let mut out: Vec<&str> = lines[start..].iter().take(max).copied().collect();
    if lines.len() - start > max {
        out.push("...");
    }
    out.join("\n")
}

fn objects(dir: &Path) -> Result<Vec<PathBuf>> {
    let (files, _) = artifact::walk(dir)?;
    Ok(files.into_iter().filter(|f| f.ends_with(".o")).map(|f| dir.join(f)).collect())
}

/// Links libbinder.so and the programs into the guest overlay `root`.
fn link_all(desc: &Desc, vars: &Vars, objs: &Path, root: &Path) -> Result<()> {
    let libdir = root.join(LIBDIR);
    let bindir = root.join("usr/bin");
    std::fs::create_dir_all(&libdir)?;
    std::fs::create_dir_all(&bindir)?;
    let sys_android = vars.sysroot.join(LIBDIR);
    let link = |out: &Path, objects: Vec<PathBuf>, unit: &Unit, shared: bool| -> Result<()> {
        let mut cmd = Command::new(CXX);
        cmd.arg(format!("--target={TRIPLE}")).arg(format!("--sysroot={}", vars.sysroot.display()));
        cmd.args(["-fuse-ld=lld", "-pthread", "-Wl,--build-id=none"]);
        if shared {
            // Every symbol resolved now: a gap in Debian's libraries is a build error here,
            // not a loader error in the guest.
            cmd.arg("-shared").arg(format!("-Wl,-soname,lib{}.so", unit.name)).arg("-Wl,--no-undefined");
        }
        cmd.args(&objects).arg("-o").arg(out);
        cmd.arg(format!("-L{}", libdir.display())).arg(format!("-L{}", sys_android.display()));
        // Debian's Android libraries live off the loader's default path; so does libbinder.
        cmd.arg(format!("-Wl,-rpath,/{LIBDIR}"));
        for s in &unit.r#static {
            cmd.arg(format!("-l:lib{s}.a"));
        }
        for l in &unit.libs {
            cmd.arg(format!("-l{l}"));
        }
        let o = cmd.output().context("running clang++-19 to link")?;
        if !o.status.success() {
            bail!("linking {} failed:\n{}", unit.name, first_errors(&String::from_utf8_lossy(&o.stderr), 40));
        }
        Ok(())
    };
    let lib = &desc.library;
    let mut lib_objs = objects(&objs.join(&lib.name))?;
    lib_objs.extend(objects(&objs.join("aidl"))?);
    link(&libdir.join(format!("lib{}.so", lib.name)), lib_objs, lib, true)?;
    for p in &desc.program {
        link(&bindir.join(&p.name), objects(&objs.join(&p.name))?, p, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_description_parses() {
        let d = Desc::load().unwrap();
        assert_eq!(d.library.name, "binder");
        for p in ["servicemanager", "binderThroughputTest", "schd-dbg", "binderLibTest", "binderDriverInterfaceTest"] {
            assert!(d.programs().contains(&p), "{p}");
        }
        assert!(d.compiler.defines.iter().any(|x| x == "BINDER_WITH_KERNEL_IPC"));
        let names: Vec<String> =
            series().unwrap().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert!(names.len() >= 5 && names.iter().all(|n| n.ends_with(".patch")), "{names:?}");
        for p in series().unwrap() {
            assert!(p.is_file(), "{} is in the series but not in aosp/patches", p.display());
        }
    }

    #[test]
    fn description_errors() {
        let text = std::fs::read_to_string(Desc::dir().join("build.toml")).unwrap();
        let e = Desc::parse(&text.replace("name = \"schd-dbg\"", "name = \"servicemanager\"")).unwrap_err();
        assert!(e.to_string().contains("two units are named servicemanager"), "{e}");
        let e = Desc::parse(&format!("{text}\nbogus = 1\n")).unwrap_err();
        assert!(format!("{e:#}").contains("aosp/build.toml is malformed"), "{e:#}");
    }

    #[test]
    fn compiler_errors_start_at_the_first_error() {
        let text = "In file included from a.cpp:1:\nb.h:3:1: error: unknown type name 'x'\n  3 | x y;\n  | ^\n1 error generated.\n";
        assert_eq!(first_errors(text, 2), "b.h:3:1: error: unknown type name 'x'\n  3 | x y;\n...");
    }

    #[test]
    fn commands_use_the_sysroot_and_the_unit() {
        let d = Desc::load().unwrap();
        let vars = Vars { src: "/w/src".into(), gen: "/w/gen".into(), aosp: "/r/aosp".into(), sysroot: "/s".into() };
        let sm = d.program.iter().find(|p| p.name == "servicemanager").unwrap();
        let cmd = compile_cmd(&d, &vars, sm, Path::new("/w/src/a.cpp"), Path::new("/o/a.o"));
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        for want in [
            "--sysroot=/s",
            "-I/r/aosp/include",
            "-I/s/usr/include/android",
            "-DVENDORSERVICEMANAGER=1",
            "-DBINDER_WITH_KERNEL_IPC",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
        }
    }
}

#[cfg(test)]
mod live_tests {
    /// Builds the userspace into the machine's lab cache (run by hand: `--ignored --nocapture`;
    /// needs the Debian mirror the first time) and prints how long it took.
    #[test]
    #[ignore = "builds into the machine's lab cache (minutes)"]
    fn builds_the_userspace() {
        let t0 = std::time::Instant::now();
        let b = super::build(&crate::support::paths::cache()).unwrap();
        eprintln!(
            "AOSP userspace: {} ({}) in {:.1} s",
            b.dir.display(),
            if b.cached { "cached" } else { "built" },
            t0.elapsed().as_secs_f64()
        );
        for p in super::Desc::load().unwrap().programs() {
            assert!(b.root().join("usr/bin").join(p).is_file(), "{p}");
        }
        assert!(b.root().join(super::LIBDIR).join("libbinder.so").is_file());
        assert!(b.runtime.join(super::LIBDIR).join("libbase.so.0").exists());
    }
}
