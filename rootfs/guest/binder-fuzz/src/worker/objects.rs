//! Transactions and the objects they carry: handles, node pointers, cookies, flags, and
//! binder, handle, fd, fd-array and buffer objects, well-formed or not.

use super::*;

impl Thread {
    pub(super) fn handle(&mut self) -> u32 {
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

    pub(super) fn node_ptr(&mut self) -> (u64, u64) {
        let p = 0x1000 + 0x10 * self.rng.below(NODE_PTRS);
        // The same ptr with another cookie is an error the driver must catch.
        let cookie = if !self.sane && self.rng.chance(1, 5) { self.rng.next_u64() } else { p ^ 0xc00c };
        (p, cookie)
    }

    pub(super) fn cookie(&mut self) -> u64 {
        if self.rng.chance(3, 4) {
            0xdead_0000 + self.rng.below(8)
        } else {
            self.rng.next_u64()
        }
    }

    pub(super) fn tx_flags(&mut self) -> u32 {
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
    pub(super) fn priority_flags(&mut self) -> u32 {
        let policy = self.rng.below(4) as u32;
        let prio = if policy == 1 || policy == 2 { 1 + self.rng.below(5) as u32 } else { self.rng.below(256) as u32 };
        let rt = if self.rng.chance(1, 2) { FLAT_BINDER_FLAG_INHERIT_RT } else { 0 };
        (policy << FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT) | prio | rt
    }

    /// A random object at the current end of `data` (8-aligned).
    pub(super) fn object(&mut self, data: &mut Vec<u8>, sg_parents: &mut Vec<(u64, u64)>, nobj: u64) -> u64 {
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
    pub(super) fn transaction(&mut self, handle: u32, flags: u32, sg_ok: bool) -> (TransactionData, u64) {
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
}
