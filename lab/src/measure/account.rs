//! The per-call account (`lab account`): seed 000's Baseline (`binder-throughput -w 8`, CTABS
//! mode 0) on the timing model, one boot per repetition length, per call of its timed phase
//! beside the phone's column from seed 000's table. The ledger every later change to the model
//! is judged by.
//!
//! Each figure is the benchmark's own (benchkit's timed phase: perf counters inherited over
//! its process tree, as `simpleperf stat` counts, and the scheduler's accounting of its
//! threads), with the system-wide counters of the same phase beside them. The clocks come
//! from the `power:cpu_frequency` trace between the benchmark's trace markers.

use crate::harness::opts::RunOpts;
use crate::harness::outcome::Outcome;
use crate::harness::trace::parse_line;
use crate::numbers::stats::median;
use anyhow::{bail, Context, Result};
use labproto::{Event, Plan, Step, TraceSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Workers of seed 000's binderThroughputTest.
pub const WORKERS: usize = 8;
/// The model's repetition length so far (`reproduce --model --iterations 400`).
pub const CURRENT_ITERATIONS: usize = 400;
const MARK: &str = "lab-timed-phase";

/// The phone's figures per call, from seed 000's Baseline (per run of 800K calls:
/// 143.15 B cycles, 21.83 B cache refs, 1,078 M misses, 922,848 migrations, 1,697 K
/// switches, 41,045 iterations/s), by row key.
pub const PHONE: [(&str, f64); 8] = [
    ("cycles", 143.15e9 / 800e3),
    ("l1d_refs", 21.83e9 / 800e3),
    ("l1d_misses", 1078e6 / 800e3),
    ("l1d_miss_pct", 1078e6 / 21.83e9 * 100.0),
    ("cpu_migrations", 922_848.0 / 800e3),
    ("context_switches", 1697e3 / 800e3),
    ("iteration_us", 8.0 / 41_045.0 * 1e6),
    ("timed_phase_ms", 800e3 / 41_045.0 * 1e3),
];

/// The rows: (key, label, digits).
const ROWS: [(&str, &str, usize); 20] = [
    ("instructions_user", "instructions, user", 0),
    ("instructions_kernel", "instructions, kernel", 0),
    ("instructions", "instructions", 0),
    ("cycles", "cycles", 0),
    ("cpi", "cycles per instruction", 2),
    ("l1d_refs", "L1D refs", 0),
    ("l1d_misses", "L1D misses", 0),
    ("l1d_miss_pct", "L1D miss rate (%)", 1),
    ("cpu_migrations", "migrations", 2),
    ("context_switches", "context switches", 2),
    ("on_cpu_us", "on-CPU time (us)", 2),
    ("runqueue_us", "waiting on a run queue (us)", 2),
    ("iteration_us", "iteration time per worker (us)", 1),
    ("timed_phase_ms", "timed phase (ms)", 2),
    ("sys.cycles", "system-wide: cycles", 0),
    ("sys.instructions", "system-wide: instructions", 0),
    ("sys.cpu_migrations", "system-wide: migrations", 2),
    ("sys.context_switches", "system-wide: context switches", 2),
    ("sys.task_clock_ns", "system-wide: CPU time incl. idle (us)", 2),
    ("task.task_clock_ns", "task clock (us)", 2),
];

/// The plan of one boot: `reps` runs of the Baseline at `iterations` per worker.
pub fn plan(iterations: usize, reps: usize) -> Plan {
    let steps = (0..reps)
        .map(|r| Step {
            name: format!("throughput-m0-r{r}"),
            argv: ["/bin/binder-throughput", "-w", &WORKERS.to_string(), "-i", &iterations.to_string()]
                .iter()
                .map(|s| s.to_string())
                .chain(crate::measure::bench::mode_args(0))
                .collect(),
            timeout_s: 3600,
            ..Default::default()
        })
        .collect();
    Plan { name: format!("account-i{iterations}"), steps, ..Default::default() }
}

/// The model (`reproduce --model`'s options) with the clocks traced.
pub fn opts(base: &RunOpts) -> RunOpts {
    // A few clock changes per millisecond at most: a small ring buffer holds a long phase.
    let trace = TraceSpec { buffer_kb: 1024, ..TraceSpec::parse("power:cpu_frequency").expect("a valid event") };
    RunOpts { trace: Some(trace), ..crate::measure::model::opts(base) }
}

/// One cpufreq policy's clock during a timed phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyClock {
    /// Time-weighted mean over the phase, MHz.
    pub mean_mhz: f64,
    /// (ms since the phase began, MHz) at the start and at each change.
    pub steps: Vec<(f64, f64)>,
}

/// The clocks of one timed phase: policy (its first CPU) -> clock; and the phase's length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Clocks {
    pub policies: BTreeMap<u32, PolicyClock>,
    pub phase_ms: f64,
}

/// "policyN=KHZ" pairs of a marker line.
fn marker_khz(args: &BTreeMap<&str, &str>) -> BTreeMap<u32, f64> {
    args.iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("policy")?.parse().ok()?, v.parse::<f64>().ok()? / 1000.0)))
        .collect()
}

/// The clocks between the benchmark's markers in one step's ftrace text.
pub fn clocks(text: &str) -> Option<Clocks> {
    let mut begin: Option<(f64, BTreeMap<u32, f64>)> = None;
    let mut changes: Vec<(f64, u32, f64)> = vec![];
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(e) = parse_line(l) else { continue };
        match e.event {
            "tracing_mark_write" if l.contains(&format!("{MARK} begin")) => begin = Some((e.ts, marker_khz(&e.args))),
            "tracing_mark_write" if l.contains(&format!("{MARK} end")) => {
                let (t0, start) = begin.take()?;
                let t1 = e.ts;
                let mut policies = BTreeMap::new();
                for (p, mhz0) in start {
                    let mut steps = vec![(0.0, mhz0)];
                    let mut area = 0.0;
                    let (mut t, mut f) = (t0, mhz0);
                    for &(ts, _, mhz) in changes.iter().filter(|c| c.1 == p && c.0 >= t0 && c.0 <= t1) {
                        area += f * (ts - t);
                        (t, f) = (ts, mhz);
                        steps.push(((ts - t0) * 1e3, mhz));
                    }
                    area += f * (t1 - t);
                    let mean_mhz = if t1 > t0 { area / (t1 - t0) } else { mhz0 };
                    policies.insert(p, PolicyClock { mean_mhz, steps });
                }
                return Some(Clocks { policies, phase_ms: (t1 - t0) * 1e3 });
            }
            "cpu_frequency" => {
                let cpu = e.args.get("cpu_id").and_then(|c| c.parse().ok());
                let khz = e.args.get("state").and_then(|s| s.parse::<f64>().ok());
                if let (Some(c), Some(k)) = (cpu, khz) {
                    changes.push((e.ts, c, k / 1000.0));
                }
            }
            _ => {}
        }
    }
    None
}

/// One run of the benchmark: its figures per call (row key -> value) and its clocks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunAccount {
    pub step: String,
    pub per_call: BTreeMap<String, f64>,
    pub clocks: Option<Clocks>,
    /// Counters the guest could not give, with its reason.
    pub unavailable: Vec<String>,
}

/// Per call figures from a throughput result's `timed_phase`.
pub fn per_call(tp: &serde_json::Value) -> Result<(BTreeMap<String, f64>, Vec<String>)> {
    let calls = tp["calls"].as_f64().filter(|c| *c > 0.0).context("timed_phase without calls")?;
    let ns = tp["ns"].as_f64().context("timed_phase without ns")?;
    let mut m = BTreeMap::new();
    let task = &tp["task"];
    let mut put = |k: &str, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            m.insert(k.to_string(), v);
        }
    };
    for k in [
        "instructions_user",
        "instructions_kernel",
        "cycles",
        "l1d_refs",
        "l1d_misses",
        "cpu_migrations",
        "context_switches",
    ] {
        put(k, task[k].as_f64().map(|v| v / calls));
    }
    put("task.task_clock_ns", task["task_clock_ns"].as_f64().map(|v| v / calls / 1e3));
    let (iu, ik) = (task["instructions_user"].as_f64(), task["instructions_kernel"].as_f64());
    let insns = iu.zip(ik).map(|(u, k)| u + k);
    put("instructions", insns.map(|i| i / calls));
    put("cpi", task["cycles"].as_f64().zip(insns).filter(|(_, i)| *i > 0.0).map(|(c, i)| c / i));
    put(
        "l1d_miss_pct",
        task["l1d_misses"]
            .as_f64()
            .zip(task["l1d_refs"].as_f64())
            .filter(|(_, r)| *r > 0.0)
            .map(|(x, r)| x / r * 100.0),
    );
    put("on_cpu_us", tp["schedstat"]["exec_ns"].as_f64().map(|v| v / calls / 1e3));
    put("runqueue_us", tp["schedstat"]["run_delay_ns"].as_f64().map(|v| v / calls / 1e3));
    let iterations = calls / WORKERS as f64;
    put("iteration_us", Some(ns / iterations / 1e3));
    put("timed_phase_ms", Some(ns / 1e6));
    for k in ["cycles", "instructions", "cpu_migrations", "context_switches"] {
        put(&format!("sys.{k}"), tp["system"][k].as_f64().map(|v| v / calls));
    }
    put("sys.task_clock_ns", tp["system"]["task_clock_ns"].as_f64().map(|v| v / calls / 1e3));
    let unavailable =
        tp["task_errors"].as_array().into_iter().flatten().filter_map(|e| e.as_str().map(String::from)).collect();
    Ok((m, unavailable))
}

/// Every throughput run of a finished account boot.
pub fn runs(dir: &Path, events: &[Event]) -> Result<Vec<RunAccount>> {
    let mut out = vec![];
    for e in events {
        let Event::Result { step, case, data, .. } = e else { continue };
        if case != "throughput" {
            continue;
        }
        let tp = &data["timed_phase"];
        if tp.is_null() {
            bail!(
                "{}: step {step} has no timed_phase: are the guest programs older than benchkit's timed phase?",
                dir.display()
            );
        }
        let (per_call, unavailable) = per_call(tp)?;
        let trace = dir.join("trace").join(step).join("trace.txt");
        let clocks = std::fs::read_to_string(&trace).ok().and_then(|t| clocks(&t));
        out.push(RunAccount { step: step.clone(), per_call, clocks, unavailable });
    }
    if out.is_empty() {
        bail!("{}: no throughput result", dir.display());
    }
    Ok(out)
}

/// One column of the account: a repetition length and its runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Column {
    pub iterations: usize,
    pub run_dir: PathBuf,
    pub runs: Vec<RunAccount>,
}

impl Column {
    /// The median over the runs of `key`.
    fn value(&self, key: &str) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().filter_map(|r| r.per_call.get(key).copied()).collect();
        median(&v)
    }

    /// The median over the runs of each policy's mean clock.
    fn clock(&self, policy: u32) -> Option<f64> {
        let v: Vec<f64> =
            self.runs.iter().filter_map(|r| r.clocks.as_ref()?.policies.get(&policy).map(|c| c.mean_mhz)).collect();
        median(&v)
    }
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    match v {
        None => "n/a".into(),
        Some(x) if digits == 0 && x.abs() >= 1e4 => format!("{:.1}K", x / 1e3),
        Some(x) => format!("{x:.digits$}"),
    }
}

/// The per-call table in Markdown: the phone, then each column; `clusters` names the
/// cpufreq policies (first CPU -> name).
pub fn table(columns: &[Column], clusters: &BTreeMap<u32, String>) -> String {
    let mut s = String::from("| per call | phone |");
    for c in columns {
        let _ = write!(s, " model, {} x {} |", WORKERS, c.iterations);
    }
    s.push_str("\n| --- | --- |");
    for _ in columns {
        s.push_str(" --- |");
    }
    s.push('\n');
    for (key, label, digits) in ROWS {
        let phone = PHONE.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let _ = write!(s, "| {label} | {} |", fmt(phone, digits));
        for c in columns {
            let _ = write!(s, " {} |", fmt(c.value(key), digits));
        }
        s.push('\n');
    }
    for (p, name) in clusters {
        let _ = write!(s, "| mean clock, {name} (MHz) | n/a |");
        for c in columns {
            let _ = write!(s, " {} |", fmt(c.clock(*p), 0));
        }
        s.push('\n');
    }
    s
}

/// The cpufreq policies of `board` by their first CPU, named by cluster.
pub fn cluster_names(board: &board::Board) -> BTreeMap<u32, String> {
    board.clusters().iter().filter_map(|c| Some((*c.cpus.first()?, c.name.clone()))).collect()
}

/// Writes `clocks-<iterations>.svg` for a column: each cluster's clock over the timed phase
/// of its first run. Returns the file.
pub fn plot(out: &Path, c: &Column, clusters: &BTreeMap<u32, String>) -> Result<Option<PathBuf>> {
    let Some(clk) = c.runs.iter().find_map(|r| r.clocks.as_ref()) else { return Ok(None) };
    let path = out.join(format!("clocks-{}.svg", c.iterations));
    let series: Vec<(String, Vec<(f64, f64)>)> = clk
        .policies
        .iter()
        .map(|(p, pc)| (clusters.get(p).cloned().unwrap_or_else(|| format!("policy{p}")), pc.steps.clone()))
        .collect();
    let title = format!("clocks during the timed phase, {} x {} calls", WORKERS, c.iterations);
    crate::numbers::plots::clock_steps(&path, &title, &series, clk.phase_ms)?;
    Ok(Some(path))
}

/// Runs the account: one boot per repetition length, `reps` runs in each.
pub fn run(iterations: &[usize], reps: usize, base: &RunOpts) -> Result<(Vec<Column>, Vec<Outcome>)> {
    let opts = opts(base);
    let mut cols = vec![];
    let mut outcomes = vec![];
    for &n in iterations {
        let o = crate::report::run_plan_and_report(
            &plan(n, reps),
            &RunOpts { name: format!("account-i{n}"), ..opts.clone() },
        )?;
        if o.ok() {
            cols.push(Column { iterations: n, run_dir: o.dir.clone(), runs: runs(&o.dir, &o.events)? });
        }
        outcomes.push(o);
    }
    Ok((cols, outcomes))
}

/// The report: the table, the plots and the runs behind them, written to `out`.
pub fn report(out: &Path, cols: &[Column], clusters: &BTreeMap<u32, String>) -> Result<String> {
    std::fs::create_dir_all(out)?;
    let mut text = format!(
        "# Per-call account, phone against model\n\nMedians over the runs of each boot. Phone: seed 000's Baseline per run of 800K calls.\n\n{}\n",
        table(cols, clusters)
    );
    for c in cols {
        if let Some(p) = plot(out, c, clusters)? {
            let _ = writeln!(
                text,
                "![clocks, {} x {}]({})",
                WORKERS,
                c.iterations,
                p.file_name().unwrap_or_default().to_string_lossy()
            );
        }
        let _ = writeln!(text, "\n{} x {}: {}", WORKERS, c.iterations, c.run_dir.display());
        let mut gone: Vec<&String> = c.runs.iter().flat_map(|r| &r.unavailable).collect();
        gone.dedup();
        for g in gone {
            let _ = writeln!(text, "- unavailable: {g}");
        }
    }
    crate::support::fs::write_atomic(&out.join("account.json"), serde_json::to_string_pretty(cols)?.as_bytes())?;
    crate::support::fs::write_atomic(&out.join("account.md"), text.as_bytes())?;
    Ok(text)
}

/// Re-reads a finished account (`account.json` in `dir`) from its run directories.
pub fn rerender(dir: &Path, clusters: &BTreeMap<u32, String>) -> Result<String> {
    let file = dir.join("account.json");
    let saved: Vec<Column> = serde_json::from_str(
        &std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}: is this an account directory?", file.display()))?,
    )?;
    let mut cols = vec![];
    for c in saved {
        let events = crate::measure::reproduce::saved_events(&c.run_dir)?;
        cols.push(Column { runs: runs(&c.run_dir, &events)?, ..c });
    }
    report(dir, &cols, clusters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRACE: &str = "# tracer: nop
 binder-throug-90 [001] ..... 10.000000: tracing_mark_write: lab-timed-phase begin policy0=300000 policy4=710400 policy7=825600
 <idle>-0 [004] d..2. 10.001000: cpu_frequency: state=1171200 cpu_id=4
 <idle>-0 [005] d..2. 10.001000: cpu_frequency: state=1171200 cpu_id=5
 <idle>-0 [000] d..2. 10.003000: cpu_frequency: state=1785600 cpu_id=0
 binder-throug-90 [001] ..... 10.004000: tracing_mark_write: lab-timed-phase end policy0=1785600 policy4=1171200 policy7=825600
 <idle>-0 [004] d..2. 10.005000: cpu_frequency: state=710400 cpu_id=4
";

    #[test]
    fn clocks_are_time_weighted_between_the_markers() {
        let c = clocks(TRACE).unwrap();
        assert!((c.phase_ms - 4.0).abs() < 1e-9);
        // silver: 300 MHz for 3 ms, then 1785.6 for 1 ms.
        assert!((c.policies[&0].mean_mhz - (300.0 * 3.0 + 1785.6) / 4.0).abs() < 1e-6);
        // gold: 710.4 for 1 ms, 1171.2 for 3 ms; the change after the end is not counted.
        assert!((c.policies[&4].mean_mhz - (710.4 + 1171.2 * 3.0) / 4.0).abs() < 1e-6);
        let steps = &c.policies[&4].steps;
        assert_eq!(steps.len(), 2);
        assert!((steps[1].0 - 1.0).abs() < 1e-9 && steps[1].1 == 1171.2, "{steps:?}");
        assert!((c.policies[&7].mean_mhz - 825.6).abs() < 1e-9);
        assert!(clocks("# tracer: nop\n").is_none());
    }

    #[test]
    fn per_call_divides_by_the_calls() {
        let tp = json!({"calls": 100, "ns": 2_000_000,
            "task": {"cycles": 6000000, "instructions_user": 1000000, "instructions_kernel": 3000000,
                     "l1d_refs": null, "l1d_misses": null, "cpu_migrations": 87, "context_switches": 212, "task_clock_ns": 900000},
            "task_errors": ["l1d_refs: No such file or directory (os error 2)"],
            "system": {"cycles": 8000000, "cpu_migrations": 90},
            "schedstat": {"exec_ns": 1000000, "run_delay_ns": 50000}});
        let (m, gone) = per_call(&tp).unwrap();
        assert_eq!(m["instructions"], 40000.0);
        assert_eq!(m["cpi"], 1.5);
        assert_eq!(m["context_switches"], 2.12);
        assert_eq!(m["on_cpu_us"], 10.0);
        assert_eq!(m["runqueue_us"], 0.5);
        // 100 calls of 8 workers: 12.5 iterations each in 2 ms.
        assert_eq!(m["iteration_us"], 160.0);
        assert_eq!(m["sys.cycles"], 80000.0);
        assert!(!m.contains_key("l1d_refs") && !m.contains_key("l1d_miss_pct"));
        assert_eq!(gone.len(), 1);
    }

    #[test]
    fn the_phone_column_is_seed_000s_table_per_call() {
        let phone: BTreeMap<&str, f64> = PHONE.into_iter().collect();
        assert!((phone["cycles"] - 178_937.5).abs() < 1.0);
        assert!((phone["context_switches"] - 2.12).abs() < 0.01);
        assert!((phone["iteration_us"] - 194.9).abs() < 0.1);
        let col = Column { iterations: 400, run_dir: "r".into(), runs: vec![] };
        let t = table(&[col], &BTreeMap::from([(0, "silver".to_string())]));
        assert!(t.contains("| cycles | 178.9K | n/a |"), "{t}");
        assert!(t.contains("| mean clock, silver (MHz) | n/a | n/a |"), "{t}");
    }
}
