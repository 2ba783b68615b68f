//! Reading the guest console: kernel splats (lockdep, KASAN, WARN, BUG, Oops, panics, Rust
//! panics, hung tasks) and the panic text.

/// One kernel complaint found on the console.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Splat {
    pub kind: &'static str,
    /// Console line number (0-based) where it starts.
    pub line: usize,
    /// The report, up to its end: from a `[ cut here ]` marker when it has one (a WARN prints
    /// its own message there, before the `WARNING:` line), else from its first line.
    pub text: String,
}

impl Splat {
    /// The line that names the report (`WARNING: ...`, `BUG: ...`), without its timestamp.
    fn report_line(&self) -> &str {
        self.text.lines().find(|l| classify(l).is_some()).map(body).unwrap_or("")
    }

    /// The report in one line: a WARN's own message (printed between the `[ cut here ]`
    /// marker and the `WARNING:` line) and then the report's line; else the report's line.
    pub fn headline(&self) -> String {
        let before: Vec<&str> = self
            .text
            .lines()
            .take_while(|l| classify(l).is_none())
            .map(body)
            .filter(|l| !is_cut_here(l) && !l.is_empty())
            .collect();
        if before.is_empty() {
            self.report_line().to_string()
        } else {
            format!("{} ({})", before.join(" "), self.report_line())
        }
    }

    /// What makes two reports the same failure: the kind and the report line's message without
    /// what changes from boot to boot or with a patch (CPU, PID, task ids, addresses, code
    /// offsets, line numbers): `warning: WARNING: CPU: N PID: N at drivers/android/binder/process.rs:N version`.
    pub fn signature(&self) -> String {
        let first = self.report_line();
        let mut out = String::new();
        for word in first.split_whitespace() {
            // `f+0x1c/0x40` is the function `f`; a bare `0xffff...` is an address.
            let word = word.split_once("+0x").map_or(word, |(f, _)| f);
            if word.starts_with("0x") || word.is_empty() {
                continue;
            }
            let mut last_digit = false;
            if !out.is_empty() {
                out.push(' ');
            }
            for c in word.chars() {
                if c.is_ascii_digit() {
                    if !last_digit {
                        out.push('N');
                    }
                    last_digit = true;
                } else {
                    out.push(c);
                    last_digit = false;
                }
            }
        }
        format!("{}: {}", self.kind, out)
    }
}

/// Strips the printk timestamp, `[    1.234567] `, and with CONFIG_PRINTK_CALLER the caller
/// field after it (`[    T1] `). Any other bracket, e.g. a program's `[ok] `, is the message.
fn body(line: &str) -> &str {
    let t = line.trim_start();
    let Some(rest) = strip_field(t, is_timestamp) else { return t };
    strip_field(rest, |f| {
        f.len() > 1 && f[1..].bytes().all(|b| b.is_ascii_digit()) && matches!(f.as_bytes()[0], b'T' | b'C')
    })
    .unwrap_or(rest)
}

/// `[FIELD] rest` -> `rest` when `ok(FIELD trimmed)`.
fn strip_field(t: &str, ok: impl Fn(&str) -> bool) -> Option<&str> {
    let (field, rest) = t.strip_prefix('[')?.split_once(']')?;
    ok(field.trim()).then(|| rest.trim_start())
}

/// `1.234567`: seconds and a fraction.
pub(crate) fn is_timestamp(f: &str) -> bool {
    f.split_once('.').is_some_and(|(s, us)| {
        !s.is_empty()
            && !us.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && us.bytes().all(|b| b.is_ascii_digit())
    })
}

fn classify(line: &str) -> Option<&'static str> {
    labproto::splat_kind(body(line))
}

/// `------------[ cut here ]------------`, which the kernel prints before a WARN's message.
fn is_cut_here(body: &str) -> bool {
    body.contains("[ cut here ]")
}

/// Lines a WARN's message may take between the `[ cut here ]` marker and its `WARNING:` line.
const WARN_MESSAGE_LINES: usize = 8;

/// Where a report starting at `i` names its kind: `i` itself, or, for a `[ cut here ]`
/// marker, the report line within the next few lines.
fn report_at(lines: &[String], i: usize) -> Option<(usize, &'static str)> {
    if let Some(kind) = classify(&lines[i]) {
        return Some((i, kind));
    }
    if !is_cut_here(body(&lines[i])) {
        return None;
    }
    (i + 1..lines.len().min(i + 2 + WARN_MESSAGE_LINES))
        .take_while(|&k| !is_cut_here(body(&lines[k])))
        .find_map(|k| classify(&lines[k]).map(|kind| (k, kind)))
}

/// Finds every splat; each report's text runs from its `[ cut here ]` marker or first line
/// until a line that starts a new report, the `---[ end trace` marker, or 40 lines.
pub fn scan(lines: &[String]) -> Vec<Splat> {
    let mut out: Vec<Splat> = vec![];
    let mut i = 0;
    while i < lines.len() {
        let Some((at, kind)) = report_at(lines, i) else {
            i += 1;
            continue;
        };
        let mut text = lines[i..=at].to_vec();
        let mut j = at + 1;
        while j < lines.len() && j < at + 40 && classify(&lines[j]).is_none() && !is_cut_here(body(&lines[j])) {
            text.push(lines[j].clone());
            if lines[j].contains("---[ end") {
                j += 1;
                break;
            }
            j += 1;
        }
        out.push(Splat { kind, line: i, text: text.join("\n") });
        i = j;
    }
    out
}

/// The panic's message and the lines around it, for the report.
pub fn panic_text(lines: &[String]) -> Option<String> {
    let at = lines.iter().position(|l| body(l).starts_with("Kernel panic - not syncing"))?;
    // Start at the beginning of the report that led to the panic (e.g. "sysrq: Trigger a crash").
    let start = (0..at)
        .rev()
        .take(60)
        .find(|&k| classify(&lines[k]).is_some() || body(&lines[k]).starts_with("sysrq:"))
        .unwrap_or(at);
    let end = (at + 1 + 30).min(lines.len());
    Some(lines[start..end].join("\n"))
}

/// The last `n` lines.
pub fn tail(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    const SYSRQ_PANIC: &str = "\
[    1.000000] Run /init as init process
[    2.100000] sysrq: Trigger a crash
[    2.100100] Kernel panic - not syncing: sysrq triggered crash
[    2.100200] CPU: 3 UID: 0 PID: 80 Comm: sh Not tainted 7.2.12-binderlab #1
[    2.100300] Call trace:
[    2.100400]  show_stack+0x18/0x24
[    2.100500] ---[ end Kernel panic - not syncing: sysrq triggered crash ]---
";

    #[test]
    fn finds_sysrq_panic_with_text() {
        let l = lines(SYSRQ_PANIC);
        let s = scan(&l);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].kind, "panic");
        let t = panic_text(&l).unwrap();
        assert!(t.starts_with("[    2.100000] sysrq: Trigger a crash"), "{t}");
        assert!(t.contains("Call trace"));
    }

    #[test]
    fn classifies_debug_splats() {
        let l = lines(
            "[ 1.0] ok\n\
             [ 2.0] ======================================================\n\
             [ 2.0] WARNING: possible circular locking dependency detected\n\
             [ 2.1] 7.2.12 #1 Not tainted\n\
             [ 3.0] BUG: KASAN: slab-use-after-free in foo+0x1/0x2\n\
             [ 3.1] Read of size 8\n\
             [ 4.0] rust_kernel: panicked at drivers/android/binder/thread.rs:10:5:\n\
             [ 5.0] INFO: task binder:12 blocked for more than 30 seconds.\n\
             [ 5.1] INFO: lockdep is turned off.\n\
             [ 6.0] ------------[ cut here ]------------\n\
             [ 6.0] WARNING: CPU: 1 PID: 5 at mm/x.c:1 f+0x0/0x1\n",
        );
        let kinds: Vec<&str> = scan(&l).iter().map(|s| s.kind).collect();
        assert_eq!(kinds, ["lockdep", "kasan", "rust-panic", "hung-task", "warning"]);
    }

    /// A WARN prints its own message between `[ cut here ]` and the `WARNING:` line (7.2's
    /// format); the report keeps it, and its signature still comes from the `WARNING:` line.
    #[test]
    fn a_warn_keeps_its_message() {
        let l = lines(
            "[ 1.0] Created BinderWorker0\n\
             [ 1.6] ------------[ cut here ]------------\n\
             [ 1.6] lab ab test: binder-throughput's 1000th transaction\n\
             [ 1.7] WARNING: drivers/android/binder.c:3113 at binder_transaction+0xc0/0x1dbc, CPU#5: binder-throughp/90\n\
             [ 1.7] Call trace:\n\
             [ 1.8] ---[ end trace 0000000000000000 ]---\n\
             [ 2.0] ------------[ cut here ]------------\n\
             [ 2.1] WARNING: CPU: 1 PID: 5 at mm/x.c:1 f+0x0/0x1\n",
        );
        let s = scan(&l);
        assert_eq!(s.iter().map(|s| (s.kind, s.line)).collect::<Vec<_>>(), [("warning", 1), ("warning", 6)]);
        assert!(s[0].text.contains("binder-throughput's 1000th transaction"), "{}", s[0].text);
        assert!(s[0].text.ends_with("---[ end trace 0000000000000000 ]---"), "{}", s[0].text);
        assert_eq!(
            s[0].headline(),
            "lab ab test: binder-throughput's 1000th transaction (WARNING: drivers/android/binder.c:3113 at \
             binder_transaction+0xc0/0x1dbc, CPU#5: binder-throughp/90)"
        );
        assert_eq!(
            s[0].signature(),
            "warning: WARNING: drivers/android/binder.c:N at binder_transaction CPU#N: binder-throughp/N"
        );
        assert_eq!(s[1].headline(), "WARNING: CPU: 1 PID: 5 at mm/x.c:1 f+0x0/0x1");
        // A marker with no report after it is no report.
        assert!(scan(&lines("[ 1.0] ------------[ cut here ]------------\n[ 1.1] ok\n")).is_empty());
    }

    #[test]
    fn deprecated_workqueue_warning_is_a_splat() {
        let l = lines(
            "[ 1.0] Run /init as init process\n\
             [ 1.5] workqueue: work func _RNvXs_NtCs7_11rust_binder7processNtB4_7ProcessNtNtCs1_6kernel9workqueue\
             8WorkItem3run enqueued on deprecated workqueue. Use system_{percpu|dfl}_wq instead.\n\
             [ 1.6] ok\n",
        );
        let s = scan(&l);
        assert_eq!(s.iter().map(|s| (s.kind, s.line)).collect::<Vec<_>>(), [("deprecated-workqueue", 1)]);
    }

    #[test]
    fn only_a_printk_timestamp_is_stripped() {
        assert_eq!(body("[    1.234567] ok"), "ok");
        assert_eq!(body("[    1.234567][    T1] ok"), "ok");
        assert_eq!(body("[ok] INFO: task list"), "[ok] INFO: task list");
        assert_eq!(body("[1.5][x] y"), "[x] y");
        // A program's own "[ok]" line that quotes a hung-task report is not one; behind a
        // timestamp the same text is.
        let quoted = "[ok] INFO: task 7 blocked for more than 1 s (a user-space watchdog's words)";
        assert!(scan(&lines(quoted)).is_empty());
        let kernel = "[   12.000001] INFO: task binder:12 blocked for more than 30 seconds.";
        assert_eq!(scan(&lines(kernel))[0].kind, "hung-task");
        // The end marker of a report is no new report, with or without a caller field.
        assert!(classify("[    2.1][    C3] ---[ end Kernel panic - not syncing: x ]---").is_none());
    }

    #[test]
    fn signatures_keep_the_failure_and_drop_the_boot() {
        let sig = |s: &str| scan(&lines(s))[0].signature();
        let a = sig("[ 6.0] WARNING: CPU: 1 PID: 55 at drivers/android/binder/process.rs:1220 version+0x1c/0x40\n");
        // Another boot, CPU, PID, and the patch moved the line: the same failure.
        let b = sig("[ 9.1] WARNING: CPU: 3 PID: 812 at drivers/android/binder/process.rs:1223 version+0x20/0x40\n");
        assert_eq!(a, b);
        assert_eq!(
            a,
            "warning: WARNING: CPU: N PID: N at drivers/android/binder/process.rsN version".replace(".rsN", ".rs:N")
        );
        // Another function, or another kind of report, is another failure.
        assert_ne!(a, sig("[ 6.0] WARNING: CPU: 1 PID: 55 at drivers/android/binder/thread.rs:10 reply+0x1/0x4\n"));
        let uaf = sig("[ 3.0] BUG: KASAN: slab-use-after-free in binder_alloc_free_page+0x1a4/0x3c0\n");
        assert_eq!(uaf, "kasan: BUG: KASAN: slab-use-after-free in binder_alloc_free_page");
    }

    #[test]
    fn clean_boot_has_no_splats() {
        let l = lines("[ 0.0] Booting Linux\n[ 0.1] INFO: some info\n[ 0.2] rcu: Hierarchical RCU implementation.\n");
        assert!(scan(&l).is_empty());
        assert!(panic_text(&l).is_none());
        assert_eq!(tail(&l, 2), "[ 0.1] INFO: some info\n[ 0.2] rcu: Hierarchical RCU implementation.");
    }
}
