//! The cache plugin's model, free of QEMU so it can be unit-tested: per-CPU L1D and L2, one
//! L3 shared by all CPUs, DRAM behind it, and MESI coherence on physical cache lines.
//!
//! - Each level is set-associative with true LRU (the cores' pseudo-LRU is not modelled). A
//!   hit in the L1D does not touch the L2's LRU: the L2 does not see it, in hardware either.
//! - The L2 follows its core's Technical Reference Manual ([`L2Policy`]): the Cortex-A76's is
//!   strictly inclusive of its L1D (an L2 eviction takes the line out of the L1D too), the
//!   Cortex-A55's strictly exclusive (filled only by L1D evictions; an L2 hit moves the line
//!   into the L1D).
//! - A line filled from outside the core also goes into the L3, and a modified line that
//!   leaves a core is written back to the L3. The L3 never back-invalidates the cores (the
//!   DSU's L3 is neither inclusive nor exclusive of them); the DSU's snoop filter knows
//!   which cores hold a line whatever the L3 holds.
//! - A directory records, per line, the CPUs that hold it; each copy is modified, exclusive or
//!   shared (MESI). A store invalidates every other copy. An access that misses its own L1D and
//!   L2 is served, in this order, by the core that holds the line modified (a dirty transfer),
//!   the L3, a core that holds it clean (a snoop), or DRAM; transfers and snoops cost the same-
//!   or cross-cluster latency of the core that supplies the line.
//! - Loads are charged their latency above an L1D hit (which the instruction's own time
//!   includes), at the core's top clock, or at the clock [`Model::set_khz`] gives: then the
//!   core's own cycles of it ([`CpuConfig::core_ps`]) follow that clock, the DSU's and DRAM's
//!   time does not. Stores are counted and change the lines' states, but are not charged: they
//!   retire into the store buffer, and what sharing costs shows up as the next reader's
//!   transfer. [`Counters`] keeps both: the access counters count loads and stores, as a PMU
//!   does, and the `charged_*` counters count the loads charged at each place.
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

    /// The part of [`Costs::from_cycles`] that is the core's own cycles: all of an L2 hit, and
    /// of a load that leaves the core the L2 look-up it missed first (`l2 - l1d` cycles). The
    /// rest (the DSU's L3, its snoops, DRAM) runs on clocks of its own.
    pub fn core_part(c: &Cycles, ps_per_cycle: f64) -> Costs {
        let l2 = Costs::from_cycles(c, ps_per_cycle).l2;
        Costs { l2, l3: l2, same_cluster: l2, cross_cluster: l2, dram: l2 }
    }

    fn fields(&self) -> [u64; 5] {
        [self.l2, self.l3, self.same_cluster, self.cross_cluster, self.dram]
    }

    /// These costs (at `top_khz`) at the core clock `khz`: the `core` part scales by
    /// `top_khz / khz`, rounded to whole picoseconds; the rest stays. Integer arithmetic, so
    /// every host computes the same charges.
    pub fn at_khz(&self, core: &Costs, top_khz: u64, khz: u64) -> Costs {
        let at = |cost: u64, core: u64| {
            let core = core.min(cost);
            cost - core + (core * top_khz + khz / 2) / khz
        };
        Costs {
            l2: at(self.l2, core.l2),
            l3: at(self.l3, core.l3),
            same_cluster: at(self.same_cluster, core.same_cluster),
            cross_cluster: at(self.cross_cluster, core.cross_cluster),
            dram: at(self.dram, core.dram),
        }
    }
}

/// How a core's L2 relates to its L1D.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum L2Policy {
    /// Every line in the L1D is also in the L2; an L2 eviction removes it from the L1D.
    /// Cortex-A76 TRM (Arm 100798), A7.1 "About the L2 memory system": strictly inclusive
    /// with the L1 data cache (its L2 tags carry an "L1 data cache valid" bit, A6.6).
    #[default]
    Inclusive,
    /// A line is in the L1D or the L2, never both; the L2 is filled by L1D evictions.
    /// Cortex-A55 TRM (Arm 100442), A7.1: "Strictly exclusive with L1 data cache", and
    /// "Data is allocated to the L2 cache only when evicted from the L1 memory system".
    Exclusive,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuConfig {
    pub cluster: u32,
    pub l1d: Geometry,
    pub l2: Geometry,
    #[serde(default)]
    pub l2_policy: L2Policy,
    /// What each place costs at the core's top clock.
    pub cost_ps: Costs,
    /// The part of `cost_ps` that is the core's own cycles ([`Costs::core_part`]): at a core
    /// clock below `top_khz` it takes longer, the rest does not ([`Model::set_khz`]).
    #[serde(default)]
    pub core_ps: Costs,
    /// The clock `cost_ps` is at, in kHz; 0: the costs do not follow a clock.
    #[serde(default)]
    pub top_khz: u64,
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
        for (i, c) in self.cpus.iter().enumerate() {
            if c.core_ps.fields().iter().zip(c.cost_ps.fields()).any(|(core, cost)| *core > cost) {
                return Err(format!("cpus[{i}]: core_ps {:?} exceeds cost_ps {:?}", c.core_ps, c.cost_ps));
            }
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
    /// Modified if either copy is (an inclusive L2's copy can lag its L1D's).
    fn max_dirty(self, other: State) -> State {
        if self == State::Modified || other == State::Modified {
            State::Modified
        } else {
            self
        }
    }

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

    /// No line matches [`EMPTY`]: its line number (`u64::MAX >> 2`) is beyond any physical
    /// address's, so empty ways need no test of their own on this, the model's hottest path.
    fn position(set: &[u64], line: u64) -> Option<usize> {
        set.iter().position(|&e| e >> 2 == line)
    }

    /// Makes way `i` of `set` the most recent: the ways before it move down one. An open-coded
    /// loop: `rotate_right` on a few ways costs a call to the general rotation per access.
    fn to_front(set: &mut [u64], i: usize) {
        let e = set[i];
        for j in (0..i).rev() {
            set[j + 1] = set[j];
        }
        set[0] = e;
    }

    /// The state of `line` if present; a hit becomes most recent.
    fn lookup(&mut self, line: u64) -> Option<State> {
        let set = self.set(line);
        let i = Self::position(set, line)?;
        Self::to_front(set, i);
        Some(State::of(set[0]))
    }

    /// The state of `line` if present, leaving the LRU order alone (a snoop's look-up).
    fn peek(&mut self, line: u64) -> Option<State> {
        let set = self.set(line);
        Self::position(set, line).map(|i| State::of(set[i]))
    }

    /// Puts `line` in as most recent, or refreshes it; returns the least recent line it
    /// pushed out, with its state.
    fn insert(&mut self, line: u64, state: State) -> Option<(u64, State)> {
        let set = self.set(line);
        let (i, victim) = match Self::position(set, line) {
            Some(i) => (i, None),
            None => {
                let last = set.len() - 1;
                (last, (set[last] != EMPTY).then(|| (set[last] >> 2, State::of(set[last]))))
            }
        };
        Self::to_front(set, i);
        set[0] = line << 2 | state as u64;
        victim
    }

    fn set_state(&mut self, line: u64, state: State) {
        let set = self.set(line);
        if let Some(i) = Self::position(set, line) {
            set[i] = line << 2 | state as u64;
        }
    }

    /// Takes `line` out; returns its state if it was there.
    fn remove(&mut self, line: u64) -> Option<State> {
        let set = self.set(line);
        let i = Self::position(set, line)?;
        let state = State::of(set[i]);
        // Open-coded like `to_front`: an exclusive L2 removes a line at every L1D miss.
        for j in i..set.len() - 1 {
            set[j] = set[j + 1];
        }
        *set.last_mut().unwrap() = EMPTY;
        Some(state)
    }
}

/// References and misses of one CPU, where its L2 misses were served, and which of its
/// accesses were charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Loads and stores, as the PMU's L1D_CACHE and L1D_CACHE_REFILL count them.
    pub l1d_refs: u64,
    pub l1d_misses: u64,
    pub l2_refs: u64,
    pub l2_misses: u64,
    /// L2 misses that went to the L3 (not served by a core holding the line modified).
    pub l3_refs: u64,
    pub l3_misses: u64,
    /// L2 misses served by another core: its modified copy, or a clean one the L3 lacked.
    pub same_cluster_transfers: u64,
    pub cross_cluster_transfers: u64,
    /// Of those transfers, the clean copies snooped (the L3 had lost the line).
    pub clean_snoops: u64,
    /// Loads served by each place beyond the L1D, each charged that place's cost; stores
    /// are in the counters above only.
    pub charged_l2: u64,
    pub charged_l3: u64,
    pub charged_same_cluster: u64,
    pub charged_cross_cluster: u64,
    pub charged_dram: u64,
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
    /// The core clock its costs are at ([`Model::set_khz`]; 0: `cost_ps` as configured).
    khz: u64,
    costs: Costs,
}

pub struct Model {
    cfg: Config,
    line_shift: u32,
    cores: Vec<Core>,
    l3: Cache,
    /// Line -> the CPUs whose L1D or L2 holds it (bit per CPU); absent: none.
    holders: FxHashMap<u64, u64>,
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
                khz: 0,
                costs: c.cost_ps,
            })
            .collect();
        let l3 = Cache::new(cfg.l3, cfg.line_bytes);
        Ok(Model { line_shift: cfg.line_bytes.trailing_zeros(), cores, l3, holders: FxHashMap::default(), cfg })
    }

    pub fn cpus(&self) -> usize {
        self.cores.len()
    }

    pub fn counters(&self, cpu: usize) -> Counters {
        self.cores[cpu].counters
    }

    /// `cpu` runs at `khz` from now on: the core's part of each cost follows that clock. 0
    /// (the emulator knows no clock), or a CPU whose costs follow none (`top_khz` 0), keeps
    /// `cost_ps` as configured. Cheap when the clock is unchanged, so it can precede every
    /// access.
    pub fn set_khz(&mut self, cpu: usize, khz: u64) {
        let cpu = cpu.min(self.cores.len() - 1);
        let core = &mut self.cores[cpu];
        if core.khz == khz {
            return;
        }
        let c = &self.cfg.cpus[cpu];
        core.khz = khz;
        core.costs = if khz == 0 || c.top_khz == 0 { c.cost_ps } else { c.cost_ps.at_khz(&c.core_ps, c.top_khz, khz) };
    }

    /// One data access of `cpu` at physical address `paddr`; returns where it was served and
    /// the picoseconds to charge (0 for stores and L1D hits). A CPU beyond the model's is
    /// counted as the last one.
    pub fn access(&mut self, cpu: usize, paddr: u64, store: bool) -> (Served, u64) {
        let cpu = cpu.min(self.cores.len() - 1);
        let line = paddr >> self.line_shift;
        let served = self.serve(cpu, line, store);
        if store {
            return (served, 0);
        }
        let cost = self.cost(cpu, served);
        let c = &mut self.cores[cpu].counters;
        c.charged_ps += cost;
        match served {
            Served::L1d => {}
            Served::L2 => c.charged_l2 += 1,
            Served::L3 => c.charged_l3 += 1,
            Served::SameCluster => c.charged_same_cluster += 1,
            Served::CrossCluster => c.charged_cross_cluster += 1,
            Served::Dram => c.charged_dram += 1,
        }
        (served, cost)
    }

    fn cost(&self, cpu: usize, served: Served) -> u64 {
        let k = &self.cores[cpu].costs;
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
        let exclusive = self.cfg.cpus[cpu].l2_policy == L2Policy::Exclusive;
        // An exclusive L2 hands the line over to the L1D; an inclusive one keeps its copy.
        let in_l2 = if exclusive { core.l2.remove(line) } else { core.l2.lookup(line) };
        if let Some(state) = in_l2 {
            self.fill_l1d(cpu, line, state);
            if store && state != State::Modified {
                self.take_ownership(cpu, line);
            }
            return Served::L2;
        }
        self.cores[cpu].counters.l2_misses += 1;
        let served = self.fetch(cpu, line);
        let holders = self.holders.entry(line).or_default();
        let others = *holders & !(1 << cpu);
        *holders |= 1 << cpu;
        let state = if others == 0 { State::Exclusive } else { State::Shared };
        if !exclusive {
            self.fill_l2(cpu, line, state);
        }
        self.fill_l1d(cpu, line, state);
        if store {
            self.take_ownership(cpu, line);
        } else if others != 0 {
            self.share(others, line);
        }
        served
    }

    /// Puts `line` in `cpu`'s L1D. The line it pushes out stays in an inclusive L2 (whose copy
    /// carries the same state) and moves into an exclusive one.
    fn fill_l1d(&mut self, cpu: usize, line: u64, state: State) {
        let Some((victim, vstate)) = self.cores[cpu].l1d.insert(line, state) else { return };
        if self.cfg.cpus[cpu].l2_policy == L2Policy::Exclusive {
            self.fill_l2(cpu, victim, vstate);
        }
    }

    /// Puts `line` in `cpu`'s L2. The line it pushes out leaves the core: out of the L1D too
    /// if the L2 is inclusive, written back to the L3 if modified, off the directory.
    fn fill_l2(&mut self, cpu: usize, line: u64, state: State) {
        let Some((victim, mut vstate)) = self.cores[cpu].l2.insert(line, state) else { return };
        if self.cfg.cpus[cpu].l2_policy == L2Policy::Inclusive {
            if let Some(s) = self.cores[cpu].l1d.remove(victim) {
                vstate = vstate.max_dirty(s);
            }
        }
        if vstate == State::Modified {
            self.l3.insert(victim, State::Shared);
        }
        if let Some(h) = self.holders.get_mut(&victim) {
            *h &= !(1 << cpu);
            if *h == 0 {
                self.holders.remove(&victim);
            }
        }
    }

    /// The state of `cpu`'s copy of `line`, if its L1D or L2 holds one.
    fn held(&mut self, cpu: usize, line: u64) -> Option<State> {
        let core = &mut self.cores[cpu];
        core.l1d.peek(line).or_else(|| core.l2.peek(line))
    }

    /// The other CPU that supplies `line` to `cpu`: the one holding it in `want` state if any
    /// (modified), else (`want` None) any holder, one of `cpu`'s cluster first.
    fn supplier(&mut self, cpu: usize, line: u64, want: Option<State>) -> Option<usize> {
        let others = self.holders.get(&line).copied().unwrap_or(0) & !(1 << cpu);
        let cluster = self.cfg.cpus[cpu].cluster;
        let mut best = None;
        for p in (0..self.cores.len()).filter(|p| others >> p & 1 == 1) {
            let Some(s) = self.held(p, line) else { continue };
            if want.is_some_and(|w| w != s) {
                continue;
            }
            let near = self.cfg.cpus[p].cluster == cluster;
            if best.is_none() || near {
                best = Some(p);
            }
            if near {
                break;
            }
        }
        best
    }

    /// A transfer from `from` to `cpu`, counted by cluster.
    fn transfer(&mut self, cpu: usize, from: usize) -> Served {
        let same = self.cfg.cpus[from].cluster == self.cfg.cpus[cpu].cluster;
        let c = &mut self.cores[cpu].counters;
        if same {
            c.same_cluster_transfers += 1;
            Served::SameCluster
        } else {
            c.cross_cluster_transfers += 1;
            Served::CrossCluster
        }
    }

    /// An L2 miss: from the core holding the line modified (which writes it back), the L3, a
    /// core holding it clean, or DRAM; all but the L3 hit fill the L3.
    fn fetch(&mut self, cpu: usize, line: u64) -> Served {
        if let Some(w) = self.supplier(cpu, line, Some(State::Modified)) {
            self.l3.insert(line, State::Shared);
            return self.transfer(cpu, w);
        }
        self.cores[cpu].counters.l3_refs += 1;
        if self.l3.lookup(line).is_some() {
            return Served::L3;
        }
        self.cores[cpu].counters.l3_misses += 1;
        self.l3.insert(line, State::Shared);
        if let Some(p) = self.supplier(cpu, line, None) {
            self.cores[cpu].counters.clean_snoops += 1;
            return self.transfer(cpu, p);
        }
        Served::Dram
    }

    /// A store to a line `cpu` does not hold modified: every other CPU's copy is invalidated
    /// (none for an exclusive one), and `cpu`'s becomes modified.
    fn take_ownership(&mut self, cpu: usize, line: u64) {
        let holders = self.holders.entry(line).or_default();
        let others = *holders & !(1 << cpu);
        *holders = 1 << cpu;
        for (i, core) in self.cores.iter_mut().enumerate().filter(|(i, _)| others >> i & 1 == 1) {
            debug_assert_ne!(i, cpu);
            core.l1d.remove(line);
            core.l2.remove(line);
        }
        let core = &mut self.cores[cpu];
        core.l1d.set_state(line, State::Modified);
        core.l2.set_state(line, State::Modified);
    }

    /// A load shared the line: nobody may write it silently any more, and a modified copy
    /// was written back when it was transferred.
    fn share(&mut self, others: u64, line: u64) {
        for (_, core) in self.cores.iter_mut().enumerate().filter(|(i, _)| others >> i & 1 == 1) {
            core.l1d.set_state(line, State::Shared);
            core.l2.set_state(line, State::Shared);
        }
    }
}

#[cfg(test)]
mod tests;
