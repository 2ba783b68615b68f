//! `liblab_plugin_cache.so`: every guest data access of every vCPU goes through the cache
//! model (`lab-cache-model`) on its physical address, and each load's latency above an L1D
//! hit is charged to that vCPU's local time with `qemu_plugin_vcpu_charge_ns()` (qemu/0004,
//! heterogeneous icount only). Counters per CPU are written as JSON at exit. Once a frequency
//! domain sets the vCPU's core clock (`--dvfs`), the core's own cycles of each cost follow it
//! (`qemu_plugin_vcpu_khz()`, qemu/0016); before that the costs are the top clock's.
//!
//! Each vCPU's L1D references and misses are also the guest PMU's L1D_CACHE and
//! L1D_CACHE_REFILL events (`qemu_plugin_pmu_register_count()`, qemu/0021), so the guest's
//! perf counts them per task and per exception level.
//!
//! Arguments: `config=PATH` (the model as JSON, written by the harness from the board's
//! `[cache_model]`), `out=PATH`, and `charge=off` to count without charging.
//!
//! Callbacks run in the round-robin thread (`thread=single`), one at a time, so the model
//! sees one deterministic sequence of accesses; the mutex is never contended.

use lab_cache_model::{Config, Model};
use qemu_plugin::install::{Args, Info, Value};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::{MemRW, MemoryInfo, PluginId, TranslationBlock, VCPUIndex};
use std::sync::Mutex;

extern "C" {
    /// qemu/0004: adds `ns` to the vCPU's local time; false (and nothing) without
    /// heterogeneous icount.
    fn qemu_plugin_vcpu_charge_ns(vcpu_index: u32, ns: u64) -> bool;
    /// qemu/0016: the vCPU's current core clock in kHz; 0 until a frequency domain (`--dvfs`)
    /// sets one.
    fn qemu_plugin_vcpu_khz(vcpu_index: u32) -> u64;
    /// qemu/0021: the guest PMU counts architected event `event` with `cb`'s counts.
    fn qemu_plugin_pmu_register_count(event: u16, cb: extern "C" fn(u32) -> u64) -> bool;
}

/// The Arm PMU's common events for L1D accesses and refills.
const L1D_CACHE: u16 = 0x04;
const L1D_CACHE_REFILL: u16 = 0x03;

/// One counter of a vCPU, for the PMU (never called inside `on_access`, which holds the lock).
fn pmu_count(vcpu: u32, f: fn(&lab_cache_model::Counters) -> u64) -> u64 {
    let guard = STATE.lock().unwrap();
    let Some(s) = guard.as_ref() else { return 0 };
    f(&s.model.counters((vcpu as usize).min(s.model.cpus() - 1)))
}

extern "C" fn l1d_refs(vcpu: u32) -> u64 {
    pmu_count(vcpu, |c| c.l1d_refs)
}

extern "C" fn l1d_misses(vcpu: u32) -> u64 {
    pmu_count(vcpu, |c| c.l1d_misses)
}

struct State {
    model: Model,
    /// Picoseconds charged by the model but not yet passed on (QEMU takes whole ns).
    pending_ps: Vec<u64>,
    charged_ns: Vec<u64>,
    /// Charges QEMU refused (not under heterogeneous icount).
    refused: u64,
    charge: bool,
    out: String,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn on_access(vcpu: VCPUIndex, info: MemoryInfo, vaddr: u64) {
    let Some(hw) = info.hwaddr(vaddr) else { return };
    if hw.is_io() {
        return;
    }
    let mut guard = STATE.lock().unwrap();
    let Some(s) = guard.as_mut() else { return };
    let cpu = (vcpu as usize).min(s.model.cpus() - 1);
    // SAFETY: a plain C call of QEMU's plugin API from a vCPU callback.
    s.model.set_khz(cpu, unsafe { qemu_plugin_vcpu_khz(vcpu) });
    let (_, ps) = s.model.access(cpu, hw.hwaddr(), info.is_store());
    if ps == 0 || !s.charge {
        return;
    }
    s.pending_ps[cpu] += ps;
    let ns = s.pending_ps[cpu] / 1000;
    if ns > 0 {
        s.pending_ps[cpu] %= 1000;
        // SAFETY: a plain C call of QEMU's plugin API from a vCPU callback.
        if unsafe { qemu_plugin_vcpu_charge_ns(vcpu, ns) } {
            s.charged_ns[cpu] += ns;
        } else {
            s.refused += 1;
        }
    }
}

fn arg<'a>(args: &'a Args, name: &str) -> Option<&'a str> {
    match args.parsed.get(name) {
        Some(Value::String(s)) => Some(s.as_str()),
        _ => None,
    }
}

fn usage(problem: String) -> qemu_plugin::Error {
    let _ = qemu_plugin::qemu_plugin_outs(format!(
        "libcache: {problem}\nusage: -plugin liblab_plugin_cache.so,config=MODEL.json,out=PATH[,charge=off]\n"
    ));
    qemu_plugin::Error::MissingArgValue { argument: problem }
}

#[derive(Default)]
struct Cache;

impl Register for Cache {
    fn register(&mut self, id: PluginId, args: &Args, _info: &Info) -> qemu_plugin::Result<()> {
        let (Some(config), Some(out)) = (arg(args, "config"), arg(args, "out")) else {
            return Err(usage("config=PATH and out=PATH are required".into()));
        };
        let charge = match args.parsed.get("charge") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s == "on" || s == "off" => s == "on",
            Some(v) => return Err(usage(format!("charge={v:?}: use charge=on or charge=off"))),
        };
        let text = std::fs::read_to_string(config).map_err(|e| usage(format!("reading {config}: {e}")))?;
        let cfg: Config = serde_json::from_str(&text).map_err(|e| usage(format!("{config}: {e}")))?;
        let model = Model::new(cfg).map_err(|e| usage(format!("{config}: {e}")))?;
        let n = model.cpus();
        *STATE.lock().unwrap() = Some(State {
            model,
            pending_ps: vec![0; n],
            charged_ns: vec![0; n],
            refused: 0,
            charge,
            out: out.to_string(),
        });
        for (event, cb) in [(L1D_CACHE, l1d_refs as extern "C" fn(u32) -> u64), (L1D_CACHE_REFILL, l1d_misses)] {
            // SAFETY: a plain C call of QEMU's plugin API at install, before any vCPU exists.
            if !unsafe { qemu_plugin_pmu_register_count(event, cb) } {
                let _ = qemu_plugin::qemu_plugin_outs(format!("libcache: PMU event {event:#x} not registered\n"));
            }
        }
        qemu_plugin::qemu_plugin_register_atexit_cb(id, |_| write_counters())
    }
}

impl HasCallbacks for Cache {
    fn on_translation_block_translate(&mut self, _id: PluginId, tb: TranslationBlock) -> qemu_plugin::Result<()> {
        for insn in tb.instructions() {
            insn.register_memory_access_callback(on_access, MemRW::QEMU_PLUGIN_MEM_RW);
        }
        Ok(())
    }
}

fn write_counters() {
    let guard = STATE.lock().unwrap();
    let Some(s) = guard.as_ref() else { return };
    let cpus: Vec<_> = (0..s.model.cpus())
        .map(|i| {
            let mut v = serde_json::to_value(s.model.counters(i)).unwrap();
            v["charged_ns"] = s.charged_ns[i].into();
            v
        })
        .collect();
    let json = serde_json::json!({ "charge": s.charge, "refused": s.refused, "cpus": cpus });
    if let Err(e) = std::fs::write(&s.out, format!("{json:#}\n")) {
        let _ = qemu_plugin::qemu_plugin_outs(format!("libcache: writing {}: {e}\n", s.out));
    }
}

qemu_plugin::register!(Cache);
