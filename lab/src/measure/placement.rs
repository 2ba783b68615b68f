//! Where woken server threads ran, per CTABS mode: from a `--trace` run's step summaries
//! (`trace/summary.json`), the share of synchronous calls whose receiving thread was woken
//! on the caller's CPU, elsewhere in the caller's cluster, or in another cluster of the board.

use crate::harness::trace::{StepSummary, SUMMARY};
use crate::numbers::samples::{parse_step, MODE_NAMES};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Calls of one workload under one mode, pooled over its repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Placement {
    pub same_cpu: usize,
    pub same_cluster: usize,
    pub other_cluster: usize,
    /// Received by a thread that was running (no wake-up for the call).
    pub not_woken: usize,
}

impl Placement {
    pub fn woken(&self) -> usize {
        self.same_cpu + self.same_cluster + self.other_cluster
    }

    fn add(&mut self, pair: &str, n: usize, board: &board::Board) -> Result<()> {
        let (caller, target) = pair
            .split_once("->")
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
            .with_context(|| format!("{SUMMARY}: woken_server key {pair:?} is not CALLER->TARGET"))?;
        let cluster = |cpu| {
            board.cluster_index_of(cpu).with_context(|| {
                format!("{SUMMARY}: CPU {cpu} is in no cluster of board {}: give the run's --board", board.name())
            })
        };
        match (caller == target, cluster(caller)? == cluster(target)?) {
            (true, _) => self.same_cpu += n,
            (false, true) => self.same_cluster += n,
            (false, false) => self.other_cluster += n,
        }
        Ok(())
    }
}

/// (workload, mode) -> placement, for the steps of an interleaved benchmark plan.
pub fn from_summaries(
    steps: &BTreeMap<String, StepSummary>,
    board: &board::Board,
) -> Result<BTreeMap<(String, u32), Placement>> {
    let mut out: BTreeMap<(String, u32), Placement> = BTreeMap::new();
    for (step, s) in steps {
        let Some((bench, mode)) = parse_step(step) else { continue };
        let p = out.entry((bench.to_string(), mode)).or_default();
        for (pair, n) in &s.woken_server {
            p.add(pair, *n, board)?;
        }
        p.not_woken += s.server_not_woken;
    }
    Ok(out)
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "n/a".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / of as f64)
    }
}

/// One row per workload and mode: woken calls and their shares by place.
pub fn table(p: &BTreeMap<(String, u32), Placement>) -> String {
    let mut s = String::new();
    let head = ["Workload", "Mode", "woken", "caller's CPU", "same cluster", "other cluster", "not woken"];
    let _ = writeln!(
        s,
        "{:<12} {:<10} {:>6} {:>14} {:>14} {:>14} {:>10}",
        head[0], head[1], head[2], head[3], head[4], head[5], head[6]
    );
    let mut last = "";
    for ((bench, mode), x) in p {
        let name = MODE_NAMES.get(*mode as usize).copied().unwrap_or("?");
        let w = x.woken();
        let _ = writeln!(
            s,
            "{:<12} {:<10} {:>6} {:>14} {:>14} {:>14} {:>10}",
            if bench != last { bench.as_str() } else { "" },
            name,
            w,
            pct(x.same_cpu, w),
            pct(x.same_cluster, w),
            pct(x.other_cluster, w),
            x.not_woken
        );
        last = bench;
    }
    s
}

/// The report section for a run directory, or None when the run was not traced.
pub fn section(dir: &Path, board: &board::Board) -> Result<Option<String>> {
    let path = dir.join(SUMMARY);
    let Ok(bytes) = std::fs::read(&path) else { return Ok(None) };
    let steps: BTreeMap<String, StepSummary> =
        serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
    let p = from_summaries(&steps, board)?;
    if p.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "## Where woken server threads ran (--trace)\n\nSynchronous calls whose receiving thread was woken for them (sched_wakeup between \
         binder_transaction and binder_transaction_received), by where the wake-up put it relative to the caller's CPU \
         ({} clusters), pooled over the repetitions; \"not woken\": the thread was running. Tracing slows every call, so \
         take latencies from an untraced run.\n\n```\n{}```\n",
        board.name(),
        table(&p)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines 2001-2200 of four steps' trace.txt from a real run (`lab bench --profile quick
    /// --reps 1 --trace binder:binder_transaction,binder:binder_transaction_received,
    /// sched:sched_wakeup,sched:sched_switch` on the perf kernel, sa8155p).
    fn recorded() -> BTreeMap<String, StepSummary> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/trace");
        ["throughput-m0-r0", "throughput-m2-r0", "tiers-m0-r0", "tiers-m2-r0"]
            .iter()
            .map(|s| {
                let text = std::fs::read_to_string(dir.join(format!("{s}.txt"))).unwrap();
                (s.to_string(), crate::harness::trace::summarise(&text))
            })
            .collect()
    }

    #[test]
    fn recorded_trace_gives_shares_per_mode() {
        let board = crate::harness::opts::load_board("sa8155p").unwrap();
        let p = from_summaries(&recorded(), &board).unwrap();
        let got = |b: &str, m: u32| p[&(b.to_string(), m)];
        // Counted by hand from the excerpts (gold cluster 4-6, silver 0-3, prime 7).
        let place = |same_cpu, same_cluster, other_cluster, not_woken| Placement {
            same_cpu,
            same_cluster,
            other_cluster,
            not_woken,
        };
        assert_eq!(got("throughput", 0), place(0, 21, 0, 0));
        assert_eq!(got("throughput", 2), place(0, 19, 0, 1));
        // binder-tiers' callers on silver CPUs wake gold servers: other cluster.
        assert_eq!(got("tiers", 0), place(0, 5, 5, 0));
        assert_eq!(got("tiers", 2), place(0, 6, 5, 0));
        let t = table(&p);
        assert_eq!(t.lines().count(), 1 + 4, "{t}");
        let row = t.lines().find(|l| l.starts_with("tiers")).unwrap();
        assert!(
            row.contains("Baseline") && row.contains("50.0%") && row.split_whitespace().nth(2) == Some("10"),
            "{t}"
        );
        // A CPU the board lacks is an error that names the board.
        let small = crate::harness::opts::load_board("symmetric").unwrap();
        let mut one = BTreeMap::new();
        one.insert(
            "x-m0-r0".to_string(),
            StepSummary { woken_server: [("1->9".to_string(), 1)].into(), ..Default::default() },
        );
        let e = from_summaries(&one, &small).unwrap_err().to_string();
        assert!(e.contains("CPU 9") && e.contains("symmetric"), "{e}");
    }

    #[test]
    fn section_only_for_traced_runs() {
        let board = crate::harness::opts::load_board("sa8155p").unwrap();
        let d = tempfile::tempdir().unwrap();
        assert_eq!(section(d.path(), &board).unwrap(), None);
        std::fs::create_dir_all(d.path().join("trace")).unwrap();
        std::fs::write(d.path().join(SUMMARY), serde_json::to_vec(&recorded()).unwrap()).unwrap();
        let s = section(d.path(), &board).unwrap().unwrap();
        assert!(s.starts_with("## Where woken server threads ran") && s.contains("Patch 2/2"), "{s}");
    }
}
