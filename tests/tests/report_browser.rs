//! The nightly's HTML report in a real browser (Debian's headless Chromium): rendered from
//! recorded benchmark samples with the lab's own plots, opened, checked for console errors and
//! missing plots, and screenshotted into the run directory. Then a plot is removed, and the
//! same check must fail naming it.

use lab::numbers::{plots, samples};
use lab::report::browser;
use lab::report::nightly::{html_report, Night, Page};
use std::collections::BTreeMap;
use std::path::Path;

/// A nightly run directory: the seed-000 run's four plots from recorded samples, and the
/// report that inlines them.
fn night_dir(out: &Path) -> std::path::PathBuf {
    let run = out.join("reproduce/seed000");
    std::fs::create_dir_all(&run).unwrap();
    let mut s: samples::Samples = BTreeMap::new();
    let m = |v: &[f64]| v.to_vec();
    s.insert(
        "throughput.iterations_per_sec".into(),
        [(0, m(&[3379.0, 3390.0, 3402.0])), (1, m(&[3501.0, 3512.0, 3490.0]))].into(),
    );
    for (class, shares) in [("other", [0.0, 81.6, 18.4]), ("fifo", [0.0, 78.0, 22.0])] {
        for (tier, pct) in ["same_core", "same_cluster", "cross_cluster"].iter().zip(shares) {
            s.insert(format!("tiers.{class}.{tier}.pct"), [(0, m(&[pct, pct + 0.5, pct - 0.5]))].into());
        }
    }
    let latency: BTreeMap<u32, Vec<f64>> = [(0, (1..200).map(|i| 0.02 + i as f64 * 1e-4).collect())].into();
    plots::write_all(&run, &samples::summarise(&s), &latency).unwrap();
    let night = Night { builds: &[], stages: &[], out, lab_commit: "fixture" };
    let page = Page {
        header: "quick nightly, rendered from recorded samples".into(),
        failures: &[],
        gate: None,
        reproduce: Some(("## Seeds\n\nThe seed tables would be here.\n", out.to_path_buf(), Some(run.clone()))),
        reproduce_error: None,
        placement: None,
    };
    let html = out.join("report.html");
    std::fs::write(&html, html_report(&night, &page)).unwrap();
    html
}

#[test]
fn nightly_report_renders_in_chromium_and_fails_without_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let html = night_dir(dir.path());
    let seen = browser::open(&html).unwrap();
    assert!(seen.problems.is_empty(), "{:#?}", seen.problems);
    assert!(seen.svgs >= 4, "the four seed-000 plots, got {} svg elements", seen.svgs);
    let png = std::fs::read(&seen.screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "screenshot {} bytes", png.len());
    assert_eq!(seen.screenshot, dir.path().join("report.png"));

    // A plot file gone: the report names it, and the browser check says so.
    std::fs::remove_file(dir.path().join("reproduce/seed000/tiers-fifo.svg")).unwrap();
    let html = {
        let night = Night { builds: &[], stages: &[], out: dir.path(), lab_commit: "fixture" };
        let page = Page {
            header: String::new(),
            failures: &[],
            gate: None,
            reproduce: Some(("", dir.path().to_path_buf(), Some(dir.path().join("reproduce/seed000")))),
            reproduce_error: None,
            placement: None,
        };
        std::fs::write(&html, html_report(&night, &page)).unwrap();
        html
    };
    let seen = browser::open(&html).unwrap();
    assert_eq!(seen.problems.len(), 1, "{:#?}", seen.problems);
    assert!(
        seen.problems[0].starts_with("missing plot: ") && seen.problems[0].contains("tiers-fifo.svg"),
        "{:#?}",
        seen.problems
    );

    // A script error on the page is a console message: also a failure.
    let text = std::fs::read_to_string(&html).unwrap().replace("</body>", "<script>nosuch()</script></body>");
    std::fs::write(&html, text).unwrap();
    let seen = browser::open(&html).unwrap();
    assert!(
        seen.problems.iter().any(|p| p.starts_with("console: ") && p.contains("nosuch is not defined")),
        "{:#?}",
        seen.problems
    );
}

/// Tables in a Markdown text: their rule lines (`| --- | --- |`).
fn markdown_tables(md: &str) -> usize {
    md.lines()
        .filter(|l| l.trim_start().starts_with('|') && l.contains("---") && l.chars().all(|c| "|-: ".contains(c)))
        .count()
}

/// `lab ab`'s report (ab.html with its plots), rendered from recorded samples of a known C
/// driver slowdown (docs/src/results/ab.md's first boot pair), in Chromium: no console
/// message, no missing plot, every plot drawn, every table of ab.md a `<table>` and no
/// Markdown shown as typed; then a script error must fail the check.
#[test]
fn ab_report_renders_in_chromium() {
    use lab::measure::ab::{self, Report, Size};
    use lab::measure::bench::Profile;
    let dir = tempfile::tempdir().unwrap();
    // Five boots per arm, one sample each (a boot's median), as `ab` records them.
    let mut s: samples::BootSamples = BTreeMap::new();
    let arms = |b: [f64; 5], t: [f64; 5]| -> BTreeMap<u32, Vec<Vec<f64>>> {
        let boots = |v: [f64; 5]| v.iter().map(|x| vec![*x]).collect();
        [(0, boots(b)), (1, boots(t))].into()
    };
    s.insert(
        "throughput.iterations_per_sec".into(),
        arms([276125.0, 275010.0, 277300.0, 276480.0, 275620.0], [154724.0, 153980.0, 155410.0, 154200.0, 155020.0]),
    );
    s.insert(
        "throughput-w2.iterations_per_sec".into(),
        arms([121643.0, 120900.0, 122310.0, 121200.0, 121950.0], [45188.0, 45020.0, 45390.0, 45110.0, 45260.0]),
    );
    s.insert(
        "tiers.other.cross_cluster.avg_ms".into(),
        arms([0.031, 0.030, 0.032, 0.031, 0.030], [0.052, 0.051, 0.053, 0.052, 0.051]),
    );
    s.insert(
        "sendvec.0004.time_ns".into(),
        arms([12467.0, 12410.0, 12520.0, 12440.0, 12490.0], [32534.0, 32480.0, 32600.0, 32510.0, 32570.0]),
    );
    s.insert(
        "sendvec.4096.time_ns".into(),
        arms([14120.0, 14080.0, 14190.0, 14100.0, 14150.0], [34310.0, 34250.0, 34400.0, 34290.0, 34350.0]),
    );
    let metrics = samples::summarise_boots(&s);
    let rows = ab::perf_rows(&s, 5.0, &BTreeMap::new());
    let r = Report {
        base: "cbinder".into(),
        treatment: "cbinder+ab-0123456789ab".into(),
        patches: vec!["tests/data/ab/c-delay.patch".into()],
        profile: Profile::Quick,
        size: Size::of(Profile::Quick),
        timing: "recorded samples".into(),
        policy: "phone".into(),
        seed_base: 1,
        gates_only: false,
        builds: vec![],
        gates: vec![],
        boots: vec![],
        rows,
        perf_problems: vec![],
        functions: vec![],
        threshold: 5.0,
        verdict: ab::AbVerdict::Failed,
        reasons: vec!["throughput.iterations_per_sec: -44.0%".into()],
        pairing: None,
        trust: vec![],
        wall_s: 0.0,
        profile_text: String::new(),
        metrics,
        userspace: Default::default(),
    };
    let md = ab::write(&r, "cargo make ab --base cbinder --patch tests/data/ab/c-delay.patch", dir.path()).unwrap();
    assert!(md.contains("worse"), "{md}");
    let html = dir.path().join("ab.html");
    let seen = browser::open(&html).unwrap();
    assert!(seen.problems.is_empty(), "{:#?}", seen.problems);
    assert!(markdown_tables(&md) >= 1, "ab.md has its tables: {md}");
    assert_eq!(seen.tables, markdown_tables(&md), "every table of ab.md is a <table> in ab.html:\n{md}");
    assert!(seen.svgs >= 4, "three bar plots and the sendvec plot, got {} svg elements", seen.svgs);
    assert_eq!(seen.screenshot, dir.path().join("ab.png"));
    if std::env::var_os("LAB_KEEP_REPORT").is_some() {
        // For the results pages: the rendered report and its screenshot, kept.
        eprintln!("kept {}", dir.keep().display());
        return;
    }

    let text = std::fs::read_to_string(&html).unwrap().replace("</body>", "<script>nosuch()</script></body>");
    std::fs::write(&html, text).unwrap();
    let seen = browser::open(&html).unwrap();
    assert!(seen.problems.iter().any(|p| p.contains("nosuch is not defined")), "{:#?}", seen.problems);
}
