//! Stage 5: measurements. Statistics, benchmark samples and tables, plots, and the seed
//! experiments (`bench`, `reproduce`), the nightly's regression gate. Imports `report`, `harness` and below.

pub mod ab;
pub mod account;
pub mod bench;
pub mod freeze;
pub mod gate;
pub mod matrix;
pub mod model;
pub mod placement;
pub mod plots;
pub mod profile;
pub mod reproduce;
pub mod samples;
pub mod seed001;
pub mod stats;
pub mod table;
