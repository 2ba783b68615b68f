//! `[timing]`: the parameters of the lab QEMU's heterogeneous icount (`--qemu lab --tcg
//! hicount`). Each CPU's local time advances by its cluster's picoseconds per instruction.
//!
//! By default `ps_per_insn = 1e6 / (max_mhz * ipc_1024 * capacity_dmips_mhz / 1024)`: a core
//! of capacity-dmips-mhz 1024 retires `ipc_1024` instructions per cycle at its max clock, and
//! smaller cores proportionally fewer, so the speed ratios are exactly the capacity ratios the
//! kernel computes (drivers/base/arch_topology.c). `ipc_1024` sets the absolute scale only.

use crate::error::{BoardError, Ctx};
use crate::model::{Cluster, Timing};
use crate::schema::TimingFile;

/// Derived picoseconds per instruction of a cluster.
pub fn derived_ps_per_insn(c: &Cluster, ipc_1024: f64) -> u64 {
    let mhz = f64::from(c.max_khz) / 1000.0;
    (1e6 / (mhz * ipc_1024 * f64::from(c.capacity_dmips_mhz) / 1024.0)).round() as u64
}

/// Checks `[timing]` against the clusters.
pub(crate) fn validate(cx: &Ctx<'_>, t: &TimingFile, clusters: &[Cluster], smp: u32) -> Result<Timing, BoardError> {
    let bad = |f: &str, p: String, fix: &str| cx.err(format!("timing.{f}"), p, fix);
    if !(t.ipc_1024.is_finite() && t.ipc_1024 > 0.0 && t.ipc_1024 <= 16.0) {
        return Err(bad(
            "ipc_1024",
            format!("{} is out of range", t.ipc_1024),
            "use instructions per cycle in (0, 16], e.g. 1.0",
        ));
    }
    if t.quantum_ns == 0 || t.quantum_ns > 1_000_000 {
        return Err(bad("quantum_ns", format!("{} ns is out of range", t.quantum_ns), "use 1..=1000000 ns (a few µs)"));
    }
    if let Some(name) = t.ps_per_insn.keys().find(|n| !clusters.iter().any(|c| &c.name == *n)) {
        let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        return Err(bad("ps_per_insn", format!("{name:?} is not a cluster"), &format!("use one of {names:?}")));
    }
    if let Some((name, _)) = t.ps_per_insn.iter().find(|(_, &ps)| ps == 0) {
        return Err(bad(&format!("ps_per_insn.{name}"), "0 ps per instruction".into(), "use a positive number"));
    }
    let mut cpu_ps = vec![0; smp as usize];
    for c in clusters {
        let ps = t.ps_per_insn.get(&c.name).copied().unwrap_or_else(|| derived_ps_per_insn(c, t.ipc_1024));
        for &cpu in &c.cpus {
            cpu_ps[cpu as usize] = ps.max(1);
        }
    }
    Ok(Timing { cpu_ps_per_insn: cpu_ps, quantum_ns: t.quantum_ns })
}

#[cfg(test)]
mod tests {
    use crate::Board;

    const BOARD: &str = "board/sa8155p.toml";

    fn sa8155p_with(timing: &str) -> Result<Board, crate::BoardError> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let start = text.find("[timing]").unwrap();
        let end = text[start..].find("\n# What the guest").unwrap() + start;
        Board::from_str_named(&format!("{}{timing}\n{}", &text[..start], &text[end..]), BOARD)
    }

    #[test]
    fn sa8155p_speeds_follow_the_capacities() {
        let b = sa8155p_with("[timing]\nipc_1024 = 1.0\nquantum_ns = 1000\n").unwrap();
        let t = b.timing().unwrap();
        assert_eq!(t.cpu_ps_per_insn, [1175, 1175, 1175, 1175, 413, 413, 413, 352]);
        let ratio = |a: u64| a as f64 / 352.0;
        // 1024/306 and 1024/871 (the capacities), within 1%.
        assert!((ratio(1175) / (1024.0 / 306.0) - 1.0).abs() < 0.01);
        assert!((ratio(413) / (1024.0 / 871.0) - 1.0).abs() < 0.01);
        assert_eq!(t.quantum_ns, 1000);
        let shipped = Board::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/sa8155p.toml"))).unwrap();
        assert_eq!(shipped.timing(), b.timing());
    }

    #[test]
    fn overrides_and_errors_name_the_field() {
        let b = sa8155p_with("[timing]\nipc_1024 = 2.0\nquantum_ns = 100\nps_per_insn = { gold = 500 }\n").unwrap();
        assert_eq!(b.timing().unwrap().cpu_ps_per_insn, [588, 588, 588, 588, 500, 500, 500, 176]);
        let e = sa8155p_with("[timing]\nipc_1024 = 1.0\nquantum_ns = 5000\nps_per_insn = { big = 1 }\n").unwrap_err();
        assert_eq!(e.field, "timing.ps_per_insn");
        assert!(e.fix.contains("silver"), "{e}");
        let e = sa8155p_with("[timing]\nipc_1024 = 0.0\nquantum_ns = 5000\n").unwrap_err();
        assert_eq!(e.field, "timing.ipc_1024");
        let e = sa8155p_with("[timing]\nipc_1024 = 1.0\nquantum_ns = 0\n").unwrap_err();
        assert!(e.to_string().contains("timing.quantum_ns: 0 ns is out of range"), "{e}");
        let e = sa8155p_with("[timing]\nipc_1024 = 1.0\n").unwrap_err();
        assert!(e.to_string().contains("quantum_ns"), "{e}");
    }
}
