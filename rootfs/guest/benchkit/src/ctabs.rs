//! The binder driver's CTABS debugfs files: the mode switch and the per-mode pick counters,
//! the Rust driver's (rust-driver/) or, when it has none, the C driver's (c-ctabs/).

use serde_json::{json, Value};
use std::collections::BTreeMap;

use labproto::{CTABS_MODE_FILE, CTABS_STATS_FILE, C_CTABS_MODE_FILE, C_CTABS_STATS_FILE};

type Stats = BTreeMap<String, BTreeMap<String, u64>>;

/// The running driver's mode file: the Rust driver's unless only the C driver's exists.
pub fn mode_file() -> &'static str {
    if !std::path::Path::new(CTABS_MODE_FILE).exists() && std::path::Path::new(C_CTABS_MODE_FILE).exists() {
        C_CTABS_MODE_FILE
    } else {
        CTABS_MODE_FILE
    }
}

/// The counters beside [`mode_file`].
pub fn stats_file() -> &'static str {
    if mode_file() == C_CTABS_MODE_FILE {
        C_CTABS_STATS_FILE
    } else {
        CTABS_STATS_FILE
    }
}

/// Writes `mode` to the CTABS mode file; Ok(false) when the file does not exist.
pub fn set_mode(mode: u32) -> Result<bool, String> {
    crate::write_switch(mode_file(), mode)
}

/// ctabs_stats text (a header `mode name...` then one row per mode) as mode → name → value.
pub fn parse_stats(text: &str) -> Stats {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Stats::new() };
    let names: Vec<&str> = header.split_whitespace().skip(1).collect();
    let mut out = Stats::new();
    for l in lines {
        let mut f = l.split_whitespace();
        let Some(mode) = f.next() else { continue };
        let row = names.iter().zip(f).filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?))).collect();
        out.insert(mode.to_string(), row);
    }
    out
}

/// A snapshot of ctabs_stats, None when the file is absent or unreadable.
pub fn snapshot() -> Option<Stats> {
    std::fs::read_to_string(stats_file()).ok().map(|t| parse_stats(&t))
}

/// after − before per mode and counter, as JSON (null when either snapshot is missing).
pub fn delta(before: &Option<Stats>, after: &Option<Stats>) -> Value {
    let (Some(b), Some(a)) = (before, after) else { return Value::Null };
    let mut out = serde_json::Map::new();
    for (mode, row) in a {
        let base = b.get(mode);
        let d: BTreeMap<&String, u64> =
            row.iter().map(|(k, v)| (k, v.saturating_sub(base.and_then(|r| r.get(k)).copied().unwrap_or(0)))).collect();
        out.insert(mode.clone(), json!(d));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_per_mode() {
        let b = parse_stats("mode same_cpu same_cluster fallback\n0 1 2 3\n1 10 0 0\n");
        let a = parse_stats("mode same_cpu same_cluster fallback\n0 1 5 3\n1 17 1 0\n");
        let d = delta(&Some(b), &Some(a.clone()));
        assert_eq!(d["0"]["same_cluster"], 3);
        assert_eq!(d["1"]["same_cpu"], 7);
        assert_eq!(d["1"]["fallback"], 0);
        assert!(delta(&None, &Some(a)).is_null());
    }
}
