//! The host's PostgreSQL cluster, which lava-server keeps its database in: started for
//! lava-server's install and for a local LAVA instance, stopped after (Debian's
//! `pg_ctlcluster`; no init system needed).

use anyhow::{bail, Context, Result};
use std::process::Command;

/// The first cluster `pg_lsclusters` lists, as (version, name, online).
fn first_cluster() -> Result<(String, String, bool)> {
    let out = Command::new("pg_lsclusters")
        .arg("--no-header")
        .output()
        .context("running pg_lsclusters (Debian's postgresql package)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_clusters(&text).with_context(|| {
        format!("no PostgreSQL cluster (pg_lsclusters printed {text:?}): `pg_createcluster --start 15 main` makes one")
    })
}

fn parse_clusters(text: &str) -> Option<(String, String, bool)> {
    let f: Vec<&str> = text.lines().next()?.split_whitespace().collect();
    Some((f.first()?.to_string(), f.get(1)?.to_string(), f.get(3)? == &"online"))
}

fn ctl(action: &str, version: &str, name: &str) -> Result<()> {
    let st = Command::new("pg_ctlcluster").args([version, name, action]).status().context("running pg_ctlcluster")?;
    if !st.success() {
        bail!("pg_ctlcluster {version} {name} {action} failed ({st})");
    }
    Ok(())
}

/// Starts the cluster unless it runs; what to hand [`stop_cluster`] when this started it.
pub fn start_cluster() -> Result<Option<String>> {
    let (version, name, online) = first_cluster()?;
    if online {
        return Ok(None);
    }
    ctl("start", &version, &name)?;
    Ok(Some(format!("{version} {name}")))
}

/// Stops a cluster [`start_cluster`] started.
pub fn stop_cluster(started: &str) -> Result<()> {
    let (version, name) = started.split_once(' ').context("a cluster as \"VERSION NAME\"")?;
    ctl("stop", version, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pg_lsclusters() {
        let text =
            "15  main    5432 down   postgres /var/lib/postgresql/15/main /var/log/postgresql/postgresql-15-main.log\n";
        assert_eq!(parse_clusters(text), Some(("15".into(), "main".into(), false)));
        assert_eq!(parse_clusters(&text.replace("down", "online")).map(|c| c.2), Some(true));
        assert_eq!(parse_clusters(""), None);
    }
}
