//! How a run ended and what it found: the harness's result, read by reports and measures.

use crate::harness::splat::Splat;
use labproto::{Event, Status};
use serde::Serialize;
use std::path::PathBuf;

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
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::StepEnd { step, timed_out: true, duration_ms, .. } => Some(format!(
                    "{step}: timed out after {:.1} s; last console lines:\n{}",
                    duration_ms / 1000.0,
                    self.console_tail
                )),
                Event::StepEnd { step, exit_code, signal, .. } if *exit_code != Some(0) => {
                    Some(format!("{step}: exit code {exit_code:?}, signal {signal:?}"))
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
        p.extend(self.failed_steps().into_iter().map(|s| format!("step {s}")));
        for (step, case, status, msg) in self.results() {
            if status == Status::Fail {
                p.push(format!("{step}/{case} failed{}", msg.map(|m| format!(": {m}")).unwrap_or_default()));
            }
        }
        p.extend(self.topology_mismatches.iter().cloned());
        if !matches!(self.verdict, Verdict::Panic { .. }) {
            p.extend(self.splats.iter().map(|s| format!("kernel splat ({}):\n{}", s.kind, s.text)));
        }
        p
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
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
        }
    }

    #[test]
    fn problems_collect_everything() {
        let o = three_problems();
        let p = o.problems();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(!o.ok());
    }
}
