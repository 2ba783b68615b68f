//! Stage 1: numbers. Pure statistics on samples: estimates and intervals (`stats`), a
//! benchmark's samples (`samples`), seed tables and their marks (`table`), the nightly's
//! regression rule (`gate`) and SVG plots (`plots`). No I/O of runs, no boots: every
//! function here is tested on numbers alone. Imports nothing of the crate.

pub mod gate;
pub mod plots;
pub mod samples;
pub mod stats;
pub mod table;
