//! `collect` paths of a step: files (directories recursively) sent to the host when the step
//! ends, as base64 chunks in the result stream. The result stream is the one channel every
//! TCG mode has (under icount it is the console), and it needs no kernel options (a 9p or
//! virtiofs share would need them in every flavor, and a device that icount runs may not
//! keep deterministic).

use crate::sink::Sink;
use crate::sys;
use labproto::{Event, FILE_CHUNK_BYTES};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Bytes sent per file at most; the rest is dropped with an error.
pub const MAX_FILE_BYTES: u64 = 256 << 20;
/// Directory levels followed below a collected directory.
const MAX_DEPTH: usize = 8;

/// Sends every path of `paths` for the step reported as `step`.
pub fn send(step: &str, paths: &[String], sink: &mut Sink) {
    for p in paths {
        send_path(step, Path::new(p), 0, sink);
    }
}

fn end(step: &str, path: &Path, size: u64, error: Option<String>) -> Event {
    Event::FileEnd { step: step.to_string(), path: path.display().to_string(), size, error }
}

fn send_path(step: &str, path: &Path, depth: usize, sink: &mut Sink) {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return sink.send(&end(step, path, 0, Some(format!("cannot stat: {e}")))),
    };
    if meta.is_dir() {
        if depth >= MAX_DEPTH {
            return sink.send(&end(step, path, 0, Some(format!("more than {MAX_DEPTH} directory levels"))));
        }
        let mut entries: Vec<_> = match std::fs::read_dir(path) {
            Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
            Err(e) => return sink.send(&end(step, path, 0, Some(format!("cannot list: {e}")))),
        };
        // The same order every run (and deterministic runs stay so).
        entries.sort();
        for e in entries {
            send_path(step, &e, depth + 1, sink);
        }
    } else if meta.is_file() {
        send_file(step, path, sink);
    } else {
        let what = if meta.file_type().is_symlink() { "a symbolic link (not followed)" } else { "not a regular file" };
        sink.send(&end(step, path, 0, Some(what.into())));
    }
}

/// Reads to EOF, not to the stat size: debugfs, procfs and binderfs files report size 0.
fn send_file(step: &str, path: &Path, sink: &mut Sink) {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return sink.send(&end(step, path, 0, Some(format!("cannot open: {e}")))),
    };
    let mut buf = vec![0u8; FILE_CHUNK_BYTES];
    let mut offset = 0u64;
    loop {
        let n = match fill(&mut f, &mut buf) {
            Ok(n) => n,
            Err(e) => return sink.send(&end(step, path, offset, Some(format!("read error at {offset}: {e}")))),
        };
        if n == 0 {
            break;
        }
        if offset + n as u64 > MAX_FILE_BYTES {
            let msg = format!("larger than {} MiB; the first {offset} bytes were sent", MAX_FILE_BYTES >> 20);
            return sink.send(&end(step, path, offset, Some(msg)));
        }
        let data = labproto::encode_chunk(&buf[..n]);
        sink.send(&Event::FileChunk { step: step.to_string(), path: path.display().to_string(), offset, data });
        offset += n as u64;
    }
    sys::log(&format!("step {step}: collected {} ({offset} bytes)", path.display()));
    sink.send(&end(step, path, offset, None));
}

/// Reads until `buf` is full or EOF (seq files hand out a page per read).
fn fill(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
