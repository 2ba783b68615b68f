//! The developer's inner loop on the real kernel: `lab run -- CMD` and its exit codes,
//! `--collect` (result port and, under icount, the console), `--repeat`/`--until-fail` in one
//! boot, `lab conformance --case --repeat`, `--smp`/`--memory`, and results.ktap read by the
//! kernel's own kunit.py.

use lab::harness::adhoc;
use lab::harness::opts::{load_plan, RunOpts};
use lab::harness::outcome::Exit;
use lab::harness::outcome::Outcome;
use lab::harness::qemu::Tcg;
use lab::report::{self, summary::summary};
use lab_tests::assert_ok;
use labproto::{Event, Status};

/// `lab ARGS` as a user runs it, its output.
fn lab(args: &[&str]) -> std::process::Output {
    lab_tests::lab().args(args).output().expect("lab runs")
}

fn step_starts(o: &Outcome) -> Vec<String> {
    o.events
        .iter()
        .filter_map(|e| match e {
            Event::StepStart { step } => Some(step.clone()),
            _ => None,
        })
        .collect()
}

fn command(argv: &[&str], opts: &RunOpts) -> Outcome {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    report::run_plan_and_report(&adhoc::command_plan(&argv, 60), opts).unwrap()
}

#[test]
fn guest_exit_code_and_output_reach_the_host() {
    let out = lab(&["run", "--", "/bin/sh", "-c", "echo from-the-guest; exit 7"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.lines().any(|l| l == "from-the-guest"), "{stdout}");
    // What `cargo make run-qemu` shows above its own "exit code: 105" (docs/src/guide/inner-loop.md).
    assert!(stderr.contains("lab: exit code 7; reproduce:"), "{stderr}");
    // A ';' would be split by cargo-make: the reproducer goes through lab.sh.
    assert!(stderr.contains("reproduce: ./lab.sh run -- /bin/sh -c 'echo from-the-guest; exit 7'"), "{stderr}");
    let ok = lab(&["run", "--", "true"]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let missing = lab(&["run", "--", "/no/such/program"]);
    assert_eq!(missing.status.code(), Some(adhoc::NOT_STARTED));
}

#[test]
fn guest_panic_gets_the_panic_code() {
    let out = lab(&["run", "--", "/bin/sh", "-c", "echo c > /proc/sysrq-trigger"]);
    assert_eq!(out.status.code(), Some(Exit::KernelFault.code()), "{}", String::from_utf8_lossy(&out.stderr));
    let hang = lab(&["run", "--timeout", "3", "--", "/bin/sleep", "100"]);
    assert_eq!(hang.status.code(), Some(Exit::Timeout.code()), "{}", String::from_utf8_lossy(&hang.stderr));
}

/// Writes files of known content in the guest and checks what lands in the run directory,
/// on both channels: the virtio-serial result port and (icount) the console.
#[test]
fn collect_brings_files_back_on_both_channels() {
    // 200 kB of text: several chunks; plus a procfs-like file of stat size 0.
    let script = "mkdir -p /tmp/out/sub && seq 1 40000 > /tmp/out/seq && echo hi > /tmp/out/sub/a";
    for tcg in [Tcg::Single, Tcg::Icount] {
        let opts = RunOpts {
            tcg,
            collect: vec!["/tmp/out".into(), "/dev/binderfs/binder_logs/stats".into()],
            ..Default::default()
        };
        let o = command(&["/bin/sh", "-c", script], &opts);
        assert!(o.ok(), "{tcg:?}:\n{}", summary(&o));
        let root = o.dir.join("collect/sh");
        let expect: String = (1..=40000).map(|i| format!("{i}\n")).collect();
        assert_eq!(std::fs::read_to_string(root.join("tmp/out/seq")).unwrap(), expect, "{tcg:?}");
        assert_eq!(std::fs::read_to_string(root.join("tmp/out/sub/a")).unwrap(), "hi\n");
        let stats = std::fs::read_to_string(root.join("dev/binderfs/binder_logs/stats")).unwrap();
        assert!(stats.contains("binder stats"), "{stats}");
    }
    // A path that is not there fails the run and says why.
    let opts = RunOpts { collect: vec!["/tmp/nope".into()], ..Default::default() };
    let o = command(&["true"], &opts);
    let p = o.problems().join("\n");
    assert!(p.contains("collect /tmp/nope (step true): cannot stat"), "{p}");
    assert_eq!(adhoc::exit_code(&o), Exit::TestFailure.code());
}

#[test]
fn repeat_and_until_fail_stay_in_one_boot() {
    // Fails on its third run: until-fail stops there.
    let script = "echo x >> /tmp/n; [ $(wc -l < /tmp/n) -lt 3 ]";
    let o = command(&["/bin/sh", "-c", script], &RunOpts { repeat: 10, until_fail: true, ..Default::default() });
    assert_eq!(step_starts(&o), ["sh@1", "sh@2", "sh@3"], "{}", summary(&o));
    assert_eq!(adhoc::exit_code(&o), 1);
    let hellos = o.events.iter().filter(|e| matches!(e, Event::Hello { .. })).count();
    assert_eq!(hellos, 1, "one boot");
}

#[test]
fn conformance_case_repeats_20_times_in_one_boot() {
    let plan = adhoc::select_cases(&load_plan("conformance").unwrap(), &["tc_deferral".into()], &[]).unwrap();
    let o = report::run_plan_and_report(&plan, &RunOpts { repeat: 20, ..Default::default() }).unwrap();
    assert_ok(&o);
    let runs: Vec<&str> = o.results().filter(|r| r.1 == "tc_deferral" && r.2 == Status::Pass).map(|r| r.0).collect();
    assert_eq!(runs.len(), 20, "{runs:?}");
    assert_eq!(runs[19], "conformance@20");
    assert_eq!(o.results().count(), 20, "only the selected case ran");
    assert_eq!(o.events.iter().filter(|e| matches!(e, Event::Hello { .. })).count(), 1);
}

#[test]
fn smp_and_memory_overrides_boot_a_smaller_soc() {
    let opts = RunOpts { smp: Some(5), memory: Some("1G".into()), ..Default::default() };
    let o = report::run_and_report(&opts).unwrap();
    assert_ok(&o);
    let cpus = o.data("topology").unwrap()["cpus"].as_array().unwrap().clone();
    let caps: Vec<u64> = cpus.iter().map(|c| c["capacity"].as_u64().unwrap()).collect();
    assert_eq!(caps, [360, 360, 360, 360, 1024]);
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(o.dir.join("manifest.json")).unwrap()).unwrap();
    assert!(m["reproducer"].as_str().unwrap().contains("-m 1G"), "{}", m["reproducer"]);
}

#[test]
fn pin_without_threads_is_refused_before_booting() {
    let out = lab(&["run", "--pin", "--tcg", "icount"]);
    assert_eq!(out.status.code(), Some(Exit::HarnessError.code()));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to pin"));
}

/// `--filter` reaches KUnit (debug kernel): only the matching suite's cases run.
#[test]
fn kunit_filter_selects_suites() {
    let opts = RunOpts {
        flavor: "debug".into(),
        plan: "kunit".into(),
        append: vec!["kunit.filter_glob=rust_binder_ctabs*".into()],
        ..Default::default()
    };
    let o = report::run_and_report(&opts).unwrap();
    let cases: Vec<&str> = o.results().map(|r| r.1).collect();
    assert!(!cases.is_empty(), "{}", summary(&o));
    assert!(cases.iter().all(|c| c.starts_with("rust_binder_ctabs")), "{cases:?}");
}

#[test]
fn kconfig_add_of_what_the_flavor_sets_is_the_flavor_kernel() {
    // base.config has USER_NS: one line says so, and the perf kernel is used, not rebuilt.
    let perf = lab::kbuild::kernel::build("perf").unwrap();
    let out = lab(&["kernel", "--kconfig-add", "CONFIG_USER_NS=y"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("CONFIG_USER_NS=y already set so by the perf flavor: using the perf kernel"), "{stderr}");
    assert!(stderr.contains(&format!("kernel perf is up to date: {}", perf.dir.display())), "{stderr}");
}
