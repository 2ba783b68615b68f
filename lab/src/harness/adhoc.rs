//! The developer's inner loop: `lab run -- CMD ARGS...` as a one-step plan built in memory,
//! its output streamed, the guest command's exit status as the host's, and the options that
//! change any plan (`--repeat`, `--until-fail`, `--collect`).

use crate::harness::opts::RunOpts;
use crate::harness::outcome::{Exit, Outcome};
use labproto::{Event, Plan, Status, Step};

/// What `lab run -- CMD` exits with when the guest could not start the command (as a shell
/// says for "not found").
pub const NOT_STARTED: i32 = 127;

/// The plan `lab run -- CMD ARGS...` runs: one step named after the program.
pub fn command_plan(argv: &[String], timeout_s: u64) -> Plan {
    let prog = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a)).unwrap_or("cmd");
    let name: String =
        prog.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let step = Step {
        name: if name.is_empty() { "cmd".into() } else { name },
        argv: argv.to_vec(),
        timeout_s,
        ..Default::default()
    };
    Plan { name: "cmd".into(), steps: vec![step], ..Default::default() }
}

/// `plan` with the run options that apply to any plan.
pub fn apply_opts(plan: &Plan, opts: &RunOpts) -> Plan {
    let mut p = plan.clone();
    if opts.repeat > 1 {
        p.repeat = opts.repeat;
    }
    p.until_fail |= opts.until_fail;
    // A service runs past its step: the steps after it collect what it leaves.
    for s in p.steps.iter_mut().filter(|s| !s.service) {
        s.collect.extend(opts.collect.iter().cloned());
    }
    p
}

/// `plan` with `--case`/`--skip` passed to its `binder-conformance` steps, after checking
/// the names against the catalogue.
pub fn select_cases(plan: &Plan, cases: &[String], skip: &[String]) -> anyhow::Result<Plan> {
    for name in cases.iter().chain(skip) {
        labproto::conformance_case(name).map_err(anyhow::Error::msg)?;
    }
    let mut p = plan.clone();
    let mut found = false;
    for s in &mut p.steps {
        if s.argv.first().is_some_and(|a| a.rsplit('/').next() == Some("binder-conformance")) {
            found = true;
            s.argv.extend(cases.iter().flat_map(|c| ["--case".to_string(), c.clone()]));
            s.argv.extend(skip.iter().flat_map(|c| ["--skip".to_string(), c.clone()]));
        }
    }
    if !found && (!cases.is_empty() || !skip.is_empty()) {
        anyhow::bail!("plan {:?} has no binder-conformance step for --case/--skip to select in", plan.name);
    }
    Ok(p)
}

/// The conformance cases that failed in a run, each once (for a reproducer per case).
pub fn failed_cases(o: &Outcome) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for (_, case, st, _) in o.results() {
        if st == Status::Fail && labproto::conformance_case(case).is_ok() && !out.iter().any(|c| c == case) {
            out.push(case.to_string());
        }
    }
    out
}

/// A step's output line on the console (`[name] text`, `[name@3] text`), as the text.
pub fn step_output<'a>(plan: &Plan, line: &'a str) -> Option<&'a str> {
    let rest = line.strip_prefix('[')?;
    let (name, text) = rest.split_once("] ")?;
    plan.steps.iter().any(|s| s.name == labproto::plan_step(name)).then_some(text)
}

/// Passes a step's output line to the reporter (the CLI's prints it on stdout); other
/// console lines stay in console.log.
pub fn stream_line(plan: &Plan, line: &str) {
    if let Some(text) = step_output(plan, line) {
        crate::support::progress::output(text);
    }
}

/// What `lab run -- CMD` exits with: the harness's code for a panic, splat, timeout,
/// harness error or interruption ([`Outcome::exit`]); else the command's own status (128 +
/// signal when a signal ended it), and a test failure's code when only something else failed
/// (a `--collect` path, the topology check).
pub fn exit_code(o: &Outcome) -> i32 {
    let exit = o.exit();
    if exit >= Exit::Timeout {
        return exit.code();
    }
    let spawn_failed = o.results().any(|(_, case, st, _)| case == "spawn" && st == Status::Fail);
    let command = o.events.iter().find_map(|e| match e {
        Event::StepEnd { exit_code: Some(0), .. } => None,
        Event::StepEnd { exit_code: Some(c), .. } => Some(*c),
        Event::StepEnd { signal: Some(s), .. } => Some(128 + s),
        Event::StepEnd { .. } => Some(if spawn_failed { NOT_STARTED } else { Exit::HarnessError.code() }),
        _ => None,
    });
    command.unwrap_or(exit.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::outcome::Verdict;

    fn outcome(verdict: Verdict, ends: &[(Option<i32>, Option<i32>, bool)]) -> Outcome {
        let events = ends
            .iter()
            .map(|&(exit_code, signal, timed_out)| Event::StepEnd {
                step: "sh".into(),
                exit_code,
                signal,
                timed_out,
                duration_ms: 1.0,
            })
            .collect();
        Outcome {
            dir: "/r".into(),
            verdict,
            events,
            boot_s: None,
            splats: vec![],
            topology_mismatches: vec![],
            wall_s: 1.0,
            panic_report_s: None,
            console_tail: String::new(),
            collect_errors: vec![],
            step_output: Default::default(),
            reused: None,
            emulator_fault: None,
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&outcome(Verdict::Completed, &[(Some(0), None, false)])), 0);
        assert_eq!(exit_code(&outcome(Verdict::Completed, &[(Some(7), None, false)])), 7);
        assert_eq!(exit_code(&outcome(Verdict::Completed, &[(Some(0), None, false), (Some(3), None, false)])), 3);
        assert_eq!(exit_code(&outcome(Verdict::Completed, &[(None, Some(11), false)])), 139);
        assert_eq!(exit_code(&outcome(Verdict::Completed, &[(None, Some(9), true)])), Exit::Timeout.code());
        let panic = Verdict::Panic { text: "Kernel panic".into() };
        assert_eq!(exit_code(&outcome(panic, &[])), Exit::KernelFault.code());
        let mut o = outcome(Verdict::Completed, &[(Some(0), None, false)]);
        o.splats.push(crate::harness::splat::Splat { kind: "kasan", line: 1, text: "BUG: KASAN".into() });
        assert_eq!(exit_code(&o), Exit::KernelFault.code());
        let mut o = outcome(Verdict::Completed, &[(Some(0), None, false)]);
        o.collect_errors.push("collect /x: lost".into());
        assert_eq!(exit_code(&o), Exit::TestFailure.code());
        let t = Verdict::Timeout { phase: "boot".into(), tail: String::new() };
        assert_eq!(exit_code(&outcome(t, &[])), Exit::Timeout.code());
    }

    #[test]
    fn case_selection() {
        let plan = Plan {
            name: "conformance".into(),
            steps: vec![Step { name: "c".into(), argv: vec!["/bin/binder-conformance".into()], ..Default::default() }],
            ..Default::default()
        };
        let p = select_cases(&plan, &["tc_deferral".into()], &["leaks".into()]).unwrap();
        assert_eq!(p.steps[0].argv, ["/bin/binder-conformance", "--case", "tc_deferral", "--skip", "leaks"]);
        let e = select_cases(&plan, &["tc_defferal".into()], &[]).unwrap_err().to_string();
        assert!(e.contains("no conformance case \"tc_defferal\"") && e.contains("tc_deferral"), "{e}");
        let other = command_plan(&["/bin/true".into()], 5);
        assert!(select_cases(&other, &["leaks".into()], &[])
            .unwrap_err()
            .to_string()
            .contains("no binder-conformance"));
        assert_eq!(select_cases(&other, &[], &[]).unwrap(), other);
    }

    #[test]
    fn command_plans_and_options() {
        let argv: Vec<String> = ["/bin/sh", "-c", "exit 7"].map(String::from).to_vec();
        let p = command_plan(&argv, 30);
        assert_eq!((p.steps.len(), p.steps[0].name.as_str(), p.steps[0].timeout_s), (1, "sh", 30));
        assert_eq!(p.steps[0].argv, argv);
        let opts = RunOpts { repeat: 3, until_fail: true, collect: vec!["/tmp/x".into()], ..Default::default() };
        let q = apply_opts(&p, &opts);
        assert_eq!((q.repeat, q.until_fail, q.steps[0].collect.clone()), (3, true, vec!["/tmp/x".to_string()]));
        assert_eq!(apply_opts(&p, &RunOpts::default()), p);
        assert_eq!(step_output(&p, "[sh] hello [x] y"), Some("hello [x] y"));
        assert_eq!(step_output(&p, "[sh@2] again"), Some("again"));
        assert_eq!(step_output(&p, "[    1.0] kernel"), None);
        assert_eq!(step_output(&p, "[other] x"), None);
    }
}
