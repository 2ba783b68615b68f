//! Opens an HTML report in a real browser (Debian's headless Chromium) and says what a reader
//! would see go wrong: a console message (the reports carry no script, so any message is an
//! error: a bad inline SVG, a blocked resource), a plot the report names as missing, an
//! `<img>` whose file is not there, Markdown syntax shown as typed (a table left as `| a | b |`
//! lines, `**bold**`, backticks). Leaves a screenshot beside the report.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `lab setup` installs for this (HOST_PACKAGES) and the binary it provides.
pub const CHROMIUM: &str = "chromium";

/// The flags every run gets: headless, no GPU, no network of its own, a fresh profile.
pub fn flags(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        // Console messages reach stderr as `...:INFO:CONSOLE:1] "text", source: URL (1)`.
        "--enable-logging=stderr",
        "--v=0",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

/// What the browser showed.
#[derive(Debug)]
pub struct Seen {
    pub screenshot: PathBuf,
    /// Everything wrong, one line each; empty when the page is fine.
    pub problems: Vec<String>,
    /// Inline SVG plots in the rendered page.
    pub svgs: usize,
    /// `<table>` elements in the rendered page.
    pub tables: usize,
}

/// Opens `html` in headless Chromium: the DOM as rendered, the console, and a screenshot
/// written to `<html without extension>.png`.
pub fn open(html: &Path) -> Result<Seen> {
    let html = std::path::absolute(html)?;
    if !html.is_file() {
        bail!("{} does not exist", html.display());
    }
    let profile = tempfile::tempdir().context("a profile directory for chromium")?;
    let url = format!("file://{}", html.display());
    let run = |extra: &[String]| -> Result<(String, String)> {
        let out = Command::new(CHROMIUM)
            .args(flags(profile.path()))
            .args(extra)
            .arg(&url)
            .output()
            .with_context(|| format!("running {CHROMIUM} (`cargo make setup` installs it)"))?;
        if !out.status.success() {
            bail!("{CHROMIUM} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let (dom, log1) = run(&["--dump-dom".into()])?;
    let screenshot = html.with_extension("png");
    let (_, log2) = run(&[format!("--screenshot={}", screenshot.display()), "--window-size=1280,2400".into()])?;
    if !screenshot.is_file() {
        bail!("{CHROMIUM} wrote no screenshot at {}", screenshot.display());
    }
    let mut problems: Vec<String> =
        console_messages(&format!("{log1}\n{log2}")).into_iter().map(|m| format!("console: {m}")).collect();
    problems.extend(missing_images(&dom, html.parent().unwrap_or(Path::new("/"))));
    problems.extend(literal_markdown(&dom));
    Ok(Seen { screenshot, problems, svgs: dom.matches("<svg").count(), tables: dom.matches("<table").count() })
}

/// The console messages in Chromium's stderr log, deduplicated (two page loads).
pub fn console_messages(log: &str) -> Vec<String> {
    let mut v: Vec<String> = log
        .lines()
        .filter_map(|l| l.split_once(":CONSOLE")?.1.split_once("] ").map(|(_, m)| m.trim().to_string()))
        .collect();
    v.dedup();
    v.sort();
    v.dedup();
    v
}

/// Plots the report itself names as missing, and `<img src>` files that are not there.
pub fn missing_images(dom: &str, dir: &Path) -> Vec<String> {
    let mut out = vec![];
    for piece in dom.split("<p class=\"fail\">plot ").skip(1) {
        out.push(format!("missing plot: {}", piece.split("</p>").next().unwrap_or(piece)));
    }
    for piece in dom.split("<img").skip(1) {
        let tag = piece.split('>').next().unwrap_or("");
        if let Some(src) = tag.split("src=\"").nth(1).and_then(|s| s.split('"').next()) {
            let local = src.strip_prefix("file://").map(PathBuf::from).unwrap_or_else(|| dir.join(src));
            if !src.starts_with("data:") && !local.exists() {
                out.push(format!("missing image: {src}"));
            }
        }
    }
    out
}

/// Markdown syntax a reader would see as typed: the page's text outside code (`<pre>`,
/// `<code>`), plots and styles, with the tags removed, searched for a table's rule (`| ---`),
/// `**` and backticks. One line per kind, naming the first place.
pub fn literal_markdown(dom: &str) -> Vec<String> {
    let mut text = dom.to_string();
    for tag in ["pre", "code", "svg", "style", "script"] {
        text = drop_elements(&text, tag);
    }
    let visible = strip_tags(&text);
    let mut out = vec![];
    for (what, needle) in [("a table's rule", "| ---"), ("a table's rule", "|---"), ("**", "**"), ("a backtick", "`")] {
        if let Some(at) = visible.find(needle) {
            let line = visible[..at].rsplit('\n').next().unwrap_or("").to_string() + &visible[at..];
            let line = line.lines().next().unwrap_or("").trim();
            out.push(format!("literal Markdown ({what}) in the page: {line}"));
        }
    }
    out.dedup_by(|a, b| a.split(')').next() == b.split(')').next());
    out
}

/// `s` without every `<tag ...>...</tag>` element.
fn drop_elements(s: &str, tag: &str) -> String {
    let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(&open) {
        out.push_str(&rest[..i]);
        match rest[i..].find(&close) {
            Some(j) => rest = &rest[i + j + close.len()..],
            None => rest = "",
        }
    }
    out + rest
}

/// The text of an HTML fragment: tags removed, the common entities decoded.
fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            // Every tag ends a line: a block's text stays on its own line.
            '<' => {
                in_tag = true;
                out.push('\n');
            }
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Recorded from Debian's chromium 156 (--enable-logging=stderr --v=0) on a page with
    // `console.error("boom"); nosuch();`, loaded twice.
    #[test]
    fn console_lines_are_found() {
        let log = "[5010:5010:1201/223858.447413:INFO:CONSOLE:1] \"boom\", source: file:///tmp/bt/x.html (1)\n\
                   [5010:5010:1201/223858.455431:INFO:CONSOLE:1] \"Uncaught ReferenceError: nosuch is not defined\", source: file:///tmp/bt/x.html (1)\n\
                   [5011:5011:1201/223858.500000:WARNING:sandbox_linux.cc(430)] InitializeSandbox() called\n\
                   [5020:5020:1201/223859.447413:INFO:CONSOLE:1] \"boom\", source: file:///tmp/bt/x.html (1)\n";
        assert_eq!(
            console_messages(log),
            [
                "\"Uncaught ReferenceError: nosuch is not defined\", source: file:///tmp/bt/x.html (1)",
                "\"boom\", source: file:///tmp/bt/x.html (1)"
            ]
        );
    }

    #[test]
    fn literal_markdown_is_found_outside_code() {
        let old = "<p>| gate | result |</p><p>| --- | --- |</p><p>**Result: FAIL**</p><p>`perf`</p>";
        assert_eq!(
            literal_markdown(old),
            [
                "literal Markdown (a table's rule) in the page: | --- | --- |",
                "literal Markdown (**) in the page: **Result: FAIL**",
                "literal Markdown (a backtick) in the page: `perf`"
            ]
        );
        let new = "<style>a{}</style><table><tr><th>gate</th></tr></table><p><strong>Result: FAIL</strong> \
                   <code>perf</code></p><pre><code>cargo make ab `x` **y**\n| --- |</code></pre><svg>**</svg>";
        assert!(literal_markdown(new).is_empty(), "{:?}", literal_markdown(new));
    }

    #[test]
    fn missing_images_are_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("here.png"), "x").unwrap();
        let dom = "<p class=\"fail\">plot /r/tiers-fifo.svg missing: No such file</p><img src=\"here.png\"><img alt=a src=\"gone.png\">";
        assert_eq!(
            missing_images(dom, d.path()),
            ["missing plot: /r/tiers-fifo.svg missing: No such file", "missing image: gone.png"]
        );
        assert!(missing_images("<svg></svg>", d.path()).is_empty());
    }
}
