//! The binder ioctls other than BINDER_WRITE_READ, and the thread's private fd: open,
//! mmap, close, and getting a wedged thread going again.

use super::*;

impl Thread {
    /// Some binder ioctl with random arguments.
    pub(super) fn ioctl(&mut self) {
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

    pub(super) fn enter_looper(&mut self, fd: RawFd) {
        let mut b = Vec::new();
        Command::EnterLooper.encode(&mut b);
        let di = self.sh.devs.iter().position(|d| d.fd == fd).unwrap_or(usize::MAX);
        self.write_cmds(di, fd, &b);
    }

    pub(super) fn pid_target(&mut self) -> u32 {
        match self.rng.below(4) {
            0 => std::process::id(),
            1 | 2 => {
                let i = self.rng.below(shm::MAX_SLOTS as u64) as usize;
                self.sh.shm.slots[i].pid.load(Ordering::Relaxed) as u32
            }
            _ => self.rng.next_u32() >> 16,
        }
    }

    pub(super) fn close_private(&mut self) {
        if let Some(p) = self.private.take() {
            if let Ok(mut all) = self.sh.all_binder_fds.lock() {
                all.retain(|&f| f != p.fd);
            }
        }
    }

    pub(super) fn open_private(&mut self) {
        self.close_private();
        let len = *self.rng.pick(&[0usize, 4096, 128 * 1024, 1024 * 1024, 4 * 1024 * 1024, 5 * 1024 * 1024]);
        let prot = if self.rng.chance(1, 20) { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let flags = if self.rng.chance(1, 10) { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
        self.private = FDev::open(&self.sh.device, len, prot, flags);
        if let (Some(p), Ok(mut all)) = (&self.private, self.sh.all_binder_fds.lock()) {
            all.push(p.fd);
        }
    }

    pub(super) fn mmap_again(&mut self) {
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
    pub(super) fn unwedge(&mut self) {
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
}
