//! Step program: reports what the kernel believes about the CPU topology (capacities,
//! clusters, scheduler domains) and about energy-aware scheduling (sched_energy_aware, the
//! cpufreq policies, the energy model's perf domains and costs, EAS's kernel log lines) as
//! one `topology` result, for the host to compare with the board description.

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

/// sysfs cpufreq/policyN: cpus, governor, driver and frequencies (kHz).
fn policies(cpufreq: &Path) -> Vec<Value> {
    numbered(cpufreq, "policy")
        .into_iter()
        .map(|n| {
            let d = cpufreq.join(format!("policy{n}"));
            let num = |rel: &str| read_trim(&d.join(rel)).and_then(|s| s.parse::<u64>().ok());
            json!({
                "policy": n,
                "cpus": read_trim(&d.join("related_cpus")).map(|s| cpus_to_list(&s)),
                "governor": read_trim(&d.join("scaling_governor")),
                "driver": read_trim(&d.join("scaling_driver")),
                "cur_khz": num("scaling_cur_freq"),
                "max_khz": num("cpuinfo_max_freq"),
                "available_khz": read_trim(&d.join("scaling_available_frequencies"))
                    .map(|s| s.split_whitespace().filter_map(|f| f.parse::<u64>().ok()).collect::<Vec<_>>()),
            })
        })
        .collect()
}

/// cpufreq's space-separated CPU numbers ("0 1 2 3") in the kernel's list format ("0-3").
fn cpus_to_list(s: &str) -> String {
    let mut v: Vec<u32> = s.split_whitespace().filter_map(|c| c.parse().ok()).collect();
    v.sort_unstable();
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        while i + 1 < v.len() && v[i + 1] == v[i] + 1 {
            i += 1;
        }
        parts.push(if start == v[i] { start.to_string() } else { format!("{start}-{}", v[i]) });
        i += 1;
    }
    parts.join(",")
}

/// debugfs energy_model/<dev>/{cpus, ps:<kHz>/{frequency,power,cost,performance}}.
fn energy_model(root: &Path) -> Vec<Value> {
    let mut doms: Vec<Value> = fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("cpus").exists())
        .map(|e| {
            let d = e.path();
            let mut states: Vec<(u64, Value)> = fs::read_dir(&d)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|p| p.file_name().to_string_lossy().starts_with("ps:"))
                .map(|p| {
                    let num = |f: &str| read_trim(&p.path().join(f)).and_then(|s| s.parse::<u64>().ok());
                    let v = json!({"khz": num("frequency"), "power": num("power"), "cost": num("cost"), "performance": num("performance")});
                    (num("frequency").unwrap_or(0), v)
                })
                .collect();
            states.sort_by_key(|(f, _)| *f);
            json!({
                "name": e.file_name().to_string_lossy(),
                "cpus": read_trim(&d.join("cpus")),
                "states": states.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            })
        })
        .collect();
    doms.sort_by_key(|d| d["name"].as_str().map(String::from));
    doms
}

/// EAS as the kernel runs it: the sysctl, cpufreq policies, energy model, kernel log lines.
fn eas(sysctl: &Path, cpufreq: &Path, em: &Path, log: Vec<String>) -> Value {
    json!({
        "sched_energy_aware": fs::read_to_string(sysctl).ok().map(|s| s.trim().to_string()),
        "policies": policies(cpufreq),
        "energy_model": energy_model(em),
        "log": log,
    })
}

/// Whether the scheduler really runs EAS on perf domains: it logs that only while
/// sched_verbose is on, so with verbose on (the caller's [`VerboseGuard`]) turn
/// sched_energy_aware off and on again, which rebuilds the domains, and return the kernel's
/// lines ("sched_energy_set: stopping EAS", "... starting EAS", "root_domain 0-7: pd7:{ cpus=7
/// nr_pstate=1 } ..."). Nothing is touched unless EAS is possible (the sysctl reads 1).
fn eas_probe(sysctl: &Path) -> Vec<String> {
    if read_trim(sysctl).as_deref() != Some("1") {
        return vec![];
    }
    let Ok(mut k) = testkit::kmsg::Kmsg::open_at_end() else { return vec![] };
    let toggled = fs::write(sysctl, "0").is_ok() && fs::write(sysctl, "1").is_ok();
    let mut lines: Vec<String> =
        k.read_new().into_iter().map(|r| r.text).filter(|t| t.contains("EAS") || t.contains(" pd")).collect();
    if !toggled {
        lines.push(format!("topology: could not write {}", sysctl.display()));
    }
    lines
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

pub fn main() {
    let t = Instant::now();
    let domains = Path::new("/sys/kernel/debug/sched/domains");
    let guard = VerboseGuard::enable(Path::new("/sys/kernel/debug/sched/verbose"), domains);
    let (status, message, mut data) = collect(Path::new("/sys/devices/system/cpu"), domains);
    let sysctl = Path::new("/proc/sys/kernel/sched_energy_aware");
    let log = eas_probe(sysctl);
    // A cpufreq driver that registers before fs_initcall (qcom-cpufreq-hw, postcore) puts its
    // domains at the debugfs root: kernel/power/energy_model.c's rootdir does not exist yet.
    let em = Path::new("/sys/kernel/debug/energy_model");
    let em = if energy_model(em).is_empty() { Path::new("/sys/kernel/debug") } else { em };
    data["eas"] = eas(sysctl, Path::new("/sys/devices/system/cpu/cpufreq"), em, log);
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
    fn collects_fake_cpufreq_and_energy_model() {
        let root = std::env::temp_dir().join(format!("topology-eas-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        put(&root, "sysctl", "1\n");
        for (n, cpus, khz) in [(0, "0 1 2 3", 1785600), (4, "4 5 6", 2419200)] {
            put(&root, &format!("cpufreq/policy{n}/related_cpus"), &format!("{cpus}\n"));
            put(&root, &format!("cpufreq/policy{n}/scaling_governor"), "schedutil\n");
            put(&root, &format!("cpufreq/policy{n}/scaling_cur_freq"), &format!("{khz}\n"));
            put(&root, &format!("cpufreq/policy{n}/cpuinfo_max_freq"), &format!("{khz}\n"));
            put(&root, &format!("em/cpu{n}/cpus"), &format!("{}\n", if n == 0 { "0-3" } else { "4-6" }));
            put(&root, &format!("em/cpu{n}/ps:{khz}/frequency"), &format!("{khz}\n"));
            put(&root, &format!("em/cpu{n}/ps:{khz}/cost"), "9248\n");
        }
        put(&root, "em/cpu4/ps:576000/frequency", "576000\n");
        put(&root, "cpufreq/policy0/scaling_available_frequencies", "300000 1785600 \n");
        let v = eas(&root.join("sysctl"), &root.join("cpufreq"), &root.join("em"), vec!["starting EAS".into()]);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(v["sched_energy_aware"], "1");
        assert_eq!(v["policies"][0]["cpus"], "0-3");
        assert_eq!(v["policies"][1]["governor"], "schedutil");
        assert_eq!(v["policies"][0]["available_khz"], json!([300000, 1785600]));
        assert_eq!(v["policies"][1]["available_khz"], Value::Null);
        assert_eq!(v["policies"][1]["max_khz"], 2419200);
        assert_eq!(v["energy_model"][1]["name"], "cpu4");
        assert_eq!(v["energy_model"][1]["cpus"], "4-6");
        // States sorted by frequency, missing files null.
        assert_eq!(
            v["energy_model"][1]["states"][0],
            json!({"khz": 576000, "power": null, "cost": null, "performance": null})
        );
        assert_eq!(v["energy_model"][1]["states"][1]["cost"], 9248);
        assert_eq!(cpus_to_list("7 4 5 0"), "0,4-5,7");
        let none = eas(Path::new("/nonexistent/s"), Path::new("/nonexistent/c"), Path::new("/nonexistent/e"), vec![]);
        assert!(none["sched_energy_aware"].is_null() && none["policies"] == json!([]));
    }

    #[test]
    fn missing_trees() {
        let (status, message, data) = collect(Path::new("/nonexistent/cpu"), Path::new("/nonexistent/d"));
        assert_eq!(status, Status::Fail);
        assert!(message.unwrap().contains("no CPUs"));
        assert_eq!(data["cpus"], json!([]));
    }
}
