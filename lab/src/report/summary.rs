//! The run summary people read: topology table, results, boot time, problems.

use crate::harness::outcome::Outcome;

/// Human summary: topology table, step results, boot time, problems.
pub fn summary(o: &Outcome) -> String {
    let mut s = String::new();
    if let Some(cpus) = o.data("topology").and_then(|d| d.get("cpus")).and_then(|c| c.as_array()) {
        s.push_str("cpu  capacity  cluster  cluster_cpus\n");
        for c in cpus {
            let f = |k: &str| c[k].as_str().map(String::from).unwrap_or_else(|| c[k].to_string());
            s.push_str(&format!(
                "{:>3}  {:>8}  {:>7}  {}\n",
                f("cpu"),
                f("capacity"),
                f("cluster_id"),
                f("cluster_cpus")
            ));
        }
    }
    for (step, case, status, msg) in o.results() {
        s.push_str(&format!(
            "{:<5} {step}/{case}{}\n",
            format!("{status:?}").to_uppercase(),
            msg.map(|m| format!(": {m}")).unwrap_or_default()
        ));
    }
    if let Some(b) = o.boot_s {
        s.push_str(&format!("boot: {b:.2} s to the init's first message\n"));
    }
    s.push_str(&format!("run directory: {}\n", o.dir.display()));
    if let Some(note) = o.emulator_note() {
        s.push_str(&format!("note: {note}\n"));
    }
    let problems = o.problems();
    if problems.is_empty() {
        s.push_str("result: OK\n");
    } else {
        s.push_str(&format!("result: FAILED ({} problem(s))\n", problems.len()));
        for p in problems {
            s.push_str(&format!("- {p}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_the_problems() {
        let o = crate::harness::outcome::tests::three_problems();
        assert!(summary(&o).contains("result: FAILED (3 problem(s))"));
    }
}
