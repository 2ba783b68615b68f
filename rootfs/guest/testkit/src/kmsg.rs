//! The kernel log as a stream of records (/dev/kmsg), and the splat patterns the host
//! harness looks for on the console (`lab/src/harness/splat.rs`), so a guest program can tell
//! which of its steps caused one.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

/// One kernel log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Syslog level (0 emerg .. 7 debug).
    pub level: u8,
    pub seq: u64,
    pub text: String,
}

/// A reader of the kernel log: from where it was opened ([`Kmsg::open_at_end`]: what the
/// kernel logs afterwards; [`Kmsg::open_at_start`]: everything still in the buffer).
pub struct Kmsg {
    f: File,
    /// How often records were overwritten before they could be read (EPIPE).
    pub lost: u64,
}

impl Kmsg {
    pub fn open_at_end() -> io::Result<Kmsg> {
        let mut k = Self::open_at_start()?;
        k.f.seek(SeekFrom::End(0))?;
        Ok(k)
    }

    /// A reader from the oldest record the kernel still holds (boot messages included).
    pub fn open_at_start() -> io::Result<Kmsg> {
        let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg")?;
        Ok(Kmsg { f, lost: 0 })
    }

    /// Records logged since the last call (non-blocking).
    pub fn read_new(&mut self) -> Vec<Record> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(r) = parse_record(&String::from_utf8_lossy(&buf[..n])) {
                        out.push(r);
                    }
                }
                // EPIPE: records were overwritten before we read them; go on.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    self.lost += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        out
    }
}

/// Writes an informational record (not shown on a console at loglevel <= 6). It also
/// closes the previous record: messages without a trailing newline (the Rust driver's
/// `pr_warn!`s) stay open for continuation, and unreadable, until the next one.
pub fn mark(text: &str) {
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("<6>{text}\n").as_bytes()));
}

/// Parses "prio,seq,usec,flags[,...];text\n[ KEY=value\n]".
pub fn parse_record(raw: &str) -> Option<Record> {
    let (head, rest) = raw.split_once(';')?;
    let mut f = head.split(',');
    let prio: u32 = f.next()?.parse().ok()?;
    let seq: u64 = f.next()?.parse().ok()?;
    let text = rest.lines().next().unwrap_or("").to_string();
    Some(Record { level: (prio & 7) as u8, seq, text })
}

/// The kind of splat a log line starts, if any (the host's console scanner uses the same list).
pub use labproto::splat_kind;

/// The records that start a splat, as "kind: text".
pub fn splats(records: &[Record]) -> Vec<String> {
    records.iter().filter_map(|r| splat_kind(&r.text).map(|k| format!("{k}: {}", r.text))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_splats() {
        let r = parse_record("4,1234,5678,-;binder: 12:12 transaction to 0 failed\n SUBSYSTEM=x\n").unwrap();
        assert_eq!((r.level, r.seq), (4, 1234));
        assert_eq!(r.text, "binder: 12:12 transaction to 0 failed");
        assert!(parse_record("garbage").is_none());
        let recs = vec![
            r,
            parse_record("3,1,1,-;BUG: KASAN: slab-use-after-free in foo").unwrap(),
            parse_record("4,2,1,-;WARNING: CPU: 1 PID: 5 at x.c:1 f").unwrap(),
            parse_record("6,3,1,-;INFO: task a:1 blocked for more than 30 seconds.").unwrap(),
        ];
        let s = splats(&recs);
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s[0].starts_with("kasan: "));
        assert!(s[2].starts_with("hung-task: "));
    }
}
