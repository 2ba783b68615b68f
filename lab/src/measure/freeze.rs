//! Freeze records (`freeze/*.toml`): what the timing model was when its predictions were held
//! out. Each record names the commit, the run options (`--qemu lab --tcg hicount --cache --dvfs
//! --idle`, the policy), the repetition length, and the SHA-256 of every parameter file: the
//! board, the kernel configuration, every patch series (the QEMU series and its plugins among
//! them) and the guest programs' source. [`check`] compares a record with a tree; `lab ab`'s
//! model arm runs with the latest record's options ([`model_opts`]) and its report states what
//! the model got right and wrong at that freeze ([`trust_lines`]), read from the record and the
//! results page it names, so the lines cannot go stale.

use crate::harness::opts::RunOpts;
use crate::support::{fs::sha256_hex, paths};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the records live, in the repository.
pub const DIR: &str = "freeze";

/// The parameter files of the model, by set: every tracked file under these paths.
pub const PARAMETER_SETS: [(&str, &[&str]); 5] = [
    ("board", &["board/sa8155p.toml", "board/src/"]),
    ("kernel-config", &["kernel-config/"]),
    ("series", &["android-sched/", "rust-driver/", "c-reference/", "c-ctabs/", "kbuild-fixes/"]),
    ("qemu", &["qemu/"]),
    ("guest", &["rootfs/guest/"]),
];

/// The run options a freeze's predictions used.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Options {
    pub qemu: String,
    pub tcg: String,
    pub cache: bool,
    pub dvfs: bool,
    pub idle: bool,
    pub policy: String,
    pub board: String,
}

/// How long its runs were: boots per mode, repetitions per boot, iterations per repetition.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repetition {
    pub boots: u32,
    pub reps: u32,
    pub iterations: u32,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Freeze {
    pub number: u32,
    pub commit: String,
    pub date: String,
    /// The results page with the held-out predictions, and its section.
    pub results: String,
    pub section: String,
    pub options: Options,
    pub repetition: Repetition,
    /// Repository path -> SHA-256 of its bytes at the freeze commit, for every file of
    /// [`PARAMETER_SETS`].
    pub files: BTreeMap<String, String>,
}

impl Freeze {
    /// The options as `lab` arguments.
    pub fn option_words(&self) -> String {
        let o = &self.options;
        let mut w = vec![format!("--qemu {}", o.qemu), format!("--tcg {}", o.tcg)];
        for (on, flag) in [(o.cache, "--cache"), (o.dvfs, "--dvfs"), (o.idle, "--idle")] {
            if on {
                w.push(flag.into());
            }
        }
        w.push(format!("--policy {}", o.policy));
        w.join(" ")
    }
}

/// Every record in `dir`, oldest (lowest number) first.
pub fn load_all(dir: &Path) -> Result<Vec<Freeze>> {
    let mut out = vec![];
    let rd = std::fs::read_dir(dir).with_context(|| format!("reading the freeze records in {}", dir.display()))?;
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&p)?;
            let f: Freeze = toml::from_str(&text)
                .with_context(|| format!("{} is not a freeze record (see {DIR}/README.md)", p.display()))?;
            out.push(f);
        }
    }
    out.sort_by_key(|f| f.number);
    Ok(out)
}

/// The latest freeze of the repository.
pub fn latest() -> Result<Freeze> {
    let dir = paths::repo().join(DIR);
    load_all(&dir)?.pop().with_context(|| format!("no freeze record in {}", dir.display()))
}

/// The timing model with the latest freeze's options: what `lab ab` measures on by default.
pub fn model_opts(base: &RunOpts) -> Result<RunOpts> {
    let f = latest()?;
    let mut o = crate::measure::model::opts(base);
    o.dvfs = f.options.dvfs;
    o.idle = f.options.idle;
    o.cache = f.options.cache;
    o.policy = Some(board::Policy::parse(&f.options.policy).with_context(|| {
        format!("freeze {}: policy {:?} is neither mainline nor phone", f.number, f.options.policy)
    })?);
    Ok(o)
}

/// The tracked files of the parameter sets under `root` (a checkout), sorted.
pub fn parameter_files(root: &Path) -> Result<Vec<String>> {
    let roots: Vec<&str> = PARAMETER_SETS.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let out = crate::support::process::output(
        std::process::Command::new("git").arg("-C").arg(root).args(["ls-files", "-z", "--"]).args(&roots),
    )
    .with_context(|| format!("listing the parameter files of {} (git ls-files)", root.display()))?;
    let mut v: Vec<String> = out.split('\0').filter(|s| !s.is_empty()).map(str::to_string).collect();
    v.sort();
    Ok(v)
}

/// How `tree` differs from the record: changed, missing and new parameter files, one line
/// each; empty when the tree is still at the freeze.
pub fn check(f: &Freeze, tree: &Path, files: &[String]) -> Vec<String> {
    let mut out = vec![];
    for (path, want) in &f.files {
        match std::fs::read(tree.join(path)) {
            Ok(bytes) if &sha256_hex(&bytes) == want => {}
            Ok(_) => out.push(format!("changed: {path}")),
            Err(_) => out.push(format!("missing: {path}")),
        }
    }
    for p in files.iter().filter(|p| !f.files.contains_key(*p)) {
        out.push(format!("new: {p}"));
    }
    out
}

/// One row of the held-out table: its name, and per driver column its marks.
#[derive(Clone, Debug, PartialEq)]
pub struct Marked {
    pub row: String,
    pub marks: Vec<Vec<String>>,
}

/// The held-out table of `section` in the results page: the header names the drivers (the
/// columns after which a `marks` column follows), each line the marks of each.
pub fn held_out(page: &str, section: &str) -> Result<(Vec<String>, Vec<Marked>)> {
    let start = page
        .lines()
        .position(|l| l.starts_with("## ") && l.contains(section))
        .with_context(|| format!("no section {section:?} in the results page"))?;
    let lines: Vec<&str> = page.lines().skip(start + 1).take_while(|l| !l.starts_with("## ")).collect();
    let cells =
        |l: &str| -> Vec<String> { l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect() };
    let Some(h) = lines.iter().position(|l| l.starts_with("| row |") && l.contains("| marks |")) else {
        bail!("section {section:?}: no table with `| row |` and `| marks |` columns");
    };
    let header = cells(lines[h]);
    let mark_cols: Vec<usize> = (0..header.len()).filter(|&i| header[i] == "marks").collect();
    let drivers: Vec<String> = mark_cols.iter().map(|&i| header[i - 1].trim_end_matches(" Δ").to_string()).collect();
    let mut rows = vec![];
    for l in lines[h + 2..].iter().take_while(|l| l.starts_with('|')) {
        let c = cells(l);
        let marks = mark_cols
            .iter()
            .map(|&i| c.get(i).map(|m| m.split_whitespace().map(str::to_string).collect()).unwrap_or_default())
            .collect();
        rows.push(Marked { row: c[0].clone(), marks });
    }
    Ok((drivers, rows))
}

/// A row's kind, for the trust lines: where calls run, how fast they are, what the CPU counts.
fn kind(row: &str) -> &'static str {
    let r = row.to_lowercase();
    if r.starts_with("fifo") || r.starts_with("normal") {
        "placement"
    } else if r.contains("latency") || r.contains("throughput") {
        "latency and throughput"
    } else {
        "CPU counters"
    }
}

/// What the model got right and wrong on the seeds at `f`, by row kind, from the held-out
/// table of its results page (`page`): a few lines for ab.md, the ab guide and the README.
pub fn trust_from(f: &Freeze, page: &str) -> Result<Vec<String>> {
    let (drivers, rows) = held_out(page, &f.section)?;
    let mut out = vec![format!(
        "Timing model at freeze {} (`{}`, {}; {} boots x {} repetitions of {} iterations): seed 000's rows held out, \
         both marks right ({}):",
        f.number,
        f.commit,
        f.option_words(),
        f.repetition.boots,
        f.repetition.reps,
        f.repetition.iterations,
        f.results
    )];
    for (d, driver) in drivers.iter().enumerate() {
        // A line of the table with four marks is two rows (two tiers).
        let mut by_kind: BTreeMap<&str, (usize, usize, Vec<String>)> = BTreeMap::new();
        for r in &rows {
            let marks = &r.marks[d];
            for pair in marks.chunks(2) {
                let e = by_kind.entry(kind(&r.row)).or_default();
                e.1 += 1;
                if pair.iter().all(|m| m == "✓") {
                    e.0 += 1;
                    e.2.push(r.row.clone());
                }
            }
        }
        let (right, total): (usize, usize) = by_kind.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
        let parts: Vec<String> = by_kind
            .iter()
            .map(|(k, (r, n, names))| {
                let which = if names.is_empty() { String::new() } else { format!(": {}", names.join(", ")) };
                format!("{k} {r} of {n}{which}")
            })
            .collect();
        out.push(format!("- {driver}: {right} of {total} rows ({})", parts.join("; ")));
    }
    Ok(out)
}

/// [`trust_from`] for the latest freeze and its page in the repository.
pub fn trust_lines() -> Result<Vec<String>> {
    let f = latest()?;
    let page = paths::repo().join(&f.results);
    let text = std::fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?;
    trust_from(&f, &text)
}

/// Pages that carry the trust lines, between [`BEGIN`] and [`END`].
pub const TRUST_PAGES: [&str; 2] = ["README.md", "docs/src/guide/ab.md"];
pub const BEGIN: &str = "<!-- generated from freeze/ by `cargo make docs --write-reference`: do not edit -->";
pub const END: &str = "<!-- end of the generated lines -->";

/// `text` with the lines between its markers replaced by `lines`; None without markers.
pub fn fill(text: &str, lines: &[String]) -> Option<String> {
    let a = text.find(BEGIN)? + BEGIN.len();
    let b = a + text[a..].find(END)?;
    Some(format!("{}\n{}\n{}", &text[..a], lines.join("\n"), &text[b..]))
}

/// The trust pages whose generated lines are not the latest freeze's.
pub fn trust_problems(repo: &Path) -> Vec<String> {
    let lines = match trust_lines() {
        Ok(l) => l,
        Err(e) => return vec![format!("the freeze's trust lines: {e:#}")],
    };
    TRUST_PAGES
        .iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(repo.join(p)).unwrap_or_default();
            match fill(&text, &lines) {
                None => Some(format!("{p}: no generated trust lines (the markers `{BEGIN}` and `{END}`)")),
                Some(t) if t != text => Some(format!(
                    "{p}: the trust lines are not the latest freeze's: run `cargo make docs --write-reference`"
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// Rewrites the trust lines of every trust page.
pub fn write_trust(repo: &Path) -> Result<()> {
    let lines = trust_lines()?;
    for p in TRUST_PAGES {
        let path = repo.join(p);
        let text = std::fs::read_to_string(&path)?;
        let new = fill(&text, &lines).with_context(|| format!("{p}: no markers for the trust lines"))?;
        if new != text {
            crate::support::fs::write_atomic(&path, new.as_bytes())?;
        }
    }
    Ok(())
}

/// The record's path for `f` in `dir`.
pub fn path_of(dir: &Path, f: &Freeze) -> PathBuf {
    dir.join(format!("{:04}-{}.toml", f.number, f.commit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_parse_and_cover_every_parameter_set() {
        let all = load_all(&paths::repo().join(DIR)).unwrap();
        let f = all.last().unwrap();
        assert_eq!((f.number, f.commit.as_str()), (2, "1d52bd8"));
        assert_eq!(f.option_words(), "--qemu lab --tcg hicount --cache --dvfs --idle --policy phone");
        assert_eq!(f.repetition, Repetition { boots: 5, reps: 2, iterations: 400 });
        for (set, roots) in PARAMETER_SETS {
            for r in roots {
                assert!(f.files.keys().any(|p| p.starts_with(r)), "{set}: nothing under {r}");
            }
        }
        assert!(f.files.keys().any(|p| p.starts_with("qemu/plugins/")), "the plugins' sources");
        assert!(f.files.values().all(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())));
    }

    #[test]
    fn check_names_changed_missing_and_new_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("qemu")).unwrap();
        std::fs::write(d.path().join("qemu/series"), "0001.patch\n").unwrap();
        std::fs::write(d.path().join("qemu/0001.patch"), "x").unwrap();
        let mut f = latest().unwrap();
        f.files = [
            ("qemu/series".to_string(), sha256_hex(b"0001.patch\n")),
            ("qemu/0001.patch".to_string(), sha256_hex(b"x")),
            ("qemu/0002.patch".to_string(), sha256_hex(b"y")),
        ]
        .into();
        let listed = vec!["qemu/0001.patch".to_string(), "qemu/series".to_string()];
        assert_eq!(check(&f, d.path(), &listed), ["missing: qemu/0002.patch"]);
        std::fs::write(d.path().join("qemu/0001.patch"), "x2").unwrap();
        let more = [listed, vec!["qemu/0003.patch".to_string()]].concat();
        assert_eq!(
            check(&f, d.path(), &more),
            ["changed: qemu/0001.patch", "missing: qemu/0002.patch", "new: qemu/0003.patch"]
        );
    }

    #[test]
    fn the_seed_freeze_matches_its_commit() {
        // The record holds the bytes of 1d52bd8: hash them again from git where the history
        // is there (a shallow clone may lack it).
        let f = latest().unwrap();
        let repo = paths::repo();
        let show = |p: &str| {
            std::process::Command::new("git").arg("-C").arg(&repo).args(["show", &format!("{}:{p}", f.commit)]).output()
        };
        let Ok(o) = show("board/sa8155p.toml") else { return };
        if !o.status.success() {
            return;
        }
        for (p, want) in f.files.iter().step_by(7) {
            let o = show(p).unwrap();
            assert_eq!(&sha256_hex(&o.stdout), want, "{p}");
        }
    }

    #[test]
    fn the_pages_carry_the_current_trust_lines() {
        assert_eq!(trust_problems(&paths::repo()), Vec::<String>::new());
        let t = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        assert_eq!(fill(&t, &["new".to_string()]).unwrap(), format!("a\n{BEGIN}\nnew\n{END}\nb\n"));
        assert_eq!(fill("no markers", &[]), None);
    }

    #[test]
    fn trust_lines_come_from_the_results_page() {
        let f = latest().unwrap();
        let lines = trust_lines().unwrap();
        assert!(lines[0].starts_with("Timing model at freeze 2 (`1d52bd8`, --qemu lab --tcg hicount"), "{lines:?}");
        // The page's own count: both marks right on 2 of 15 rows (Rust), 3 of 15 (C).
        assert!(lines[1].starts_with("- Rust port: 2 of 15 rows"), "{lines:?}");
        assert!(lines[2].starts_with("- C driver: 3 of 15 rows"), "{lines:?}");
        assert!(lines[1].contains("CPU counters 2 of 5: cache misses, CPU migrations"), "{lines:?}");
        // Another table gives other lines: they follow the page.
        let page = format!(
            "## {}\n\n| row | seed | Rust port Δ | marks |\n| --- | --- | --- | --- |\n| throughput | x | y | ✓ ✓ |\n",
            f.section
        );
        let t = trust_from(&f, &page).unwrap();
        assert_eq!(t[1], "- Rust port: 1 of 1 rows (latency and throughput 1 of 1: throughput)");
        assert!(trust_from(&f, "## other\n").unwrap_err().to_string().contains("no section"));
    }
}
