//! The shell blocks of README.md and the guide (docs/src/guide): each is run by a test or
//! says why not. An HTML comment on the line before a fenced `sh` block marks it:
//!
//! - `<!-- doc-test: quick -->`: run by `tests/tests/doc_blocks.rs` in `cargo make test`;
//! - `<!-- doc-test: slow -->`: run there under `--ignored`, by `cargo make test-slow`;
//! - `<!-- doc-test: not run: REASON -->`: never run; the tests print the reason.
//!
//! After `quick` or `slow`, comma-separated: `scratch` (run in an empty directory outside the
//! checkout, with the files the page shows as "`path`:" blocks written into it and `LAB` set
//! to the checkout), `clone` (run in a fresh clone of the checkout at a deep path, with this
//! machine's cache, as a new user would), `copy` (run in a copy of the checkout with a cache of its own, for a
//! recipe that changes the checkout's files and the cache's shared trees), `exit N` (the
//! block's last command exits N, as the page says), `lava` (needs a LAVA server:
//! `LAVA_SERVER`, `LAVA_USER`, `LAVA_TOKEN`). Unmarked shell blocks fail the unit test below.
//! How to mark a block: docs/src/reference/doc-blocks.md.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The info strings of the fenced blocks that are shell commands.
const SHELL: [&str; 4] = ["sh", "bash", "shell", "console"];
const MARK: &str = "<!-- doc-test:";

/// The pages whose shell blocks must run or say why not, relative to the repository.
pub fn pages(repo: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![PathBuf::from("README.md")];
    let guide = repo.join("docs/src/guide");
    let mut md: Vec<PathBuf> = std::fs::read_dir(&guide)
        .with_context(|| format!("reading {}", guide.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter_map(|p| p.strip_prefix(repo).ok().map(Path::to_path_buf))
        .collect();
    md.sort();
    out.extend(md);
    Ok(out)
}

/// Where a block runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The checkout itself.
    Checkout,
    /// An empty directory outside the checkout with the page's files, `LAB` = the checkout.
    Scratch,
    /// A fresh clone of the checkout (with its uncommitted changes) at a deep path, this
    /// machine's cache.
    Clone,
    /// A copy of the checkout with a cache of its own.
    Copy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    Run { slow: bool, place: Place, exit: i32, lava: bool },
    NotRun(String),
}

/// One fenced shell block.
#[derive(Clone, Debug)]
pub struct Block {
    /// Relative to the repository.
    pub page: PathBuf,
    /// 1-based line of the opening fence.
    pub line: usize,
    pub body: String,
    /// None: unmarked (an error).
    pub mark: Option<Result<Mark, String>>,
}

impl Block {
    pub fn name(&self) -> String {
        format!("{}:{}", self.page.display(), self.line)
    }
}

/// Parses the text after `<!-- doc-test:` up to `-->`.
pub fn parse_mark(text: &str) -> Result<Mark, String> {
    let t = text.trim();
    if let Some(reason) = t.strip_prefix("not run:") {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err("`not run:` needs a reason".into());
        }
        return Ok(Mark::NotRun(reason.to_string()));
    }
    let mut words = t.split(',').map(str::trim);
    let slow = match words.next() {
        Some("quick") => false,
        Some("slow") => true,
        other => return Err(format!("{other:?}: a mark starts with quick, slow or `not run: REASON`")),
    };
    let (mut place, mut exit, mut lava) = (Place::Checkout, 0, false);
    for w in words {
        match w.split_once(' ') {
            _ if w == "scratch" => place = Place::Scratch,
            _ if w == "copy" => place = Place::Copy,
            _ if w == "clone" => place = Place::Clone,
            _ if w == "lava" => lava = true,
            Some(("exit", n)) => exit = n.trim().parse().map_err(|_| format!("exit {n:?}: not a number"))?,
            _ => return Err(format!("{w:?}: not one of scratch, clone, copy, lava, exit N")),
        }
    }
    Ok(Mark::Run { slow, place, exit, lava })
}

/// The shell blocks of one page's text, with the mark on the line before each.
pub fn blocks_of(page: &Path, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = vec![];
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len()).find(|&j| lines[j].starts_with("```")).unwrap_or(lines.len());
        let lang = info.split([' ', ',', '{']).next().unwrap_or("").trim();
        if SHELL.contains(&lang) {
            let mark = i
                .checked_sub(1)
                .map(|p| lines[p].trim())
                .and_then(|l| l.strip_prefix(MARK))
                .map(|m| m.strip_suffix("-->").map(parse_mark).unwrap_or_else(|| Err("no closing -->".into())));
            let body = lines[i + 1..end].iter().map(|l| format!("{l}\n")).collect();
            out.push(Block { page: page.to_path_buf(), line: i + 1, body, mark });
        }
        i = end + 1;
    }
    out
}

/// Every shell block of [`pages`].
pub fn blocks(repo: &Path) -> Result<Vec<Block>> {
    let mut out = vec![];
    for page in pages(repo)? {
        let text = std::fs::read_to_string(repo.join(&page)).with_context(|| format!("reading {}", page.display()))?;
        out.extend(blocks_of(&page, &text));
    }
    Ok(out)
}

/// Blocks without a valid mark, one line each.
pub fn unmarked(blocks: &[Block]) -> Vec<String> {
    blocks
        .iter()
        .filter_map(|b| match &b.mark {
            None => Some(format!("{}: a shell block without a `{MARK} ... -->` line before it", b.name())),
            Some(Err(e)) => Some(format!("{}: {e}", b.name())),
            Some(Ok(_)) => None,
        })
        .collect()
}

/// The blocks not run, with their reasons, one line each.
pub fn not_run(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter_map(|b| match &b.mark {
            Some(Ok(Mark::NotRun(why))) => Some(format!("  {}: {why}\n", b.name())),
            _ => None,
        })
        .collect()
}

/// The files a page shows as "`path`:" followed by a fenced block (own-client.md's crate).
pub fn page_files(text: &str) -> Vec<(String, String)> {
    let mut files = vec![];
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = l.strip_prefix('`').and_then(|r| r.split_once('`')).map(|(n, _)| n) else { continue };
        let rest = &l[name.len() + 2..];
        // "`path`:" or "`path` (a note):", then a blank line and the fence.
        if name.contains(' ') || !rest.trim_end().ends_with(':') || !name.contains(['.', '/']) {
            continue;
        }
        if lines.get(i + 1).is_some_and(|b| b.trim().is_empty())
            && lines.get(i + 2).is_some_and(|f| f.starts_with("```"))
        {
            let body: String =
                lines[i + 3..].iter().take_while(|b| !b.starts_with("```")).map(|b| format!("{b}\n")).collect();
            files.push((name.to_string(), body));
        }
    }
    files
}

/// How a block is run: the directory, the environment and the exit code it must end with.
pub struct Setting {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub exit: i32,
}

/// Runs `block`'s text with `sh -e` (the first failing command ends it) in `s.dir`, its output
/// passed through; an error names the block and the code it ended with.
pub fn run(block: &Block, s: &Setting) -> Result<()> {
    eprintln!("\n=== {} in {}\n{}", block.name(), s.dir.display(), block.body);
    let st = std::process::Command::new("sh")
        .args(["-e", "-c", &block.body])
        .current_dir(&s.dir)
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .status()
        .with_context(|| format!("running sh for {}", block.name()))?;
    if st.code() != Some(s.exit) {
        bail!("{}: ended with {st}, the page expects exit code {}:\n{}", block.name(), s.exit, block.body);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::paths;

    /// Every shell block of README.md and the guide runs in a test or says why not.
    #[test]
    fn every_shell_block_is_marked() {
        let b = blocks(&paths::repo()).unwrap();
        assert!(b.len() > 20, "{} blocks", b.len());
        let bad = unmarked(&b);
        assert!(bad.is_empty(), "mark these (docs/src/reference/doc-blocks.md):\n{}", bad.join("\n"));
        eprintln!("blocks not run:\n{}", not_run(&b));
    }

    #[test]
    fn marks_parse_and_refuse_what_they_do_not_know() {
        assert_eq!(parse_mark(" quick "), Ok(Mark::Run { slow: false, place: Place::Checkout, exit: 0, lava: false }));
        assert_eq!(
            parse_mark("slow, scratch, exit 7, lava"),
            Ok(Mark::Run { slow: true, place: Place::Scratch, exit: 7, lava: true })
        );
        assert_eq!(parse_mark("not run: interactive"), Ok(Mark::NotRun("interactive".into())));
        assert_eq!(parse_mark("slow, clone"), Ok(Mark::Run { slow: true, place: Place::Clone, exit: 0, lava: false }));
        assert!(parse_mark("not run:").unwrap_err().contains("reason"));
        assert!(parse_mark("sometimes").unwrap_err().contains("quick, slow"));
        assert!(parse_mark("quick, fast").unwrap_err().contains("not one of"));
    }

    #[test]
    fn blocks_carry_their_marks_and_lines() {
        let text = "# P\n\n<!-- doc-test: quick -->\n```sh\nls\n```\n\n```sh\nfalse\n```\n\n```toml\na = 1\n```\n\
                    <!-- doc-test: not run: why -->\n```console\n$ x\n```\n";
        let b = blocks_of(Path::new("p.md"), text);
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!((b[0].line, b[0].body.as_str()), (4, "ls\n"));
        assert!(matches!(b[0].mark, Some(Ok(Mark::Run { slow: false, .. }))));
        assert!(b[1].mark.is_none());
        assert_eq!(unmarked(&b), ["p.md:8: a shell block without a `<!-- doc-test: ... -->` line before it"]);
        assert_eq!(not_run(&b), "  p.md:16: why\n");
    }

    #[test]
    fn a_failing_command_fails_its_block() {
        let d = tempfile::tempdir().unwrap();
        let block = |body: &str| Block { page: "p.md".into(), line: 3, body: body.into(), mark: None };
        let at = |exit| Setting { dir: d.path().to_path_buf(), env: vec![("X".into(), "1".into())], exit };
        run(&block("test \"$X\" = 1\ntrue\n"), &at(0)).unwrap();
        let e = run(&block("false\ntrue\n"), &at(0)).unwrap_err().to_string();
        assert!(e.contains("p.md:3: ended with exit status: 1"), "{e}");
        run(&block("true\nexit 7\n"), &at(7)).unwrap();
        assert!(run(&block("true\n"), &at(7)).is_err());
    }

    #[test]
    fn page_files_are_the_named_blocks() {
        let text = "`a/b.toml`:\n\n```toml\nx = 1\n```\n\n`c.rs` (a note):\n\n```rust\nfn main() {}\n```\n\
                    `not a file`:\n\n```sh\nls\n```\n";
        assert_eq!(
            page_files(text),
            [("a/b.toml".to_string(), "x = 1\n".to_string()), ("c.rs".to_string(), "fn main() {}\n".to_string())]
        );
    }
}
