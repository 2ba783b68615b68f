//! The run monitor: a state machine fed one typed input at a time (console lines, result
//! lines, QMP events, QEMU's exit, timer ticks, Ctrl-C), which decides when a run is over
//! and how it ended. It does no I/O and reads no clock: the caller passes the time with each
//! input, so tests drive it with synthetic sequences.

use crate::harness::outcome::Verdict;
use crate::harness::qemu::VmEvent;
use crate::harness::splat;
use labproto::{Event, Plan, CONSOLE_RESULT_PREFIX};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Grace on top of a step's own timeout: the guest init enforces it first.
pub const STEP_GRACE: Duration = Duration::from_secs(15);
/// After Done (or an init error), the guest has this long to power off and QEMU to exit.
/// QEMU exits within milliseconds of the guest's power-off; a CI run once saw it take over
/// 15 s on a loaded host after a complete plan, so the margin is wide. A real hang is still
/// a failure, named as QEMU's when the guest did power off.
pub const POWEROFF_TIMEOUT: Duration = Duration::from_secs(60);
/// The kernel's last console line before PSCI SYSTEM_OFF.
const POWER_DOWN_LINE: &str = "reboot: Power down";
/// How long to keep reading the console after a panic for the rest of its report.
pub const PANIC_LINGER: Duration = Duration::from_millis(700);
/// After QEMU exits, the readers get this long to deliver what it wrote last.
pub const EXIT_DRAIN: Duration = Duration::from_millis(100);
/// ... and this long while the init's Done is still missing: on a loaded host the console's
/// last lines came later than 100 ms, and a finished run was reported as cut short.
pub const EXIT_DRAIN_NO_DONE: Duration = Duration::from_secs(3);
/// Console lines kept for timeouts and the outcome.
const TAIL: usize = 50;

/// One thing that happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    Console(String),
    Result(Event),
    Qmp(VmEvent),
    Exited { success: bool, status: String },
    Tick,
    Interrupted,
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Boot,
    Idle,
    Step(String),
    PowerOff,
}

/// What a monitored run collected.
#[derive(Debug)]
pub struct Finished {
    pub verdict: Verdict,
    pub events: Vec<Event>,
    pub lines: Vec<String>,
    pub boot_s: Option<f64>,
    pub panic_report_s: Option<f64>,
    /// QMP stopped answering during the run (panics were then seen on the console only).
    pub qmp_lost: bool,
    /// QEMU ended badly (its exit status) after the guest had finished the plan and powered
    /// off: every result was in, so the run counts; the fault is the emulator's.
    pub emulator_fault: Option<String>,
}

pub struct Monitor {
    t0: Instant,
    boot_timeout: Duration,
    step_timeouts: BTreeMap<String, u64>,
    phase: Phase,
    deadline: Instant,
    lines: Vec<String>,
    events: Vec<Event>,
    boot_s: Option<f64>,
    panic_seen: Option<Instant>,
    exited: Option<(Instant, bool, String)>,
    verdict: Option<Verdict>,
    panic_report_s: Option<f64>,
    qmp_lost: bool,
    emulator_fault: Option<String>,
    /// Between steps (longer with `--trace`: the init sends each step's trace then).
    idle_grace: Duration,
    /// Off with `--gdb`: a guest stopped in gdb is not hung.
    timeouts: bool,
    /// Collected-file chunks not yet taken by the caller (they are not kept as events).
    chunks: Vec<Event>,
}

impl Monitor {
    /// A monitor for `plan`, booted at `t0`.
    pub fn new(plan: &Plan, boot_timeout: Duration, t0: Instant) -> Monitor {
        Monitor {
            t0,
            boot_timeout,
            step_timeouts: plan.steps.iter().map(|s| (s.name.clone(), s.timeout_s)).collect(),
            phase: Phase::Boot,
            deadline: t0 + boot_timeout,
            lines: vec![],
            events: vec![],
            boot_s: None,
            panic_seen: None,
            exited: None,
            verdict: None,
            panic_report_s: None,
            qmp_lost: false,
            emulator_fault: None,
            idle_grace: STEP_GRACE,
            timeouts: true,
            chunks: vec![],
        }
    }

    /// The collected-file chunks received since the last call, for the caller to write out.
    pub fn take_chunks(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.chunks)
    }

    /// The grace after a step ends, before the next starts (default [`STEP_GRACE`]).
    pub fn idle_grace(mut self, grace: Duration) -> Monitor {
        self.idle_grace = grace;
        self
    }

    /// No boot, step or power-off timeout (for a guest held in gdb).
    pub fn without_timeouts(mut self) -> Monitor {
        self.timeouts = false;
        self
    }

    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// Feeds one input at time `now`. True once the run is decided: stop QEMU then. Inputs
    /// after that (the last console lines and results) are kept but decide nothing.
    pub fn step(&mut self, now: Instant, input: Input) -> bool {
        match input {
            Input::Console(line) => self.console(now, line),
            Input::Result(ev) => self.result(now, ev),
            Input::Qmp(VmEvent::Panicked) => {
                self.panic_seen.get_or_insert(now);
            }
            Input::Qmp(VmEvent::Lost) => self.qmp_lost = true,
            Input::Qmp(VmEvent::Shutdown) | Input::Tick => {}
            Input::Exited { success, status } => {
                self.exited.get_or_insert((now, success, status));
            }
            Input::Interrupted => {
                self.verdict.get_or_insert(Verdict::Interrupted);
            }
        }
        if self.verdict.is_none() {
            self.verdict = self.decide(now);
        }
        self.verdict.is_some()
    }

    fn console(&mut self, now: Instant, line: String) {
        if self.panic_seen.is_none() && line.contains("Kernel panic - not syncing") {
            self.panic_seen = Some(now);
        }
        // Without a result port the init sends results on the console.
        let ev = line.split_once(CONSOLE_RESULT_PREFIX).and_then(|(_, ev)| Event::parse_line(ev));
        self.lines.push(line);
        if let Some(ev) = ev {
            self.result(now, ev);
        }
    }

    fn result(&mut self, now: Instant, ev: Event) {
        if matches!(ev, Event::FileChunk { .. }) {
            return self.chunks.push(ev);
        }
        if self.verdict.is_none() {
            match &ev {
                Event::Hello { .. } => {
                    self.boot_s.get_or_insert(now.duration_since(self.t0).as_secs_f64());
                    self.enter(Phase::Idle, now + STEP_GRACE);
                }
                Event::StepStart { step } => {
                    // `STEP@N` in a repeated plan.
                    let t = self.step_timeouts.get(labproto::plan_step(step)).copied().unwrap_or(60);
                    let t = Duration::from_secs(t);
                    self.enter(Phase::Step(step.clone()), now + t + STEP_GRACE);
                }
                Event::StepEnd { .. } => self.enter(Phase::Idle, now + self.idle_grace),
                Event::Done => self.enter(Phase::PowerOff, now + POWEROFF_TIMEOUT),
                Event::InitError { message } => self.verdict = Some(Verdict::InitError { message: message.clone() }),
                // Between steps the init still reports (services stopping at the end of the
                // step list): each report restarts the idle wait.
                Event::Result { .. } if self.phase == Phase::Idle => self.enter(Phase::Idle, now + self.idle_grace),
                _ => {}
            }
        }
        self.events.push(ev);
    }

    fn enter(&mut self, phase: Phase, deadline: Instant) {
        self.phase = phase;
        self.deadline = deadline;
    }

    fn decide(&mut self, now: Instant) -> Option<Verdict> {
        if let Some(t) = self.panic_seen {
            if now.duration_since(t) <= PANIC_LINGER && self.exited.is_none() {
                return None;
            }
            self.panic_report_s = Some(now.duration_since(t).as_secs_f64());
            // The text is taken in finish(), from every line that arrived.
            return Some(Verdict::Panic { text: String::new() });
        }
        if let Some((at, success, status)) = &self.exited {
            let done = self.events.iter().any(|e| matches!(e, Event::Done));
            if now.duration_since(*at) < if done { EXIT_DRAIN } else { EXIT_DRAIN_NO_DONE } {
                return None;
            }
            return Some(if splat::panic_text(&self.lines).is_some() {
                Verdict::Panic { text: String::new() }
            } else if done && *success {
                Verdict::Completed
            } else if done && self.powered_off() {
                // Nothing of the guest runs after its PSCI SYSTEM_OFF, and every result is in:
                // what QEMU does after that says nothing about the kernel under test.
                self.emulator_fault = Some(status.clone());
                Verdict::Completed
            } else {
                Verdict::QemuExited { status: status.clone(), tail: splat::tail(&self.lines, TAIL) }
            });
        }
        if !(self.timeouts && now > self.deadline) {
            return None;
        }
        if matches!(self.phase, Phase::PowerOff) && self.powered_off() {
            // Hung after PSCI SYSTEM_OFF with every result in (power-off is entered on the
            // init's `done`): the same emulator fault as a crash there, and the harness stops it.
            self.emulator_fault = Some(format!("no exit within {POWEROFF_TIMEOUT:?} (stopped by the harness)"));
            return Some(Verdict::Completed);
        }
        Some(Verdict::Timeout { phase: self.phase_text(), tail: splat::tail(&self.lines, TAIL) })
    }

    /// The kernel printed its last line before PSCI SYSTEM_OFF.
    fn powered_off(&self) -> bool {
        self.lines.iter().any(|l| l.contains(POWER_DOWN_LINE))
    }

    fn phase_text(&self) -> String {
        match &self.phase {
            Phase::Boot => format!("boot (no message from the guest init within {:?})", self.boot_timeout),
            Phase::Idle => "the guest init between steps".into(),
            Phase::Step(s) => format!("step {s}"),
            Phase::PowerOff => "power-off after the plan".into(),
        }
    }

    /// Everything collected; None if the run was never decided.
    pub fn finish(self) -> Option<Finished> {
        let verdict = match self.verdict? {
            Verdict::Panic { .. } => Verdict::Panic {
                text: splat::panic_text(&self.lines).unwrap_or_else(|| splat::tail(&self.lines, TAIL)),
            },
            v => v,
        };
        Some(Finished {
            verdict,
            events: self.events,
            lines: self.lines,
            boot_s: self.boot_s,
            panic_report_s: self.panic_report_s,
            qmp_lost: self.qmp_lost,
            emulator_fault: self.emulator_fault,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use labproto::Step;

    fn plan() -> Plan {
        let step = |name: &str, timeout_s| Step { name: name.into(), timeout_s, ..Default::default() };
        Plan { name: "p".into(), steps: vec![step("a", 5), step("b", 30)], ..Default::default() }
    }

    fn hello() -> Input {
        Input::Result(Event::Hello { kernel: "7.2".into(), uptime_s: 0.5, cmdline: String::new() })
    }
    fn start(s: &str) -> Input {
        Input::Result(Event::StepStart { step: s.into() })
    }
    fn end(s: &str) -> Input {
        Input::Result(Event::StepEnd {
            step: s.into(),
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            duration_ms: 1.0,
        })
    }
    fn exited(success: bool) -> Input {
        Input::Exited { success, status: if success { "exit status: 0".into() } else { "signal: 9".into() } }
    }

    /// Feeds `(seconds after t0, input)` pairs; returns the finished run and the time of the
    /// decision.
    fn run(inputs: Vec<(f64, Input)>) -> (Finished, Option<f64>) {
        let t0 = Instant::now();
        let mut m = Monitor::new(&plan(), Duration::from_secs(60), t0);
        let mut decided = None;
        for (s, input) in inputs {
            if m.step(t0 + Duration::from_secs_f64(s), input) && decided.is_none() {
                decided = Some(s);
            }
        }
        (m.finish().expect("decided"), decided)
    }

    #[test]
    fn a_clean_plan_completes_after_power_off() {
        let (f, at) = run(vec![
            (0.0, Input::Console("[    0.0] Booting Linux".into())),
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            (2.1, Input::Result(Event::Done)),
            (2.5, exited(true)),
            (2.55, Input::Tick),
            (2.61, Input::Tick),
        ]);
        assert_eq!((f.verdict, at), (Verdict::Completed, Some(2.61)));
        assert_eq!(f.boot_s, Some(0.9));
        assert_eq!(f.events.len(), 4);
    }

    /// QEMU crashing after the guest's clean power-off, with every result in, does not make
    /// the run a failure; it is kept as the emulator's fault. Before the power-off it is one.
    #[test]
    fn a_qemu_crash_after_a_clean_power_off_is_the_emulators_fault() {
        let crashed = Input::Exited { success: false, status: "signal: 11 (SIGSEGV)".into() };
        let (f, _) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            (2.1, Input::Result(Event::Done)),
            (2.2, Input::Console("[    2.2] reboot: Power down".into())),
            (2.5, crashed.clone()),
            (2.7, Input::Tick),
        ]);
        assert_eq!(f.verdict, Verdict::Completed);
        assert_eq!(f.emulator_fault.as_deref(), Some("signal: 11 (SIGSEGV)"));
        // Done but no power-off line: the guest had not finished shutting down.
        let (f, _) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            (2.1, Input::Result(Event::Done)),
            (2.5, crashed),
            (2.7, Input::Tick),
        ]);
        assert!(matches!(f.verdict, Verdict::QemuExited { .. }), "{:?}", f.verdict);
        assert_eq!(f.emulator_fault, None);
    }

    #[test]
    fn qemu_that_outlives_the_guests_power_off_is_named() {
        let (f, at) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            (2.1, Input::Result(Event::Done)),
            (2.2, Input::Console("[    2.2] reboot: Power down".into())),
            // Slow but in time: no verdict yet.
            (20.0, Input::Tick),
            (62.2, Input::Tick),
        ]);
        assert_eq!(at, Some(62.2));
        assert_eq!(f.verdict, Verdict::Completed, "hung after a clean power-off: the emulator's fault");
        assert_eq!(f.emulator_fault.as_deref(), Some("no exit within 60s (stopped by the harness)"));
        // Done, but the kernel never printed its power-off: the guest's shutdown hung.
        let (f, _) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            (2.1, Input::Result(Event::Done)),
            (62.2, Input::Tick),
        ]);
        assert!(
            matches!(f.verdict, Verdict::Timeout { ref phase, .. } if phase == "power-off after the plan"),
            "{:?}",
            f.verdict
        );
        assert_eq!(f.emulator_fault, None);
    }

    #[test]
    fn panic_mid_step_waits_for_the_report_then_stops() {
        let (f, at) = run(vec![
            (0.9, hello()),
            (1.0, start("b")),
            (3.0, Input::Console("[    3.0] sysrq: Trigger a crash".into())),
            (3.0, Input::Console("[    3.0] Kernel panic - not syncing: sysrq triggered crash".into())),
            (3.3, Input::Console("[    3.0] CPU: 1 PID: 80 Comm: sh".into())),
            (3.5, Input::Tick),
            (3.8, Input::Tick),
            // After the decision: still part of the report.
            (3.9, Input::Console("[    3.0] Call trace:".into())),
        ]);
        assert_eq!(at, Some(3.8));
        let Verdict::Panic { text } = f.verdict else { panic!("{:?}", f.verdict) };
        assert!(text.starts_with("[    3.0] sysrq: Trigger a crash") && text.ends_with("Call trace:"), "{text}");
        assert!((f.panic_report_s.unwrap() - 0.8).abs() < 1e-6);
    }

    #[test]
    fn qmp_panic_counts_without_a_console_line() {
        let (f, at) = run(vec![(0.9, hello()), (2.0, Input::Qmp(VmEvent::Panicked)), (2.2, exited(false))]);
        assert_eq!(at, Some(2.2));
        assert!(matches!(f.verdict, Verdict::Panic { .. }), "{:?}", f.verdict);
    }

    #[test]
    fn gdb_and_trace_settings_move_the_deadlines() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        // --gdb: a guest held in gdb for an hour is not hung.
        let mut m = Monitor::new(&plan(), Duration::from_secs(60), t0).without_timeouts();
        assert!(!m.step(at(3600.0), Input::Tick));
        assert!(!m.step(at(3601.0), hello()) && !m.step(at(7200.0), Input::Tick));
        // --trace: 15 s after a step are not enough to send its trace; the idle grace is longer.
        let mut m = Monitor::new(&plan(), Duration::from_secs(60), t0).idle_grace(Duration::from_secs(300));
        for (s, i) in [(0.9, hello()), (1.0, start("a")), (2.0, end("a")), (200.0, Input::Tick)] {
            assert!(!m.step(at(s), i), "decided at {s}");
        }
        assert!(m.step(at(302.1), Input::Tick));
        assert_eq!(m.verdict().map(|v| matches!(v, Verdict::Timeout { .. })), Some(true));
    }

    // Services are stopped after the last step: their reports keep the idle wait going, and
    // silence still times out.
    #[test]
    fn service_reports_between_steps_extend_the_idle_wait() {
        let stopped = |at| {
            (
                at,
                Input::Result(Event::Result {
                    step: "svc".into(),
                    case: "stopped".into(),
                    status: labproto::Status::Pass,
                    duration_ms: 1.0,
                    message: None,
                    data: serde_json::Value::Null,
                }),
            )
        };
        let (f, at) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (2.0, end("a")),
            stopped(14.0),
            stopped(28.0),
            (42.0, Input::Tick),
            (43.5, Input::Tick),
        ]);
        assert_eq!(at, Some(43.5));
        assert!(
            matches!(f.verdict, Verdict::Timeout { ref phase, .. } if phase.contains("between steps")),
            "{:?}",
            f.verdict
        );
    }

    #[test]
    fn a_hanging_step_times_out_with_its_name() {
        let (f, at) = run(vec![
            (0.9, hello()),
            (1.0, start("a")),
            (1.5, Input::Console("about to hang".into())),
            // a: 5 s plus 15 s of grace.
            (20.9, Input::Tick),
            (21.1, Input::Tick),
        ]);
        assert_eq!(at, Some(21.1));
        let Verdict::Timeout { phase, tail } = f.verdict else { panic!("{:?}", f.verdict) };
        assert_eq!(phase, "step a");
        assert!(tail.contains("about to hang"));
    }

    #[test]
    fn no_hello_is_a_boot_timeout() {
        let (f, _) = run(vec![(59.0, Input::Tick), (60.5, Input::Tick)]);
        assert!(
            matches!(f.verdict, Verdict::Timeout { ref phase, .. } if phase.starts_with("boot")),
            "{:?}",
            f.verdict
        );
    }

    #[test]
    fn results_after_power_off_are_kept() {
        let late = Event::Result {
            step: "b".into(),
            case: "late".into(),
            status: labproto::Status::Pass,
            duration_ms: 0.0,
            message: None,
            data: serde_json::Value::Null,
        };
        let (f, _) = run(vec![
            (0.9, hello()),
            (1.0, Input::Result(Event::Done)),
            (1.2, exited(true)),
            // The chardev file is read after QEMU is gone, and after the decision.
            (1.25, Input::Console(format!("{CONSOLE_RESULT_PREFIX}{}", late.to_line().trim_end()))),
            (1.4, Input::Tick),
            (1.5, Input::Result(late.clone())),
        ]);
        assert_eq!(f.verdict, Verdict::Completed);
        assert_eq!(f.events.iter().filter(|e| **e == late).count(), 2);
    }

    #[test]
    fn lost_qmp_is_noted_and_the_run_goes_on() {
        let (f, _) = run(vec![
            (0.9, hello()),
            (1.0, Input::Qmp(VmEvent::Lost)),
            (1.1, Input::Result(Event::Done)),
            (1.2, exited(true)),
            (1.4, Input::Tick),
        ]);
        assert_eq!(f.verdict, Verdict::Completed);
        assert!(f.qmp_lost);
    }

    #[test]
    fn qemu_exiting_early_and_init_errors_and_ctrl_c() {
        // Without the init's Done the readers get EXIT_DRAIN_NO_DONE for the console's tail.
        let (f, at) = run(vec![(0.9, hello()), (1.0, exited(false)), (1.2, Input::Tick), (4.1, Input::Tick)]);
        assert_eq!(at, Some(4.1));
        assert!(
            matches!(f.verdict, Verdict::QemuExited { ref status, .. } if status == "signal: 9"),
            "{:?}",
            f.verdict
        );
        let (f, at) = run(vec![(0.9, Input::Result(Event::InitError { message: "no plan".into() }))]);
        assert_eq!((f.verdict, at), (Verdict::InitError { message: "no plan".into() }, Some(0.9)));
        let (f, at) = run(vec![(0.9, hello()), (1.0, Input::Interrupted), (1.1, Input::Qmp(VmEvent::Panicked))]);
        assert_eq!((f.verdict, at), (Verdict::Interrupted, Some(1.0)));
    }
}
