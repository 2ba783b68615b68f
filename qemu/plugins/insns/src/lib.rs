//! `liblab_plugin_insns.so`: executed guest instructions per vCPU, written as JSON at exit.
//!
//! Counted two ways, because stock QEMU 10.0.2 gets both wrong under round-robin TCG
//! (`-accel tcg,thread=single -smp N`, see qemu/0002): an inline per-vCPU scoreboard add
//! (`inline`), which aborted the guest, and a TB execution callback that is told the vCPU
//! index (`callback`), which was told the vCPU that translated the block.
//!
//! Besides all instructions, both ways also count only the instructions of `cpu-loops`' spin
//! loop (`subs xN, xN, #1; b.ne` back to it, a TB of its own), so a test can compare them with
//! the loops it ran, free of the kernel's work on the same CPU.
//!
//! Arguments: `out=PATH` (required), where
//! `{"inline":[..],"callback":[..],"loop_inline":[..],"loop_callback":[..]}` is written.

use qemu_plugin::install::{Args, Info, Value};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::sys::{qemu_plugin_op, qemu_plugin_scoreboard_new, qemu_plugin_u64, qemu_plugin_u64_get};
use qemu_plugin::{PluginId, TranslationBlock, VCPUIndex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// More vCPUs than any board of the lab has; a larger index is counted in the last slot.
const MAX_VCPUS: usize = 64;

/// One way of counting: a per-vCPU scoreboard entry (inline op) and a callback array.
struct Counter {
    inline: qemu_plugin_u64,
    callback: [AtomicU64; MAX_VCPUS],
}

// SAFETY: the scoreboard lives until QEMU exits and is only touched through QEMU's API.
unsafe impl Send for Counter {}
unsafe impl Sync for Counter {}

impl Counter {
    fn new() -> Counter {
        // SAFETY: one u64 per vCPU; QEMU grows and zero-fills it as vCPUs appear.
        let score = unsafe { qemu_plugin_scoreboard_new(std::mem::size_of::<u64>()) };
        Counter { inline: qemu_plugin_u64 { score, offset: 0 }, callback: [const { AtomicU64::new(0) }; MAX_VCPUS] }
    }

    /// Adds `n` per execution of `tb`, both ways.
    fn count(&'static self, tb: &TranslationBlock, n: u64) {
        qemu_plugin::qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
            tb.clone(),
            qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64,
            self.inline,
            n,
        );
        tb.register_execute_callback(move |vcpu: VCPUIndex| {
            self.callback[(vcpu as usize).min(MAX_VCPUS - 1)].fetch_add(n, Ordering::Relaxed);
        });
    }

    fn values(&self, vcpus: u32) -> (Vec<u64>, Vec<u64>) {
        // SAFETY: the entry is valid and QEMU allocated every index below max_vcpus.
        let inline = (0..vcpus).map(|i| unsafe { qemu_plugin_u64_get(self.inline, i) }).collect();
        (inline, self.callback.iter().take(vcpus as usize).map(|c| c.load(Ordering::Relaxed)).collect())
    }
}

static ALL: OnceLock<Counter> = OnceLock::new();
static LOOP: OnceLock<Counter> = OnceLock::new();
static OUT: Mutex<Option<String>> = Mutex::new(None);

/// `subs xN, xN, #1` followed by `b.ne` to it (`f1000508 54ffffe1` for x8): cpu-loops'
/// spin loop.
pub fn is_spin_loop(insns: &[u32]) -> bool {
    let [subs, bne] = insns else { return false };
    let (rd, rn) = (subs & 0x1f, (subs >> 5) & 0x1f);
    subs & 0xffff_fc00 == 0xf100_0400 && rd == rn && *bne == 0x54ff_ffe1
}

#[derive(Default)]
struct Insns;

impl Register for Insns {
    fn register(&mut self, id: PluginId, args: &Args, info: &Info) -> qemu_plugin::Result<()> {
        let Some(Value::String(out)) = args.parsed.get("out") else {
            let _ = qemu_plugin::qemu_plugin_outs("libinsns: usage: -plugin liblab_plugin_insns.so,out=PATH\n");
            return Err(qemu_plugin::Error::MissingArgValue { argument: "out=PATH".into() });
        };
        *OUT.lock().unwrap() = Some(out.clone());
        let _ = ALL.set(Counter::new());
        let _ = LOOP.set(Counter::new());
        let vcpus = info.system.as_ref().map(|s| s.max_vcpus).unwrap_or(1) as u32;
        qemu_plugin::qemu_plugin_register_atexit_cb(id, move |_| write_counts(vcpus))
    }
}

impl HasCallbacks for Insns {
    fn on_translation_block_translate(&mut self, _id: PluginId, tb: TranslationBlock) -> qemu_plugin::Result<()> {
        let n = tb.size() as u64;
        if let Some(all) = ALL.get() {
            all.count(&tb, n);
        }
        let words: Vec<u32> = tb
            .instructions()
            .map(|i| i.data())
            .filter(|d| d.len() == 4)
            .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        if let Some(l) = LOOP.get().filter(|_| words.len() == tb.size() && is_spin_loop(&words)) {
            l.count(&tb, n);
        }
        Ok(())
    }
}

fn write_counts(vcpus: u32) {
    let (Some(all), Some(lp)) = (ALL.get(), LOOP.get()) else { return };
    let ((inline, callback), (loop_inline, loop_callback)) = (all.values(vcpus), lp.values(vcpus));
    let json = serde_json::json!({
        "inline": inline, "callback": callback, "loop_inline": loop_inline, "loop_callback": loop_callback,
    });
    if let Some(path) = OUT.lock().unwrap().as_deref() {
        if let Err(e) = std::fs::write(path, format!("{json}\n")) {
            let _ = qemu_plugin::qemu_plugin_outs(format!("libinsns: writing {path}: {e}\n"));
        }
    }
}

qemu_plugin::register!(Insns);
