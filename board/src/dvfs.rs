//! DVFS and idle states as board data: each cluster's operating points (`clusters[].dvfs`),
//! the lookup tables of the lab QEMU's emulated `qcom,cpufreq-hw` built from them, and the
//! idle states (`clusters[].idle`, `cluster_idle`).
//!
//! The register encoding is the one the unchanged upstream driver reads
//! (drivers/cpufreq/qcom-cpufreq-hw.c, `qcom_soc_data`): a frequency LUT row holds the
//! clock source in bits 31:30 (nonzero: the frequency is `xo` x L, L in bits 7:0), and the
//! core count in 18:16 (1 marks a turbo-only row); a voltage row holds mV in bits 11:0. With
//! source 0 the frequency is the `alternate` clock / 2.

use crate::error::{BoardError, Ctx};
use crate::model::{Board, ClusterDvfs, IdleState, Opp};
use crate::schema::{ClusterFile, IdleStateFile};

/// The `xo` clock: the SM8150's 19.2 MHz crystal (sm8150.dtsi `rpmhcc RPMH_CXO_CLK`); every
/// PLL-sourced OPP is a whole multiple L of it.
pub const XO_HZ: u32 = 19_200_000;
/// The `alternate` clock: GPLL0 at 600 MHz (sm8150.dtsi gives cpufreq_hw `<&gcc GPLL0>`);
/// the driver's source-0 rate is half of it, 300 MHz, silver's lowest OPP.
pub const ALTERNATE_HZ: u32 = 600_000_000;

/// Where the lab QEMU maps the emulated `qcom,cpufreq-hw`: a hole in virt's memory map
/// (after the virtio-mmio transports at 0x0a000000, before the platform bus at 0x0c000000).
pub const CPUFREQ_HW_BASE: u64 = 0x0b00_0000;

/// Register block of frequency domain `i`: sm8150.dtsi's offsets (0x18323000, 0x18325800,
/// 0x18327800, 0x1400 each) moved to [`CPUFREQ_HW_BASE`]; further domains 0x2000 apart.
pub fn cpufreq_hw_reg(i: usize) -> (u64, u64) {
    let off = match i {
        0 => 0,
        n => 0x2800 + 0x2000 * (n as u64 - 1),
    };
    (CPUFREQ_HW_BASE + off, 0x1400)
}

/// One row of a frequency domain's lookup tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LutRow {
    /// The frequency LUT word (`reg_freq_lut + 32 * i`).
    pub freq: u32,
    /// The voltage LUT word (`reg_volt_lut + 32 * i`).
    pub volt: u32,
    /// The frequency it encodes, kHz.
    pub khz: u32,
    /// The domain's CPUs' picoseconds per instruction at this OPP (0 without `[timing]`).
    pub ps_per_insn: u64,
}

/// One frequency domain of the emulated `qcom,cpufreq-hw`: a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpufreqDomain {
    /// The cluster's CPUs.
    pub cpus: Vec<u32>,
    /// LUT rows, lowest OPP first; the hardware boots at the last (the cluster's top clock,
    /// the speed `[timing]` gives the CPUs at reset).
    pub rows: Vec<LutRow>,
}

/// Encodes one OPP as LUT words; None when the hardware cannot produce the frequency.
pub fn lut_words(opp: Opp) -> Option<(u32, u32)> {
    let hz = u64::from(opp.khz) * 1000;
    let (src, l) = if hz == u64::from(ALTERNATE_HZ / 2) {
        (0u32, 0u32)
    } else if hz % u64::from(XO_HZ) == 0 && (1..=255).contains(&(hz / u64::from(XO_HZ))) {
        (1, (hz / u64::from(XO_HZ)) as u32)
    } else {
        return None;
    };
    // Core count 0: not the turbo marker (1); the driver reads nothing else from it.
    let mv = opp.microvolt / 1000;
    (mv <= 0xfff).then_some(((src << 30) | l, mv))
}

/// The frequency domains of a board whose clusters all have `dvfs`; empty otherwise.
/// Picoseconds per instruction scale with 1/f from `[timing]`'s figure at the top clock.
pub fn cpufreq_domains(board: &Board) -> Vec<CpufreqDomain> {
    if !board.has_dvfs() {
        return vec![];
    }
    board
        .clusters()
        .iter()
        .map(|c| {
            let top_ps = board.timing().map_or(0, |t| t.cpu_ps_per_insn[c.cpus[0] as usize]);
            let opps = &c.dvfs.as_ref().expect("has_dvfs").opps;
            let rows = opps
                .iter()
                .map(|&o| {
                    let (freq, volt) = lut_words(o).expect("validated: every OPP encodes");
                    let ps = (top_ps as f64 * f64::from(c.max_khz) / f64::from(o.khz)).round() as u64;
                    LutRow { freq, volt, khz: o.khz, ps_per_insn: ps }
                })
                .collect();
            CpufreqDomain { cpus: c.cpus.clone(), rows }
        })
        .collect()
}

/// QEMU `-device` arguments (JSON) of the lab QEMU's emulated qcom,cpufreq-hw, one per
/// frequency domain: its register block, its vCPUs, the LUT words, and picoseconds per
/// instruction (0 without `[timing]`: the speed then never changes) and the clock of each
/// row. The DT half of the same device is `dtb`'s cpufreq-hw node.
pub fn cpufreq_hw_devices(board: &Board) -> Vec<String> {
    cpufreq_domains(board)
        .iter()
        .enumerate()
        .map(|(i, d)| {
            serde_json::json!({
                "driver": "qcom-cpufreq-hw",
                "addr": cpufreq_hw_reg(i).0,
                "cpus": d.cpus.iter().fold(0u64, |m, &c| m | (1 << c)),
                "freq-lut": d.rows.iter().map(|r| r.freq).collect::<Vec<_>>(),
                "volt-lut": d.rows.iter().map(|r| r.volt).collect::<Vec<_>>(),
                "ps-per-insn": d.rows.iter().map(|r| r.ps_per_insn).collect::<Vec<_>>(),
                // The row's clock: the PMU cycle counter counts at it (qemu/0015).
                "khz": d.rows.iter().map(|r| r.khz).collect::<Vec<_>>(),
            })
            .to_string()
        })
        .collect()
}

/// `clusters[i].dvfs`: OPPs ascending, each one the hardware can produce; `max_mhz` one of
/// them (those above it are dropped); voltages from `min_microvolt` at the lowest OPP to the
/// `eas.microvolt` at `max_mhz`, linear in frequency, rounded to mV.
pub(crate) fn check_dvfs(
    cx: &Ctx<'_>,
    field: &str,
    c: &ClusterFile,
    max_khz: u32,
) -> Result<Option<ClusterDvfs>, BoardError> {
    let Some(d) = &c.dvfs else { return Ok(None) };
    let Some(eas) = c.eas else {
        return Err(cx.err(
            field,
            "dvfs without eas",
            "add the cluster's eas table: its microvolt is the top OPP's voltage and its coefficient the energy model's",
        ));
    };
    let mut khz = Vec::with_capacity(d.opp_mhz.len());
    for (i, &mhz) in d.opp_mhz.iter().enumerate() {
        let k = mhz_to_khz(mhz).map_err(|p| cx.err(format!("{field}.opp_mhz[{i}]"), p, "give the OPP in MHz"))?;
        if khz.last().is_some_and(|&prev| prev >= k) {
            return Err(cx.err(
                format!("{field}.opp_mhz[{i}]"),
                format!("{mhz} MHz is not above the OPP before it"),
                "list the OPPs in ascending order, each once",
            ));
        }
        if lut_words(Opp { khz: k, microvolt: 0 }).is_none() {
            return Err(cx.err(
                format!("{field}.opp_mhz[{i}]"),
                format!("{mhz} MHz is neither a multiple of the 19.2 MHz xo (L 1..=255) nor 300 MHz (GPLL0 / 2)"),
                "use a frequency the SoC's clock plan can produce (sm8150.dtsi's OPP tables list them)",
            ));
        }
        khz.push(k);
    }
    let Some(top) = khz.iter().position(|&k| k == max_khz) else {
        return Err(cx.err(
            format!("{field}.opp_mhz"),
            format!("max_mhz {} is not one of the OPPs", f64::from(max_khz) / 1000.0),
            "make max_mhz one of opp_mhz (OPPs above it are left out, as a lower speed bin does)",
        ));
    };
    khz.truncate(top + 1);
    if !(100_000..=eas.microvolt).contains(&d.min_microvolt) {
        return Err(cx.err(
            format!("{field}.min_microvolt"),
            format!("{} µV is not between 100000 and the top OPP's {} µV", d.min_microvolt, eas.microvolt),
            "give the lowest OPP's voltage in µV, at most eas.microvolt",
        ));
    }
    let (lo, hi) = (f64::from(khz[0]), f64::from(max_khz));
    let opps = khz
        .iter()
        .map(|&k| {
            let t = if hi > lo { (f64::from(k) - lo) / (hi - lo) } else { 1.0 };
            let uv = f64::from(d.min_microvolt) + t * f64::from(eas.microvolt - d.min_microvolt);
            Opp { khz: k, microvolt: ((uv / 1000.0).round() as u32) * 1000 }
        })
        .collect();
    Ok(Some(ClusterDvfs { opps }))
}

/// Idle states: named, shallowest first (exit latency and residency not decreasing), with an
/// exit latency no longer than the residency that pays for it (the DT binding's rule).
pub(crate) fn check_idle(cx: &Ctx<'_>, field: &str, raw: &[IdleStateFile]) -> Result<Vec<IdleState>, BoardError> {
    let mut out: Vec<IdleState> = Vec::with_capacity(raw.len());
    for (i, s) in raw.iter().enumerate() {
        let f = format!("{field}[{i}]");
        if s.name.trim().is_empty() {
            return Err(cx.err(format!("{f}.name"), "empty idle state name", "name it, e.g. \"power-collapse\""));
        }
        if s.exit_us > s.min_residency_us {
            return Err(cx.err(
                format!("{f}.exit_us"),
                format!("exit latency {} µs is longer than the min residency {} µs", s.exit_us, s.min_residency_us),
                "check the source: arm,idle-state requires exit-latency-us <= min-residency-us",
            ));
        }
        if let Some(prev) = out.last() {
            if s.exit_us < prev.exit_us || s.min_residency_us < prev.min_residency_us {
                return Err(cx.err(
                    f,
                    format!("{:?} is shallower than {:?} before it", s.name, prev.name),
                    "list idle states shallowest first",
                ));
            }
        }
        out.push(IdleState {
            name: s.name.clone(),
            entry_us: s.entry_us,
            exit_us: s.exit_us,
            min_residency_us: s.min_residency_us,
            psci_param: s.psci_param,
            local_timer_stop: s.local_timer_stop,
        });
    }
    Ok(out)
}

/// MHz as written in a board file to whole kHz (cpufreq's unit), fitting the DT's u32 Hz.
pub(crate) fn mhz_to_khz(mhz: f64) -> Result<u32, String> {
    if !mhz.is_finite() || mhz <= 0.0 || mhz >= 10_000.0 {
        return Err(format!("{mhz} MHz is out of range"));
    }
    let khz = (mhz * 1000.0).round();
    if (mhz * 1000.0 - khz).abs() > 1e-6 {
        return Err(format!("{mhz} MHz is not a whole number of kHz"));
    }
    // clock-frequency is u32 Hz.
    if khz * 1000.0 > f64::from(u32::MAX) {
        return Err(format!("{mhz} MHz does not fit the DT's 32-bit clock-frequency"));
    }
    Ok(khz as u32)
}
