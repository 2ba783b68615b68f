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
    fn a(&self, off: usize) -> u64 {
        self.arena as u64 + off as u64
    }

    fn put(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= ARENA);
        // SAFETY: [off, off+len) lies in this thread's arena (asserted); the kernel only
        // writes it during this thread's own syscalls, and none is running now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena.add(off), bytes.len()) };
    }

    fn get(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= ARENA);
        let mut v = vec![0u8; len];
        // SAFETY: as in `put`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.add(off), v.as_mut_ptr(), len) };
        v
    }

    /// A pointer for the kernel to write through: our arena or memory it cannot write.
    fn out_ptr(&mut self, valid: u64) -> u64 {
        if self.sane {
            return valid;
        }
        match self.rng.weighted(&[70, 6, 6, 6, 6, 6]) {
            0 => valid,
            1 => 0,
            2 => self.sh.bad_page,
            3 => KERNEL_PTR,
            4 => self.sh.devs[0].map + 64, // read-only binder mapping
            _ => main_text(),
        }
    }

    /// A pointer for the kernel to read from: anything but our live Rust memory matters
    /// only for reads, so add misaligned and random addresses.
    fn in_ptr(&mut self, valid: u64) -> u64 {
        if self.sane {
            return valid;
        }
        match self.rng.weighted(&[70, 5, 5, 5, 5, 5, 5]) {
            0 => valid,
            1 => 0,
            2 => self.sh.bad_page,
            3 => KERNEL_PTR,
            4 => valid + 1 + self.rng.below(7),
            5 => self.sh.devs[0].map + self.rng.below(4096),
            _ => self.rng.next_u64(),
        }
    }

    fn dev(&mut self) -> (usize, RawFd) {
        let i = self.rng.weighted(&[60, 25, 15]);
        if i == 2 {
            if let Some(p) = &self.private {
                self.cur_dev = usize::MAX;
                return (usize::MAX, p.fd);
            }
        }
        let i = i.min(self.sh.devs.len() - 1);
        self.cur_dev = i;
        (i, self.sh.devs[i].fd)
    }

    fn aw(i: usize) -> usize {
        i.min(2)
    }

    fn fdev(&self, i: usize) -> Option<&FDev> {
        if i == usize::MAX {
            self.private.as_ref()
        } else {
            self.sh.devs.get(i)
        }
    }

    fn handle(&mut self) -> u32 {
        let cur = self.cur_dev;
        let known: Vec<u32> =
            self.sh.handles.lock().map(|h| h.iter().filter(|x| x.0 == cur).map(|x| x.1).collect()).unwrap_or_default();
        let w: &[u32] = if self.sane { &[40, 60, 0, 0] } else { &[35, 40, 15, 10] };
        match self.rng.weighted(w) {
            1 if !known.is_empty() => *self.rng.pick(&known),
            0 | 1 => 0,
            2 => self.rng.range(1, 24) as u32,
            _ => self.rng.next_u32(),
        }
    }

    fn node_ptr(&mut self) -> (u64, u64) {
        let p = 0x1000 + 0x10 * self.rng.below(NODE_PTRS);
        // The same ptr with another cookie is an error the driver must catch.
        let cookie = if !self.sane && self.rng.chance(1, 5) { self.rng.next_u64() } else { p ^ 0xc00c };
        (p, cookie)
    }

    fn cookie(&mut self) -> u64 {
        if self.rng.chance(3, 4) {
            0xdead_0000 + self.rng.below(8)
        } else {
            self.rng.next_u64()
        }
    }

    fn tx_flags(&mut self) -> u32 {
        let mut f = 0;
        if self.rng.chance(2, 5) {
            f |= TF_ONE_WAY;
        }
        if self.rng.chance(3, 10) {
            f |= TF_ACCEPT_FDS;
        }
        if self.rng.chance(1, 10) {
            f |= TF_CLEAR_BUF;
        }
        if self.rng.chance(1, 20) {
            f |= TF_UPDATE_TXN;
        }
        if self.sane {
            let ow = if self.rng.chance(3, 5) { TF_ONE_WAY } else { 0 };
            return (f & (TF_ACCEPT_FDS | TF_CLEAR_BUF)) | ow;
        }
        if self.rng.chance(1, 20) {
            f |= TF_STATUS_CODE;
        }
        if self.rng.chance(1, 10) {
            f |= self.rng.next_u32();
        }
        f
    }

    /// Android's node priority bits (a minimum policy and priority, INHERIT_RT), which the Rust
    /// driver reads with `priority_inheritance` on. RT minimums stay low (1-5) so that workers
    /// raised to them cannot starve the rest of the guest.
    fn priority_flags(&mut self) -> u32 {
        let policy = self.rng.below(4) as u32;
        let prio = if policy == 1 || policy == 2 { 1 + self.rng.below(5) as u32 } else { self.rng.below(256) as u32 };
        let rt = if self.rng.chance(1, 2) { FLAT_BINDER_FLAG_INHERIT_RT } else { 0 };
        (policy << FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT) | prio | rt
    }

    /// A random object at the current end of `data` (8-aligned).
    fn object(&mut self, data: &mut Vec<u8>, sg_parents: &mut Vec<(u64, u64)>, nobj: u64) -> u64 {
        while !data.len().is_multiple_of(8) {
            data.push(0);
        }
        let off = data.len() as u64;
        let w: &[u32] = if self.sane { &[30, 8, 30, 8, 24, 0, 0, 0] } else { &[25, 8, 25, 8, 12, 12, 6, 4] };
        let obj = match self.rng.weighted(w) {
            0 | 1 => {
                let (ptr, cookie) = self.node_ptr();
                let flags = if self.rng.chance(1, 3) {
                    FLAT_BINDER_FLAG_ACCEPTS_FDS
                } else if self.rng.chance(1, 2) {
                    self.priority_flags()
                } else {
                    self.rng.below(4) as u32
                };
                Object::Binder { weak: self.rng.chance(1, 4), flags, ptr, cookie }
            }
            2 | 3 => {
                let handle = self.handle();
                Object::Handle { weak: self.rng.chance(1, 4), flags: 0, handle, cookie: 0 }
            }
            4 => {
                let fw: &[u32] = if self.sane { &[80, 20, 0, 0] } else { &[55, 15, 15, 15] };
                let mut fd = match self.rng.weighted(fw) {
                    0 => self.sh.null_fd as u32,
                    1 if self.sh.binder_fds => self.sh.devs[0].fd as u32,
                    1 => self.sh.devs[0].fd as u32 + 1000,
                    2 => u32::MAX,
                    _ => self.rng.below(128) as u32,
                };
                if !self.sh.binder_fds
                    && self.sh.all_binder_fds.lock().map(|v| v.contains(&(fd as RawFd))).unwrap_or(true)
                {
                    fd = self.sh.null_fd as u32;
                }
                Object::Fd { fd, cookie: self.rng.next_u64() }
            }
            5 => {
                // A scatter-gather buffer from the arena (or elsewhere).
                let len = self.rng.below(512);
                let src = A_DATA + 48 * 1024 + self.rng.below(8 * 1024) as usize;
                let buffer = self.in_ptr(self.a(src));
                let has_parent = !sg_parents.is_empty() && self.rng.chance(1, 3);
                let (parent, parent_offset) = if has_parent {
                    let (pi, plen) = *self.rng.pick(sg_parents);
                    (pi, self.rng.below(plen.max(1) + 16) & !7)
                } else {
                    (self.rng.below(nobj + 2), 0)
                };
                sg_parents.push((nobj, len));
                Object::Ptr {
                    flags: if has_parent { BINDER_BUFFER_FLAG_HAS_PARENT } else { 0 },
                    buffer,
                    length: len,
                    parent,
                    parent_offset,
                }
            }
            6 => {
                let (parent, plen) = if sg_parents.is_empty() { (nobj, 0) } else { *self.rng.pick(sg_parents) };
                Object::Fda { num_fds: self.rng.below(4), parent, parent_offset: self.rng.below(plen + 8) & !3 }
            }
            _ => {
                // Junk where an object should be.
                data.extend_from_slice(&self.rng.bytes(24));
                return off;
            }
        };
        obj.encode(data);
        off
    }

    /// Builds a transaction payload in the arena; returns the transaction data and the
    /// scatter-gather size to declare.
    fn transaction(&mut self, handle: u32, flags: u32, sg_ok: bool) -> (TransactionData, u64) {
        let mut data: Vec<u8> = Vec::new();
        let sg_ok = sg_ok && self.sane;
        let len = match self.rng.weighted(&[50, 30, 15, 5]) {
            0 => self.rng.below(64),
            1 => self.rng.below(1024),
            2 => self.rng.below(16 * 1024),
            _ => self.rng.below(40 * 1024),
        } as usize;
        let nobj = if self.rng.chance(1, 2) { 0 } else { self.rng.range(1, 4) };
        let mut offsets = vec![];
        let mut parents = vec![];
        let mut fill = self.rng.bytes(len);
        for k in 0..nobj {
            let cut = fill.len().min(self.rng.below(64) as usize);
            data.extend(fill.drain(..cut));
            offsets.push(self.object(&mut data, &mut parents, k));
        }
        data.extend(fill);
        if sg_ok && self.rng.chance(1, 2) {
            // A well-formed scatter-gather pair: a buffer object holding an fd array,
            // and the fd array object pointing into it.
            let nfds = self.rng.range(1, 3);
            let fds: Vec<u8> = (0..nfds).flat_map(|_| (self.sh.null_fd as u32).to_ne_bytes()).collect();
            let blob_off = A_DATA + 48 * 1024;
            self.put(blob_off, &fds);
            while !data.len().is_multiple_of(8) {
                data.push(0);
            }
            let k = offsets.len() as u64;
            offsets.push(data.len() as u64);
            Object::Ptr { flags: 0, buffer: self.a(blob_off), length: fds.len() as u64, parent: 0, parent_offset: 0 }
                .encode(&mut data);
            offsets.push(data.len() as u64);
            Object::Fda { num_fds: nfds, parent: k, parent_offset: 0 }.encode(&mut data);
            parents.push((k, fds.len() as u64));
        }
        // Data below the offsets (at +40 KiB) and the scatter-gather blobs (+48 KiB).
        data.truncate(40 * 1024 - 64);
        if self.sane {
            let off_bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_ne_bytes()).collect();
            let (data_off, offs_off) = (A_DATA, A_DATA + 40 * 1024);
            self.put(data_off, &data);
            self.put(offs_off, &off_bytes);
            let sg: u64 = parents.iter().map(|p| (p.1 + 7) & !7).sum();
            let tr = TransactionData {
                target: handle as u64,
                cookie: 0,
                code: self.rng.below(16) as u32,
                flags,
                data_size: data.len() as u64,
                offsets_size: off_bytes.len() as u64,
                buffer: self.a(data_off),
                offsets: self.a(offs_off),
                ..Default::default()
            };
            return (tr, sg);
        }
        // Mutate the offsets now and then.
        if !offsets.is_empty() && self.rng.chance(1, 2) {
            let i = self.rng.below(offsets.len() as u64) as usize;
            offsets[i] = match self.rng.below(4) {
                0 => offsets[i] + 1 + self.rng.below(7),
                1 => data.len() as u64 + self.rng.below(64),
                2 => u64::MAX - self.rng.below(16),
                _ => offsets[i].saturating_sub(8),
            };
        }
        if offsets.len() > 1 && self.rng.chance(1, 10) {
            offsets.reverse();
        }
        let off_bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_ne_bytes()).collect();
        let data_off = A_DATA;
        let offs_off = A_DATA + 40 * 1024;
        self.put(data_off, &data);
        self.put(offs_off, &off_bytes[..off_bytes.len().min(8 * 1024)]);
        let mut data_size = data.len() as u64;
        let mut offsets_size = off_bytes.len() as u64;
        match self.rng.weighted(&[60, 10, 10, 10, 10]) {
            1 => data_size = self.rng.next_u64() >> self.rng.below(64),
            2 => offsets_size = offsets_size.wrapping_add(self.rng.range(1, 7)),
            3 => offsets_size = self.rng.next_u64() >> self.rng.below(64),
            4 => data_size += self.rng.below(4096),
            _ => {}
        }
        let sg: u64 = parents.iter().map(|p| (p.1 + 7) & !7).sum::<u64>()
            + if self.rng.chance(1, 4) { self.rng.below(256) } else { 0 };
        let tr = TransactionData {
            target: handle as u64,
            cookie: self.rng.next_u64() & 0xff,
            code: if self.rng.chance(9, 10) { self.rng.below(16) as u32 } else { self.rng.next_u32() },
            flags,
            sender_pid: 0,
            sender_euid: 0,
            data_size,
            offsets_size,
            buffer: self.in_ptr(self.a(data_off)),
            offsets: self.in_ptr(self.a(offs_off)),
        };
        (tr, sg)
    }

    /// Appends one command (valid, semi-valid or malformed) to `w`.
    fn command(&mut self, w: &mut Vec<u8>, dev: usize) {
        let k = if self.sane && self.sh.sequence {
            self.rng.weighted(&SEQ_SANE)
        } else if self.sane {
            self.rng.weighted(&[24, 14, 6, 3, 12, 3, 3, 3, 3, 4, 4, 3, 3, 2, 2, 2, 0, 0, 0, 0])
        } else {
            self.rng.weighted(&[20, 8, 6, 3, 12, 3, 3, 3, 3, 4, 4, 3, 3, 2, 2, 2, 2, 3, 4, 3])
        };
        let cmd = match k {
            0..=3 => {
                let handle = self.handle();
                let flags = self.tx_flags();
                // Well-formed replies answer a pending incoming call (whose buffer goes
                // first); without one, send a transaction instead.
                let k = if (k == 1 || k == 3) && self.sane && !self.pending_in.iter().any(|p| p.0 == dev) {
                    k - 1
                } else {
                    k
                };
                if (k == 1 || k == 3) && self.sane {
                    if let Some(i) = self.pending_in.iter().position(|p| p.0 == dev) {
                        let (_, buf) = self.pending_in.remove(i);
                        if let Some(j) = self.buffers.iter().position(|b| *b == (dev, buf)) {
                            self.buffers.remove(j);
                            let at = w.len();
                            Command::FreeBuffer(buf).encode(w);
                            self.emitted_frees.push((at, w.len(), dev, buf));
                        }
                    }
                }
                let reply = k == 1 || k == 3;
                let mut flags = if reply { flags & !TF_ONE_WAY } else { flags };
                if !reply && self.sane && self.awaiting[Self::aw(dev)] {
                    flags |= TF_ONE_WAY;
                }
                if !reply && flags & TF_ONE_WAY == 0 {
                    self.awaiting[Self::aw(dev)] = true;
                }
                let (tr, sg) = self.transaction(handle, flags, k >= 2);
                match k {
                    0 => Command::Transaction(tr),
                    1 => Command::Reply(tr),
                    2 => Command::TransactionSg { data: tr, buffers_size: sg },
                    _ => Command::ReplySg { data: tr, buffers_size: sg },
                }
            }
            4 => {
                // Mostly our own received buffers; garbage that can never be a buffer
                // start otherwise (so that no other thread's buffer is freed under it).
                let own = self.buffers.iter().position(|b| b.0 == dev);
                match own {
                    Some(i) if self.rng.chance(4, 5) => {
                        let (_, p) = self.buffers.remove(i).unwrap();
                        self.pending_in.retain(|x| *x != (dev, p));
                        let at = w.len();
                        Command::FreeBuffer(p).encode(w);
                        self.emitted_frees.push((at, w.len(), dev, p));
                        self.sh.shm.bump(stat::BC_COMMANDS);
                        return;
                    }
                    _ => {
                        let base = self.fdev(dev).map(|d| d.map).unwrap_or(0);
                        Command::FreeBuffer(match self.rng.below(3) {
                            0 => base + 1 + 2 * self.rng.below(1 << 19),
                            1 => self.rng.next_u64() | 1,
                            _ => 0,
                        })
                    }
                }
            }
            5 => Command::IncRefs(self.handle()),
            6 => Command::Acquire(self.handle()),
            7 => Command::Release(self.handle()),
            8 => Command::DecRefs(self.handle()),
            9 | 10 => {
                let (ptr, cookie) = if !self.incs.is_empty() && self.rng.chance(3, 4) {
                    let i = self.rng.below(self.incs.len() as u64) as usize;
                    self.incs.swap_remove(i)
                } else {
                    self.node_ptr()
                };
                let pc = binder::protocol::PtrCookie { ptr, cookie };
                if k == 9 {
                    Command::IncRefsDone(pc)
                } else {
                    Command::AcquireDone(pc)
                }
            }
            11 => match self.rng.below(3) {
                0 => Command::RegisterLooper,
                1 => Command::EnterLooper,
                _ => Command::ExitLooper,
            },
            12 => {
                let (handle, cookie) = self.request_target(dev, false);
                Command::RequestDeathNotification { handle, cookie }
            }
            13 => {
                let (handle, cookie) = self.clear_target(dev, false);
                Command::ClearDeathNotification { handle, cookie }
            }
            14 => {
                let c = if !self.deaths.is_empty() && self.rng.chance(3, 4) {
                    self.deaths.remove(0)
                } else {
                    self.cookie()
                };
                Command::DeadBinderDone(c)
            }
            15 => match self.rng.below(3) {
                0 => {
                    let (handle, cookie) = self.request_target(dev, true);
                    Command::RequestFreezeNotification { handle, cookie }
                }
                1 => {
                    let (handle, cookie) = self.clear_target(dev, true);
                    let again = self.sane && self.sh.sequence && self.rng.chance(REREQUEST_QUARTERS, 4);
                    if again {
                        self.note_notif(dev, handle, cookie, true, true);
                    }
                    freeze_clear(w, handle, cookie, again);
                    self.sh.shm.bump(stat::BC_COMMANDS);
                    return;
                }
                _ => {
                    let c = self
                        .pending_frozen(dev)
                        .or_else(|| self.notif(dev, true, 3, None).map(|n| n.1))
                        .unwrap_or_else(|| self.cookie());
                    Command::FreezeNotificationDone(c)
                }
            },
            16 => {
                if self.rng.chance(1, 2) {
                    Command::AttemptAcquire { priority: self.rng.next_u32() as i32, desc: self.handle() }
                } else {
                    Command::AcquireResult(self.rng.next_u32() as i32)
                }
            }
            17 => {
                // A code the driver does not know.
                self.sh.shm.bump(stat::MALFORMED);
                let nr = self.rng.range(22, 255) as u8;
                let size = self.rng.below(80) as usize;
                w.extend_from_slice(&ioc(self.rng.below(4) as u32, b'c', nr, size).to_ne_bytes());
                w.extend_from_slice(&self.rng.bytes(size));
                return;
            }
            18 => {
                self.sh.shm.bump(stat::MALFORMED);
                let n = self.rng.range(1, 16) as usize;
                w.extend_from_slice(&self.rng.bytes(n));
                return;
            }
            _ => {
                // A known command cut short (only useful last in the stream).
                self.sh.shm.bump(stat::MALFORMED);
                let mut b = Vec::new();
                Command::Transaction(TransactionData::default()).encode(&mut b);
                let cut = self.rng.range(1, b.len() as u64 - 1) as usize;
                w.extend_from_slice(&b[..cut]);
                return;
            }
        };
        self.sh.shm.bump(stat::BC_COMMANDS);
        cmd.encode(w);
    }

    /// In a well-formed op of a sequence, mostly: the cookie of a `BR_FROZEN_BINDER` on `dev`
    /// still waiting for its done (taken: the done answers it).
    fn pending_frozen(&mut self, dev: usize) -> Option<u64> {
        if !self.sh.sequence || !self.sane || !self.rng.chance(3, 4) {
            return None;
        }
        let mut v = self.sh.frozen.lock().ok()?;
        let i = v.iter().position(|f| f.0 == dev)?;
        Some(v.remove(i).1)
    }

    /// Remembers a well-formed op's notification request (`active`) or clear (sequences only:
    /// the classic loop keeps its distribution).
    fn note_notif(&mut self, dev: usize, handle: u32, cookie: u64, freeze: bool, active: bool) {
        if !self.sh.sequence || !self.sane {
            return;
        }
        if let Ok(mut v) = self.sh.notifs.lock() {
            let n = Notif { dev, handle, cookie, freeze, active };
            match v.iter_mut().find(|x| (x.dev, x.handle, x.cookie, x.freeze) == (dev, handle, cookie, freeze)) {
                Some(x) => x.active = active,
                None if active => {
                    if v.len() >= MAX_NOTIFS {
                        v.remove(0);
                    }
                    v.push(n);
                }
                None => {}
            }
        }
    }

    /// In a well-formed op of a sequence, `quarters`/4 of the time a notification requested
    /// earlier on `dev` (still active, cleared since, or either): its handle and cookie.
    fn notif(&mut self, dev: usize, freeze: bool, quarters: u64, active: Option<bool>) -> Option<(u32, u64)> {
        if !self.sh.sequence || !self.sane || !self.rng.chance(quarters, 4) {
            return None;
        }
        let known: Vec<(u32, u64)> = self
            .sh
            .notifs
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|n| n.dev == dev && n.freeze == freeze && active.is_none_or(|a| n.active == a))
                    .map(|n| (n.handle, n.cookie))
                    .collect()
            })
            .unwrap_or_default();
        (!known.is_empty()).then(|| *self.rng.pick(&known))
    }

    /// The handle and cookie of a notification request. In a well-formed op of a sequence:
    /// half the time one cleared before (libbinder's cookie is the proxy's address, so a
    /// client that registers again after a clear uses the same one), else a handle this fd
    /// holds a ref on. Remembered as active.
    fn request_target(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        let (handle, cookie) = self.request_pick(dev, freeze);
        self.note_notif(dev, handle, cookie, freeze, true);
        (handle, cookie)
    }

    /// The handle and cookie of a notification clear: in a well-formed op of a sequence,
    /// mostly an active one. Remembered as cleared.
    fn clear_target(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        let (handle, cookie) = self.notif(dev, freeze, 3, Some(true)).unwrap_or_else(|| (self.handle(), self.cookie()));
        self.note_notif(dev, handle, cookie, freeze, false);
        (handle, cookie)
    }

    fn request_pick(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        if let Some(n) = self.notif(dev, freeze, 2, Some(false)) {
            return n;
        }
        if self.sh.sequence && self.sane {
            let known: Vec<u32> = self
                .sh
                .handles
                .lock()
                .map(|h| h.iter().filter(|x| x.0 == dev).map(|x| x.1).collect())
                .unwrap_or_default();
            if !known.is_empty() {
                let h = *self.rng.pick(&known);
                return (h, self.cookie());
            }
        }
        (self.handle(), self.cookie())
    }

    fn count_errno(&self, r: libc::c_int) {
        if r >= 0 {
            self.sh.shm.bump(stat::IOCTL_OK);
        } else {
            self.sh.shm.bump(shm::errno_stat(errno()));
        }
    }

    /// One BINDER_WRITE_READ with a random command stream and/or read.
    fn write_read(&mut self, with_write: bool) {
        let (di, fd) = self.dev();
        self.sane = self.rng.chance(7, 10);
        self.emitted_frees.clear();
        let mut w = Vec::new();
        if with_write {
            let n = self.rng.weighted(&[0, 50, 20, 10, 8, 5, 4, 3]).max(1);
            for _ in 0..n {
                self.command(&mut w, di);
            }
        }
        w.truncate(64 * 1024);
        self.put(A_WRITE, &w);
        let first = w.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())).unwrap_or(0);
        self.sh.shm.slots[self.slot].threads[self.tix].detail.store(first as u64, Ordering::Relaxed);
        let read_size = match self.rng.weighted(&[15, 10, 50, 25]) {
            0 => 0,
            1 => self.rng.below(80),
            2 => 256 + self.rng.below(768),
            _ => 4096 + self.rng.below(60 * 1024),
        };
        let read_size = if with_write { read_size } else { read_size.max(4) };
        // Well-formed: write first, and read only what is there (the Rust driver logs
        // every EAGAIN, and the console is slow).
        let read_size = if self.sane && with_write { 0 } else { read_size };
        if self.sane && !with_write && !self.readable(fd) {
            return;
        }
        let mut write_size = w.len() as u64;
        if !self.sane && self.rng.chance(1, 5) {
            write_size = match self.rng.below(3) {
                0 => write_size.saturating_sub(self.rng.range(1, 8)),
                1 => write_size + self.rng.below(256),
                _ => self.rng.next_u64() >> self.rng.below(64),
            };
        }
        let read_consumed0 = if !self.sane && self.rng.chance(1, 5) { self.rng.below(read_size + 8) } else { 0 };
        let write_consumed0 = if !self.sane && self.rng.chance(1, 8) { self.rng.below(write_size + 8) } else { 0 };
        let read_ptr = self.a(A_READ);
        let bwr = binder_write_read {
            write_size,
            write_consumed: write_consumed0,
            write_buffer: self.in_ptr(self.a(A_WRITE)),
            read_size,
            read_consumed: read_consumed0,
            read_buffer: self.out_ptr(read_ptr),
        };
        // SAFETY: binder_write_read is plain old data (48 bytes, no padding).
        let bwr_bytes = unsafe { std::slice::from_raw_parts(&bwr as *const _ as *const u8, 48) }.to_vec();
        self.put(A_ARGS, &bwr_bytes);
        let arg = self.out_ptr(self.a(A_ARGS));
        // SAFETY: the kernel reads and writes the 48-byte descriptor at `arg` (our arena
        // or an address it cannot write) and writes returns at `read_buffer` (arena or
        // unwritable), within read_size bytes that fit in the arena's read region.
        let r = unsafe { libc::ioctl(fd, BINDER_WRITE_READ as _, arg as *mut libc::c_void) };
        self.count_errno(r);
        // Which of our frees did the driver execute?
        let consumed = if arg == self.a(A_ARGS) && bwr.write_buffer == self.a(A_WRITE) {
            let back = self.get(A_ARGS, 48);
            u64::from_ne_bytes(back[8..16].try_into().unwrap()) as usize
        } else {
            0
        };
        for (start, end, d, buf) in std::mem::take(&mut self.emitted_frees) {
            if (start as u64) >= write_consumed0 && end <= consumed && (end as u64) <= write_size {
                self.sh.shm.bump(stat::BUFFERS_FREED);
            } else {
                self.buffers.push_back((d, buf));
            }
        }
        if self.sane && with_write && self.readable(fd) {
            self.write_read_sane_read(di, fd);
            return;
        }
        if arg != self.a(A_ARGS) || bwr.read_buffer != read_ptr || read_size == 0 {
            return;
        }
        let back = self.get(A_ARGS, 48);
        let consumed = u64::from_ne_bytes(back[32..40].try_into().unwrap());
        if consumed <= read_consumed0 || consumed > read_size.min((64 * 1024) as u64) {
            return;
        }
        let got = self.get(A_READ + read_consumed0 as usize, (consumed - read_consumed0) as usize);
        self.returns(di, &got);
    }

    fn readable(&self, fd: RawFd) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no waiting.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
    }

    /// Takes note of what the driver returned.
    fn returns(&mut self, di: usize, buf: &[u8]) {
        if self.sh.sequence {
            self.answer_frozen(di, buf);
        }
        for r in ReturnReader::new(buf) {
            let r = match r {
                Ok(r) => r,
                Err(_) => {
                    self.sh.shm.bump(stat::UNDECODABLE);
                    return;
                }
            };
            let s = match r {
                Return::Transaction(t) | Return::TransactionSecCtx { data: t, .. } | Return::Reply(t) => {
                    if matches!(r, Return::Reply(_)) {
                        self.awaiting[Self::aw(di)] = false;
                    }
                    self.received(di, &t, !matches!(r, Return::Reply(_)));
                    if matches!(r, Return::Reply(_)) {
                        stat::BR_REPLY
                    } else {
                        stat::BR_TRANSACTION
                    }
                }
                Return::TransactionComplete => stat::BR_TC,
                Return::FailedReply | Return::DeadReply | Return::FrozenReply => {
                    self.awaiting[Self::aw(di)] = false;
                    match r {
                        Return::FailedReply => stat::BR_FAILED,
                        Return::DeadReply => stat::BR_DEAD,
                        _ => stat::BR_FROZEN,
                    }
                }
                Return::IncRefs(pc) | Return::Acquire(pc) => {
                    if self.incs.len() < 32 {
                        self.incs.push((pc.ptr, pc.cookie));
                    }
                    if matches!(r, Return::IncRefs(_)) {
                        stat::BR_INCREFS
                    } else {
                        stat::BR_ACQUIRE
                    }
                }
                Return::Release(_) => stat::BR_RELEASE,
                Return::DecRefs(_) => stat::BR_DECREFS,
                Return::DeadBinder(c) => {
                    if self.deaths.len() < 32 {
                        self.deaths.push(c);
                    }
                    stat::BR_DEAD_BINDER
                }
                Return::ClearDeathNotificationDone(_) => stat::BR_CLEAR_DEATH,
                Return::Error(_) => stat::BR_ERROR,
                Return::SpawnLooper => stat::BR_SPAWN_LOOPER,
                Return::Noop => continue,
                _ => stat::BR_OTHER,
            };
            self.sh.shm.bump(s);
        }
    }

    /// A sequence's `BR_FROZEN_BINDER`s: answered at once or remembered as pending.
    fn answer_frozen(&mut self, di: usize, buf: &[u8]) {
        let (now, later) = frozen_answers(&mut self.rng, buf);
        if let Ok(mut v) = self.sh.frozen.lock() {
            for c in later {
                if v.len() >= MAX_NOTIFS {
                    v.remove(0);
                }
                v.push((di, c));
            }
        }
        if now.is_empty() {
            return;
        }
        let mut b = Vec::new();
        for c in now {
            Command::FreezeNotificationDone(c).encode(&mut b);
            self.sh.shm.bump(stat::BC_COMMANDS);
        }
        let Some(fd) = self.fdev(di).map(|d| d.fd) else { return };
        self.write_cmds(di, fd, &b);
    }

    /// A received transaction or reply: learn its handles, close its fds, keep the buffer.
    fn received(&mut self, di: usize, t: &TransactionData, is_call: bool) {
        let Some(d) = self.fdev(di) else { return };
        // Only our own, still mapped buffers are read (nobody else frees them).
        if d.readable(t.buffer, t.data_size)
            && t.offsets_size.is_multiple_of(8)
            && d.readable(t.offsets, t.offsets_size)
        {
            // SAFETY: both ranges lie in our live read-only binder mapping (checked), in a
            // buffer the driver just handed to this thread and that only this thread frees,
            // so its pages are in use and mapped.
            let (data, offs) = unsafe {
                (
                    std::slice::from_raw_parts(t.buffer as *const u8, t.data_size as usize).to_vec(),
                    std::slice::from_raw_parts(t.offsets as *const u8, t.offsets_size as usize).to_vec(),
                )
            };
            let offs = binder::parcel::decode_offsets(&offs);
            let mut acquire = vec![];
            for o in objects_at(&data, &offs).into_iter().flatten() {
                match o.1 {
                    Object::Handle { handle, .. } => {
                        let new = match self.sh.handles.lock() {
                            Ok(mut h) if !h.contains(&(di, handle)) => {
                                if h.len() >= MAX_HANDLES {
                                    h.remove(0);
                                }
                                h.push((di, handle));
                                true
                            }
                            _ => false,
                        };
                        // Keep it beyond this buffer (its reference goes with it), as
                        // libbinder does, most of the time.
                        if new && self.rng.chance(3, 4) {
                            acquire.push(handle);
                        }
                    }
                    Object::Fd { fd, .. } => {
                        // The driver installed it for us.
                        self.sh.shm.bump(stat::FDS_RECEIVED);
                        // SAFETY: a fresh fd the driver created in our table; we own it.
                        unsafe { libc::close(fd as i32) };
                    }
                    _ => {}
                }
            }
            if !acquire.is_empty() {
                let mut b = Vec::new();
                for h in acquire {
                    Command::Acquire(h).encode(&mut b);
                }
                let fd = self.fdev(di).map(|d| d.fd).unwrap_or(-1);
                self.write_cmds(di, fd, &b);
            }
        }
        // Most of the time behave like a server: free oneway buffers at once (the next
        // oneway call to the node waits for that) and answer calls right away.
        // (Sometimes not: a server that sits on buffers and calls is worth fuzzing too.)
        if is_call
            && self
                .rng
                .chance(if t.flags & TF_ONE_WAY != 0 { 49 } else { 9 }, if t.flags & TF_ONE_WAY != 0 { 50 } else { 10 })
        {
            self.serve(di, t);
            return;
        }
        self.buffers.push_back((di, t.buffer));
        if is_call && t.flags & TF_ONE_WAY == 0 && self.pending_in.len() < 16 {
            self.pending_in.push((di, t.buffer));
        }
        if self.buffers.len() > MAX_BUFFERS {
            // Free the oldest ourselves so the mapping does not stay full.
            let (odi, p) = self.buffers.pop_front().unwrap();
            self.pending_in.retain(|x| *x != (odi, p));
            if let Some(fd) = self.fdev(odi).map(|d| d.fd) {
                let mut b = Vec::new();
                Command::FreeBuffer(p).encode(&mut b);
                self.write_cmds(odi, fd, &b);
                self.sh.shm.bump(stat::BUFFERS_FREED);
            }
        }
    }

    /// Frees a received call's buffer and, for a synchronous one, replies (sometimes with
    /// a node of ours in the reply, which spreads handles).
    fn serve(&mut self, di: usize, t: &TransactionData) {
        let Some(fd) = self.fdev(di).map(|d| d.fd) else { return };
        let mut w = Vec::new();
        Command::FreeBuffer(t.buffer).encode(&mut w);
        self.sh.shm.bump(stat::BUFFERS_FREED);
        if t.flags & TF_ONE_WAY == 0 {
            let n = self.rng.below(256) as usize;
            let mut data = self.rng.bytes(n);
            let mut offs: Vec<u8> = vec![];
            if self.rng.chance(1, 3) {
                while !data.len().is_multiple_of(8) {
                    data.push(0);
                }
                offs.extend_from_slice(&(data.len() as u64).to_ne_bytes());
                let (ptr, cookie) = self.node_ptr();
                Object::binder(ptr, cookie).encode(&mut data);
            }
            let (data_off, offs_off) = (A_DATA, A_DATA + 40 * 1024);
            self.put(data_off, &data);
            self.put(offs_off, &offs);
            Command::Reply(TransactionData {
                data_size: data.len() as u64,
                offsets_size: offs.len() as u64,
                buffer: self.a(data_off),
                offsets: self.a(offs_off),
                ..Default::default()
            })
            .encode(&mut w);
            self.sh.shm.bump(stat::BC_COMMANDS);
        }
        self.write_cmds(di, fd, &w);
    }

    /// Writes our own bookkeeping commands (frees, replies, acquires) so that they really
    /// reach the driver: it takes no command from a thread that has an error return
    /// waiting, so drain the returns (handling them) and retry.
    fn write_cmds(&mut self, di: usize, fd: RawFd, cmds: &[u8]) {
        let mut done = 0usize;
        for _ in 0..4 {
            if done >= cmds.len() {
                return;
            }
            self.put(A_WRITE, &cmds[done..]);
            let mut bwr = binder_write_read {
                write_size: (cmds.len() - done) as u64,
                write_buffer: self.a(A_WRITE),
                ..Default::default()
            };
            // SAFETY: the descriptor is a live local; the commands are in our arena.
            let r = unsafe { libc::ioctl(fd, BINDER_WRITE_READ as _, &mut bwr as *mut binder_write_read) };
            self.count_errno(r);
            done += bwr.write_consumed as usize;
            if r < 0 || done >= cmds.len() {
                return;
            }
            self.write_read_sane_read(di, fd);
        }
    }

    /// A plain read of what the driver has for this thread.
    fn write_read_sane_read(&mut self, di: usize, fd: RawFd) {
        let mut bwr = binder_write_read { read_size: 4096, read_buffer: self.a(A_READ), ..Default::default() };
        // SAFETY: the descriptor is a live local; the kernel writes at most 4096 bytes of
        // returns into our arena's read region.
        let r = unsafe { libc::ioctl(fd, BINDER_WRITE_READ as _, &mut bwr as *mut binder_write_read) };
        self.count_errno(r);
        if r >= 0 && bwr.read_consumed > 0 && bwr.read_consumed <= 4096 {
            let got = self.get(A_READ, bwr.read_consumed as usize);
            self.returns(di, &got);
        }
    }

    /// Some binder ioctl with random arguments.
    fn ioctl(&mut self) {
        let (_, fd) = self.dev();
        self.sane = self.rng.chance(1, 2);
        // A well-formed context manager lives on the main fd.
        let fd = if self.sane { self.sh.devs[0].fd } else { fd };
        let args = A_ARGS + 1024;
        let garbage = self.rng.bytes(64);
        self.put(args, &garbage);
        let (req, arg): (u32, u64) = match self.rng.weighted(&[8, 8, 2, 2, 8, 8, 6, 8, 8, 5, 8, 2, 4, 4]) {
            0 => (BINDER_VERSION, self.out_ptr(self.a(args))),
            1 => {
                let n = self.rng.below(20) as u32;
                self.put(args, &n.to_ne_bytes());
                (BINDER_SET_MAX_THREADS, self.in_ptr(self.a(args)))
            }
            2 => {
                if self.rng.chance(1, 4) {
                    self.sh.shm.bump(stat::CTX_MGR);
                }
                (BINDER_SET_CONTEXT_MGR, self.in_ptr(self.a(args)))
            }
            3 => {
                let mut b = Vec::new();
                let (ptr, cookie) = self.node_ptr();
                // TXN_SECURITY_CTX makes every call to the manager fail without an LSM:
                // only now and then.
                let flags = if self.sane { self.rng.next_u32() & 0x1ff } else { self.rng.next_u32() & 0x11ff };
                Object::Binder { weak: false, flags, ptr, cookie }.encode(&mut b);
                self.put(args, &b);
                (BINDER_SET_CONTEXT_MGR_EXT, self.in_ptr(self.a(args)))
            }
            4 => {
                // The driver forgets this thread's transaction stack.
                self.awaiting[Self::aw(self.cur_dev)] = false;
                (BINDER_THREAD_EXIT, self.a(args))
            }
            5 => {
                let (p, _) = self.node_ptr();
                let q = p - self.rng.below(2);
                self.put(args, &q.to_ne_bytes());
                (BINDER_GET_NODE_DEBUG_INFO, self.out_ptr(self.a(args)))
            }
            6 => {
                let mut b = vec![0u8; 24];
                let h = self.handle();
                b[..4].copy_from_slice(&h.to_ne_bytes());
                if self.rng.chance(1, 5) {
                    b[12] = 1;
                }
                self.put(args, &b);
                (BINDER_GET_NODE_INFO_FOR_REF, self.out_ptr(self.a(args)))
            }
            7 | 8 => {
                // Own pid, a sibling worker, or nobody; short timeouts only.
                let pid = self.pid_target();
                let mut b = Vec::new();
                b.extend_from_slice(&pid.to_ne_bytes());
                b.extend_from_slice(&(self.rng.below(2) as u32).to_ne_bytes());
                b.extend_from_slice(&(self.rng.below(11) as u32).to_ne_bytes());
                self.put(args, &b);
                if self.rng.chance(1, 2) {
                    (BINDER_FREEZE, self.a(args))
                } else {
                    (BINDER_GET_FROZEN_INFO, self.out_ptr(self.a(args)))
                }
            }
            9 => {
                let v = self.rng.below(3) as u32;
                self.put(args, &v.to_ne_bytes());
                (BINDER_ENABLE_ONEWAY_SPAM_DETECTION, self.in_ptr(self.a(args)))
            }
            10 => (BINDER_GET_EXTENDED_ERROR, self.out_ptr(self.a(args))),
            11 => (
                if self.rng.chance(1, 2) { BINDER_SET_IDLE_TIMEOUT } else { BINDER_SET_IDLE_PRIORITY },
                self.in_ptr(self.a(args)),
            ),
            12 => {
                // Another request of type 'b': never a VFS-level ioctl. Not the two whose
                // argument the garbage would make dangerous: BINDER_WRITE_READ (embedded
                // pointers the kernel writes through) and BINDER_FREEZE (timeout).
                let dir = self.rng.below(4) as u32;
                let nr = self.rng.below(256) as u8;
                let size = self.rng.below(64) as usize;
                let req = ioc(dir, b'b', nr, size);
                let req = if req == BINDER_WRITE_READ || req == BINDER_FREEZE { BINDER_VERSION } else { req };
                (req, if dir & IOC_READ != 0 { self.out_ptr(self.a(args)) } else { self.in_ptr(self.a(args)) })
            }
            _ => {
                // A write-only BINDER_WRITE_READ of arena garbage (no read: the kernel
                // must not write through pointers we did not choose).
                let off = A_DATA + self.rng.below(32 * 1024) as usize;
                let at = self.a(off);
                let bwr = binder_write_read {
                    write_size: self.rng.below(4096),
                    write_buffer: self.in_ptr(at),
                    write_consumed: self.rng.below(16),
                    ..Default::default()
                };
                // SAFETY: binder_write_read is plain old data (48 bytes, no padding).
                let b = unsafe { std::slice::from_raw_parts(&bwr as *const _ as *const u8, 48) }.to_vec();
                self.put(args, &b);
                (BINDER_WRITE_READ, self.out_ptr(self.a(args)))
            }
        };
        self.sh.shm.slots[self.slot].threads[self.tix].detail.store(req as u64, Ordering::Relaxed);
        // SAFETY: the driver reads/writes at most _IOC_SIZE(req) (< 16 KiB, at most 64
        // here) bytes at `arg`, which is our arena (room to spare) or memory it cannot
        // write; it never keeps the pointer.
        let r = unsafe { libc::ioctl(fd, req as _, arg as *mut libc::c_void) };
        self.count_errno(r);
        if req == BINDER_THREAD_EXIT && self.sane {
            // Come back as a looper, or this thread would not get process work again.
            self.enter_looper(fd);
        }
    }

    fn enter_looper(&mut self, fd: RawFd) {
        let mut b = Vec::new();
        Command::EnterLooper.encode(&mut b);
        let di = self.sh.devs.iter().position(|d| d.fd == fd).unwrap_or(usize::MAX);
        self.write_cmds(di, fd, &b);
    }

    fn pid_target(&mut self) -> u32 {
        match self.rng.below(4) {
            0 => std::process::id(),
            1 | 2 => {
                let i = self.rng.below(shm::MAX_SLOTS as u64) as usize;
                self.sh.shm.slots[i].pid.load(Ordering::Relaxed) as u32
            }
            _ => self.rng.next_u32() >> 16,
        }
    }

    fn close_private(&mut self) {
        if let Some(p) = self.private.take() {
            if let Ok(mut all) = self.sh.all_binder_fds.lock() {
                all.retain(|&f| f != p.fd);
            }
        }
    }

    fn open_private(&mut self) {
        self.close_private();
        let len = *self.rng.pick(&[0usize, 4096, 128 * 1024, 1024 * 1024, 4 * 1024 * 1024, 5 * 1024 * 1024]);
        let prot = if self.rng.chance(1, 20) { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let flags = if self.rng.chance(1, 10) { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
        self.private = FDev::open(&self.sh.device, len, prot, flags);
        if let (Some(p), Ok(mut all)) = (&self.private, self.sh.all_binder_fds.lock()) {
            all.push(p.fd);
        }
    }

    fn mmap_again(&mut self) {
        // A second mapping of an already mapped binder fd must be refused.
        let fd = match &self.private {
            Some(p) if self.rng.chance(1, 2) => p.fd,
            _ => self.sh.devs[self.rng.below(self.sh.devs.len() as u64) as usize].fd,
        };
        // SAFETY: a new mapping at a kernel-chosen address, unmapped right away if made.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), 65536, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0) };
        if p != libc::MAP_FAILED {
            // SAFETY: the mapping we just made.
            unsafe { libc::munmap(p, 65536) };
        }
    }

    /// A thread that waits too long for a reply (its callee never answers) leaves the
    /// driver (BINDER_THREAD_EXIT, which unwinds its transaction stack) and comes back as
    /// a looper, as a well-behaved process would not but a fuzzer may.
    fn unwedge(&mut self) {
        for d in 0..3 {
            if !self.awaiting[d] {
                self.awaiting_ops[d] = 0;
                continue;
            }
            self.awaiting_ops[d] += 1;
            if self.awaiting_ops[d] < 64 {
                continue;
            }
            let fd = match self.sh.devs.get(d) {
                Some(dev) if d < 2 => dev.fd,
                _ => match &self.private {
                    Some(p) => p.fd,
                    None => {
                        self.awaiting[d] = false;
                        continue;
                    }
                },
            };
            let zero = 0i32;
            // SAFETY: BINDER_THREAD_EXIT reads an int at the pointer (a live local).
            unsafe { libc::ioctl(fd, BINDER_THREAD_EXIT as _, &zero as *const i32) };
            self.enter_looper(fd);
            self.awaiting[d] = false;
            self.awaiting_ops[d] = 0;
            let di = if d < 2 { d } else { usize::MAX };
            self.pending_in.retain(|p| p.0 != di);
        }
    }

    /// Reads and handles whatever the driver has for this thread on the shared fds.
    fn serve_all(&mut self) {
        self.sane = true;
        let mut fds: Vec<(usize, RawFd)> = self.sh.devs.iter().enumerate().map(|(i, d)| (i, d.fd)).collect();
        // The private fd too: it may have become the context manager.
        fds.extend(self.private.as_ref().map(|p| (usize::MAX, p.fd)));
        for (d, fd) in fds {
            if self.readable(fd) {
                self.write_read_sane_read(d, fd);
            }
        }
    }

    /// The state every operation sequence starts from (thread 0, the manager on the first
    /// fd, before the first op): the second fd holds a strong ref to the manager's node
    /// (handle 0) and has given the manager a strong ref to a node of its own, so requests
    /// on refs (freeze and death notifications, refcounts) can succeed from the first op
    /// on both fds. Without it a sequence had to build that state by chance first, which
    /// a few hundred short sequences never did.
    fn prelude(&mut self) {
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

    /// Now and then answer the oldest call left pending (as `serve` would have).
    fn answer_pending(&mut self) {
        if self.pending_in.is_empty() || !self.rng.chance(1, 8) {
            return;
        }
        let (d, buf) = self.pending_in.remove(0);
        let Some(i) = self.buffers.iter().position(|b| *b == (d, buf)) else { return };
        self.buffers.remove(i);
        let t = TransactionData { buffer: buf, ..Default::default() };
        self.serve(d, &t);
    }

    fn step(&mut self) -> bool {
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
