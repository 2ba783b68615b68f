//! A self-contained HTML page: no external files, the SVG plots inlined, so the artifact can
//! be opened anywhere (a CI's artifact viewer, a mail attachment).

use crate::report::cases::xml_escape;
use std::fmt::Write as _;
use std::path::Path;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:110em}\
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
.pass{color:#176117}.fail{color:#b00020;font-weight:bold}.plots svg{margin:.5em;border:1px solid #ddd}";

pub struct Page {
    body: String,
}

impl Page {
    pub fn new() -> Page {
        Page { body: String::new() }
    }

    pub fn h(&mut self, level: u8, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<h{level}>{}</h{level}>", xml_escape(text));
        self
    }

    pub fn p(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<p>{}</p>", xml_escape(text));
        self
    }

    pub fn pre(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<pre>{}</pre>", xml_escape(text));
        self
    }

    /// A table; cells starting with `PASS`/`FAIL` are coloured.
    pub fn table(&mut self, head: &[&str], rows: &[Vec<String>]) -> &mut Self {
        self.body.push_str("<table><tr>");
        for h in head {
            let _ = write!(self.body, "<th>{}</th>", xml_escape(h));
        }
        self.body.push_str("</tr>\n");
        for r in rows {
            self.body.push_str("<tr>");
            for c in r {
                let class = if c.starts_with("PASS") {
                    " class=\"pass\""
                } else if c.starts_with("FAIL") {
                    " class=\"fail\""
                } else {
                    ""
                };
                let _ = write!(self.body, "<td{class}>{}</td>", xml_escape(c));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
        self
    }

    /// An SVG file inlined; a missing file is named instead of silently dropped.
    pub fn svg(&mut self, path: &Path) -> &mut Self {
        let _ = writeln!(self.body, "{}", svg_html(path));
        self
    }

    /// Markdown (CommonMark with tables and strikethrough, through pulldown-cmark) as HTML.
    /// An image whose file ends in `.svg` is inlined from `dir`, like [`Page::svg`]; raw HTML
    /// in the text is shown as text, since a report's Markdown carries data, not markup.
    pub fn markdown(&mut self, md: &str, dir: &Path) -> &mut Self {
        use pulldown_cmark::{html, Event, Options, Parser, Tag, TagEnd};
        let mut events = vec![];
        let mut in_image = false;
        for ev in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
            match ev {
                Event::Start(Tag::Image { dest_url, .. }) if dest_url.ends_with(".svg") => {
                    in_image = true;
                    events.push(Event::InlineHtml(svg_html(&dir.join(dest_url.as_ref())).into()));
                }
                // The alt text of an inlined plot: the SVG carries its own title.
                _ if in_image => in_image = !matches!(ev, Event::End(TagEnd::Image)),
                Event::Html(t) | Event::InlineHtml(t) => events.push(Event::Text(t)),
                ev => events.push(ev),
            }
        }
        html::push_html(&mut self.body, events.into_iter());
        self
    }

    pub fn render(&self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n{}</body></html>\n",
            xml_escape(title),
            self.body
        )
    }
}

/// An SVG file as inline HTML, or a `fail` paragraph naming it when it cannot be read
/// (report/browser.rs looks for that paragraph).
fn svg_html(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        // Inline SVG must not carry an XML declaration.
        Ok(svg) => format!("<span class=\"plots\">{}</span>", &svg[svg.find("<svg").unwrap_or(0)..]),
        Err(e) => format!("<p class=\"fail\">plot {} missing: {e}</p>", xml_escape(&path.display().to_string())),
    }
}

impl Default for Page {
    fn default() -> Self {
        Page::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_inlines_plots_and_escapes_text() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.svg"), "<?xml version=\"1.0\"?>\n<svg width=\"1\"></svg>").unwrap();
        let mut p = Page::new();
        p.markdown("# T <1>\n\ntext & more\n\n```\na < b\n```\n- one\n- two\n\n![a](a.svg) ![b](b.svg)\n", d.path());
        let html = p.render("x");
        assert!(html.contains("<h1>T &lt;1&gt;</h1>"), "{html}");
        assert!(html.contains("<pre><code>a &lt; b\n</code></pre>"), "{html}");
        assert!(html.contains("<ul>\n<li>one</li>\n<li>two</li>\n</ul>"), "{html}");
        assert!(html.contains("<svg width=\"1\"></svg>") && !html.contains("<?xml"), "{html}");
        assert!(html.contains("plot") && html.contains("b.svg missing"), "{html}");
        assert!(html.contains("<p>text &amp; more</p>"), "{html}");
    }

    /// What ab.md is made of: tables, emphasis and code spans become elements, not text.
    #[test]
    fn markdown_renders_tables_emphasis_and_code() {
        let md = "**Result: FAIL**: `perf` vs `cbinder`\n\n| gate | result |\n| --- | --- |\n| build | PASS |\n";
        let mut p = Page::new();
        p.markdown(md, Path::new("."));
        let html = p.render("x");
        assert!(html.contains("<strong>Result: FAIL</strong>"), "{html}");
        assert!(html.contains("<code>perf</code>"), "{html}");
        assert!(html.contains("<table>") && html.contains("<th>gate</th>") && html.contains("<td>PASS</td>"), "{html}");
        assert!(!html.contains("| ---") && !html.contains("**"), "{html}");
    }

    #[test]
    fn table_colours_verdicts() {
        let mut p = Page::new();
        p.table(&["stage", "result"], &[vec!["a".into(), "PASS".into()], vec!["b".into(), "FAIL: 2".into()]]);
        let h = p.render("t");
        assert!(h.contains("<td class=\"pass\">PASS</td>") && h.contains("<td class=\"fail\">FAIL: 2</td>"));
    }
}
