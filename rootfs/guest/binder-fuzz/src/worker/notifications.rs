//! Death and freeze notifications a sequence's ops requested: which to request or clear
//! next, and the `BR_FROZEN_BINDER`s to answer.

use super::*;

impl Thread {
    /// In a well-formed op of a sequence, mostly: the cookie of a `BR_FROZEN_BINDER` on `dev`
    /// still waiting for its done (taken: the done answers it).
    pub(super) fn pending_frozen(&mut self, dev: usize) -> Option<u64> {
        if !self.sh.sequence || !self.sane || !self.rng.chance(3, 4) {
            return None;
        }
        let mut v = self.sh.frozen.lock().ok()?;
        let i = v.iter().position(|f| f.0 == dev)?;
        Some(v.remove(i).1)
    }

    /// Remembers a well-formed op's notification request (`active`) or clear (sequences only:
    /// the classic loop keeps its distribution).
    pub(super) fn note_notif(&mut self, dev: usize, handle: u32, cookie: u64, freeze: bool, active: bool) {
        if !self.sh.sequence || !self.sane {
            return;
        }
        if let Ok(mut v) = self.sh.notifs.lock() {
            let n = Notif { dev, handle, cookie, freeze, active };
            match v.iter_mut().find(|x| (x.dev, x.handle, x.cookie, x.freeze) == (dev, handle, cookie, freeze)) {
                Some(x) => x.active = active,
                None if active => {
                    if v.len() >= MAX_NOTIFS {
                        v.remove(0);
                    }
                    v.push(n);
                }
                None => {}
            }
        }
    }

    /// In a well-formed op of a sequence, `quarters`/4 of the time a notification requested
    /// earlier on `dev` (still active, cleared since, or either): its handle and cookie.
    pub(super) fn notif(
        &mut self,
        dev: usize,
        freeze: bool,
        quarters: u64,
        active: Option<bool>,
    ) -> Option<(u32, u64)> {
        if !self.sh.sequence || !self.sane || !self.rng.chance(quarters, 4) {
            return None;
        }
        let known: Vec<(u32, u64)> = self
            .sh
            .notifs
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|n| n.dev == dev && n.freeze == freeze && active.is_none_or(|a| n.active == a))
                    .map(|n| (n.handle, n.cookie))
                    .collect()
            })
            .unwrap_or_default();
        (!known.is_empty()).then(|| *self.rng.pick(&known))
    }

    /// The handle and cookie of a notification request. In a well-formed op of a sequence:
    /// half the time one cleared before (libbinder's cookie is the proxy's address, so a
    /// client that registers again after a clear uses the same one), else a handle this fd
    /// holds a ref on. Remembered as active.
    pub(super) fn request_target(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        let (handle, cookie) = self.request_pick(dev, freeze);
        self.note_notif(dev, handle, cookie, freeze, true);
        (handle, cookie)
    }

    /// The handle and cookie of a notification clear: in a well-formed op of a sequence,
    /// mostly an active one. Remembered as cleared.
    pub(super) fn clear_target(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        let (handle, cookie) = self.notif(dev, freeze, 3, Some(true)).unwrap_or_else(|| (self.handle(), self.cookie()));
        self.note_notif(dev, handle, cookie, freeze, false);
        (handle, cookie)
    }

    pub(super) fn request_pick(&mut self, dev: usize, freeze: bool) -> (u32, u64) {
        if let Some(n) = self.notif(dev, freeze, 2, Some(false)) {
            return n;
        }
        if self.sh.sequence && self.sane {
            let known: Vec<u32> = self
                .sh
                .handles
                .lock()
                .map(|h| h.iter().filter(|x| x.0 == dev).map(|x| x.1).collect())
                .unwrap_or_default();
            if !known.is_empty() {
                let h = *self.rng.pick(&known);
                return (h, self.cookie());
            }
        }
        (self.handle(), self.cookie())
    }

    /// A sequence's `BR_FROZEN_BINDER`s: answered at once or remembered as pending.
    pub(super) fn answer_frozen(&mut self, di: usize, buf: &[u8]) {
        let (now, later) = frozen_answers(&mut self.rng, buf);
        if let Ok(mut v) = self.sh.frozen.lock() {
            for c in later {
                if v.len() >= MAX_NOTIFS {
                    v.remove(0);
                }
                v.push((di, c));
            }
        }
        if now.is_empty() {
            return;
        }
        let mut b = Vec::new();
        for c in now {
            Command::FreezeNotificationDone(c).encode(&mut b);
            self.sh.shm.bump(stat::BC_COMMANDS);
        }
        let Some(fd) = self.fdev(di).map(|d| d.fd) else { return };
        self.write_cmds(di, fd, &b);
    }
}
