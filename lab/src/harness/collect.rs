//! Files the guest sends after a step (`--collect GUEST_PATH`, a step's `collect`): the
//! init streams them as base64 chunks in the result stream (the virtio-serial port, or
//! `LABRESULT` console lines under icount); they land in the run directory as
//! `collect/<step>/<guest path>`.

use anyhow::{bail, Context, Result};
use labproto::Event;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Writes chunks as they arrive, so a large file never sits in memory.
pub struct Collector {
    root: PathBuf,
    open: BTreeMap<(String, String), (std::fs::File, u64)>,
    /// Problems found on the host side (a lost chunk, an unsafe path, a write error).
    pub errors: Vec<String>,
}

/// Where a guest file of `step` goes below `root`: its absolute path made relative, with no
/// `..` or other components that could leave the directory.
pub fn host_path(root: &Path, step: &str, guest: &str) -> Result<PathBuf> {
    // Step names come from plans: keep them readable (`conformance@3`) but one component.
    let dir: String =
        step.chars().map(|c| if c.is_ascii_alphanumeric() || "._-@".contains(c) { c } else { '_' }).collect();
    let mut out = root.join(if dir.trim_matches('.').is_empty() { "_".into() } else { dir });
    for c in Path::new(guest).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            _ => bail!("guest path {guest:?} has a `..` or prefix component; collect absolute paths without them"),
        }
    }
    Ok(out)
}

impl Collector {
    pub fn new(run_dir: &Path) -> Collector {
        Collector { root: run_dir.join("collect"), open: BTreeMap::new(), errors: vec![] }
    }

    /// Handles a file event; returns true for the chunks, which are not kept as events.
    pub fn take(&mut self, ev: &Event) -> bool {
        match ev {
            Event::FileChunk { step, path, offset, data } => {
                if let Err(e) = self.chunk(step, path, *offset, data) {
                    self.errors.push(format!("collect {path} (step {step}): {e:#}"));
                    self.open.remove(&(step.clone(), path.clone()));
                }
                true
            }
            Event::FileEnd { step, path, size, error } => {
                let written = self.open.remove(&(step.clone(), path.clone())).map(|(_, n)| n).unwrap_or(0);
                if error.is_none() && written != *size {
                    self.errors.push(format!("collect {path} (step {step}): {written} of {size} bytes arrived"));
                } else if error.is_none() && *size == 0 {
                    // An empty file sends no chunk: create it here.
                    if let Err(e) = self.create(step, path) {
                        self.errors.push(format!("collect {path} (step {step}): {e:#}"));
                    }
                }
                false
            }
            _ => false,
        }
    }

    fn create(&self, step: &str, path: &str) -> Result<std::fs::File> {
        let dest = host_path(&self.root, step, path)?;
        std::fs::create_dir_all(dest.parent().expect("below root"))?;
        std::fs::File::create(&dest).with_context(|| format!("creating {}", dest.display()))
    }

    fn chunk(&mut self, step: &str, path: &str, offset: u64, data: &str) -> Result<()> {
        let key = (step.to_string(), path.to_string());
        if offset == 0 {
            let f = self.create(step, path)?;
            self.open.insert(key.clone(), (f, 0));
        }
        let Some((f, written)) = self.open.get_mut(&key) else { bail!("a chunk at offset {offset} without its start") };
        if *written != offset {
            bail!("chunk at offset {offset} after {written} bytes: a result line was lost");
        }
        let bytes = labproto::decode_chunk(data).map_err(anyhow::Error::msg)?;
        f.write_all(&bytes)?;
        *written += bytes.len() as u64;
        Ok(())
    }
}

/// Files a run collected (`FileEnd` without an error), as guest paths per step, and the
/// guest's reasons for the ones it could not send.
pub fn summary(events: &[Event]) -> (Vec<(String, String, u64)>, Vec<String>) {
    let mut ok = vec![];
    let mut failed = vec![];
    for e in events {
        if let Event::FileEnd { step, path, size, error } = e {
            match error {
                None => ok.push((step.clone(), path.clone(), *size)),
                Some(why) => failed.push(format!("collect {path} (step {step}): {why}")),
            }
        }
    }
    (ok, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(step: &str, path: &str, offset: u64, bytes: &[u8]) -> Event {
        Event::FileChunk { step: step.into(), path: path.into(), offset, data: labproto::encode_chunk(bytes) }
    }

    fn end(step: &str, path: &str, size: u64) -> Event {
        Event::FileEnd { step: step.into(), path: path.into(), size, error: None }
    }

    #[test]
    fn files_land_under_the_step() {
        let d = tempfile::tempdir().unwrap();
        let mut c = Collector::new(d.path());
        assert!(c.take(&chunk("cmd@2", "/tmp/out/a.txt", 0, b"hel")));
        assert!(c.take(&chunk("cmd@2", "/tmp/out/a.txt", 3, b"lo")));
        assert!(!c.take(&end("cmd@2", "/tmp/out/a.txt", 5)));
        assert!(!c.take(&end("cmd@2", "/tmp/empty", 0)));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(std::fs::read(d.path().join("collect/cmd@2/tmp/out/a.txt")).unwrap(), b"hello");
        assert_eq!(std::fs::read(d.path().join("collect/cmd@2/tmp/empty")).unwrap(), b"");
    }

    #[test]
    fn lost_chunks_and_bad_paths_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let mut c = Collector::new(d.path());
        c.take(&chunk("s", "/a", 0, b"12"));
        c.take(&chunk("s", "/a", 4, b"56"));
        c.take(&end("s", "/a", 6));
        c.take(&chunk("s", "/../../etc/x", 0, b"no"));
        assert_eq!(c.errors.len(), 3, "{:?}", c.errors);
        assert!(c.errors[0].contains("a result line was lost"), "{}", c.errors[0]);
        assert!(c.errors[1].contains("0 of 6 bytes"), "{}", c.errors[1]);
        assert!(c.errors[2].contains("`..`"), "{}", c.errors[2]);
        assert!(!d.path().parent().unwrap().join("etc/x").exists());
    }
}
