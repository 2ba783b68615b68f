//! Architecture checks on the source tree (like rust-analyzer's `tidy`): every module of
//! `lab/src/<stage>/` may import only its own stage and the stages below it, and no modules
//! of the lab, the board crate or a guest crate import each other in a cycle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The stages, lowest first: a module may use `crate::X` only for X at or below its own.
const STAGES: [&str; 8] = ["support", "numbers", "provision", "kbuild", "harness", "report", "measure", "cli"];
/// Files at the crate root that belong to no stage.
const ROOT_FILES: [&str; 3] = ["lib.rs", "main.rs", "tidy.rs"];

fn rank(stage: &str) -> Option<usize> {
    STAGES.iter().position(|s| *s == stage)
}

/// The source without `//` comments (doc comments included: intra-doc links are not
/// imports) and without the contents of string literals.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut prev = '\0';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_str && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = if prev == '\\' && c == '\\' { '\0' } else { c };
        }
        out.push('\n');
    }
    out
}

/// The first segments of every `crate::` path in `code`, expanding `crate::{a, b::c}`.
fn crate_roots(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `mycrate::`
        }
        let rest = code[i + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            for item in split_top(group) {
                let id = ident(item.trim_start());
                if !id.is_empty() {
                    out.insert(id);
                }
            }
        } else {
            let id = ident(rest);
            if !id.is_empty() {
                out.insert(id);
            }
        }
    }
    out
}

/// The top-level comma-separated items of a `{...}` group (up to its closing brace).
fn split_top(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0, vec![]);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// Back-imports in one file of `stage`: "`stage` -> `target`" for each target above it,
/// and "unknown module" for a target that is no stage.
fn violations(stage: &str, src: &str) -> Vec<String> {
    let own = rank(stage).expect("a known stage");
    let mut out = vec![];
    for root in crate_roots(&code_only(src)) {
        match rank(&root) {
            Some(r) if r > own => out.push(format!("{stage} imports {root}, a later stage")),
            Some(_) => {}
            None if root == "tidy" => out.push(format!("{stage} imports tidy")),
            None => out.push(format!("{stage} uses crate::{root}, which is no stage ({})", STAGES.join(", "))),
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `crate::` path in `code` as its segments, groups expanded
/// (`crate::{a::b, c::{d, e}}` gives `a::b`, `c::d`, `c::e`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = vec![];
    for (i, _) in code.match_indices("crate::") {
        if code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        expand(&code[i + "crate::".len()..], &mut vec![], &mut out);
    }
    out
}

/// `code` without the bodies of `#[cfg(test)] mod x { ... }`: a `super::` in there is the
/// file's own module, not its parent.
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        let after = &rest[i + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        // `mod x {`, `pub mod x {`, `pub(crate) mod x {`.
        let is_mod = item.split(['{', ';']).next().is_some_and(|head| head.split_whitespace().any(|w| w == "mod"));
        let open = item.find('{').filter(|&o| is_mod && item.find(';').is_none_or(|semi| o < semi));
        out.push_str(&rest[..i]);
        let Some(open) = open else {
            rest = after;
            continue;
        };
        let body = &item[open..];
        let mut depth = 0usize;
        let end = body
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(body.len(), |(j, _)| j + 1);
        rest = &body[end..];
    }
    out + rest
}

/// Every module path the code of module `m` names, as segments from the crate root:
/// `crate::` paths, `self::` and `super::` paths (`super::super::` too) made absolute, and paths
/// through the child modules `m` declares (`mod lava;` then `lava::submit`).
fn module_paths(m: &str, code: &str) -> Vec<Vec<String>> {
    let code = without_test_modules(code);
    // The crate root's own path is empty: its children are the top-level modules.
    let own: Vec<String> =
        if matches!(m, "lib" | "main" | "") { vec![] } else { m.split("::").map(String::from).collect() };
    let starts_path =
        |i: usize| !code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
    let mut out = crate_paths(&code);
    // `base(n)`: the module a path starting with `word::` and n more `super::` names.
    let mut relative = |word: &str, base: &dyn Fn(usize) -> Option<Vec<String>>| {
        let needle = format!("{word}::");
        for (i, _) in code.match_indices(&needle) {
            if !starts_path(i) {
                continue;
            }
            let mut rest = &code[i + needle.len()..];
            let mut up = 0;
            while let Some(r) = rest.trim_start().strip_prefix("super::").filter(|_| word == "super") {
                rest = r;
                up += 1;
            }
            let Some(mut prefix) = base(up) else { continue };
            expand(rest, &mut prefix, &mut out);
        }
    };
    relative("self", &|_| Some(own.clone()));
    relative("super", &|ups| own.len().checked_sub(1 + ups).map(|n| own[..n].to_vec()));
    let children: BTreeSet<String> = regex::Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;")
        .unwrap()
        .captures_iter(&code)
        .map(|c| c[1].to_string())
        .collect();
    for child in &children {
        relative(child, &|_| Some(own.iter().cloned().chain([child.clone()]).collect()));
    }
    out
}

/// Parses one use tree from `s` after `prefix`; returns the rest of `s`.
fn expand<'a>(mut s: &'a str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> &'a str {
    let depth = prefix.len();
    loop {
        s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            s = group;
            loop {
                s = expand(s, prefix, out).trim_start();
                match s.chars().next() {
                    Some(',') => s = &s[1..],
                    Some('}') => {
                        s = &s[1..];
                        break;
                    }
                    _ => break,
                }
                if s.trim_start().starts_with('}') {
                    s = &s.trim_start()[1..];
                    break;
                }
            }
            break;
        }
        let n = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
        if n == 0 {
            out.push(prefix.clone());
            break;
        }
        prefix.push(s[..n].to_string());
        s = &s[n..];
        match s.strip_prefix("::") {
            Some(rest) => s = rest,
            None => {
                out.push(prefix.clone());
                break;
            }
        }
    }
    prefix.truncate(depth);
    s
}

/// A cycle among the modules of `files` (module path, source), following `crate::` paths to
/// the longest module they name.
fn module_cycle(files: &[(String, String)]) -> Option<Vec<String>> {
    let known: BTreeSet<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    let mut edges: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
    for (m, src) in files {
        for path in module_paths(m, &code_only(src)) {
            let target = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|t| known.contains(t.as_str()));
            if let Some(t) = target.filter(|t| t != m) {
                edges.entry(m.as_str()).or_default().insert(t);
            }
        }
    }
    fn visit<'a>(
        m: &'a str,
        edges: &'a std::collections::BTreeMap<&str, BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| *s == m) {
            return Some(stack[i..].iter().chain([&m]).map(|s| s.to_string()).collect());
        }
        if !done.insert(m) {
            return None;
        }
        stack.push(m);
        for t in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(t, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    files.iter().find_map(|(m, _)| visit(m, &edges, &mut vec![], &mut done))
}

/// `harness/run.rs` -> `harness::run`, `report/mod.rs` -> `report`.
fn module_path(rel: &Path) -> String {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The modules of the crate whose sources are under `src` (module path, source).
fn crate_modules(src: &Path) -> Vec<(String, String)> {
    let mut files = vec![];
    rust_files(src, &mut files);
    files.sort();
    files.iter().map(|f| (module_path(f.strip_prefix(src).unwrap()), std::fs::read_to_string(f).unwrap())).collect()
}

/// The source folders checked for import cycles: the lab's, the board crate's, and every
/// guest crate's (rootfs/guest/*/src, found, so that a new guest crate is checked too).
fn cycle_checked_crates() -> Vec<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut dirs = vec![repo.join("lab/src"), repo.join("board/src")];
    let mut guests: Vec<PathBuf> = std::fs::read_dir(repo.join("rootfs/guest"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    guests.sort();
    dirs.extend(guests);
    dirs
}

#[test]
fn no_module_import_cycles() {
    let dirs = cycle_checked_crates();
    assert!(dirs.len() > 10, "found only {dirs:?}");
    let cycles: Vec<String> = dirs
        .iter()
        .filter_map(|d| {
            let name = d.strip_prefix(crate::support::paths::repo()).unwrap_or(d).display().to_string();
            module_cycle(&crate_modules(d)).map(|c| format!("{name}: {}", c.join(" -> ")))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "modules import each other in a cycle; move what both need into a third:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn cycle_checker_finds_a_cycle() {
    let f = |m: &str, s: &str| (m.to_string(), s.to_string());
    let ok = [f("a::x", "use crate::a::y::Thing;"), f("a::y", "use crate::{b, c::d::{self, E}};"), f("c::d", "")];
    assert_eq!(module_cycle(&ok), None);
    let bad = [
        f("a::x", "use crate::a::y::Thing;"),
        f("a::y", "use crate::{b, c::d::{self, E}};"),
        f("c::d", "crate::a::x::f()"),
    ];
    assert_eq!(module_cycle(&bad).unwrap(), ["a::x", "a::y", "c::d", "a::x"]);
    assert_eq!(crate_paths("crate::{a::b, c::{d, e}}"), [vec!["a", "b"], vec!["c", "d"], vec!["c", "e"]]);
    // Relative paths count: a child that calls back into its parent through `super::`, a
    // parent that calls its child by the child's name.
    let relative = [
        f("r", "pub mod l;\npub fn w() {}\npub fn run() { l::submit() }"),
        f("r::l", "pub fn submit() { super::w() }"),
    ];
    assert_eq!(module_cycle(&relative), Some(vec!["r".into(), "r::l".into(), "r".into()]));
    let tests_only = [
        f("r", "pub mod l;\npub fn w() {}"),
        f(
            "r::l",
            "pub fn submit() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::super::w() }\n}",
        ),
    ];
    assert_eq!(module_cycle(&tests_only), None);
    let p = |m: &str, code: &str| module_paths(m, code).into_iter().map(|v| v.join("::")).collect::<Vec<_>>();
    assert_eq!(
        p("a::b", "use super::super::x::y; use self::c::d; use super::{e, f::g};"),
        ["a::b::c::d", "x::y", "a::e", "a::f::g"]
    );
    assert_eq!(p("lib", "pub mod cli;\nfn f() { cli::run() }"), ["cli::run"]);
}

/// lab/src, and its files as (path below it, first component: the stage folder or a root
/// file), sorted.
fn lab_files() -> (PathBuf, Vec<(PathBuf, String)>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let rels = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_path_buf();
            let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
            (rel, first)
        })
        .collect();
    (src, rels)
}

#[test]
fn stage_imports_point_down() {
    let (src, files) = lab_files();
    let mut problems = vec![];
    for (rel, first) in &files {
        if rel.components().count() == 1 {
            if !ROOT_FILES.contains(&first.as_str()) {
                problems.push(format!("{}: a module outside the stage folders; move it into one", rel.display()));
            }
            continue;
        }
        if rank(first).is_none() {
            problems.push(format!("{}: {first}/ is no stage ({})", rel.display(), STAGES.join(", ")));
            continue;
        }
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        problems.extend(violations(first, &text).into_iter().map(|v| format!("{}: {v}", rel.display())));
    }
    assert!(files.len() > 20, "found only {} files under {}", files.len(), src.display());
    assert!(
        problems.is_empty(),
        "imports against cli → measure → report → harness → kbuild → provision → support:\n{}",
        problems.join("\n")
    );
}

/// `print!`-family calls in `src` (comments, strings and test modules left out), each as
/// "macro at line N".
fn prints(src: &str) -> Vec<String> {
    let lib = src.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = vec![];
    for (n, line) in code_only(lib).lines().enumerate() {
        for mac in ["print!", "println!", "eprint!", "eprintln!", "dbg!"] {
            let hit = line
                .match_indices(mac)
                .any(|(i, _)| !line[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_'));
            if hit {
                out.push(format!("{mac} at line {}", n + 1));
            }
        }
    }
    out
}

/// Library code (every stage but cli) never prints: notes, the live console and a step's
/// streamed output go through `support::progress`, whose reporter the caller chooses.
#[test]
fn library_code_never_prints() {
    let (src, files) = lab_files();
    let mut problems = vec![];
    for (rel, first) in &files {
        if rank(first).is_none() || first == "cli" || rel == Path::new("support/progress.rs") {
            continue;
        }
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        problems.extend(prints(&text).into_iter().map(|p| format!("{}: {p}", rel.display())));
    }
    assert!(problems.is_empty(), "library code prints; use support::progress instead:\n{}", problems.join("\n"));
}

#[test]
fn print_checker_sees_prints_outside_tests() {
    assert_eq!(prints("fn f() {\n    eprintln!(\"x\");\n}\n"), ["eprintln! at line 2"]);
    assert_eq!(prints("let s = \"println!\"; // print!(x)\nsprint!(y);\n"), Vec::<String>::new());
    assert!(prints("fn f() {}\n#[cfg(test)]\nmod tests { fn t() { println!(\"ok\"); } }\n").is_empty());
}

#[test]
fn checker_sees_every_form_of_back_import() {
    assert!(violations("harness", "use crate::kbuild::kernel;\nuse crate::support::{fs, paths};").is_empty());
    let v = violations("harness", "use crate::report::write_reports;");
    assert_eq!(v, ["harness imports report, a later stage"]);
    assert_eq!(violations("kbuild", "let x = crate::cli::args::UNTIL_FAIL_RUNS;").len(), 1);
    assert_eq!(violations("support", "use crate::{\n    support::fs,\n    harness::{qemu, run},\n};").len(), 1);
    assert_eq!(
        violations("report", "use crate::util::x;"),
        ["report uses crate::util, which is no stage (support, numbers, provision, kbuild, harness, report, measure, cli)"]
    );
    // Comments, strings and other crates' paths are not imports.
    assert!(violations("support", "// crate::cli\n/// [`crate::cli`]\nlet s = \"crate::cli\";\nuse mycrate::cli;")
        .is_empty());
}
