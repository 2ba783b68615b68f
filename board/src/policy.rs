//! The board's scheduler policy (`[policy]`): the switches and boot-time settings the phone's
//! own system applies, each with its source, as files the guest init writes before the first
//! step. `mainline` writes nothing; `phone` writes the section's settings in file order.

use serde::{Deserialize, Serialize};

use crate::error::{BoardError, Ctx};
use crate::schema::{PolicyFile, SysctlValue};

/// Which scheduler policy a run applies at boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Mainline's: the kernel's own defaults, nothing written.
    #[default]
    Mainline,
    /// The phone's: the board's `[policy]` settings.
    Phone,
}

impl Policy {
    /// Every policy, for option parsers and messages.
    pub const ALL: [Policy; 2] = [Policy::Mainline, Policy::Phone];

    /// The name used in board files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Mainline => "mainline",
            Policy::Phone => "phone",
        }
    }

    /// The policy named `s` (`mainline` or `phone`).
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s)
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One file the guest writes at boot for a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyWrite {
    /// The guest file, e.g. `/sys/kernel/debug/sched/features`.
    pub path: String,
    /// What is written to it, e.g. `SYNC_EAS`.
    pub value: String,
    /// Where the phone's system applies it (a repository and path, or a commit).
    pub source: String,
}

/// A validated `[policy]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardPolicy {
    pub(crate) default: Policy,
    pub(crate) phone: Vec<PolicyWrite>,
}

/// Where the scheduler's features are switched (debugfs; 7.2 has it without SCHED_DEBUG).
pub const SCHED_FEATURES: &str = "/sys/kernel/debug/sched/features";

fn is_feature(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with("NO_")
        && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn is_sysctl(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
}

fn need_source(cx: &Ctx<'_>, field: String, source: &str) -> Result<(), BoardError> {
    if source.trim().is_empty() {
        return Err(cx.err(
            field,
            "the setting has no source",
            "give source = \"...\": the AOSP or vendor init script (repository, path, commit) or kernel commit \
             that applies it on the phone; settings without one do not belong in the board",
        ));
    }
    Ok(())
}

pub(crate) fn validate(cx: &Ctx<'_>, p: &PolicyFile) -> Result<BoardPolicy, BoardError> {
    let mut phone = vec![];
    for (i, f) in p.features.iter().enumerate() {
        let field = format!("policy.features[{i}]");
        if !is_feature(&f.name) {
            return Err(cx.err(
                format!("{field}.name"),
                format!("{:?} is not a scheduler feature name", f.name),
                "give the feature to turn on in upper case as /sys/kernel/debug/sched/features lists it, e.g. \
                 \"SYNC_EAS\" (NO_ names are mainline's state: leave them out)",
            ));
        }
        need_source(cx, format!("{field}.source"), &f.source)?;
        phone.push(PolicyWrite { path: SCHED_FEATURES.into(), value: f.name.clone(), source: f.source.clone() });
    }
    for (i, s) in p.sysctl.iter().enumerate() {
        let field = format!("policy.sysctl[{i}]");
        if !is_sysctl(&s.name) {
            return Err(cx.err(
                format!("{field}.name"),
                format!("{:?} is not a sysctl name", s.name),
                "give it as sysctl(8) does, dotted and in lower case, e.g. \"kernel.sched_rt_runtime_us\"",
            ));
        }
        let value = match &s.value {
            SysctlValue::Int(v) => v.to_string(),
            SysctlValue::Text(t) if !t.is_empty() && !t.contains('\n') => t.clone(),
            SysctlValue::Text(t) => {
                return Err(cx.err(
                    format!("{field}.value"),
                    format!("{t:?} cannot be written as one line"),
                    "give a number or a one-line string",
                ))
            }
        };
        need_source(cx, format!("{field}.source"), &s.source)?;
        phone.push(PolicyWrite {
            path: format!("/proc/sys/{}", s.name.replace('.', "/")),
            value,
            source: s.source.clone(),
        });
    }
    if phone.is_empty() {
        return Err(cx.err(
            "policy",
            "the section lists no features and no sysctl",
            "list the phone's settings, or remove [policy] (the board then runs mainline's policy)",
        ));
    }
    Ok(BoardPolicy { default: p.default, phone })
}
