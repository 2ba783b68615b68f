//! A night's results for people and for KernelCI: the HTML report and the KCIDB report.
//! `measure::nightly` runs the night and fills these in; the regression gate's findings arrive
//! as plain rows and figures.

use crate::harness::outcome::Outcome;
use crate::kbuild::pin::KernelPin;
use crate::kbuild::tree::Series;
use crate::report::{html, kcidb, test_cases};
use crate::support::fs::sha256_file;
use crate::support::stamp::{rfc3339_now, utc_stamp};
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One kernel build.
#[derive(Clone, Debug, Serialize)]
pub struct BuildRec {
    pub flavor: String,
    pub key: Option<String>,
    pub release: Option<String>,
    pub wall_s: f64,
    pub error: Option<String>,
}

/// One guest run of the nightly, and where its files were copied.
pub struct Stage {
    pub name: String,
    pub kind: &'static str,
    pub flavor: String,
    pub started: String,
    pub result: std::result::Result<Outcome, String>,
    pub artifacts: PathBuf,
}

impl Stage {
    pub fn problems(&self) -> Vec<String> {
        match &self.result {
            Ok(o) => o.problems(),
            Err(e) => vec![format!("did not run: {e}")],
        }
    }

    /// Passed, failed and skipped cases.
    pub fn case_counts(&self) -> (usize, usize, usize) {
        let Ok(o) = &self.result else { return (0, 0, 0) };
        let cases = test_cases(o);
        let c = |st| cases.iter().filter(|c| c.status == st).count();
        (c(labproto::Status::Pass), c(labproto::Status::Fail), c(labproto::Status::Skip))
    }
}

/// What every report of the night shows.
pub struct Night<'a> {
    pub builds: &'a [BuildRec],
    pub stages: &'a [Stage],
    /// The artifact directory (paths are shown relative to it).
    pub out: &'a Path,
    pub lab_commit: &'a str,
}

/// `p` relative to `base`.
/// A KCIDB build's `misc`: the release, the fragments merged and the series applied.
fn flavor_misc(name: &str, release: &Option<String>) -> serde_json::Value {
    let f = crate::kbuild::flavor::load(name).ok();
    serde_json::json!({
        "kernel_release": release,
        "fragments": f.as_ref().map(|f| f.fragment_files.clone()),
        "series": f.map(|f| f.series),
    })
}

pub fn rel(p: &Path, base: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

/// A benchmark figure, reported to KCIDB as a `DONE` test with a number.
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub ci95: [Option<f64>; 2],
    pub unit: &'static str,
    /// "higher" or "lower".
    pub better: String,
    /// The kernel it was measured on.
    pub flavor: &'static str,
}

/// Where the tests ran, for KCIDB's environment.
pub struct Env {
    pub qemu: String,
    pub board: String,
    pub tcg: String,
    pub benchmark_tcg: String,
    pub compiler: String,
}

/// The KCIDB report: the checkout (pinned source plus the series), a build per flavor, a
/// test per case, the figures as numbers.
pub fn kcidb_report(
    n: &Night,
    kernel: &KernelPin,
    series: &Series,
    env: &Env,
    figures: &[Figure],
) -> Result<kcidb::Report> {
    let mut r = kcidb::Report::default();
    let checkout_id = checkout(&mut r, n, kernel, series)?;
    let build_id = |flavor: &str| {
        let key = n.builds.iter().find(|b| b.flavor == flavor).and_then(|b| b.key.clone()).unwrap_or("failed".into());
        kcidb::id(&format!("{flavor}-{key}"))
    };
    for b in n.builds {
        r.builds.push(kcidb::Build {
            id: build_id(&b.flavor),
            checkout_id: checkout_id.clone(),
            origin: kcidb::ORIGIN.into(),
            architecture: "arm64".into(),
            compiler: env.compiler.clone(),
            config_name: b.flavor.clone(),
            status: if b.error.is_none() { "PASS" } else { "FAIL" },
            duration: Some(b.wall_s),
            log_excerpt: b.error.as_deref().map(kcidb::excerpt),
            misc: flavor_misc(&b.flavor, &b.release),
        });
    }
    let environment = kcidb::Environment {
        comment: format!(
            "{} -M virt, board {}, TCG {} (benchmarks: {})",
            env.qemu, env.board, env.tcg, env.benchmark_tcg
        ),
        misc: serde_json::json!({"board": env.board, "tcg": env.tcg, "benchmark_tcg": env.benchmark_tcg}),
    };
    let run_id = utc_stamp();
    for s in n.stages {
        stage_tests(&mut r, n, s, &run_id, &build_id(&s.flavor), &environment);
    }
    let now = rfc3339_now();
    for (i, f) in figures.iter().enumerate() {
        r.tests.push(kcidb::Test {
            id: kcidb::id(&format!("{run_id}.bench.{i}")),
            build_id: build_id(f.flavor),
            origin: kcidb::ORIGIN.into(),
            path: kcidb::path(&["bench"].into_iter().chain(f.name.split('.')).collect::<Vec<_>>()),
            status: "DONE",
            start_time: now.clone(),
            number: Some(kcidb::Number { value: f.value, unit: f.unit.into() }),
            environment: environment.clone(),
            misc: serde_json::json!({"ci95": f.ci95, "better": f.better}),
            ..Default::default()
        });
    }
    Ok(r)
}

/// Adds the checkout; returns its id.
fn checkout(r: &mut kcidb::Report, n: &Night, kernel: &KernelPin, series: &Series) -> Result<String> {
    let shas: Vec<String> = series.patches.iter().map(|p| sha256_file(&series.dir.join(p))).collect::<Result<_>>()?;
    let patchset = kcidb::patchset_hash(&shas);
    let id = kcidb::id(&format!(
        "{}-{}-{}",
        kernel.version,
        patchset.as_deref().map(|h| &h[..12]).unwrap_or("none"),
        n.lab_commit
    ));
    r.checkouts.push(kcidb::Checkout {
        id: id.clone(),
        origin: kcidb::ORIGIN.into(),
        tree_name: "debian-linux-source-7.2".into(),
        comment: format!("{} {} with rust-driver/ ({} patches)", kernel.package, kernel.version, series.patches.len()),
        patchset_hash: patchset,
        start_time: rfc3339_now(),
        valid: true,
        misc: serde_json::json!({"lab_commit": n.lab_commit, "source_sha256": kernel.sha256, "patches": series.patches}),
    });
    Ok(id)
}

/// A test per case of a stage, or one `MISS` test for a stage that did not run.
fn stage_tests(r: &mut kcidb::Report, n: &Night, s: &Stage, run_id: &str, build_id: &str, env: &kcidb::Environment) {
    let Ok(o) = &s.result else {
        r.tests.push(kcidb::Test {
            id: kcidb::id(&format!("{run_id}.{}", s.name)),
            build_id: build_id.into(),
            origin: kcidb::ORIGIN.into(),
            path: kcidb::path(&[s.kind]),
            status: "MISS",
            start_time: s.started.clone(),
            log_excerpt: Some(kcidb::excerpt(&s.problems().join("\n"))),
            environment: env.clone(),
            ..Default::default()
        });
        return;
    };
    for (i, c) in test_cases(o).iter().enumerate() {
        let case = c.name.rsplit('/').next().unwrap_or(&c.name);
        r.tests.push(kcidb::Test {
            id: kcidb::id(&format!("{run_id}.{}.{i}", s.name)),
            build_id: build_id.into(),
            origin: kcidb::ORIGIN.into(),
            path: kcidb::path(&[s.kind, &c.suite, case]),
            status: kcidb::status(c.status),
            start_time: s.started.clone(),
            duration: Some(c.time_s),
            log_excerpt: c.detail.as_deref().map(kcidb::excerpt),
            environment: env.clone(),
            misc: serde_json::json!({"artifacts": rel(&s.artifacts, n.out)}),
            ..Default::default()
        });
    }
}

/// The parts of the HTML report that come from the gate and the seed experiments.
pub struct Page<'a> {
    /// The line under the title (profile, time, TCG modes, threshold...).
    pub header: String,
    pub failures: &'a [String],
    /// Gated metrics within the threshold, and a row per other one.
    pub gate: Option<(usize, Vec<Vec<String>>)>,
    /// The reproduction's markdown, its directory, and seed 000's run directory (plots).
    pub reproduce: Option<(&'a str, PathBuf, Option<PathBuf>)>,
    pub reproduce_error: Option<&'a str>,
    /// Where woken server threads ran per CTABS mode, when seed 000's run was traced.
    pub placement: Option<String>,
}

/// The self-contained HTML report.
pub fn html_report(n: &Night, page: &Page) -> String {
    let mut p = html::Page::new();
    let verdict = if page.failures.is_empty() { "PASS" } else { "FAIL" };
    p.h(1, &format!("binder-lab nightly: {verdict}"));
    p.p(&page.header);
    if !page.failures.is_empty() {
        p.h(2, "Failures");
        p.pre(&page.failures.join("\n"));
    }
    kernels_and_stages(&mut p, n);
    if let Some((ok, rows)) = &page.gate {
        p.h(2, "Against the baseline");
        p.p(&format!("{ok} gated metrics within the threshold; the others:"));
        p.table(&["metric", "baseline", "now", "change", "verdict"], rows);
    }
    if let Some((text, dir, seed000)) = &page.reproduce {
        p.markdown(text, dir);
        if let Some(run) = seed000 {
            p.h(2, "Seed 000 plots");
            for svg in ["throughput.svg", "latency-cdf.svg", "tiers-other.svg", "tiers-fifo.svg"] {
                p.svg(&run.join(svg));
            }
        }
    }
    if let Some(md) = &page.placement {
        p.markdown(md, n.out);
    }
    if let Some(e) = page.reproduce_error {
        p.h(2, "Reproduce failed");
        p.pre(e);
    }
    p.render("binder-lab nightly")
}

fn kernels_and_stages(p: &mut html::Page, n: &Night) {
    p.h(2, "Kernels");
    let rows: Vec<Vec<String>> = n
        .builds
        .iter()
        .map(|b| {
            vec![
                b.flavor.clone(),
                b.error.as_ref().map(|e| format!("FAIL: {e}")).unwrap_or("PASS".into()),
                b.release.clone().unwrap_or_default(),
                format!("{:.1} s", b.wall_s),
            ]
        })
        .collect();
    p.table(&["flavor", "build", "release", "wall"], &rows);
    p.h(2, "Test stages");
    let rows: Vec<Vec<String>> = n
        .stages
        .iter()
        .map(|s| {
            let (ok, failed, skipped) = s.case_counts();
            let probs = s.problems();
            let first = probs.first().and_then(|p| p.lines().next()).unwrap_or_default();
            vec![
                s.name.clone(),
                s.flavor.clone(),
                if probs.is_empty() { "PASS".into() } else { format!("FAIL: {first}") },
                format!("{ok} passed, {failed} failed, {skipped} skipped"),
                s.result.as_ref().map(|o| format!("{:.0} s", o.wall_s)).unwrap_or_default(),
                rel(&s.artifacts, n.out),
            ]
        })
        .collect();
    p.table(&["stage", "kernel", "verdict", "cases", "wall", "files"], &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_shows_the_placement_of_a_traced_bench() {
        let out = tempfile::tempdir().unwrap();
        let night = Night { builds: &[], stages: &[], out: out.path(), lab_commit: "abc" };
        let md = "## Where woken server threads ran (--trace)\n\n```\nthroughput   Baseline   21   0.0%\n```\n";
        let page = |placement: Option<String>| Page {
            header: String::new(),
            failures: &[],
            gate: None,
            reproduce: None,
            reproduce_error: None,
            placement,
        };
        let html = html_report(&night, &page(Some(md.into())));
        assert!(html.contains("Where woken server threads ran") && html.contains("throughput   Baseline"), "{html}");
        assert!(!html_report(&night, &page(None)).contains("Where woken"));
    }
}
