//! The board's `[policy]` section validated: the switches and boot-time settings the phone's
//! own system applies, each with its source, as files the guest init writes before the first
//! step ([`crate::Board::policy_writes`]).

use crate::error::{BoardError, Ctx};
use crate::model::{BoardPolicy, PolicyWrite};
use crate::schema::{PolicyFile, SysctlValue};

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
