//! `lab run`, `lab conformance` and `lab fuzz`: one run of a plan (or of one command), its
//! summary (and per-case table); the exit code says what failed (docs/src/reference/exit-codes.md).

use crate::cli::args::{Given, RunArgs};
use crate::harness::adhoc;
use crate::harness::outcome::Exit;
use crate::report::{self, summary::summary};
use anyhow::Result;

pub fn run(args: &RunArgs) -> Result<Exit> {
    let o = report::run_and_report(&args.opts("default")?)?;
    print!("{}", summary(&o));
    if !o.ok() {
        println!("reproduce: {}", args.reproducer("run-qemu", &[]));
    }
    Ok(o.exit())
}

/// `lab run -- CMD`: the command's output on stdout, the lab's on stderr, its exit code ours
/// (it may be any code, so this exits itself unless the command passed).
pub fn command(args: &RunArgs, timeout_s: u64, command: &[String]) -> Result<Exit> {
    if args.plan.is_some() {
        anyhow::bail!("give either --plan or a command after `--`, not both");
    }
    let plan = adhoc::command_plan(command, timeout_s);
    let opts = crate::harness::opts::RunOpts { stream: true, ..args.opts("default")? };
    let o = report::run_plan_and_report(&plan, &opts)?;
    let code = adhoc::exit_code(&o);
    eprint!("{}", summary(&o));
    if code != 0 {
        let mut extra = vec![];
        if timeout_s != 600 {
            extra.extend(["--timeout".to_string(), timeout_s.to_string()]);
        }
        extra.push("--".into());
        extra.extend(command.iter().cloned());
        eprintln!("lab: exit code {code}; reproduce: {}", args.reproducer("run-qemu", &extra));
    }
    if code == 0 {
        return Ok(Exit::Ok);
    }
    std::process::exit(code);
}

/// Which conformance cases run.
#[derive(clap::Args, Debug, Default)]
pub struct CaseArgs {
    /// Print the suite's cases and exit (no boot).
    #[arg(long)]
    pub list: bool,
    /// Run only this case (repeatable; opt-in cases run only when named).
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
    /// Leave this case out (repeatable).
    #[arg(long = "skip", value_name = "NAME")]
    pub skip: Vec<String>,
}

/// The conformance cases, one line each.
pub fn case_list() -> String {
    let w = labproto::CONFORMANCE_CASES.iter().map(|c| c.name.len()).max().unwrap_or(0);
    labproto::CONFORMANCE_CASES
        .iter()
        .map(|c| format!("{:<w$}  {}{}\n", c.name, if c.opt_in { "(opt-in) " } else { "" }, c.summary))
        .collect()
}

/// Runs a plan and prints the per-case table (with the run's summary below it).
pub fn suite(args: &RunArgs, default_plan: &str, sel: &Given<CaseArgs>) -> Result<Exit> {
    suite_with(args, args.opts(default_plan)?, default_plan, sel, &[])
}

/// [`suite`] with options already made (`lab fuzz --guided` adds to them); `extra` are the
/// command's own arguments, for the reproducer line.
pub fn suite_with(
    args: &RunArgs,
    opts: crate::harness::opts::RunOpts,
    default_plan: &str,
    sel: &Given<CaseArgs>,
    extra: &[String],
) -> Result<Exit> {
    let plan = adhoc::select_cases(&crate::harness::opts::load_plan(&opts.plan)?, &sel.cases, &sel.skip)?;
    let o = report::run_plan_and_report(&plan, &opts)?;
    print!("{}", report::case_table(&o));
    println!(
        "kernel: {} flavor; reports: {} and {}",
        opts.flavor,
        o.dir.join("junit.xml").display(),
        o.dir.join("results.tap").display()
    );
    // The summary without its per-result lines (the table has them).
    for l in summary(&o).lines() {
        if !["PASS  ", "FAIL  ", "SKIP  "].iter().any(|p| l.starts_with(p)) {
            println!("{l}");
        }
    }
    if !o.ok() {
        let task = if default_plan.starts_with("fuzz") { "fuzz" } else { "conformance" };
        let failed = adhoc::failed_cases(&o);
        for case in &failed {
            println!("reproduce {case}: {}", args.reproducer(task, &["--case".into(), case.clone()]));
        }
        // Sequences a guided fuzz run saved: each replays with one command.
        for f in saved_sequences(&o.dir) {
            println!("replay: cargo make fuzz --replay {}", f.display());
        }
        if failed.is_empty() {
            println!("reproduce: {}", args.reproducer(task, &[extra, sel.given()].concat()));
        }
    }
    Ok(o.exit())
}

/// The `repro-N.json` files binder-fuzz's guided loop saved, as collected into the run
/// directory (`collect/<step>/tmp/binder-fuzz/`).
fn saved_sequences(run_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(steps) = std::fs::read_dir(run_dir.join("collect")) else { return vec![] };
    let mut v: Vec<_> = steps
        .flatten()
        .filter_map(|s| std::fs::read_dir(s.path().join("tmp/binder-fuzz")).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("repro-") && n.ends_with(".json"))
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reproducer_gives_every_case_option_back() {
        crate::cli::args::assert_round_trip::<super::CaseArgs>(&[
            ("list", &[]),
            ("case", &["tc_deferral", "thread_pool"]),
            ("skip", &["shrinker_zap_race"]),
        ]);
    }

    #[test]
    fn saved_sequences_are_found_in_the_collected_files() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join("collect/fuzz/tmp/binder-fuzz");
        std::fs::create_dir_all(&g).unwrap();
        for f in ["repro-2.json", "repro-1.json", "crash-1.json", "coverage.json"] {
            std::fs::write(g.join(f), "{}").unwrap();
        }
        let got = super::saved_sequences(d.path());
        assert_eq!(got, [g.join("repro-1.json"), g.join("repro-2.json")]);
        assert!(super::saved_sequences(&d.path().join("none")).is_empty());
    }
}
