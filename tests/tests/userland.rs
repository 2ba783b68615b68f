//! The guest as a userland on the real kernel: services in plans (started, ready, used by
//! later steps, stopped and reported), failures in plain words with the step's own output.

use lab::harness::opts::{load_plan, RunOpts};
use lab::harness::outcome::{Exit, Outcome};
use lab::report::{self, summary::summary};
use labproto::{Ready, Status, Step};

fn case<'a>(o: &'a Outcome, step: &str, case: &str) -> (Status, &'a str) {
    o.results()
        .find(|r| r.0 == step && r.1 == case)
        .map(|r| (r.2, r.3.unwrap_or("")))
        .unwrap_or_else(|| panic!("no {step}/{case} in:\n{}", summary(o)))
}

fn sh(name: &str, script: &str) -> Step {
    Step {
        name: name.into(),
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        timeout_s: 20,
        ..Default::default()
    }
}

fn service(name: &str, script: &str, ready: Option<Ready>) -> Step {
    Step { service: true, ready, ..sh(name, script) }
}

/// The shipped example: a service ready by path, one ready by a printed line, a client step
/// that talks to the first; both stopped at the end, all passing.
#[test]
fn services_plan_passes() {
    let plan = load_plan("services").unwrap();
    let o = report::run_plan_and_report(&plan, &RunOpts::default()).unwrap();
    assert!(o.ok(), "{}", summary(&o));
    for s in ["file-server", "announcer"] {
        assert_eq!(case(&o, s, "ready").0, Status::Pass);
        let (st, msg) = case(&o, s, "stopped");
        assert!(st == Status::Pass && msg.starts_with("stopped with SIGTERM after"), "{msg}");
    }
    assert!(case(&o, "file-server", "ready").1.contains("/tmp/srv/ready exists"));
    assert_eq!(o.step_output["client"], ["got HELLO"]);
}

/// What goes wrong reads as words, with the step's own lines: a service that crashes while
/// the plan runs, one that never registers its binder name (no context manager: the init's
/// getService calls through the real driver fail), a client that exits 3.
#[test]
fn service_and_step_failures_in_plain_words() {
    let plan = labproto::Plan {
        name: "service-failures".into(),
        steps: vec![
            service("crasher", "echo crasher up; sleep 0.3; kill -SEGV $$", None),
            Step { timeout_s: 2, ..service("nobody", "exec sleep 1000", Some(Ready::Binder("lab.none".into()))) },
            sh("client", "echo cannot reach the server >&2; exit 3"),
            sh("wait", "sleep 1"),
        ],
        ..Default::default()
    };
    let o = report::run_plan_and_report(&plan, &RunOpts::default()).unwrap();
    // A service that never gets ready is a timeout, the worst of the three.
    assert_eq!(o.exit(), Exit::Timeout, "{}", summary(&o));
    let (st, msg) = case(&o, "crasher", "stopped");
    assert!(st == Status::Fail && msg.ends_with("): killed by SIGSEGV"), "{msg}");
    let (st, msg) = case(&o, "nobody", "ready");
    assert!(st == Status::Fail && msg.contains("still not ready after 2 s (last service manager check:"), "{msg}");
    let p = o.problems();
    assert!(p.iter().any(|l| l.starts_with("step nobody: timed out after 2.")), "{p:#?}");
    let client = p.iter().find(|l| l.starts_with("step client: ")).unwrap_or_else(|| panic!("{p:#?}"));
    assert_eq!(client, "step client: exited with status 3\n  its last 1 output line(s):\n    cannot reach the server");
    let crasher = p.iter().find(|l| l.starts_with("crasher/stopped failed")).unwrap();
    assert!(crasher.ends_with("its last 1 output line(s):\n    crasher up"), "{crasher}");
    // The JUnit report says the same.
    let junit = std::fs::read_to_string(o.dir.join("junit.xml")).unwrap();
    assert!(junit.contains("step client exited with status 3"), "{junit}");
}

/// `lab ARGS` through the built binary, as a user runs it.
fn lab(args: &[&str]) -> std::process::Output {
    std::process::Command::new(lab_tests::lab_bin()).args(args).output().expect("run lab")
}

/// `--deb strace`: the package and its libraries (and the loader) in the initramfs, the tool
/// on PATH, and binder's ioctls in its trace.
#[test]
fn deb_strace_traces_binder_smoke() {
    let out = lab(&["run", "--deb", "strace", "--", "strace", "-f", "/bin/binder-smoke"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("openat(AT_FDCWD, \"/dev/binderfs/binder\""), "{stdout}");
    assert!(stdout.contains("ioctl(3, BINDER_VERSION"), "{stdout}");
    assert!(stdout.contains("+++ exited with 0 +++"), "{stdout}");
}

/// A package apt does not know is refused before booting, by name; so is a bad name.
#[test]
fn deb_unknown_package_is_named() {
    let out = lab(&["run", "--deb", "strace,no-such-tool-x", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(Exit::HarnessError.code()), "{stderr}");
    assert!(stderr.contains("--deb no-such-tool-x: no arm64 package \"no-such-tool-x\" in Debian trixie"), "{stderr}");
    let out = lab(&["run", "--deb", "Bad_Name", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--deb \"Bad_Name\": not a Debian package name"), "{stderr}");
}

/// `--gdbserver`: Debian's gdbserver on the guest console /dev/hvc0 and the host's
/// gdb-multiarch attached by `lab gdb --user`: it stops binder-smoke (stripped, as every guest
/// program) at its first ioctl, reads the request from x1 (BINDER_VERSION), and the program
/// then runs to its end under gdb, so the step passes.
#[test]
fn gdbserver_on_hvc0_takes_host_gdb() {
    use std::io::BufRead;
    let mut run = std::process::Command::new(lab_tests::lab_bin())
        .args(["run", "--gdbserver", "--", "gdbserver", "/dev/hvc0", "/bin/binder-smoke"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run lab");
    // The step's output streams on stdout; attach once gdbserver waits on the console. The
    // reader keeps draining stdout after that, so lab never writes into a closed pipe.
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = run.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = vec![];
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("Remote debugging using /dev/hvc0") {
                let _ = tx.send(());
            }
            all.push(line);
        }
        all.join("\n")
    });
    if rx.recv_timeout(std::time::Duration::from_secs(600)).is_err() {
        let _ = run.kill();
        // Why: lab's own messages (a failed --deb overlay, a boot error) are on stderr.
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err);
        let _ = run.wait();
        panic!("gdbserver never listened:\n{}\nlab's stderr:\n{err}", reader.join().unwrap());
    }
    let gdb = lab(&[
        "gdb",
        "--user",
        "--",
        "-batch",
        "-ex",
        "catch syscall ioctl",
        "-ex",
        "continue",
        "-ex",
        "p/x $x1",
        "-ex",
        "delete",
        "-ex",
        "continue",
        // The host's hang-up never reaches the guest's console: gdbserver is told to exit.
        "-ex",
        "monitor exit",
    ]);
    let text = String::from_utf8_lossy(&gdb.stdout).to_string() + &String::from_utf8_lossy(&gdb.stderr);
    let out = run.wait_with_output().expect("lab run ends");
    let stdout = reader.join().unwrap();
    assert!(text.contains("syscall ioctl), "), "{text}");
    assert!(text.contains("= 0xc0046209"), "BINDER_VERSION's request in x1:\n{text}");
    assert!(text.contains("exited normally"), "{text}");
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Two refreshes of one private apt at once both succeed: apt-get does not wait for its
/// lists lock, and on a new machine two tests that each want a guest .deb refreshed the
/// guest's lists together; the second failed with "Could not get lock .../lists/lock".
#[test]
fn two_private_apt_refreshes_at_once_both_succeed() {
    let d = tempfile::tempdir().unwrap();
    let apt = lab::provision::apt::PrivateApt::sources_of(d.path(), "bookworm");
    let results: Vec<String> = std::thread::scope(|s| {
        let a = [s.spawn(|| apt.update()), s.spawn(|| apt.update())];
        a.map(|h| h.join().unwrap().map_or_else(|e| format!("{e:#}"), |()| "ok".into())).into()
    });
    assert_eq!(results, ["ok", "ok"]);
    let lists = std::fs::read_dir(d.path().join("apt/src-bookworm/state/lists")).unwrap();
    assert!(lists.flatten().any(|e| e.file_name().to_string_lossy().contains("_Sources")), "no lists");
}

/// Downloads from one private apt at once, and from another beside them, all succeed: on a
/// new machine two tests that each wanted a guest .deb ran `apt-get --download-only install`
/// together and the second failed with "Could not get lock /dev/lock-frontend" (apt takes
/// dpkg's lock beside the status file, which was /dev/null for every private apt).
#[test]
fn private_apt_downloads_at_once_all_succeed() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (one, other) = (lab::provision::debs::guest_apt(a.path()), lab::provision::debs::guest_apt(b.path()));
    one.update().unwrap();
    other.update().unwrap();
    let pkgs = ["busybox-static".to_string()];
    let results: Vec<String> = std::thread::scope(|s| {
        let h = [
            s.spawn(|| one.download_closure(&pkgs)),
            s.spawn(|| one.download_closure(&pkgs)),
            s.spawn(|| other.download_closure(&pkgs)),
        ];
        h.map(|h| h.join().unwrap().map_or_else(|e| format!("{e:#}"), |_| "ok".into())).into()
    });
    assert_eq!(results, ["ok", "ok", "ok"]);
    for d in [a.path(), b.path()] {
        let archives = std::fs::read_dir(d.join("apt/guest-arm64/cache/archives")).unwrap();
        assert!(archives.flatten().any(|e| e.file_name().to_string_lossy().starts_with("busybox-static_")));
    }
}
