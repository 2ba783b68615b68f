//! The shell blocks of README.md and docs/src/guide run as written (lab/src/cli/doc_blocks.rs
//! says how a page marks them): the `quick` ones here, the `slow` ones under `--ignored`
//! (`cargo make test-slow`). Each test prints the blocks not run with their reasons, runs
//! every block of its kind and fails naming each block whose command failed.

use lab::cli::doc_blocks::{self, Block, Mark, Place, Setting};
use lab::support::paths;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the blocks marked `slow == want_slow` (only those whose `page:line` contains
/// `$LAB_DOC_BLOCKS`, when set); fails with the ones that failed.
fn run_blocks(want_slow: bool) {
    let repo = paths::repo();
    let blocks = doc_blocks::blocks(&repo).unwrap();
    let bad = doc_blocks::unmarked(&blocks);
    assert!(bad.is_empty(), "unmarked shell blocks:\n{}", bad.join("\n"));
    eprintln!("shell blocks not run, with their reasons:\n{}", doc_blocks::not_run(&blocks));
    let mine: Vec<&Block> = blocks
        .iter()
        .filter(|b| matches!(b.mark, Some(Ok(Mark::Run { slow, .. })) if slow == want_slow))
        .filter(|b| std::env::var("LAB_DOC_BLOCKS").map_or(true, |f| b.name().contains(&f)))
        .collect();
    if let Ok(f) = std::env::var("LAB_DOC_BLOCKS") {
        assert!(!mine.is_empty(), "LAB_DOC_BLOCKS={f}: no block of this kind is at a page:line containing it");
    }
    eprintln!("running {} block(s): {}", mine.len(), mine.iter().map(|b| b.name()).collect::<Vec<_>>().join(", "));
    let mut lava = None;
    let mut failed = vec![];
    for b in mine {
        let Some(Ok(Mark::Run { place, exit, lava: needs_lava, .. })) = &b.mark else { unreachable!() };
        let scratch = tempfile::tempdir().unwrap();
        let mut env = vec![("EDITOR".to_string(), editor(scratch.path()).display().to_string())];
        env.extend(git_identity());
        if *needs_lava {
            let l: &lab_tests::lava::LocalLava = lava.get_or_insert_with(lab_tests::lava::LocalLava::start);
            env.extend([
                ("LAVA_SERVER".into(), l.url.clone()),
                ("LAVA_USER".into(), lab_tests::lava::LAVA_USER.into()),
                ("LAVA_TOKEN".into(), l.token.clone()),
            ]);
        }
        let dir = match place {
            Place::Checkout => repo.clone(),
            Place::Scratch => {
                let page = std::fs::read_to_string(repo.join(&b.page)).unwrap();
                for (name, body) in doc_blocks::page_files(&page) {
                    let p = scratch.path().join(name);
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, body).unwrap();
                }
                env.push(("LAB".into(), repo.display().to_string()));
                scratch.path().to_path_buf()
            }
            Place::Clone => fresh_clone(&repo, scratch.path()),
            Place::Copy => {
                let (copy, cache) = checkout_copy(&repo);
                env.push(("BINDER_LAB_CACHE".into(), cache.display().to_string()));
                copy
            }
        };
        if let Err(e) = doc_blocks::run(b, &Setting { dir, env, exit: *exit }) {
            eprintln!("FAILED {e:#}");
            failed.push(b.name());
        }
    }
    assert!(failed.is_empty(), "blocks whose commands failed (their output is above): {failed:?}");
}

/// `$EDITOR` for the recipes that edit a file: appends a line the file's language reads as a
/// comment, so the edit is real (a rebuild, a commit) and harmless; a commit message gets a
/// line of text.
fn editor(dir: &Path) -> PathBuf {
    let p = dir.join("doc-test-editor");
    std::fs::write(
        &p,
        "#!/bin/sh\ncase \"$1\" in\n  *.rs) echo '// an edit by tests/tests/doc_blocks.rs' >> \"$1\" ;;\n  \
         *.c|*.h) echo '/* an edit by tests/tests/doc_blocks.rs */' >> \"$1\" ;;\n  \
         *) echo 'doc test: an edit by tests/tests/doc_blocks.rs' >> \"$1\" ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// A committer for `git commit` in the recipes, whatever the machine's git configuration.
fn git_identity() -> Vec<(String, String)> {
    ["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"]
        .map(|k| (k.to_string(), "binder-lab doc test".to_string()))
        .into_iter()
        .chain(["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"].map(|k| (k.to_string(), "doc-test@localhost".to_string())))
        .collect()
}

/// A fresh `git clone` of the checkout under `scratch`, at a path too deep for a unix
/// socket's 108 bytes (the README's quick start from wherever a new user clones), with the
/// checkout's uncommitted changes copied in (the page under test may be one of them). It
/// uses this machine's cache, as a second clone would: its kernel is a cache hit.
fn fresh_clone(repo: &Path, scratch: &Path) -> PathBuf {
    let mut deep = scratch.to_path_buf();
    while deep.as_os_str().len() < 120 {
        deep.push("a-directory-some-levels-down");
    }
    let clone = deep.join("binder-lab");
    let git = |dir: &Path, args: &[&str]| {
        let o = Command::new("git").current_dir(dir).args(args).output().unwrap();
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    std::fs::create_dir_all(&deep).unwrap();
    git(&deep, &["clone", "--quiet", "--no-local", &repo.display().to_string(), "binder-lab"]);
    let changed = git(repo, &["ls-files", "-z", "--modified", "--others", "--exclude-standard"]);
    for f in changed.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(f).unwrap());
        let (from, to) = (repo.join(rel), clone.join(rel));
        if from.is_file() {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&from, &to).unwrap();
        } else {
            let _ = std::fs::remove_file(&to);
        }
    }
    clone
}

/// A copy of the checkout (its tracked and untracked files, not target/) in
/// target/doc-blocks/checkout, refreshed on every call but keeping its own target/ so the lab
/// builds there once, and a cache of its own beside it: a recipe that commits into the
/// prepared trees and exports into rust-driver/ or qemu/ changes neither this checkout nor
/// the trees other checkouts share. The first run builds that cache's kernel and QEMU.
fn checkout_copy(repo: &Path) -> (PathBuf, PathBuf) {
    let root = repo.join("target/doc-blocks");
    let (copy, cache) = (root.join("checkout"), root.join("cache"));
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(&copy).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n != "target") {
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
    let files = Command::new("git")
        .current_dir(repo)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .unwrap();
    assert!(files.status.success(), "git ls-files: {}", String::from_utf8_lossy(&files.stderr));
    for f in files.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(f).unwrap());
        let (from, to) = (repo.join(rel), copy.join(rel));
        if from.is_file() {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&from, &to).unwrap();
        }
    }
    // The trees of an earlier run still carry that run's commits: back to the series.
    if cache.exists() {
        for reset in ["driver-reset", "qemu-reset"] {
            let _ = Command::new(copy.join("lab.sh")).arg(reset).env("BINDER_LAB_CACHE", &cache).status();
        }
    }
    (copy, cache)
}

#[test]
fn quick_shell_blocks_of_the_readme_and_the_guide_run() {
    run_blocks(false);
}

#[test]
#[ignore = "the slow recipes: kernel and QEMU rebuilds in a cache of their own, guest builds from crates.io, LAVA (cargo make setup --lava); cargo make test-slow"]
fn slow_shell_blocks_of_the_readme_and_the_guide_run() {
    run_blocks(true);
}
