//! One BC command of a write stream, of any kind, well-formed or not.

use super::*;

impl Thread {
    /// Appends one command (valid, semi-valid or malformed) to `w`.
    pub(super) fn command(&mut self, w: &mut Vec<u8>, dev: usize) {
        let k = if self.sane && self.sh.sequence {
            self.rng.weighted(&SEQ_SANE)
        } else if self.sane {
            self.rng.weighted(&[24, 14, 6, 3, 12, 3, 3, 3, 3, 4, 4, 3, 3, 2, 2, 2, 0, 0, 0, 0])
        } else {
            self.rng.weighted(&[20, 8, 6, 3, 12, 3, 3, 3, 3, 4, 4, 3, 3, 2, 2, 2, 2, 3, 4, 3])
        };
        let cmd = match k {
            0..=3 => {
                let handle = self.handle();
                let flags = self.tx_flags();
                // Well-formed replies answer a pending incoming call (whose buffer goes
                // first); without one, send a transaction instead.
                let k = if (k == 1 || k == 3) && self.sane && !self.pending_in.iter().any(|p| p.0 == dev) {
                    k - 1
                } else {
                    k
                };
                if (k == 1 || k == 3) && self.sane {
                    if let Some(i) = self.pending_in.iter().position(|p| p.0 == dev) {
                        let (_, buf) = self.pending_in.remove(i);
                        if let Some(j) = self.buffers.iter().position(|b| *b == (dev, buf)) {
                            self.buffers.remove(j);
                            let at = w.len();
                            Command::FreeBuffer(buf).encode(w);
                            self.emitted_frees.push((at, w.len(), dev, buf));
                        }
                    }
                }
                let reply = k == 1 || k == 3;
                let mut flags = if reply { flags & !TF_ONE_WAY } else { flags };
                if !reply && self.sane && self.awaiting[Self::aw(dev)] {
                    flags |= TF_ONE_WAY;
                }
                if !reply && flags & TF_ONE_WAY == 0 {
                    self.awaiting[Self::aw(dev)] = true;
                }
                let (tr, sg) = self.transaction(handle, flags, k >= 2);
                match k {
                    0 => Command::Transaction(tr),
                    1 => Command::Reply(tr),
                    2 => Command::TransactionSg { data: tr, buffers_size: sg },
                    _ => Command::ReplySg { data: tr, buffers_size: sg },
                }
            }
            4 => {
                // Mostly our own received buffers; garbage that can never be a buffer
                // start otherwise (so that no other thread's buffer is freed under it).
                let own = self.buffers.iter().position(|b| b.0 == dev);
                match own {
                    Some(i) if self.rng.chance(4, 5) => {
                        let (_, p) = self.buffers.remove(i).unwrap();
                        self.pending_in.retain(|x| *x != (dev, p));
                        let at = w.len();
                        Command::FreeBuffer(p).encode(w);
                        self.emitted_frees.push((at, w.len(), dev, p));
                        self.sh.shm.bump(stat::BC_COMMANDS);
                        return;
                    }
                    _ => {
                        let base = self.fdev(dev).map(|d| d.map).unwrap_or(0);
                        Command::FreeBuffer(match self.rng.below(3) {
                            0 => base + 1 + 2 * self.rng.below(1 << 19),
                            1 => self.rng.next_u64() | 1,
                            _ => 0,
                        })
                    }
                }
            }
            5 => Command::IncRefs(self.handle()),
            6 => Command::Acquire(self.handle()),
            7 => Command::Release(self.handle()),
            8 => Command::DecRefs(self.handle()),
            9 | 10 => {
                let (ptr, cookie) = if !self.incs.is_empty() && self.rng.chance(3, 4) {
                    let i = self.rng.below(self.incs.len() as u64) as usize;
                    self.incs.swap_remove(i)
                } else {
                    self.node_ptr()
                };
                let pc = binder::protocol::PtrCookie { ptr, cookie };
                if k == 9 {
                    Command::IncRefsDone(pc)
                } else {
                    Command::AcquireDone(pc)
                }
            }
            11 => match self.rng.below(3) {
                0 => Command::RegisterLooper,
                1 => Command::EnterLooper,
                _ => Command::ExitLooper,
            },
            12 => {
                let (handle, cookie) = self.request_target(dev, false);
                Command::RequestDeathNotification { handle, cookie }
            }
            13 => {
                let (handle, cookie) = self.clear_target(dev, false);
                Command::ClearDeathNotification { handle, cookie }
            }
            14 => {
                let c = if !self.deaths.is_empty() && self.rng.chance(3, 4) {
                    self.deaths.remove(0)
                } else {
                    self.cookie()
                };
                Command::DeadBinderDone(c)
            }
            15 => match self.rng.below(3) {
                0 => {
                    let (handle, cookie) = self.request_target(dev, true);
                    Command::RequestFreezeNotification { handle, cookie }
                }
                1 => {
                    let (handle, cookie) = self.clear_target(dev, true);
                    let again = self.sane && self.sh.sequence && self.rng.chance(REREQUEST_QUARTERS, 4);
                    if again {
                        self.note_notif(dev, handle, cookie, true, true);
                    }
                    freeze_clear(w, handle, cookie, again);
                    self.sh.shm.bump(stat::BC_COMMANDS);
                    return;
                }
                _ => {
                    let c = self
                        .pending_frozen(dev)
                        .or_else(|| self.notif(dev, true, 3, None).map(|n| n.1))
                        .unwrap_or_else(|| self.cookie());
                    Command::FreezeNotificationDone(c)
                }
            },
            16 => {
                if self.rng.chance(1, 2) {
                    Command::AttemptAcquire { priority: self.rng.next_u32() as i32, desc: self.handle() }
                } else {
                    Command::AcquireResult(self.rng.next_u32() as i32)
                }
            }
            17 => {
                // A code the driver does not know.
                self.sh.shm.bump(stat::MALFORMED);
                let nr = self.rng.range(22, 255) as u8;
                let size = self.rng.below(80) as usize;
                w.extend_from_slice(&ioc(self.rng.below(4) as u32, b'c', nr, size).to_ne_bytes());
                w.extend_from_slice(&self.rng.bytes(size));
                return;
            }
            18 => {
                self.sh.shm.bump(stat::MALFORMED);
                let n = self.rng.range(1, 16) as usize;
                w.extend_from_slice(&self.rng.bytes(n));
                return;
            }
            _ => {
                // A known command cut short (only useful last in the stream).
                self.sh.shm.bump(stat::MALFORMED);
                let mut b = Vec::new();
                Command::Transaction(TransactionData::default()).encode(&mut b);
                let cut = self.rng.range(1, b.len() as u64 - 1) as usize;
                w.extend_from_slice(&b[..cut]);
                return;
            }
        };
        self.sh.shm.bump(stat::BC_COMMANDS);
        cmd.encode(w);
    }
}
