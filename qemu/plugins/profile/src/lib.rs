//! `liblab_plugin_profile.so`: how often each kernel translation block ran, written at exit
//! for `lab profile` to symbolize (lab/src/measure/profile.rs).
//!
//! One execution callback per translation block (TB) counts its executions; a kernel TB is
//! keyed by its start address and instruction count, and the host attributes its `n`
//! instructions to the addresses `start + 4 * i` (A64 instructions are 4 bytes, and a TB is
//! straight-line code: it ends at every branch), so a TB that falls through into the next
//! symbol is split exactly. Per-instruction callbacks would cost one helper call per
//! instruction instead of one per TB, for no better attribution. The one inexactness: a TB
//! left early by a synchronous exception (a fault in a uaccess, a BRK) counts in full. Under
//! icount a TB never stops part-way for the budget: QEMU translates a shorter one instead,
//! which is counted as its own block.
//!
//! User-space TBs (start address with the top bit clear) are summed into one total.
//!
//! Threads: translation and execution callbacks run in the vCPU threads. Under round-robin
//! TCG (`thread=single`, also icount) that is one thread; under MTTCG (`thread=multi`) they
//! run concurrently, so the registry is a mutex (taken only at translation) and the counters
//! are relaxed atomics (uncontended under round-robin, and exact under MTTCG too).
//!
//! Argument: `out=PATH` (required). The file:
//!
//! ```text
//! # lab-profile 1
//! user 123456789
//! ffff800080010000 7 4242
//! ```
//!
//! `user` is the user-space instruction count; then one line per kernel TB, sorted: start
//! address (hex), instructions, executions.

use qemu_plugin::install::{Args, Info, Value};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::{PluginId, TranslationBlock, VCPUIndex};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The format line the host checks.
const HEADER: &str = "# lab-profile 1";

/// Execution counters of kernel TBs by (start address, instructions). Leaked: QEMU may run a
/// TB until it exits, and a retranslated TB keeps counting into the same entry.
static KERNEL: Mutex<Option<HashMap<(u64, u32), &'static AtomicU64>>> = Mutex::new(None);
static USER: AtomicU64 = AtomicU64::new(0);
static OUT: Mutex<Option<String>> = Mutex::new(None);

/// arm64 kernel addresses have the top bits set (TTBR1); user ones clear (TTBR0).
fn is_kernel(vaddr: u64) -> bool {
    vaddr >> 63 == 1
}

fn counter(vaddr: u64, n: u32) -> &'static AtomicU64 {
    let mut map = KERNEL.lock().unwrap();
    map.get_or_insert_with(HashMap::new).entry((vaddr, n)).or_insert_with(|| Box::leak(Box::new(AtomicU64::new(0))))
}

#[derive(Default)]
struct Profile;

impl Register for Profile {
    fn register(&mut self, id: PluginId, args: &Args, _info: &Info) -> qemu_plugin::Result<()> {
        let Some(Value::String(out)) = args.parsed.get("out") else {
            let _ = qemu_plugin::qemu_plugin_outs("libprofile: usage: -plugin liblab_plugin_profile.so,out=PATH\n");
            return Err(qemu_plugin::Error::MissingArgValue { argument: "out=PATH".into() });
        };
        *OUT.lock().unwrap() = Some(out.clone());
        qemu_plugin::qemu_plugin_register_atexit_cb(id, |_| write_profile())
    }
}

impl HasCallbacks for Profile {
    fn on_translation_block_translate(&mut self, _id: PluginId, tb: TranslationBlock) -> qemu_plugin::Result<()> {
        let (vaddr, n) = (tb.vaddr(), tb.size() as u32);
        if is_kernel(vaddr) {
            let c = counter(vaddr, n);
            tb.register_execute_callback(move |_: VCPUIndex| {
                c.fetch_add(1, Ordering::Relaxed);
            });
        } else {
            tb.register_execute_callback(move |_: VCPUIndex| {
                USER.fetch_add(u64::from(n), Ordering::Relaxed);
            });
        }
        Ok(())
    }
}

fn write_profile() {
    let mut rows: Vec<(u64, u32, u64)> = match KERNEL.lock().unwrap().as_ref() {
        Some(map) => map.iter().map(|(&(a, n), c)| (a, n, c.load(Ordering::Relaxed))).filter(|r| r.2 > 0).collect(),
        None => vec![],
    };
    rows.sort_unstable();
    let mut text = format!("{HEADER}\nuser {}\n", USER.load(Ordering::Relaxed));
    for (a, n, execs) in rows {
        let _ = writeln!(text, "{a:016x} {n} {execs}");
    }
    if let Some(path) = OUT.lock().unwrap().as_deref() {
        if let Err(e) = std::fs::write(path, text) {
            let _ = qemu_plugin::qemu_plugin_outs(format!("libprofile: writing {path}: {e}\n"));
        }
    }
}

qemu_plugin::register!(Profile);
