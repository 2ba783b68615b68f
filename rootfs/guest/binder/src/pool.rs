//! libbinder's thread pool: what `ProcessState::self()->startThreadPool()` and
//! `IPCThreadState::joinThreadPool()` do in every AOSP binder process.
//!
//! - The device gets BINDER_SET_MAX_THREADS (libbinder's `DEFAULT_MAX_BINDER_THREADS`, 15)
//!   and BINDER_ENABLE_ONEWAY_SPAM_DETECTION, as when ProcessState opens the driver.
//! - One main looper thread enters with BC_ENTER_LOOPER (`spawnPooledThread(true)`).
//! - When the driver answers a read with BR_SPAWN_LOOPER (every looper busy, fewer than the
//!   maximum started), a new thread is spawned and registers with BC_REGISTER_LOOPER
//!   (`spawnPooledThread(false)`).
//! - Threads are named as `makeBinderThreadName()` names them: `<driver>:<pid>_<seq in hex>`,
//!   with the sequence starting at 1; the driver name is the device's file name, so
//!   `/dev/binderfs/binder` gives `binder:123_1`, `binder:123_2`, ...
//!
//! Loopers block in BINDER_WRITE_READ as libbinder's do, so an idle looper is on the
//! driver's list of waiting threads (a thread in poll(2) is not). [`PoolSize::Fixed`] keeps a
//! fixed number of BC_ENTER_LOOPER threads and max threads 0 (no spawning), with the same
//! loop. Stopping sets a flag and wakes blocked loopers through the driver's flush.

use crate::protocol::Command;
use crate::{Binder, Device, Error, Incoming, Reply, Result};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// libbinder's `DEFAULT_MAX_BINDER_THREADS` (ProcessState.cpp).
pub const DEFAULT_MAX_THREADS: u32 = 15;
/// How long [`ThreadPool::stop`] waits for its threads.
const STOP_WAIT: Duration = Duration::from_secs(10);

type SharedHandler = dyn Fn(&mut Binder, &Incoming) -> Reply + Send + Sync;

/// How many threads serve a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolSize {
    /// libbinder: one main looper, more spawned on BR_SPAWN_LOOPER up to `max_threads`.
    Aosp { max_threads: u32 },
    /// A fixed number of BC_ENTER_LOOPER threads, max threads 0.
    Fixed(usize),
}

impl PoolSize {
    /// libbinder's default pool.
    pub const AOSP: PoolSize = PoolSize::Aosp { max_threads: DEFAULT_MAX_THREADS };

    /// `--threads N` given: a fixed pool of N; absent: the AOSP pool.
    pub fn from_threads(threads: Option<usize>) -> std::result::Result<PoolSize, String> {
        match threads {
            None => Ok(PoolSize::AOSP),
            Some(0) => {
                Err("--threads 0 leaves no thread to serve; give N >= 1, or leave it out for the AOSP pool".into())
            }
            Some(n) => Ok(PoolSize::Fixed(n)),
        }
    }
}

struct Inner {
    dev: Arc<Device>,
    handler: Arc<SharedHandler>,
    stop: AtomicBool,
    served: AtomicU64,
    /// `mThreadPoolSeq`: the number in the next thread's name.
    seq: AtomicU32,
    spawn_requests: AtomicU64,
    name_prefix: String,
    threads: Mutex<Vec<(String, JoinHandle<Result<()>>)>>,
}

/// A running pool on one device. Dropping it stops it (see [`ThreadPool::stop`]).
pub struct ThreadPool {
    inner: Arc<Inner>,
    size: PoolSize,
}

impl ThreadPool {
    /// Sets the device's max threads and starts the pool's first threads. The handler may
    /// make nested calls through the `&mut Binder` it gets.
    pub fn start<F>(dev: Arc<Device>, size: PoolSize, handler: F) -> Result<ThreadPool>
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        let (max, fixed) = match size {
            PoolSize::Aosp { max_threads } => (max_threads, 0),
            PoolSize::Fixed(n) => (0, n),
        };
        dev.set_max_threads(max)?;
        // ProcessState::open_driver() also turns on oneway spam detection.
        dev.enable_oneway_spam_detection(true)?;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let driver = dev.name().to_string();
        let inner = Arc::new(Inner {
            dev,
            handler: Arc::new(handler),
            stop: AtomicBool::new(false),
            served: AtomicU64::new(0),
            seq: AtomicU32::new(1),
            spawn_requests: AtomicU64::new(0),
            name_prefix: format!("{driver}:{pid}_"),
            threads: Mutex::new(Vec::new()),
        });
        for _ in 0..fixed.max(1) {
            Inner::spawn(&inner, true)?;
        }
        Ok(ThreadPool { inner, size })
    }

    pub fn size(&self) -> PoolSize {
        self.size
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.inner.dev
    }

    /// Transactions handled so far. A call counts before its reply is sent, so every call
    /// whose reply a caller has received is counted.
    pub fn served(&self) -> u64 {
        self.inner.served.load(Ordering::SeqCst)
    }

    /// BR_SPAWN_LOOPER returns received so far.
    pub fn spawn_requests(&self) -> u64 {
        self.inner.spawn_requests.load(Ordering::Relaxed)
    }

    /// Names of the threads started so far (main looper first).
    pub fn thread_names(&self) -> Vec<String> {
        self.inner.threads.lock().map(|t| t.iter().map(|(n, _)| n.clone()).collect()).unwrap_or_default()
    }

    /// Threads started so far.
    pub fn threads(&self) -> usize {
        self.inner.threads.lock().map(|t| t.len()).unwrap_or(0)
    }

    /// Stops the threads (waking those blocked in the driver) and returns the first error
    /// any of them hit.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        let inner = &self.inner;
        inner.stop.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        loop {
            let all = inner.threads.lock().map(|t| t.iter().all(|(_, h)| h.is_finished())).unwrap_or(true);
            if all {
                break;
            }
            if t0.elapsed() > STOP_WAIT {
                return Err(Error::Protocol("thread pool did not stop".into()));
            }
            // A looper blocked in BINDER_WRITE_READ returns on the driver's flush.
            let _ = inner.dev.kick();
            std::thread::sleep(Duration::from_millis(5));
        }
        let threads = std::mem::take(&mut *inner.threads.lock().map_err(|_| Error::Protocol("pool lock".into()))?);
        let mut first = Ok(());
        for (name, t) in threads {
            let r = t.join().unwrap_or_else(|_| Err(Error::Protocol(format!("{name} panicked"))));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

impl Inner {
    /// `spawnPooledThread(is_main)`: a new named looper thread (none once stopping).
    fn spawn(this: &Arc<Inner>, is_main: bool) -> Result<()> {
        let mut threads = this.threads.lock().map_err(|_| Error::Protocol("pool lock".into()))?;
        if this.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let name = format!("{}{:X}", this.name_prefix, this.seq.fetch_add(1, Ordering::Relaxed));
        let me = this.clone();
        let h = std::thread::Builder::new().name(name.clone()).spawn(move || me.join_thread_pool(is_main))?;
        threads.push((name, h));
        Ok(())
    }

    /// `IPCThreadState::joinThreadPool(is_main)`, until the pool stops or the driver fails.
    fn join_thread_pool(self: Arc<Self>, is_main: bool) -> Result<()> {
        let mut b = Binder::from_device(self.dev.clone());
        // Sent with the first read, as libbinder queues it in mOut.
        b.queue(if is_main { Command::EnterLooper } else { Command::RegisterLooper });
        let handler = self.handler.clone();
        let mut h = |b: &mut Binder, inc: &Incoming| {
            let reply = handler(b, inc);
            // Counted before the reply is sent, so a caller holding its reply sees its call
            // in `served()`; counted after, the caller can run first (it often does when
            // the driver wakes it on this CPU) and read one call short.
            self.served.fetch_add(1, Ordering::SeqCst);
            reply
        };
        let r = loop {
            if self.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            if let Err(e) = b.serve_step(None, &mut h) {
                break Err(e);
            }
            let spawned = (0..b.take_spawn_requests()).try_for_each(|_| {
                self.spawn_requests.fetch_add(1, Ordering::Relaxed);
                Inner::spawn(&self, false)
            });
            if let Err(e) = spawned {
                break Err(e);
            }
        };
        // libbinder ends with BC_EXIT_LOOPER; the thread exit frees the driver's state.
        b.queue(Command::ExitLooper);
        let _ = b.flush();
        let exit = b.thread_exit();
        r.and(exit)
    }
}
