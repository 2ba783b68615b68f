//! The driver developer's tools, end to end on the real kernel: --trace, the binderfs
//! selftest, --gdb with `lab gdb`'s gdb, LAVA's lava-run, a user's own crate. The slow or
//! extra-install ones are `#[ignore]`d with the reason and run by name (docs/src/guide/ci.md: "Slower tests").

use lab::harness::gdb;
use lab::harness::opts::RunOpts;
use lab::harness::outcome::Outcome;
use lab::harness::qemu::Tcg;
use lab::report::summary::summary;
use lab::report::{run_and_report, run_plan_and_report};
use lab::support::paths;
use lab_tests::lava::{LocalLava, LAVA_USER};
use lab_tests::{assert_ok, opts};
use labproto::Status;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn status(o: &Outcome, case: &str) -> Option<(Status, Option<String>)> {
    o.results().find(|(_, c, _, _)| *c == case).map(|(_, _, s, m)| (s, m.map(String::from)))
}

#[test]
fn trace_shows_binder_calls_and_where_the_server_ran() {
    let mut o = opts("default");
    o.trace =
        Some(labproto::TraceSpec::parse("binder:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking").unwrap());
    let out = run_and_report(&o).unwrap();
    assert_ok(&out);
    let dir = out.dir.join("trace");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let smoke = &summary["binder-smoke"];
    // binder-smoke makes one synchronous call: it and its reply are in the trace, and the
    // receiving thread's CPU and wake-up are known.
    assert!(smoke["transactions"].as_u64().unwrap() >= 1, "{smoke}");
    assert!(smoke["replies"].as_u64().unwrap() >= 1, "{smoke}");
    assert!(!smoke["received_on_cpu"].as_object().unwrap().is_empty(), "{smoke}");
    assert!(!smoke["server_wakeup_cpu"].as_object().unwrap().is_empty(), "{smoke}");
    assert_eq!(smoke["unparsed"], 0, "lines Perfetto's pattern would drop: {smoke}");
    let text = std::fs::read_to_string(dir.join("binder-smoke/trace.txt")).unwrap();
    assert!(text.starts_with("# tracer: nop"), "Perfetto's systrace importer sniffs this header");
    // The binary trace, read back by trace-cmd: the same events.
    let report =
        Command::new("trace-cmd").arg("report").arg("-i").arg(dir.join("binder-smoke/trace.dat")).output().unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("binder_transaction_received: transaction="), "{}", &report[..report.len().min(2000)]);
    let events = |t: &str| t.lines().filter(|l| lab::harness::trace::parse_line(l).is_some()).count();
    assert_eq!(events(&report), events(&text), "trace.dat and trace.txt hold the same events");
}

/// All three cases pass on the Rust driver (features/transaction_report, rust-driver 0013),
/// on the perf and the debug kernel. Under icount at 1 ns per instruction: the kselftest
/// harness gives each case 30 s of guest time, which under `--tcg single` is host time, so a
/// loaded host failed binderfs_stress on the debug kernel (1000 devices, 4000 threads); here the
/// verdict does not depend on the host (the whole step takes 2.7 s of guest time on debug).
fn binderfs_selftest_passes(flavor: &str) {
    let mut o = opts("binderfs");
    o.tcg = Tcg::Icount;
    o.icount_shift = 0;
    o.flavor = flavor.into();
    o.name = format!("binderfs-{flavor}");
    let out = run_and_report(&o).unwrap();
    assert_ok(&out);
    for case in ["global.binderfs_stress", "global.binderfs_test_privileged", "global.binderfs_test_unprivileged"] {
        let got = status(&out, case).unwrap_or_else(|| panic!("{case} missing:\n{}", summary(&out)));
        assert_eq!(got.0, Status::Pass, "{case}: {got:?}");
    }
}

#[test]
fn binderfs_selftest_passes_perf() {
    binderfs_selftest_passes("perf");
}

#[test]
fn binderfs_selftest_passes_debug() {
    binderfs_selftest_passes("debug");
}

/// Boots with `--gdb` in a thread, waits for its gdb target, runs gdb with `extra` and returns
/// gdb's output and the run's outcome.
fn with_gdb(mut o: RunOpts, extra: &[&str]) -> (String, Outcome) {
    o.gdb = true;
    let runner = std::thread::spawn(move || run_and_report(&o).unwrap());
    let t0 = Instant::now();
    let target = loop {
        match gdb::find_target(&paths::runs_dir(), None) {
            Ok(t) => break t,
            Err(_) if t0.elapsed() < Duration::from_secs(600) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("{e}"),
        }
    };
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let argv = gdb::argv(&target, &extra);
    let mut child =
        Command::new(&argv[0]).args(&argv[1..]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gdb did not finish in 5 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // No harness timeout applies under --gdb: if gdb left the guest halted, end its QEMU here.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !runner.is_finished() {
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the QEMU this test started (its pid from the run's gdb target).
            unsafe { libc::kill(target.qemu_pid as libc::pid_t, libc::SIGKILL) };
            panic!("the guest did not finish after gdb detached; gdb said:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    (text, runner.join().unwrap())
}

/// Address of a symbol in the kernel's System.map.
fn symbol(vmlinux: &Path, suffix: &str) -> String {
    let map = std::fs::read_to_string(vmlinux.with_file_name("System.map")).unwrap();
    let line = map.lines().find(|l| l.ends_with(suffix)).unwrap_or_else(|| panic!("no {suffix} in System.map"));
    format!("0x{}", line.split(' ').next().unwrap())
}

#[test]
fn gdb_stops_in_the_rust_binder_on_a_guest_call() {
    // The perf kernel has no DWARF: a symbol breakpoint and the registers of the call.
    let vmlinux = lab::kbuild::kernel::build("perf").unwrap().vmlinux();
    let bp = format!("break *{}", symbol(&vmlinux, "11rust_binder17rust_binder_ioctl"));
    let ex = ["-batch", "-ex", &bp, "-ex", "continue", "-ex", "p/x $x1", "-ex", "delete", "-ex", "detach"];
    let (text, out) = with_gdb(opts("default"), &ex);
    assert!(text.contains("rust_binder_ioctl"), "{text}");
    // x1 is the ioctl command: a binder one ('b' in bits 8-15), from binder-smoke.
    let cmd = text.lines().find_map(|l| l.strip_prefix("$1 = 0x")).unwrap_or_else(|| panic!("{text}"));
    let cmd = u64::from_str_radix(cmd.trim(), 16).unwrap();
    assert_eq!((cmd >> 8) & 0xff, u64::from(b'b'), "{text}");
    // After gdb detached, the plan ran to the end.
    assert_ok(&out);
}

#[test]
fn dump_writes_an_elf_core_of_guest_memory_on_power_off_and_panic() {
    let d = tempfile::tempdir().unwrap();
    for (plan, file) in [("default", "off.elf"), ("panic", "panic.elf")] {
        let path = d.path().join(file);
        let out = run_and_report(&RunOpts { dump: Some(path.clone()), ..opts(plan) }).unwrap();
        assert_eq!(out.ok(), plan == "default", "{}", summary(&out));
        let mut head = [0u8; 20];
        std::io::Read::read_exact(&mut std::fs::File::open(&path).unwrap(), &mut head).unwrap();
        // ELF, 64-bit little-endian, ET_CORE, EM_AARCH64; at least the board's 2 GiB of RAM.
        assert_eq!(&head[..6], b"\x7fELF\x02\x01", "{plan}");
        assert_eq!((u16::from_le_bytes([head[16], head[17]]), u16::from_le_bytes([head[18], head[19]])), (4, 183));
        assert!(std::fs::metadata(&path).unwrap().len() >= 2 << 30, "{plan}: dump cut short");
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
#[ignore = "a DWARF kernel (kernel-config/extra/gdb.config) is another full build, 12-30 min on 2 cores: cargo test -p lab-tests --test devloop -- --ignored gdb_reads"]
fn gdb_reads_rust_binder_arguments_with_dwarf() {
    let mut o = opts("default");
    o.kconfig.files = vec![paths::repo().join("kernel-config/extra/gdb.config")];
    let ex = [
        "-batch",
        "-ex",
        "break rust_binder_ioctl",
        "-ex",
        "continue",
        "-ex",
        "info args",
        // The lx-* helpers are C (`(char *)linux_banner`): in a Rust frame gdb parses them as
        // Rust, so run them from the C caller's frame (docs/src/guide/debugging.md).
        "-ex",
        "up",
        "-ex",
        "lx-version",
        "-ex",
        "delete",
        "-ex",
        "detach",
    ];
    let (text, out) = with_gdb(o, &ex);
    assert!(text.contains("hit Breakpoint 1, rust_binder::rust_binder_ioctl ("), "{text}");
    // The ioctl command, read from DWARF by name: a binder one ('b' in bits 8-15).
    let cmd: u64 =
        text.lines().find_map(|l| l.strip_prefix("cmd = ")).unwrap_or_else(|| panic!("{text}")).parse().unwrap();
    assert_eq!((cmd >> 8) & 0xff, u64::from(b'b'), "{text}");
    assert!(text.contains("Linux version 7.2"), "the kernel's gdb helpers (lx-version) did not load:\n{text}");
    assert_ok(&out);
}

#[test]
#[ignore = "builds a kernel of its own (perf's O= copy plus the objects IKCONFIG touches, a few minutes): cargo test -p lab-tests --test devloop -- --ignored kconfig_add_builds"]
fn kconfig_add_builds_a_kernel_of_its_own_and_keeps_the_flavor() {
    let perf = lab::kbuild::kernel::build("perf").unwrap();
    let image = std::fs::read(perf.image()).unwrap();
    let mut o = opts("default");
    o.kconfig.adds = vec!["CONFIG_IKCONFIG=y".into(), "CONFIG_IKCONFIG_PROC=y".into()];
    let own = lab::kbuild::kernel::build_with("perf", &o.kconfig).unwrap();
    assert!(own.flavor.starts_with("perf+") && own.dir != perf.dir, "{own:?}");
    assert!(std::fs::read_to_string(own.dir.join("lab-extras.config")).unwrap().contains("CONFIG_IKCONFIG_PROC=y"));
    // The guest runs that kernel: its own config is in /proc/config.gz.
    let argv = ["/bin/sh", "-c", "zcat /proc/config.gz | grep -x CONFIG_IKCONFIG_PROC=y"].map(String::from);
    let out = run_plan_and_report(&lab::harness::adhoc::command_plan(&argv, 60), &o).unwrap();
    assert_ok(&out);
    assert_eq!(std::fs::read(perf.image()).unwrap(), image, "the perf kernel was not touched");
    assert_eq!(lab::kbuild::kernel::build("perf").unwrap().dir, perf.dir);
}

#[test]
#[ignore = "needs Debian's lava-dispatcher (cargo make setup --lava): cargo test -p lab-tests --test devloop -- --ignored lava"]
fn lava_run_reports_the_default_plan_like_lab_run() {
    let o = opts("default");
    let lab = run_and_report(&o).unwrap();
    assert_ok(&lab);
    let dir = tempfile::tempdir().unwrap();
    let w = lab::harness::lava::write(&o, dir.path(), None).unwrap();
    let out = Command::new("lava-run")
        .args(["--job-id", "1", "--output-dir"])
        .arg(dir.path().join("out"))
        .arg("--device")
        .arg(&w.device)
        .arg(&w.job)
        .output()
        .expect("lava-run (cargo make setup --lava)");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // lava-run logs one JSON-ish line per result; collect the test cases it reports.
    let mut cases = vec![];
    for l in log.lines().filter(|l| l.contains(r#""lvl": "results""#)) {
        let field = |k: &str| {
            l.split(&format!(r#""{k}": ""#)).nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_string()
        };
        if field("definition") != "lava" {
            cases.push((format!("{}/{}", field("definition"), field("case")), field("result")));
        }
    }
    let mut want: Vec<(String, String)> =
        lab.results().map(|(s, c, st, _)| (format!("{s}/{c}"), format!("{st:?}").to_lowercase())).collect();
    want.sort();
    cases.sort();
    assert_eq!(cases, want, "lava-run:\n{log}");
    assert!(log.contains(r#""case": "job", "definition": "lava", "result": "pass""#), "{log}");
}

#[test]
#[ignore = "needs Debian's lava-server, lava-dispatcher and lavacli (cargo make setup --lava): cargo test -p lab-tests --test devloop -- --ignored lava_submit"]
fn lava_submit_runs_the_default_plan_on_a_local_lava_instance() {
    let lava = LocalLava::start();
    let farm = lab::harness::lava::Farm::new(&lava.url, LAVA_USER, &lava.token).unwrap();
    let outcomes = lab::harness::lava::submit_and_collect(&opts("default"), &farm, None, 1).unwrap();
    let o = &outcomes[0];
    assert!(o.ok(), "{}\n{}", summary(o), lava.logs());
    let cases: Vec<String> = o.results().map(|(s, c, st, _)| format!("{s}/{c} {st:?}")).collect();
    assert_eq!(
        cases,
        ["topology/topology Pass", "binder-smoke/binder_version Pass", "binder-smoke/sync_round_trip Pass"],
        "{}",
        summary(o)
    );
    assert!(std::fs::read_to_string(o.dir.join("results.jsonl")).unwrap().contains(r#""type":"done""#));
}

/// `reproduce --lava`: a multi-boot command's boots go to the farm as jobs and come back into
/// the usual tables (seed 002 only: one boot, about two minutes on the local instance).
#[test]
#[ignore = "needs Debian's lava-server, lava-dispatcher and lavacli (cargo make setup --lava): cargo test -p lab-tests --test devloop -- --ignored lava_reproduce"]
fn lava_reproduce_runs_its_boots_as_jobs_on_a_local_lava_instance() {
    use lab::measure::bench::Profile;
    let lava = LocalLava::start();
    let target = lab::harness::opts::LavaTarget {
        server: lava.url.clone(),
        user: LAVA_USER.into(),
        token: lava.token.clone(),
        artifact_url: None,
    };
    let base = RunOpts { tcg: lab::harness::qemu::Tcg::Icount, lava: Some(target), ..opts("bench") };
    let out = tempfile::tempdir().unwrap();
    let r = lab::measure::reproduce::run_only(Profile::Quick, &base, out.path(), &["002".to_string()], 1).unwrap();
    let runs: Vec<&Outcome> = r.outcomes().collect();
    assert_eq!(runs.len(), 1, "one boot for seed 002");
    let o = runs[0];
    assert!(o.ok(), "{}", summary(o));
    let job = std::fs::read_to_string(o.dir.join("lava-job.txt")).expect("the boot was a LAVA job");
    assert!(job.contains("/scheduler/job/") && job.contains("Complete"), "{job}");
    // The seed's table has the lab's numbers, read from the job's console.
    assert!(!r.seed002.rows.is_empty(), "{}", r.text);
    assert!(r.seed002.rows.values().all(|row| !row.per_mode.is_empty()), "{}", r.text);
}

/// The files of docs/src/guide/own-client.md (its recipe runs in tests/tests/doc_blocks.rs).
fn own_client_recipe() -> Vec<(String, String)> {
    let page = std::fs::read_to_string(paths::repo().join(OWN_CLIENT_PAGE)).unwrap();
    lab::cli::doc_blocks::page_files(&page)
}

const OWN_CLIENT_PAGE: &str = "docs/src/guide/own-client.md";

/// The page's recipe runs in test-slow (doc_blocks.rs); this fast one keeps the page parseable
/// (a moved page or a renamed file fails here, not only under --ignored).
#[test]
fn own_client_recipe_has_its_files() {
    let names: Vec<String> = own_client_recipe().into_iter().map(|(n, _)| n).collect();
    for want in [
        "hello-binder/Cargo.toml",
        "hello-binder/aidl/hello/IHello.aidl",
        "hello-binder/build.rs",
        "hello-binder/src/lib.rs",
        "hello-binder/src/bin/hello-server.rs",
        "hello-binder/src/bin/hello-client.rs",
        "hello.toml",
    ] {
        assert!(names.iter().any(|n| n == want), "{OWN_CLIENT_PAGE} lost {want}: {names:?}");
    }
}

/// The `thirdparty` plan: rsbinder's rsb_hub (built from crates.io by the plan's `crates`) as
/// the context manager and libgbinder's tools (Debian's, by its `debs`) as clients, through
/// each driver: the Rust one (perf, debug) and the C one (cbinder).
#[test]
#[ignore = "cross-builds rsbinder-tools from crates.io (minutes, once) and boots three kernels: cargo test -p lab-tests --test devloop -- --ignored thirdparty"]
fn thirdparty_stacks_talk_through_each_driver() {
    for flavor in ["perf", "debug", "cbinder"] {
        let o = RunOpts { flavor: flavor.into(), ..opts("thirdparty") };
        let out = run_and_report(&o).unwrap();
        assert_ok(&out);
        for step in ["setup", "rsb_service-list", "binder-list", "binder-ping", "binder-call"] {
            let ended_ok = out
                .events
                .iter()
                .any(|e| matches!(e, labproto::Event::StepEnd { step: s, exit_code: Some(0), .. } if s == step));
            assert!(ended_ok, "{flavor}: {step} did not exit 0:\n{}", summary(&out));
        }
        assert!(out.step_output["binder-list"].iter().any(|l| l == "manager"), "{flavor}: {:?}", out.step_output);
    }
}
