//! A finding as a rule reports it, and the source file it is located in.

use crate::source::{LineIndex, TextRange, TextSize};
use issue_model::{Fix, Related};

/// A finding, located, before it becomes an issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: &'static str,
    /// Relative `/` path.
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub end_line: u32,
    pub end_column: u32,
    pub symbol: Option<String>,
    pub snippet: String,
    pub message: String,
    pub related: Vec<Related>,
    /// The automatic fix, if the rule has one (see [`crate::fix`]).
    pub fix: Option<Fix>,
    /// Why the finding stops the training run on the NPU, when it does ([`issue_model::Issue::blocking`]).
    pub blocking: Option<String>,
}

/// A source file's text and position map.
#[derive(Debug)]
pub struct SourceFile<'a> {
    pub path: &'a str,
    pub text: &'a str,
    pub index: &'a LineIndex,
}

impl SourceFile<'_> {
    /// 1-based (line, character column) of a byte offset.
    pub fn position(&self, offset: TextSize) -> (u32, u32) {
        self.index.position(self.text, offset)
    }

    /// The lines a range covers, trimmed, at most five of them.
    pub fn snippet(&self, line: u32, end_line: u32) -> String {
        let end = end_line.clamp(line, line.saturating_add(4));
        if end == line {
            return self.index.line_text(self.text, line).trim().to_owned();
        }
        let mut snippet = String::new();
        for l in line..=end {
            if l > line {
                snippet.push('\n');
            }
            snippet.push_str(self.index.line_text(self.text, l).trim());
        }
        snippet
    }

    /// The source text of a range (empty if out of bounds).
    pub fn slice(&self, range: TextRange) -> &str {
        self.text
            .get(usize::from(range.start())..usize::from(range.end()))
            .unwrap_or("")
    }
}

/// 1-based (line, column, end line, end column) of a range.
pub(crate) fn locate(file: &SourceFile<'_>, range: TextRange) -> (u32, u32, u32, u32) {
    let (line, column) = file.position(range.start());
    let (end_line, end_column) = file.position(range.end());
    (line, column, end_line.max(line), end_column)
}
