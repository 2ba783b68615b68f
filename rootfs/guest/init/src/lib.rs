//! PID 1 of the binder-lab guest: mounts the pseudo filesystems and binderfs, sends
//! Hello on the result port, runs the plan's steps (forwarding their results), sends
//! Done and powers off. It never exits or hangs: every failure ends in a power-off.

mod collect;
mod reap;
mod service;
mod sink;
mod step;
mod sys;
mod trace;

use labproto::{Event, Plan, CMDLINE_PLAN_KEY, PLAN_PATH};
use sink::Sink;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

struct MountSpec {
    src: &'static str,
    target: &'static str,
    fstype: &'static str,
    flags: libc::c_ulong,
    data: Option<&'static str>,
    /// A failure is fatal (otherwise only logged).
    required: bool,
}

const NOSUID_NODEV_NOEXEC: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// Needed before the result port can be found.
const EARLY_MOUNTS: &[MountSpec] = &[
    MountSpec { src: "proc", target: "/proc", fstype: "proc", flags: NOSUID_NODEV_NOEXEC, data: None, required: true },
    MountSpec { src: "sysfs", target: "/sys", fstype: "sysfs", flags: NOSUID_NODEV_NOEXEC, data: None, required: true },
    MountSpec {
        src: "devtmpfs",
        target: "/dev",
        fstype: "devtmpfs",
        flags: libc::MS_NOSUID,
        data: Some("mode=0755"),
        required: true,
    },
];

const LATE_MOUNTS: &[MountSpec] = &[
    MountSpec {
        src: "tmpfs",
        target: "/tmp",
        fstype: "tmpfs",
        flags: libc::MS_NOSUID | libc::MS_NODEV,
        data: Some("mode=1777"),
        required: true,
    },
    // `--trace`; kernels without CONFIG_FTRACE have no tracefs.
    MountSpec {
        src: "tracefs",
        target: "/sys/kernel/tracing",
        fstype: "tracefs",
        flags: 0,
        data: None,
        required: false,
    },
    // Only the topology step's scheduler-domain dump needs it; perf kernels may lack it.
    MountSpec { src: "debugfs", target: "/sys/kernel/debug", fstype: "debugfs", flags: 0, data: None, required: false },
    MountSpec {
        src: "binder",
        target: "/dev/binderfs",
        fstype: "binder",
        flags: 0,
        data: Some("stats=global"),
        required: true,
    },
];

fn do_mounts(specs: &[MountSpec]) -> Result<(), String> {
    for m in specs {
        sys::mkdir_p(m.target);
        if let Err(e) = sys::mount(m.src, m.target, m.fstype, m.flags, m.data) {
            let msg = format!("mount -t {} {} {}: {e}", m.fstype, m.src, m.target);
            if m.required {
                return Err(msg);
            }
            sys::log(&format!("warning: {msg}"));
        }
    }
    Ok(())
}

/// `lab.plan=PATH` from the kernel command line, else the built-in path.
fn plan_path(cmdline: &str) -> String {
    let key = format!("{CMDLINE_PLAN_KEY}=");
    cmdline
        .split_whitespace()
        .find_map(|t| t.strip_prefix(&key))
        .filter(|p| !p.is_empty())
        .unwrap_or(PLAN_PATH)
        .to_string()
}

fn load_plan(path: &str) -> Result<Plan, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read plan {path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad plan {path}: {e}"))
}

fn uptime_s() -> f64 {
    std::fs::read_to_string("/proc/uptime").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0.0)
}

/// The real tty behind /dev/console (the last of /sys/class/tty/console/active), so the
/// shell gets a terminal that can be its controlling tty.
fn console_tty() -> String {
    std::fs::read_to_string("/sys/class/tty/console/active")
        .ok()
        .and_then(|s| s.split_whitespace().last().map(|n| format!("/dev/{n}")))
        .filter(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| "/dev/console".into())
}

fn run_shell() -> Result<(), String> {
    let tty_path = console_tty();
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&tty_path)
        .map_err(|e| format!("cannot open {tty_path} for the shell: {e}"))?;
    let clone = || tty.try_clone().map(Stdio::from).map_err(|e| format!("dup {tty_path}: {e}"));
    sys::log(&format!("starting /bin/sh on {tty_path}; exit the shell to power off"));
    let mut cmd = Command::new("/bin/sh");
    cmd.env_clear()
        .envs(step::BASE_ENV.iter().copied())
        .current_dir("/root")
        .stdin(clone()?)
        .stdout(clone()?)
        .stderr(clone()?);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // syscalls (setsid, ioctl) on the child's own fd 0.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY as _, 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start /bin/sh: {e}"))?;
    let pid = child.id() as libc::pid_t;
    drop(child);
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer; blocking wait also reaps orphans.
        let p = unsafe { libc::waitpid(-1, &mut status, 0) };
        if p == pid || (p < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)) {
            return Ok(());
        }
    }
}

/// The plan's boot-time writes (the board's scheduler policy), in order. A write the kernel
/// refuses is fatal: the run would measure another policy than the one it names.
fn apply_settings(settings: &[labproto::Setting]) -> Result<(), String> {
    for s in settings {
        std::fs::write(&s.path, &s.value).map_err(|e| {
            format!(
                "policy: cannot write {:?} to {}: {e} (a kernel without that switch or sysctl, e.g. one \
                 built without android-sched/: boot it with --policy mainline)",
                s.value, s.path
            )
        })?;
        sys::log(&format!("policy: {} > {}", s.value, s.path));
    }
    Ok(())
}

/// The plan's steps, `repeat` times in this boot; returns the runs made.
fn run_steps(plan: &Plan, sink: &mut Sink, tracer: &mut Option<trace::Tracer>) -> Result<u32, String> {
    let runs = plan.repeat.max(1);
    for n in 1..=runs {
        let mut failed = false;
        // Services started in this run; they stay up for the later steps of the run.
        let mut services = service::Services::default();
        for s in &plan.steps {
            let name = labproto::iteration_step(&s.name, n, runs);
            if let Some(t) = tracer.as_mut() {
                t.start()?;
            }
            failed |= if s.service { services.start(s, &name, sink) } else { step::run(s, &name, sink) };
            services.forward(sink);
            if let Some(t) = tracer.as_mut() {
                t.finish(&name)?;
            }
        }
        failed |= services.stop_all(sink);
        if runs > 1 {
            sys::log(&format!("run {n} of {runs}: {}", if failed { "failed" } else { "passed" }));
        }
        if failed && plan.until_fail {
            sys::log(&format!("until-fail: stopping after run {n} of {runs}"));
            return Ok(n);
        }
    }
    Ok(runs)
}

fn run(sink: &mut Sink) -> Result<(), String> {
    do_mounts(EARLY_MOUNTS)?;
    sys::ensure_stdio();
    match sink::find_result_port() {
        Some(dev) => match sink.attach(&dev) {
            Ok(()) => sys::log(&format!("results on {}", dev.display())),
            Err(e) => sys::log(&format!("cannot open {}: {e}; results go to the console", dev.display())),
        },
        None => sys::log(&format!(
            "no virtio port named {}; results go to the console as '{}' lines",
            labproto::RESULT_PORT,
            sink::FALLBACK_PREFIX.trim_end()
        )),
    }
    // Hello goes out before anything else can fail, so the host sees the guest came up.
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default().trim().to_string();
    sink.send(&Event::Hello { kernel: sys::kernel_release(), uptime_s: uptime_s(), cmdline: cmdline.clone() });
    do_mounts(LATE_MOUNTS)?;
    let path = plan_path(&cmdline);
    let plan = load_plan(&path)?;
    sys::log(&format!("plan '{}' from {path}: {} step(s)", plan.name, plan.steps.len()));
    apply_settings(&plan.settings)?;
    let mut tracer = match &plan.trace {
        Some(spec) => {
            let port = sink::find_port(labproto::TRACE_PORT, std::time::Duration::from_secs(3))
                .ok_or_else(|| format!("--trace: no virtio port named {}", labproto::TRACE_PORT))?;
            Some(trace::Tracer::new(spec, &port)?)
        }
        None => None,
    };
    run_steps(&plan, sink, &mut tracer)?;
    sink.send(&Event::Done);
    if plan.shell {
        run_shell()?;
    }
    Ok(())
}

pub fn main() {
    std::panic::set_hook(Box::new(|info| {
        let message = format!("init panicked: {info}");
        sys::log(&message);
        sink::send_from_panic(&Event::InitError { message });
        sys::poweroff(101);
    }));
    sys::log(&format!("binder-lab init {} (pid {})", env!("CARGO_PKG_VERSION"), std::process::id()));
    if !sys::is_pid1() && std::env::var_os("LAB_INIT_NOT_PID1").is_none() {
        // It mounts over /proc, /sys and /dev: never do that on a workstation by mistake.
        sys::log("not PID 1; refusing to run (set LAB_INIT_NOT_PID1=1 inside a throwaway namespace)");
        std::process::exit(2);
    }
    let mut sink = Sink::console();
    let code = match run(&mut sink) {
        Ok(()) => {
            sys::log("all done, powering off");
            0
        }
        Err(message) => {
            sys::log(&format!("fatal: {message}; powering off"));
            sink.send(&Event::InitError { message });
            1
        }
    };
    sys::poweroff(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_written_in_order_and_a_refused_one_is_fatal() {
        let d = std::env::temp_dir().join(format!("lab-init-settings-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("features").display().to_string();
        let set = |path: &str, value: &str| labproto::Setting { path: path.into(), value: value.into() };
        apply_settings(&[set(&f, "SYNC_EAS"), set(&f, "RT_SYNC")]).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "RT_SYNC");
        let missing = d.join("no/such/sysctl").display().to_string();
        let e = apply_settings(&[set(&missing, "1")]).unwrap_err();
        assert!(e.contains(&missing) && e.contains("--policy mainline"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn plan_path_from_cmdline() {
        assert_eq!(plan_path("console=ttyAMA0 quiet"), PLAN_PATH);
        assert_eq!(plan_path("console=ttyAMA0 lab.plan=/tmp/p.json quiet"), "/tmp/p.json");
        assert_eq!(plan_path("lab.plan="), PLAN_PATH);
        assert_eq!(plan_path("xlab.plan=/nope"), PLAN_PATH);
    }

    fn sh(name: &str, script: &str) -> labproto::Step {
        labproto::Step {
            name: name.into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout_s: 10,
            ..Default::default()
        }
    }

    fn step_starts(path: &std::path::Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .filter_map(labproto::Event::parse_line)
            .filter_map(|e| match e {
                labproto::Event::StepStart { step } => Some(step),
                _ => None,
            })
            .collect()
    }

    // Real processes on the host: repeat runs the step list again, until_fail stops it.
    #[test]
    fn repeat_and_until_fail() {
        let _serial = crate::step::tests::processes();
        let d = std::env::temp_dir().join(format!("lab-init-repeat-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let counter = d.join("n");
        // Fails on its third run.
        let third_fails = format!("echo x >> {0}; [ $(wc -l < {0}) -ne 3 ]", counter.display());
        let plan = |until_fail| Plan {
            name: "r".into(),
            steps: vec![sh("a", "true"), sh("b", &third_fails)],
            repeat: 5,
            until_fail,
            ..Default::default()
        };
        let events = d.join("events.jsonl");
        for (until_fail, runs) in [(false, 5), (true, 3)] {
            std::fs::write(&events, "").unwrap();
            std::fs::write(&counter, "").unwrap();
            let mut sink = Sink::console();
            sink.attach(&events).unwrap();
            assert_eq!(run_steps(&plan(until_fail), &mut sink, &mut None), Ok(runs));
            let starts = step_starts(&events);
            assert_eq!(starts.len(), 2 * runs as usize, "{starts:?}");
            assert_eq!(&starts[..4], ["a@1", "b@1", "a@2", "b@2"]);
        }
        // Once: the plain names.
        std::fs::write(&events, "").unwrap();
        let mut sink = Sink::console();
        sink.attach(&events).unwrap();
        let once = Plan { name: "o".into(), steps: vec![sh("a", "true")], ..Default::default() };
        assert_eq!(run_steps(&once, &mut sink, &mut None), Ok(1));
        assert_eq!(step_starts(&events), ["a"]);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn required_mounts_cover_the_brief() {
        let all: Vec<_> = EARLY_MOUNTS.iter().chain(LATE_MOUNTS).map(|m| m.target).collect();
        for t in ["/proc", "/sys", "/dev", "/sys/kernel/debug", "/tmp", "/dev/binderfs"] {
            assert!(all.contains(&t), "{t}");
        }
        let binder = LATE_MOUNTS.iter().find(|m| m.fstype == "binder").unwrap();
        assert_eq!(binder.data, Some("stats=global"));
    }
}
