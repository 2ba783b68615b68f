//! A small looper: threads that enter the binder thread pool of a [`Device`] and serve
//! incoming transactions with a shared handler until stopped.

use crate::{Binder, Device, Error, EventLog, Incoming, Reply, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often an idle looper thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// How long [`Looper::stop`] waits for its threads.
const STOP_WAIT: Duration = Duration::from_secs(10);

type SharedHandler = dyn Fn(&mut Binder, &Incoming) -> Reply + Send + Sync;

/// Server threads on one device. Dropping it stops them (see [`Looper::stop`]).
pub struct Looper {
    dev: Arc<Device>,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl Looper {
    /// Starts `threads` looper threads (BC_ENTER_LOOPER) on `dev`. Each records its
    /// notifications into `events` if given. The handler may make nested calls through
    /// the `&mut Binder` it gets.
    ///
    /// Idle threads wait in poll() and look at the stop flag every 100 ms, so the driver never
    /// sees them as waiting threads: it queues work for the process and wakes the pollers.
    pub fn spawn<F>(dev: Arc<Device>, threads: usize, events: Option<EventLog>, handler: F) -> Looper
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        Self::spawn_waiting(dev, threads, events, Some(POLL), handler)
    }

    /// Like [`Looper::spawn`], but idle threads block in BINDER_WRITE_READ, as libbinder's
    /// thread pool does: the driver registers them as waiting threads and hands work to one
    /// directly (the path CTABS chooses on). [`Looper::stop`] wakes them with the driver's
    /// flush.
    pub fn spawn_blocking<F>(dev: Arc<Device>, threads: usize, handler: F) -> Looper
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        Self::spawn_waiting(dev, threads, None, None, handler)
    }

    fn spawn_waiting<F>(
        dev: Arc<Device>,
        threads: usize,
        events: Option<EventLog>,
        wait: Option<Duration>,
        handler: F,
    ) -> Looper
    where
        F: Fn(&mut Binder, &Incoming) -> Reply + Send + Sync + 'static,
    {
        let handler: Arc<SharedHandler> = Arc::new(handler);
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|i| {
                let (dev, stop, served, handler, events) =
                    (dev.clone(), stop.clone(), served.clone(), handler.clone(), events.clone());
                std::thread::Builder::new()
                    .name(format!("binder-looper-{i}"))
                    .spawn(move || {
                        let mut b = Binder::from_device(dev);
                        if let Some(l) = events {
                            b.set_event_log(l);
                        }
                        let r = Self::run(&mut b, wait, &stop, &served, &*handler);
                        // Leave the thread pool cleanly: the driver frees its thread state.
                        let _ = b.flush();
                        let exit = b.thread_exit();
                        r.and(exit)
                    })
                    .expect("spawn looper thread")
            })
            .collect();
        Looper { dev, stop, served, threads }
    }

    fn run(
        b: &mut Binder,
        wait: Option<Duration>,
        stop: &AtomicBool,
        served: &AtomicU64,
        handler: &SharedHandler,
    ) -> Result<()> {
        b.enter_looper()?;
        let mut h = |b: &mut Binder, inc: &Incoming| {
            let reply = handler(b, inc);
            // Before the reply goes out: see `ThreadPool::served`.
            served.fetch_add(1, Ordering::SeqCst);
            reply
        };
        while !stop.load(Ordering::SeqCst) {
            b.serve_step(wait, &mut h)?;
        }
        Ok(())
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Transactions handled so far, each counted before its reply is sent.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }

    /// Whether a thread ended (with an error) before `stop`.
    pub fn any_finished(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops the threads (waking those blocked in the driver) and returns the first
    /// error any of them hit.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        while !self.threads.iter().all(|t| t.is_finished()) {
            if t0.elapsed() > STOP_WAIT {
                return Err(Error::Protocol("looper threads did not stop".into()));
            }
            // A thread can sit in a blocking read (another thread took the work it
            // polled for): the driver's flush makes it return.
            let _ = self.dev.kick();
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t.join().unwrap_or_else(|_| Err(Error::Protocol("looper thread panicked".into())));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Looper {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.stop_inner();
        }
    }
}
