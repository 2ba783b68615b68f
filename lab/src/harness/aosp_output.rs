//! AOSP's benchmark programs print text, not the lab's results: binderThroughputTest its
//! "iterations per sec", "average" and histogram-percentile lines (plus the exact percentiles
//! of aosp/patches 0008), schd-dbg its JSON plus the per-tier lines of aosp/patches 0009. A
//! step that runs one through the lab's wrapper (`lab-aosp: program NAME` on its console)
//! becomes one result of the shape the lab's ports report (case `throughput` or `tiers`), so
//! every table that reads the ports reads these too.
//!
//! The input is the console lines the init prefixed with `[step] `: this works on a live run
//! and on a saved `console.log` alike.

use labproto::{Event, Status};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The line the wrapper prints before it runs the program, and its settings lines.
pub const MARKER: &str = "lab-aosp: ";

/// The tiers and classes of schd-dbg's tier lines (patch 0009), in the port's names.
const TIERS: [&str; 3] = ["same_core", "same_cluster", "cross_cluster"];
const CLASSES: [&str; 2] = ["fifo", "other"];

/// Every step's console lines, by step, in order.
fn by_step(lines: &[String]) -> BTreeMap<&str, Vec<&str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in lines {
        let Some((name, text)) = line.strip_prefix('[').and_then(|l| l.split_once("] ")) else { continue };
        out.entry(name).or_default().push(text.trim_end_matches('\r'));
    }
    out
}

/// One result per step that ran an AOSP program through the wrapper.
pub fn from_console(lines: &[String]) -> Vec<Event> {
    let mut events = vec![];
    for (step, text) in by_step(lines) {
        let settings = Settings::of(&text);
        let parsed = match settings.program.as_deref() {
            Some("binderThroughputTest") => ("throughput", throughput(&text)),
            Some("schd-dbg") => ("tiers", tiers(&text)),
            _ => continue,
        };
        let (case, r) = parsed;
        let (status, message, mut data) = match r {
            Ok(d) => (Status::Pass, None, d),
            Err(why) => (Status::Fail, Some(why), json!({})),
        };
        data["userspace"] = json!("aosp");
        data["program"] = json!(settings.program);
        data["ctabs_mode"] = json!(settings.ctabs_mode);
        data["prio_inherit"] = json!(settings.prio_inherit);
        events.push(Event::Result {
            step: step.to_string(),
            case: case.into(),
            status,
            duration_ms: 0.0,
            message,
            data,
        });
    }
    events
}

/// What the wrapper said about the run: the program and the switches in effect.
#[derive(Debug, Default, PartialEq)]
struct Settings {
    program: Option<String>,
    ctabs_mode: Option<u32>,
    prio_inherit: Option<u32>,
}

impl Settings {
    fn of(text: &[&str]) -> Settings {
        let mut s = Settings::default();
        for l in text {
            let Some(rest) = l.strip_prefix(MARKER) else { continue };
            let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
            match k {
                "program" => s.program = Some(v.trim().to_string()),
                "ctabs_mode" => s.ctabs_mode = v.trim().parse().ok(),
                "prio_inherit" => s.prio_inherit = v.trim().parse().ok(),
                _ => {}
            }
        }
        s
    }
}

/// `key: value` pairs of a line such as `50%: 0.195312 90%: 0.585938 ...` (the value is the
/// next word after each key).
fn pairs(line: &str) -> BTreeMap<&str, f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(2).filter_map(|w| Some((w[0].strip_suffix(':')?, w[1].parse().ok()?))).collect()
}

/// binderThroughputTest's figures: its own (p50..p99 are bucket midpoints) and, from patch
/// 0008's `exact` line, the exact percentiles. The last run counts (`-t` prints a training
/// round first, without percentiles).
fn throughput(text: &[&str]) -> Result<Value, String> {
    if let Some(l) = text
        .iter()
        .find(|l| l.starts_with("nonzero child status") || (l.starts_with("thread ") && l.contains(" failed ")))
    {
        return Err(format!("binderThroughputTest: a worker failed: {l}"));
    }
    let last = |p: &str| text.iter().rev().find(|l| l.starts_with(p)).copied();
    let ips = last("iterations per sec:")
        .and_then(|l| l["iterations per sec:".len()..].trim().parse::<f64>().ok())
        .ok_or("binderThroughputTest printed no \"iterations per sec\" line: did it run to its end?")?;
    let avg = last("average:").ok_or("binderThroughputTest printed no \"average:\" line")?;
    // average:0.0181638ms worst:0.053296ms best:0.011552ms
    let ms = |k: &str| -> Option<f64> {
        let v = avg.split_whitespace().find_map(|w| w.strip_prefix(k))?;
        v.trim_end_matches("ms").parse().ok()
    };
    let buckets = last("50%:").map(pairs).unwrap_or_default();
    let exact = last("exact ").map(pairs).unwrap_or_default();
    let pick = |m: &BTreeMap<&str, f64>, k: &str| m.get(k).copied();
    let mut d = json!({
        "iterations_per_sec": ips,
        "avg_ms": ms("average:"), "worst_ms": ms("worst:"), "best_ms": ms("best:"),
        // The program's own: midpoints of its 0.39 ms histogram buckets.
        "percentiles": "buckets",
        "p50_ms": pick(&buckets, "50%"), "p90_ms": pick(&buckets, "90%"),
        "p95_ms": pick(&buckets, "95%"), "p99_ms": pick(&buckets, "99%"),
    });
    if d["avg_ms"].is_null() || d["p50_ms"].is_null() || d["p99_ms"].is_null() {
        return Err(format!("binderThroughputTest's figures are incomplete: {avg:?} and {:?}", last("50%:")));
    }
    if !exact.is_empty() {
        d["exact"] = json!({
            "p50_ms": pick(&exact, "50%"), "p90_ms": pick(&exact, "90%"),
            "p95_ms": pick(&exact, "95%"), "p99_ms": pick(&exact, "99%"),
        });
        // Calls as an integer: `lab profile` divides by it (as_u64).
        d["samples"] = json!(pick(&exact, "calls").map(|n| n as u64));
    }
    Ok(d)
}

/// schd-dbg's tier and policy lines (patch 0009), summed over its client processes, as the
/// port's `classes` and `server_policies`; its "inheritance" verdict.
fn tiers(text: &[&str]) -> Result<Value, String> {
    let mut count: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    let mut policies: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for l in text {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["tier", class, tier, n, ns] => {
                let (Ok(n), Ok(ns)) = (n.parse::<u64>(), ns.parse::<u64>()) else { continue };
                let e = count.entry((class, tier)).or_default();
                (e.0, e.1) = (e.0 + n, e.1 + ns);
            }
            ["policy", class, policy, n] => {
                let Ok(n) = n.parse::<u64>() else { continue };
                let m = policies.entry(class).or_default();
                let old = m.get(*policy).and_then(Value::as_u64).unwrap_or(0);
                m.insert(policy.to_string(), json!(old + n));
            }
            _ => {}
        }
    }
    if count.is_empty() {
        return Err("schd-dbg printed no tier lines (\"tier CLASS TIER COUNT TOTAL_NS\", aosp/patches 0009): \
                    is the userspace built with the lab's patches, and did the program finish?"
            .into());
    }
    let mut classes = Map::new();
    for class in CLASSES {
        let calls: u64 = TIERS.iter().map(|t| count.get(&(class, *t)).map_or(0, |c| c.0)).sum();
        let mut o = Map::new();
        for tier in TIERS {
            let (c, ns) = count.get(&(class, tier)).copied().unwrap_or((0, 0));
            o.insert(
                tier.into(),
                json!({
                    "count": c,
                    "pct": if calls > 0 { 100.0 * c as f64 / calls as f64 } else { 0.0 },
                    "avg_ms": (c > 0).then(|| ns as f64 / c as f64 / 1e6),
                }),
            );
        }
        classes.insert(class.into(), Value::Object(o));
    }
    let inheritance = text.iter().find_map(|l| {
        let v = l.trim().strip_prefix("\"inheritance\":")?;
        Some(v.trim().trim_matches('"').to_string())
    });
    Ok(json!({
        "classes": classes,
        "server_policies": policies,
        "inherit_rt": false,
        "inheritance": inheritance,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(fixture: &str) -> Vec<String> {
        fixture.lines().map(String::from).collect()
    }

    fn data(ev: &Event) -> (&str, &str, Status, &Value) {
        match ev {
            Event::Result { step, case, status, data, .. } => (step, case, *status, data),
            _ => panic!("{ev:?}"),
        }
    }

    /// Recorded: `reproduce --profile quick --only 000 --userspace aosp --tcg icount` on perf,
    /// 2026-12-07, aosp/patches 0001-0010 (target/lab/runs/*-bench-quick-*/console.log, one step's lines).
    #[test]
    fn binder_throughput_test_gives_its_buckets_and_the_exact_percentiles() {
        let ev = from_console(&lines(include_str!("testdata/aosp-throughput.console")));
        assert_eq!(ev.len(), 1, "{ev:?}");
        let (step, case, status, d) = data(&ev[0]);
        assert_eq!((step, case, status), ("throughput-m1-r0", "throughput", Status::Pass));
        assert_eq!(d["iterations_per_sec"], 3204.99);
        assert_eq!((d["avg_ms"].as_f64(), d["worst_ms"].as_f64()), (Some(0.557599), Some(1.92018)));
        assert_eq!(d["percentiles"], "buckets");
        // Buckets 1 and 3 of 0.39 ms, where the exact values are 0.560 and 1.299 ms.
        assert_eq!((d["p50_ms"].as_f64(), d["p99_ms"].as_f64()), (Some(0.585938), Some(1.36719)));
        assert_eq!((d["exact"]["p50_ms"].as_f64(), d["exact"]["p99_ms"].as_f64()), (Some(0.559856), Some(1.29946)));
        assert_eq!(d["samples"].as_u64(), Some(2000));
        assert_eq!((d["ctabs_mode"].as_u64(), d["prio_inherit"].as_u64()), (Some(1), Some(0)));
        assert_eq!((d["userspace"].as_str(), d["program"].as_str()), (Some("aosp"), Some("binderThroughputTest")));
    }

    /// Recorded as above (its step `tiers-pi-m2-r1`).
    #[test]
    fn schd_dbg_gives_the_ports_tier_shape() {
        let recorded = lines(include_str!("testdata/aosp-schd-dbg.console"));
        let ev = from_console(&recorded);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let (step, case, status, d) = data(&ev[0]);
        assert_eq!((step, case, status), ("tiers-pi-m2-r1", "tiers", Status::Pass));
        let t = &d["classes"]["other"]["same_core"];
        assert_eq!(t["count"], 242);
        assert!((t["pct"].as_f64().unwrap() - 242.0 / 300.0 * 100.0).abs() < 1e-9, "{t}");
        assert!((t["avg_ms"].as_f64().unwrap() - 77499424.0 / 242.0 / 1e6).abs() < 1e-12, "{t}");
        assert_eq!(d["classes"]["fifo"]["cross_cluster"]["count"], 51);
        assert!(d["classes"]["other"]["cross_cluster"]["avg_ms"].is_null(), "no calls, no average");
        // The phone's configuration: pi=1 without INHERIT_RT serves the SCHED_FIFO caller at
        // SCHED_NORMAL, so schd-dbg's own priority check fails (patch 0010 made it FIFO).
        assert_eq!(d["server_policies"]["fifo"]["SCHED_OTHER"], 300);
        assert_eq!((d["prio_inherit"].as_u64(), d["inheritance"].as_str()), (Some(1), Some("FAIL")));
        // With several pairs every client prints its lines: they add up.
        let twice: Vec<String> =
            recorded.iter().chain(recorded.iter().filter(|l| l.contains("] tier "))).cloned().collect();
        let ev2 = from_console(&twice);
        let (.., d2) = data(&ev2[0]);
        assert_eq!(d2["classes"]["other"]["same_core"]["count"], 484);
        assert_eq!(d2["classes"]["other"]["same_core"]["pct"], t["pct"]);
        assert!(d2["classes"]["fifo"]["cross_cluster"]["avg_ms"] == d["classes"]["fifo"]["cross_cluster"]["avg_ms"]);
    }

    #[test]
    fn a_step_without_the_wrapper_is_not_read_and_broken_output_fails() {
        let plain =
            lines("[throughput-m0-r0] iterations per sec: 10\n[throughput-m0-r0] average:1ms worst:2ms best:0.5ms");
        assert!(from_console(&plain).is_empty(), "the ports report their own results");
        let cut = lines(
            "[throughput-m0-r0] lab-aosp: program binderThroughputTest\n[throughput-m0-r0] Created BinderWorker0",
        );
        let ev = from_console(&cut);
        let Event::Result { status, message, .. } = &ev[0] else { panic!() };
        assert_eq!(*status, Status::Fail);
        assert!(message.as_deref().unwrap().contains("no \"iterations per sec\" line"), "{message:?}");
        let dead = lines(
            "[t-m0-r0] lab-aosp: program binderThroughputTest\n[t-m0-r0] iterations per sec: 5\n[t-m0-r0] nonzero child status256",
        );
        let Event::Result { message, .. } = &from_console(&dead)[0] else { panic!() };
        assert!(message.as_deref().unwrap().contains("a worker failed"), "{message:?}");
        let old = lines("[tiers-m0-r0] lab-aosp: program schd-dbg\n[tiers-m0-r0] \"inheritance\": \"PASS\"");
        let Event::Result { message, .. } = &from_console(&old)[0] else { panic!() };
        assert!(message.as_deref().unwrap().contains("patches 0009"), "{message:?}");
    }
}
