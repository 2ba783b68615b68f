//! Stage 0: what every stage uses (paths, files, processes, progress, time stamps). Imports nothing
//! from the other stages.

pub mod fs;
pub mod parallel;
pub mod paths;
pub mod process;
pub mod progress;
pub mod stamp;
