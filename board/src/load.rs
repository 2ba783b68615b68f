//! Reading a board: TOML → validated model → its `[expect]` table checked against the model.

use std::path::Path;

use crate::error::BoardError;
use crate::model::Board;
use crate::schema::parse_toml;
use crate::validate::validate;

impl Board {
    /// Loads and validates a board file; errors name the file, the field and the fix.
    pub fn load(path: &Path) -> Result<Board, BoardError> {
        let label = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| BoardError {
            file: label.clone(),
            location: String::new(),
            field: String::new(),
            problem: format!("cannot read the board file: {e}"),
            fix: "check the path (boards live in board/*.toml)".into(),
        })?;
        Board::from_str_named(&text, &label)
    }

    /// Parses and validates board TOML; `file` is only used in messages and as the
    /// default name (its stem). Meant for tests and for boards not on disk.
    pub fn from_str_named(text: &str, file: &str) -> Result<Board, BoardError> {
        let raw = parse_toml(text, file)?;
        let (board, expect) = validate(raw, file)?;
        crate::expect::check(&board, expect, file)?;
        Ok(board)
    }
}
