//! `lab lava-job` (`cargo make lava-job`): a LAVA job for a plan, and what lava-run needs;
//! `lab lava-submit`: the plan run as LAVA jobs on a farm, its results read back.

use crate::cli::args::RunArgs;
use crate::harness::lava::Farm;
use crate::harness::outcome::Exit;
use crate::report::summary::summary;
use crate::support::paths;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

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
    /// A file of mode 0600 holding that user's API token (with --lava) [default: the
    /// environment's LAVA_TOKEN]; never the token itself on a command line.
    #[arg(long, env = "LAVA_TOKEN_FILE", value_name = "FILE")]
    pub lava_token_file: Option<PathBuf>,
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
            token: token(self.lava_token_file.as_deref(), "--lava-token-file")?,
            artifact_url: self.lava_artifact_url.clone(),
        };
        if target.user.is_empty() {
            bail!("--lava needs a LAVA user: --lava-user NAME (or LAVA_USER)");
        }
        // The URL is checked now, not at the first boot.
        Farm::new(&target.server, &target.user, &target.token)?;
        crate::harness::lava::refuse_on_farm(opts)?;
        crate::support::progress::note(format!("every boot goes to the LAVA farm {server} as one job"));
        opts.lava = Some(target);
        Ok(())
    }
}

/// The farm's API token: from `file` (`flag`; mode 0600 or stricter, as lavacli's own identity
/// file should be), else the environment's LAVA_TOKEN. Never an argument: any local user reads
/// a process's argv.
pub fn token(file: Option<&Path>, flag: &str) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let how = format!("put it in a file only you can read (chmod 600 FILE) and give {flag} FILE, or set LAVA_TOKEN; a token is made in the server's web UI (API -> Authentication Tokens) or with `lava-server manage tokens add --user NAME`");
    let token = match file {
        Some(f) => {
            let mode =
                std::fs::metadata(f).with_context(|| format!("{flag} {}: {how}", f.display()))?.permissions().mode();
            if mode & 0o077 != 0 {
                bail!(
                    "{flag} {}: mode {:o} lets other users read the token: chmod 600 {}",
                    f.display(),
                    mode & 0o777,
                    f.display()
                );
            }
            std::fs::read_to_string(f)?.trim().to_string()
        }
        None => std::env::var("LAVA_TOKEN").unwrap_or_default(),
    };
    if token.is_empty() {
        bail!("no LAVA API token: {how}");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::opts::RunOpts;
    use crate::harness::qemu::Tcg;

    /// `--lava URL` with a token file of `mode` holding `token` (kept in `dir`).
    fn farm_mode(url: Option<&str>, token: &str, mode: u32, dir: &Path) -> FarmArgs {
        use std::os::unix::fs::PermissionsExt;
        let file = dir.join(format!("token-{mode:o}-{}", token.len()));
        std::fs::write(&file, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        FarmArgs {
            lava: url.map(String::from),
            lava_user: Some("u".into()),
            lava_token_file: Some(file),
            lava_artifact_url: None,
        }
    }

    fn farm(url: Option<&str>, token: &str) -> FarmArgs {
        let dir = tempfile::tempdir().unwrap().keep();
        farm_mode(url, token, 0o600, &dir)
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
        assert!(e.contains("--lava-token-file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = farm_mode(Some("https://lava.example.org"), "t", 0o644, dir.path()).apply(&mut o).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
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
