//! A context manager on handle 0 with a name registry, like Android's servicemanager
//! but minimal: `add` (name + binder object), `get` (name → handle object), `list`.
//!
//! The manager keeps a strong reference (BC_ACQUIRE) on every registered handle, as the
//! reference that came with the `add` transaction goes away when its buffer is freed.

use crate::device::{Device, OpenOptions};
use crate::error::{Error, Result};
use crate::looper::Looper;
use crate::parcel::{Object, Parcel};
use crate::thread::{Binder, EventLog, Incoming, Reply};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use syskit::child::{fork_child, Child};

pub const SM_ADD: u32 = 1;
pub const SM_GET: u32 = 2;
pub const SM_LIST: u32 = 3;

/// The running context manager: a looper thread on its own device.
pub struct ServiceManager {
    looper: Looper,
    services: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl ServiceManager {
    /// Opens `path`, becomes the context manager (waiting up to `wait` for a previous
    /// manager's release) and serves on one thread.
    pub fn start(path: impl AsRef<Path>, wait: Duration, events: Option<EventLog>) -> Result<ServiceManager> {
        let dev = Device::open_with(path, &OpenOptions::default())?;
        dev.become_context_manager_retry(None, wait)?;
        let services: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
        let s = services.clone();
        let looper = Looper::spawn(dev, 1, events, move |b, inc| handle(b, inc, &s));
        Ok(ServiceManager { looper, services })
    }

    /// Registered names and the manager's handles for them.
    pub fn services(&self) -> BTreeMap<String, u32> {
        self.services.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn device(&self) -> &Arc<Device> {
        self.looper.device()
    }

    pub fn stop(self) -> Result<()> {
        self.looper.stop()
    }
}

/// A [`ServiceManager`] in a forked child process.
///
/// The C driver refuses a transaction to handle 0 from the process that owns the context
/// manager ("got transaction to context manager from process owning it"; the Rust driver
/// only refuses the manager's own binder file). A program that both serves and calls
/// through handle 0 runs its manager this way, so it works the same on both drivers.
pub struct ForkedServiceManager {
    child: Child,
}

impl ForkedServiceManager {
    /// Forks, and in the child becomes the context manager (waiting up to `wait`) and
    /// serves until [`ForkedServiceManager::stop`] or until the parent dies. Call it while
    /// the calling process is single-threaded (see [`syskit::child`]).
    pub fn start(path: impl AsRef<Path>, wait: Duration) -> Result<ForkedServiceManager> {
        let path = path.as_ref().to_path_buf();
        let mut child = fork_child(move |chan| {
            let sm = match ServiceManager::start(&path, wait, None) {
                Ok(sm) => sm,
                Err(e) => {
                    let _ = chan.send(&format!("error: {e}"));
                    return 1;
                }
            };
            let _ = chan.send("ready");
            // "stop" or EOF (the parent is gone): either way, leave.
            let _ = chan.recv(Duration::from_secs(24 * 3600));
            match sm.stop() {
                Ok(()) => 0,
                Err(_) => 2,
            }
        })?;
        match child.chan.recv(wait + Duration::from_secs(10)) {
            Ok(Some(l)) if l == "ready" => Ok(ForkedServiceManager { child }),
            Ok(Some(l)) => Err(Error::Protocol(format!("service manager process: {l}"))),
            Ok(None) => Err(Error::Protocol("service manager process: not ready in time".into())),
            Err(e) => Err(Error::Protocol(format!("service manager process: {e}"))),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.pid
    }

    /// Stops the manager and waits for its process: afterwards another process can
    /// become the context manager (once the driver has released the old one).
    pub fn stop(mut self) -> Result<()> {
        let _ = self.child.chan.send("stop");
        match self.child.wait_timeout(Duration::from_secs(15)) {
            Some(0) => Ok(()),
            st => Err(Error::Protocol(format!("service manager process ended with {st:?}"))),
        }
    }
}

fn handle(b: &mut Binder, inc: &Incoming, services: &Mutex<BTreeMap<String, u32>>) -> Reply {
    let r = (|| -> Result<Reply> {
        let mut rd = inc.reader();
        match inc.code {
            SM_ADD => {
                let name = rd.read_str()?;
                let handle = match rd.read_object()? {
                    Object::Handle { handle, .. } => handle,
                    o => return Err(Error::Protocol(format!("add {name}: expected a handle, got {o:?}"))),
                };
                // Keep the node alive past this transaction's buffer.
                b.acquire(handle)?;
                let old = services.lock().map_err(|_| Error::Protocol("poisoned".into()))?.insert(name, handle);
                if let Some(old) = old.filter(|&o| o != handle) {
                    b.release(old)?;
                }
                Ok(Reply::status(0))
            }
            SM_GET => {
                let name = rd.read_str()?;
                let h = services.lock().map_err(|_| Error::Protocol("poisoned".into()))?.get(&name).copied();
                Ok(match h {
                    Some(h) => {
                        let mut p = Parcel::new();
                        p.write_object(Object::handle(h));
                        Reply::parcel(p)
                    }
                    None => Reply::status(-libc::ENOENT),
                })
            }
            SM_LIST => {
                let names: Vec<String> = services.lock().map(|s| s.keys().cloned().collect()).unwrap_or_default();
                let mut p = Parcel::new();
                p.write_u32(names.len() as u32);
                for n in &names {
                    p.write_str(n);
                }
                Ok(Reply::parcel(p))
            }
            _ => Ok(Reply::status(-libc::EINVAL)),
        }
    })();
    r.unwrap_or_else(|_| Reply::status(-libc::EBADMSG))
}

/// Registers the local node (`ptr`, `cookie`) under `name` with the context manager.
pub fn add_service(b: &mut Binder, name: &str, ptr: u64, cookie: u64) -> Result<()> {
    add_service_flags(b, name, ptr, cookie, 0)
}

/// [`add_service`] for a node created with `flat_binder_object` `flags` (e.g. Android's
/// priority bits), which the driver reads when the node is first sent.
pub fn add_service_flags(b: &mut Binder, name: &str, ptr: u64, cookie: u64, flags: u32) -> Result<()> {
    let mut p = Parcel::new();
    p.write_str(name).write_object(Object::Binder { weak: false, flags, ptr, cookie });
    match b.call(0, SM_ADD, &p) {
        Err(Error::Status(0)) | Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Looks `name` up and returns a handle with a strong reference owned by the caller
/// (drop it with [`Binder::release`]).
pub fn get_service(b: &mut Binder, name: &str) -> Result<u32> {
    let mut p = Parcel::new();
    p.write_str(name);
    let reply = b.call_keep(0, SM_GET, &p, 0)?;
    let h = reply.first_handle();
    if let Ok(h) = h {
        // BC_ACQUIRE before BC_FREE_BUFFER: the reply's own reference goes with the buffer.
        b.queue(crate::protocol::Command::Acquire(h));
    }
    b.free_buffer(reply.buffer)?;
    h
}

/// Names registered with the context manager.
pub fn list_services(b: &mut Binder) -> Result<Vec<String>> {
    let reply = b.call(0, SM_LIST, &Parcel::new())?;
    let mut rd = reply.reader();
    let n = rd.read_u32()?;
    (0..n).map(|_| rd.read_str().map_err(Error::from)).collect()
}

/// Android's `android.os.IServiceManager` (rsbinder's `rsb_hub`, Android's servicemanager),
/// which is not the minimal protocol of [`ServiceManager`] above.
pub const ANDROID_SM_DESCRIPTOR: &str = "android.os.IServiceManager";
/// `getService(name)`: the first AIDL method, FIRST_CALL_TRANSACTION in every version of the
/// interface (Android 16 inserted `getService2` after it and moved `checkService`).
pub const ANDROID_SM_GET_SERVICE: u32 = 1;

/// The request of Android's `IServiceManager.getService(name)`: the interface token
/// (`Parcel::writeInterfaceToken` with strict-mode policy, an unset work source and the
/// system header `SYST`) and the name.
pub fn android_get_service_request(name: &str) -> Parcel {
    const STRICT_MODE_PENALTY_GATHER: i32 = 1 << 31;
    const UNSET_WORK_SOURCE: i32 = -1;
    let mut p = Parcel::new();
    p.write_i32(STRICT_MODE_PENALTY_GATHER)
        .write_i32(UNSET_WORK_SOURCE)
        .write_i32(i32::from_be_bytes(*b"SYST"))
        .write_string16(ANDROID_SM_DESCRIPTOR)
        .write_string16(name);
    p
}

/// Whether an Android-protocol context manager knows `name`: the reply carries a status of 0
/// and a handle object (a missing service is a null binder, which is not an object). The
/// reply's reference on the handle goes with its buffer.
pub fn android_has_service(b: &mut Binder, name: &str, timeout: Duration) -> Result<bool> {
    let opts = crate::CallOpts { timeout: Some(timeout), ..Default::default() };
    let reply = b
        .call_with(0, ANDROID_SM_GET_SERVICE, &android_get_service_request(name), &opts, None)?
        .ok_or_else(|| Error::Protocol("no reply to getService".into()))?;
    let status = reply.reader().read_i32()?;
    if status != 0 {
        return Err(Error::Protocol(format!("getService({name:?}) answered with exception code {status}")));
    }
    Ok(reply.objects()?.iter().any(|o| matches!(o, Object::Handle { .. })))
}

#[cfg(test)]
mod android_tests {
    use super::*;

    // The bytes libbinder's writeInterfaceToken + writeString16 put on the wire.
    #[test]
    fn get_service_request_bytes() {
        let p = android_get_service_request("ab");
        let d = p.data();
        assert_eq!(&d[..12], [0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0xff, b'T', b'S', b'Y', b'S']);
        let desc_units = ANDROID_SM_DESCRIPTOR.len();
        assert_eq!(&d[12..16], (desc_units as i32).to_ne_bytes());
        let name_at = 16 + (2 * (desc_units + 1)).next_multiple_of(4);
        assert_eq!(&d[name_at..], [2, 0, 0, 0, b'a', 0, b'b', 0, 0, 0, 0, 0]);
        assert!(p.offsets().is_empty());
    }
}
