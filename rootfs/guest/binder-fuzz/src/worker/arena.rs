//! The thread's scratch arena, and pointers into it or deliberately outside it.

use super::*;

impl Thread {
    pub(super) fn a(&self, off: usize) -> u64 {
        self.arena as u64 + off as u64
    }

    pub(super) fn put(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= ARENA);
        // SAFETY: [off, off+len) lies in this thread's arena (asserted); the kernel only
        // writes it during this thread's own syscalls, and none is running now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena.add(off), bytes.len()) };
    }

    pub(super) fn get(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= ARENA);
        let mut v = vec![0u8; len];
        // SAFETY: as in `put`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.add(off), v.as_mut_ptr(), len) };
        v
    }

    /// A pointer for the kernel to write through: our arena or memory it cannot write.
    pub(super) fn out_ptr(&mut self, valid: u64) -> u64 {
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
    pub(super) fn in_ptr(&mut self, valid: u64) -> u64 {
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

    pub(super) fn dev(&mut self) -> (usize, RawFd) {
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

    pub(super) fn aw(i: usize) -> usize {
        i.min(2)
    }

    pub(super) fn fdev(&self, i: usize) -> Option<&FDev> {
        if i == usize::MAX {
            self.private.as_ref()
        } else {
            self.sh.devs.get(i)
        }
    }
}
