//! What there is to choose from: boards, plans, flavors and conformance cases, for
//! `lab list`, the accepted values in `--help` and shell completions.

use clap::builder::{PossibleValue, TypedValueParser};
use std::path::{Path, PathBuf};

/// One choice and its one-line description.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    pub about: String,
}

/// What `lab list` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Boards,
    Plans,
    Flavors,
    Cases,
}

/// The first sentence of the comment a TOML or kconfig file starts with.
fn first_comment(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lead: Vec<&str> =
        text.lines().take_while(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
    let joined = lead.join(" ");
    let end = joined.find(". ").map(|i| i + 1).unwrap_or(joined.len());
    joined[..end].to_string()
}

use crate::support::fs::stems as files;

pub fn entries(kind: Kind) -> Vec<Entry> {
    let e = |(name, path): (String, PathBuf)| Entry { name, about: first_comment(&path) };
    match kind {
        Kind::Boards => files(&crate::support::paths::board_dir(), "toml", crate::harness::opts::NOT_BOARDS)
            .into_iter()
            .map(|(name, path)| {
                let about =
                    board::Board::load(&path).map(|b| b.description().to_string()).unwrap_or_else(|e| e.to_string());
                Entry { name, about }
            })
            .collect(),
        Kind::Plans => files(&crate::harness::opts::plans_dir(), "toml", &[]).into_iter().map(e).collect(),
        Kind::Flavors => {
            let mut v: Vec<Entry> =
                files(&crate::support::paths::kernel_config_dir(), "config", &["base"]).into_iter().map(e).collect();
            // The composed flavors of kernel-config/flavors.toml, with their `about`.
            let simple: Vec<String> = v.iter().map(|x| x.name.clone()).collect();
            for name in crate::kbuild::flavor::names().into_iter().filter(|n| !simple.contains(n)) {
                let about = crate::kbuild::flavor::load(&name).map(|f| f.about).unwrap_or_else(|e| e.to_string());
                v.push(Entry { name, about });
            }
            v
        }
        Kind::Cases => labproto::CONFORMANCE_CASES
            .iter()
            .map(|c| Entry {
                name: c.name.into(),
                about: format!("{}{}", if c.opt_in { "(opt-in) " } else { "" }, c.summary),
            })
            .collect(),
    }
}

/// `lab list KIND`: one line per entry.
pub fn render(kind: Kind) -> String {
    let list = entries(kind);
    let w = list.iter().map(|e| e.name.len()).max().unwrap_or(0);
    list.iter().map(|e| format!("{:<w$}  {}\n", e.name, e.about)).collect()
}

/// A value parser that shows `kind`'s entries in `--help` and completions. Board and plan
/// also take a path to a file; a flavor must be one of the list.
#[derive(Clone)]
pub struct Choice {
    kind: Kind,
    paths_too: bool,
}

impl Choice {
    pub fn boards() -> Choice {
        Choice { kind: Kind::Boards, paths_too: true }
    }
    pub fn plans() -> Choice {
        Choice { kind: Kind::Plans, paths_too: true }
    }
    pub fn flavors() -> Choice {
        Choice { kind: Kind::Flavors, paths_too: false }
    }
}

impl TypedValueParser for Choice {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let v = clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)?;
        if self.paths_too || entries(self.kind).iter().any(|e| e.name == v) {
            return Ok(v);
        }
        // A removed flavor names what replaced it (`phone`: `--policy phone`), not only the list.
        if let Some(instead) = crate::kbuild::flavor::retired(&v).filter(|_| self.kind == Kind::Flavors) {
            let what = arg.map(|a| a.to_string()).unwrap_or_default();
            let msg = format!("{what} {v}: the flavor was removed; use {instead}\n");
            return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, msg).with_cmd(cmd));
        }
        let mut err = clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd);
        use clap::error::{ContextKind, ContextValue};
        if let Some(a) = arg {
            err.insert(ContextKind::InvalidArg, ContextValue::String(a.to_string()));
        }
        err.insert(ContextKind::InvalidValue, ContextValue::String(v));
        let names = entries(self.kind).into_iter().map(|e| e.name).collect();
        err.insert(ContextKind::ValidValue, ContextValue::Strings(names));
        Err(err)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(entries(self.kind).into_iter().map(|e| PossibleValue::new(e.name).help(e.about))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_what_the_tree_has() {
        let names = |k| entries(k).into_iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(
            names(Kind::Flavors),
            [
                "cbinder",
                "debug",
                "gki",
                "kcov",
                "perf",
                "cbinder-ctabs",
                "cbinder-debug",
                "cbinder-spin",
                "cbinder-spin-debug",
                "fuzz",
                "fuzz-deep",
                "fuzz-planted"
            ]
        );
        assert!(names(Kind::Boards).contains(&"sa8155p".to_string()));
        let plans = names(Kind::Plans);
        assert!(plans.contains(&"default".to_string()) && plans.contains(&"conformance".to_string()));
        assert!(names(Kind::Cases).contains(&"tc_deferral".to_string()));
        let boards = render(Kind::Boards);
        assert!(boards.contains("sa8155p          SA8155P, 3 cpu-map clusters"), "{boards}");
        let flavors = render(Kind::Flavors);
        assert!(
            flavors
                .lines()
                .any(|l| l.starts_with("perf ") && l.ends_with("Benchmark flavor: nothing that slows the hot paths.")),
            "{flavors}"
        );
        assert!(flavors.contains("seed 001's patch"), "{flavors}");
    }

    #[test]
    fn a_removed_flavor_names_what_replaced_it() {
        let cmd =
            clap::Command::new("lab").arg(clap::Arg::new("flavor").long("flavor").value_parser(Choice::flavors()));
        let e = cmd.clone().try_get_matches_from(["lab", "--flavor", "phone"]).unwrap_err().to_string();
        assert!(
            e.contains("--flavor <flavor> phone: the flavor was removed; use perf") && e.contains("--policy phone"),
            "{e}"
        );
        let e = cmd.try_get_matches_from(["lab", "--flavor", "nosuch"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'nosuch'") && e.contains("perf") && !e.contains("removed"), "{e}");
    }
}
