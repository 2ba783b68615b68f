//! Counters shared between the fuzzer's parent and its forked workers (an anonymous
//! MAP_SHARED mapping made before the first fork).

use std::sync::atomic::{AtomicU64, Ordering};

pub const MAX_SLOTS: usize = 32;

/// What each op kind is called in the report.
pub const OP_NAMES: &[&str] = &[
    "bc_stream",
    "read",
    "ioctl",
    "open_private",
    "mmap_again",
    "munmap_private",
    "close_private",
    "flush",
    "poll",
    "exit_process",
];
pub const N_OPS: usize = 10;

/// Outcome counters.
pub const STAT_NAMES: &[&str] = &[
    "ioctl_ok",
    "EINVAL",
    "EFAULT",
    "EAGAIN",
    "EBUSY",
    "EPERM",
    "ENOMEM",
    "ESRCH",
    "ENOENT",
    "ENOSPC",
    "other_errno",
    "BR_TRANSACTION",
    "BR_REPLY",
    "BR_TRANSACTION_COMPLETE",
    "BR_FAILED_REPLY",
    "BR_DEAD_REPLY",
    "BR_FROZEN_REPLY",
    "BR_INCREFS",
    "BR_ACQUIRE",
    "BR_RELEASE",
    "BR_DECREFS",
    "BR_DEAD_BINDER",
    "BR_CLEAR_DEATH_NOTIFICATION_DONE",
    "BR_ERROR",
    "BR_SPAWN_LOOPER",
    "BR_other",
    "undecodable_returns",
    "fds_received",
    "buffers_freed",
    "bc_commands",
    "malformed_commands",
    "context_manager_set",
];
pub const N_STATS: usize = 32;

pub mod stat {
    pub const IOCTL_OK: usize = 0;
    pub const EINVAL: usize = 1;
    pub const EFAULT: usize = 2;
    pub const EAGAIN: usize = 3;
    pub const EBUSY: usize = 4;
    pub const EPERM: usize = 5;
    pub const ENOMEM: usize = 6;
    pub const ESRCH: usize = 7;
    pub const ENOENT: usize = 8;
    pub const ENOSPC: usize = 9;
    pub const OTHER_ERRNO: usize = 10;
    pub const BR_TRANSACTION: usize = 11;
    pub const BR_REPLY: usize = 12;
    pub const BR_TC: usize = 13;
    pub const BR_FAILED: usize = 14;
    pub const BR_DEAD: usize = 15;
    pub const BR_FROZEN: usize = 16;
    pub const BR_INCREFS: usize = 17;
    pub const BR_ACQUIRE: usize = 18;
    pub const BR_RELEASE: usize = 19;
    pub const BR_DECREFS: usize = 20;
    pub const BR_DEAD_BINDER: usize = 21;
    pub const BR_CLEAR_DEATH: usize = 22;
    pub const BR_ERROR: usize = 23;
    pub const BR_SPAWN_LOOPER: usize = 24;
    pub const BR_OTHER: usize = 25;
    pub const UNDECODABLE: usize = 26;
    pub const FDS_RECEIVED: usize = 27;
    pub const BUFFERS_FREED: usize = 28;
    pub const BC_COMMANDS: usize = 29;
    pub const MALFORMED: usize = 30;
    pub const CTX_MGR: usize = 31;
}

pub const MAX_THREADS: usize = 8;

#[repr(C)]
pub struct ThreadSlot {
    /// CLOCK_MONOTONIC ms of the last op start.
    pub heartbeat_ms: AtomicU64,
    /// Op kind (index into OP_NAMES) + 1 of the op in progress; 0 when between ops.
    pub in_op: AtomicU64,
    /// Detail of the op in progress (ioctl number or first BC code).
    pub detail: AtomicU64,
}

#[repr(C)]
pub struct Slot {
    pub pid: AtomicU64,
    /// Ops done by the slot's current process.
    pub ops: AtomicU64,
    pub threads: [ThreadSlot; MAX_THREADS],
}

#[repr(C)]
pub struct Shm {
    pub stop: AtomicU64,
    pub total_ops: AtomicU64,
    pub slots: [Slot; MAX_SLOTS],
    pub op_counts: [AtomicU64; N_OPS],
    pub stats: [AtomicU64; N_STATS],
    /// Sequences (`worker::run_sequence`): the KCOV count of op `i`'s thread when op `i`
    /// started, so the parent can tell which op reached which edge (`u64::MAX`: not run).
    pub op_marks: [AtomicU64; MAX_MARKS],
}

/// Ops of a sequence whose start is marked (at least guided.rs's longest sequence).
pub const MAX_MARKS: usize = 64;

impl Shm {
    /// Maps the shared counters (zero-initialized). They live until the process exits.
    pub fn map() -> &'static Shm {
        let size = std::mem::size_of::<Shm>();
        // SAFETY: a fresh anonymous shared mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap shared counters");
        // SAFETY: the mapping is page aligned, large enough, zero-filled (a valid value for
        // every AtomicU64 in Shm), and never unmapped, so a 'static reference is sound.
        // Processes forked afterwards share it; atomics make concurrent access defined.
        unsafe { &*(p as *const Shm) }
    }

    pub fn bump(&self, stat: usize) {
        self.stats[stat].fetch_add(1, Ordering::Relaxed);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) != 0
    }
}

pub fn now_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

pub fn errno_stat(errno: i32) -> usize {
    match errno {
        libc::EINVAL => stat::EINVAL,
        libc::EFAULT => stat::EFAULT,
        libc::EAGAIN => stat::EAGAIN,
        libc::EBUSY => stat::EBUSY,
        libc::EPERM => stat::EPERM,
        libc::ENOMEM => stat::ENOMEM,
        libc::ESRCH => stat::ESRCH,
        libc::ENOENT => stat::ENOENT,
        libc::ENOSPC => stat::ENOSPC,
        _ => stat::OTHER_ERRNO,
    }
}

const _: () = assert!(OP_NAMES.len() == N_OPS && STAT_NAMES.len() == N_STATS);
