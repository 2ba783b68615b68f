//! KernelCI KCIDB report data (I/O schema v5.3, as in the `kcidb-io` package): one checkout
//! (the pinned kernel source plus the rust-driver/ series), one build per kernel flavor, and
//! one test per result, with benchmark figures as tests carrying a `number`.

use serde::Serialize;
use serde_json::Value;

pub const ORIGIN: &str = "binderlab";
pub const VERSION: (u32, u32) = (5, 3);

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub version: SchemaVersion,
    pub checkouts: Vec<Checkout>,
    pub builds: Vec<Build>,
    pub tests: Vec<Test>,
}

#[derive(Debug, Serialize)]
pub struct SchemaVersion {
    pub major: u32,
    pub minor: u32,
}

impl Default for SchemaVersion {
    fn default() -> Self {
        SchemaVersion { major: VERSION.0, minor: VERSION.1 }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Checkout {
    pub id: String,
    pub origin: String,
    pub tree_name: String,
    pub comment: String,
    /// sha256 over the newline-terminated sha256 of each patch, as the schema defines it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patchset_hash: Option<String>,
    pub start_time: String,
    pub valid: bool,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub misc: Value,
}

#[derive(Debug, Default, Serialize)]
pub struct Build {
    pub id: String,
    pub checkout_id: String,
    pub origin: String,
    pub architecture: String,
    pub compiler: String,
    pub config_name: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_excerpt: Option<String>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub misc: Value,
}

#[derive(Debug, Default, Serialize)]
pub struct Test {
    pub id: String,
    pub build_id: String,
    pub origin: String,
    pub path: String,
    pub status: &'static str,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_excerpt: Option<String>,
    pub environment: Environment,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub misc: Value,
}

#[derive(Debug, Default, Serialize)]
pub struct Number {
    pub value: f64,
    pub unit: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Environment {
    pub comment: String,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub misc: Value,
}

/// An id in the origin's namespace.
pub fn id(local: &str) -> String {
    format!("{ORIGIN}:{local}")
}

/// A test path: dot-separated nodes of `[a-zA-Z0-9_-]`; anything else becomes `_`.
pub fn path(nodes: &[&str]) -> String {
    nodes
        .iter()
        .map(|n| {
            let s: String =
                n.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
            if s.is_empty() {
                "_".to_string()
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The schema's status for a lab result.
pub fn status(s: labproto::Status) -> &'static str {
    match s {
        labproto::Status::Pass => "PASS",
        labproto::Status::Fail => "FAIL",
        labproto::Status::Skip => "SKIP",
    }
}

/// The patchset hash as the schema defines it, from each patch's sha256 in series order.
pub fn patchset_hash(patch_sha256s: &[String]) -> Option<String> {
    if patch_sha256s.is_empty() {
        return None;
    }
    let text: String = patch_sha256s.iter().map(|h| format!("{h}\n")).collect();
    Some(crate::support::fs::sha256_hex(text.as_bytes()))
}

/// Log excerpts are kept short: the schema allows 16 KiB.
/// Validates `file` against the latest KCIDB schema with kcidb-io's `python`; the error is
/// kcidb-io's message.
pub fn validate(python: &std::path::Path, file: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new(python)
        .args(["-c", "import json,sys,kcidb_io; kcidb_io.schema.LATEST.validate(json.load(open(sys.argv[1])))"])
        .arg(file)
        .output()
        .map_err(|e| format!("running {}: {e}", python.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("invalid: {}", excerpt(&String::from_utf8_lossy(&out.stderr))))
    }
}

pub fn excerpt(s: &str) -> String {
    const MAX: usize = 16 * 1024 - 64;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut cut = s.len() - MAX;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    format!("[...]\n{}", &s[cut..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_ids_follow_the_schema() {
        assert_eq!(path(&["binder", "conformance", "bad_pointers"]), "binder.conformance.bad_pointers");
        assert_eq!(path(&["kunit", "rust_binder_ctabs", "pick/same cpu"]), "kunit.rust_binder_ctabs.pick_same_cpu");
        assert_eq!(path(&["a", ""]), "a._");
        assert_eq!(id("x"), "binderlab:x");
        let h = patchset_hash(&["ab".into(), "cd".into()]).unwrap();
        assert_eq!(h, crate::support::fs::sha256_hex(b"ab\ncd\n"));
        assert_eq!(patchset_hash(&[]), None);
        let long = "é".repeat(20_000);
        assert!(excerpt(&long).len() <= 16 * 1024);
    }

    #[test]
    fn report_serialises_with_version_and_required_fields() {
        let mut r = Report::default();
        r.checkouts.push(Checkout { id: id("c"), origin: ORIGIN.into(), valid: true, ..Default::default() });
        r.builds.push(Build {
            id: id("b"),
            checkout_id: id("c"),
            origin: ORIGIN.into(),
            status: "PASS",
            ..Default::default()
        });
        r.tests.push(Test {
            id: id("t"),
            build_id: id("b"),
            origin: ORIGIN.into(),
            path: "binder.bench".into(),
            status: "DONE",
            number: Some(Number { value: 1.5, unit: "ms".into() }),
            ..Default::default()
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["version"]["major"], 5);
        assert_eq!(v["version"]["minor"], 3);
        assert_eq!(v["tests"][0]["number"]["unit"], "ms");
        assert!(v["builds"][0].get("duration").is_none(), "absent, not null");
    }
}
