//! `lab lava-job`: a LAVA job for the `qemu` device type that boots the lab's kernel, DTB and
//! initramfs with the lab's QEMU argv, and turns the plan's result lines into LAVA test cases
//! (one monitor per step: the step is the LAVA test definition, each result a case).
//!
//! Beside the job it writes the artifacts it names, a device dictionary for a LAVA server
//! (`device-dict.jinja2`) and the device configuration that dictionary renders to
//! (`device.yaml`), so `lava-run` runs the job locally, as the slower e2e test does.
//!
//! `lab lava-submit` and `--lava`: the job submitted to a farm and its console read back into
//! a run's outcome, as if the boot had run here ([`run_plan`] chooses). The reports of that
//! outcome are written by `report`, as for a local run.

use crate::harness::opts::{load_plan, RunOpts};
use crate::harness::outcome::Outcome;
use crate::harness::prepare::new_run_dir;
use crate::harness::prepare::{prepare, vm_spec, Prepared};
use crate::harness::qemu::{shell_line, Console};
use crate::support::{paths, progress};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options the qemu device type (or the deploy action) already gives QEMU, with their value.
const FROM_DEVICE_TYPE: &[&str] =
    &["-M", "-cpu", "-m", "-kernel", "-initrd", "-dtb", "-display", "-monitor", "-serial"];
const FROM_DEVICE_TYPE_FLAGS: &[&str] = &["-nodefaults", "-no-user-config"];

/// What was written.
pub struct Written {
    pub job: PathBuf,
    pub device: PathBuf,
    /// What the job boots (plan, board, kernel): to read its results back.
    pub prepared: Prepared,
}

/// The lab's argv as the qemu device type's `extra_options`: without the machine, CPU and
/// memory (job context), the images (deploy), the console (the device type's -nographic) and
/// the host-side channels (QMP, result port: results go to the console as LABRESULT lines).
pub fn extra_options(argv: &[String]) -> Vec<String> {
    let mut out = vec![];
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if FROM_DEVICE_TYPE.contains(&a) {
            i += 2;
            continue;
        }
        if FROM_DEVICE_TYPE_FLAGS.contains(&a) || (a == "-nic" && argv.get(i + 1).map(String::as_str) == Some("none")) {
            i += if a == "-nic" { 2 } else { 1 };
            continue;
        }
        let takes_value = argv.get(i + 1).is_some_and(|v| !v.starts_with('-'));
        if takes_value {
            // A panic must end QEMU: LAVA sees the console close instead of waiting out its timeout.
            let v = if a == "-action" && argv[i + 1] == "panic=pause" {
                "panic=exit-failure".into()
            } else {
                argv[i + 1].clone()
            };
            out.push(shell_line(&[a.to_string(), v]));
            i += 2;
        } else {
            out.push(a.to_string());
            i += 1;
        }
    }
    out
}

const RESULT_PATTERN: &str = r#"LABRESULT \{"type":"result","step":"[^"]*","case":"(?P<test_case_id>[^"]*)","status":"(?P<result>pass|fail|skip)""#;

/// One monitor per step, in plan order, then one for the init's end: LAVA ends the test
/// action (and QEMU) as soon as the last monitor ends, and the init's `done` line comes after
/// the last step's end, so without it a job could stop before the line that says the plan
/// finished.
fn monitors(plan: &labproto::Plan) -> Vec<Value> {
    let mut m: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| {
            let step = serde_json::to_string(&s.name).expect("strings serialize");
            json!({
                "name": s.name,
                "start": format!(r#"{{"type":"step_start","step":{step}}}"#),
                "end": format!(r#"{{"type":"step_end","step":{step}"#),
                "pattern": RESULT_PATTERN,
            })
        })
        .collect();
    // The kernel prints "reboot: Power down" (pr_emerg) when the init powers off.
    m.push(json!({"name": "lab-init-done", "start": r#"{"type":"done"}"#, "end": "reboot: Power down", "pattern": RESULT_PATTERN}));
    m
}

/// The job definition; `url` maps an artifact file name to its URL.
pub fn job(p: &Prepared, argv: &[String], url: &dyn Fn(&str) -> String, flavor: &str) -> Value {
    let timeout_s: u64 = p.plan.steps.iter().map(|s| s.timeout_s + 15).sum::<u64>() + 120;
    let image = |file: &str, arg: &str| json!({"url": url(file), "image_arg": format!("-{arg} {{{arg}}}")});
    json!({
        "device_type": "qemu",
        "job_name": format!("binder-lab {} on {} ({flavor})", p.plan.name, p.board.name()),
        "priority": "medium",
        "visibility": "public",
        "timeouts": {"job": {"seconds": timeout_s + 300}, "action": {"seconds": timeout_s}},
        "context": {
            "arch": "arm64",
            "machine": p.board.qemu_machine(),
            "cpu": p.board.qemu_cpu(),
            "memory": p.board.memory(),
            "extra_options": extra_options(argv),
        },
        "actions": [
            {"deploy": {"to": "tmpfs", "timeout": {"minutes": 5}, "images": {
                "kernel": image("Image", "kernel"),
                "initrd": image("initramfs.cpio", "initrd"),
                "dtb": image("board.dtb", "dtb"),
            }}},
            {"boot": {"method": "qemu", "media": "tmpfs", "timeout": {"minutes": 5}}},
            {"test": {"timeout": {"seconds": timeout_s}, "monitors": monitors(&p.plan)}},
        ],
    })
}

/// What `{% extends 'qemu.jinja2' %}` renders for the job's context (LAVA 2023.01's template),
/// for `lava-run --device` without a server.
pub fn device_config(job: &Value) -> Value {
    let c = &job["context"];
    let opts = vec![
        format!("-cpu {}", c["cpu"].as_str().unwrap_or_default()),
        format!("-machine {}", c["machine"].as_str().unwrap_or_default()),
        "-nographic".into(),
        "-net nic,model=virtio,macaddr=52:54:00:12:34:58 -net user".into(),
        format!("-m {}", c["memory"].as_str().unwrap_or_default()),
        "-monitor none".into(),
    ];
    json!({
        "available_architectures": ["arm64", "aarch64"],
        "constants": {
            "posix": {"lava_test_sh_cmd": "/bin/sh", "lava_test_results_dir": "/lava-%s", "lava_test_shell_file": "~/.bashrc"},
            "shutdown-message": "The system is going down for reboot NOW",
            "kernel-start-message": "Linux version [0-9]",
            "default-shell-prompt": "lava-test: # ",
            "spawn_maxread": "4092",
            // One try: a retried boot could turn a failed run into a pass.
            "failure_retry": 1,
            "boot_retry": 1,
        },
        "parameters": {"pass": null},
        "actions": {
            "deploy": {"connections": {"serial": null}, "methods": {"image": {"parameters": {"guest": {"size": 512, "interface": "ide", "driveid": "lavatest"}}}}},
            "boot": {"connections": {"serial": null}, "methods": {"qemu": {"parameters": {
                "command": "qemu-system-aarch64",
                "options": opts,
                "extra": c["extra_options"],
            }}}},
        },
        "timeouts": {"actions": {}, "connections": {}},
    })
}

/// The device dictionary a LAVA server needs for this job (software-only TCG: no KVM).
pub const DEVICE_DICT: &str = "{% extends 'qemu.jinja2' %}\n{% set no_kvm = True %}\n";

/// Prepares kernel, DTB and initramfs into `out` and writes the job beside them. Artifact
/// URLs are `<url_base>/<file>`, or file:// paths into `out` when no base is given.
pub fn write(opts: &RunOpts, out: &Path, url_base: Option<&str>) -> Result<Written> {
    write_plan(load_plan(&opts.plan)?, opts, out, url_base)
}

/// [`write`] for a plan given as such (the generated plans of `reproduce` and `ab`).
pub fn write_plan(plan: labproto::Plan, opts: &RunOpts, out: &Path, url_base: Option<&str>) -> Result<Written> {
    std::fs::create_dir_all(out)?;
    let out = std::path::absolute(out)?;
    let p = prepare(opts, plan, &out)?;
    std::fs::copy(p.kernel.image(), out.join("Image")).context("copying the kernel Image")?;
    // No result port and no QMP: results reach LAVA on the console.
    let mut spec = vm_spec(&p, opts, &out, Console::Pipe)?;
    spec.results = None;
    spec.qmp = None;
    let url = |f: &str| match url_base {
        Some(b) => format!("{}/{f}", b.trim_end_matches('/')),
        None => format!("file://{}", out.join(f).display()),
    };
    let job = job(&p, &spec.argv(), &url, &p.kernel.flavor);
    let written = Written { job: out.join("job.yaml"), device: out.join("device.yaml"), prepared: p };
    // JSON is YAML: LAVA reads both files with a YAML loader.
    crate::support::fs::write_atomic(&written.job, serde_json::to_string_pretty(&job)?.as_bytes())?;
    crate::support::fs::write_atomic(&written.device, serde_json::to_string_pretty(&device_config(&job))?.as_bytes())?;
    crate::support::fs::write_atomic(&out.join("device-dict.jinja2"), DEVICE_DICT.as_bytes())?;
    Ok(written)
}

/// A LAVA server, reached with Debian's `lavacli` (XML-RPC; http or https). The user's API
/// token reaches lavacli in an identity file (mode 0600, in a private `XDG_CONFIG_HOME` removed
/// with the farm), never in its argv, where any local user reads it (`ps`, `/proc/PID/cmdline`).
pub struct Farm {
    /// Holds `lavacli.yaml` with the one identity [`IDENTITY`].
    config: tempfile::TempDir,
    /// The URI without the token, for messages.
    shown: String,
    /// `lavacli`; a test's stand-in records what it is given.
    program: PathBuf,
}

/// The identity lavacli is run with (`--identity`), in the farm's own config file.
const IDENTITY: &str = "lab";

impl Farm {
    /// `server` is the farm's base URL (`https://lava.example.org`).
    pub fn new(server: &str, user: &str, token: &str) -> Result<Farm> {
        let Some((scheme, host)) = server.trim_end_matches('/').split_once("://") else {
            bail!("--server {server:?}: give the farm's base URL, e.g. https://lava.example.org");
        };
        if user.is_empty() || token.is_empty() {
            bail!("a LAVA user and API token are needed: --user NAME, and LAVA_TOKEN or --token-file FILE (mode 0600); a token is made in the server's web UI (API -> Authentication Tokens) or with `lava-server manage tokens add --user NAME`");
        }
        let host = host.trim_end_matches("/RPC2");
        let config = tempfile::Builder::new().prefix("lab-lavacli-").tempdir()?;
        // JSON is YAML; lavacli puts user and token into the URI in its own process.
        let identity =
            json!({ IDENTITY: { "uri": format!("{scheme}://{host}/RPC2"), "username": user, "token": token } });
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(config.path().join("lavacli.yaml"))?;
        std::io::Write::write_all(&mut f, serde_json::to_string(&identity)?.as_bytes())?;
        Ok(Farm { config, shown: format!("{scheme}://{user}@{host}"), program: "lavacli".into() })
    }

    fn lavacli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.program)
            .env("XDG_CONFIG_HOME", self.config.path())
            .env_remove("LAVA_TOKEN")
            .args(["--identity", IDENTITY])
            .args(args)
            .output()
            .context(
                "running lavacli (Debian's lavacli package: apt-get install lavacli, or cargo make setup --lava)",
            )?;
        if !out.status.success() {
            bail!(
                "lavacli {} against {} failed ({}): {}",
                args.join(" "),
                self.shown,
                out.status,
                // `jobs wait` says "timeout!" on stdout.
                [&out.stderr, &out.stdout].map(|b| String::from_utf8_lossy(b).trim().to_string()).join(" ").trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits a job definition; its job id.
    pub fn submit(&self, job: &Path) -> Result<u64> {
        let out = self.lavacli(&["jobs", "submit", &job.display().to_string()])?;
        out.split_whitespace()
            .next()
            .and_then(|id| id.parse().ok())
            .with_context(|| format!("lavacli jobs submit printed no job id: {out:?}"))
    }

    /// Waits up to `timeout_s` for the job to finish; its health ("Complete", "Incomplete",
    /// "Canceled") and failure comment.
    pub fn wait(&self, id: u64, timeout_s: u64) -> Result<(String, Option<String>)> {
        let id = id.to_string();
        self.lavacli(&["jobs", "wait", &id, "--polling", "2", "--timeout", &timeout_s.to_string()])?;
        let show: Value = serde_json::from_str(&self.lavacli(&["jobs", "show", &id, "--json"])?)
            .context("lavacli jobs show --json printed no JSON")?;
        let health = show["health"].as_str().unwrap_or("Unknown").to_string();
        Ok((health, show["failure_comment"].as_str().map(String::from)))
    }

    /// The job's console: the lines its log records from the target.
    pub fn console(&self, id: u64) -> Result<Vec<String>> {
        Ok(target_lines(&self.lavacli(&["jobs", "logs", &id.to_string(), "--raw", "--no-follow"])?))
    }

    /// The web page of a job.
    pub fn job_url(&self, id: u64) -> String {
        let base =
            self.shown.split_once('@').map(|(s, h)| format!("{}://{h}", s.split("://").next().unwrap_or("http")));
        format!("{}/scheduler/job/{id}", base.unwrap_or_default())
    }
}

/// The target's lines from a raw LAVA job log (a YAML list of flow mappings, one per line,
/// `- {"dt": ..., "lvl": "target", "msg": "..."}`, JSON-compatible). The dispatcher's shell
/// logger escapes each `"` of the console as `\"` (and nothing else) before logging the
/// line; undone here, so a `LABRESULT` line reads as the init wrote it.
pub fn target_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter(|l| l.contains(r#""lvl": "target""#))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["msg"].as_str().map(|m| m.replace("\\\"", "\"")))
        .collect()
}

/// What a farm's worker cannot run, if `opts` asks for it: the lab QEMU's features that
/// `harness::features` does not mark `on_farm` (its `qemu` device type starts the worker's own
/// QEMU), and a debugger connection.
pub fn refuse_on_farm(opts: &RunOpts) -> Result<()> {
    if let Some(flag) = crate::harness::features::not_on_farm(opts) {
        bail!(
            "--lava cannot run {flag}: it needs the lab's QEMU, and a farm's qemu device runs the worker's own \
             QEMU; run it here"
        );
    }
    if opts.gdb || opts.gdbserver {
        bail!("--lava cannot run --gdb/--gdbserver: a farm's job has no debugger connection");
    }
    Ok(())
}

/// One boot of `plan`: here, or as one job on the farm `opts.lava` names.
pub fn run_plan(plan: &labproto::Plan, opts: &RunOpts) -> Result<Outcome> {
    match &opts.lava {
        Some(target) => run_on_farm(plan, opts, target),
        None => crate::harness::run::run_plan(plan, opts),
    }
}

/// One boot of `plan` as one job on the farm `opts.lava` names.
pub fn run_on_farm(
    plan: &labproto::Plan,
    opts: &RunOpts,
    target: &crate::harness::opts::LavaTarget,
) -> Result<Outcome> {
    refuse_on_farm(opts)?;
    let farm = Farm::new(&target.server, &target.user, &target.token)?;
    let mut done = submit_and_collect_plan(plan.clone(), opts, &farm, target.artifact_url.as_deref(), 1)?;
    done.pop().with_context(|| format!("the farm returned no outcome for {}", plan.name))
}

/// How long a job may wait for a device, beyond its own timeout.
const QUEUE_WAIT_S: u64 = 3600;

/// `boots` LAVA jobs of the plan, submitted together (the farm runs them in parallel) and
/// collected in order: each boot's run directory gets its console.log and results.jsonl,
/// read from the job's console (the caller writes the reports); the first also holds the
/// job and its artifacts.
pub fn submit_and_collect(
    opts: &RunOpts,
    farm: &Farm,
    artifact_url: Option<&str>,
    boots: usize,
) -> Result<Vec<Outcome>> {
    submit_and_collect_plan(load_plan(&opts.plan)?, opts, farm, artifact_url, boots)
}

/// [`submit_and_collect`] for a plan given as such.
pub fn submit_and_collect_plan(
    plan: labproto::Plan,
    opts: &RunOpts,
    farm: &Farm,
    artifact_url: Option<&str>,
    boots: usize,
) -> Result<Vec<Outcome>> {
    let name = paths::path_safe(&format!("lava-{}-{}", opts.board, plan.name));
    let first = new_run_dir(&name)?;
    let w = write_plan(plan, opts, &first, artifact_url)?;
    let mut jobs = vec![];
    for boot in 0..boots {
        let dir = if boot == 0 { first.clone() } else { new_run_dir(&format!("{name}-{boot}"))? };
        let id = farm.submit(&w.job)?;
        progress::note(format!("LAVA job {id}: {}", farm.job_url(id)));
        jobs.push((id, dir));
    }
    // The job's own timeout plus an hour in the farm's queue: a job no device takes (no
    // `qemu` device, its worker offline) fails the command instead of hanging it.
    let job: Value = serde_json::from_slice(&std::fs::read(&w.job)?)?;
    let wait_s = job["timeouts"]["job"]["seconds"].as_u64().unwrap_or(3600) + QUEUE_WAIT_S;
    let mut outcomes = vec![];
    for (id, dir) in jobs {
        let (health, comment) = farm.wait(id, wait_s)?;
        let lines = farm.console(id)?;
        let mut log = lines.join("\n");
        log.push('\n');
        crate::support::fs::write_atomic(&dir.join("console.log"), log.as_bytes())?;
        crate::support::fs::write_atomic(
            &dir.join("lava-job.txt"),
            format!("{}\n{health}\n", farm.job_url(id)).as_bytes(),
        )?;
        let status = match comment {
            Some(c) => format!("LAVA job {id}: {health} ({c})"),
            None => format!("LAVA job {id}: {health}"),
        };
        outcomes.push(crate::harness::run::outcome_from_console(
            dir,
            &w.prepared,
            lines,
            health == "Complete",
            &status,
        )?);
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv() -> Vec<String> {
        "qemu-system-aarch64 -M virt,gic-version=3 -cpu cortex-a76 -smp 8 -m 2G -accel tcg,thread=single \
         -kernel /k/Image -initrd /r/i.cpio -dtb /r/b.dtb -append X -display none -monitor none -serial stdio \
         -device pvpanic-pci -action panic=pause -nodefaults -no-user-config -nic none -no-reboot -device virtio-rng-device"
            .split(' ')
            .map(|s| if s == "X" { "console=ttyAMA0 rdinit=/init".into() } else { s.to_string() })
            .collect()
    }

    #[test]
    fn extra_options_keep_what_the_device_type_lacks() {
        let x = extra_options(&argv());
        assert_eq!(
            x,
            [
                "-smp 8",
                "-accel tcg,thread=single",
                "-append 'console=ttyAMA0 rdinit=/init'",
                "-device pvpanic-pci",
                "-action panic=exit-failure",
                "-no-reboot",
                "-device virtio-rng-device"
            ]
        );
    }

    #[test]
    fn a_monitor_per_step_reads_result_lines() {
        let plan = load_plan("default").unwrap();
        let m = monitors(&plan);
        assert_eq!(m.len(), plan.steps.len() + 1, "a monitor per step, then the init's end");
        assert_eq!(m.last().unwrap()["start"], r#"{"type":"done"}"#);
        assert_eq!(labproto::Event::Done.to_line().trim(), m.last().unwrap()["start"]);
        assert_eq!(m[1]["start"], r#"{"type":"step_start","step":"binder-smoke"}"#);
        // The pattern matches the init's console fallback line for a result, as serde writes it.
        let ev = labproto::Event::Result {
            step: "binder-smoke".into(),
            case: "sync_round_trip".into(),
            status: labproto::Status::Pass,
            duration_ms: 1.5,
            message: None,
            data: serde_json::Value::Null,
        };
        let line = format!("[    1.0] LABRESULT {}", ev.to_line());
        let re = regex::Regex::new(m[1]["pattern"].as_str().unwrap()).unwrap();
        let c = re.captures(&line).expect("pattern matches");
        assert_eq!((&c["test_case_id"], &c["result"]), ("sync_round_trip", "pass"));
        let end = labproto::Event::StepEnd {
            step: "binder-smoke".into(),
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            duration_ms: 1.0,
        };
        assert!(end.to_line().starts_with(m[1]["end"].as_str().unwrap()));
    }

    // Recorded from LAVA 2023.01 (lavacli jobs logs --raw) of a lab job: the shell logger's
    // escaped quotes, a level that is not the target's, a line that is not a mapping.
    #[test]
    fn target_lines_read_the_console_back() {
        let log = concat!(
            "- {\"dt\": \"2026-12-02T01:32:29.598380\", \"lvl\": \"info\", \"msg\": \"start: 0 validate\"}\n",
            "- {\"dt\": \"2026-12-02T01:36:37.810027\", \"lvl\": \"target\", \"msg\": \"lab-init: results go to the console as 'LABRESULT' lines\"}\n",
            r#"- {"dt": "2026-12-02T01:36:37.964839", "lvl": "target", "msg": "LABRESULT {\\\"type\\\":\\\"step_start\\\",\\\"step\\\":\\\"a \\\\\"q\\\\\"\\\"}"}"#,
            "\n",
            "not yaml\n",
        );
        let lines = target_lines(log);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[1], r#"LABRESULT {"type":"step_start","step":"a \"q\""}"#);
        let ev = lines[1].split_once("LABRESULT ").and_then(|(_, j)| labproto::Event::parse_line(j));
        assert!(matches!(ev, Some(labproto::Event::StepStart { step }) if step == "a \"q\""));
    }

    #[test]
    fn a_farm_refuses_what_its_worker_cannot_run() {
        use crate::harness::qemu::Tcg;
        assert!(refuse_on_farm(&RunOpts { tcg: Tcg::Icount, ..Default::default() }).is_ok());
        for (o, word) in [
            (RunOpts { tcg: Tcg::Hicount, ..Default::default() }, "lab's QEMU"),
            (RunOpts { cache: true, ..Default::default() }, "lab's QEMU"),
            (RunOpts { qemu: crate::kbuild::qemu::Choice::Lab, ..Default::default() }, "lab's QEMU"),
            (RunOpts { gdb: true, ..Default::default() }, "debugger"),
        ] {
            let e = refuse_on_farm(&o).unwrap_err().to_string();
            assert!(e.contains("--lava cannot run") && e.contains(word), "{e}");
        }
    }

    #[test]
    fn the_token_stays_out_of_debug_output() {
        let t = crate::harness::opts::LavaTarget {
            server: "https://lava.example.org".into(),
            user: "u".into(),
            token: "s3cret".into(),
            artifact_url: None,
        };
        let shown = format!("{:?}", RunOpts { lava: Some(t), ..Default::default() });
        assert!(shown.contains("u@https://lava.example.org") && !shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn farm_needs_a_url_and_a_token() {
        let e = Farm::new("lava.example.org", "u", "t").err().unwrap().to_string();
        assert!(e.contains("base URL"), "{e}");
        let e = Farm::new("https://lava.example.org", "u", "").err().unwrap().to_string();
        assert!(e.contains("LAVA_TOKEN"), "{e}");
        let f = Farm::new("https://lava.example.org/", "u", "t").unwrap();
        assert_eq!(f.job_url(7), "https://lava.example.org/scheduler/job/7");
    }

    /// The token reaches lavacli in its 0600 identity file only: never in its argv, the
    /// messages or the run directory. A stand-in lavacli records its argv and what its
    /// identity file holds, then fails so the error message is checked too.
    #[test]
    fn the_token_never_reaches_a_command_line() {
        use std::os::unix::fs::PermissionsExt;
        let token = "tok-5e3c4e7-never-on-argv";
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("rec");
        let fake = dir.path().join("lavacli");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" >{0}.argv\ncat \"$XDG_CONFIG_HOME/lavacli.yaml\" >{0}.identity\n\
                 stat -c %a \"$XDG_CONFIG_HOME/lavacli.yaml\" >{0}.mode\nenv >{0}.env\necho 'no such job' >&2\nexit 1\n",
                rec.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut farm = Farm::new("https://lava.example.org", "u", token).unwrap();
        farm.program = fake;
        let config = farm.config.path().to_path_buf();
        // A fork elsewhere in the test process may briefly hold the script open for writing.
        let e = (0..20)
            .map(|_| format!("{:#}", farm.submit(Path::new("job.yaml")).unwrap_err()))
            .find(|e| !e.contains("Text file busy"))
            .unwrap();
        let read = |ext: &str| std::fs::read_to_string(rec.with_extension(ext)).unwrap();
        let argv = read("argv");
        assert!(argv.contains("jobs\nsubmit\njob.yaml") && argv.contains("--identity\nlab"), "{argv}");
        assert!(!argv.contains(token), "the token is in lavacli's argv: {argv}");
        assert!(!read("env").contains(token), "the token is in lavacli's environment");
        assert!(read("identity").contains(token), "lavacli's identity file lacks the token");
        assert_eq!(read("mode").trim(), "600");
        assert!(e.contains("no such job") && !e.contains(token), "{e}");
        // What a run directory gets from a farm: its messages and job pages.
        assert!(!format!("{} {}", farm.job_url(7), farm.shown).contains(token));
        drop(farm);
        assert!(!config.exists(), "the identity file outlives the farm");
    }
}
