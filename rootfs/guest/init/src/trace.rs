//! `--trace`: tracefs events recorded around each step, sent to the host on the trace port as
//! one newc cpio archive per step (see `labproto::TRACE_PORT` for the layout).

use crate::sys;
use labproto::TraceSpec;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

const TRACEFS: &str = "/sys/kernel/tracing";
/// Sending a step's trace may take a while for a full ring buffer.
const SEND_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Tracer {
    events: Vec<String>,
    buffer_kb: u32,
    port: File,
    meta_sent: bool,
}

fn tf(name: &str) -> String {
    format!("{TRACEFS}/{name}")
}

fn write_file(name: &str, value: &str, append: bool) -> Result<(), String> {
    let path = tf(name);
    let mut f = OpenOptions::new()
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    f.write_all(value.as_bytes()).map_err(|e| format!("writing {value:?} to {path}: {e}"))
}

/// `binder:` is the running binder driver's system: `binder` (C) or `rust_binder` (Rust).
fn resolve(event: &str, has_system: impl Fn(&str) -> bool) -> Result<String, String> {
    let (system, name) = event.split_once(':').ok_or_else(|| format!("bad trace event {event:?}"))?;
    let system =
        if system == "binder" && !has_system("binder") && has_system("rust_binder") { "rust_binder" } else { system };
    if !has_system(system) {
        return Err(format!("no trace system {system:?} in this kernel ({TRACEFS}/available_events lists them)"));
    }
    Ok(format!("{system}:{name}"))
}

impl Tracer {
    pub fn new(spec: &TraceSpec, port: &Path) -> Result<Tracer, String> {
        if !Path::new(&tf("set_event")).exists() {
            return Err(format!("--trace: no tracefs at {TRACEFS} (CONFIG_FTRACE and trace events needed)"));
        }
        let has = |s: &str| Path::new(&tf(&format!("events/{s}"))).is_dir();
        let events = spec.events.iter().map(|e| resolve(e, has)).collect::<Result<Vec<_>, _>>()?;
        let port = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(port)
            .map_err(|e| format!("trace port {}: {e}", port.display()))?;
        Ok(Tracer { events, buffer_kb: spec.buffer_kb, port, meta_sent: false })
    }

    /// Empties the ring buffer, selects the events and turns tracing on.
    pub fn start(&mut self) -> Result<(), String> {
        write_file("tracing_on", "0", false)?;
        write_file("buffer_size_kb", &self.buffer_kb.to_string(), false)?;
        write_file("trace", "", false)?;
        write_file("set_event", "", false)?;
        for e in &self.events {
            write_file("set_event", e, true).map_err(|err| format!("trace event {e}: {err}"))?;
        }
        write_file("tracing_on", "1", false)
    }

    /// Turns tracing off and sends the step's trace.
    pub fn finish(&mut self, step: &str) -> Result<(), String> {
        write_file("tracing_on", "0", false)?;
        let mut files: Vec<(String, Vec<u8>)> = vec![];
        if !self.meta_sent {
            files.extend(self.meta());
            self.meta_sent = true;
        }
        files.push((format!("{step}/trace.txt"), read(&tf("trace"))));
        files.push((format!("{step}/saved_cmdlines"), read(&tf("saved_cmdlines"))));
        for cpu in 0..cpus() {
            files.push((format!("{step}/cpu{cpu}.raw"), read_raw(&tf(&format!("per_cpu/cpu{cpu}/trace_pipe_raw")))));
        }
        let archive = cpio_archive(&files).map_err(|e| format!("packing the trace of {step}: {e}"))?;
        sys::write_all_timeout(self.port.as_raw_fd(), &archive, SEND_TIMEOUT)
            .map_err(|e| format!("sending the trace of {step}: {e}"))?;
        sys::log(&format!("step {step}: trace sent ({} KiB)", archive.len() / 1024));
        Ok(())
    }

    /// What trace-cmd needs besides the ring buffers: formats of the recorded systems (and
    /// ftrace's own), headers, printk formats, clock and symbols.
    fn meta(&self) -> Vec<(String, Vec<u8>)> {
        let mut systems: Vec<&str> = self.events.iter().filter_map(|e| e.split(':').next()).collect();
        systems.push("ftrace");
        systems.sort();
        systems.dedup();
        let mut out = vec![];
        for f in ["events/header_page", "events/header_event", "printk_formats", "trace_clock", "saved_tgids"] {
            out.push((format!("meta/{f}"), read(&tf(f))));
        }
        for s in systems {
            let dir = tf(&format!("events/{s}"));
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.file_name().to_string_lossy().into()).collect()
                })
                .unwrap_or_default();
            names.sort();
            for n in names {
                out.push((format!("meta/events/{s}/{n}/format"), read(&format!("{dir}/{n}/format"))));
            }
        }
        out.push(("meta/kallsyms".into(), read("/proc/kallsyms")));
        out
    }
}

/// Reads a tracefs (or proc) file with large reads: some tracefs files (events/header_page,
/// header_event) answer only a read at offset 0, so std's 32-byte first read would cut them.
fn read(path: &str) -> Vec<u8> {
    let Ok(mut f) = File::open(path) else { return vec![] };
    let mut out = vec![];
    let mut chunk = vec![0u8; 256 << 10];
    loop {
        match f.read(&mut chunk) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Pages of a per-CPU ring buffer, read until it is empty (tracing is off by then).
fn read_raw(path: &str) -> Vec<u8> {
    let Ok(mut f) = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path) else { return vec![] };
    let mut out = vec![];
    let mut page = vec![0u8; 4096];
    loop {
        match f.read(&mut page) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&page[..n]),
        }
    }
}

fn cpus() -> usize {
    std::fs::read_dir(tf("per_cpu")).map(|rd| rd.count()).unwrap_or(0)
}

fn cpio_archive(files: &[(String, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let mut out = vec![];
    for (i, (name, data)) in files.iter().enumerate() {
        let mut w =
            cpio::newc::Builder::new(name).ino(i as u32 + 1).mode(0o100644).nlink(1).write(&mut out, data.len() as u32);
        w.write_all(data)?;
        w.finish()?;
    }
    cpio::newc::trailer(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binder_means_the_running_driver() {
        let rust = |s: &str| s == "rust_binder" || s == "sched";
        assert_eq!(resolve("binder:*", rust).unwrap(), "rust_binder:*");
        assert_eq!(resolve("sched:sched_switch", rust).unwrap(), "sched:sched_switch");
        let c = |s: &str| s == "binder";
        assert_eq!(resolve("binder:binder_transaction", c).unwrap(), "binder:binder_transaction");
        assert!(resolve("irq:*", rust).unwrap_err().contains("no trace system \"irq\""));
    }

    #[test]
    fn archive_reads_back() {
        let a = cpio_archive(&[("s/trace.txt".into(), b"# tracer: nop\n".to_vec())]).unwrap();
        let r = cpio::newc::Reader::new(std::io::Cursor::new(&a)).unwrap();
        assert_eq!(r.entry().name(), "s/trace.txt");
        assert_eq!(r.entry().file_size(), 14);
    }
}
