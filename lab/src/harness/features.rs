//! The lab QEMU's run features (`--tcg hicount`, `--cache`, `--dvfs`, `--idle`), each
//! declared once: the option that turns it on, what it needs (the lab QEMU, its timing
//! model, a part of the board) and whether a farm's worker can run it. Preparing a run, the
//! farm and the reports ask this table; a feature's DT node and QEMU arguments come from the
//! board crate (`board::DtbFeatures`, `board::cpufreq_hw_devices`, `board::idle_exit_arg`).
//! A new feature is a row here, its CLI flag, and the code that uses it.

use crate::harness::opts::RunOpts;
use crate::harness::qemu::Tcg;
use crate::kbuild::qemu::Choice;
use anyhow::{bail, Result};

/// What a feature needs of the emulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A device or patch only the lab QEMU has (`--qemu lab`).
    LabQemu,
    /// The lab QEMU's timing model (`--qemu lab --tcg hicount`).
    TimingModel,
}

/// One feature of the lab QEMU a run can ask for.
pub struct Feature {
    /// The option as the command line gives it.
    pub flag: &'static str,
    pub on: fn(&RunOpts) -> bool,
    /// What it does, for the messages ("emulates a qcom,cpufreq-hw").
    pub what: &'static str,
    pub needs: Needs,
    /// The part of the board it needs, as a message names it; None when the board has it.
    pub board_lacks: fn(&board::Board) -> Option<String>,
    /// A farm's worker runs it (its `qemu` device type starts the worker's own QEMU).
    pub on_farm: bool,
}

/// Every feature, in the order the command line and the reports name them.
pub const FEATURES: &[Feature] = &[
    Feature {
        flag: "--tcg hicount",
        on: |o| o.tcg == Tcg::Hicount,
        what: "is the lab QEMU's timing model (a time per instruction per CPU)",
        needs: Needs::LabQemu,
        board_lacks: |b| b.timing().is_none().then(|| "the board's [timing] section".into()),
        on_farm: false,
    },
    Feature {
        flag: "--cache",
        on: |o| o.cache,
        what: "charges cache latencies to each vCPU's own time",
        needs: Needs::TimingModel,
        board_lacks: |b| b.cache_model().is_none().then(|| "the board's [cache_model] section".into()),
        on_farm: false,
    },
    Feature {
        flag: "--dvfs",
        on: |o| o.dvfs,
        what: "emulates a qcom,cpufreq-hw",
        needs: Needs::LabQemu,
        board_lacks: |b| (!b.has_dvfs()).then(|| "an OPP list on every cluster (clusters[].dvfs)".into()),
        on_farm: false,
    },
    Feature {
        flag: "--idle",
        on: |o| o.idle,
        what: "charges each idle state's exit latency to the woken vCPU's own time",
        needs: Needs::TimingModel,
        board_lacks: |b| {
            if !board::has_idle(b) {
                return Some("a PSCI idle state on every cluster (clusters[].idle with a psci_param)".into());
            }
            // A StateID QEMU's power_state cannot carry is refused before anything is built.
            board::idle_exit_arg(b).err().map(|e| format!("idle states QEMU can enter ({e})"))
        },
        on_farm: false,
    },
];

/// The features `opts` asks for.
pub fn asked(opts: &RunOpts) -> impl Iterator<Item = &'static Feature> + '_ {
    FEATURES.iter().filter(move |f| (f.on)(opts))
}

/// Each feature `opts` asks for has what it needs, or the first that does not says what to add.
pub fn check(opts: &RunOpts, board: &board::Board) -> Result<()> {
    for f in asked(opts) {
        let lab = opts.qemu_choice() == Choice::Lab;
        match f.needs {
            Needs::LabQemu if !lab => bail!("{} {}, which only the lab QEMU has: add --qemu lab", f.flag, f.what),
            Needs::TimingModel if !lab || opts.tcg != Tcg::Hicount => {
                bail!("{} {}, which only the lab QEMU's timing model has: add --qemu lab --tcg hicount", f.flag, f.what)
            }
            _ => {}
        }
        if let Some(part) = (f.board_lacks)(board) {
            bail!("{} needs {part}, which {} lacks (board/sa8155p.toml has it)", f.flag, board.source());
        }
    }
    Ok(())
}

/// The first feature `opts` asks for that a farm cannot run, if any (with `--qemu lab`
/// itself, which no worker has yet).
pub fn not_on_farm(opts: &RunOpts) -> Option<&'static str> {
    if opts.qemu == Choice::Lab {
        return Some("--qemu lab");
    }
    asked(opts).find(|f| !f.on_farm).map(|f| f.flag)
}

/// The timing options of `opts` as the command line gives them: `--qemu X --tcg Y` and each
/// feature flag that is on (for reports and freeze records).
pub fn timing_words(opts: &RunOpts) -> String {
    let qemu = if opts.qemu_choice() == Choice::Lab { "lab" } else { "system" };
    let mut w = vec![format!("--qemu {qemu}"), format!("--tcg {}", format!("{:?}", opts.tcg).to_lowercase())];
    w.extend(asked(opts).filter(|f| !f.flag.starts_with("--tcg")).map(|f| f.flag.to_string()));
    w.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(name: &str) -> board::Board {
        crate::harness::opts::load_board_file(name, None, None).unwrap().0
    }

    fn err(opts: &RunOpts, b: &board::Board) -> String {
        check(opts, b).unwrap_err().to_string()
    }

    #[test]
    fn each_feature_says_what_to_add() {
        let b = board("sa8155p");
        let sys = RunOpts { qemu: Choice::System, ..Default::default() };
        assert!(err(&RunOpts { tcg: Tcg::Hicount, ..sys.clone() }, &b).contains("--tcg hicount is the lab QEMU"));
        assert!(err(&RunOpts { dvfs: true, ..sys.clone() }, &b).ends_with("add --qemu lab"));
        let lab = RunOpts { qemu: Choice::Lab, ..sys };
        assert!(check(&RunOpts { dvfs: true, ..lab.clone() }, &b).is_ok());
        for o in [RunOpts { idle: true, ..lab.clone() }, RunOpts { cache: true, ..lab.clone() }] {
            assert!(err(&o, &b).ends_with("add --qemu lab --tcg hicount"), "{}", err(&o, &b));
        }
        let all = RunOpts { tcg: Tcg::Hicount, cache: true, dvfs: true, idle: true, ..lab };
        assert!(check(&all, &b).is_ok());
        assert_eq!(timing_words(&all), "--qemu lab --tcg hicount --cache --dvfs --idle");
        // `auto` is the lab's build under hicount.
        let auto = RunOpts { qemu: Choice::Auto, ..all };
        assert!(check(&auto, &b).is_ok());
        assert_eq!(timing_words(&auto), "--qemu lab --tcg hicount --cache --dvfs --idle");
    }

    /// `auto` boots the deterministic modes on the lab's build (Debian's 10.0.2 is not
    /// deterministic under host load), everything else and every farm boot on the system's.
    #[test]
    fn auto_is_the_lab_build_where_boots_must_be_byte_identical() {
        let at = |tcg, lava: Option<crate::harness::opts::LavaTarget>| {
            RunOpts { tcg, lava, ..Default::default() }.qemu_choice()
        };
        assert_eq!(RunOpts::default().qemu, Choice::Auto);
        assert_eq!(at(Tcg::Icount, None), Choice::Lab);
        assert_eq!(at(Tcg::Hicount, None), Choice::Lab);
        assert_eq!(at(Tcg::Single, None), Choice::System);
        assert_eq!(at(Tcg::Multi, None), Choice::System);
        let farm = crate::harness::opts::LavaTarget {
            server: "s".into(),
            user: "u".into(),
            token: "t".into(),
            artifact_url: None,
        };
        assert_eq!(at(Tcg::Icount, Some(farm)), Choice::System);
        assert_eq!(
            RunOpts { qemu: Choice::System, tcg: Tcg::Icount, ..Default::default() }.qemu_choice(),
            Choice::System
        );
    }

    #[test]
    fn a_board_without_the_part_is_named() {
        let up = board("sm8150-upstream");
        let lab = RunOpts { qemu: Choice::Lab, tcg: Tcg::Hicount, ..Default::default() };
        assert!(err(&lab, &up).contains("the board's [timing] section"), "{}", err(&lab, &up));
        let lab = RunOpts { tcg: Tcg::Single, ..lab };
        let e = err(&RunOpts { dvfs: true, ..lab.clone() }, &up);
        assert!(e.contains("clusters[].dvfs"), "{e}");
        if !board::has_idle(&up) && up.timing().is_some() {
            let e = err(&RunOpts { idle: true, tcg: Tcg::Hicount, ..lab }, &up);
            assert!(e.contains("clusters[].idle"), "{e}");
        }
    }

    #[test]
    fn the_farm_runs_none_of_them_yet() {
        assert_eq!(not_on_farm(&RunOpts { tcg: Tcg::Icount, ..Default::default() }), None);
        assert_eq!(not_on_farm(&RunOpts { cache: true, ..Default::default() }), Some("--cache"));
        assert_eq!(not_on_farm(&RunOpts { qemu: Choice::Lab, ..Default::default() }), Some("--qemu lab"));
    }
}
