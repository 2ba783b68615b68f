//! Stage 6: the experiments. The seed workloads (`bench`, `reproduce`, the timing model's
//! prediction, seed 001), `ab`, profiles and the per-call account, and the nightly's
//! orchestration; the statistics they use are the `numbers` stage. Imports `report`,
//! `harness` and below.

pub mod ab;
pub mod account;
pub mod bench;
pub mod freeze;
pub mod matrix;
pub mod model;
pub mod nightly;
pub mod placement;
pub mod profile;
pub mod reproduce;
pub mod seed001;
pub mod userspace;
