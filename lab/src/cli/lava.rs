//! `lab lava-job` (`cargo make lava-job`): a LAVA job for a plan, and what lava-run needs;
//! `lab lava-submit`: the plan run as LAVA jobs on a farm, its results read back.

use crate::cli::args::RunArgs;
use crate::harness::lava::Farm;
use crate::harness::outcome::Exit;
use crate::report::summary::summary;
use crate::support::paths;
use anyhow::{bail, Result};
use std::path::PathBuf;

pub fn run(out: Option<PathBuf>, artifact_url: Option<&str>, args: &RunArgs) -> Result<()> {
    let opts = args.opts("default")?;
    let name = format!("{}-{}-{}", opts.plan, opts.board, opts.flavor);
    let out = out.unwrap_or_else(|| paths::repo().join("target/lab/lava").join(paths::path_safe(&name)));
    let w = crate::harness::lava::write(&opts, &out, artifact_url)?;
    println!("{}", w.job.display());
    println!(
        "run it locally: lava-run --job-id 1 --output-dir {} --device {} {}",
        out.join("lava-out").display(),
        w.device.display(),
        w.job.display()
    );
    Ok(())
}

/// `lab lava-submit`: `boots` LAVA jobs of the plan, submitted together, then collected in
/// order; exits like `lab run` (the first failing boot's code).
pub fn submit(farm: &Farm, artifact_url: Option<&str>, boots: usize, args: &RunArgs) -> Result<Exit> {
    if boots == 0 {
        bail!("--boots 0: submit at least one job");
    }
    let opts = args.opts("default")?;
    let mut exit = Exit::Ok;
    let outcomes = crate::harness::lava::submit_and_collect(&opts, farm, artifact_url, boots)?;
    for o in &outcomes {
        crate::report::write_reports(&o.dir, o)?;
        print!("{}", summary(o));
        if exit == Exit::Ok {
            exit = o.exit();
        }
    }
    Ok(exit)
}

/// `--lava URL` of the commands that boot more than once (`reproduce`): every boot becomes
/// one LAVA job on that farm, collected into the same run directories and report.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FarmArgs {
    /// Run every boot as a LAVA job on this farm (its base URL, e.g. https://lava.example.org)
    /// instead of here; the farm's qemu devices run them (-j of them wait at once).
    #[arg(long, value_name = "URL")]
    pub lava: Option<String>,
    /// The LAVA user whose API token is given (with --lava).
    #[arg(long, env = "LAVA_USER", value_name = "NAME")]
    pub lava_user: Option<String>,
    /// That user's API token (with --lava).
    #[arg(long, env = "LAVA_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub lava_token: Option<String>,
    /// Where the farm's workers fetch each boot's artifacts from (with --lava) [default:
    /// file:// paths, for a worker on this machine].
    #[arg(long, value_name = "URL")]
    pub lava_artifact_url: Option<String>,
}

impl FarmArgs {
    /// With --lava, `opts` sends every boot to the farm (refusing what a farm's worker cannot
    /// run, before anything is built).
    pub fn apply(&self, opts: &mut crate::harness::opts::RunOpts) -> Result<()> {
        let Some(server) = &self.lava else {
            if self.lava_artifact_url.is_some() {
                bail!("--lava-artifact-url needs --lava URL (the farm to send the boots to)");
            }
            return Ok(());
        };
        let target = crate::harness::opts::LavaTarget {
            server: server.clone(),
            user: self.lava_user.clone().unwrap_or_default(),
            token: self.lava_token.clone().unwrap_or_default(),
            artifact_url: self.lava_artifact_url.clone(),
        };
        if target.user.is_empty() || target.token.is_empty() {
            bail!("--lava needs a LAVA user and API token: --lava-user NAME --lava-token TOKEN (or LAVA_USER, LAVA_TOKEN); a token is made in the server's web UI (API -> Authentication Tokens) or with `lava-server manage tokens add --user NAME`");
        }
        // The URL is checked now, not at the first boot.
        Farm::new(&target.server, &target.user, &target.token)?;
        crate::harness::lava::refuse_on_farm(opts)?;
        crate::support::progress::note(format!("every boot goes to the LAVA farm {server} as one job"));
        opts.lava = Some(target);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::opts::RunOpts;
    use crate::harness::qemu::Tcg;

    fn farm(url: Option<&str>, token: &str) -> FarmArgs {
        FarmArgs {
            lava: url.map(String::from),
            lava_user: Some("u".into()),
            lava_token: Some(token.into()),
            lava_artifact_url: None,
        }
    }

    #[test]
    fn lava_sends_the_boots_or_says_what_is_missing() {
        let mut o = RunOpts { tcg: Tcg::Icount, ..Default::default() };
        farm(None, "t").apply(&mut o).unwrap();
        assert!(o.lava.is_none(), "no --lava: boots stay here");
        farm(Some("https://lava.example.org"), "t").apply(&mut o).unwrap();
        assert_eq!(o.lava.as_ref().map(|t| t.server.as_str()), Some("https://lava.example.org"));

        let mut o = RunOpts { tcg: Tcg::Icount, ..Default::default() };
        let e = farm(Some("https://lava.example.org"), "").apply(&mut o).unwrap_err().to_string();
        assert!(e.contains("--lava-token"), "{e}");
        let e = farm(Some("lava.example.org"), "t").apply(&mut o).unwrap_err().to_string();
        assert!(e.contains("base URL"), "{e}");
        let e = FarmArgs { lava_artifact_url: Some("https://x".into()), ..farm(None, "t") }
            .apply(&mut o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --lava"), "{e}");
        let mut hi = RunOpts { tcg: Tcg::Hicount, ..Default::default() };
        assert!(farm(Some("https://lava.example.org"), "t").apply(&mut hi).is_err());
        assert!(o.lava.is_none() && hi.lava.is_none(), "a refused farm leaves the options alone");
    }
}
