//! KCOV (Documentation/dev-tools/kcov.rst): per-task coverage of the kernel's instrumented
//! code. The parent opens and maps one buffer per worker thread before forking; the worker
//! thread enables it (KCOV_ENABLE traces the calling task only) and the kernel detaches it
//! when the task exits, so the parent reads a sequence's coverage even if its worker died.

use std::io;

/// `_IOR('c', 1, unsigned long)`: set the buffer size in words.
pub const KCOV_INIT_TRACE: u64 = 0x8008_6301;
/// `_IO('c', 100)`: start tracing the calling task.
pub const KCOV_ENABLE: u64 = 0x6364;
/// Record the PC of every basic block (the word after `KCOV_ENABLE`).
pub const KCOV_TRACE_PC: libc::c_ulong = 0;

/// One task's coverage buffer: word 0 counts the PCs that follow it.
pub struct Kcov {
    pub fd: i32,
    area: *mut u64,
    words: usize,
}

impl Kcov {
    pub fn open(words: usize) -> io::Result<Kcov> {
        let path = c"/sys/kernel/debug/kcov";
        // SAFETY: a valid C string; the fd stays open for the process's life.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: KCOV_INIT_TRACE takes the size by value.
        if unsafe { libc::ioctl(fd, KCOV_INIT_TRACE as _, words as libc::c_ulong) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: maps the kcov buffer the kernel just allocated, shared with the kernel and
        // (after fork) with the worker that enables it.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), words * 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Kcov { fd, area: p as *mut u64, words })
    }

    /// The buffer's address, the same in a forked worker (for `count_at`).
    pub fn addr(&self) -> usize {
        self.area as usize
    }

    /// Empties the buffer (before a worker enables it).
    pub fn reset(&self) {
        // SAFETY: word 0 of our mapping; no task traces into it now.
        unsafe { std::ptr::write_volatile(self.area, 0) };
    }

    /// The PCs recorded since the reset, in order.
    pub fn pcs(&self) -> Vec<u64> {
        // SAFETY: our mapping of `words` words; the kernel writes at most words - 1 PCs
        // after word 0, and the tracing task has exited.
        unsafe {
            let n = (std::ptr::read_volatile(self.area) as usize).min(self.words - 1);
            (1..=n).map(|i| std::ptr::read_volatile(self.area.add(i))).collect()
        }
    }
}

/// How many PCs the buffer at `addr` (a `Kcov::addr` of this process or its parent) holds
/// now: the tracing task reads its own count between ops.
pub fn count_at(addr: usize) -> u64 {
    // SAFETY: word 0 of a live kcov mapping (inherited across fork, never unmapped).
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}
