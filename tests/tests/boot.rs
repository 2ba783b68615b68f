//! Boots the real kernel in QEMU: every board's topology, panics, hangs, overlays, Ctrl-C.
//! Needs `cargo make setup` (cargo make test runs it first).

use lab::harness::opts::{load_board, RunOpts};
use lab::harness::outcome::Verdict;
use lab::report::run_and_report;
use lab_tests::{assert_ok, opts};
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn each_board_boots_with_its_topology() {
    for board in ["sa8155p", "sm8150-upstream", "symmetric"] {
        let o = run_and_report(&RunOpts { board: board.into(), ..opts("default") }).unwrap();
        assert_ok(&o);
        // check_topology compared every CPU with the board file; make sure it had data.
        let cpus = o.data("topology").and_then(|d| d["cpus"].as_array()).expect("topology report");
        assert_eq!(cpus.len(), 8, "{board}");
        let expect = board::expected_topology(&load_board(board).unwrap());
        for (c, e) in cpus.iter().zip(&expect) {
            assert_eq!(c["capacity"].as_u64(), Some(e.capacity as u64), "{board} cpu{}", e.cpu);
        }
        assert!(o.results().any(|(_, case, s, _)| case == "sync_round_trip" && s == labproto::Status::Pass));
        assert!(o.dir.join("manifest.json").is_file() && o.dir.join("console.log").is_file());
    }
}

#[test]
fn sa8155p_reports_306_871_1024_on_4_3_1() {
    let o = run_and_report(&opts("default")).unwrap();
    assert_ok(&o);
    let cpus = o.data("topology").unwrap()["cpus"].as_array().unwrap().clone();
    let caps: Vec<u64> = cpus.iter().map(|c| c["capacity"].as_u64().unwrap()).collect();
    let clusters: Vec<i64> = cpus.iter().map(|c| c["cluster_id"].as_i64().unwrap()).collect();
    assert_eq!(caps, [306, 306, 306, 306, 871, 871, 871, 1024]);
    assert_eq!(clusters, [0, 0, 0, 0, 1, 1, 1, 2]);
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(o.dir.join("manifest.json")).unwrap()).unwrap();
    assert!(m["boot_s"].as_f64().unwrap() > 0.0);
    assert!(m["reproducer"].as_str().unwrap().starts_with("qemu-system-aarch64 "));
    assert_eq!(m["vcpu_threads"].as_array().unwrap().len(), 8);
}

#[test]
fn kernel_panic_is_reported_with_its_text() {
    let o = run_and_report(&opts("panic")).unwrap();
    let Verdict::Panic { text } = &o.verdict else { panic!("expected a panic, got {:?}", o.verdict) };
    assert!(text.contains("sysrq triggered crash"), "{text}");
    assert!(!o.ok());
    let latency = o.panic_report_s.expect("panic latency recorded");
    assert!(latency <= 5.0, "panic reported {latency:.1} s after it was seen");
}

/// `lab`'s exit codes tell a kernel fault and a harness error from a failed test
/// (docs/src/reference/exit-codes.md).
#[test]
fn exit_codes_name_the_failure() {
    let status = |args: &[&str]| {
        let out = lab_tests::lab().args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = status(&["run", "--plan", "panic"]);
    assert_eq!(code, Some(201), "kernel panic: {err}");
    let (code, err) = status(&["run", "--board", "no-such-board"]);
    assert_eq!(code, Some(203), "harness error: {err}");
    assert!(err.contains("no board \"no-such-board\""), "{err}");
}

#[test]
fn hanging_step_is_a_timeout_with_console_tail() {
    let o = run_and_report(&opts("hang")).unwrap();
    let problems = o.problems().join("\n");
    assert!(problems.contains("never-ends: timed out"), "{problems}");
    assert!(problems.contains("about to hang"), "console tail missing: {problems}");
    // The guest killed the step and still powered off cleanly.
    assert_eq!(o.verdict, Verdict::Completed);
}

#[test]
fn malformed_board_gives_the_documented_error() {
    let d = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(lab::support::paths::board_dir().join("sa8155p.toml")).unwrap();
    // Put cpu 3 into the gold cluster as well.
    let bad = good.replacen("cpus = [4, 5, 6]", "cpus = [3, 4, 5, 6]", 1);
    assert_ne!(good, bad, "fixture edit did not apply");
    let path = d.path().join("broken.toml");
    std::fs::write(&path, bad).unwrap();
    let mut o = RunOpts { board: path.to_str().unwrap().into(), ..opts("default") };
    o.board = path.display().to_string();
    let e = format!("{:#}", run_and_report(&o).unwrap_err());
    assert!(e.contains("broken.toml") && e.contains("clusters[1].cpus") && e.contains("exactly one cluster"), "{e}");
}

#[test]
fn overlay_binary_runs_from_a_plan() {
    let d = tempfile::tempdir().unwrap();
    let bins = rootfs_bins();
    std::fs::create_dir_all(d.path().join("overlay/bin")).unwrap();
    // A user's own static binder client: here a copy of the guest's multicall binary under a
    // new name, told which of its programs to be (busybox-style, `NAME ARGS`).
    std::fs::copy(bins.program("binder-smoke").unwrap(), d.path().join("overlay/bin/my-client")).unwrap();
    let plan = d.path().join("mine.toml");
    std::fs::write(
        &plan,
        "name = \"mine\"\n[[steps]]\nname = \"my-client\"\nargv = [\"/bin/my-client\", \"binder-smoke\"]\ntimeout_s = 30\n",
    )
    .unwrap();
    let mut o = opts(plan.to_str().unwrap());
    o.overlay = Some(d.path().join("overlay"));
    let out = run_and_report(&o).unwrap();
    assert_ok(&out);
    assert!(out.results().any(|(step, case, _, _)| step == "my-client" && case == "sync_round_trip"));
}

/// The guest binaries name no path of this machine (before the remaps, `proto`'s panic
/// locations carried the checkout's path).
#[test]
fn guest_binaries_hold_no_path_of_this_machine() {
    let bins = rootfs_bins();
    let bytes = std::fs::read(&bins.init).unwrap();
    let src = rootfs_bins::guest_dir().parent().unwrap().to_path_buf();
    let home = std::env::var("HOME").unwrap();
    for p in [src.display().to_string(), format!("{home}/.cargo"), format!("{home}/.rustup")] {
        let n = bytes.windows(p.len()).filter(|w| *w == p.as_bytes()).count();
        assert_eq!(n, 0, "{} holds {p} {n} times", bins.init.display());
    }
}

fn rootfs_bins() -> rootfs_bins::GuestBins {
    rootfs_bins::build_guest(&rootfs_bins::GuestBuildOpts { quiet: true, ..Default::default() }).unwrap()
}
use rootfs as rootfs_bins;

/// Processes for which `keep(pid)` holds.
fn pids_where(keep: impl Fn(u32) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| keep(*pid))
        .collect()
}

/// QEMU processes whose command line mentions `needle`.
fn qemus_with(needle: &str) -> Vec<u32> {
    pids_where(|pid| {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        cmd.starts_with("qemu-system-aarch64") && cmd.contains(needle)
    })
}

/// The lab binary running `args`, its output discarded.
fn spawn_lab(args: &[&str]) -> std::process::Child {
    lab_tests::lab().args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap()
}

#[test]
fn ctrl_c_leaves_no_qemu_behind() {
    let d = tempfile::tempdir().unwrap();
    let plan = d.path().join("long.toml");
    let marker = format!("ctrlc-{}", std::process::id());
    std::fs::write(
        &plan,
        format!("name = \"{marker}\"\n[[steps]]\nname = \"wait\"\nargv = [\"/bin/sleep\", \"600\"]\ntimeout_s = 600\n"),
    )
    .unwrap();
    let mut child = spawn_lab(&["run", "--plan", plan.to_str().unwrap()]);
    // Wait until its QEMU runs (the run directory name carries the plan name).
    let t0 = Instant::now();
    while qemus_with(&marker).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(120), "QEMU never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) on the pid of the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    assert!(!st.success(), "an interrupted run must not pass");
    let left = qemus_with(&marker);
    assert!(left.is_empty(), "QEMU left running: {left:?}");
}

/// Booting QEMUs (not a `--version` probe) whose parent is `parent`.
fn qemu_children(parent: u32) -> Vec<u32> {
    pids_where(|q| {
        let stat = std::fs::read_to_string(format!("/proc/{q}/stat")).unwrap_or_default();
        // After "(comm)": state, then the parent's pid.
        let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok());
        let cmd = std::fs::read(format!("/proc/{q}/cmdline")).unwrap_or_default();
        let boots = cmd.split(|&b| b == 0).any(|a| a == b"-kernel");
        ppid == Some(parent) && stat.contains("(qemu-system-aar") && boots
    })
}

/// Two seconds on, SIGTERM to `child`; then waits for it to end, adding the QEMUs it still
/// had to `seen`.
fn sigterm_and_wait(
    child: &mut std::process::Child,
    seen: &mut std::collections::BTreeSet<u32>,
) -> std::process::ExitStatus {
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) on the pid of the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    loop {
        seen.extend(qemu_children(child.id()));
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "lab did not end within 300 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A SIGTERM during the nightly's first stage ends the night there: no later stage boots, the
/// exit says "interrupted" (130), and no QEMU is left.
#[test]
fn sigterm_ends_a_nightly_with_the_boot_it_was_in() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("night");
    let mut child = spawn_lab(&["nightly", "--profile", "quick", "--out", out.to_str().unwrap()]);
    let mut seen = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    while seen.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(600), "the nightly never booted");
        assert!(child.try_wait().unwrap().is_none(), "the nightly ended before its first boot");
        seen.extend(qemu_children(child.id()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = sigterm_and_wait(&mut child, &mut seen);
    assert_eq!(st.code(), Some(130), "an interrupted nightly exits 130");
    assert_eq!(seen.len(), 1, "QEMUs started: {seen:?}; only the interrupted stage's may");
    assert!(!out.join("conformance-debug").exists(), "a stage after the interrupted one ran");
    for pid in seen {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "QEMU {pid} left running");
    }
}

/// Deterministic boots (`--tcg icount`) run two at a time (`-j 2`) leave the same bytes as one
/// at a time: the guest's results and its whole console, boot for boot.
#[test]
fn icount_boots_two_at_once_match_one_at_a_time_byte_for_byte() {
    // Short plans: a longer one (bench-quick) has diverged between two -j 1 runs as well on a
    // host at load 20 (docs/src/results/speed.md), which is no question of -j.
    let default = lab::harness::opts::load_plan("default").unwrap();
    let plans = [default.clone(), default];
    let boot = |jobs: usize| {
        let o = RunOpts { tcg: lab::harness::qemu::Tcg::Icount, jobs, ..Default::default() };
        lab::harness::boots::each(&o, &plans, |p| p.name.clone(), |p| lab::report::run_plan_and_report(p, &o)).unwrap()
    };
    let (one, two) = (boot(1), boot(2));
    for (a, b) in one.iter().zip(&two) {
        assert_ok(a);
        assert_ok(b);
        for f in ["results.jsonl", "console.log"] {
            let read = |o: &lab::harness::outcome::Outcome| std::fs::read(o.dir.join(f)).unwrap();
            assert!(read(a) == read(b), "{f} differs: {} (-j 1) and {} (-j 2)", a.dir.display(), b.dir.display());
        }
    }
}

/// Busy-loop processes of the test's own, one pair per host core, ended by PID when dropped.
struct HostLoad(Vec<std::process::Child>);

impl HostLoad {
    fn start() -> HostLoad {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        HostLoad(
            (0..2 * cores)
                .map(|_| std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
                .collect(),
        )
    }
}

impl Drop for HostLoad {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A second QMP client that sends `query-status` back to back for one boot: each command
/// wakes QEMU's main loop, which is what made icount boots differ (qemu/0022).
struct QmpFlood {
    qemu: std::path::PathBuf,
    _dir: tempfile::TempDir,
    sock: std::path::PathBuf,
}

impl QmpFlood {
    /// A wrapper around `real` that adds the second QMP socket to every QEMU it starts.
    fn new(real: &Path) -> QmpFlood {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("flood.sock");
        let qemu = dir.path().join("qemu-system-aarch64");
        let script =
            format!("#!/bin/sh\nexec '{}' \"$@\" -qmp unix:{},server=on,wait=off\n", real.display(), sock.display());
        std::fs::write(&qemu, script).unwrap();
        std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
        QmpFlood { qemu, _dir: dir, sock }
    }

    /// Floods the socket of the next QEMU until it goes; returns how many commands it sent.
    fn during<T>(&self, boot: impl FnOnce() -> T) -> (T, u64) {
        use std::io::{BufRead, BufReader, Write};
        let _ = std::fs::remove_file(&self.sock);
        let sock = self.sock.clone();
        let flood = std::thread::spawn(move || {
            let t0 = Instant::now();
            let s = loop {
                match std::os::unix::net::UnixStream::connect(&sock) {
                    Ok(s) => break s,
                    Err(_) if t0.elapsed() < Duration::from_secs(120) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => panic!("QEMU never opened {}: {e}", sock.display()),
                }
            };
            let (mut w, mut r, mut line, mut n) = (s.try_clone().unwrap(), BufReader::new(s), String::new(), 0);
            let mut ask =
                |cmd: &str| w.write_all(cmd.as_bytes()).is_ok() && r.read_line(&mut line).is_ok_and(|k| k > 0);
            ask("");
            ask("{\"execute\":\"qmp_capabilities\"}\n");
            while ask("{\"execute\":\"query-status\"}\n") {
                n += 1;
            }
            n
        });
        let out = boot();
        (out, flood.join().unwrap())
    }
}

/// Icount boots of the same benchmark plan leave the same bytes (the guest's results and its
/// whole console, nothing removed) while every host core is kept busy and a second QMP client
/// wakes QEMU's main loop thousands of times a second. Before qemu/0022 the main loop could
/// run a virtual timer, or warp the clock, while the vCPU thread ran a round: Debian's
/// 10.0.2 under this forcing gave another results.jsonl in 2 of 6 boots
/// (docs/src/results/harness-faults.md).
#[test]
fn icount_boots_under_host_load_are_byte_identical() {
    let o = RunOpts { tcg: lab::harness::qemu::Tcg::Icount, ..opts("bench-quick") };
    assert_eq!(o.qemu_choice(), lab::kbuild::qemu::Choice::Lab, "the deterministic modes run on the lab's QEMU");
    let (bin, key) = o.qemu_binary().unwrap();
    let flood = QmpFlood::new(&bin);
    let o = RunOpts { qemu_resolved: Some((flood.qemu.clone(), key)), ..o };
    let load = HostLoad::start();
    let boots: Vec<_> = (0..3).map(|_| flood.during(|| run_and_report(&o).unwrap())).collect();
    drop(load);
    for (b, sent) in &boots {
        assert_ok(b);
        assert!(*sent > 100, "the flood sent {sent} commands to {}", b.dir.display());
    }
    let (a, _) = &boots[0];
    for (b, _) in &boots[1..] {
        for f in ["results.jsonl", "console.log"] {
            let read = |o: &lab::harness::outcome::Outcome| std::fs::read(o.dir.join(f)).unwrap();
            assert!(read(a) == read(b), "{f} differs: {} and {}", a.dir.display(), b.dir.display());
        }
    }
}

/// A SIGTERM while `reproduce -j 2` has two QEMUs running ends both, starts no other boot and
/// exits 130.
#[test]
fn sigterm_ends_every_boot_of_a_parallel_reproduce() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("repro");
    let args = ["reproduce", "--profile", "quick", "--only", "000,002", "--tcg", "icount", "-j", "2", "--out"];
    let mut child = spawn_lab(&[&args[..], &[out.to_str().unwrap()]].concat());
    let mut seen = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    loop {
        let now = qemu_children(child.id());
        seen.extend(now.iter().copied());
        if now.len() == 2 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "two boots never ran at once (QEMUs seen: {seen:?})");
        assert!(child.try_wait().unwrap().is_none(), "reproduce ended before its boots overlapped");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Boots that ended before two ran at once are fine (seed 000 on the C driver first builds
    // its kernel, so the other boots may come and go meanwhile); none may start after.
    let running = seen.clone();
    let st = sigterm_and_wait(&mut child, &mut seen);
    assert_eq!(st.code(), Some(130), "an interrupted reproduce exits 130");
    let late: Vec<&u32> = seen.difference(&running).collect();
    assert!(late.is_empty(), "QEMUs started after both boots ran: {late:?} (all: {seen:?})");
    for pid in seen {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "QEMU {pid} left running");
    }
}

#[test]
fn debug_kernel_kunit_ctabs_suite_passes() {
    let mut o = opts("kunit");
    o.flavor = "debug".into();
    let out = run_and_report(&o).unwrap();
    assert_ok(&out);
    let cases: Vec<&str> = out.results().filter(|(step, ..)| *step == "kunit").map(|(_, case, ..)| case).collect();
    assert!(cases.iter().filter(|c| c.starts_with("rust_binder_ctabs.")).count() >= 5, "KUnit cases: {cases:?}");
}

/// The harness sends QEMU no QMP command while the guest runs: QEMU 10.0's monitor races its
/// own exit when a command is in flight as the guest powers off (it hung in
/// `monitor_cleanup`, or crashed), which a poll every 100 ms made happen now and then
/// (docs/src/results/harness-faults.md). QEMU's `handle_qmp_command` trace counts what it
/// was sent: the handshake and the vCPU-thread query at the start, nothing after.
#[test]
fn the_harness_sends_qemu_no_qmp_command_while_the_guest_runs() {
    let opts = RunOpts { qemu_trace: vec!["handle_qmp_command".into()], ..opts("default") };
    let o = run_and_report(&opts).unwrap();
    assert_ok(&o);
    let log = std::fs::read_to_string(o.dir.join(lab::harness::prepare::QEMU_TRACE_LOG)).unwrap();
    let commands: Vec<&str> = log.lines().filter(|l| l.contains("handle_qmp_command")).collect();
    assert!(
        commands.len() <= 2 && commands.iter().all(|c| c.contains("qmp_capabilities") || c.contains("query-cpus-fast")),
        "QEMU handled {} QMP command(s) in a {:.1} s run: {:?}",
        commands.len(),
        o.wall_s,
        &commands[..commands.len().min(5)]
    );
}
