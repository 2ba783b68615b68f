//! A prepared source tree: the unpacked tarball as a base commit, then one commit per
//! patch of a series (`rust-driver/series` on the kernel, `qemu/series` on QEMU). Developers
//! edit and commit there, and the export command turns the commits back into the series.

use crate::lock::Lock;
use crate::util::{output, sha256_hex, write_atomic};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Branch holding the pristine tarball; the series sits on `lab`.
pub const BASE_BRANCH: &str = "base";
pub const WORK_BRANCH: &str = "lab";
/// Fixed identity and date so the same inputs give the same commit ids everywhere.
const IDENT: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "binder-lab"),
    ("GIT_AUTHOR_EMAIL", "lab@localhost"),
    ("GIT_COMMITTER_NAME", "binder-lab"),
    ("GIT_COMMITTER_EMAIL", "lab@localhost"),
];
const EPOCH: &str = "2000-01-01T00:00:00Z";

pub fn tree_dir(cache: &Path, lock: &Lock) -> PathBuf {
    cache.join("kernel/src").join(format!("linux-{}", crate::paths::path_safe(&lock.kernel.version)))
}

pub fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir).envs(IDENT).env("GIT_CONFIG_NOSYSTEM", "1").args([
        "-c",
        "core.autocrlf=false",
        "-c",
        "advice.detachedHead=false",
    ]);
    c
}

fn git_out(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(output(git(dir).args(args))?.trim_end().to_string())
}

/// Unpacks the kernel .deb once into a git repository with the base commit.
pub fn ensure_unpacked(cache: &Path, lock: &Lock, deb: &Path) -> Result<PathBuf> {
    let dir = tree_dir(cache, lock);
    if dir.join(".git/lab-base").is_file() {
        return Ok(dir);
    }
    eprintln!("lab: unpacking {} into {} (about a minute)", deb.display(), dir.display());
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let tarball = format!("./usr/src/{}.tar.xz", lock.kernel.package);
    let script =
        format!("dpkg-deb --fsys-tarfile \"$1\" | tar -xO '{tarball}' | tar -xJ --strip-components=1 -C \"$2\"");
    let st = Command::new("sh").args(["-c", &script, "sh"]).arg(deb).arg(&tmp).status()?;
    if !st.success() {
        bail!("unpacking {tarball} from {} failed", deb.display());
    }
    commit_base(&tmp, &format!("{} {}", lock.kernel.package, lock.kernel.version))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}

/// Turns the unpacked source in `dir` into a prepared tree: a git repository whose base
/// commit (fixed identity and date, so the same source gives the same id) holds all of it,
/// with the work branch checked out and the base recorded.
pub fn commit_base(dir: &Path, msg: &str) -> Result<()> {
    output(git(dir).args(["init", "-q", "-b", BASE_BRANCH]))?;
    output(git(dir).args(["add", "-A", "-f", "."]))?;
    output(git(dir).env("GIT_AUTHOR_DATE", EPOCH).env("GIT_COMMITTER_DATE", EPOCH).args(["commit", "-q", "-m", msg]))?;
    output(git(dir).args(["branch", WORK_BRANCH]))?;
    output(git(dir).args(["checkout", "-q", WORK_BRANCH]))?;
    let base = git_out(dir, &["rev-parse", "HEAD"])?;
    write_atomic(&dir.join(".git/lab-base"), base.as_bytes())
}

/// How a series' messages name it: its folder and the commands that export and reset it.
#[derive(Clone, Debug, PartialEq)]
pub struct Names {
    pub folder: &'static str,
    pub export: &'static str,
    pub reset: &'static str,
    pub base: &'static str,
}

pub const KERNEL: Names =
    Names { folder: "rust-driver/", export: "driver-export", reset: "driver-reset", base: "the pinned kernel" };

/// The series: `series` lists patch files, one per line (`#` comments allowed).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub dir: PathBuf,
    pub patches: Vec<String>,
    pub names: Names,
}

impl Series {
    /// The kernel's series (`rust-driver/`).
    pub fn load(dir: &Path) -> Result<Series> {
        Series::load_named(dir, KERNEL)
    }

    pub fn load_named(dir: &Path, names: Names) -> Result<Series> {
        let path = dir.join("series");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let patches: Vec<String> =
            text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect();
        for p in &patches {
            if !dir.join(p).is_file() {
                bail!("{}: lists {p}, which does not exist in {}", path.display(), dir.display());
            }
        }
        Ok(Series { dir: dir.to_path_buf(), patches, names })
    }

    /// Content hash of the whole series: names and bytes, in order.
    pub fn hash(&self) -> Result<String> {
        let mut all = vec![];
        for p in &self.patches {
            all.extend_from_slice(p.as_bytes());
            all.push(0);
            all.extend(std::fs::read(self.dir.join(p))?);
        }
        Ok(sha256_hex(&all))
    }
}

fn stamp(tree: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(tree.join(".git").join(name)).ok().map(|s| s.trim().to_string())
}

fn set_stamps(tree: &Path, series_hash: &str) -> Result<()> {
    let head = git_out(tree, &["rev-parse", "HEAD"])?;
    write_atomic(&tree.join(".git/lab-series"), series_hash.as_bytes())?;
    write_atomic(&tree.join(".git/lab-head"), head.as_bytes())
}

/// Makes the tree carry exactly the series, unless it already does. Work the developer has
/// not exported (uncommitted edits or new commits) is never thrown away.
/// The lock on the shared kernel tree: one lab process at a time syncs it to its series and
/// builds from it. Waits (with a message) while another process holds it.
pub fn lock(cache: &Path) -> Result<std::fs::File> {
    lock_in(&cache.join("kernel/src"), "kernel")
}

/// The lock on the trees in `dir` (`what`: kernel, QEMU).
pub fn lock_in(dir: &Path, what: &str) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let f = std::fs::File::create(dir.join(".lab-tree.lock"))?;
    if f.try_lock().is_err() {
        eprintln!("lab: waiting for another lab process that is using the {what} tree");
        f.lock().with_context(|| format!("locking the {what} tree"))?;
    }
    Ok(f)
}

pub fn sync_series(tree: &Path, series: &Series) -> Result<()> {
    let want = series.hash()?;
    if stamp(tree, "lab-series").as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    let head = git_out(tree, &["rev-parse", "HEAD"])?;
    let dirty = git_out(tree, &["status", "--porcelain", "--untracked-files=no"])?;
    let recorded = stamp(tree, "lab-head").or_else(|| stamp(tree, "lab-base"));
    if !dirty.is_empty() || recorded.as_deref() != Some(head.as_str()) {
        let n = &series.names;
        bail!(
            "{f} changed, but the tree {} has work that is not in {f} yet \
             ({}).\nKeep it: commit it there and run `cargo make {}`, then merge with your {f} change.\n\
             Or drop it: `cargo make {}` re-applies {f} from scratch.",
            tree.display(),
            if dirty.is_empty() { "commits not exported" } else { "uncommitted changes" },
            n.export,
            n.reset,
            f = n.folder,
        );
    }
    apply_series(tree, series)?;
    set_stamps(tree, &want)
}

/// Resets the work branch to the base commit and applies every patch as one commit.
fn apply_series(tree: &Path, series: &Series) -> Result<()> {
    let base = stamp(tree, "lab-base").context("tree has no base stamp; delete it and rerun")?;
    let previous = git_out(tree, &["rev-parse", "HEAD"])?;
    output(git(tree).args(["checkout", "-q", "-f", "-B", WORK_BRANCH, &base]))?;
    for p in &series.patches {
        let path = series.dir.join(p);
        let res = git(tree)
            .args(["am", "-q", "--committer-date-is-author-date", "--no-3way", "--keep-cr"])
            .arg(&path)
            .output()?;
        if !res.status.success() {
            let _ = git(tree).args(["am", "--abort"]).output();
            let _ = git(tree).args(["checkout", "-q", "-f", "-B", WORK_BRANCH, &previous]).output();
            let text = format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
            let failing: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("error:") || l.contains("patch failed") || l.contains("does not exist"))
                .collect();
            let n = &series.names;
            bail!(
                "patch {}{p} does not apply to {}:\n{}\nThe tree was left as it was before. Fix or rebase the patch (edit it in the tree and `cargo make {}`).",
                n.folder,
                n.base,
                if failing.is_empty() { text.trim().to_string() } else { failing.join("\n") },
                n.export
            );
        }
    }
    Ok(())
}

/// Throws away tree work and re-applies the series.
pub fn reset(tree: &Path, series: &Series) -> Result<()> {
    apply_series(tree, series)?;
    set_stamps(tree, &series.hash()?)
}

/// Writes the tree's commits since the base back as the series (exact round trip with
/// `sync_series`). Files not produced here (a cover letter) are left alone.
pub fn export(tree: &Path, dir: &Path) -> Result<Vec<String>> {
    export_named(tree, dir, KERNEL, "cargo make kernel")
}

/// [`export`] for any series; `applied_by` names the command that applies it.
pub fn export_named(tree: &Path, dir: &Path, names: Names, applied_by: &str) -> Result<Vec<String>> {
    let base = stamp(tree, "lab-base").context("tree has no base stamp")?;
    let dirty = git_out(tree, &["status", "--porcelain", "--untracked-files=no"])?;
    if !dirty.is_empty() {
        eprintln!("lab: note: uncommitted changes in {} are not exported:\n{dirty}", tree.display());
    }
    let old = Series::load(dir).map(|s| s.patches).unwrap_or_default();
    let tmp = tempdir_in(dir)?;
    output(git(tree).args(format_patch_args()).arg("-o").arg(&tmp).arg(format!("{base}..HEAD")))?;
    let mut patches: Vec<String> =
        std::fs::read_dir(&tmp)?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    patches.sort();
    for p in &old {
        let _ = std::fs::remove_file(dir.join(p));
    }
    for n in &patches {
        std::fs::rename(tmp.join(n), dir.join(n))?;
    }
    std::fs::remove_dir(&tmp)?;
    let mut series = format!("# Applied in order on {} by `{applied_by}`.\n", names.base);
    for n in &patches {
        series.push_str(n);
        series.push('\n');
    }
    write_atomic(&dir.join("series"), series.as_bytes())?;
    set_stamps(tree, &Series::load_named(dir, names)?.hash()?)?;
    Ok(patches)
}

/// Options chosen so format-patch output does not depend on the machine or the commit ids.
fn format_patch_args() -> [&'static str; 6] {
    ["format-patch", "-q", "--zero-commit", "--full-index", "--no-signature", "--no-binary"]
}

fn tempdir_in(dir: &Path) -> Result<PathBuf> {
    let t = dir.join(format!(".export.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir_all(&t)?;
    Ok(t)
}

/// Whether the tree carries exactly `series` with no other work, read without the tree lock.
/// A tree in the middle of a sync fails the check (its stamps are written last).
pub fn carries_exactly(tree: &Path, series: &Series) -> bool {
    let (Ok(want), Ok(head)) = (series.hash(), git_out(tree, &["rev-parse", "HEAD"])) else { return false };
    let clean = git_out(tree, &["status", "--porcelain", "--untracked-files=all"]).is_ok_and(|s| s.is_empty());
    clean && stamp(tree, "lab-series").as_deref() == Some(want.as_str()) && stamp(tree, "lab-head") == Some(head)
}

/// State of the tree for the cache key: HEAD plus any uncommitted edits.
pub fn state_hash(tree: &Path) -> Result<String> {
    let head = git_out(tree, &["rev-parse", "HEAD"])?;
    let status = git_out(tree, &["status", "--porcelain", "--untracked-files=all"])?;
    if status.is_empty() {
        return Ok(head);
    }
    let mut all = head.into_bytes();
    all.extend(git(tree).args(["diff", "HEAD", "--binary"]).output()?.stdout);
    for line in status.lines().filter(|l| l.starts_with("??")) {
        let f = &line[3..];
        all.extend_from_slice(f.as_bytes());
        all.extend(std::fs::read(tree.join(f)).unwrap_or_default());
    }
    Ok(sha256_hex(&all))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small base repo laid out like a prepared tree.
    fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let series = d.path().join("series-dir");
        std::fs::create_dir_all(tree.join("drivers")).unwrap();
        std::fs::create_dir_all(&series).unwrap();
        std::fs::write(tree.join("drivers/a.rs"), "fn a() {}\n").unwrap();
        output(git(&tree).args(["init", "-q", "-b", BASE_BRANCH])).unwrap();
        output(git(&tree).args(["add", "-A"])).unwrap();
        output(
            git(&tree)
                .env("GIT_AUTHOR_DATE", EPOCH)
                .env("GIT_COMMITTER_DATE", EPOCH)
                .args(["commit", "-q", "-m", "base"]),
        )
        .unwrap();
        output(git(&tree).args(["checkout", "-q", "-b", WORK_BRANCH])).unwrap();
        let base = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        std::fs::write(tree.join(".git/lab-base"), base).unwrap();
        std::fs::write(series.join("series"), "").unwrap();
        (d, tree, series)
    }

    fn commit(tree: &Path, file: &str, text: &str, msg: &str) {
        std::fs::write(tree.join(file), text).unwrap();
        output(git(tree).args(["commit", "-q", "-a", "-m", msg])).unwrap();
    }

    #[test]
    fn export_apply_round_trip_is_exact() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one\n\nWhy one.");
        commit(&tree, "drivers/a.rs", "fn a() { c() }\n", "rust_binder: two\n\nWhy two.");
        let names = export(&tree, &dir).unwrap();
        assert_eq!(names, ["0001-rust_binder-one.patch", "0002-rust_binder-two.patch"]);
        let before: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();

        // Re-apply from scratch, export again: same bytes, same commit ids.
        reset(&tree, &Series::load(&dir).unwrap()).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("drivers/a.rs")).unwrap(), "fn a() { c() }\n");
        let again = export(&tree, &dir).unwrap();
        assert_eq!(again, names);
        let after: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn failing_patch_is_named_and_tree_kept() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one");
        export(&tree, &dir).unwrap();
        let p = dir.join("0001-rust_binder-one.patch");
        let broken = std::fs::read_to_string(&p).unwrap().replace("-fn a() {}", "-fn zzz() {}");
        std::fs::write(&p, broken).unwrap();
        let head = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        let e = sync_series(&tree, &Series::load(&dir).unwrap()).unwrap_err().to_string();
        assert!(e.contains("rust-driver/0001-rust_binder-one.patch does not apply"), "{e}");
        assert!(e.contains("drivers/a.rs"), "{e}");
        assert_eq!(git_out(&tree, &["rev-parse", "HEAD"]).unwrap(), head);
    }

    #[test]
    fn unexported_work_is_never_dropped() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one");
        export(&tree, &dir).unwrap();
        std::fs::write(tree.join("drivers/a.rs"), "local edit\n").unwrap();
        // The series changes underneath (e.g. git pull): refuse, keep the edit.
        std::fs::write(dir.join("series"), "").unwrap();
        let e = sync_series(&tree, &Series::load(&dir).unwrap()).unwrap_err().to_string();
        assert!(e.contains("uncommitted changes") && e.contains("driver-export"), "{e}");
        assert_eq!(std::fs::read_to_string(tree.join("drivers/a.rs")).unwrap(), "local edit\n");
    }

    #[test]
    fn state_hash_tracks_edits() {
        let (_d, tree, _dir) = fixture();
        let clean = state_hash(&tree).unwrap();
        std::fs::write(tree.join("drivers/a.rs"), "x\n").unwrap();
        let edited = state_hash(&tree).unwrap();
        assert_ne!(clean, edited);
        std::fs::write(tree.join("drivers/a.rs"), "fn a() {}\n").unwrap();
        assert_eq!(state_hash(&tree).unwrap(), clean);
    }

    #[test]
    fn series_lists_missing_patch() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("series"), "# c\n0001-x.patch\n").unwrap();
        assert!(Series::load(d.path()).unwrap_err().to_string().contains("0001-x.patch"));
    }
}
