//! Stage 0: what every stage uses (paths, files, published artifacts' manifests, processes,
//! progress, time stamps). Imports nothing from the other stages.

pub mod artifact;
pub mod fs;
pub mod interrupt;
pub mod parallel;
pub mod paths;
pub mod process;
pub mod progress;
pub mod stamp;
