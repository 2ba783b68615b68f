//! Coverage-guided mode (`mode=guided`), its baseline without feedback (`mode=random`) and
//! replays (`replay=0x..,0x..`).
//!
//! Our own loop, libFuzzer's shape: an input is a sequence of operation seeds (one op of
//! worker.rs each, see `worker::run_sequence`), run in a fresh worker process with KCOV on
//! every thread. Coverage is kept only inside the binder driver's text (`text=START-END,...`,
//! which the lab takes from the flavor's System.map). A sequence that reaches a new edge
//! (a pair of consecutive driver PCs in one thread's trace) joins the corpus; new sequences
//! are mutations of corpus entries (insert, drop, replace, duplicate an op or a block of
//! ops later, splice two), and fresh random ones one time in `FRESH_ONE_IN`. Which entry is
//! mutated is drawn by its energy, AFL's idea: more for entries that found many edges,
//! that joined recently and that are short, less the more often one was already picked.
//! `random` runs the same loop and budget but never draws from the corpus. The two modes
//! draw from generators seeded with the run's seed and the mode (`op_rng`): independent
//! op seeds for one seed.
//!
//! A sequence after which the kernel logged a splat (or whose worker crashed or hung) stops
//! the run (with `keep_going`, the budget is spent and each new signature kept); it is then
//! written to `out/crash-N.json` and minimised (ops dropped while the same splat comes back)
//! into `out/repro-N.json`; `cargo make fuzz --replay FILE` boots with
//! that sequence. Coverage over time and the functions never reached go to
//! `out/coverage.json`.

use crate::kcov::Kcov;
use crate::shm::Shm;
use crate::worker;
use labproto::{report, Status};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testkit::kmsg::{self, Kmsg};
use testkit::rng::{mix, Rng};

/// KCOV buffer per thread in words (8 MiB): a long sequence's whole-kernel trace fits.
const KCOV_WORDS: usize = 1024 * 1024;
/// Longest sequence a mutation makes: a long sequence costs guest time in proportion and
/// mostly repeats what its prefix reached.
const MAX_LEN: usize = 32;
/// Above this length a mutation also drops an op or a block, so that entries stay short.
const SHORT_LEN: usize = 16;
/// A fresh random sequence instead of a mutation, one in this many (guided): keeps finding
/// the shallow edges a corpus narrowed to a few families would miss.
const FRESH_ONE_IN: u64 = 5;
/// An entry is "recent" for this many sequences after it joined: it gets more energy.
const RECENT_EXECS: u64 = 100;
/// `Exec::op_of` of the PCs before a thread's first op.
const NO_OP: u32 = u32::MAX;
/// An entry whose last op reached new edges ends in a state nothing before reached: its
/// energy is multiplied by this, and its mutations append at the end more often.
const LAST_OP_BOOST: u32 = 3;
/// Op seeds the dictionary keeps. An op is drawn from its seed in whatever state the
/// sequence is in, so one that reached new edges (a clear that found an active listener, a
/// request that made a duplicate) tends to do the same command on the same fd and the
/// notifications the process holds again: AFL's tokens, for ops.
const DICT_MAX: usize = 512;
/// Runs spent minimising one failure.
const MINIMISE_RUNS: usize = 120;
/// Distinct failures one run saves (with `keep_going`).
const MAX_FAILURES: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Guided,
    Random,
    Replay,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Guided => "guided",
            Mode::Random => "random",
            Mode::Replay => "replay",
        }
    }

    /// Tells the modes' op-seed streams apart (see `op_rng`).
    fn stream_tag(self) -> u64 {
        match self {
            Mode::Guided => 0x6775_6964_6564,
            Mode::Random => 0x7261_6e64_6f6d,
            Mode::Replay => 0x7265_706c_6179,
        }
    }
}

/// The generator a run draws its op seeds (and its mutations) from: seeded with the run's
/// seed *and* its mode, so that `--guided` and `--unguided` with one seed draw independent
/// op seeds (with one stream, both drew the same values near the same point and a find in
/// both was shared luck), while `(seed, mode)` still reproduces a run's draws. A replay
/// draws nothing: its file carries the op seeds themselves.
fn op_rng(seed: u64, mode: Mode) -> Rng {
    Rng::derive(seed, mode.stream_tag())
}

pub struct Config {
    pub mode: Mode,
    pub seed: u64,
    pub ops: u64,
    pub seconds: f64,
    pub threads: usize,
    pub device: String,
    /// Driver text ranges, [start, end).
    pub text: Vec<(u64, u64)>,
    pub replay: Vec<u64>,
    pub out: PathBuf,
    /// A worker still running after this long is a hang.
    pub hang_s: f64,
    /// The kernel flavor (from the lab), written into saved sequences.
    pub flavor: String,
    /// Go on after a failure until the budget is spent (a new signature is saved too).
    pub keep_going: bool,
}

/// Parses `0xSTART-0xEND,...`.
pub fn parse_ranges(s: &str) -> Option<Vec<(u64, u64)>> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (a, b) = p.split_once('-')?;
            let n = |x: &str| u64::from_str_radix(x.trim().trim_start_matches("0x"), 16).ok();
            Some((n(a)?, n(b)?)).filter(|(a, b)| a < b)
        })
        .collect()
}

/// Parses `0x1,0x2,...` (a replayed sequence).
pub fn parse_seq(s: &str) -> Option<Vec<u64>> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| u64::from_str_radix(p.trim().trim_start_matches("0x"), 16).ok())
        .collect()
}

/// Driver functions from /proc/kallsyms inside the text ranges, sorted by address.
struct Symbols {
    starts: Vec<u64>,
    names: Vec<String>,
}

impl Symbols {
    fn load(text: &[(u64, u64)]) -> Symbols {
        let mut v: Vec<(u64, String)> = std::fs::read_to_string("/proc/kallsyms")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let a = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                (matches!(ty, "t" | "T") && text.iter().any(|&(s, e)| a >= s && a < e)).then(|| (a, name.to_string()))
            })
            .collect();
        v.sort();
        v.dedup_by_key(|x| x.0);
        Symbols { starts: v.iter().map(|x| x.0).collect(), names: v.into_iter().map(|x| x.1).collect() }
    }

    fn function_of(&self, pc: u64) -> Option<usize> {
        self.starts.partition_point(|&s| s <= pc).checked_sub(1)
    }

    fn name(&self, i: usize) -> String {
        format!("{:#}", rustc_demangle::demangle(&self.names[i]))
    }
}

/// What one run of a sequence left.
struct Exec {
    /// Driver PCs per thread, in trace order.
    traces: Vec<Vec<u64>>,
    /// For each PC of `traces`, the index of the op of the sequence that ran it (`NO_OP`:
    /// the worker's setup before the first op).
    op_of: Vec<Vec<u32>>,
    /// Splats, the worker's crash or a hang: the first is the failure's signature.
    failures: Vec<String>,
}

impl Exec {
    fn signature(&self) -> Option<String> {
        self.failures.first().map(|f| signature(f))
    }
}

/// A splat line without what changes between runs (CPU, PID, addresses): its kind and where.
fn signature(line: &str) -> String {
    let kind = line.split(':').next().unwrap_or("");
    match line.split_once(" at ") {
        Some((_, at)) => format!("{kind} at {}", at.split_whitespace().next().unwrap_or("")),
        None => line.chars().filter(|c| !c.is_ascii_digit()).collect(),
    }
}

/// What runs a sequence: the kernel (a worker process under KCOV), or a unit test's model.
trait Target {
    fn run(&mut self, seq: &[u64]) -> Exec;
}

/// Runs sequences in worker processes and keeps their coverage inside the driver's text.
struct Kernel<'a> {
    cfg: &'a Config,
    shm: &'static Shm,
    kcov: Vec<Kcov>,
    kmsg: Option<Kmsg>,
    text: Vec<(u64, u64)>,
}

struct Fuzzer<'a> {
    cfg: &'a Config,
    target: Box<dyn Target + 'a>,
    text: Vec<(u64, u64)>,
    rng: Rng,
    corpus: Vec<Entry>,
    edges: HashSet<u64>,
    pcs: HashSet<u64>,
    functions: BTreeSet<usize>,
    syms: Symbols,
    execs: u64,
    ops: u64,
    t0: Instant,
    timeline: Vec<Value>,
    /// Op seeds that reached new edges in some sequence (`DICT_MAX`, oldest dropped): the
    /// dictionary an insert draws from half the time.
    dict: Vec<u64>,
    /// Per thread, the trace positions of the new edges of the last `absorb`.
    fresh_at: Vec<Vec<usize>>,
}

/// A corpus entry and what its energy is made of.
struct Entry {
    seq: Vec<u64>,
    /// New edges it found when it joined.
    new_edges: usize,
    /// The sequence count when it joined.
    found_at: u64,
    /// Times it was picked for a mutation.
    picks: u64,
    /// Its last op reached new edges (see `LAST_OP_BOOST`).
    last_new: bool,
}

impl Entry {
    /// Its weight in the draw of the entry to mutate (at least 1).
    fn energy(&self, execs: u64) -> u32 {
        let found = 4 + self.new_edges.min(60) as u32;
        let recent = if execs.saturating_sub(self.found_at) < RECENT_EXECS { 4 } else { 1 };
        let short = if self.seq.len() <= SHORT_LEN / 2 { 2 } else { 1 };
        let last = if self.last_new { LAST_OP_BOOST } else { 1 };
        (found * recent * short * last / (1 + self.picks as u32 / 16)).max(1)
    }
}

impl Kernel<'_> {
    fn in_driver(&self, pc: u64) -> bool {
        self.text.iter().any(|&(s, e)| pc >= s && pc < e)
    }
}

impl Target for Kernel<'_> {
    fn run(&mut self, seq: &[u64]) -> Exec {
        for k in &self.kcov {
            k.reset();
        }
        if let Some(k) = self.kmsg.as_mut() {
            k.read_new();
        }
        let fds: Vec<i32> = self.kcov.iter().map(|k| k.fd).collect();
        let areas: Vec<usize> = self.kcov.iter().map(|k| k.addr()).collect();
        for m in &self.shm.op_marks {
            m.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        }
        let wcfg = || worker::Config {
            device: self.cfg.device.clone(),
            binder_fds: false,
            slot: 0,
            seed: 0,
            threads: self.cfg.threads,
            life_ops: seq.len() as u64,
        };
        // SAFETY: the parent is single-threaded, so the child may run arbitrary code.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: prctl has no memory preconditions.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
            let code = worker::run_sequence(wcfg(), self.shm, seq, &fds, &areas);
            // SAFETY: ends the worker without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut failures = vec![];
        if pid < 0 {
            failures.push("fork failed".into());
            return Exec { traces: vec![], op_of: vec![], failures };
        }
        let t = Instant::now();
        let code = loop {
            let mut st = 0;
            // SAFETY: our child; st is a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid {
                break syskit::decode_status(st);
            }
            if t.elapsed().as_secs_f64() > self.cfg.hang_s {
                failures.push(format!("hang: worker still running after {} s", self.cfg.hang_s));
                // SAFETY: kill and reap our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut st, 0);
                }
                break 128 + libc::SIGKILL;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if code != 0 && failures.is_empty() {
            failures.push(format!("crash: worker ended with status {code}"));
        }
        // The driver releases a process in deferred work: wait for it, so that the next
        // sequence starts clean (the context manager free) and its splats land here.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5)
            && testkit::logs::Stats::read().map(|s| !s.proc(pid).is_empty()).unwrap_or(false)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(k) = self.kmsg.as_mut() {
            let splats = kmsg::splats(&k.read_new());
            failures.splice(0..0, splats);
        }
        let marks: Vec<u64> = self.shm.op_marks.iter().map(|m| m.load(std::sync::atomic::Ordering::Relaxed)).collect();
        let (mut traces, mut op_of) = (vec![], vec![]);
        for (t, k) in self.kcov.iter().enumerate() {
            // This thread's ops, in order, with the trace position each started at.
            let starts: Vec<(u64, u32)> = (0..seq.len().min(marks.len()))
                .filter(|&i| seq[i] as usize % self.cfg.threads.max(1) == t && marks[i] != u64::MAX)
                .map(|i| (marks[i], i as u32))
                .collect();
            let (tr, ops) = attribute(&k.pcs(), &starts, |pc| self.in_driver(pc));
            traces.push(tr);
            op_of.push(ops);
        }
        Exec { traces, op_of, failures }
    }
}

/// The PCs of one thread's raw trace that `keep` keeps, each with the op that ran it: the last
/// of `starts` (trace position at the op's start, op index; in order) at or before it.
fn attribute(raw: &[u64], starts: &[(u64, u32)], keep: impl Fn(u64) -> bool) -> (Vec<u64>, Vec<u32>) {
    let (mut pcs, mut ops) = (vec![], vec![]);
    let mut next = 0;
    let mut op = NO_OP;
    for (p, &pc) in raw.iter().enumerate() {
        while next < starts.len() && starts[next].0 <= p as u64 {
            op = starts[next].1;
            next += 1;
        }
        if keep(pc) {
            pcs.push(pc);
            ops.push(op);
        }
    }
    (pcs, ops)
}

impl<'a> Fuzzer<'a> {
    fn exec(&mut self, seq: &[u64]) -> Exec {
        self.execs += 1;
        self.ops += seq.len() as u64;
        self.target.run(seq)
    }

    /// One sequence of the loop: a mutation (guided, nine in ten) or a fresh random one;
    /// joins the corpus if it reached a new edge (guided only).
    fn step(&mut self) -> (Vec<u64>, Exec) {
        let seq = if self.cfg.mode == Mode::Guided && !self.corpus.is_empty() && !self.rng.chance(1, FRESH_ONE_IN) {
            self.mutate()
        } else {
            self.random_seq()
        };
        let e = self.exec(&seq);
        let (new, by_last) = self.absorb(&e, seq.len() as u32 - 1);
        if self.cfg.mode == Mode::Guided {
            self.learn_ops(&e, &seq);
        }
        if new > 0 && self.cfg.mode == Mode::Guided {
            let last_new = by_last > 0;
            self.corpus.push(Entry { seq: seq.clone(), new_edges: new, found_at: self.execs, picks: 0, last_new });
        }
        (seq, e)
    }

    /// Puts the ops of `seq` that reached new edges in `e` (the ones `absorb` just counted)
    /// into the dictionary.
    fn learn_ops(&mut self, e: &Exec, seq: &[u64]) {
        for (t, ops) in e.op_of.iter().enumerate() {
            let Some(new) = self.fresh_at.get(t) else { continue };
            for (j, &op) in ops.iter().enumerate() {
                let Some(&s) = seq.get(op as usize) else { continue };
                if new.contains(&j) && !self.dict.contains(&s) {
                    if self.dict.len() >= DICT_MAX {
                        self.dict.remove(0);
                    }
                    self.dict.push(s);
                }
            }
        }
    }

    /// Adds the coverage of `e`; how many edges it reached that were never seen before, and
    /// how many of them op `last` ran.
    fn absorb(&mut self, e: &Exec, last: u32) -> (usize, usize) {
        let (mut new, mut by_last) = (0, 0);
        self.fresh_at = vec![vec![]; e.traces.len()];
        for (t, tr) in e.traces.iter().enumerate() {
            let mut prev = 0u64;
            for (j, &pc) in tr.iter().enumerate() {
                let fresh = self.edges.insert(mix(prev) ^ pc);
                if fresh {
                    self.fresh_at[t].push(j);
                }
                new += fresh as usize;
                by_last += (fresh && e.op_of.get(t).and_then(|o| o.get(j)) == Some(&last)) as usize;
                if self.pcs.insert(pc) {
                    if let Some(f) = self.syms.function_of(pc) {
                        self.functions.insert(f);
                    }
                }
                prev = pc;
            }
        }
        (new, by_last)
    }

    fn random_seq(&mut self) -> Vec<u64> {
        let n = self.rng.range(4, 16) as usize;
        (0..n).map(|_| self.rng.next_u64()).collect()
    }

    /// A corpus entry drawn by energy (counted as picked).
    fn pick_entry(&mut self) -> Vec<u64> {
        self.pick().0
    }

    /// `pick_entry`, and whether the entry's last op reached new edges.
    fn pick(&mut self) -> (Vec<u64>, bool) {
        let w: Vec<u32> = self.corpus.iter().map(|e| e.energy(self.execs)).collect();
        let i = self.rng.weighted(&w);
        self.corpus[i].picks += 1;
        (self.corpus[i].seq.clone(), self.corpus[i].last_new)
    }

    fn mutate(&mut self) -> Vec<u64> {
        let (mut s, last_new) = self.pick();
        // Appends build on the state the entry ended in: more so when its last op was new.
        let end = if last_new { 3 } else { 2 };
        for _ in 0..self.rng.range(1, 4) {
            let n = s.len();
            // Long entries shrink: drop an op or a block first.
            let kind =
                if n > SHORT_LEN && self.rng.chance(1, 2) { 1 + 5 * self.rng.below(2) } else { self.rng.below(8) };
            match kind {
                0 if n < MAX_LEN => {
                    // Half the time at the end, where the state the entry built is deepest.
                    let at = if self.rng.chance(end, 4) { n } else { self.rng.below(n as u64 + 1) as usize };
                    let op = if !self.dict.is_empty() && self.rng.chance(1, 2) {
                        *self.rng.pick(&self.dict)
                    } else {
                        self.rng.next_u64()
                    };
                    s.insert(at, op);
                }
                1 if n > 1 => {
                    s.remove(self.rng.below(n as u64) as usize);
                }
                2 if n > 0 => {
                    let at = self.rng.below(n as u64) as usize;
                    s[at] = self.rng.next_u64();
                }
                // The same op again later: the same command kinds, handles and cookies.
                3 if n > 0 && n < MAX_LEN => {
                    let from = self.rng.below(n as u64) as usize;
                    let at = self.rng.range(from as u64 + 1, n as u64) as usize;
                    s.insert(at, s[from]);
                }
                // A block of ops again later: a request and its clear, then both again,
                // in one step instead of two that each must find an edge.
                4 if n > 1 && n < MAX_LEN => {
                    let len = self.rng.range(2, 4).min(n as u64).min((MAX_LEN - n) as u64) as usize;
                    let from = self.rng.below((n - len) as u64 + 1) as usize;
                    let at = self.rng.range((from + len) as u64, n as u64) as usize;
                    let block: Vec<u64> = s[from..from + len].to_vec();
                    s.splice(at..at, block);
                }
                6 if n > 2 => {
                    let len = self.rng.range(2, 4).min(n as u64 - 1) as usize;
                    let from = self.rng.below((n - len) as u64 + 1) as usize;
                    s.drain(from..from + len);
                }
                _ if self.corpus.len() > 1 || n == 0 => {
                    let other = self.pick_entry();
                    let cut = self.rng.below(s.len() as u64 + 1) as usize;
                    let from = self.rng.below(other.len() as u64 + 1) as usize;
                    s.truncate(cut);
                    s.extend_from_slice(&other[from..]);
                    s.truncate(MAX_LEN);
                }
                _ => {}
            }
        }
        if s.is_empty() {
            s.push(self.rng.next_u64());
        }
        s
    }

    fn sample(&mut self) {
        self.timeline.push(json!({
            "t_s": (self.t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "execs": self.execs, "ops": self.ops, "edges": self.edges.len(),
            "pcs": self.pcs.len(), "functions": self.functions.len(), "corpus": self.corpus.len(),
        }));
    }

    /// Drops ops while the same failure comes back; the shortest sequence found.
    fn minimise(&mut self, seq: &[u64], sig: &str) -> (Vec<u64>, bool) {
        let again = self.exec(seq).signature().as_deref() == Some(sig);
        if !again {
            return (seq.to_vec(), false);
        }
        let mut cur = seq.to_vec();
        let mut runs = 0;
        // Later ops first: a failure's cause usually ends the sequence.
        let mut i = cur.len();
        while i > 0 && runs < MINIMISE_RUNS {
            i -= 1;
            let mut cand = cur.clone();
            cand.remove(i);
            runs += 1;
            if !cand.is_empty() && self.exec(&cand).signature().as_deref() == Some(sig) {
                cur = cand;
            }
        }
        (cur, true)
    }
}

fn hex_seq(seq: &[u64]) -> Vec<String> {
    seq.iter().map(|s| format!("{s:#x}")).collect()
}

fn write_json(path: &Path, v: &Value) {
    if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(v).unwrap_or_default() + "\n") {
        eprintln!("binder-fuzz: cannot write {}: {e}", path.display());
    }
}

/// Runs the guided or random loop, or a replay; the process's exit code.
pub fn run(cfg: &Config, shm: &'static Shm) -> i32 {
    let _ = std::fs::create_dir_all(&cfg.out);
    let kcov: Vec<Kcov> = if cfg.text.is_empty() {
        vec![]
    } else {
        match (0..cfg.threads).map(|_| Kcov::open(KCOV_WORDS)).collect() {
            Ok(v) => v,
            Err(e) => {
                let msg = format!(
                    "cannot set up KCOV (/sys/kernel/debug/kcov: {e}); boot a kernel with CONFIG_KCOV, e.g. --flavor fuzz"
                );
                report("coverage", Status::Fail, 0.0, Some(msg), json!({}));
                return 1;
            }
        }
    };
    if cfg.text.is_empty() && cfg.mode != Mode::Replay {
        let msg = "no driver text ranges (binder_fuzz.text=START-END,...): run it through `cargo make fuzz --guided`, \
                   which takes them from the flavor's System.map";
        report("coverage", Status::Fail, 0.0, Some(msg.into()), json!({}));
        return 1;
    }
    let target = Kernel { cfg, shm, kcov, kmsg: Kmsg::open_at_end().ok(), text: cfg.text.clone() };
    let mut f = Fuzzer {
        cfg,
        target: Box::new(target),
        text: cfg.text.clone(),
        rng: op_rng(cfg.seed, cfg.mode),
        corpus: vec![],
        edges: HashSet::new(),
        pcs: HashSet::new(),
        functions: BTreeSet::new(),
        syms: Symbols::load(&cfg.text),
        execs: 0,
        ops: 0,
        t0: Instant::now(),
        timeline: vec![],
        dict: vec![],
        fresh_at: vec![],
    };
    kmsg::mark(&format!("binder-fuzz: {} mode, seed {:#x}", cfg.mode.name(), cfg.seed));
    if cfg.mode == Mode::Replay {
        let e = f.exec(&cfg.replay);
        let ok = e.failures.is_empty();
        report(
            "replay",
            if ok { Status::Pass } else { Status::Fail },
            f.t0.elapsed().as_secs_f64() * 1000.0,
            (!ok).then(|| format!("the sequence reproduces: {}", e.failures.join(" | "))),
            json!({"seq": hex_seq(&cfg.replay), "threads": cfg.threads, "failures": e.failures}),
        );
        return if ok { 0 } else { 1 };
    }
    // The first failing sequence of each signature, and when it was found.
    let mut found: Vec<Found> = vec![];
    let mut last_sample = Instant::now();
    f.sample();
    while f.ops < cfg.ops && f.t0.elapsed().as_secs_f64() < cfg.seconds {
        let (seq, e) = f.step();
        if let Some(sig) = e.signature() {
            if !found.iter().any(|x| x.sig == sig) {
                eprintln!("binder-fuzz: failure after {} sequences: {}", f.execs, e.failures[0]);
                found.push(Found {
                    sig,
                    seq,
                    failures: e.failures,
                    after: json!({"execs": f.execs, "ops": f.ops,
                                  "seconds": (f.t0.elapsed().as_secs_f64() * 10.0).round() / 10.0}),
                });
            }
            if !cfg.keep_going || found.len() >= MAX_FAILURES {
                break;
            }
        }
        if last_sample.elapsed() > Duration::from_secs(10) {
            last_sample = Instant::now();
            f.sample();
            eprintln!(
                "binder-fuzz: {} {} execs, {} ops, {} edges, {} functions after {:.0} s",
                cfg.mode.name(),
                f.execs,
                f.ops,
                f.edges.len(),
                f.functions.len(),
                f.t0.elapsed().as_secs_f64()
            );
        }
    }
    f.sample();
    let elapsed = f.t0.elapsed();
    let never: Vec<String> =
        (0..f.syms.names.len()).filter(|i| !f.functions.contains(i)).map(|i| f.syms.name(i)).collect();
    let summary = json!({
        "mode": cfg.mode.name(), "seed": format!("{:#x}", cfg.seed), "threads": cfg.threads,
        "execs": f.execs, "ops": f.ops, "target_ops": cfg.ops, "elapsed_s": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "edges": f.edges.len(), "pcs": f.pcs.len(), "functions": f.functions.len(),
        "functions_total": f.syms.names.len(), "functions_never": never.len(), "corpus": f.corpus.len(),
        "failures_found": found.iter().map(|x| json!({"signature": x.sig, "after": x.after})).collect::<Vec<_>>(),
        "text": f.text.iter().map(|(a, b)| format!("{a:#x}-{b:#x}")).collect::<Vec<_>>(),
    });
    let mut cov = summary.clone();
    cov["timeline"] = json!(f.timeline);
    cov["never_reached"] = json!(never);
    write_json(&cfg.out.join("coverage.json"), &cov);
    report("coverage", Status::Pass, elapsed.as_secs_f64() * 1000.0, None, summary);

    if found.is_empty() {
        report("fuzz", Status::Pass, elapsed.as_secs_f64() * 1000.0, None, json!({"failures": 0}));
        return 0;
    }
    // Minimised after the budget, so that it does not count as fuzzing time.
    let mut lines = vec![];
    let mut saved = vec![];
    for (n, x) in found.iter().enumerate() {
        let crash = cfg.out.join(format!("crash-{}.json", n + 1));
        write_json(
            &crash,
            &json!({"seq": hex_seq(&x.seq), "threads": cfg.threads, "flavor": cfg.flavor, "failures": x.failures}),
        );
        let (min, reproduced) = f.minimise(&x.seq, &x.sig);
        let repro = cfg.out.join(format!("repro-{}.json", n + 1));
        write_json(
            &repro,
            &json!({
                "format": "binder-fuzz-repro/1", "seq": hex_seq(&min), "threads": cfg.threads, "flavor": cfg.flavor,
                "signature": x.sig, "failure": x.failures[0], "found_after": x.after, "original_len": x.seq.len(),
                "reproduced": reproduced,
            }),
        );
        lines.push(format!(
            "{} after {} sequences; minimised from {} to {} ops{}; replay: cargo make fuzz --replay \
             RUN_DIR/collect/fuzz{}",
            x.failures[0],
            x.after["execs"],
            x.seq.len(),
            min.len(),
            if reproduced { "" } else { " (did not come back on a second run: not minimised)" },
            repro.display()
        ));
        saved.push(json!({"seq": hex_seq(&min), "signature": x.sig, "reproduced": reproduced,
                          "file": repro.display().to_string()}));
    }
    report("fuzz", Status::Fail, elapsed.as_secs_f64() * 1000.0, Some(lines.join(" | ")), json!({"found": saved}));
    1
}

/// A failure the loop found: the first sequence with that signature.
struct Found {
    sig: String,
    seq: Vec<u64>,
    failures: Vec<String>,
    after: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: Mode) -> &'static Config {
        Box::leak(Box::new(Config {
            mode,
            seed: 1,
            ops: 0,
            seconds: 0.0,
            threads: 2,
            device: String::new(),
            text: vec![(0x1000, 0x2000)],
            replay: vec![],
            out: PathBuf::new(),
            hang_s: 1.0,
            flavor: String::new(),
            keep_going: false,
        }))
    }

    /// A model of a bug behind a chain of conditions: op `i` of a sequence advances the
    /// state if its seed is the state's number mod 32, and each state runs a block of its
    /// own; state `DEPTH` is the bug. A random sequence of 4-16 ops reaches it less than once
    /// in 10^5 (C(16,6)/32^6 for the longest); each step of the chain is a new edge, which
    /// the guided loop can climb.
    struct Chain;
    const DEPTH: u64 = 6;

    impl Target for Chain {
        fn run(&mut self, seq: &[u64]) -> Exec {
            let mut state = 0;
            let mut trace = vec![];
            for &op in seq {
                if op % 32 == state {
                    state += 1;
                }
                trace.push(0x1000 + 0x10 * state);
            }
            let failures = if state >= DEPTH { vec!["warning: WARNING: at chain.rs:6 f".into()] } else { vec![] };
            let op_of = vec![(0..seq.len() as u32).collect()];
            Exec { traces: vec![trace], op_of, failures }
        }
    }

    fn fuzzer(mode: Mode) -> Fuzzer<'static> {
        let cfg = config(mode);
        Fuzzer {
            cfg,
            target: Box::new(Chain),
            text: cfg.text.clone(),
            rng: Rng::new(7),
            corpus: vec![],
            edges: HashSet::new(),
            pcs: HashSet::new(),
            functions: BTreeSet::new(),
            syms: Symbols { starts: vec![0x1000, 0x1800], names: vec!["f".into(), "g".into()] },
            execs: 0,
            ops: 0,
            t0: Instant::now(),
            timeline: vec![],
            dict: vec![],
            fresh_at: vec![],
        }
    }

    /// Sequences run until the model's bug shows, at most `budget`; how many it took.
    fn sequences_to_the_bug(mode: Mode, budget: u64) -> Option<u64> {
        let mut f = fuzzer(mode);
        (0..budget).find(|_| !f.step().1.failures.is_empty()).map(|_| f.execs)
    }

    #[test]
    fn guided_climbs_a_chain_random_does_not() {
        let guided = sequences_to_the_bug(Mode::Guided, 30_000);
        assert!(guided.is_some(), "guided did not reach depth {DEPTH} in 30000 sequences");
        // The figure of docs/src/results/guided-fuzzing.md (shown with --nocapture).
        eprintln!("guided: depth {DEPTH} after {} sequences", guided.unwrap());
        assert_eq!(sequences_to_the_bug(Mode::Random, 30_000), None, "random reached it: the model is too easy");
    }

    /// The op seeds of a run's first `n` sequences, with the generator `run` seeds.
    fn first_sequences(mode: Mode, seed: u64, n: usize) -> Vec<Vec<u64>> {
        let mut f = fuzzer(mode);
        f.rng = op_rng(seed, mode);
        (0..n).map(|_| f.step().0).collect()
    }

    #[test]
    fn guided_and_random_draw_independent_op_seeds() {
        for seed in [0, 1, 0x5eed, 0xc33] {
            let guided = first_sequences(Mode::Guided, seed, 50);
            let random = first_sequences(Mode::Random, seed, 50);
            // Reproducible from (seed, mode).
            assert_eq!(guided, first_sequences(Mode::Guided, seed, 50));
            assert_eq!(random, first_sequences(Mode::Random, seed, 50));
            // No op seed in common: with one stream, both modes' first sequences were equal.
            let g: HashSet<u64> = guided.iter().flatten().copied().collect();
            let shared = random.iter().flatten().filter(|s| g.contains(s)).count();
            assert_eq!(shared, 0, "seed {seed:#x}: the modes share {shared} op seeds of their first 50 sequences");
            assert_ne!(op_rng(seed, Mode::Guided).next_u64(), op_rng(seed + 1, Mode::Guided).next_u64());
        }
    }

    #[test]
    fn new_edges_not_new_pcs_decide() {
        let mut f = fuzzer(Mode::Guided);
        let e = |t: &[u64]| Exec { traces: vec![t.to_vec()], op_of: vec![vec![0; t.len()]], failures: vec![] };
        assert_eq!(f.absorb(&e(&[0x1000, 0x1010, 0x1020]), 0).0, 3);
        assert_eq!(f.absorb(&e(&[0x1000, 0x1010, 0x1020]), 0).0, 0, "nothing new the second time");
        // The same PCs in another order: new edges.
        assert_eq!(f.absorb(&e(&[0x1000, 0x1020]), 0).0, 1);
        assert_eq!((f.pcs.len(), f.functions.len()), (3, 1));
        assert!(f.absorb(&e(&[0x1800]), 0).0 > 0);
        assert_eq!(f.functions.len(), 2);
        assert_eq!(f.syms.function_of(0x17ff), Some(0));
        assert_eq!(f.syms.function_of(0xfff), None);
    }

    #[test]
    fn mutations_stay_in_bounds_and_repeat_ops() {
        let mut f = fuzzer(Mode::Guided);
        let entry = |seq: Vec<u64>| Entry { seq, new_edges: 1, found_at: 0, picks: 0, last_new: false };
        f.corpus = vec![entry(vec![1, 2, 3]), entry((10..10 + MAX_LEN as u64).collect())];
        let mut repeated = false;
        for _ in 0..2000 {
            let m = f.mutate();
            assert!(!m.is_empty() && m.len() <= MAX_LEN, "{m:?}");
            let mut u = m.clone();
            u.sort();
            u.dedup();
            repeated |= u.len() < m.len();
        }
        assert!(repeated, "no mutation repeated an op");
    }

    #[test]
    fn energy_favours_productive_recent_short_entries_and_decays_with_picks() {
        let e = |len: usize, new_edges: usize, found_at: u64, picks: u64| {
            Entry { seq: vec![0; len], new_edges, found_at, picks, last_new: false }.energy(1000)
        };
        let base = e(12, 4, 0, 0);
        assert!(e(12, 40, 0, 0) > base, "more new edges");
        assert!(e(12, 4, 950, 0) > base, "joined recently");
        assert!(e(4, 4, 0, 0) > base, "short");
        assert!(e(12, 4, 0, 64) < base, "picked often");
        assert!(e(40, 0, 0, 10_000) >= 1, "never zero");
        let last = Entry { seq: vec![0; 12], new_edges: 4, found_at: 0, picks: 0, last_new: true }.energy(1000);
        assert!(last > base, "its last op reached new edges");
        // The draw follows it: a fresh productive entry is mutated most.
        let mut f = fuzzer(Mode::Guided);
        f.execs = 1000;
        f.corpus = vec![
            Entry { seq: vec![1; 12], new_edges: 1, found_at: 0, picks: 0, last_new: false },
            Entry { seq: vec![2; 12], new_edges: 30, found_at: 990, picks: 0, last_new: false },
        ];
        // (Over 100 draws: by 1000 its picks have brought it down to the old entry's level.)
        let fresh = (0..100).filter(|_| f.pick_entry()[0] == 2).count();
        assert!(fresh > 70, "the fresh entry was drawn {fresh} times in 100");
    }

    #[test]
    fn trace_pcs_go_to_the_op_that_ran_them() {
        // Thread trace positions 0-1: setup; op 2 from position 2, op 5 from position 4.
        let raw = [0x1000, 0x9000, 0x1010, 0x1020, 0x9010, 0x1030];
        let (pcs, ops) = attribute(&raw, &[(2, 2), (4, 5)], |pc| pc < 0x2000);
        assert_eq!(pcs, [0x1000, 0x1010, 0x1020, 0x1030]);
        assert_eq!(ops, [NO_OP, 2, 2, 5]);
        // An op that ran no PC (its start equals the next one's) leaves no trace.
        let (_, ops) = attribute(&raw, &[(2, 1), (2, 2)], |_| true);
        assert_eq!(ops, [NO_OP, NO_OP, 2, 2, 2, 2]);
    }

    #[test]
    fn the_last_ops_new_edges_are_counted_and_favoured() {
        let mut f = fuzzer(Mode::Guided);
        let e = |t: &[u64], o: &[u32]| Exec { traces: vec![t.to_vec()], op_of: vec![o.to_vec()], failures: vec![] };
        // Op 0 reaches 0x1000-0x1010, op 1 (the last) 0x1020: one new edge of three is op 1's.
        assert_eq!(f.absorb(&e(&[0x1000, 0x1010, 0x1020], &[0, 0, 1]), 1), (3, 1));
        // Op 1 again, on known ground; a new edge only in op 0 now.
        assert_eq!(f.absorb(&e(&[0x1030, 0x1000, 0x1010, 0x1020], &[0, 0, 0, 1]), 1), (2, 0));
        // The loop marks the entry, and its mutations append at the end more often.
        let mut f = fuzzer(Mode::Guided);
        for _ in 0..200 {
            f.step();
        }
        assert!(f.corpus.iter().any(|x| x.last_new), "no entry of the chain model ended on new edges");
        let appended = |last_new: bool| {
            let mut f = fuzzer(Mode::Guided);
            f.corpus = vec![Entry { seq: vec![1, 2, 3], new_edges: 1, found_at: 0, picks: 0, last_new }];
            // One fresh op after the entry's last.
            (0..8000)
                .filter(|_| {
                    let m = f.mutate();
                    m.len() == 4 && m[..3] == [1, 2, 3] && m[3] > 3
                })
                .count()
        };
        let (boosted, plain) = (appended(true), appended(false));
        assert!(boosted > plain + plain / 8, "appends: {boosted} with the last op new, {plain} without");
    }

    #[test]
    fn ops_that_reached_new_edges_are_inserted_again() {
        let mut f = fuzzer(Mode::Guided);
        let e = |t: &[u64], o: &[u32]| Exec { traces: vec![t.to_vec()], op_of: vec![o.to_vec()], failures: vec![] };
        // Op 1 (seed 22) reaches new edges, op 0 (seed 11) only known ones.
        f.absorb(&e(&[0x1000], &[0]), 0);
        let ex = e(&[0x1000, 0x1010], &[0, 1]);
        f.absorb(&ex, 1);
        f.learn_ops(&ex, &[11, 22]);
        assert_eq!(f.dict, [22]);
        f.corpus = vec![Entry { seq: vec![1, 2, 3], new_edges: 1, found_at: 0, picks: 0, last_new: false }];
        let with_22 = (0..1000).filter(|_| f.mutate().contains(&22)).count();
        assert!(with_22 > 20, "the dictionary's op was inserted {with_22} times in 1000 mutations");
    }

    /// A model of fuzz-deep's planted bug (fuzz-deep/0001, docs/src/results/guided-fuzzing.md,
    /// 2026-12-06) for the pre-run estimate: two refs (one per binder fd) whose death
    /// notification is requested (R) and cleared (C); an op is, by its seed, an R, a C, or an R
    /// then a C in one write, on one of the two refs, with the per-op probabilities of
    /// worker.rs's generator (from its weights; the results page derives them), or neither. A
    /// completed cycle advances the ref's stage, each stage a PC of its own; the third is the
    /// bug. Around it, a background of driver code that gives the corpus about the size the
    /// real runs' had (`Background`): without it the chain's entries would be nearly the whole
    /// corpus and draw most of the energy.
    struct DeathCycles {
        /// Per ref: (R only, C only, R then C) per op.
        p: [(f64, f64, f64); 2],
    }

    /// Deterministic uniform draws from an op seed (a real op does the same calls every time).
    fn unit(seed: u64, salt: u64) -> f64 {
        (Rng::derive(seed, salt).next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    impl Target for DeathCycles {
        fn run(&mut self, seq: &[u64]) -> Exec {
            let (mut set, mut stage) = ([false; 2], [0u64; 2]);
            let (mut trace, mut op_of) = (vec![], vec![]);
            let mut prev = 0u64;
            let mut failures = vec![];
            for (i, &op) in seq.iter().enumerate() {
                let mut pcs = vec![];
                // Background: one of 250 op kinds, the low ones far more often (u^2.5), whose
                // second block depends on the kind before it (one of two). Calibrated so that
                // the guided corpus holds about 200 entries after 2200-2700 sequences, as the
                // real runs' did (173-200).
                let kind = (250.0 * unit(op, 1).powf(2.5)) as u64;
                // The syscall's entry and its command loop, between every two blocks, as in
                // the driver: the blocks' edges do not multiply with each other.
                pcs.push(0x800);
                pcs.push(0x10_0000 + 0x100 * kind);
                pcs.push(0x10_0000 + 0x100 * kind + 0x10 * ((prev * 31 + kind) % 2));
                pcs.push(0x900);
                prev = kind;
                let u = unit(op, 2);
                let mut acc = 0.0;
                for r in 0..2 {
                    let (ro, co, rc) = self.p[r];
                    let what = if u < acc + ro {
                        "R"
                    } else if u < acc + ro + co {
                        "C"
                    } else if u < acc + ro + co + rc {
                        "RC"
                    } else {
                        ""
                    };
                    acc += ro + co + rc;
                    let base = 0x1000 + 0x400 * r as u64;
                    for c in what.chars() {
                        if c == 'R' {
                            pcs.extend([base + if set[r] { 0x10 } else { 0x20 }, 0x900]);
                            set[r] = true;
                        } else if set[r] {
                            set[r] = false;
                            stage[r] += 1;
                            pcs.extend([base + 0x100 + 0x10 * stage[r], 0x900]);
                            if stage[r] == 3 && failures.is_empty() {
                                failures.push("warning: WARNING: at process.rs:1 planted_third_cycle".into());
                            }
                        } else {
                            pcs.extend([base + 0x30, 0x900]);
                        }
                    }
                }
                op_of.extend(std::iter::repeat_n(i as u32, pcs.len()));
                trace.extend(pcs);
            }
            Exec { traces: vec![trace], op_of: vec![op_of], failures }
        }
    }

    /// The per-op probabilities of `DeathCycles`, from worker.rs's weights (the results page
    /// shows the arithmetic): a write op (50/97) on fd 0 (0.6) or fd 1 (0.4), well-formed
    /// (7/10), of 1-7 commands, each a death request or clear with weight 6 of 91; a clear
    /// names the active notification 3/4 of the time (0.77 with a lucky cookie).
    fn death_cycle_rates() -> [(f64, f64, f64); 2] {
        let pn: [(i32, f64); 7] = [(1, 0.5), (2, 0.2), (3, 0.1), (4, 0.08), (5, 0.05), (6, 0.04), (7, 0.03)];
        let p: f64 = 6.0 / 91.0;
        [0.6, 0.4].map(|fd| {
            let sane = 50.0 / 97.0 * fd * 0.7;
            let any: f64 = pn.iter().map(|&(n, q)| q * (1.0 - (1.0 - p).powi(n))).sum();
            let pairs: f64 = pn.iter().map(|&(n, q)| q * (n * (n - 1)) as f64 / 2.0).sum();
            let r = sane * any + 50.0 / 97.0 * fd * 0.3 * 0.6 * 3.0 / 93.0;
            let c = sane * any * 0.77;
            let rc = sane * pairs * p * p * 0.77;
            (r - rc, c, rc)
        })
    }

    /// Of `runs` model runs of `budget` sequences each, how many reached the bug, per mode;
    /// and the guided runs' mean corpus size.
    fn death_cycle_runs(mode: Mode, runs: u64, budget: u64) -> (u64, f64) {
        let (mut found, mut corpus) = (0, 0.0);
        for run in 0..runs {
            let mut f = fuzzer(mode);
            f.target = Box::new(DeathCycles { p: death_cycle_rates() });
            f.rng = op_rng(0xdee9 + run, mode);
            f.syms = Symbols { starts: vec![0], names: vec!["m".into()] };
            found += (0..budget).any(|_| !f.step().1.failures.is_empty()) as u64;
            corpus += f.corpus.len() as f64 / runs as f64;
        }
        (found, corpus)
    }

    #[test]
    #[ignore = "the pre-run estimate for fuzz-deep (under a minute with --release); prints it"]
    fn print_death_cycle_estimate() {
        eprintln!("rates per op (R only, C only, R then C), fd 0 and fd 1: {:?}", death_cycle_rates());
        let runs = 200;
        for budget in [2200, 2700] {
            let (g, corpus) = death_cycle_runs(Mode::Guided, runs, budget);
            let (r, _) = death_cycle_runs(Mode::Random, runs, budget);
            eprintln!("{budget} sequences: guided reached it in {g} of {runs} model runs (corpus {corpus:.0}), random in {r} of {runs}");
        }
    }

    #[test]
    fn ranges_sequences_and_signatures() {
        assert_eq!(parse_ranges("0x10-0x20,30-40"), Some(vec![(0x10, 0x20), (0x30, 0x40)]));
        assert_eq!(parse_ranges("0x20-0x10"), None);
        assert_eq!(parse_seq("0x1,ff"), Some(vec![1, 0xff]));
        assert_eq!(
            signature("warning: WARNING: CPU: 1 PID: 77 at drivers/android/binder/freeze.rs:109 do_work+0x1/0x2"),
            "warning at drivers/android/binder/freeze.rs:109"
        );
    }
}
