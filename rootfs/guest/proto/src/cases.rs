//! The binder conformance suite's cases, for the host: `lab conformance --list`, `--case`
//! and `lab list cases` answer from here without booting. The guest program's own table
//! (`binder-conformance`) must name the same cases in the same order; its unit test checks.

/// One case of `binder-conformance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseInfo {
    pub name: &'static str,
    /// Runs only when named with `--case` (a known driver issue).
    pub opt_in: bool,
    pub summary: &'static str,
}

const fn case(name: &'static str, summary: &'static str) -> CaseInfo {
    CaseInfo { name, opt_in: false, summary }
}

/// Every case in run order; `leaks` runs last of the default ones, the opt-in cases after it.
pub const CONFORMANCE_CASES: &[CaseInfo] = &[
    case("binder_version", "BINDER_VERSION on every fd; the error for a bad pointer"),
    case("context_manager", "BINDER_SET_CONTEXT_MGR, EBUSY on a second try, handle 0, takeover"),
    case("sync_round_trip_sizes", "synchronous calls of 0 B to 64 KiB, data verified both ways"),
    case("oneway_order", "300 oneway calls reach a single-threaded server in order"),
    case("nested_calls", "A->B->A runs on the waiting threads, not on an idle looper"),
    case("death_notification", "BR_DEAD_BINDER and BR_CLEAR_DEATH_NOTIFICATION_DONE"),
    case("refcounts", "BR_INCREFS/ACQUIRE/RELEASE/DECREFS exactly when due"),
    case("fd_passing", "BINDER_TYPE_FD both ways; refused without TF_ACCEPT_FDS"),
    case("nonblocking_read", "a read that would block returns EAGAIN and logs nothing"),
    case("free_buffer", "a full mapping fails the call; BC_FREE_BUFFER restores it"),
    case("service_manager", "the library's context manager: add, get, list, call"),
    case("thread_pool", "libbinder's pool: BR_SPAWN_LOOPER when every looper is busy, never beyond max threads"),
    case("tc_deferral", "seed 002: BR_TRANSACTION_COMPLETE deferred until the reply (defer_tc 0 and 1)"),
    case("stress_shrinker", "seed 001: checksummed payloads under load while the shrinker runs"),
    case("bad_invalid_handle", "unknown handles, no manager, the manager calling itself"),
    case("bad_pointers", "EFAULT for bad write/read pointers, BR_FAILED_REPLY for bad data"),
    case("bad_offsets", "misaligned, out-of-range, overlapping offsets, bad object types"),
    case("bad_oversized", "data larger than the mapping, overflowing sizes"),
    case("bad_unknown_command", "unknown BC codes, a command cut off by an unreadable page"),
    case("prio_sync", "priority inheritance: a FIFO or nice caller's server runs at its priority, then back"),
    case("prio_node_caps", "priority inheritance: a node without INHERIT_RT caps RT; a node minimum raises"),
    case("prio_oneway", "priority inheritance: a FIFO caller's oneway call runs at the server's default"),
    case("prio_nested", "priority inheritance: A->B->A runs each at what its caller carries, then restores"),
    case("prio_dead_caller", "priority inheritance: no priority left on the server after its caller died"),
    case(
        "transaction_report",
        "netlink reports of failed transactions: bad handle, too large, frozen (sync, oneway), dead target",
    ),
    case("fd_cycle_leak", "a binder fd sent to its own process: refused (Rust), a documented leak (C)"),
    case("leaks", "no binder process, thread, node, ref or buffer left after the cases"),
    CaseInfo {
        name: "shrinker_zap_race",
        opt_in: true,
        summary: "seed 001: an allocation between the shrinker's unlock and its zap (the RFC's window)",
    },
];

/// The case named `name`, or an error that lists them all.
pub fn conformance_case(name: &str) -> Result<&'static CaseInfo, String> {
    CONFORMANCE_CASES.iter().find(|c| c.name == name).ok_or_else(|| {
        let names: Vec<&str> = CONFORMANCE_CASES.iter().map(|c| c.name).collect();
        format!("no conformance case {name:?}; the cases are: {} (`lab conformance --list`)", names.join(", "))
    })
}
