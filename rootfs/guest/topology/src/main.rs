//! Step program: reports what the kernel believes about the CPU topology (capacities,
//! clusters, scheduler domains) as one `topology` result, for the host to compare with
//! the board description.

use labproto::{report, Status};
use serde_json::{json, Map, Value};
use std::fs;
use std::path::Path;
use std::time::Instant;

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// Sorted numeric suffixes of the entries `<prefix>N` in `dir`.
fn numbered(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut v: Vec<u32> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// One entry per /sys/devices/system/cpu/cpuN; missing files become null.
fn cpus(sys_cpu: &Path) -> Vec<Value> {
    numbered(sys_cpu, "cpu")
        .into_iter()
        .map(|n| {
            let d = sys_cpu.join(format!("cpu{n}"));
            let num = |rel: &str| read_trim(&d.join(rel)).and_then(|s| s.parse::<i64>().ok());
            json!({
                "cpu": n,
                "capacity": num("cpu_capacity"),
                "cluster_id": num("topology/cluster_id"),
                "cluster_cpus": read_trim(&d.join("topology/cluster_cpus_list")),
            })
        })
        .collect()
}

/// debugfs sched/domains/cpuN/domainM/{name,flags} as {"cpuN": [{domain, name, flags}]}.
fn sched_domains(domains: &Path) -> Map<String, Value> {
    let mut out = Map::new();
    for n in numbered(domains, "cpu") {
        let cdir = domains.join(format!("cpu{n}"));
        let levels: Vec<Value> = numbered(&cdir, "domain")
            .into_iter()
            .map(|m| {
                let ddir = cdir.join(format!("domain{m}"));
                let flags: Option<Vec<String>> =
                    read_trim(&ddir.join("flags")).map(|f| f.split_whitespace().map(String::from).collect());
                json!({ "domain": m, "name": read_trim(&ddir.join("name")), "flags": flags })
            })
            .collect();
        out.insert(format!("cpu{n}"), Value::Array(levels));
    }
    out
}

fn collect(sys_cpu: &Path, domains: &Path) -> (Status, Option<String>, Value) {
    let cpus = cpus(sys_cpu);
    let doms = sched_domains(domains);
    let mut notes = Vec::new();
    if doms.is_empty() {
        notes.push(format!("no scheduler domains under {} (debugfs not mounted or not built)", domains.display()));
    }
    let status = if cpus.is_empty() {
        notes.push(format!("no CPUs under {}", sys_cpu.display()));
        Status::Fail
    } else {
        Status::Pass
    };
    let data = json!({
        "online": read_trim(&sys_cpu.join("online")),
        "cpus": cpus,
        "sched_domains": doms,
    });
    let message = (!notes.is_empty()).then(|| notes.join("; "));
    (status, message, data)
}

/// The kernel only publishes sched/domains while sched/verbose is on (or after booting
/// with `sched_verbose`): switch it on for the read and restore it after.
struct VerboseGuard {
    path: &'static Path,
    restore: bool,
}

impl VerboseGuard {
    fn enable(path: &'static Path, domains: &Path) -> VerboseGuard {
        let off = read_trim(path).is_some_and(|v| v == "N");
        let restore = off && !domains.exists() && fs::write(path, "Y").is_ok();
        VerboseGuard { path, restore }
    }
}

impl Drop for VerboseGuard {
    fn drop(&mut self) {
        if self.restore {
            let _ = fs::write(self.path, "N");
        }
    }
}

fn main() {
    let t = Instant::now();
    let domains = Path::new("/sys/kernel/debug/sched/domains");
    let guard = VerboseGuard::enable(Path::new("/sys/kernel/debug/sched/verbose"), domains);
    let (status, message, mut data) = collect(Path::new("/sys/devices/system/cpu"), domains);
    data["sched_verbose_toggled"] = guard.restore.into();
    drop(guard);
    report("topology", status, t.elapsed().as_secs_f64() * 1000.0, message, data);
    std::process::exit(if status == Status::Fail { 1 } else { 0 });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    #[test]
    fn collects_a_fake_sysfs() {
        let root = std::env::temp_dir().join(format!("topology-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let cpu = root.join("cpu");
        for (n, cap, cl, list) in [(0, 306, 0, "0-1"), (1, 306, 0, "0-1"), (10, 1024, 1, "10")] {
            put(&cpu, &format!("cpu{n}/cpu_capacity"), &format!("{cap}\n"));
            put(&cpu, &format!("cpu{n}/topology/cluster_id"), &format!("{cl}\n"));
            put(&cpu, &format!("cpu{n}/topology/cluster_cpus_list"), &format!("{list}\n"));
        }
        fs::create_dir_all(cpu.join("cpufreq")).unwrap(); // not a cpuN dir
        put(&cpu, "online", "0-1,10\n");
        let dom = root.join("domains");
        put(&dom, "cpu0/domain0/name", "CLS\n");
        put(&dom, "cpu0/domain0/flags", "SD_BALANCE_NEWIDLE SD_SHARE_LLC \n");
        put(&dom, "cpu0/domain1/name", "MC\n");

        let (status, message, data) = collect(&cpu, &dom);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(status, Status::Pass);
        assert_eq!(message, None);
        assert_eq!(data["cpus"][0], json!({"cpu":0,"capacity":306,"cluster_id":0,"cluster_cpus":"0-1"}));
        assert_eq!(data["cpus"][2]["cpu"], 10);
        assert_eq!(data["cpus"].as_array().unwrap().len(), 3);
        assert_eq!(data["online"], "0-1,10");
        assert_eq!(data["sched_domains"]["cpu0"][0]["flags"], json!(["SD_BALANCE_NEWIDLE", "SD_SHARE_LLC"]));
        assert_eq!(data["sched_domains"]["cpu0"][1], json!({"domain":1,"name":"MC","flags":null}));
    }

    #[test]
    fn missing_trees() {
        let (status, message, data) = collect(Path::new("/nonexistent/cpu"), Path::new("/nonexistent/d"));
        assert_eq!(status, Status::Fail);
        assert!(message.unwrap().contains("no CPUs"));
        assert_eq!(data["cpus"], json!([]));
    }
}
