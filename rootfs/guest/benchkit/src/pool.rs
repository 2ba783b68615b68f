//! The benchmarks' server thread pools: libbinder's by default, `--threads N` for a fixed
//! pool, and what the pools did as result data.

use crate::Args;
use binder::pool::PoolSize;
use serde_json::{json, Value};

/// `--threads N`: a fixed pool of N loopers; absent: libbinder's pool (max threads 15).
pub fn size(a: &Args) -> Result<PoolSize, String> {
    let n = if a.has("threads") { Some(a.get("threads", 0usize)?) } else { None };
    PoolSize::from_threads(n)
}

/// The pool setting plus, per server process, the threads it started and the
/// BR_SPAWN_LOOPER requests it got.
pub fn json(size: PoolSize, started: &[u64], spawn_requests: &[u64]) -> Value {
    let mut v = match size {
        PoolSize::Aosp { max_threads } => json!({"kind": "aosp", "max_threads": max_threads}),
        PoolSize::Fixed(n) => json!({"kind": "fixed", "threads": n}),
    };
    v["threads_started"] = json!(started);
    v["spawn_requests"] = json!(spawn_requests);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_option_selects_the_pool() {
        let parse = |s: &str| Args::parse(s.split_whitespace().map(String::from), &[], &["threads"]).unwrap();
        assert_eq!(size(&parse("")).unwrap(), PoolSize::AOSP);
        assert_eq!(size(&parse("--threads 2")).unwrap(), PoolSize::Fixed(2));
        assert!(size(&parse("--threads 0")).unwrap_err().contains("AOSP pool"));
        let j = json(PoolSize::AOSP, &[3, 4], &[2, 3]);
        assert_eq!(j["kind"], "aosp");
        assert_eq!(j["max_threads"], 15);
        assert_eq!(j["threads_started"], json!([3, 4]));
        assert_eq!(json(PoolSize::Fixed(2), &[], &[])["threads"], 2);
    }
}
