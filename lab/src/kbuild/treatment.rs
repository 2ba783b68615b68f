//! A treatment kernel (`lab ab`): a base flavor plus patches the engineer brings, applied as
//! commits on the base's stack.
//!
//! The patches are copied into the cache as a series of their own,
//! `<cache>/ab/series/<hash>/` (hash of their bytes in order), and the treatment is the
//! flavor `<base>+ab-<hash>`: the base's fragments and stack plus that series. So its
//! content key includes the patches, it has its own O= directory (seeded from the base's,
//! see [`crate::kbuild::kernel`]) and published builds, and every command that takes a
//! flavor name boots it.

use crate::kbuild::flavor;
use crate::kbuild::tree::{self, Series};
use crate::support::fs::{publish_dir, sha256_hex};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub use crate::kbuild::flavor::{
    split_treatment as split, TREATMENT_HASH_LEN as HASH_LEN, TREATMENT_ROOT as SERIES_ROOT, TREATMENT_TAG as TAG,
};

/// Where the patches come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// One patch file (`git format-patch` output, or a plain unified diff).
    Patch(PathBuf),
    /// A directory with a `series` file (the lab's own layout: `c-reference/`).
    Series(PathBuf),
    /// The commits of a git tree from the base stack's last commit to REV (`DIR@REV`, default HEAD).
    Tree { dir: PathBuf, rev: String },
}

impl Source {
    /// `--tree DIR[@REV]`.
    pub fn tree(spec: &str) -> Source {
        match spec.rsplit_once('@') {
            Some((d, r)) if !r.is_empty() && Path::new(d).is_dir() => Source::Tree { dir: d.into(), rev: r.into() },
            _ => Source::Tree { dir: spec.into(), rev: "HEAD".into() },
        }
    }
}

/// One patch of a treatment: where it came from and its bytes, as `git am` takes them.
#[derive(Clone, Debug)]
pub struct Patch {
    pub origin: String,
    pub text: String,
}

/// True when `text` holds a unified diff git can apply.
fn is_patch(text: &str) -> bool {
    let has = |p: &str| text.lines().any(|l| l.starts_with(p));
    (has("diff --git ") || (has("--- ") && has("+++ "))) && has("@@ ")
}

/// The date a mail without one gets: `git am` would take the current time, and the commit
/// ids, so the tree state and the kernel's cache key, would change with every sync.
const FIXED_DATE: &str = "Date: Sat, 1 Jan 2000 00:00:00 +0000";

/// A plain diff gets the mail header `git am` needs (subject: the file's name), and a mail
/// without a date the fixed one.
fn as_mail(text: &str, name: &str) -> String {
    let mailish =
        text.starts_with("From ") || text.lines().take_while(|l| !l.is_empty()).any(|l| l.starts_with("Subject:"));
    if !mailish {
        return format!(
            "From: binder-lab ab <lab@localhost>\n{FIXED_DATE}\nSubject: [PATCH] {name}\n\n{name}, a plain diff given to `lab ab`.\n---\n{text}"
        );
    }
    let header = text.split("\n\n").next().unwrap_or("");
    if header.lines().any(|l| l.starts_with("Date:")) {
        return text.to_string();
    }
    match text.find("\nSubject:") {
        Some(i) => format!("{}\n{FIXED_DATE}{}", &text[..i], &text[i..]),
        None => text.to_string(),
    }
}

fn read_patch(path: &Path) -> Result<Patch> {
    if !path.is_file() {
        bail!(
            "--patch {}: no such file (give the path of a `git format-patch` file or a unified diff)",
            path.display()
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!("{}: not a patch (not UTF-8 text); give a `git format-patch` file", path.display())
    })?;
    if !is_patch(&text) {
        bail!(
            "{}: not a patch (no `diff --git`/`---`/`+++` header with a `@@` hunk); give a `git format-patch` file \
             or the output of `git diff`",
            path.display()
        );
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Patch { origin: path.display().to_string(), text: as_mail(&text, &name) })
}

/// A relative series directory is looked up from the working directory, then in the repository
/// (`--series c-reference`).
fn series_dir(dir: &Path) -> PathBuf {
    if dir.is_relative() && !dir.join("series").is_file() {
        let in_repo = crate::support::paths::repo().join(dir);
        if in_repo.join("series").is_file() {
            return in_repo;
        }
    }
    dir.to_path_buf()
}

/// The patches of the sources, in order. `base_head` is the commit the base stack ends in
/// (a `--tree` must descend from it).
pub fn gather(sources: &[Source], base_head: Option<&str>) -> Result<Vec<Patch>> {
    let mut out = vec![];
    for s in sources {
        match s {
            Source::Patch(p) => out.push(read_patch(p)?),
            Source::Series(d) => {
                let d = series_dir(d);
                if !d.join("series").is_file() {
                    bail!("--series {}: no `series` file there (one patch file name per line)", d.display());
                }
                let series = Series::load(&d)?;
                if series.patches.is_empty() {
                    bail!("--series {}: its `series` file lists no patches", d.display());
                }
                for p in &series.patches {
                    out.push(read_patch(&d.join(p))?);
                }
            }
            Source::Tree { dir, rev } => out.extend(tree_patches(dir, rev, base_head)?),
        }
    }
    if out.is_empty() {
        bail!("no patches: give --patch FILE (repeatable), --series DIR or --tree GIT_DIR[@REV]");
    }
    Ok(out)
}

/// The commits of `dir` between the base stack's head and `rev`, as patches.
fn tree_patches(dir: &Path, rev: &str, base_head: Option<&str>) -> Result<Vec<Patch>> {
    if !dir.join(".git").exists() && !dir.join("HEAD").is_file() {
        bail!("--tree {}: not a git repository", dir.display());
    }
    let Some(head) = base_head else {
        bail!(
            "--tree {}: the shared kernel tree has not carried the base's series yet, so there is no commit to \
             start from; run `cargo make kernel --flavor <base>` once, or give the patches with --patch",
            dir.display()
        );
    };
    let has = tree::git(dir).args(["cat-file", "-e", &format!("{head}^{{commit}}")]).output()?;
    if !has.status.success() {
        bail!(
            "--tree {}: it has no commit {head} (the base flavor's last patch in the lab's kernel tree); clone the \
             lab's tree (`cargo make driver-tree` prints it) and commit on top, or give the patches with --patch",
            dir.display()
        );
    }
    let range = format!("{head}..{rev}");
    let out = tree::git(dir).args(["format-patch", "--stdout", "--no-signature", "--zero-commit", &range]).output()?;
    if !out.status.success() {
        bail!(
            "--tree {}: git format-patch {range} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let all = String::from_utf8_lossy(&out.stdout).into_owned();
    // One mail per commit: each starts with a `From <sha> ...` line.
    let mut patches = vec![];
    for (i, mail) in split_mbox(&all).into_iter().enumerate() {
        patches.push(Patch { origin: format!("{}@{rev} commit {}", dir.display(), i + 1), text: mail });
    }
    if patches.is_empty() {
        bail!("--tree {}: no commits in {range}", dir.display());
    }
    Ok(patches)
}

fn split_mbox(all: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for line in all.split_inclusive('\n') {
        if line.starts_with("From ") && line.len() > 45 || out.is_empty() {
            out.push(String::new());
        }
        out.last_mut().expect("pushed").push_str(line);
    }
    out.retain(|m| is_patch(m));
    out
}

/// A treatment's series in the cache.
#[derive(Clone, Debug)]
pub struct Treatment {
    pub hash: String,
    pub dir: PathBuf,
    /// Where each patch came from, in order.
    pub origins: Vec<String>,
}

impl Treatment {
    /// The treatment's flavor name on `base`.
    pub fn flavor(&self, base: &str) -> String {
        format!("{base}{TAG}{}", self.hash)
    }
}

/// The patches' content hash: names don't matter, bytes and order do.
pub fn hash(patches: &[Patch]) -> String {
    let mut all = vec![];
    for p in patches {
        all.extend(p.text.as_bytes());
        all.push(0);
    }
    sha256_hex(&all)[..HASH_LEN].to_string()
}

/// Writes the patches as a series under `cache` (atomically; kept if already there).
pub fn store(cache: &Path, patches: &[Patch]) -> Result<Treatment> {
    let h = hash(patches);
    let dir = cache.join(SERIES_ROOT).join(&h);
    let origins = patches.iter().map(|p| p.origin.clone()).collect();
    if dir.join("series").is_file() {
        return Ok(Treatment { hash: h, dir, origins });
    }
    std::fs::create_dir_all(dir.parent().expect("under the cache"))?;
    publish_dir(&dir, |tmp| {
        let mut list = String::from("# Patches given to `lab ab`, applied in order on the base flavor's stack.\n");
        for (i, p) in patches.iter().enumerate() {
            let name = format!("{:04}.patch", i + 1);
            std::fs::write(tmp.join(&name), &p.text)?;
            list.push_str(&format!("{name}\n"));
        }
        std::fs::write(tmp.join("origins"), patches.iter().map(|p| format!("{}\n", p.origin)).collect::<String>())?;
        std::fs::write(tmp.join("series"), list)?;
        Ok(())
    })?;
    Ok(Treatment { hash: h, dir, origins })
}

/// The debug flavor that goes with `base`: `debug` for perf, `<base>-debug` when there is one,
/// the base itself when it is a debug flavor.
pub fn debug_of(base: &str) -> Option<String> {
    let names = flavor::names();
    if base == "debug" || base.ends_with("-debug") {
        return Some(base.to_string());
    }
    if base == flavor::DEFAULT {
        return Some("debug".into());
    }
    let d = format!("{base}-debug");
    names.contains(&d).then_some(d)
}

/// Why a patch does not apply on the commit `head` of `src`: checked in a scratch index
/// (the shared tree's files are not touched, so no tree lock), each patch on the ones before.
/// None when every patch applies.
pub fn check_applies(src: &Path, head: &str, patches: &[Patch], base: &str) -> Result<Option<String>> {
    let idx = tempfile::NamedTempFile::new()?;
    let out = tree::git(src).env("GIT_INDEX_FILE", idx.path()).args(["read-tree", head]).output()?;
    if !out.status.success() {
        bail!("reading the base commit {head} in {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    }
    for p in patches {
        let mut f = tempfile::NamedTempFile::new()?;
        std::io::Write::write_all(&mut f, p.text.as_bytes())?;
        let out = tree::git(src)
            .env("GIT_INDEX_FILE", idx.path())
            .args(["apply", "-v", "--cached"])
            .arg(f.path())
            .output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            return Ok(Some(explain_failure(&p.origin, &p.text, &err, base, head)));
        }
    }
    Ok(None)
}

/// The message for a patch that does not apply: the file, the hunk, the base it was tried on.
fn explain_failure(origin: &str, text: &str, err: &str, base: &str, head: &str) -> String {
    let mut where_ = String::new();
    if let Some(l) = err.lines().find_map(|l| l.strip_prefix("error: patch failed: ")) {
        if let Some((file, line)) = l.rsplit_once(':') {
            let n = hunk_number(text, file, line.trim().parse().unwrap_or(0));
            where_ = match n {
                Some(n) => format!("hunk #{n} of {file} (at line {line})"),
                None => format!("{file} at line {line}"),
            };
        }
    } else if let Some(l) = err.lines().find(|l| l.starts_with("error:")) {
        where_ = l.trim_start_matches("error: ").to_string();
    }
    let searching: String = err
        .split("error: while searching for:\n")
        .nth(1)
        .map(|s| s.split("\nerror:").next().unwrap_or("").lines().take(12).map(|l| format!("    {l}\n")).collect())
        .unwrap_or_default();
    format!(
        "patch {origin} does not apply to the {base} flavor's tree (commit {}): {where_}\n{}{}Rebase the patch onto \
         that tree (`cargo make driver-tree` shows it), or pick the base it was written for with --base.",
        &head[..head.len().min(12)],
        if searching.is_empty() { String::new() } else { "  context not found:\n".into() },
        searching
    )
}

/// The number (from 1) of the hunk of `file` in `text` whose old range starts at `line`.
fn hunk_number(text: &str, file: &str, line: u64) -> Option<usize> {
    let mut in_file = false;
    let mut n = 0;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("--- ") {
            in_file = rest.trim_start_matches("a/") == file;
            n = 0;
        } else if in_file && l.starts_with("@@ -") {
            n += 1;
            let start: u64 = l[4..].split([',', ' ']).next()?.parse().ok()?;
            if start == line {
                return Some(n);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::process::output;

    const DIFF: &str = "--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";

    #[test]
    fn non_patches_and_missing_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = gather(&[Source::Patch(d.path().join("nope.patch"))], None).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        std::fs::write(d.path().join("notes.txt"), "just some text\n").unwrap();
        let e = gather(&[Source::Patch(d.path().join("notes.txt"))], None).unwrap_err().to_string();
        assert!(e.contains("not a patch"), "{e}");
        std::fs::write(d.path().join("bin.patch"), [0xff, 0xfe, 0]).unwrap();
        assert!(gather(&[Source::Patch(d.path().join("bin.patch"))], None)
            .unwrap_err()
            .to_string()
            .contains("not a patch"));
        assert!(gather(&[], None).unwrap_err().to_string().contains("no patches"));
        let e = gather(&[Source::Series(d.path().to_path_buf())], None).unwrap_err().to_string();
        assert!(e.contains("no `series` file"), "{e}");
    }

    #[test]
    fn plain_diffs_get_a_mail_header_and_the_hash_follows_the_bytes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("x.diff"), DIFF).unwrap();
        let p = gather(&[Source::Patch(d.path().join("x.diff"))], None).unwrap();
        assert!(p[0].text.starts_with("From: ") && p[0].text.contains("Subject: [PATCH] x.diff"), "{}", p[0].text);
        assert!(p[0].text.contains(FIXED_DATE), "{}", p[0].text);
        // A mail without a date gets the fixed one, one with a date keeps it.
        let mail = "From 0000 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] x\n\nwhy\n---\n";
        assert!(as_mail(mail, "m").contains(&format!("From: a <a@b>\n{FIXED_DATE}\nSubject:")));
        let dated = mail.replace("Subject:", "Date: Mon, 2 Jan 2006 15:04:05 +0000\nSubject:");
        assert_eq!(as_mail(&dated, "m"), dated);
        let h = hash(&p);
        assert_eq!(h.len(), HASH_LEN);
        let cache = d.path().join("cache");
        let t = store(&cache, &p).unwrap();
        assert_eq!(t.flavor("perf"), format!("perf+ab-{h}"));
        assert_eq!(split(&t.flavor("cbinder")), Some(("cbinder", h.as_str())));
        assert_eq!(split("perf+1234abcd"), None);
        assert_eq!(Series::load(&t.dir).unwrap().patches, ["0001.patch"]);
        std::fs::write(d.path().join("x.diff"), DIFF.replace("+B", "+C")).unwrap();
        let q = gather(&[Source::Patch(d.path().join("x.diff"))], None).unwrap();
        assert_ne!(hash(&q), h);
        // A treatment's flavor is the base's plus the series, seeded from the base's O= dir.
        let f = flavor::load_treatment(&cache, flavor::load("perf").unwrap(), &h).unwrap();
        assert_eq!(f.series.last().unwrap(), &t.dir.display().to_string());
        assert_eq!((f.seed.as_deref(), f.name.as_str()), (Some("perf"), t.flavor("perf").as_str()));
        let e = flavor::load_treatment(&cache, flavor::load("perf").unwrap(), "000000000000").unwrap_err().to_string();
        assert!(e.contains("not in") && e.contains("cargo make ab"), "{e}");
    }

    /// A git repository with f.c holding `text` in one commit, and that commit.
    fn repo_with(text: &str) -> (tempfile::TempDir, String) {
        let d = tempfile::tempdir().unwrap();
        let src = d.path();
        std::fs::write(src.join("f.c"), text).unwrap();
        output(tree::git(src).args(["init", "-q"])).unwrap();
        output(tree::git(src).args(["add", "f.c"])).unwrap();
        output(tree::git(src).args(["commit", "-q", "-m", "base"])).unwrap();
        let head = output(tree::git(src).args(["rev-parse", "HEAD"])).unwrap().trim().to_string();
        (d, head)
    }

    #[test]
    fn a_patch_that_does_not_apply_names_file_hunk_and_base() {
        let (d, head) = repo_with("a\nb\nc\nd\ne\nf\ng\nh\n");
        let src = d.path();
        let good = Patch { origin: "good.patch".into(), text: as_mail(DIFF, "good") };
        // Its second hunk's context is not in the file.
        let bad_text = format!("{DIFF}@@ -6,3 +6,3 @@\n f\n-zz\n+G\n h\n");
        let bad = Patch { origin: "bad.patch".into(), text: as_mail(&bad_text, "bad") };
        assert_eq!(check_applies(src, &head, std::slice::from_ref(&good), "perf").unwrap(), None);
        let e = check_applies(src, &head, &[bad], "perf").unwrap().unwrap();
        assert!(e.starts_with("patch bad.patch does not apply to the perf flavor's tree"), "{e}");
        assert!(e.contains("hunk #2 of f.c (at line 6)") && e.contains("    zz"), "{e}");
        // Patches apply on the ones before: the same change twice does not.
        let again = Patch { origin: "again.patch".into(), ..good.clone() };
        let e = check_applies(src, &head, &[good, again], "perf").unwrap().unwrap();
        assert!(e.contains("again.patch") && e.contains("hunk #1 of f.c"), "{e}");
        assert_eq!(std::fs::read_to_string(src.join("f.c")).unwrap(), "a\nb\nc\nd\ne\nf\ng\nh\n", "tree untouched");
    }

    #[test]
    fn tree_commits_since_the_base_head_become_patches() {
        let (d, head) = repo_with("a\nb\nc\n");
        let src = d.path();
        for (i, t) in ["a\nB\nc\n", "a\nB\nC\n"].iter().enumerate() {
            std::fs::write(src.join("f.c"), t).unwrap();
            output(tree::git(src).args(["commit", "-q", "-a", "-m", &format!("change {i}")])).unwrap();
        }
        let p = gather(&[Source::tree(&format!("{}@HEAD", src.display()))], Some(&head)).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p[0].text.contains("Subject: [PATCH 1/2] change 0"), "{}", p[0].text);
        let one = gather(&[Source::tree(&format!("{}@HEAD~1", src.display()))], Some(&head)).unwrap();
        assert_eq!(one.len(), 1);
        let e = gather(&[Source::tree(&src.display().to_string())], Some(&"0".repeat(40))).unwrap_err().to_string();
        assert!(e.contains("has no commit"), "{e}");
    }

    #[test]
    fn debug_flavors_pair_with_their_base() {
        assert_eq!(debug_of("perf").as_deref(), Some("debug"));
        assert_eq!(debug_of("cbinder").as_deref(), Some("cbinder-debug"));
        assert_eq!(debug_of("cbinder-spin").as_deref(), Some("cbinder-spin-debug"));
        assert_eq!(debug_of("debug").as_deref(), Some("debug"));
    }
}
