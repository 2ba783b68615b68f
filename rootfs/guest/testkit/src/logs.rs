//! binderfs `binder_logs/stats` (mounted with `stats=global`): the global BC_*/BR_*
//! counters and, per process using binder, its threads, nodes, refs and buffers.
//! The format is the same in the Rust and the C driver for the fields read here.

use std::collections::BTreeMap;

pub const LOGS_DIR: &str = "/dev/binderfs/binder_logs";

/// One `proc N` block of the stats file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    pub pid: i32,
    pub context: String,
    pub threads: u64,
    pub nodes: u64,
    pub refs: u64,
    pub refs_strong: u64,
    pub refs_weak: u64,
    pub buffers: u64,
    pub outstanding: u64,
}

/// The whole stats file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Global command/return counters ("BC_TRANSACTION" → n).
    pub global: BTreeMap<String, u64>,
    pub procs: Vec<ProcStats>,
}

impl Stats {
    pub fn read() -> std::io::Result<Stats> {
        Ok(parse_stats(&std::fs::read_to_string(format!("{LOGS_DIR}/stats"))?))
    }

    pub fn proc(&self, pid: i32) -> Vec<&ProcStats> {
        self.procs.iter().filter(|p| p.pid == pid).collect()
    }

    pub fn counter(&self, name: &str) -> u64 {
        self.global.get(name).copied().unwrap_or(0)
    }

    /// Totals over all processes: (procs, threads, nodes, refs, buffers).
    pub fn totals(&self) -> (u64, u64, u64, u64, u64) {
        self.procs
            .iter()
            .fold((0, 0, 0, 0, 0), |(p, t, n, r, b), x| (p + 1, t + x.threads, n + x.nodes, r + x.refs, b + x.buffers))
    }
}

fn num(s: &str) -> u64 {
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub fn parse_stats(text: &str) -> Stats {
    let mut st = Stats::default();
    let mut cur: Option<ProcStats> = None;
    for line in text.lines() {
        if let Some(pid) = line.strip_prefix("proc ") {
            if let Some(p) = cur.take() {
                st.procs.push(p);
            }
            cur = Some(ProcStats { pid: pid.trim().parse().unwrap_or(-1), ..Default::default() });
            continue;
        }
        let t = line.trim();
        if let (Some(p), Some(ctx)) = (cur.as_mut(), t.strip_prefix("context ")) {
            p.context = ctx.to_string();
            continue;
        }
        let Some((k, v)) = t.split_once(':') else { continue };
        match cur.as_mut() {
            None => {
                if k.starts_with("BC_") || k.starts_with("BR_") {
                    st.global.insert(k.to_string(), num(v));
                }
            }
            Some(p) => match k {
                "threads" => p.threads = num(v),
                "nodes" => p.nodes = num(v),
                "buffers" => p.buffers = num(v),
                "outstanding transactions" => p.outstanding = num(v),
                "refs" => {
                    // "refs: 3 s 2 w 3"
                    let f: Vec<&str> = v.split_whitespace().collect();
                    p.refs = f.first().and_then(|x| x.parse().ok()).unwrap_or(0);
                    p.refs_strong = f.get(2).and_then(|x| x.parse().ok()).unwrap_or(0);
                    p.refs_weak = f.get(4).and_then(|x| x.parse().ok()).unwrap_or(0);
                }
                _ => {}
            },
        }
    }
    if let Some(p) = cur.take() {
        st.procs.push(p);
    }
    st
}

/// `binder_logs/state` as text ("" if unreadable).
pub fn read_state() -> String {
    std::fs::read_to_string(format!("{LOGS_DIR}/state")).unwrap_or_default()
}

/// Pids with a `proc N` block in a state or stats text.
pub fn pids_in(text: &str) -> Vec<i32> {
    let mut v: Vec<i32> = text.lines().filter_map(|l| l.strip_prefix("proc ")?.trim().parse().ok()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUST_STATS: &str = "\
binder stats:
BC_TRANSACTION: 12
BC_FREE_BUFFER: 11
BR_REPLY: 6
proc 81
context binder
  threads: 2
  requested threads: 0+0/0
  free oneway space: 520192
  buffers: 1
  outstanding transactions: 0
  nodes: 3
  refs: 2 s 1 w 2
  BC_TRANSACTION: 5

proc 90
context hwbinder
  threads: 1
  nodes: 0
  refs: 0 s 0 w 0
";

    #[test]
    fn parses_global_and_per_process() {
        let s = parse_stats(RUST_STATS);
        assert_eq!(s.counter("BC_TRANSACTION"), 12);
        assert_eq!(s.counter("BR_REPLY"), 6);
        assert_eq!(s.counter("BR_NOOP"), 0);
        assert_eq!(s.procs.len(), 2);
        let p = &s.procs[0];
        assert_eq!((p.pid, p.context.as_str(), p.threads, p.nodes, p.buffers), (81, "binder", 2, 3, 1));
        assert_eq!((p.refs, p.refs_strong, p.refs_weak), (2, 1, 2));
        assert_eq!(s.proc(90)[0].context, "hwbinder");
        assert_eq!(s.totals(), (2, 3, 3, 2, 1));
        assert_eq!(pids_in(RUST_STATS), [81, 90]);
        assert_eq!(parse_stats("binder stats:\n").procs.len(), 0);
    }
}
