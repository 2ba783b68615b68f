//! Stage 5: measurements. Statistics, benchmark samples and tables, plots, and the seed
//! experiments (`bench`, `reproduce`). Imports `report`, `harness` and below.

pub mod bench;
pub mod matrix;
pub mod plots;
pub mod reproduce;
pub mod samples;
pub mod stats;
