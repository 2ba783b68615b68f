//! Deterministic newc initramfs: entries sorted by path, mtime 0, uid/gid 0, inode
//! numbers by position. The same inputs always give the same bytes, so a hash of the
//! archive is a cache key.

use crate::busybox::BUSYBOX_APPLETS;
use crate::guest::GuestBins;
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Directories every initramfs has (mount points and the plan's home).
pub const BASE_DIRS: &[&str] = &["bin", "dev", "etc", "etc/lab", "mnt", "proc", "root", "sys", "tmp"];

/// What goes into the initramfs.
#[derive(Clone, Debug, Default)]
pub struct InitramfsSpec {
    /// Becomes /init.
    pub init: PathBuf,
    /// (name, host path): each becomes /bin/NAME.
    pub programs: Vec<(String, PathBuf)>,
    /// Becomes /bin/busybox, with a symlink per applet in [`BUSYBOX_APPLETS`].
    pub busybox: Option<PathBuf>,
    /// Contents of /etc/lab/plan.json (a serialized `labproto::Plan`).
    pub plan_json: String,
    /// Files under this directory are added at their relative paths; exec bits kept.
    pub overlay: Option<PathBuf>,
    /// Unpacked Debian packages (`--deb`), added like an overlay, before it.
    pub debs: Option<PathBuf>,
    /// Registry crates' executables (a plan's `crates`), added like an overlay, after the
    /// packages and before the user's overlay.
    pub crates: Option<PathBuf>,
    /// Further overlays the host built (a plan's `aosp`: Android's binder userspace and its
    /// Debian libraries), after the crates and before the user's overlay.
    pub extra: Vec<PathBuf>,
}

impl InitramfsSpec {
    pub fn new(bins: &GuestBins, plan_json: String) -> Self {
        InitramfsSpec { init: bins.init.clone(), programs: bins.programs.clone(), plan_json, ..Default::default() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File { data: Vec<u8>, exec: bool },
    Symlink(String),
    CharDev { major: u32, minor: u32, perm: u32 },
}

struct Node {
    kind: Kind,
    /// Where it came from, for collision errors.
    origin: String,
}

#[derive(Default)]
struct Tree {
    nodes: BTreeMap<String, Node>,
}

impl Tree {
    fn add(&mut self, path: &str, kind: Kind, origin: String) -> Result<()> {
        let path = path.trim_start_matches('/').to_string();
        if path.is_empty() || path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            bail!("bad initramfs path {path:?} ({origin})");
        }
        // Parents first, so every entry's directory exists when the kernel unpacks it.
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !self.nodes.contains_key(parent) {
                self.add(parent, Kind::Dir, origin.clone())?;
            }
        }
        if let Some(old) = self.nodes.get(&path) {
            if old.kind == Kind::Dir && kind == Kind::Dir {
                return Ok(());
            }
            bail!("/{path}: {origin} collides with {}", old.origin);
        }
        self.nodes.insert(path, Node { kind, origin });
        Ok(())
    }

    fn add_host_file(&mut self, path: &str, host: &Path, exec: bool) -> Result<()> {
        let data = std::fs::read(host).with_context(|| format!("cannot read {}", host.display()))?;
        self.add(path, Kind::File { data, exec }, format!("built-in /{path} (from {})", host.display()))
    }

    fn add_overlay(&mut self, root: &Path, dir: &Path) -> Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read overlay dir {}", dir.display()))?
            .collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let host = e.path();
            let rel = host.strip_prefix(root).expect("walk stays under root");
            let rel = rel.to_str().with_context(|| format!("non-UTF-8 overlay path {}", host.display()))?;
            let origin = format!("overlay {}", host.display());
            let meta = std::fs::symlink_metadata(&host)?;
            let ft = meta.file_type();
            if ft.is_dir() {
                self.add(rel, Kind::Dir, origin)?;
                self.add_overlay(root, &host)?;
            } else if ft.is_file() {
                let data = std::fs::read(&host).with_context(|| format!("cannot read {}", host.display()))?;
                let exec = meta.permissions().mode() & 0o111 != 0;
                self.add(rel, Kind::File { data, exec }, origin)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&host)?;
                let target = target.to_str().with_context(|| format!("non-UTF-8 link {}", host.display()))?;
                self.add(rel, Kind::Symlink(target.to_string()), origin)?;
            } else {
                bail!("{origin}: only files, directories and symlinks are supported");
            }
        }
        Ok(())
    }

    fn write(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for (i, (path, node)) in self.nodes.iter().enumerate() {
            let (mode, nlink, data, rdev): (u32, u32, &[u8], (u32, u32)) = match &node.kind {
                Kind::Dir => (0o040755, 2, &[], (0, 0)),
                Kind::File { data, exec } => (if *exec { 0o100755 } else { 0o100644 }, 1, data, (0, 0)),
                Kind::Symlink(t) => (0o120777, 1, t.as_bytes(), (0, 0)),
                Kind::CharDev { major, minor, perm } => (0o020000 | perm, 1, &[], (*major, *minor)),
            };
            let size = u32::try_from(data.len()).with_context(|| format!("/{path} is too big for newc (4 GiB)"))?;
            let mut w = cpio::newc::Builder::new(path)
                .ino(i as u32 + 1)
                .mode(mode)
                .uid(0)
                .gid(0)
                .nlink(nlink)
                .mtime(0)
                .rdev_major(rdev.0)
                .rdev_minor(rdev.1)
                .write(&mut out, size);
            w.write_all(data)?;
            w.finish()?;
        }
        cpio::newc::trailer(&mut out)?;
        Ok(out)
    }
}

/// Packs the initramfs described by `spec` into newc bytes.
pub fn pack_initramfs(spec: &InitramfsSpec) -> Result<Vec<u8>> {
    // Fail on the host rather than with an InitError in the guest.
    serde_json::from_str::<labproto::Plan>(&spec.plan_json).context("plan_json is not a valid labproto::Plan")?;

    let mut t = Tree::default();
    for d in BASE_DIRS {
        t.add(d, Kind::Dir, "built-in directory".into())?;
    }
    // The kernel opens /dev/console for init's stdio before anything is mounted.
    t.add("dev/console", Kind::CharDev { major: 5, minor: 1, perm: 0o600 }, "built-in /dev/console".into())?;
    let mut named = vec![("init".to_string(), &spec.init)];
    for (name, host) in &spec.programs {
        if name.is_empty() || name.contains('/') {
            bail!("bad program name {name:?}");
        }
        named.push((format!("bin/{name}"), host));
    }
    // A host file under several names (the multicall guest binary) goes in once, as
    // /bin/<its file name>, and each name is a symlink to it: the kernel unpacks every
    // byte of the archive at each boot.
    let mut uses: BTreeMap<&PathBuf, usize> = BTreeMap::new();
    for (_, host) in &named {
        *uses.entry(*host).or_default() += 1;
    }
    for (path, host) in &named {
        if uses[host] == 1 {
            t.add_host_file(path, host, true)?;
            continue;
        }
        let file =
            host.file_name().and_then(|f| f.to_str()).with_context(|| format!("bad file name {}", host.display()))?;
        let shared = format!("bin/{file}");
        if !t.nodes.contains_key(&shared) {
            t.add_host_file(&shared, host, true)?;
        }
        let target = if path.starts_with("bin/") { file.to_string() } else { shared };
        t.add(path, Kind::Symlink(target), format!("/{path}, a name of /bin/{file}"))?;
    }
    if let Some(bb) = &spec.busybox {
        t.add_host_file("bin/busybox", bb, true)?;
        for a in BUSYBOX_APPLETS {
            let path = format!("bin/{a}");
            // Our own programs win over an applet of the same name.
            if !t.nodes.contains_key(&path) {
                t.add(&path, Kind::Symlink("busybox".into()), format!("busybox applet /{path}"))?;
            }
        }
    }
    let plan = labproto::PLAN_PATH.trim_start_matches('/');
    t.add(plan, Kind::File { data: spec.plan_json.as_bytes().to_vec(), exec: false }, format!("the plan /{plan}"))?;
    for o in spec.debs.iter().chain(&spec.crates).chain(&spec.extra).chain(&spec.overlay) {
        if !o.is_dir() {
            bail!("overlay {} is not a directory", o.display());
        }
        t.add_overlay(o, o)?;
    }
    t.write()
}

/// Packs and writes the archive to `out` (via a temporary file and rename); returns its
/// [`content_key`].
pub fn write_initramfs(spec: &InitramfsSpec, out: &Path) -> Result<String> {
    let bytes = pack_initramfs(spec)?;
    let tmp = out.with_extension("cpio.tmp");
    std::fs::write(&tmp, &bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("cannot rename to {}", out.display()))?;
    Ok(content_key(&bytes))
}

/// Hex SHA-256 of the packed archive: a stable cache key since packing is deterministic.
pub fn content_key(archive: &[u8]) -> String {
    hex::encode(Sha256::digest(archive))
}

/// One entry read back from an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// Path without a leading slash, as stored.
    pub name: String,
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u32,
    pub rdev: (u32, u32),
    /// File contents or symlink target.
    pub data: Vec<u8>,
}

/// Reads a newc archive back (for tests and for inspecting a cached initramfs).
pub fn list_entries(archive: &[u8]) -> Result<Vec<EntryInfo>> {
    let mut cur = Cursor::new(archive);
    let mut v = Vec::new();
    loop {
        let mut r = cpio::newc::Reader::new(cur)?;
        let e = r.entry();
        if e.is_trailer() {
            break;
        }
        let mut info = EntryInfo {
            name: e.name().to_string(),
            ino: e.ino(),
            mode: e.mode(),
            uid: e.uid(),
            gid: e.gid(),
            mtime: e.mtime(),
            rdev: (e.rdev_major(), e.rdev_minor()),
            data: Vec::new(),
        };
        std::io::Read::read_to_end(&mut r, &mut info.data)?;
        v.push(info);
        cur = r.finish()?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"{"name":"t","steps":[{"name":"topo","argv":["topology"],"timeout_s":5}]}"#;

    struct Fixture {
        dir: tempfile::TempDir,
        spec: InitramfsSpec,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str, data: &[u8]| {
            let path = dir.path().join(n);
            std::fs::write(&path, data).unwrap();
            path
        };
        let spec = InitramfsSpec {
            init: p("init", b"INIT"),
            programs: vec![("topology".into(), p("topology", b"TOPO")), ("binder-smoke".into(), p("bs", b"BS"))],
            busybox: Some(p("busybox", b"BUSYBOX")),
            plan_json: PLAN.into(),
            overlay: None,
            debs: None,
            crates: None,
            extra: vec![],
        };
        Fixture { dir, spec }
    }

    fn overlay(f: &Fixture, files: &[(&str, &[u8], u32)]) -> PathBuf {
        let o = f.dir.path().join("overlay");
        for (rel, data, mode) in files {
            let p = o.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, data).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        o
    }

    // --deb's packages go in as one more overlay, only when asked; the user's overlay may not
    // shadow them silently.
    #[test]
    fn debs_overlay() {
        let mut f = fixture();
        let plain = list_entries(&pack_initramfs(&f.spec).unwrap()).unwrap();
        let debs = f.dir.path().join("debs");
        std::fs::create_dir_all(debs.join("usr/bin")).unwrap();
        std::fs::write(debs.join("usr/bin/strace"), b"S").unwrap();
        std::fs::set_permissions(debs.join("usr/bin/strace"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("usr/lib", debs.join("lib")).unwrap();
        f.spec.debs = Some(debs);
        let with = list_entries(&pack_initramfs(&f.spec).unwrap()).unwrap();
        assert!(!plain.iter().any(|e| e.name == "usr/bin/strace" || e.name == "lib"));
        let get = |n: &str| with.iter().find(|e| e.name == n).unwrap_or_else(|| panic!("no {n}")).clone();
        assert_eq!(get("usr/bin/strace").mode, 0o100755);
        assert_eq!(get("lib").data, b"usr/lib");
        f.spec.overlay = Some(overlay(&f, &[("usr/bin/strace", b"mine", 0o755)]));
        let e = pack_initramfs(&f.spec).unwrap_err().to_string();
        assert!(e.contains("/usr/bin/strace") && e.contains("collides"), "{e}");
    }

    #[test]
    fn packing_is_deterministic() {
        let mut f = fixture();
        f.spec.overlay = Some(overlay(&f, &[("bin/my-client", b"C", 0o755), ("etc/x.conf", b"x", 0o600)]));
        let a = pack_initramfs(&f.spec).unwrap();
        // New mtimes and a rewrite with the same content must not change the bytes.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f.spec.init, b"INIT").unwrap();
        let b = pack_initramfs(&f.spec).unwrap();
        assert_eq!(a, b);
        assert_eq!(content_key(&a), content_key(&b));
        assert_eq!(content_key(&a).len(), 64);
        std::fs::write(&f.spec.init, b"INIT2").unwrap();
        assert_ne!(content_key(&pack_initramfs(&f.spec).unwrap()), content_key(&a));
    }

    #[test]
    fn archive_has_the_expected_entries() {
        let mut f = fixture();
        f.spec.overlay = Some(overlay(&f, &[("bin/my-client", b"C", 0o755), ("usr/share/d.txt", b"d", 0o644)]));
        let entries = list_entries(&pack_initramfs(&f.spec).unwrap()).unwrap();
        let get = |n: &str| entries.iter().find(|e| e.name == n).unwrap_or_else(|| panic!("no {n}"));

        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "sorted by path");
        for (i, e) in entries.iter().enumerate() {
            assert_eq!((e.ino, e.uid, e.gid, e.mtime), (i as u32 + 1, 0, 0, 0), "{}", e.name);
        }
        for d in BASE_DIRS.iter().chain(&["usr", "usr/share"]) {
            assert_eq!(get(d).mode, 0o040755, "{d}");
        }
        assert_eq!((get("init").mode, get("init").data.as_slice()), (0o100755, &b"INIT"[..]));
        assert_eq!(get("bin/topology").data, b"TOPO");
        assert_eq!(get("bin/binder-smoke").mode, 0o100755);
        assert_eq!(get("bin/busybox").data, b"BUSYBOX");
        assert_eq!((get("bin/sh").mode, get("bin/sh").data.as_slice()), (0o120777, &b"busybox"[..]));
        assert_eq!(get("bin/ls").mode, 0o120777);
        let console = get("dev/console");
        assert_eq!((console.mode, console.rdev), (0o020600, (5, 1)));
        let plan = get("etc/lab/plan.json");
        assert_eq!((plan.mode, plan.data.as_slice()), (0o100644, PLAN.as_bytes()));
        assert_eq!(get("bin/my-client").mode, 0o100755);
        assert_eq!(get("usr/share/d.txt").mode, 0o100644);
        assert!(names.iter().all(|n| !n.starts_with('/')));
    }

    #[test]
    fn overlay_collision_names_both() {
        let mut f = fixture();
        f.spec.overlay = Some(overlay(&f, &[("bin/topology", b"mine", 0o755)]));
        let e = format!("{:#}", pack_initramfs(&f.spec).unwrap_err());
        assert!(e.contains("/bin/topology"), "{e}");
        assert!(e.contains("overlay") && e.contains("built-in"), "{e}");

        // A busybox applet link is a built-in too.
        let mut f = fixture();
        f.spec.overlay = Some(overlay(&f, &[("bin/sh", b"mine", 0o755)]));
        assert!(format!("{:#}", pack_initramfs(&f.spec).unwrap_err()).contains("busybox applet /bin/sh"));

        // A file where a built-in directory is.
        let mut f = fixture();
        f.spec.overlay = Some(overlay(&f, &[("proc", b"x", 0o644)]));
        assert!(pack_initramfs(&f.spec).is_err());
    }

    #[test]
    fn a_file_under_several_names_is_packed_once() {
        let mut f = fixture();
        let multi = f.dir.path().join("guestbox");
        std::fs::write(&multi, b"MULTI").unwrap();
        f.spec.init = multi.clone();
        f.spec.programs = vec![("topology".into(), multi.clone()), ("binder-smoke".into(), multi)];
        let entries = list_entries(&pack_initramfs(&f.spec).unwrap()).unwrap();
        let get = |n: &str| entries.iter().find(|e| e.name == n).unwrap_or_else(|| panic!("no {n}")).clone();
        assert_eq!((get("bin/guestbox").mode, get("bin/guestbox").data.as_slice()), (0o100755, &b"MULTI"[..]));
        assert_eq!((get("init").mode, get("init").data.as_slice()), (0o120777, &b"bin/guestbox"[..]));
        for p in ["bin/topology", "bin/binder-smoke"] {
            assert_eq!((get(p).mode, get(p).data.as_slice()), (0o120777, &b"guestbox"[..]), "{p}");
        }
        assert_eq!(entries.iter().filter(|e| e.data.as_slice() == b"MULTI").count(), 1);
    }

    #[test]
    fn bad_plan_is_rejected() {
        let mut f = fixture();
        f.spec.plan_json = "{\"steps\": 3}".into();
        assert!(format!("{:#}", pack_initramfs(&f.spec).unwrap_err()).contains("labproto::Plan"));
    }

    #[test]
    fn minimal_spec_without_busybox() {
        let mut f = fixture();
        f.spec.busybox = None;
        f.spec.programs.clear();
        let out = f.dir.path().join("x.cpio");
        let key = write_initramfs(&f.spec, &out).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(key, content_key(&bytes));
        let entries = list_entries(&bytes).unwrap();
        assert!(!entries.iter().any(|e| e.name == "bin/sh"));
        assert!(entries.iter().any(|e| e.name == "init"));
    }
}
