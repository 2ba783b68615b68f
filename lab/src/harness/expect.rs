//! The board's `[expect]` check: the topology and scheduler domains the guest reports
//! against what the board describes.

use crate::harness::outcome::case_data;
use labproto::Event;

/// Compares the guest's topology report (if the plan had one) with the board.
pub fn check_topology(board: &board::Board, events: &[Event], dvfs: bool) -> Vec<String> {
    let Some(report) = case_data(events, "topology") else { return vec![] };
    let mut problems = match serde_json::from_value::<Vec<board::CpuObserved>>(report["cpus"].clone()) {
        Ok(obs) => board::compare(board, &obs),
        Err(e) => vec![format!("topology report unreadable: {e}")],
    };
    if let Some(sd) = report.get("sched_domains") {
        problems.extend(check_sched_domains(board, sd));
    }
    if let Some(e) = report.get("eas") {
        match serde_json::from_value::<board::EasObserved>(e.clone()) {
            Ok(obs) => problems.extend(board::compare_eas_with(board, &obs, dvfs)),
            Err(e) => problems.push(format!("EAS report unreadable: {e}")),
        }
    }
    problems
}

/// The scheduler must see what the board describes: a cluster (CLS) level for each CPU that
/// shares a cluster when there are several clusters, and asymmetric capacities exactly when
/// the board's capacities differ.
fn check_sched_domains(board: &board::Board, sd: &serde_json::Value) -> Vec<String> {
    let expect = board::expected_topology(board);
    let asym = expect.iter().map(|e| e.capacity).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let clusters = expect.iter().map(|e| e.cluster_id).collect::<std::collections::BTreeSet<_>>().len();
    let mut out = vec![];
    for e in &expect {
        let Some(domains) = sd.get(format!("cpu{}", e.cpu)).and_then(|d| d.as_array()) else {
            out.push(format!("guest: no scheduler domains reported for cpu{}", e.cpu));
            continue;
        };
        let names: Vec<&str> = domains.iter().filter_map(|d| d["name"].as_str()).collect();
        let has_flag =
            |f: &str| domains.iter().any(|d| d["flags"].as_array().is_some_and(|fl| fl.iter().any(|x| x == f)));
        let cluster_size = board::parse_cpulist(&e.cluster_cpus).map(|v| v.len()).unwrap_or(0);
        if clusters > 1 && cluster_size > 1 && !names.contains(&"CLS") {
            out.push(format!(
                "board: cpu{} in a cluster of {cluster_size}, guest sched domains: {names:?} (no CLS)",
                e.cpu
            ));
        }
        if asym != has_flag("SD_ASYM_CPUCAPACITY") {
            out.push(format!(
                "board: cpu{} capacities {}, guest sched domains {} SD_ASYM_CPUCAPACITY",
                e.cpu,
                if asym { "differ" } else { "are equal" },
                if asym { "lack" } else { "have" }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::opts::load_board;

    #[test]
    fn sched_domains_must_match_the_board() {
        let b = load_board("sa8155p").unwrap();
        let dom = |name: &str, flags: &[&str]| serde_json::json!({"name": name, "flags": flags});
        let mut sd = serde_json::Map::new();
        for cpu in 0..8 {
            let mut d = vec![dom("MC", &["SD_ASYM_CPUCAPACITY"])];
            if cpu < 7 {
                d.insert(0, dom("CLS", &["SD_CLUSTER"]));
            }
            sd.insert(format!("cpu{cpu}"), serde_json::Value::Array(d));
        }
        assert!(check_sched_domains(&b, &serde_json::Value::Object(sd.clone())).is_empty());
        sd.insert("cpu0".into(), serde_json::json!([dom("MC", &[])]));
        let p = check_sched_domains(&b, &serde_json::Value::Object(sd));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("cpu0 in a cluster of 4") && p[1].contains("lack SD_ASYM_CPUCAPACITY"));
    }
}
