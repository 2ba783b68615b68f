//! Ctrl-C and SIGTERM: one process-wide flag. Once anything watches it (a boot, a build),
//! the signals no longer end the process; they set the flag, and whoever runs a child stops
//! it (QEMU through its monitor, a build's whole process group) and returns [`Interrupted`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A Ctrl-C or SIGTERM arrived earlier in this process: nothing further starts.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "interrupted (Ctrl-C or SIGTERM): not starting another boot or build; the finished runs' directories are kept",
        )
    }
}

impl std::error::Error for Interrupted {}

/// Whether a Ctrl-C or SIGTERM has arrived since something began to watch for them.
pub fn interrupted() -> bool {
    flag().load(Ordering::SeqCst)
}

/// Ctrl-C and SIGTERM set this (registered on first use). It stays set, so a command of many
/// boots or builds ends with the one it was in.
pub fn flag() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
    .clone()
}
