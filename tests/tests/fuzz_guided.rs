//! `lab fuzz --guided` and `lab fuzz --replay`: a KCOV flavor is required (named in the
//! error); on the KCOV kernels (ignored until their first build has been measured, see
//! docs/src/results/guided-fuzzing.md) a short guided run on the fuzz flavor reports the
//! binder driver's coverage over time and the functions it never reached, and a guided run
//! on fuzz-planted finds the planted bug, whose saved sequence replays its splat there and
//! nothing on debug (a replay needs no KCOV). The fuzz kernel is a cold build the first time;
//! fuzz-planted starts from a copy of its O= directory. The planted-bug test is ignored for
//! its time: the one guided run that found the bug took 786 s of fuzzing, and random found it
//! too (the 2026-12-02 tables of docs/src/results/guided-fuzzing.md). On fuzz-deep (a bug
//! behind three death-notification cycles) a constructed path and the guided loop's own find,
//! both in tests/data/fuzz-deep/, replay its warning there and nothing on debug (2026-12-06).

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where the planted bug's warning points.
const PLANTED_AT: &str = "drivers/android/binder/freeze.rs";

/// Runs `lab fuzz ARGS`; whether it passed, its stdout, and its run directory.
fn lab_fuzz(args: &[&str]) -> (bool, String, PathBuf) {
    let out = lab_tests::lab().arg("fuzz").args(args).output().expect("lab runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let dir = stdout
        .lines()
        .find_map(|l| Some(l.split_once("reports: ")?.1.split_once("/junit.xml")?.0.to_string()))
        .unwrap_or_else(|| {
            panic!("no run directory in the output:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
        });
    (out.status.success(), stdout, PathBuf::from(dir))
}

/// The results of one case in the run's results.jsonl.
fn result(dir: &Path, case: &str) -> Value {
    let text = std::fs::read_to_string(dir.join("results.jsonl")).expect("results.jsonl");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["case"] == case)
        .unwrap_or_else(|| panic!("no {case} result in {}", dir.display()))
}

/// `lab fuzz ARGS` that must fail before any boot; its stderr.
fn refused(args: &[&str]) -> String {
    let out = lab_tests::lab().arg("fuzz").args(args).output().expect("lab runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    err
}

#[test]
fn bad_input_is_named_before_any_boot() {
    let err = refused(&["--guided", "--flavor", "debug"]);
    assert!(err.contains("debug has no CONFIG_KCOV") && err.contains("--flavor fuzz"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("repro-9.json");
    let err = refused(&["--replay", missing.to_str().unwrap()]);
    assert!(err.contains("repro-9.json"), "{err}");
    std::fs::write(&missing, r#"{"seq": ["0x1", "zz"], "threads": 2}"#).unwrap();
    let err = refused(&["--replay", missing.to_str().unwrap()]);
    assert!(err.contains("hex seeds"), "{err}");
    let err = refused(&["--guided", "--unguided"]);
    assert!(err.contains("--unguided"), "{err}");
}

#[test]
#[ignore = "needs the fuzz kernel (a cold build); not yet run"]
fn guided_run_reports_driver_coverage() {
    let (ok, out, dir) =
        lab_fuzz(&["--guided", "--append", "binder_fuzz.ops=300", "--append", "binder_fuzz.seconds=120"]);
    assert!(ok, "{out}");
    let cov: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("collect/fuzz/tmp/binder-fuzz/coverage.json")).expect("coverage.json"),
    )
    .unwrap();
    assert_eq!(cov["mode"], "guided", "{cov}");
    let n = |k: &str| cov[k].as_u64().unwrap_or_else(|| panic!("{k} in {cov}"));
    assert!(n("edges") > 100 && n("pcs") > 100, "{cov}");
    // Some of the driver's functions, not all: the set is the driver's, not the kernel's.
    assert!(n("functions") > 20 && n("functions") < n("functions_total"), "{cov}");
    let never = cov["never_reached"].as_array().unwrap();
    assert_eq!(never.len() as u64, n("functions_never"));
    assert!(never
        .iter()
        .all(|f| f.as_str().unwrap().contains("rust_binder") || f.as_str().unwrap().contains("binder")));
    assert!(cov["timeline"].as_array().unwrap().len() >= 2, "{cov}");
}

// Ignored: in 600 s of guest time (2,200-2,700 sequences) with three seeds neither the guided
// loop nor the random one reached the planted warning; with seed 0xc33 and 1200 s both did,
// guided after 2925 sequences (786 s at load 16), random after 3100, from the same op seed
// (docs/src/results/guided-fuzzing.md, 2026-12-02 evening). Since then each mode draws its
// own op-seed stream from (seed, mode), so those figures are not this seed's any more. Run it with
//   cargo test -p lab-tests --test fuzz_guided -- --ignored
#[test]
#[ignore = "about 15 min of fuzzing (found after 786 s, seed 0xc33) plus the fuzz-planted build (2479 s measured)"]
fn guided_finds_the_planted_bug_and_its_replay_brings_the_splat_back_only_there() {
    let (ok, out, dir) = lab_fuzz(&[
        "--guided",
        "--flavor",
        "fuzz-planted",
        "--append",
        "binder_fuzz.seed=0xc33",
        "--append",
        "binder_fuzz.ops=100000",
        "--append",
        "binder_fuzz.seconds=1200",
    ]);
    assert!(!ok, "the guided run did not find the planted bug:\n{out}");
    let fuzz = result(&dir, "fuzz");
    assert!(fuzz["message"].as_str().unwrap().contains(PLANTED_AT), "{fuzz}");
    let repro = dir.join("collect/fuzz/tmp/binder-fuzz/repro-1.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&repro).expect("repro-1.json")).unwrap();
    assert_eq!(saved["flavor"], "fuzz-planted", "{saved}");
    assert_eq!(saved["reproduced"], true, "{saved}");
    // One command replays it: the splat again.
    let (ok, out, dir) = lab_fuzz(&["--replay", repro.to_str().unwrap()]);
    assert!(!ok, "the saved sequence passed:\n{out}");
    let r = result(&dir, "replay");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(r["message"].as_str().unwrap().contains(PLANTED_AT), "{r}");
    assert!(out.contains("reproduce: cargo make fuzz") && out.contains("--replay"), "{out}");
    // The same sequence on the driver without the planted patch (the debug flavor: a replay
    // needs no KCOV): clean.
    let (ok, out, _) = lab_fuzz(&["--replay", repro.to_str().unwrap(), "--flavor", "debug"]);
    assert!(ok, "{out}");
}

/// Three op seeds that take the planted path (a request answered at once, a clear and its
/// re-request in one write, a clear), found by replaying the ops' draws on the host
/// (`print_planted_path` in binder-fuzz's worker.rs), not by the fuzzer.
const PLANTED_PATH: &str = r#"{"seq": ["0x2cc", "0x79e", "0x94"], "threads": 2, "flavor": "fuzz-planted"}"#;

// Measured 2026-12-02 with LAB_KERNEL on the cached fuzz-planted build: the replay fails with
// the planted warning (freeze.rs:101), and passes on debug, each in one boot of about a
// minute on the loaded host; without LAB_KERNEL the fuzz-planted kernel of the current series
// is first a cold KCOV build (2479 s measured).
#[test]
#[ignore = "needs the fuzz-planted kernel: a cold KCOV+KASAN build (2479 s measured), then two ~1 min boots"]
fn the_planted_path_replays_the_warning_on_the_planted_driver_only() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("planted-path.json");
    std::fs::write(&file, PLANTED_PATH).unwrap();
    let (ok, out, dir) = lab_fuzz(&["--replay", file.to_str().unwrap()]);
    assert!(!ok, "the planted path passed on fuzz-planted:\n{out}");
    let r = result(&dir, "replay");
    assert!(r["message"].as_str().unwrap().contains(PLANTED_AT), "{r}");
    let (ok, out, _) = lab_fuzz(&["--replay", file.to_str().unwrap(), "--flavor", "debug"]);
    assert!(ok, "{out}");
}

/// Where fuzz-deep's planted warning points (fuzz-deep/0001: `planted_third_cycle`).
const DEEP_AT: &str = "drivers/android/binder/process.rs";

/// Replays a saved sequence of `tests/data/fuzz-deep/` on fuzz-deep (the planted warning must
/// come back) and on debug (the driver without the planted patch: clean).
fn deep_replay_splats_only_on_fuzz_deep(name: &str) {
    let file = Path::new("tests/data/fuzz-deep").join(name).display().to_string();
    let (ok, out, dir) = lab_fuzz(&["--replay", &file, "--flavor", "fuzz-deep", "--policy", "mainline"]);
    assert!(!ok, "{name} passed on fuzz-deep:\n{out}");
    let r = result(&dir, "replay");
    assert!(r["message"].as_str().unwrap().contains(DEEP_AT), "{r}");
    let (ok, out, _) = lab_fuzz(&["--replay", &file, "--flavor", "debug"]);
    assert!(ok, "{out}");
}

// Six op seeds that take fuzz-deep's planted path (a death request and its clear, three times,
// on the second fd's ref), found by replaying the ops' draws on the host (`print_deep_path` in
// binder-fuzz's worker.rs), not by the fuzzer. Measured 2026-12-06: docs/src/results/guided-fuzzing.md.
#[test]
#[ignore = "needs the fuzz-deep kernel (a KCOV+KASAN build, 12-45 min), then two ~1 min boots"]
fn the_deep_path_replays_the_warning_on_fuzz_deep_only() {
    deep_replay_splats_only_on_fuzz_deep("deep-path.json");
}

// The guided loop's own find on fuzz-deep (seed 0x1a7, after 839 sequences), minimised to one op
// seed three times, which together complete three death-notification cycles on one ref.
// Measured 2026-12-06: docs/src/results/guided-fuzzing.md.
#[test]
#[ignore = "needs the fuzz-deep kernel (a KCOV+KASAN build, 12-45 min), then two ~1 min boots"]
fn the_guided_find_on_fuzz_deep_replays_its_warning_there_only() {
    deep_replay_splats_only_on_fuzz_deep("found-0x1a7.json");
}
