//! What every case uses: the context, the error type, timing and check helpers.

use binder::looper::Looper;
use binder::sm::{self, ForkedServiceManager};
use binder::{Binder, Device, EventLog, Incoming, OpenOptions, Reply};
use serde_json::{json, Value};
use std::fmt::Display;
use std::time::{Duration, Instant};
use testkit::logs::Stats;
use testkit::Driver;

/// Case data reported with the result (pass or fail).
pub type Data = serde_json::Map<String, Value>;

/// A string under this key in a passing case's data becomes its result message.
pub const SUMMARY: &str = "summary";

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
    /// seed002's deferral switch (`--defer-tc-switch`).
    pub defer_tc_switch: String,
    /// The priority inheritance switch (`--prio-switch`).
    pub prio_switch: String,
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

/// How long a new context manager may wait for the previous case's manager to go.
pub const MGR_WAIT: Duration = Duration::from_secs(10);
/// The name, pointer and cookie of a case's server node.
const SERVICE: &str = "lab.conformance";
const SERVICE_PTR: u64 = 0x5e_0000;
const SERVICE_COOKIE: u64 = 0x5e_c00c;

/// A case's server: looper threads on their own binder fd in the case process, serving a
/// node that clients reach through a handle from a context manager in a forked process.
///
/// The C driver refuses transactions to handle 0 from the process that owns the context
/// manager, the Rust driver only those from the manager's own fd; with the manager in
/// another process both drivers run the case the same way, and the server can still share
/// state with the case.
pub struct Server {
    looper: Looper,
    sm: ForkedServiceManager,
}

impl Server {
    /// Forks the context manager (call it while the case is still single-threaded),
    /// opens the server's fd with `opts`, starts `threads` looper threads and registers
    /// the node.
    pub fn start<F>(
        ctx: &Ctx,
        opts: &OpenOptions,
        threads: usize,
        events: Option<EventLog>,
        h: F,
    ) -> Result<Server, CaseError>
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        Self::start_node(ctx, opts, 0, |dev| Looper::spawn(dev, threads, events, h))
    }

    /// Like [`Server::start`], with `threads` blocking looper threads (waiting in the driver,
    /// as libbinder's pool does) and the node created with `flat_binder_object` `flags`.
    pub fn start_blocking<F>(ctx: &Ctx, threads: usize, flags: u32, h: F) -> Result<Server, CaseError>
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        Self::start_node(ctx, &OpenOptions::default(), flags, |dev| Looper::spawn_blocking(dev, threads, h))
    }

    fn start_node(
        ctx: &Ctx,
        opts: &OpenOptions,
        flags: u32,
        spawn: impl FnOnce(std::sync::Arc<Device>) -> Looper,
    ) -> Result<Server, CaseError> {
        let sm = ForkedServiceManager::start(&ctx.dev, MGR_WAIT).ctx("start the context manager process")?;
        let dev = Device::open_with(&ctx.dev, opts).ctx("open server device")?;
        let looper = spawn(dev.clone());
        let mut b = Binder::from_device(dev);
        sm::add_service_flags(&mut b, SERVICE, SERVICE_PTR, SERVICE_COOKIE, flags).ctx("register the server node")?;
        Ok(Server { looper, sm })
    }

    /// A strong handle to the server's node for client `c` (drop it with
    /// [`Binder::release`], or by closing `c`).
    pub fn connect(&self, c: &mut Binder) -> Result<u32, CaseError> {
        sm::get_service(c, SERVICE).ctx("look the server node up")
    }

    pub fn device(&self) -> &std::sync::Arc<Device> {
        self.looper.device()
    }

    /// Stops the looper threads and the context manager process.
    pub fn stop(self) -> CaseResult {
        let r = self.looper.stop().ctx("stop the server");
        self.sm.stop().ctx("stop the context manager process")?;
        r
    }
}

/// A forked helper's exit code for its result: 0, or 1 with the error on stderr.
pub fn child_exit(who: &str, r: Result<(), String>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{who}: {e}");
            1
        }
    }
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
