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
        match std::fs::read_to_string(path) {
            Ok(svg) => {
                // Inline SVG must not carry an XML declaration.
                let start = svg.find("<svg").unwrap_or(0);
                let _ = writeln!(self.body, "<span class=\"plots\">{}</span>", &svg[start..]);
            }
            Err(e) => {
                let _ = writeln!(
                    self.body,
                    "<p class=\"fail\">plot {} missing: {e}</p>",
                    xml_escape(&path.display().to_string())
                );
            }
        }
        self
    }

    /// The subset of Markdown the lab's reports use: headings, fenced blocks, bullets,
    /// paragraphs and `![alt](file.svg)` images, which are inlined from `dir`.
    pub fn markdown(&mut self, md: &str, dir: &Path) -> &mut Self {
        let mut in_code = false;
        let mut code = String::new();
        let mut in_list = false;
        for line in md.lines() {
            if line.starts_with("```") {
                if in_code {
                    self.pre(&code);
                    code.clear();
                }
                in_code = !in_code;
                continue;
            }
            if in_code {
                code.push_str(line);
                code.push('\n');
                continue;
            }
            let bullet = line.strip_prefix("- ");
            if in_list && bullet.is_none() {
                self.body.push_str("</ul>\n");
                in_list = false;
            }
            if let Some(b) = bullet {
                if !in_list {
                    self.body.push_str("<ul>\n");
                    in_list = true;
                }
                let _ = writeln!(self.body, "<li>{}</li>", xml_escape(b));
            } else if let Some(h) = line.strip_prefix("### ") {
                self.h(4, h);
            } else if let Some(h) = line.strip_prefix("## ") {
                self.h(3, h);
            } else if let Some(h) = line.strip_prefix("# ") {
                self.h(2, h);
            } else if line.trim_start().starts_with("![") {
                for img in line.split("![").skip(1) {
                    if let Some(file) = img.split_once("](").and_then(|(_, r)| r.split_once(')')).map(|(f, _)| f) {
                        self.svg(&dir.join(file));
                    }
                }
            } else if !line.trim().is_empty() {
                self.p(line);
            }
        }
        if in_list {
            self.body.push_str("</ul>\n");
        }
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
        assert!(html.contains("<h2>T &lt;1&gt;</h2>"), "{html}");
        assert!(html.contains("<pre>a &lt; b\n</pre>"), "{html}");
        assert!(html.contains("<ul>\n<li>one</li>\n<li>two</li>\n</ul>"), "{html}");
        assert!(html.contains("<svg width=\"1\"></svg>") && !html.contains("<?xml"), "{html}");
        assert!(html.contains("plot") && html.contains("b.svg missing"), "{html}");
        assert!(html.contains("<p>text &amp; more</p>"));
    }

    #[test]
    fn table_colours_verdicts() {
        let mut p = Page::new();
        p.table(&["stage", "result"], &[vec!["a".into(), "PASS".into()], vec!["b".into(), "FAIL: 2".into()]]);
        let h = p.render("t");
        assert!(h.contains("<td class=\"pass\">PASS</td>") && h.contains("<td class=\"fail\">FAIL: 2</td>"));
    }
}
