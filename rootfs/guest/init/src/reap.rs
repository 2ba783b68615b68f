//! Exit statuses of services reaped by someone else: PID 1 reaps with waitpid(-1), so a
//! service that dies while a client step runs is reaped by that step's loop, which files the
//! status here for the service to find. Its own module so that `step` and `service` do not
//! import each other.

use std::sync::{Mutex, MutexGuard};

/// Statuses the step loops collected for service pids.
static REAPED: Mutex<Vec<(libc::pid_t, libc::c_int)>> = Mutex::new(Vec::new());
/// The pids of running services.
static PIDS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A service started: its status is kept when another loop reaps it.
pub fn track(pid: libc::pid_t) {
    lock(&PIDS).push(pid);
}

/// A service ended or was collected.
pub fn untrack(pid: libc::pid_t) {
    lock(&PIDS).retain(|p| *p != pid);
}

/// Keeps `status` if `pid` is a running service's; called for every pid a step's loop reaps
/// that is not its own.
pub fn reaped(pid: libc::pid_t, status: libc::c_int) {
    if lock(&PIDS).contains(&pid) {
        lock(&REAPED).push((pid, status));
    }
}

/// The status another loop collected for `pid`, once.
pub fn take(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut r = lock(&REAPED);
    let i = r.iter().position(|(p, _)| *p == pid)?;
    Some(r.remove(i).1)
}

/// No service is tracked.
#[cfg(test)]
pub fn none_tracked() -> bool {
    lock(&PIDS).is_empty()
}
