//! Which programs measure seed 000's rows (`--userspace`): the lab's static Rust ports
//! (`binder-throughput`, `binder-tiers`) or AOSP's own, built from Android 14's sources
//! (`binderThroughputTest`, `schd-dbg`, on libbinder with Android's `servicemanager`; aosp/).
//!
//! A plan of the ports becomes a plan of AOSP's programs step by step: each port step turns
//! into the same step name running [`WRAPPER`], which sets the CTABS mode and the
//! priority-inheritance switch the port would have set, starts `servicemanager` for the step
//! (the context manager; it leaves with the step, so the ports' own service managers in the
//! same boot can take its place), runs the program and prints what it set. The host reads the
//! program's output into the ports' result shape ([`crate::harness::aosp_output`]).

use anyhow::{bail, Result};
use labproto::{Plan, Step};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Userspace {
    /// The lab's static Rust ports (binder-throughput, binder-tiers): exact percentiles.
    #[default]
    Ports,
    /// AOSP's binderThroughputTest and schd-dbg on Android 14's libbinder and servicemanager
    /// (aosp/): the seed's own programs, histogram percentiles plus exact ones (patch 0008).
    Aosp,
}

impl Userspace {
    pub fn name(self) -> &'static str {
        match self {
            Userspace::Ports => "ports",
            Userspace::Aosp => "aosp",
        }
    }

    /// One line for a report: which programs measured seed 000's rows.
    pub fn describe(self) -> &'static str {
        match self {
            Userspace::Ports => {
                "the lab's ports (binder-throughput, binder-tiers; exact percentiles, bucketed ones derived from them)"
            }
            Userspace::Aosp => {
                "AOSP's programs (Android 14's binderThroughputTest and schd-dbg on libbinder, servicemanager as \
                 the context manager; aosp/): percentiles from binderThroughputTest's 0.39 ms histogram buckets, \
                 the seed's units, and exact ones from aosp/patches 0008; tiers from schd-dbg with aosp/patches 0009; \
                 no pi=1 RT line (schd-dbg never sets INHERIT_RT)"
            }
        }
    }
}

/// Runs an AOSP program for one step: `sh -c WRAPPER aosp PROGRAM ARGS...`, where ARGS may
/// hold the ports' `--ctabs-mode M` and `--prio-inherit P`, which it applies and leaves out.
pub const WRAPPER: &str = r#"prog=$1; shift; args=; mode=; pi=
while [ $# -gt 0 ]; do
  case $1 in
    --ctabs-mode) mode=$2; shift 2;;
    --prio-inherit) pi=$2; shift 2;;
    *) args="$args $1"; shift;;
  esac
done
if [ -n "$mode" ]; then
  f=/sys/kernel/debug/rust_binder/ctabs; [ -e $f ] || f=/sys/kernel/debug/binder/ctabs
  if [ -e $f ]; then echo $mode > $f || exit 1; echo "lab-aosp: ctabs_mode $mode"
  else echo "lab-aosp: note no CTABS mode file, --ctabs-mode $mode ignored"; fi
fi
p=/sys/kernel/debug/rust_binder/priority_inheritance; old=
if [ -n "$pi" ] && [ -e $p ]; then old=$(cat $p); echo $pi > $p || exit 1; fi
[ -e $p ] && echo "lab-aosp: prio_inherit $(cat $p)"
[ -e /dev/binder ] || ln -s /dev/binderfs/binder /dev/binder
n=0
while :; do
  /usr/bin/servicemanager /dev/binder & sm=$!
  sleep 1
  kill -0 $sm 2>/dev/null && break
  n=$((n+1)); [ $n -lt 10 ] || { echo "lab-aosp: servicemanager did not start"; exit 1; }
done
echo "lab-aosp: program ${prog##*/}"
$prog $args; rc=$?
{ kill $sm; wait $sm; } 2>/dev/null
[ -n "$old" ] && echo $old > $p
exit $rc"#;

/// The AOSP step for a port step's argv, None when the step is not one of seed 000's ports
/// (it stays as it is), or an error for a port option AOSP's program has no counterpart of.
fn aosp_argv(argv: &[String]) -> Result<Option<Vec<String>>> {
    let (program, opts): (&str, &[(&str, Option<&str>)]) = match argv.first().map(String::as_str) {
        // The port's option and AOSP's name for it; None: the wrapper's.
        Some("/bin/binder-throughput") => (
            "/usr/bin/binderThroughputTest",
            &[("-w", Some("-w")), ("-i", Some("-i")), ("-s", Some("-s")), ("-t", Some("-t"))],
        ),
        Some("/bin/binder-tiers") => ("/usr/bin/schd-dbg", &[("-i", Some("-i")), ("--pair", Some("-pair"))]),
        _ => return Ok(None),
    };
    let mut out: Vec<String> = ["/bin/sh", "-c", WRAPPER, "aosp", program].iter().map(|s| s.to_string()).collect();
    let mut it = argv[1..].iter();
    while let Some(a) = it.next() {
        let value = it.clone().next().cloned();
        match a.as_str() {
            "-p" if program.ends_with("binderThroughputTest") => out.push("-p".into()),
            "--ctabs-mode" | "--prio-inherit" => {
                out.push(a.clone());
                out.extend(value);
                it.next();
            }
            // schd-dbg's payload is fixed at the port's default, 16 bytes.
            "-s" if program.ends_with("schd-dbg") && value.as_deref() == Some("16") => {
                it.next();
            }
            _ => match opts.iter().find(|(port, _)| *port == a) {
                Some((_, Some(theirs))) => {
                    out.push(theirs.to_string());
                    out.extend(value);
                    it.next();
                }
                _ => bail!(
                    "--userspace aosp: {} has no counterpart of the port's {a} (in `{}`): run this with --userspace ports",
                    program.rsplit('/').next().unwrap_or(program),
                    argv.join(" ")
                ),
            },
        }
    }
    Ok(Some(out))
}

/// `plan` with seed 000's port steps run by AOSP's programs (for [`Userspace::Aosp`]; the
/// ports' plan is returned as it is). Steps that give AOSP's schd-dbg INHERIT_RT, which it
/// never sets, are left out; every other step keeps its name, so the tables read it as before.
pub fn apply(u: Userspace, plan: Plan) -> Result<Plan> {
    if u == Userspace::Ports {
        return Ok(plan);
    }
    let mut steps = vec![];
    for s in plan.steps {
        if s.argv.iter().any(|a| a == "--inherit-rt") && s.argv.first().is_some_and(|a| a == "/bin/binder-tiers") {
            continue;
        }
        match aosp_argv(&s.argv)? {
            Some(argv) => steps.push(Step { argv, ..s }),
            None => steps.push(s),
        }
    }
    Ok(Plan { steps, aosp: true, ..plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::bench::{self, Profile};

    #[test]
    fn the_ports_plan_is_left_alone_and_aosp_swaps_the_programs() {
        let p = bench::plan_inherit(Profile::Quick, 1, None);
        assert_eq!(apply(Userspace::Ports, p.clone()).unwrap(), p);
        let a = apply(Userspace::Aosp, p.clone()).unwrap();
        assert!(a.aosp && !p.aosp);
        let argv = |name: &str| a.steps.iter().find(|s| s.name == name).map(|s| s.argv[3..].join(" "));
        assert_eq!(argv("throughput-m1-r0").unwrap(), "aosp /usr/bin/binderThroughputTest -w 2 -i 1000 --ctabs-mode 1");
        assert_eq!(argv("tiers-pi-m2-r0").unwrap(), "aosp /usr/bin/schd-dbg -i 300 --prio-inherit 1 --ctabs-mode 2");
        assert_eq!(a.steps.iter().find(|s| s.name == "tiers-m0-r0").unwrap().argv[..2], ["/bin/sh", "-c"]);
        // No INHERIT_RT in schd-dbg: those steps go; sendvec is no seed-000 program and stays.
        assert!(argv("tiers-pirt-m0-r0").is_none());
        assert!(a.steps.iter().any(|s| s.name == "sendvec-m0-r0" && s.argv[0] == "/bin/binder-sendvec"));
        assert_eq!(a.steps.len(), p.steps.len() - 3);
    }

    #[test]
    fn a_port_option_aosp_has_not_is_refused_by_name() {
        let fixed = bench::plan(Profile::Quick, 1, Some(2));
        let e = apply(Userspace::Aosp, fixed).unwrap_err().to_string();
        assert!(e.contains("binderThroughputTest has no counterpart of the port's --threads"), "{e}");
        assert!(e.contains("--userspace ports"), "{e}");
        let pair = aosp_argv(&["/bin/binder-tiers", "--pair", "4", "-s", "16"].map(String::from)).unwrap().unwrap();
        assert_eq!(pair[4..].join(" "), "/usr/bin/schd-dbg -pair 4");
    }

    #[test]
    fn the_wrapper_reports_what_the_parser_reads() {
        for k in ["program", "ctabs_mode", "prio_inherit"] {
            assert!(WRAPPER.contains(&format!("echo \"{}{k} ", crate::harness::aosp_output::MARKER)), "{k}");
        }
    }
}
