//! binder-kprof: where the kernel's instructions go while a program runs. Samples the
//! kernel-mode PMU event `--event instructions|cycles` every `--period N` events on every
//! CPU (perf_event_open, pid -1, exclude_user), runs the program after `--`, and attributes
//! each sample's IP to a function from /proc/kallsyms. Reports one `kprof` result: samples per
//! function (idle-loop functions counted apart), lost records, the event and period.
//!
//! Limits measured here (QEMU 10.0.2, `--tcg icount`): QEMU's instruction counter is the one
//! instruction count of all vCPUs, and the overflow interrupt is taken late: on a sequential
//! binderThroughputTest -w 2 -p, 1534 of 1784 non-idle samples landed in user mode (after the
//! return to EL0) and most kernel ones at interrupt-enable points (handle_softirqs,
//! finish_task_switch). So the per-function split is skid, not cost; the tool stays for a
//! QEMU whose PMU samples precisely, and to show the problem.

mod symbols;

use benchkit::counters::PerfEventAttr;
use labproto::{report, Status};
use serde_json::json;
use std::time::Instant;

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_SAMPLE_IP: u64 = 1;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
/// attr flag bits: disabled (0), exclude_user (4), exclude_hv (6).
const FLAGS: u64 = 1 | (1 << 4) | (1 << 6);
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// Data pages per CPU buffer (a power of two), plus the header page.
const DATA_PAGES: usize = 64;

/// One CPU's sampling event and its ring buffer.
struct Ring {
    fd: libc::c_int,
    base: *mut u8,
    page: usize,
}

impl Ring {
    fn open(config: u64, period: u64, cpu: i32) -> Result<Ring, String> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            sample_period: period,
            sample_type: PERF_SAMPLE_IP,
            flags: FLAGS,
            wakeup_events: 0,
            ..Default::default()
        };
        // SAFETY: attr is a valid perf_event_attr of the size it declares; pid -1 with a CPU
        // samples every task on that CPU.
        let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, -1, cpu, -1, 0) };
        if fd < 0 {
            return Err(format!("perf_event_open on cpu{cpu}: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (DATA_PAGES + 1);
        // SAFETY: maps the event's ring buffer (header page + data pages) for reading and
        // writing data_tail; the mapping lives as long as the Ring.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd as i32, 0)
        };
        if base == libc::MAP_FAILED {
            return Err(format!("mmap of the cpu{cpu} ring: {}", std::io::Error::last_os_error()));
        }
        Ok(Ring { fd: fd as libc::c_int, base: base.cast(), page })
    }

    fn ioctl(&self, req: libc::c_ulong) {
        // SAFETY: fd is this ring's perf event; ENABLE/DISABLE take no argument.
        unsafe { libc::ioctl(self.fd, req, 0) };
    }

    /// Reads every complete record since the last drain: sample IPs into `ips`, lost counts.
    fn drain(&mut self, ips: &mut Vec<u64>, lost: &mut u64) {
        let size = (self.page * DATA_PAGES) as u64;
        // SAFETY: the header page starts with struct perf_event_mmap_page; data_head (offset
        // 1024) is written by the kernel, data_tail (1032) by us; acquire/release order them.
        let (head_p, tail_p) = unsafe { (self.base.add(1024) as *const u64, self.base.add(1032) as *mut u64) };
        let head = unsafe { std::ptr::read_volatile(head_p) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let mut tail = unsafe { std::ptr::read_volatile(tail_p) };
        let data = unsafe { self.base.add(self.page) };
        let byte = |off: u64| -> u8 { unsafe { *data.add((off % size) as usize) } };
        let word =
            |off: u64, n: usize| -> u64 { (0..n).fold(0u64, |acc, i| acc | (byte(off + i as u64) as u64) << (8 * i)) };
        while tail + 8 <= head {
            let (kind, len) = (word(tail, 4) as u32, word(tail + 6, 2));
            if len < 8 || tail + len > head {
                break;
            }
            match kind {
                PERF_RECORD_SAMPLE => ips.push(word(tail + 8, 8)),
                PERF_RECORD_LOST => *lost += word(tail + 16, 8),
                _ => {}
            }
            tail += len;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: data_tail is ours to write; it tells the kernel what we consumed.
        unsafe { std::ptr::write_volatile(tail_p, tail) };
    }
}

fn run_program(argv: &[String]) -> Result<(i32, f64), String> {
    let t0 = Instant::now();
    let st = std::process::Command::new(&argv[0]).args(&argv[1..]).status().map_err(|e| format!("{}: {e}", argv[0]))?;
    Ok((st.code().unwrap_or(128), t0.elapsed().as_secs_f64()))
}

fn run(a: &benchkit::Args, prog: &[String]) -> Result<bool, String> {
    if prog.is_empty() {
        return Err(
            "usage: binder-kprof [--event instructions|cycles] [--period N] [--top N] -- PROGRAM ARGS...".into()
        );
    }
    let event = a.get("event", "instructions".to_string())?;
    let config = match event.as_str() {
        "cycles" => 0,
        "instructions" => 1,
        e => return Err(format!("--event {e:?}: use instructions or cycles")),
    };
    let period: u64 = a.get("period", 20_000)?;
    let top: usize = a.get("top", 60)?;
    let syms = symbols::Symbols::load()?;
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as i32;
    let mut rings = (0..cpus).map(|c| Ring::open(config, period, c)).collect::<Result<Vec<_>, _>>()?;
    let (mut ips, mut lost) = (vec![], 0u64);
    rings.iter().for_each(|r| r.ioctl(PERF_EVENT_IOC_ENABLE));
    // The rings hold 64 pages per CPU (16k samples): enough for a run of a few seconds at
    // the default period; more would be counted as lost.
    let (code, secs) = run_program(prog)?;
    rings.iter().for_each(|r| r.ioctl(PERF_EVENT_IOC_DISABLE));
    for r in &mut rings {
        r.drain(&mut ips, &mut lost);
    }
    let prof = syms.attribute(&ips);
    println!(
        "kprof: {} samples ({} idle, {} user, {} unresolved, {lost} lost) over {secs:.2} s, {event} period {period}",
        ips.len(),
        prof.idle,
        prof.user,
        prof.unresolved
    );
    for (name, n) in prof.by_function.iter().take(top) {
        println!("{n:>8}  {:5.2}%  {name}", 100.0 * *n as f64 / prof.busy().max(1) as f64);
    }
    let funcs: Vec<_> = prof.by_function.iter().take(top).map(|(f, n)| json!([f, n])).collect();
    report(
        "kprof",
        if code == 0 { Status::Pass } else { Status::Fail },
        secs * 1000.0,
        (code != 0).then(|| format!("{} exited with {code}", prog[0])),
        json!({"event": event, "period": period, "samples": ips.len(), "idle": prof.idle, "unresolved": prof.unresolved, "user": prof.user,
               "lost": lost, "busy": prof.busy(), "functions": funcs, "program": prog}),
    );
    Ok(code == 0)
}

pub fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let split = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let prog: Vec<String> = argv.get(split + 1..).map(<[String]>::to_vec).unwrap_or_default();
    let res =
        benchkit::Args::parse(argv[..split].to_vec(), &[], &["event", "period", "top"]).and_then(|a| run(&a, &prog));
    match res {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            report("kprof", Status::Fail, 0.0, Some(e), serde_json::Value::Null);
            std::process::exit(2);
        }
    }
}
