//! What every case uses: the context, the error type, timing and check helpers.

use binder::testkit::logs::Stats;
use binder::testkit::Driver;
use serde_json::{json, Value};
use std::fmt::Display;
use std::time::{Duration, Instant};

/// Case data reported with the result (pass or fail).
pub type Data = serde_json::Map<String, Value>;

pub struct Ctx {
    /// The binder device (`/dev/binderfs/binder`).
    pub dev: String,
    pub driver: Driver,
    /// Debug kernel: timeouts are scaled by [`Ctx::scale`].
    pub debug: bool,
    pub scale: u32,
    /// Seconds of load in the stress case.
    pub stress_s: f64,
    pub seed: u64,
}

impl Ctx {
    /// A timeout of `s` seconds on a perf kernel, scaled for the debug kernel.
    pub fn t(&self, s: f64) -> Duration {
        Duration::from_secs_f64(s * self.scale as f64)
    }
}

#[derive(Debug)]
pub enum CaseError {
    Fail(String),
    Skip(String),
}

pub type CaseResult = Result<(), CaseError>;

impl<E: Display> From<E> for CaseError {
    fn from(e: E) -> Self {
        CaseError::Fail(e.to_string())
    }
}

/// Fails the case with a formatted message unless the condition holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::common::CaseError::Fail(format!($($arg)+)));
        }
    };
}

/// `?` with a note on what was being done.
pub trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, CaseError>;
}

impl<T, E: Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, CaseError> {
        self.map_err(|e| CaseError::Fail(format!("{what}: {e}")))
    }
}

impl<T> Context<T> for Option<T> {
    fn ctx(self, what: &str) -> Result<T, CaseError> {
        self.ok_or_else(|| CaseError::Fail(what.to_string()))
    }
}

pub fn fail<T>(msg: impl Into<String>) -> Result<T, CaseError> {
    Err(CaseError::Fail(msg.into()))
}

pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Polls `f` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Checks that the binder processes of `pid` hold no buffers (everything received was
/// freed) and records their counts.
pub fn check_no_buffers(data: &mut Data, pid: i32) -> CaseResult {
    let st = Stats::read().ctx("reading binder_logs/stats")?;
    let procs: Vec<Value> = st
        .proc(pid)
        .iter()
        .map(|p| json!({"threads": p.threads, "nodes": p.nodes, "refs": p.refs, "buffers": p.buffers}))
        .collect();
    let held: u64 = st.proc(pid).iter().map(|p| p.buffers).sum();
    data.insert("final_binder_procs".into(), Value::Array(procs));
    check!(held == 0, "{held} buffer(s) still allocated after the case freed everything");
    Ok(())
}

/// A page the kernel cannot read or write (PROT_NONE), for EFAULT tests.
pub fn bad_ptr() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: a fresh anonymous PROT_NONE mapping; nothing ever dereferences it.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap PROT_NONE");
        p as u64
    })
}

/// Kernel-space address: never accessible from a user copy.
pub const KERNEL_PTR: u64 = 0xffff_8000_1000_0000;
