//! Commands that boot more than once (reproduce, `reproduce --model`, `bench --matrix`,
//! `profile --compare`, the nightly's reproduction) run their boots through [`each`]: up to
//! `-j` at once when the guest cannot tell (icount and hicount: guest time is the instruction
//! count, so a boot's results do not depend on what else the host runs), one at a time
//! otherwise.

use crate::harness::opts::RunOpts;
use crate::support::{parallel, progress};
use anyhow::Result;

/// Why `opts` boots one at a time whatever `-j` says, if it does.
fn serial_reason(opts: &RunOpts) -> Option<String> {
    if !opts.tcg.deterministic() {
        let mode = format!("{:?}", opts.tcg).to_lowercase();
        return Some(format!(
            "--tcg {mode} measures in host time, which other boots would disturb; -j applies to --tcg icount|hicount"
        ));
    }
    if opts.echo || opts.stream {
        return Some("the live console (-v) would mix several guests' lines".into());
    }
    if opts.gdb {
        return Some("--gdb waits for one debugger at a time".into());
    }
    None
}

/// How many of `boots` boots run at once under `opts`; says why when `-j` asked for more and
/// gets one.
pub fn width(opts: &RunOpts, boots: usize) -> usize {
    if opts.jobs <= 1 || boots <= 1 {
        return 1;
    }
    match serial_reason(opts) {
        Some(why) => {
            progress::note(format!("{boots} boots, one at a time: {why}"));
            1
        }
        None => {
            let w = opts.jobs.min(boots);
            progress::note(format!("{boots} boots, {w} at once (-j {})", opts.jobs));
            w
        }
    }
}

/// Runs `boot` for every item, [`width`] at once, results in list order (see
/// [`parallel::try_map`]: the first failure stops further boots, progress is one line per
/// boot start and end). Ctrl-C and SIGTERM end every running boot (each run watches the one
/// process-wide flag) and start no more.
pub fn each<T: Sync, R: Send>(
    opts: &RunOpts,
    items: &[T],
    label: impl Fn(&T) -> String + Sync,
    boot: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    parallel::try_map(width(opts, items.len()), "boot", items, label, boot)
}

/// The `-j` default: the host's cores.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::qemu::Tcg;

    #[test]
    fn only_deterministic_unwatched_runs_go_in_parallel() {
        let o = |tcg| RunOpts { tcg, jobs: 4, ..Default::default() };
        assert_eq!(width(&o(Tcg::Icount), 9), 4);
        assert_eq!(width(&o(Tcg::Hicount), 3), 3, "never wider than the boots");
        assert_eq!(width(&o(Tcg::Icount), 1), 1);
        for tcg in [Tcg::Single, Tcg::Multi] {
            assert_eq!(width(&o(tcg), 9), 1, "{tcg:?}");
            assert!(serial_reason(&o(tcg)).unwrap().contains("host time"));
        }
        assert_eq!(width(&RunOpts { echo: true, ..o(Tcg::Icount) }, 9), 1);
        assert_eq!(width(&RunOpts { gdb: true, ..o(Tcg::Icount) }, 9), 1);
        assert_eq!(width(&RunOpts { jobs: 1, ..o(Tcg::Icount) }, 9), 1);
    }
}
