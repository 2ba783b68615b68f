//! The cache plugin's model, free of QEMU so it can be unit-tested: per-CPU L1D and L2, one
//! L3 shared by all CPUs, DRAM behind it, and MESI-like coherence on physical cache lines.
//!
//! - Each level is set-associative with true LRU (the cores' pseudo-LRU is not modelled).
//! - A miss fills every level it missed (L1D, L2, L3); nothing is back-invalidated on an
//!   eviction, and the A55's exclusive L2 is modelled like the A76's inclusive one.
//! - A directory records, per line ever missed in an L2, the CPUs that may hold it and the last
//!   writer; a line is modified, exclusive or shared in a cache (MESI). A store invalidates
//!   the line in every other CPU. A load that misses its own L1D and L2 while another CPU
//!   still holds the line it wrote is served by that CPU (a peer transfer), at the same- or
//!   cross-cluster cost.
//! - Loads are charged their latency above an L1D hit (which the instruction's own time
//!   includes). Stores are counted and change the lines' states, but are not charged: they
//!   retire into the store buffer, and what sharing costs shows up as the next reader's
//!   transfer.
//!
//! Everything is a pure function of the access sequence: two runs of the same guest under
//! heterogeneous icount give the same counters.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Size and associativity of one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub size_kib: u32,
    pub ways: u32,
}

/// Load-to-use latencies of one core in its own cycles (DRAM's included).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cycles {
    pub l1d: f64,
    pub l2: f64,
    pub l3: f64,
    pub same_cluster: f64,
    pub cross_cluster: f64,
    pub dram: f64,
}

/// Extra picoseconds of a load served by each place, over an L1D hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Costs {
    pub l2: u64,
    pub l3: u64,
    /// Another CPU of the same cluster holds the line it wrote.
    pub same_cluster: u64,
    /// Another CPU of another cluster holds the line it wrote.
    pub cross_cluster: u64,
    pub dram: u64,
}

impl Costs {
    /// What each place costs over an L1D hit (which the instruction's own time includes), at
    /// `ps_per_cycle`, rounded to whole picoseconds.
    pub fn from_cycles(c: &Cycles, ps_per_cycle: f64) -> Costs {
        let ps = |cycles: f64| ((cycles - c.l1d).max(0.0) * ps_per_cycle).round() as u64;
        Costs {
            l2: ps(c.l2),
            l3: ps(c.l3),
            same_cluster: ps(c.same_cluster),
            cross_cluster: ps(c.cross_cluster),
            dram: ps(c.dram),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuConfig {
    pub cluster: u32,
    pub l1d: Geometry,
    pub l2: Geometry,
    pub cost_ps: Costs,
}

/// The whole model, as the harness writes it from the board (`[cache_model]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub line_bytes: u32,
    pub l3: Geometry,
    /// By CPU number.
    pub cpus: Vec<CpuConfig>,
}

impl Config {
    /// Checks what the model relies on; Err names the field and the problem.
    pub fn check(&self) -> Result<(), String> {
        if !self.line_bytes.is_power_of_two() || self.line_bytes < 8 {
            return Err(format!("line_bytes {} is not a power of two >= 8", self.line_bytes));
        }
        if self.cpus.is_empty() || self.cpus.len() > 64 {
            return Err(format!("{} CPUs: the model handles 1 to 64", self.cpus.len()));
        }
        let mut all = vec![("l3".to_string(), self.l3)];
        for (i, c) in self.cpus.iter().enumerate() {
            all.push((format!("cpus[{i}].l1d"), c.l1d));
            all.push((format!("cpus[{i}].l2"), c.l2));
        }
        for (name, g) in all {
            let lines = u64::from(g.size_kib) * 1024 / u64::from(self.line_bytes);
            if g.ways == 0
                || lines == 0
                || lines % u64::from(g.ways) != 0
                || !(lines / u64::from(g.ways)).is_power_of_two()
            {
                return Err(format!(
                    "{name}: {} KiB in {} ways of {}-byte lines is not a power-of-two number of sets",
                    g.size_kib, g.ways, self.line_bytes
                ));
            }
        }
        Ok(())
    }
}

/// MESI's states of a present line (invalid is absence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Shared = 0,
    Exclusive = 1,
    Modified = 2,
}

impl State {
    fn of(entry: u64) -> State {
        match entry & 3 {
            0 => State::Shared,
            1 => State::Exclusive,
            _ => State::Modified,
        }
    }
}

/// One set-associative cache of line numbers. Each set keeps its ways most recent first; an
/// entry is `line << 2 | state`, or [`EMPTY`].
struct Cache {
    ways: usize,
    set_mask: u64,
    slots: Vec<u64>,
}

const EMPTY: u64 = u64::MAX;

impl Cache {
    fn new(g: Geometry, line_bytes: u32) -> Cache {
        let lines = (u64::from(g.size_kib) * 1024 / u64::from(line_bytes)) as usize;
        let ways = g.ways as usize;
        Cache { ways, set_mask: (lines / ways) as u64 - 1, slots: vec![EMPTY; lines] }
    }

    fn set(&mut self, line: u64) -> &mut [u64] {
        let start = (line & self.set_mask) as usize * self.ways;
        &mut self.slots[start..start + self.ways]
    }

    fn position(set: &[u64], line: u64) -> Option<usize> {
        set.iter().position(|&e| e != EMPTY && e >> 2 == line)
    }

    /// The state of `line` if present; a hit becomes most recent.
    fn lookup(&mut self, line: u64) -> Option<State> {
        let set = self.set(line);
        let i = Self::position(set, line)?;
        set[..=i].rotate_right(1);
        Some(State::of(set[0]))
    }

    fn contains(&mut self, line: u64) -> bool {
        Self::position(self.set(line), line).is_some()
    }

    /// Puts `line` in as most recent (the least recent is dropped), or refreshes it.
    fn insert(&mut self, line: u64, state: State) {
        let set = self.set(line);
        let i = Self::position(set, line).unwrap_or(set.len() - 1);
        set[..=i].rotate_right(1);
        set[0] = line << 2 | state as u64;
    }

    fn set_state(&mut self, line: u64, state: State) {
        let set = self.set(line);
        if let Some(i) = Self::position(set, line) {
            set[i] = line << 2 | state as u64;
        }
    }

    fn invalidate(&mut self, line: u64) {
        let set = self.set(line);
        if let Some(i) = Self::position(set, line) {
            set[i..].rotate_left(1);
            *set.last_mut().unwrap() = EMPTY;
        }
    }
}

/// References and misses of one CPU, and where its L2 misses were served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub l1d_refs: u64,
    pub l1d_misses: u64,
    pub l2_refs: u64,
    pub l2_misses: u64,
    /// L2 misses that went to the L3 (not served by a peer).
    pub l3_refs: u64,
    pub l3_misses: u64,
    pub same_cluster_transfers: u64,
    pub cross_cluster_transfers: u64,
    /// Picoseconds charged for loads.
    pub charged_ps: u64,
}

/// Where an access was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    L1d,
    L2,
    L3,
    SameCluster,
    CrossCluster,
    Dram,
}

struct Core {
    l1d: Cache,
    l2: Cache,
    counters: Counters,
}

#[derive(Default, Clone, Copy)]
struct Line {
    /// CPUs that may hold the line (a superset: evictions do not clear their bit).
    sharers: u64,
    /// The CPU that wrote it last, if it has not been read by another since.
    writer: Option<u8>,
}

pub struct Model {
    cfg: Config,
    line_shift: u32,
    cores: Vec<Core>,
    l3: Cache,
    lines: FxHashMap<u64, Line>,
}

impl Model {
    pub fn new(cfg: Config) -> Result<Model, String> {
        cfg.check()?;
        let cores = cfg
            .cpus
            .iter()
            .map(|c| Core {
                l1d: Cache::new(c.l1d, cfg.line_bytes),
                l2: Cache::new(c.l2, cfg.line_bytes),
                counters: Counters::default(),
            })
            .collect();
        let l3 = Cache::new(cfg.l3, cfg.line_bytes);
        Ok(Model { line_shift: cfg.line_bytes.trailing_zeros(), cores, l3, lines: FxHashMap::default(), cfg })
    }

    pub fn cpus(&self) -> usize {
        self.cores.len()
    }

    pub fn counters(&self, cpu: usize) -> Counters {
        self.cores[cpu].counters
    }

    /// One data access of `cpu` at physical address `paddr`; returns where it was served and
    /// the picoseconds to charge (0 for stores and L1D hits). A CPU beyond the model's is
    /// counted as the last one.
    pub fn access(&mut self, cpu: usize, paddr: u64, store: bool) -> (Served, u64) {
        let cpu = cpu.min(self.cores.len() - 1);
        let line = paddr >> self.line_shift;
        let served = self.serve(cpu, line, store);
        let cost = if store { 0 } else { self.cost(cpu, served) };
        let c = &mut self.cores[cpu].counters;
        c.charged_ps += cost;
        (served, cost)
    }

    fn cost(&self, cpu: usize, served: Served) -> u64 {
        let k = &self.cfg.cpus[cpu].cost_ps;
        match served {
            Served::L1d => 0,
            Served::L2 => k.l2,
            Served::L3 => k.l3,
            Served::SameCluster => k.same_cluster,
            Served::CrossCluster => k.cross_cluster,
            Served::Dram => k.dram,
        }
    }

    fn serve(&mut self, cpu: usize, line: u64, store: bool) -> Served {
        let core = &mut self.cores[cpu];
        core.counters.l1d_refs += 1;
        if let Some(state) = core.l1d.lookup(line) {
            if store && state != State::Modified {
                self.take_ownership(cpu, line);
            }
            return Served::L1d;
        }
        core.counters.l1d_misses += 1;
        core.counters.l2_refs += 1;
        if let Some(state) = core.l2.lookup(line) {
            core.l1d.insert(line, state);
            if store && state != State::Modified {
                self.take_ownership(cpu, line);
            }
            return Served::L2;
        }
        core.counters.l2_misses += 1;
        let served = self.fetch(cpu, line);
        let entry = self.lines.entry(line).or_default();
        let others = entry.sharers & !(1 << cpu);
        entry.sharers |= 1 << cpu;
        let state = if others == 0 { State::Exclusive } else { State::Shared };
        let core = &mut self.cores[cpu];
        core.l1d.insert(line, state);
        core.l2.insert(line, state);
        if store {
            self.take_ownership(cpu, line);
        } else if others != 0 {
            self.share(others, line);
        }
        served
    }

    /// An L2 miss: from the CPU that wrote the line last if it still holds it, else the L3
    /// or DRAM.
    fn fetch(&mut self, cpu: usize, line: u64) -> Served {
        let writer = self.lines.get(&line).and_then(|l| l.writer).map(usize::from).filter(|&w| w != cpu);
        if let Some(w) = writer {
            let holder = &mut self.cores[w];
            if holder.l1d.contains(line) || holder.l2.contains(line) {
                self.lines.get_mut(&line).unwrap().writer = None;
                self.l3.insert(line, State::Shared);
                let same = self.cfg.cpus[w].cluster == self.cfg.cpus[cpu].cluster;
                let c = &mut self.cores[cpu].counters;
                return if same {
                    c.same_cluster_transfers += 1;
                    Served::SameCluster
                } else {
                    c.cross_cluster_transfers += 1;
                    Served::CrossCluster
                };
            }
        }
        let c = &mut self.cores[cpu].counters;
        c.l3_refs += 1;
        if self.l3.lookup(line).is_some() {
            return Served::L3;
        }
        c.l3_misses += 1;
        self.l3.insert(line, State::Shared);
        Served::Dram
    }

    /// A store to a line `cpu` does not hold modified: every other CPU's copy is invalidated
    /// (none for an exclusive one), and `cpu`'s becomes modified, with `cpu` its writer.
    fn take_ownership(&mut self, cpu: usize, line: u64) {
        let entry = self.lines.entry(line).or_default();
        let others = entry.sharers & !(1 << cpu);
        *entry = Line { sharers: 1 << cpu, writer: Some(cpu as u8) };
        for (i, core) in self.cores.iter_mut().enumerate().filter(|(i, _)| others >> i & 1 == 1) {
            debug_assert_ne!(i, cpu);
            core.l1d.invalidate(line);
            core.l2.invalidate(line);
        }
        let core = &mut self.cores[cpu];
        core.l1d.set_state(line, State::Modified);
        core.l2.set_state(line, State::Modified);
    }

    /// A load shared the line: nobody may write it silently any more.
    fn share(&mut self, others: u64, line: u64) {
        for (_, core) in self.cores.iter_mut().enumerate().filter(|(i, _)| others >> i & 1 == 1) {
            core.l1d.set_state(line, State::Shared);
            core.l2.set_state(line, State::Shared);
        }
    }
}

#[cfg(test)]
mod tests;
