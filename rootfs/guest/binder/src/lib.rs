//! Userspace for the Linux binder driver, used by every guest test and benchmark:
//!
//! - [`uapi`]: the structs, ioctl numbers and BC_*/BR_* codes of
//!   `include/uapi/linux/android/binder.h` (checked against the pinned header in the tests);
//! - [`protocol`]: encoding of the command stream and decoding of the return stream;
//! - [`parcel`]: transaction payloads with embedded objects (binders, handles, fds);
//! - [`Device`]: one open binder fd with its receive mapping, shared by the threads of a
//!   process, and its ioctls;
//! - [`Binder`]: the per-thread protocol state (the driver keeps a transaction stack and a
//!   looper state per thread) with calls, replies, nested calls, refcounts and death
//!   notifications;
//! - [`looper::Looper`]: a small thread pool serving incoming transactions;
//! - [`pool::ThreadPool`]: libbinder's thread pool (max threads 15, loopers spawned on
//!   BR_SPAWN_LOOPER), as every AOSP binder process runs it;
//! - [`sm::ServiceManager`]: a context manager on handle 0 with a name registry.
//!
//! ```no_run
//! let mut b = binder::Binder::open("/dev/binderfs/binder")?;
//! assert_eq!(b.version()?, binder::uapi::BINDER_CURRENT_PROTOCOL_VERSION);
//! let reply = b.transact(0, 1, b"ping", false)?;
//! # Ok::<(), binder::Error>(())
//! ```

mod device;
mod error;
pub mod looper;
pub mod parcel;
pub mod pool;
pub mod protocol;
pub mod sm;
mod thread;
pub mod uapi;

pub use device::{Device, OpenOptions, DEFAULT_DEVICE, DEFAULT_MAP_SIZE};
pub use error::{Error, Result};
pub use thread::{gettid, Binder, CallOpts, EventLog, Handler, Incoming, Reply};

#[cfg(test)]
mod tests;
