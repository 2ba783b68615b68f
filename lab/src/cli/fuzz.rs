//! `lab fuzz`: the random fuzzer (plan `fuzz`), or with `--guided`/`--unguided`/`--replay`
//! the coverage loop of binder-fuzz (plan `fuzz-guided`) on a KCOV kernel, given the binder
//! driver's text ranges from the flavor's System.map.

use crate::cli::args::RunArgs;
use crate::cli::run;
use crate::harness::outcome::Exit;
use crate::kbuild::{driver_text, flavor, kernel};
use crate::support::paths;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// The flavor `--guided`, `--unguided` and `--replay` boot unless `--flavor` names another.
pub const FLAVOR: &str = "fuzz";

#[derive(clap::Args, Debug, Default)]
pub struct FuzzArgs {
    /// Coverage-guided: KCOV per operation sequence inside the binder driver, a corpus of
    /// sequences that reach new edges, mutations of them (the fuzz flavor unless --flavor).
    #[arg(long, conflicts_with_all = ["unguided", "replay"])]
    pub guided: bool,
    /// The same loop, budget and coverage report without corpus feedback: the baseline
    /// --guided is measured against.
    #[arg(long, conflicts_with = "replay")]
    pub unguided: bool,
    /// Replay a saved sequence (repro-N.json or crash-N.json of a guided run's directory) on
    /// the flavor it was found on.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

/// A saved sequence: what the guest wrote (`repro-N.json`).
#[derive(serde::Deserialize)]
struct Saved {
    seq: Vec<String>,
    threads: u64,
    #[serde(default)]
    flavor: Option<String>,
}

pub fn command(args: &RunArgs, f: &FuzzArgs) -> Result<Exit> {
    if !f.guided && !f.unguided && f.replay.is_none() {
        return run::suite(args, "fuzz", &Default::default());
    }
    let mut opts = args.opts("fuzz-guided")?;
    let mut extra: Vec<String> = vec![];
    let saved = match &f.replay {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading --replay {}", p.display()))?;
            let s: Saved = serde_json::from_str(&text).with_context(|| {
                format!(
                    "--replay {}: not a saved sequence (repro-N.json or crash-N.json from a `lab fuzz --guided` run's \
                     collect/fuzz/tmp/binder-fuzz/)",
                    p.display()
                )
            })?;
            if s.seq.is_empty() || s.seq.iter().any(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).is_err()) {
                bail!("--replay {}: `seq` must be a non-empty list of hex seeds like \"0x1f\"", p.display());
            }
            let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            extra.extend(["--replay".to_string(), abs.display().to_string()]);
            Some(s)
        }
        None => None,
    };
    // The default flavor has no KCOV: take the fuzz flavor (or the replay's) unless chosen.
    if args.flavor == flavor::DEFAULT {
        opts.flavor = saved.as_ref().and_then(|s| s.flavor.clone()).unwrap_or_else(|| FLAVOR.into());
    }
    // LAB_KERNEL (a build from elsewhere, as `lab run` boots it): its System.map places the
    // driver's functions, whose names still come from the flavor's objects in the cache.
    let built = match std::env::var_os("LAB_KERNEL") {
        Some(dir) => kernel::Built::external(&opts.flavor, std::path::Path::new(&dir))?,
        None => kernel::build_with(&opts.flavor, &opts.kconfig)?,
    };
    let obj = paths::cache().join("kernel/build").join(&built.flavor);
    // A replay needs no coverage: on a flavor without KCOV (perf, debug: the plain driver)
    // it runs the sequence without, so a reproducer is checked on either driver.
    let text = if saved.is_some() && !driver_text::kcov_enabled(&built.config()) {
        vec![]
    } else {
        driver_text::for_build(&opts.flavor, &built.dir, &obj)?
    };
    let ranges: Vec<String> = text.iter().map(|(a, b)| format!("{a:#x}-{b:#x}")).collect();
    let mut append =
        vec![format!("binder_fuzz.text={}", ranges.join(",")), format!("binder_fuzz.flavor={}", opts.flavor)];
    // A KASAN report comes back on every rerun (minimising, replaying), not only the first.
    append.push("kasan_multi_shot".into());
    match &saved {
        Some(s) => {
            append.push(format!("binder_fuzz.replay={}", s.seq.join(",")));
            append.push(format!("binder_fuzz.threads={}", s.threads));
        }
        None => {
            let mode = if f.guided { "guided" } else { "random" };
            append.push(format!("binder_fuzz.mode={mode}"));
            extra.push(if f.guided { "--guided" } else { "--unguided" }.into());
        }
    }
    // Ours first, so that the user's --append (a seed, a budget) wins.
    opts.append.splice(0..0, append);
    run::suite_with(args, opts, "fuzz", &Default::default(), &extra)
}
