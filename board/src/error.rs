//! The crate's one error type: a board file that cannot be used, with the file, the field
//! and the fix.

use std::fmt;

/// A board file that cannot be used, with everything needed to fix it.
///
/// `Display` gives the full actionable message:
/// `board/x.toml: clusters[1].cpus: cpu 4 is in clusters "silver" and "gold"; list each CPU in exactly one cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardError {
    /// The board file (as given to [`crate::Board::load`] or [`crate::Board::from_str_named`]).
    pub file: String,
    /// `line L, column C` when the TOML parser knows it, else empty.
    pub location: String,
    /// Dotted path of the offending field, e.g. `clusters[1].cpus`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
}

impl fmt::Display for BoardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        if !self.location.is_empty() {
            write!(f, "{}: ", self.location)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}; {}", self.problem, self.fix)
    }
}

impl std::error::Error for BoardError {}

/// Builds [`BoardError`]s for one file while it is validated.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn err(&self, field: impl Into<String>, problem: impl Into<String>, fix: &str) -> BoardError {
        BoardError {
            file: self.file.to_string(),
            location: String::new(),
            field: field.into(),
            problem: problem.into(),
            fix: fix.to_string(),
        }
    }
}
