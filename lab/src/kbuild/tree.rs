//! The prepared kernel tree: the unpacked tarball as a base commit, then one commit per
//! patch of the series a flavor applies (a stack: `rust-driver/` first, then any extra series
//! of the flavor, e.g. `c-reference/`). Driver developers edit and commit there, and
//! `lab driver-export` turns the commits back into `rust-driver/`.
//!
//! `.git/lab-applied` records the commit each applied patch became, so switching between
//! stacks that share a prefix checks out only the files the differing patches touch (and
//! kbuild rebuilds only those).

use crate::kbuild::pin::Lock;
use crate::support::fs::{sha256_hex, write_atomic};
use crate::support::paths;
use crate::support::process::{output, sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use xshell::cmd;

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
    cache.join("kernel/src").join(format!("linux-{}", paths::path_safe(&lock.kernel.version)))
}

/// `git` in the lab's trees: fixed identity, and neither the system's nor the user's
/// configuration (`commit.gpgsign`, `format.signOff`, hooks, ... would change commit ids
/// and the exported patches). Read-only commands take no optional locks, so reading the
/// tree never disturbs another process that is changing it.
pub fn git(dir: &Path) -> Command {
    let sh = sh();
    sh.change_dir(dir);
    let c = cmd!(sh, "git -c core.autocrlf=false -c advice.detachedHead=false")
        .envs(IDENT)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_OPTIONAL_LOCKS", "0");
    Command::from(c)
}

fn git_out(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(output(git(dir).args(args))?.trim_end().to_string())
}

fn unpacked(dir: &Path) -> bool {
    dir.join(".git/lab-base").is_file()
}

/// Unpacks the kernel .deb once into a git repository with the base commit. The first
/// process to get here unpacks (under the tree lock, into a private temporary directory);
/// others wait for it and then find the tree.
pub fn ensure_unpacked(cache: &Path, lock: &Lock, deb: &Path) -> Result<PathBuf> {
    let dir = tree_dir(cache, lock);
    if unpacked(&dir) {
        return Ok(dir);
    }
    let _guard = self::lock(cache, "unpacking the kernel source")?;
    if unpacked(&dir) {
        return Ok(dir);
    }
    crate::support::progress::note(format!("unpacking {} into {} (about a minute)", deb.display(), dir.display()));
    // A tree without the base stamp is an unfinished one from an older lab: it is replaced.
    crate::support::fs::publish_dir(&dir, |tmp| unpack_into(tmp, lock, deb))?;
    Ok(dir)
}

fn unpack_into(tmp: &Path, lock: &Lock, deb: &Path) -> Result<()> {
    let tarball = format!("./usr/src/{}.tar.xz", lock.kernel.package);
    let script =
        format!("dpkg-deb --fsys-tarfile \"$1\" | tar -xO '{tarball}' | tar -xJ --strip-components=1 -C \"$2\"");
    let st = Command::new("sh").args(["-c", &script, "sh"]).arg(deb).arg(tmp).status()?;
    if !st.success() {
        bail!("unpacking {tarball} from {} failed", deb.display());
    }
    commit_base(tmp, &format!("{} {}", lock.kernel.package, lock.kernel.version))
}

/// Turns the unpacked source in `dir` into a prepared tree: a git repository whose base
/// commit (fixed identity and date, so the same source gives the same id) holds all of it,
/// with the work branch checked out and the base recorded. The kernel's and QEMU's trees.
pub fn commit_base(dir: &Path, msg: &str) -> Result<()> {
    output(git(dir).args(["init", "-q", "-b", BASE_BRANCH]))?;
    output(git(dir).args(["add", "-A", "-f", "."]))?;
    output(git(dir).env("GIT_AUTHOR_DATE", EPOCH).env("GIT_COMMITTER_DATE", EPOCH).args(["commit", "-q", "-m", msg]))?;
    output(git(dir).args(["branch", WORK_BRANCH]))?;
    output(git(dir).args(["checkout", "-q", WORK_BRANCH]))?;
    let base = git_out(dir, &["rev-parse", "HEAD"])?;
    write_atomic(&dir.join(".git/lab-base"), base.as_bytes())
}

/// How a series other than the kernel's is named in what the lab writes (QEMU's `qemu/`).
#[derive(Clone, Debug, PartialEq)]
pub struct Names {
    pub folder: &'static str,
    pub export: &'static str,
    pub reset: &'static str,
    pub base: &'static str,
}

/// The kernel tree's names: its default series and the commands that export and reset it.
pub const KERNEL: Names =
    Names { folder: "rust-driver/", export: "driver-export", reset: "driver-reset", base: "the pinned kernel" };

/// The lab-only series (the deferral switch): `rust-driver/lab/`, applied after the
/// upstream-bound series in `rust-driver/`, so that one stands alone on the pinned tree.
pub const LAB_SUBDIR: &str = "lab";
/// A commit whose message has this trailer belongs to the lab-only series.
pub const LAB_TRAILER: &str = "Lab-only:";

/// The series: `series` lists patch files, one per line (`#` comments allowed), then the
/// lab-only series' patches from `lab/series`, named `lab/<file>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub dir: PathBuf,
    pub patches: Vec<String>,
}

fn series_list(dir: &Path, prefix: &str) -> Result<Vec<String>> {
    let path = dir.join(prefix).join("series");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let patches: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| if prefix.is_empty() { l.to_string() } else { format!("{prefix}/{l}") })
        .collect();
    for p in &patches {
        if !dir.join(p).is_file() {
            bail!("{}: lists {p}, which does not exist in {}", path.display(), dir.display());
        }
    }
    Ok(patches)
}

impl Series {
    pub fn load(dir: &Path) -> Result<Series> {
        let mut patches = series_list(dir, "")?;
        if dir.join(LAB_SUBDIR).join("series").is_file() {
            patches.extend(series_list(dir, LAB_SUBDIR)?);
        }
        Ok(Series { dir: dir.to_path_buf(), patches })
    }

    /// The series' name: its directory's (`rust-driver`, `c-reference`).
    pub fn name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
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
    // Commit ids are deterministic (fixed identity and dates): the series always yields this
    // HEAD. Kept per series, so that a checkout whose series the tree does not carry right
    // now still knows the key of its clean build.
    write_atomic(&tree.join(".git/lab-series-heads").join(series_hash), head.as_bytes())?;
    write_atomic(&tree.join(".git/lab-head"), head.as_bytes())
}

/// The commit the stack ends in, as the last sync to it recorded (commit ids are
/// deterministic); None when the tree never carried it.
pub fn stack_head(tree: &Path, stack: &[Series]) -> Result<Option<String>> {
    Ok(stamp(tree, &format!("lab-series-heads/{}", stack_hash(stack)?)))
}

/// Hash of a stack of series. A single series keeps its own hash, the stamp every lab
/// version wrote, so checkouts of different ages agree on what the tree carries.
pub fn stack_hash(stack: &[Series]) -> Result<String> {
    if let [one] = stack {
        return one.hash();
    }
    let mut all = vec![];
    for s in stack {
        all.extend(format!("{}\0{}\n", s.name(), s.hash()?).into_bytes());
    }
    Ok(sha256_hex(&all))
}

/// One applied patch: `series/file`, the patch's SHA-256, the commit it became.
#[derive(Clone, Debug, PartialEq)]
struct Applied {
    id: String,
    sha: String,
    commit: String,
}

fn wanted(stack: &[Series]) -> Result<Vec<(Applied, PathBuf)>> {
    let mut v = vec![];
    for s in stack {
        for p in &s.patches {
            let path = s.dir.join(p);
            let sha = sha256_hex(&std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
            v.push((Applied { id: format!("{}/{p}", s.name()), sha, commit: String::new() }, path));
        }
    }
    Ok(v)
}

/// The recorded patches up to the commit `upto` (a stamp), or none when the record does not
/// reach it (another lab version re-applied the tree without recording).
fn applied_upto(tree: &Path, upto: Option<&str>) -> Vec<Applied> {
    let text = stamp(tree, "lab-applied").unwrap_or_default();
    let all: Vec<Applied> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some(Applied { id: it.next()?.into(), sha: it.next()?.into(), commit: it.next()?.into() })
        })
        .collect();
    match all.iter().rposition(|a| Some(a.commit.as_str()) == upto) {
        Some(i) => all[..=i].to_vec(),
        None => vec![],
    }
}

fn write_applied(tree: &Path, applied: &[Applied]) -> Result<()> {
    let text: String = applied.iter().map(|a| format!("{} {} {}\n", a.id, a.sha, a.commit)).collect();
    write_atomic(&tree.join(".git/lab-applied"), text.as_bytes())
}

/// True when the tree holds work that no series has: uncommitted edits, or commits beyond
/// the last sync.
pub fn has_work(tree: &Path) -> Result<bool> {
    let head = git_out(tree, &["rev-parse", "HEAD"])?;
    let dirty = git_out(tree, &["status", "--porcelain", "--untracked-files=no"])?;
    let recorded = stamp(tree, "lab-head").or_else(|| stamp(tree, "lab-base"));
    Ok(!dirty.is_empty() || recorded.as_deref() != Some(head.as_str()))
}

/// The lock on the shared kernel tree: one lab process at a time unpacks it, syncs it to
/// its series and builds from it. `purpose` (e.g. "building kernel debug") is recorded for
/// the processes that have to wait, which say what they wait for.
pub fn lock(cache: &Path, purpose: &str) -> Result<std::fs::File> {
    lock_in(&cache.join("kernel/src"), "kernel", purpose)
}

/// The lock on the trees in `dir` (`what`: kernel, QEMU), as [`lock`].
pub fn lock_in(dir: &Path, what: &str, purpose: &str) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let f = std::fs::File::create(dir.join(".lab-tree.lock"))?;
    let holder = dir.join(".lab-tree.lock.holder");
    if f.try_lock().is_err() {
        let who = std::fs::read_to_string(&holder).unwrap_or_default();
        let who = if who.trim().is_empty() { "another lab process".to_string() } else { who.trim().to_string() };
        crate::support::progress::note(format!("{purpose}: waiting for the {what} tree, held by {who}"));
        f.lock().with_context(|| format!("locking the {what} tree"))?;
    }
    let me = format!("pid {} ({purpose}, since {})\n", std::process::id(), crate::support::stamp::rfc3339_now());
    let _ = write_atomic(&holder, me.as_bytes());
    Ok(f)
}

/// Makes the tree carry exactly the stack, unless it already does. Work the developer has
/// not exported (uncommitted edits or new commits) is never thrown away.
pub fn sync_series(tree: &Path, stack: &[Series]) -> Result<()> {
    sync_series_named(tree, stack, &KERNEL)
}

/// [`sync_series`] for another tree (QEMU's): `names` go into its messages.
pub fn sync_series_named(tree: &Path, stack: &[Series], names: &Names) -> Result<()> {
    let want = stack_hash(stack)?;
    if stamp(tree, "lab-series").as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    if has_work(tree)? {
        let dirty = !git_out(tree, &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
        let series: Vec<String> = stack.iter().map(|s| format!("{}/", s.name())).collect();
        let Names { folder, export, reset, .. } = names;
        bail!(
            "the tree {} must carry {}, but it has work that is not in {folder} yet \
             ({}).\nKeep it: commit it there and run `cargo make {export}`, then merge with your {folder} change.\n\
             Or drop it: `cargo make {reset}` re-applies {folder} from scratch.",
            tree.display(),
            series.join(" + "),
            if dirty { "uncommitted changes" } else { "commits not exported" }
        );
    }
    let keep = applied_upto(tree, stamp(tree, "lab-head").as_deref());
    apply_series(tree, stack, keep, names)?;
    set_stamps(tree, &want)
}

/// Applies the stack as one commit per patch, starting from the longest prefix of `keep`
/// (patches already applied, in order) that the stack shares, else from the base commit.
fn apply_series(tree: &Path, stack: &[Series], keep: Vec<Applied>, names: &Names) -> Result<()> {
    let base = stamp(tree, "lab-base").context("tree has no base stamp; delete it and rerun")?;
    let previous = git_out(tree, &["rev-parse", "HEAD"])?;
    let want = wanted(stack)?;
    let common = keep.iter().zip(&want).take_while(|(k, (w, _))| k.id == w.id && k.sha == w.sha).count();
    let mut applied: Vec<Applied> = keep[..common].to_vec();
    let start = applied.last().map(|a| a.commit.clone()).unwrap_or(base);
    output(git(tree).args(["checkout", "-q", "-f", "-B", WORK_BRANCH, &start]))?;
    for (w, path) in &want[common..] {
        let res = git(tree)
            .args(["am", "-q", "--committer-date-is-author-date", "--no-3way", "--keep-cr"])
            .arg(path)
            .output()?;
        if !res.status.success() {
            let text = format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
            let failing: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("error:") || l.contains("patch failed") || l.contains("does not exist"))
                .collect();
            let restored = match restore(tree, &previous) {
                Ok(()) => "The tree was left as it was before.".to_string(),
                Err(why) => format!(
                    "Restoring the tree {} to {previous} failed too ({why}); run `cargo make {}` once the cause is fixed.",
                    tree.display(),
                    names.reset
                ),
            };
            bail!(
                "patch {} does not apply to {}:\n{}\n{restored} Fix or rebase the patch (edit it in the tree and `cargo make {}`).",
                w.id,
                names.base,
                if failing.is_empty() { text.trim().to_string() } else { failing.join("\n") },
                names.export
            );
        }
        applied.push(Applied { commit: git_out(tree, &["rev-parse", "HEAD"])?, ..w.clone() });
    }
    write_applied(tree, &applied)
}

/// Aborts a failed `git am` and puts the work branch back at `previous`, then checks that it
/// is there: no `am` in progress, HEAD at `previous`, no changes to tracked files.
fn restore(tree: &Path, previous: &str) -> std::result::Result<(), String> {
    let _ = git(tree).args(["am", "--abort"]).output();
    let co = git(tree).args(["checkout", "-q", "-f", "-B", WORK_BRANCH, previous]).output();
    let co_err = match co {
        Ok(o) if o.status.success() => String::new(),
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => e.to_string(),
    };
    let mut wrong = vec![];
    if tree.join(".git/rebase-apply").exists() {
        wrong.push("a `git am` is still in progress".to_string());
    }
    match git_out(tree, &["rev-parse", "HEAD"]) {
        Ok(head) if head == previous => {}
        Ok(head) => wrong.push(format!("HEAD is {head}")),
        Err(e) => wrong.push(format!("HEAD unreadable: {e:#}")),
    }
    match git_out(tree, &["status", "--porcelain", "--untracked-files=no"]) {
        Ok(st) if st.is_empty() => {}
        Ok(st) => wrong.push(format!("tracked files differ: {}", st.lines().take(5).collect::<Vec<_>>().join(", "))),
        Err(e) => wrong.push(format!("status unreadable: {e:#}")),
    }
    if wrong.is_empty() {
        return Ok(());
    }
    if !co_err.is_empty() {
        wrong.push(format!("checkout said: {co_err}"));
    }
    Err(wrong.join("; "))
}

/// Throws away tree work and re-applies the stack from the base commit.
pub fn reset(tree: &Path, stack: &[Series]) -> Result<()> {
    reset_named(tree, stack, &KERNEL)
}

/// [`reset`] for another tree (QEMU's).
pub fn reset_named(tree: &Path, stack: &[Series], names: &Names) -> Result<()> {
    apply_series(tree, stack, vec![], names)?;
    set_stamps(tree, &stack_hash(stack)?)
}

/// Writes the tree's commits since the base back as the series (exact round trip with
/// `sync_series`): commits with the [`LAB_TRAILER`] go to `lab/`, the others to `dir`. Files
/// not produced here (a cover letter) are left alone.
pub fn export(tree: &Path, dir: &Path) -> Result<Vec<String>> {
    export_with(tree, dir, SERIES_HEADER)
}

/// [`export`] for another tree's series (QEMU's); `applied_by` names the command applying it.
pub fn export_named(tree: &Path, dir: &Path, names: Names, applied_by: &str) -> Result<Vec<String>> {
    export_with(tree, dir, &format!("# Applied in order on {} by `{applied_by}`.\n", names.base))
}

fn export_with(tree: &Path, dir: &Path, header: &str) -> Result<Vec<String>> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let synced = applied_upto(tree, stamp(tree, "lab-head").as_deref());
    let ours = |a: &Applied| a.id.starts_with(&format!("{name}/"));
    // Series applied before this one (android-sched/ before rust-driver/ in every flavor) are
    // part of the base it is exported from: kept as they are, in the record too.
    let lead: Vec<Applied> =
        if synced.iter().any(ours) { synced.iter().take_while(|a| !ours(a)).cloned().collect() } else { vec![] };
    let base = match lead.last() {
        Some(a) => a.commit.clone(),
        None => stamp(tree, "lab-base").context("tree has no base stamp")?,
    };
    if let Some(i) = synced.iter().skip(lead.len()).position(|a| !ours(a)).map(|i| i + lead.len()) {
        let onto = if i == 0 { base.clone() } else { synced[i - 1].commit.clone() };
        bail!(
            "the kernel tree {} carries {} on top of {name}/ (a flavor with an extra series was built last), \
             so its commits are not all {name}/'s.\nMove your commits onto {name}/'s last patch and rerun: \
             git -C {} rebase --onto {onto} {}",
            tree.display(),
            synced[i].id,
            tree.display(),
            synced.last().map(|a| a.commit.as_str()).unwrap_or_default()
        );
    }
    let dirty = git_out(tree, &["status", "--porcelain", "--untracked-files=no"])?;
    if !dirty.is_empty() {
        crate::support::progress::note(format!(
            "note: uncommitted changes in {} are not exported:\n{dirty}",
            tree.display()
        ));
    }
    let split = lab_split(tree, &base)?;
    let old = Series::load(dir).map(|s| s.patches).unwrap_or_default();
    for p in &old {
        let _ = std::fs::remove_file(dir.join(p));
    }
    let mut names = export_range(tree, &format!("{base}..{split}"), dir, header)?;
    let lab_dir = dir.join(LAB_SUBDIR);
    if split != git_out(tree, &["rev-parse", "HEAD"])? || lab_dir.join("series").is_file() {
        std::fs::create_dir_all(&lab_dir)?;
        let lab = export_range(tree, &format!("{split}..HEAD"), &lab_dir, LAB_SERIES_HEADER)?;
        names.extend(lab.into_iter().map(|n| format!("{LAB_SUBDIR}/{n}")));
    }
    let exported = Series::load(dir)?;
    // Record what each exported patch became, so a later sync keeps these commits.
    let commits = git_out(tree, &["rev-list", "--reverse", &format!("{base}..HEAD")])?;
    let mut record = lead.clone();
    record.extend(
        wanted(std::slice::from_ref(&exported))?
            .into_iter()
            .zip(commits.lines())
            .map(|((a, _), c)| Applied { commit: c.to_string(), ..a }),
    );
    write_applied(tree, &record)?;
    // The stack the tree now carries: the leading series, then the exported one.
    let mut stack: Vec<Series> = vec![];
    for a in &lead {
        let lead_name = a.id.split('/').next().unwrap_or_default();
        if stack.last().is_none_or(|s| s.name() != lead_name) {
            let lead_dir = dir.parent().map(|p| p.join(lead_name)).unwrap_or_default();
            stack.push(Series::load(&lead_dir)?);
        }
    }
    stack.push(exported);
    set_stamps(tree, &stack_hash(&stack)?)?;
    Ok(names)
}

const SERIES_HEADER: &str = "# Applied in order on the pinned kernel by `cargo make kernel`.\n";
const LAB_SERIES_HEADER: &str = "# Lab-only patches (commits with a `Lab-only:` trailer), applied after ../series.\n";

/// The last commit of the upstream-bound series: lab-only commits must all come after it.
fn lab_split(tree: &Path, base: &str) -> Result<String> {
    let log = git_out(tree, &["log", "--reverse", "--format=%H %s%x00%B%x01", &format!("{base}..HEAD")])?;
    let mut split = base.to_string();
    let mut first_lab: Option<String> = None;
    for entry in log.split('\x01').map(str::trim).filter(|e| !e.is_empty()) {
        let (head, body) = entry.split_once('\0').unwrap_or((entry, ""));
        let (id, subject) = head.split_once(' ').unwrap_or((head, ""));
        if body.lines().any(|l| l.starts_with(LAB_TRAILER)) {
            first_lab.get_or_insert_with(|| subject.to_string());
        } else if let Some(lab) = &first_lab {
            bail!(
                "commit \"{subject}\" comes after the lab-only commit \"{lab}\": the series in rust-driver/ must \
                 stand alone, so lab-only commits (`{LAB_TRAILER}` trailer) go last. Reorder with `git rebase -i` \
                 in {}, then export again.",
                tree.display()
            );
        } else {
            split = id.to_string();
        }
    }
    Ok(split)
}

/// format-patch of `range` into `dir`, and its `series` file; returns the patch names.
fn export_range(tree: &Path, range: &str, dir: &Path, header: &str) -> Result<Vec<String>> {
    // Removed when dropped, also on an error.
    let staged = tempfile::Builder::new().prefix(".export.").tempdir_in(dir)?;
    let tmp = staged.path();
    output(git(tree).args(format_patch_args()).arg("-o").arg(tmp).arg(range))?;
    let mut names: Vec<String> =
        std::fs::read_dir(tmp)?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for n in &names {
        std::fs::rename(tmp.join(n), dir.join(n))?;
    }
    let mut series = String::from(header);
    for n in &names {
        series.push_str(n);
        series.push('\n');
    }
    write_atomic(&dir.join("series"), series.as_bytes())?;
    Ok(names)
}

/// Options chosen so format-patch output does not depend on the machine or the commit ids.
fn format_patch_args() -> [&'static str; 6] {
    ["format-patch", "-q", "--zero-commit", "--full-index", "--no-signature", "--no-binary"]
}

/// Whether the tree is unpacked and its last sync was to `stack`.
pub fn carries(tree: &Path, stack: &[Series]) -> Result<bool> {
    Ok(unpacked(tree) && stamp(tree, "lab-series").as_deref() == Some(stack_hash(stack)?.as_str()))
}

/// The tree's state (as [`state_hash`]) if it already carries `series` and nothing changes
/// it while it is read: the lock-free way to find a published build. None when the tree is
/// not unpacked, carries another series, or moved between two reads.
pub fn settled_state(tree: &Path, stack: &[Series]) -> Result<Option<String>> {
    if !carries(tree, stack)? {
        return Ok(None);
    }
    let first = state_hash(tree)?;
    let second = state_hash(tree)?;
    Ok((carries(tree, stack)? && first == second).then_some(first))
}

/// The state (as [`state_hash`]) the tree would have right after syncing to `series`, if a
/// sync to it was ever recorded: the HEAD it gave, with no edits. Read without any lock.
pub fn recorded_state(tree: &Path, stack: &[Series]) -> Result<Option<String>> {
    Ok(std::fs::read_to_string(tree.join(".git/lab-series-heads").join(stack_hash(stack)?))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty()))
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
pub(crate) mod tests {
    use super::*;

    /// A prepared tree at `dir` that carries the (empty) series in `series_dir`.
    pub(crate) fn synced_tree(dir: &Path, series_dir: &Path) -> Series {
        std::fs::create_dir_all(dir.join("drivers")).unwrap();
        std::fs::create_dir_all(series_dir).unwrap();
        std::fs::write(dir.join("drivers/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(series_dir.join("series"), "").unwrap();
        output(git(dir).args(["init", "-q", "-b", WORK_BRANCH])).unwrap();
        output(git(dir).args(["add", "-A"])).unwrap();
        output(git(dir).args(["commit", "-q", "-m", "base"])).unwrap();
        let base = git_out(dir, &["rev-parse", "HEAD"]).unwrap();
        std::fs::write(dir.join(".git/lab-base"), base).unwrap();
        let series = Series::load(series_dir).unwrap();
        set_stamps(dir, &series.hash().unwrap()).unwrap();
        series
    }

    /// Marks the tree as carrying `series` (as a sync by another checkout would).
    pub(crate) fn stamp_as(tree: &Path, series: &Series) {
        std::fs::write(tree.join(".git/lab-series"), series.hash().unwrap()).unwrap();
    }

    /// A small base repo laid out like a prepared tree.
    fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        let series = d.path().join("rust-driver");
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
        reset(&tree, &[Series::load(&dir).unwrap()]).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("drivers/a.rs")).unwrap(), "fn a() { c() }\n");
        let again = export(&tree, &dir).unwrap();
        assert_eq!(again, names);
        let after: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn lab_only_commits_export_to_their_own_series() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one\n\nWhy one.");
        commit(&tree, "drivers/a.rs", "fn a() { c() }\n", "rust_binder: switch\n\nWhy.\n\nLab-only: yes");
        let names = export(&tree, &dir).unwrap();
        assert_eq!(names, ["0001-rust_binder-one.patch", "lab/0001-rust_binder-switch.patch"]);
        assert!(std::fs::read_to_string(dir.join("series")).unwrap().ends_with("\n0001-rust_binder-one.patch\n"));
        let lab = std::fs::read_to_string(dir.join("lab/series")).unwrap();
        assert!(lab.ends_with("\n0001-rust_binder-switch.patch\n"), "{lab}");
        let series = Series::load(&dir).unwrap();
        assert_eq!(series.patches, names);
        let with_lab = series.hash().unwrap();

        // Both series are applied (lab last), and the exported bytes round-trip exactly.
        let before: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();
        reset(&tree, std::slice::from_ref(&series)).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("drivers/a.rs")).unwrap(), "fn a() { c() }\n");
        assert_eq!(export(&tree, &dir).unwrap(), names);
        let after: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(dir.join(n)).unwrap()).collect();
        assert_eq!(before, after);

        // The lab series is part of the content hash, so of the kernel's cache key.
        std::fs::write(dir.join("lab/series"), "").unwrap();
        assert_ne!(Series::load(&dir).unwrap().hash().unwrap(), with_lab);
    }

    #[test]
    fn lab_only_commit_before_an_upstream_one_is_refused() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: switch\n\nLab-only: yes");
        commit(&tree, "drivers/a.rs", "fn a() { c() }\n", "rust_binder: two");
        let e = export(&tree, &dir).unwrap_err().to_string();
        assert!(e.contains("\"rust_binder: two\" comes after the lab-only commit") && e.contains("rebase -i"), "{e}");
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
        let e = sync_series(&tree, &[Series::load(&dir).unwrap()]).unwrap_err().to_string();
        assert!(e.contains("rust-driver/0001-rust_binder-one.patch does not apply"), "{e}");
        assert!(e.contains("drivers/a.rs"), "{e}");
        assert_eq!(git_out(&tree, &["rev-parse", "HEAD"]).unwrap(), head);
    }

    #[test]
    fn failed_restore_is_reported_not_claimed() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one");
        export(&tree, &dir).unwrap();
        // A hook that fails the patch and leaves the index locked: restoring cannot work.
        let hook = tree.join(".git/hooks/pre-applypatch");
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        std::fs::write(&hook, "#!/bin/sh\ntouch \"$(git rev-parse --git-dir)/index.lock\"\nexit 1\n").unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let e = reset(&tree, &[Series::load(&dir).unwrap()]).unwrap_err().to_string();
        assert!(e.contains("does not apply"), "{e}");
        assert!(!e.contains("left as it was before"), "{e}");
        assert!(e.contains("Restoring the tree") && e.contains("driver-reset"), "{e}");
    }

    #[test]
    fn user_git_config_is_ignored() {
        let (d, tree, _dir) = fixture();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        let cfg = "[format]\n\tsignOff = true\n[commit]\n\tgpgSign = true\n";
        std::fs::write(home.join(".gitconfig"), cfg).unwrap();
        std::fs::write(home.join(".config/git/config"), cfg).unwrap();
        for key in ["format.signoff", "commit.gpgsign"] {
            let out = git(&tree)
                .env("HOME", &home)
                .env("XDG_CONFIG_HOME", home.join(".config"))
                .args(["config", "--get", key])
                .output()
                .unwrap();
            assert!(!out.status.success(), "{key} = {}", String::from_utf8_lossy(&out.stdout));
        }
    }

    #[test]
    fn unpacking_waits_for_the_tree_lock() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let lock = Lock {
            kernel: crate::kbuild::pin::KernelPin {
                package: "linux-source-7.2".into(),
                version: "7.2.0-1".into(),
                suite: "sid".into(),
                sha256: "0".repeat(64),
            },
        };
        let deb = fake_kernel_deb(d.path());
        let held = super::lock(&cache, "a test").unwrap();
        let (c2, l2, deb2) = (cache.clone(), lock.clone(), deb.clone());
        let t = std::thread::spawn(move || ensure_unpacked(&c2, &l2, &deb2).map_err(|e| format!("{e:#}")));
        std::thread::sleep(std::time::Duration::from_millis(800));
        let src = cache.join("kernel/src");
        let entries: Vec<String> =
            std::fs::read_dir(&src).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(!t.is_finished(), "unpacked without the tree lock");
        assert!(entries.iter().all(|e| e.starts_with(".lab-tree.lock")), "{entries:?}");
        drop(held);
        let dir = t.join().unwrap().unwrap();
        assert_eq!(dir, tree_dir(&cache, &lock));
        assert_eq!(std::fs::read_to_string(dir.join("Makefile")).unwrap(), "all:\n");
        assert!(unpacked(&dir));
    }

    /// A .deb holding ./usr/src/linux-source-7.2.tar.xz with one Makefile.
    fn fake_kernel_deb(dir: &Path) -> PathBuf {
        let root = dir.join("deb");
        std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
        std::fs::create_dir_all(root.join("usr/src")).unwrap();
        std::fs::create_dir_all(dir.join("src/linux-source-7.2")).unwrap();
        std::fs::write(dir.join("src/linux-source-7.2/Makefile"), "all:\n").unwrap();
        std::fs::write(
            root.join("DEBIAN/control"),
            "Package: linux-source-7.2\nVersion: 7.2.0-1\nArchitecture: all\nMaintainer: lab <lab@localhost>\nDescription: test\n",
        )
        .unwrap();
        let tar = root.join("usr/src/linux-source-7.2.tar.xz");
        output(Command::new("tar").arg("-cJf").arg(&tar).arg("-C").arg(dir.join("src")).arg("linux-source-7.2"))
            .unwrap();
        let deb = dir.join("k.deb");
        output(Command::new("dpkg-deb").args(["--root-owner-group", "-b"]).arg(&root).arg(&deb)).unwrap();
        deb
    }

    #[test]
    fn another_trees_messages_name_its_own_commands() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "qemu: one");
        export(&tree, &dir).unwrap();
        std::fs::write(tree.join("drivers/a.rs"), "local edit\n").unwrap();
        std::fs::write(dir.join("series"), "").unwrap();
        let q = Names { folder: "qemu/", export: "qemu-export", reset: "qemu-reset", base: "the pinned QEMU" };
        let e = sync_series_named(&tree, &[Series::load(&dir).unwrap()], &q).unwrap_err().to_string();
        assert!(e.contains("qemu-export") && e.contains("qemu-reset") && e.contains("not in qemu/"), "{e}");
        assert!(!e.contains("driver-export") && !e.contains("driver-reset"), "{e}");
    }

    #[test]
    fn unexported_work_is_never_dropped() {
        let (_d, tree, dir) = fixture();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one");
        export(&tree, &dir).unwrap();
        std::fs::write(tree.join("drivers/a.rs"), "local edit\n").unwrap();
        // The series changes underneath (e.g. git pull): refuse, keep the edit.
        std::fs::write(dir.join("series"), "").unwrap();
        let e = sync_series(&tree, &[Series::load(&dir).unwrap()]).unwrap_err().to_string();
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

    /// rust-driver/ with one exported patch, and an extra series `extra/` patching b.c.
    fn stack_fixture() -> (tempfile::TempDir, PathBuf, Series, Series) {
        let (d, tree, dir) = fixture();
        std::fs::write(tree.join("drivers/b.c"), "int b;\n").unwrap();
        output(git(&tree).args(["add", "drivers/b.c"])).unwrap();
        output(git(&tree).args(["commit", "-q", "--amend", "--no-edit"])).unwrap();
        let base = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        std::fs::write(tree.join(".git/lab-base"), base).unwrap();
        commit(&tree, "drivers/a.rs", "fn a() { b() }\n", "rust_binder: one");
        export(&tree, &dir).unwrap();
        commit(&tree, "drivers/b.c", "long b;\n", "binder: extra");
        let extra = d.path().join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        output(git(&tree).args(format_patch_args()).arg("-o").arg(&extra).arg("HEAD~1..HEAD")).unwrap();
        std::fs::write(extra.join("series"), "0001-binder-extra.patch\n").unwrap();
        output(git(&tree).args(["reset", "-q", "--hard", "HEAD~1"])).unwrap();
        (d, tree, Series::load(&dir).unwrap(), Series::load(&extra).unwrap())
    }

    fn mtime(p: &Path) -> std::time::SystemTime {
        std::fs::metadata(p).unwrap().modified().unwrap()
    }

    #[test]
    fn stacks_switch_by_their_common_prefix() {
        let (_d, tree, rust, extra) = stack_fixture();
        let default = [rust.clone()];
        let spin = [rust.clone(), extra.clone()];
        assert_eq!(stack_hash(&default).unwrap(), rust.hash().unwrap());
        assert_ne!(stack_hash(&spin).unwrap(), stack_hash(&default).unwrap());

        sync_series(&tree, &spin).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("drivers/b.c")).unwrap(), "long b;\n");
        assert_eq!(std::fs::read_to_string(tree.join("drivers/a.rs")).unwrap(), "fn a() { b() }\n");
        let spin_head = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        let a_time = mtime(&tree.join("drivers/a.rs"));
        std::thread::sleep(std::time::Duration::from_millis(20));

        // Back to the default stack: only b.c is rewritten, a.rs (rust-driver/) is not touched.
        sync_series(&tree, &default).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("drivers/b.c")).unwrap(), "int b;\n");
        assert_eq!(mtime(&tree.join("drivers/a.rs")), a_time);
        sync_series(&tree, &spin).unwrap();
        assert_eq!(mtime(&tree.join("drivers/a.rs")), a_time);
        // Deterministic commits: the same stack gives the same HEAD however it was reached.
        assert_eq!(git_out(&tree, &["rev-parse", "HEAD"]).unwrap(), spin_head);
        reset(&tree, &spin).unwrap();
        assert_eq!(git_out(&tree, &["rev-parse", "HEAD"]).unwrap(), spin_head);
    }

    #[test]
    fn export_refuses_a_tree_carrying_an_extra_series() {
        let (_d, tree, rust, extra) = stack_fixture();
        sync_series(&tree, &[rust.clone(), extra]).unwrap();
        commit(&tree, "drivers/a.rs", "fn a() { c() }\n", "rust_binder: two");
        let before = std::fs::read_to_string(rust.dir.join("series")).unwrap();
        let e = export(&tree, &rust.dir).unwrap_err().to_string();
        assert!(e.contains("carries extra/0001-binder-extra.patch on top of rust-driver/"), "{e}");
        assert!(e.contains("rebase --onto"), "{e}");
        assert_eq!(std::fs::read_to_string(rust.dir.join("series")).unwrap(), before);
    }

    #[test]
    fn export_keeps_a_series_applied_before_it_as_its_base() {
        let (_d, tree, rust, extra) = stack_fixture();
        // extra/ first (as android-sched/ comes before rust-driver/ in every flavor).
        let stack = [extra.clone(), rust.clone()];
        sync_series(&tree, &stack).unwrap();
        commit(&tree, "drivers/a.rs", "fn a() { c() }\n", "rust_binder: two");
        let names = export(&tree, &rust.dir).unwrap();
        assert_eq!(names, ["0001-rust_binder-one.patch", "0002-rust_binder-two.patch"]);
        // The exported series holds only rust-driver/'s commits, none of extra/'s.
        let two = std::fs::read_to_string(rust.dir.join("0002-rust_binder-two.patch")).unwrap();
        assert!(two.contains("drivers/a.rs") && !two.contains("drivers/b.c"), "{two}");
        let rust = Series::load(&rust.dir).unwrap();
        // The tree now carries extra/ + the new rust-driver/: a build of that stack finds it
        // synced (no work, no re-apply), and extra/'s change is still there.
        let stack = [extra, rust];
        assert!(carries(&tree, &stack).unwrap());
        assert!(!has_work(&tree).unwrap());
        let head = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        sync_series(&tree, &stack).unwrap();
        assert_eq!(git_out(&tree, &["rev-parse", "HEAD"]).unwrap(), head);
        assert_eq!(std::fs::read_to_string(tree.join("drivers/b.c")).unwrap(), "long b;\n");
    }

    #[test]
    fn a_record_that_does_not_reach_the_head_is_ignored() {
        let (_d, tree, rust, extra) = stack_fixture();
        sync_series(&tree, &[rust.clone(), extra.clone()]).unwrap();
        // Another lab version re-applied the tree without recording: the record is stale.
        std::fs::write(tree.join(".git/lab-head"), "0".repeat(40)).unwrap();
        assert!(applied_upto(&tree, stamp(&tree, "lab-head").as_deref()).is_empty());
        let spin_head = git_out(&tree, &["rev-parse", "HEAD"]).unwrap();
        std::fs::write(tree.join(".git/lab-head"), &spin_head).unwrap();
        assert_eq!(applied_upto(&tree, Some(&spin_head)).len(), 2);
        assert_eq!(applied_upto(&tree, Some(&spin_head))[1].id, "extra/0001-binder-extra.patch");
    }

    #[test]
    fn series_lists_missing_patch() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("series"), "# c\n0001-x.patch\n").unwrap();
        assert!(Series::load(d.path()).unwrap_err().to_string().contains("0001-x.patch"));
    }
}
