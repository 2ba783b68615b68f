//! BINDER_WRITE_READ and what comes back: returns read, received transactions served or
//! left pending, buffers freed.

use super::*;

impl Thread {
    pub(super) fn count_errno(&self, r: libc::c_int) {
        if r >= 0 {
            self.sh.shm.bump(stat::IOCTL_OK);
        } else {
            self.sh.shm.bump(shm::errno_stat(errno()));
        }
    }

    /// One BINDER_WRITE_READ with a random command stream and/or read.
    pub(super) fn write_read(&mut self, with_write: bool) {
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

    pub(super) fn readable(&self, fd: RawFd) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no waiting.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
    }

    /// Takes note of what the driver returned.
    pub(super) fn returns(&mut self, di: usize, buf: &[u8]) {
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

    /// A received transaction or reply: learn its handles, close its fds, keep the buffer.
    pub(super) fn received(&mut self, di: usize, t: &TransactionData, is_call: bool) {
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
    pub(super) fn serve(&mut self, di: usize, t: &TransactionData) {
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
    pub(super) fn write_cmds(&mut self, di: usize, fd: RawFd, cmds: &[u8]) {
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
    pub(super) fn write_read_sane_read(&mut self, di: usize, fd: RawFd) {
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

    /// Reads and handles whatever the driver has for this thread on the shared fds.
    pub(super) fn serve_all(&mut self) {
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

    /// Now and then answer the oldest call left pending (as `serve` would have).
    pub(super) fn answer_pending(&mut self) {
        if self.pending_in.is_empty() || !self.rng.chance(1, 8) {
            return;
        }
        let (d, buf) = self.pending_in.remove(0);
        let Some(i) = self.buffers.iter().position(|b| *b == (d, buf)) else { return };
        self.buffers.remove(i);
        let t = TransactionData { buffer: buf, ..Default::default() };
        self.serve(d, &t);
    }
}
