//! How a run ended and what it found: the harness's result, read by reports and measures.

use crate::harness::splat::Splat;
use labproto::{Event, Status};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// What `lab` exits with (docs/src/reference/exit-codes.md). The harness's own codes sit above 200:
/// outside what shell commands use (0-125, 126/127, 128+signal), so that a guest command's
/// own exit code (`lab run -- CMD`) can pass through unchanged. Ordered by severity: when
/// several apply, the highest wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    Ok,
    /// No verdict either way (`lab ab`: too few valid boots, or rows that could not be judged).
    Inconclusive,
    /// A case, a step, a topology check or the regression gate failed.
    TestFailure,
    /// A boot, step or power-off timeout (the guest hung).
    Timeout,
    /// A kernel panic, or a splat (lockdep, KASAN, BUG, WARNING, Oops, Rust panic, hung task).
    KernelFault,
    /// The lab could not do its job: bad input, a failed build, QEMU or the guest init
    /// failing, QEMU exiting before the plan finished.
    HarnessError,
    /// Ctrl-C or SIGTERM.
    Interrupted,
}

impl Exit {
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::Inconclusive => 204,
            Exit::TestFailure => 1,
            Exit::Timeout => 202,
            Exit::KernelFault => 201,
            Exit::HarnessError => 203,
            Exit::Interrupted => 130,
        }
    }

    /// Ends the process with this code.
    pub fn exit(self) -> ! {
        std::process::exit(self.code())
    }
}

/// How the run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The plan ran to the end and the guest powered off.
    Completed,
    /// The guest kernel panicked; `text` is the report from the console.
    Panic { text: String },
    /// A phase overran; `tail` holds the last console lines.
    Timeout { phase: String, tail: String },
    /// The guest init failed and powered off.
    InitError { message: String },
    /// QEMU ended without the guest finishing the plan.
    QemuExited { status: String, tail: String },
    /// Ctrl-C / SIGTERM.
    Interrupted,
}

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub dir: PathBuf,
    pub verdict: Verdict,
    pub events: Vec<Event>,
    /// QEMU start to the init's first message.
    pub boot_s: Option<f64>,
    pub splats: Vec<Splat>,
    pub topology_mismatches: Vec<String>,
    pub wall_s: f64,
    /// Seconds from the first sign of a panic to the harness's verdict.
    pub panic_report_s: Option<f64>,
    /// Last console lines, shown with timed-out steps.
    pub console_tail: String,
    /// What went wrong receiving collected files (the guest's own reasons are FileEnd events).
    #[serde(default)]
    pub collect_errors: Vec<String>,
    /// The last console lines each step (or service) printed, shown with its failure.
    #[serde(skip)]
    pub step_output: BTreeMap<String, Vec<String>>,
    /// The results are a stored deterministic boot's with the same inputs (its key):
    /// nothing booted (harness::boot_cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused: Option<String>,
    /// QEMU's exit status when it ended badly after the guest's clean power-off with every
    /// result in: not a failure of the run, but said wherever the run is reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator_fault: Option<String>,
}

/// Console lines a step's output keeps for its failure report.
pub const STEP_OUTPUT_LINES: usize = 20;

/// The last [`STEP_OUTPUT_LINES`] lines each step printed: the console lines the init
/// prefixed with `[step] ` (labproto::step_console_prefix), for the steps `events` started.
pub fn step_output(lines: &[String], events: &[Event]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = events
        .iter()
        .filter_map(|e| match e {
            Event::StepStart { step } => Some((step.clone(), vec![])),
            _ => None,
        })
        .collect();
    for line in lines {
        let Some((name, text)) = line.strip_prefix('[').and_then(|l| l.split_once("] ")) else {
            continue;
        };
        if let Some(v) = out.get_mut(name) {
            if v.len() == STEP_OUTPUT_LINES {
                v.remove(0);
            }
            v.push(text.trim_end_matches('\r').to_string());
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

impl Outcome {
    /// Results reported by steps.
    pub fn results(&self) -> impl Iterator<Item = (&str, &str, Status, Option<&str>)> {
        self.events.iter().filter_map(|e| match e {
            Event::Result { step, case, status, message, .. } => {
                Some((step.as_str(), case.as_str(), *status, message.as_deref()))
            }
            _ => None,
        })
    }

    /// Steps that exited non-zero or timed out.
    pub fn failed_steps(&self) -> Vec<String> {
        self.failed_step_list().into_iter().map(|(step, why)| format!("{step}: {why}")).collect()
    }

    /// (step, why) for each step that exited non-zero, was killed or timed out, in plain words.
    fn failed_step_list(&self) -> Vec<(&str, String)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::StepEnd { step, timed_out: true, duration_ms, .. } => Some((
                    step.as_str(),
                    format!(
                        "timed out after {:.1} s; last console lines:\n{}",
                        duration_ms / 1000.0,
                        self.console_tail
                    ),
                )),
                Event::StepEnd { step, exit_code, signal, duration_ms, .. } if *exit_code != Some(0) => {
                    Some((step.as_str(), labproto::describe_end(*exit_code, *signal, false, *duration_ms)))
                }
                _ => None,
            })
            .collect()
    }

    /// Everything that makes this run a failure, as readable lines.
    pub fn problems(&self) -> Vec<String> {
        let mut p = vec![];
        match &self.verdict {
            Verdict::Completed => {}
            Verdict::Panic { text } => p.push(format!("guest kernel panic:\n{text}")),
            Verdict::Timeout { phase, tail } => p.push(format!("timeout in {phase}; last console lines:\n{tail}")),
            Verdict::InitError { message } => p.push(format!("guest init failed: {message}")),
            Verdict::QemuExited { status, tail } => {
                p.push(format!("QEMU exited ({status}) before the plan finished; last console lines:\n{tail}"))
            }
            Verdict::Interrupted => p.push("interrupted".into()),
        }
        // A failing step's own output, once, with its first failure.
        let mut shown = BTreeSet::new();
        let mut with_output = |step: &str, text: String| match self.step_output.get(step) {
            Some(lines) if shown.insert(step.to_string()) => {
                format!("{text}\n  its last {} output line(s):\n    {}", lines.len(), lines.join("\n    "))
            }
            _ => text,
        };
        for (step, why) in self.failed_step_list() {
            p.push(with_output(step, format!("step {step}: {why}")));
        }
        for (step, case, status, msg) in self.results() {
            if status == Status::Fail {
                let text = format!("{step}/{case} failed{}", msg.map(|m| format!(": {m}")).unwrap_or_default());
                p.push(with_output(step, text));
            }
        }
        p.extend(self.topology_mismatches.iter().cloned());
        p.extend(crate::harness::collect::summary(&self.events).1);
        p.extend(self.collect_errors.iter().cloned());
        if !matches!(self.verdict, Verdict::Panic { .. }) {
            p.extend(self.splats.iter().map(|s| format!("kernel splat ({}): {}\n{}", s.kind, s.headline(), s.text)));
        }
        p
    }

    /// The emulator's fault after a clean power-off, in plain words (see `emulator_fault`).
    pub fn emulator_note(&self) -> Option<String> {
        self.emulator_fault.as_ref().map(|st| {
            format!(
                "QEMU after the guest's clean power-off: {st}; every result had arrived, \
                 so the run counts: a fault of the emulator, not of the kernel under test"
            )
        })
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }

    /// The exit code this run calls for: the most severe of what [`Outcome::problems`] lists.
    pub fn exit(&self) -> Exit {
        let verdict = match &self.verdict {
            Verdict::Completed => Exit::Ok,
            Verdict::Panic { .. } => Exit::KernelFault,
            Verdict::Timeout { .. } => Exit::Timeout,
            Verdict::InitError { .. } | Verdict::QemuExited { .. } => Exit::HarnessError,
            Verdict::Interrupted => Exit::Interrupted,
        };
        let step_timeout = self.events.iter().any(|e| matches!(e, Event::StepEnd { timed_out: true, .. }));
        let failed = !self.failed_steps().is_empty()
            || self.results().any(|r| r.2 == Status::Fail)
            || !self.topology_mismatches.is_empty()
            || !self.collect_errors.is_empty()
            || !crate::harness::collect::summary(&self.events).1.is_empty();
        [
            verdict,
            if self.splats.is_empty() { Exit::Ok } else { Exit::KernelFault },
            if step_timeout { Exit::Timeout } else { Exit::Ok },
            if failed { Exit::TestFailure } else { Exit::Ok },
        ]
        .into_iter()
        .max()
        .unwrap_or(Exit::Ok)
    }

    /// The data of the first result named `case`.
    pub fn data(&self, case: &str) -> Option<&serde_json::Value> {
        case_data(&self.events, case)
    }
}

/// The data of the first result named `case` among `events`.
pub fn case_data<'a>(events: &'a [Event], case: &str) -> Option<&'a serde_json::Value> {
    events.iter().find_map(|e| match e {
        Event::Result { case: c, data, .. } if c == case => Some(data),
        _ => None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A completed run with a failed case, a failed step and a topology mismatch.
    pub(crate) fn three_problems() -> Outcome {
        Outcome {
            dir: "/r".into(),
            verdict: Verdict::Completed,
            events: vec![
                Event::Result {
                    step: "s".into(),
                    case: "c".into(),
                    status: Status::Fail,
                    duration_ms: 0.0,
                    message: Some("bad".into()),
                    data: serde_json::Value::Null,
                },
                Event::StepEnd {
                    step: "s".into(),
                    exit_code: Some(1),
                    signal: None,
                    timed_out: false,
                    duration_ms: 1.0,
                },
            ],
            boot_s: Some(0.8),
            splats: vec![],
            topology_mismatches: vec!["board: cpu4 capacity 871, guest: 1024".into()],
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
    fn problems_collect_everything() {
        let o = three_problems();
        let p = o.problems();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(!o.ok());
    }

    #[test]
    fn exit_codes_follow_the_worst_problem() {
        let mut o = three_problems();
        assert_eq!(o.exit(), Exit::TestFailure);
        o.events.push(Event::StepEnd {
            step: "t".into(),
            exit_code: None,
            signal: Some(9),
            timed_out: true,
            duration_ms: 1.0,
        });
        assert_eq!(o.exit(), Exit::Timeout);
        o.splats.push(Splat { kind: "lockdep", line: 1, text: "WARNING: possible circular locking".into() });
        assert_eq!(o.exit(), Exit::KernelFault);
        o.verdict = Verdict::QemuExited { status: "exit status: 1".into(), tail: String::new() };
        assert_eq!(o.exit(), Exit::HarnessError);
        o.verdict = Verdict::Interrupted;
        assert_eq!(o.exit().code(), 130);
        let mut clean = three_problems();
        clean.events.clear();
        clean.topology_mismatches.clear();
        assert_eq!((clean.exit(), clean.exit().code()), (Exit::Ok, 0));
        clean.verdict = Verdict::Panic { text: "Kernel panic - not syncing".into() };
        assert_eq!(clean.exit().code(), 201);
        clean.verdict = Verdict::Timeout { phase: "boot".into(), tail: String::new() };
        assert_eq!(clean.exit().code(), 202);
        let codes: Vec<i32> = [
            Exit::Ok,
            Exit::Inconclusive,
            Exit::TestFailure,
            Exit::Timeout,
            Exit::KernelFault,
            Exit::HarnessError,
            Exit::Interrupted,
        ]
        .iter()
        .map(|e| e.code())
        .collect();
        assert_eq!(codes, [0, 204, 1, 202, 201, 203, 130]);
        // A failure outranks no verdict.
        assert_eq!(Exit::Inconclusive.max(Exit::TestFailure), Exit::TestFailure);
    }

    // Failures read as words, and a failing step's own output comes with its first failure.
    #[test]
    fn failures_in_plain_words_with_the_steps_output() {
        let mut o = three_problems();
        o.events.insert(0, Event::StepStart { step: "s".into() });
        o.events.push(Event::StepStart { step: "crash".into() });
        o.events.push(Event::StepEnd {
            step: "crash".into(),
            exit_code: None,
            signal: Some(11),
            timed_out: false,
            duration_ms: 3.0,
        });
        let lines: Vec<String> = [
            "[s] opening /dev/binderfs/binder",
            "[    1.0] kernel text",
            "[crash] about to",
            "[s] Error: EPERM",
            "[other] x",
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        o.step_output = step_output(&lines, &o.events);
        assert_eq!(o.step_output["s"], ["opening /dev/binderfs/binder", "Error: EPERM"]);
        assert!(!o.step_output.contains_key("other"), "not a step of this run");
        let p = o.problems();
        assert_eq!(
            p[0],
            "step s: exited with status 1\n  its last 2 output line(s):\n    opening /dev/binderfs/binder\n    Error: EPERM"
        );
        assert_eq!(p[1], "step crash: killed by SIGSEGV\n  its last 1 output line(s):\n    about to");
        // Shown once per step: the failed case of `s` does not repeat it.
        assert_eq!(p[2], "s/c failed: bad");
        let many: Vec<String> = (0..30).map(|i| format!("[s] line {i}")).collect();
        assert_eq!(step_output(&many, &o.events)["s"].len(), STEP_OUTPUT_LINES);
    }
}
