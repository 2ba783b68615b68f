//! The one reporter library code talks to: progress notes ("kernel perf is up to date") and,
//! when a run asks for it, the live guest console or a step's own output. The library never prints; the CLI, the
//! tests and the nightly each install the reporter that shows things their way (the default
//! writes to stderr, as the CLI wants).

use std::sync::{Arc, RwLock};

pub trait Reporter: Send + Sync {
    /// A progress note.
    fn note(&self, msg: &str);
    /// A guest console line (only for runs with `echo`).
    fn console(&self, line: &str);
    /// A line of a step's own output (only for runs with `stream`: `lab run -- CMD`).
    fn output(&self, line: &str);
}

/// `lab: MSG` and `  | LINE` on stderr; a step's output as it is on stdout (it is the
/// output of the user's command).
pub struct Stderr;

impl Reporter for Stderr {
    fn note(&self, msg: &str) {
        eprintln!("lab: {msg}");
    }
    fn console(&self, line: &str) {
        eprintln!("  | {line}");
    }
    fn output(&self, line: &str) {
        println!("{line}");
    }
}

/// Every note prefixed with a label (e.g. the nightly's stage), to another reporter.
pub struct Prefixed {
    pub prefix: String,
    pub inner: Arc<dyn Reporter>,
}

impl Reporter for Prefixed {
    fn note(&self, msg: &str) {
        self.inner.note(&format!("{}{msg}", self.prefix));
    }
    fn console(&self, line: &str) {
        self.inner.console(&format!("{}{line}", self.prefix));
    }
    /// Unprefixed: it is the command's own output.
    fn output(&self, line: &str) {
        self.inner.output(line);
    }
}

static REPORTER: RwLock<Option<Arc<dyn Reporter>>> = RwLock::new(None);

/// Installs `r` for the whole process; returns the one it replaces.
pub fn set(r: Arc<dyn Reporter>) -> Arc<dyn Reporter> {
    let mut g = REPORTER.write().unwrap_or_else(|e| e.into_inner());
    g.replace(r).unwrap_or_else(|| Arc::new(Stderr))
}

/// The installed reporter ([`Stderr`] unless one was set).
pub fn current() -> Arc<dyn Reporter> {
    REPORTER.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| Arc::new(Stderr))
}

pub fn note(msg: impl AsRef<str>) {
    current().note(msg.as_ref());
}

pub fn console(line: &str) {
    current().console(line);
}

pub fn output(line: &str) {
    current().output(line);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Capture(Mutex<Vec<String>>);
    impl Reporter for Capture {
        fn note(&self, msg: &str) {
            self.0.lock().unwrap().push(msg.to_string());
        }
        fn console(&self, line: &str) {
            self.0.lock().unwrap().push(format!("| {line}"));
        }
        fn output(&self, line: &str) {
            self.0.lock().unwrap().push(format!("> {line}"));
        }
    }

    #[test]
    fn notes_reach_the_installed_reporter() {
        let cap = Arc::new(Capture(Mutex::new(vec![])));
        let prefixed = Arc::new(Prefixed { prefix: "[stage] ".into(), inner: cap.clone() });
        let old = set(prefixed);
        note("kernel perf is up to date");
        console("boot");
        output("from-the-guest");
        set(old);
        let got = cap.0.lock().unwrap().clone();
        // Other tests may note concurrently: look for ours.
        assert!(got.contains(&"[stage] kernel perf is up to date".to_string()), "{got:?}");
        assert!(got.contains(&"| [stage] boot".to_string()), "{got:?}");
        assert!(got.contains(&"> from-the-guest".to_string()), "{got:?}");
    }
}
