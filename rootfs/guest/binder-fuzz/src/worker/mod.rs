//! A fuzz worker process: a few threads issuing random and malformed BC streams and
//! ioctls on shared and private binder fds, reacting to what the driver returns (freeing
//! received buffers, using received handles, answering refcount requests or not).
//!
//! Memory safety of the fuzzer itself: the kernel may write only into this thread's
//! scratch arena or into memory it cannot write (a PROT_NONE page, kernel addresses, the
//! read-only binder mapping, program text), never into Rust-owned memory. All binder
//! fds are O_NONBLOCK, so no ioctl waits for work; BINDER_FREEZE timeouts are capped at
//! 10 ms. Random ioctl numbers keep binder's type 'b', so the VFS never interprets one
//! (FIONBIO would make an fd blocking).

mod arena;
mod commands;
mod ioctls;
mod notifications;
mod objects;
mod reads;

use crate::shm::{self, stat, Shm};
use binder::parcel::{objects_at, Object};
use binder::protocol::{Command, Return, ReturnReader, TransactionData};
use binder::uapi::*;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use testkit::rng::Rng;

/// Scratch memory per thread and how it is split.
const ARENA: usize = 256 * 1024;
const A_WRITE: usize = 0; // BC stream
const A_DATA: usize = 64 * 1024; // transaction data, offsets, sg buffers
const A_READ: usize = 128 * 1024; // read buffers
const A_ARGS: usize = 192 * 1024; // binder_write_read and ioctl arguments

const KERNEL_PTR: u64 = 0xffff_8000_2000_0000;
const NODE_PTRS: u64 = 8;
const MAX_BUFFERS: usize = 48;
const MAX_HANDLES: usize = 64;

pub struct Config {
    pub device: String,
    /// Also send binder fds in BINDER_TYPE_FD objects. A binder fd queued in its own
    /// process is a reference cycle neither driver breaks (the opt-in conformance case
    /// `fd_cycle_leak`): with this on, the leak check finds those.
    pub binder_fds: bool,
    pub slot: usize,
    pub seed: u64,
    pub threads: usize,
    /// Ops of this process before it exits.
    pub life_ops: u64,
}

/// A binder fd with its mapping, as the fuzzer manages it (it may unmap on purpose, so
/// it cannot use binder::Device, which unmaps on drop).
struct FDev {
    fd: RawFd,
    map: u64,
    map_len: usize,
    /// The mapping was removed: buffers it reports must not be read.
    unmapped: bool,
}

impl FDev {
    fn open(path: &str, map_len: usize, prot: i32, flags: i32) -> Option<FDev> {
        let c = std::ffi::CString::new(path).ok()?;
        // SAFETY: c is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let mut d = FDev { fd, map: 0, map_len: 0, unmapped: false };
        if map_len > 0 {
            // SAFETY: a new mapping of our binder fd at a kernel-chosen address.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), map_len, prot, flags, fd, 0) };
            if p != libc::MAP_FAILED {
                d.map = p as u64;
                d.map_len = map_len;
            }
        }
        Some(d)
    }

    fn readable(&self, ptr: u64, len: u64) -> bool {
        !self.unmapped
            && self.map_len > 0
            && ptr >= self.map
            && len <= self.map_len as u64
            && ptr - self.map <= self.map_len as u64 - len
    }

    fn unmap(&mut self) {
        if self.map_len > 0 && !self.unmapped {
            // SAFETY: our own binder mapping, never borrowed (reads copy out).
            unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
            self.unmapped = true;
        }
    }
}

impl Drop for FDev {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: our fd.
        unsafe { libc::close(self.fd) };
    }
}

/// State shared by the threads of a worker.
struct Shared {
    devs: Vec<FDev>,
    /// Handles learned from received objects, with the device they belong to (handles
    /// are per binder fd).
    handles: Mutex<Vec<(usize, u32)>>,
    /// Pids of the other workers (for BINDER_FREEZE / GET_FROZEN_INFO).
    shm: &'static Shm,
    /// An fd to send in BINDER_TYPE_FD objects.
    null_fd: RawFd,
    bad_page: u64,
    device: String,
    binder_fds: bool,
    /// Every binder fd open in this process (shared and private), so that random fd
    /// numbers can avoid them unless `binder_fds`.
    all_binder_fds: Mutex<Vec<RawFd>>,
    /// Running one operation sequence (guided, random and replayed sequences): ops that
    /// change a ref's state weigh more (see `SEQ_SANE`).
    sequence: bool,
    /// Freeze and death notifications requested in this process. Clears and dones in
    /// well-formed ops name one, as a real client would.
    notifs: Mutex<Vec<Notif>>,
    /// Cookies of `BR_FROZEN_BINDER`s left unanswered (device, cookie): the driver waits for
    /// their `BC_FREEZE_NOTIFICATION_DONE`, which a well-formed done op names first.
    frozen: Mutex<Vec<(usize, u64)>>,
}

/// A sequence's thread answers a `BR_FROZEN_BINDER` with `BC_FREEZE_NOTIFICATION_DONE` at
/// once this often (in 4), as libbinder does; otherwise it leaves the listener pending for a
/// later done op. Both states matter: only an answered listener has a clear queue a message
/// at once, only a pending one counts re-requests as pending duplicates.
const FROZEN_DONE_QUARTERS: u64 = 2;
/// A well-formed freeze clear of a sequence is followed, in the same write, by a request with
/// the same handle and cookie this often (in 4): a client that re-registers right away (the
/// driver allows exactly that duplicate, `FreezeListener::allow_duplicate`). Without a read
/// between the two, the clear's message is still queued when the request counts a cleared
/// duplicate; with a read after every write that state was out of reach.
const REREQUEST_QUARTERS: u64 = 1;

/// Of the `BR_FROZEN_BINDER`s in `returns`, the cookies to answer at once and those left
/// pending (`FROZEN_DONE_QUARTERS`).
fn frozen_answers(rng: &mut Rng, returns: &[u8]) -> (Vec<u64>, Vec<u64>) {
    let (mut now, mut later) = (vec![], vec![]);
    for r in ReturnReader::new(returns) {
        let Ok(Return::FrozenBinder { cookie, .. }) = r else { continue };
        if rng.chance(FROZEN_DONE_QUARTERS, 4) {
            now.push(cookie);
        } else {
            later.push(cookie);
        }
    }
    (now, later)
}

/// A freeze notification's clear, and (`rerequest`) the same request right after it.
fn freeze_clear(w: &mut Vec<u8>, handle: u32, cookie: u64, rerequest: bool) {
    Command::ClearFreezeNotification { handle, cookie }.encode(w);
    if rerequest {
        Command::RequestFreezeNotification { handle, cookie }.encode(w);
    }
}

/// Weights of the command kinds in a well-formed op of a sequence (see `Thread::command`).
/// A sequence is short (4-32 ops), so with the classic weights (freeze and death 2-3 of
/// 91) a request and its clear on a live ref come together far too rarely for the
/// notification state machines to be reached at all; here each ref and notification
/// family weighs about as much as a transaction kind.
const SEQ_SANE: [u32; 20] = [14, 8, 4, 2, 8, 4, 4, 3, 3, 3, 3, 2, 6, 6, 3, 12, 0, 0, 0, 0];
/// A notification a well-formed op of a sequence requested (and whether it has not been
/// cleared since).
#[derive(Clone, Copy, PartialEq)]
struct Notif {
    dev: usize,
    handle: u32,
    cookie: u64,
    freeze: bool,
    active: bool,
}

/// Notifications remembered per process.
const MAX_NOTIFS: usize = 16;

struct Thread {
    rng: Rng,
    sh: Arc<Shared>,
    arena: *mut u8,
    private: Option<FDev>,
    /// Received buffers not yet freed: (device index (usize::MAX: private), address).
    buffers: VecDeque<(usize, u64)>,
    incs: Vec<(u64, u64)>,
    deaths: Vec<u64>,
    slot: usize,
    /// Index of this thread in its slot.
    tix: usize,
    /// This operation builds well-formed input (valid pointers and objects, known
    /// handles) to get deep into the driver; otherwise anything goes.
    sane: bool,
    /// Synchronous transactions received and not answered: (device, buffer).
    pending_in: Vec<(usize, u64)>,
    /// Device of the operation being built.
    cur_dev: usize,
    /// Devices on which this thread waits for a reply (its next synchronous call would
    /// be refused): shared devices by index, the private one last.
    awaiting: [bool; 3],
    /// Operations since each `awaiting` was set.
    awaiting_ops: [u32; 3],
    /// Frees of our own buffers in the stream being built: (start, end, device, buffer).
    /// Those the driver does not consume (an earlier command failed, the stream pointer
    /// was bad) go back to `buffers`.
    emitted_frees: Vec<(usize, usize, usize, u64)>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Thread {
    /// The state every operation sequence starts from (thread 0, the manager on the first
    /// fd, before the first op): the second fd holds a strong ref to the manager's node
    /// (handle 0) and has given the manager a strong ref to a node of its own, so requests
    /// on refs (freeze and death notifications, refcounts) can succeed from the first op
    /// on both fds. Without it a sequence had to build that state by chance first, which
    /// a few hundred short sequences never did.
    pub(super) fn prelude(&mut self) {
        let (fd0, fd1) = (self.sh.devs[0].fd, self.sh.devs[1].fd);
        let mut b = Vec::new();
        Command::IncRefs(0).encode(&mut b);
        Command::Acquire(0).encode(&mut b);
        let mut data = vec![];
        let (ptr, cookie) = (0x1000, 0x1000 ^ 0xc00c);
        Object::binder(ptr, cookie).encode(&mut data);
        let (data_off, offs_off) = (A_DATA, A_DATA + 40 * 1024);
        self.put(data_off, &data);
        self.put(offs_off, &0u64.to_ne_bytes());
        Command::Transaction(TransactionData {
            flags: TF_ONE_WAY,
            data_size: data.len() as u64,
            offsets_size: 8,
            buffer: self.a(data_off),
            offsets: self.a(offs_off),
            ..Default::default()
        })
        .encode(&mut b);
        self.write_cmds(1, fd1, &b);
        if let Ok(mut h) = self.sh.handles.lock() {
            h.push((1, 0));
        }
        // Our own BR_TRANSACTION_COMPLETE and the node's BR_INCREFS/BR_ACQUIRE on the second
        // fd, then the call on the manager's: `received` learns the handle.
        self.write_read_sane_read(1, fd1);
        self.write_read_sane_read(0, fd0);
        let mine: Vec<u32> =
            self.sh.handles.lock().map(|h| h.iter().filter(|x| x.0 == 0).map(|x| x.1).collect()).unwrap_or_default();
        let mut b = Vec::new();
        for h in mine {
            Command::IncRefs(h).encode(&mut b);
            Command::Acquire(h).encode(&mut b);
        }
        self.write_cmds(0, fd0, &b);
        self.serve_all();
    }

    pub(super) fn step(&mut self) -> bool {
        self.unwedge();
        self.answer_pending();
        let op = self.rng.weighted(&[50, 20, 18, 2, 1, 1, 1, 2, 2, 0]);
        let op = if self.rng.chance(1, 4000) { 9 } else { op };
        let slot = &self.sh.shm.slots[self.slot];
        let ts = &slot.threads[self.tix];
        ts.heartbeat_ms.store(shm::now_ms(), Ordering::Relaxed);
        ts.in_op.store(op as u64 + 1, Ordering::Relaxed);
        match op {
            0 => self.write_read(true),
            1 => {
                if self.rng.chance(1, 2) {
                    self.serve_all()
                } else {
                    self.write_read(false)
                }
            }
            2 => self.ioctl(),
            3 => self.open_private(),
            4 => self.mmap_again(),
            5 => {
                if let Some(p) = self.private.as_mut() {
                    p.unmap();
                }
            }
            6 => {
                self.close_private();
                self.buffers.retain(|b| b.0 != usize::MAX);
                self.pending_in.retain(|b| b.0 != usize::MAX);
                self.awaiting[2] = false;
            }
            7 => {
                let (_, fd) = self.dev();
                // SAFETY: dup of our fd, closed right away: runs the driver's flush.
                unsafe {
                    let d = libc::dup(fd);
                    if d >= 0 {
                        libc::close(d);
                    }
                }
            }
            8 => {
                let (_, fd) = self.dev();
                let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd, no waiting.
                unsafe { libc::poll(&mut p, 1, 0) };
            }
            _ => {
                // The process dies with everything in flight.
                self.sh.shm.op_counts[op].fetch_add(1, Ordering::Relaxed);
                // SAFETY: _exit ends the process at once, as a crash would.
                unsafe { libc::_exit(0) };
            }
        }
        ts.in_op.store(0, Ordering::Relaxed);
        self.sh.shm.op_counts[op].fetch_add(1, Ordering::Relaxed);
        slot.ops.fetch_add(1, Ordering::Relaxed);
        self.sh.shm.total_ops.fetch_add(1, Ordering::Relaxed);
        !self.sh.shm.stopped()
    }
}

fn main_text() -> u64 {
    main_text as *const () as u64
}

/// What a worker process's threads share, and where their arenas are.
struct Setup {
    sh: Arc<Shared>,
    arena: usize,
    try_mgr: bool,
}

/// Opens and maps the shared binder fds and the arenas; Err is the worker's exit code.
/// `sequence`: for `run_sequence` (see `Shared::sequence`).
fn setup(cfg: &Config, shm: &'static Shm, rng: &mut Rng, sequence: bool) -> Result<Setup, i32> {
    let devs: Vec<FDev> = [1024 * 1024 - 8192, 128 * 1024]
        .iter()
        .filter_map(|&len| FDev::open(&cfg.device, len, libc::PROT_READ, libc::MAP_PRIVATE))
        .collect();
    if devs.len() < 2 || devs.iter().any(|d| d.map_len == 0) {
        eprintln!("binder-fuzz worker {}: cannot open and map {}", cfg.slot, cfg.device);
        return Err(3);
    }
    // A looper thread (not this one, which only waits) tries to become the manager.
    let try_mgr = rng.chance(1, 3);
    let null = std::ffi::CString::new("/dev/null").unwrap();
    // SAFETY: valid C string.
    let null_fd = unsafe { libc::open(null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let threads = cfg.threads.max(1);
    // The arenas, and a PROT_NONE page after them.
    let total = ARENA * threads + 4096;
    // SAFETY: a fresh anonymous mapping only the kernel (during our syscalls) and this
    // module's raw-pointer copies touch.
    let arena = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if arena == libc::MAP_FAILED {
        return Err(4);
    }
    let bad_page = arena as u64 + (ARENA * threads) as u64;
    // SAFETY: the last page of our fresh mapping.
    unsafe { libc::mprotect(bad_page as *mut libc::c_void, 4096, libc::PROT_NONE) };
    let all_binder_fds = Mutex::new(devs.iter().map(|d| d.fd).collect());
    let sh = Arc::new(Shared {
        devs,
        handles: Mutex::new(vec![]),
        shm,
        null_fd,
        bad_page,
        device: cfg.device.clone(),
        binder_fds: cfg.binder_fds,
        all_binder_fds,
        sequence,
        notifs: Mutex::new(vec![]),
        frozen: Mutex::new(vec![]),
    });
    Ok(Setup { sh, arena: arena as usize, try_mgr })
}

impl Setup {
    /// Thread `t` of the worker: a looper on the shared fds, and (thread 0, if `try_mgr`) the
    /// would-be context manager.
    fn thread(&self, cfg: &Config, t: usize, seed: u64) -> Thread {
        let mut th = Thread {
            rng: Rng::new(seed),
            sh: self.sh.clone(),
            arena: (self.arena + t * ARENA) as *mut u8,
            private: None,
            buffers: VecDeque::new(),
            incs: vec![],
            deaths: vec![],
            slot: cfg.slot,
            tix: t.min(shm::MAX_THREADS - 1),
            sane: true,
            pending_in: vec![],
            cur_dev: 0,
            awaiting: [false; 3],
            awaiting_ops: [0; 3],
            emitted_frees: vec![],
        };
        // Loopers receive calls (process work goes to looper threads only).
        for d in 0..th.sh.devs.len() {
            let fd = th.sh.devs[d].fd;
            th.enter_looper(fd);
        }
        if t == 0 && self.try_mgr {
            // SAFETY: BINDER_SET_CONTEXT_MGR reads an int at the pointer (a live local).
            let r = unsafe { libc::ioctl(th.sh.devs[0].fd, BINDER_SET_CONTEXT_MGR as _, &0i32 as *const i32) };
            if r == 0 {
                th.sh.shm.bump(stat::CTX_MGR);
            }
        }
        th
    }
}

/// Runs a worker process to the end of its life; returns the exit code.
pub fn run(cfg: Config, shm: &'static Shm) -> i32 {
    let mut rng = Rng::new(cfg.seed);
    let s = match setup(&cfg, shm, &mut rng, false) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let threads = cfg.threads.max(1);
    let per_thread = cfg.life_ops.div_ceil(threads as u64);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (s, cfg) = (&s, &cfg);
            scope.spawn(move || {
                let mut th = s.thread(cfg, t, Rng::derive(cfg.seed, t as u64).next_u64());
                for _ in 0..per_thread {
                    if !th.step() {
                        break;
                    }
                }
            });
        }
    });
    0
}

/// Runs one operation sequence (guided mode, replays): op `i` is drawn from `Rng::new(seq[i])`
/// on thread `seq[i] % threads`, one op at a time in sequence order, so the same sequence
/// makes the same calls. Thread `t` records its coverage into `kcov[t]` (KCOV_ENABLE is per
/// task). Every thread then reads what the driver queued for it. Returns the exit code.
/// `areas`: the kcov buffers' addresses (`Kcov::addr`), whose counts mark each op's start
/// in `shm.op_marks`.
pub fn run_sequence(cfg: Config, shm: &'static Shm, seq: &[u64], kcov: &[RawFd], areas: &[usize]) -> i32 {
    let threads = cfg.threads.max(1);
    let enable = |t: usize| {
        if let Some(&fd) = kcov.get(t) {
            // SAFETY: a kcov fd whose buffer the parent set up; traces this task only.
            unsafe { libc::ioctl(fd, crate::kcov::KCOV_ENABLE as _, crate::kcov::KCOV_TRACE_PC) };
        }
    };
    // This thread is thread 0: its setup (open, mmap) is traced too.
    enable(0);
    let mut s = match setup(&cfg, shm, &mut Rng::new(cfg.seed), true) {
        Ok(s) => s,
        Err(code) => return code,
    };
    // A manager on the first fd gives handle 0 meaning on the second, in every sequence.
    s.try_mgr = true;
    let turn = (Mutex::new(0usize), std::sync::Condvar::new());
    // Every thread is a looper (and thread 0 the manager) before the first op, whichever
    // thread that op is on: otherwise the sequence's start would depend on timing.
    let ready = std::sync::Barrier::new(threads);
    let body = |t: usize| {
        let mut th = s.thread(&cfg, t, Rng::derive(cfg.seed, t as u64).next_u64());
        ready.wait();
        if t == 0 {
            th.prelude();
        }
        ready.wait();
        loop {
            let mut at = turn.0.lock().unwrap();
            while *at < seq.len() && seq[*at] as usize % threads != t {
                at = turn.1.wait(at).unwrap();
            }
            let Some(&op) = seq.get(*at) else { break };
            if let (Some(m), Some(&a)) = (shm.op_marks.get(*at), areas.get(t)) {
                m.store(crate::kcov::count_at(a), Ordering::Relaxed);
            }
            drop(at);
            th.rng = Rng::new(op);
            th.step();
            *turn.0.lock().unwrap() += 1;
            turn.1.notify_all();
        }
        th.serve_all();
    };
    std::thread::scope(|scope| {
        for t in 1..threads {
            let body = &body;
            scope.spawn(move || {
                enable(t);
                body(t);
            });
        }
        body(0);
    });
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_notifications_are_answered_part_of_the_time() {
        let mut buf = Vec::new();
        for cookie in 0..200 {
            Return::FrozenBinder { cookie, is_frozen: 0 }.encode(&mut buf);
            Return::TransactionComplete.encode(&mut buf);
        }
        let (now, later) = frozen_answers(&mut Rng::new(3), &buf);
        assert_eq!(now.len() + later.len(), 200, "every BR_FROZEN_BINDER decided once");
        // FROZEN_DONE_QUARTERS = 2: about half each way, both states reached.
        assert!((70..130).contains(&now.len()), "{} of 200 answered at once", now.len());
        let mut all: Vec<u64> = now.iter().chain(&later).copied().collect();
        all.sort();
        assert_eq!(all, (0..200).collect::<Vec<_>>(), "the cookies are the notifications'");
    }

    #[test]
    fn a_rerequest_follows_its_clear_in_the_same_write() {
        let mut w = Vec::new();
        freeze_clear(&mut w, 3, 0xdead_0001, true);
        let (first, rest) = Command::decode(&w).unwrap();
        let (second, rest) = Command::decode(rest).unwrap();
        assert!(rest.is_empty());
        assert!(matches!(first, Command::ClearFreezeNotification { handle: 3, cookie: 0xdead_0001 }));
        assert!(matches!(second, Command::RequestFreezeNotification { handle: 3, cookie: 0xdead_0001 }));
        let mut w = Vec::new();
        freeze_clear(&mut w, 3, 1, false);
        assert!(Command::decode(&w).unwrap().1.is_empty(), "a plain clear is one command");
    }
}

/// Op seeds for the planted bug's path, found by replaying an op's first draws (the order
/// of `Thread::step` on a thread with no pending call, as after `prelude`): not a fuzzer
/// find, a check that the path is within the ops' reach and of `--replay` on both
/// drivers (docs/src/results/guided-fuzzing.md).
#[cfg(test)]
mod planted_path {
    use super::*;

    /// What an op seed does on thread 0 if it is one well-formed freeze command on fd 0:
    /// (sub-kind 0 request / 1 clear, the clear's re-request, the answer to a
    /// BR_FROZEN_BINDER that its read brings), or None.
    fn freeze_op(seed: u64, clear: bool) -> Option<(bool, bool)> {
        let mut r = Rng::new(seed);
        if r.weighted(&[50, 20, 18, 2, 1, 1, 1, 2, 2, 0]) != 0 || r.chance(1, 4000) {
            return None;
        }
        if r.weighted(&[60, 25, 15]) != 0 || !r.chance(7, 10) || r.weighted(&[0, 50, 20, 10, 8, 5, 4, 3]).max(1) != 1 {
            return None;
        }
        if r.weighted(&SEQ_SANE) != 15 || r.below(3) != clear as u64 {
            return None;
        }
        let again = if clear {
            // An active notification (chance 3/4), picked among one, the re-request's draw.
            if !r.chance(3, 4) {
                return None;
            }
            r.below(1);
            r.chance(REREQUEST_QUARTERS, 4)
        } else {
            // request_pick: a cleared one (none yet) or the one handle held, a fresh cookie.
            r.chance(2, 4);
            r.below(1);
            if r.chance(3, 4) {
                r.below(8);
            } else {
                r.next_u64();
            }
            false
        };
        // write_read's read size (unused: a well-formed write reads after).
        if r.weighted(&[15, 10, 50, 25]) != 0 {
            r.next_u64();
        }
        Some((again, r.chance(FROZEN_DONE_QUARTERS, 4)))
    }

    #[test]
    #[ignore = "prints seeds; see the module's comment"]
    fn print_planted_path() {
        let find =
            |clear: bool, want: (bool, bool)| (0..).step_by(2).find(|&s| freeze_op(s, clear) == Some(want)).unwrap();
        // A request answered at once; a clear and its re-request in one write, whose
        // BR_FROZEN_BINDER is answered at once; a clear: the warning.
        let seq = [find(false, (false, true)), find(true, (true, true)), find(true, (false, false))];
        let hex: Vec<String> = seq.iter().map(|s| format!("{s:#x}")).collect();
        println!("{}", hex.join(","));
        let n = 1u64 << 20;
        let count = |clear, want| (0..n).filter(|&s| freeze_op(s, clear) == Some(want)).count() as f64 / n as f64;
        println!(
            "per op: request answered {:.5}, clear+re-request {:.5}, clear {:.5}",
            count(false, (false, true)),
            count(true, (true, true)) + count(true, (true, false)),
            count(true, (false, false)) + count(true, (false, true))
        );
    }
}

/// Op seeds for fuzz-deep's planted path (fuzz-deep/0001: the third completed death
/// notification request/clear cycle on one ref), found like `planted_path`'s: an op's first
/// draws replayed on the host in `Thread::step`'s order. Not a fuzzer find: a check that the
/// path is within the ops' reach and that `--replay` brings the warning back on fuzz-deep only
/// (docs/src/results/guided-fuzzing.md, 2026-12-06).
#[cfg(test)]
mod deep_path {
    use super::*;

    /// Whether an op seed, on thread 0 with no pending call, is one well-formed death
    /// notification command on fd 1 (whose one ref is handle 0): a request, or (`clear`) a
    /// clear that names the active notification.
    fn death_op(seed: u64, clear: bool) -> bool {
        let mut r = Rng::new(seed);
        if r.weighted(&[50, 20, 18, 2, 1, 1, 1, 2, 2, 0]) != 0 || r.chance(1, 4000) {
            return false;
        }
        if r.weighted(&[60, 25, 15]) == 0 || !r.chance(7, 10) || r.weighted(&[0, 50, 20, 10, 8, 5, 4, 3]).max(1) != 1 {
            return false;
        }
        if r.weighted(&SEQ_SANE) != 12 + clear as usize {
            return false;
        }
        // A request registers whichever cookie it draws (the ref has none); a clear names the
        // active notification (`clear_target`: chance 3/4, then a pick among one).
        !clear || r.chance(3, 4)
    }

    #[test]
    #[ignore = "prints seeds; see the module's comment"]
    fn print_deep_path() {
        let find = |clear: bool| (0..).step_by(2).find(|&s| death_op(s, clear)).unwrap();
        let (req, clr) = (find(false), find(true));
        let seq: Vec<String> = [req, clr, req, clr, req, clr].iter().map(|s| format!("\"{s:#x}\"")).collect();
        println!("{{\"seq\": [{}], \"threads\": 2, \"flavor\": \"fuzz-deep\"}}", seq.join(", "));
        let n = 1u64 << 20;
        let count = |clear| (0..n).filter(|&s| death_op(s, clear)).count() as f64 / n as f64;
        println!("per op, this narrow form on fd 1: request {:.5}, clear {:.5}", count(false), count(true));
    }
}
