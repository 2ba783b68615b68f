//! Where events go: the virtio-serial result port, or the console as a fallback.

use crate::sys;
use labproto::{Event, RESULT_PORT};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Console prefix of results when there is no result port.
pub use labproto::CONSOLE_RESULT_PREFIX as FALLBACK_PREFIX;
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The port fd for the panic hook (-1: none).
static PORT_FD: AtomicI32 = AtomicI32::new(-1);

pub struct Sink {
    port: Option<File>,
}

impl Sink {
    pub fn console() -> Sink {
        Sink { port: None }
    }

    pub fn attach(&mut self, dev: &Path) -> std::io::Result<()> {
        // Non-blocking: if the host end is not connected, writes fail after a timeout
        // instead of blocking PID 1 forever.
        let f = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(dev)?;
        PORT_FD.store(f.as_raw_fd(), Ordering::SeqCst);
        self.port = Some(f);
        Ok(())
    }

    pub fn send(&mut self, ev: &Event) {
        let line = ev.to_line();
        if let Some(p) = &self.port {
            match sys::write_all_timeout(p.as_raw_fd(), line.as_bytes(), WRITE_TIMEOUT) {
                Ok(()) => return,
                Err(e) => {
                    sys::log(&format!("result port write failed ({e}); results go to the console from now on"));
                    PORT_FD.store(-1, Ordering::SeqCst);
                    self.port = None;
                }
            }
        }
        sys::console_line(&format!("{FALLBACK_PREFIX}{line}"));
    }
}

/// Best-effort InitError from the panic hook (no allocation-free guarantees needed:
/// the hook runs before abort).
pub fn send_from_panic(ev: &Event) {
    let line = ev.to_line();
    let fd = PORT_FD.load(Ordering::SeqCst);
    if fd >= 0 && sys::write_all_timeout(fd, line.as_bytes(), Duration::from_secs(2)).is_ok() {
        return;
    }
    sys::console_line(&format!("{FALLBACK_PREFIX}{line}"));
}

/// Finds /dev/vportNpM whose `/sys/class/virtio-ports/*/name` is `name`. The host sends
/// port names asynchronously after probe, so poll for a while; give up early when
/// there are no virtio ports at all.
pub fn find_port(name: &str, wait: Duration) -> Option<PathBuf> {
    let start = Instant::now();
    loop {
        let mut any = false;
        if let Ok(rd) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.flatten() {
                any = true;
                let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if n.trim() == name {
                    let dev = Path::new("/dev").join(e.file_name());
                    if dev.exists() {
                        return Some(dev);
                    }
                }
            }
        }
        let waited = start.elapsed();
        if waited >= wait || (!any && waited >= Duration::from_millis(500)) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn find_result_port() -> Option<PathBuf> {
    find_port(RESULT_PORT, Duration::from_secs(3))
}
