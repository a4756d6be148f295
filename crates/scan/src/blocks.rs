//! A Python module's top-level blocks by name, for comparing two versions of one module
//! (npu-verify compares a project's `runtime_patches.py` with the shipped one).

use crate::source::ast::{Ranged, Stmt};
use crate::source::{self, LineIndex};
use std::collections::BTreeMap;

/// The name under which every top-level statement that is not a `class` or `def` is kept.
pub const MODULE_CODE: &str = "<module code>";

/// Each top-level `class` / `def` by name (its decorators included), and every other
/// top-level statement together under [`MODULE_CODE`]. A block is its source lines with
/// trailing whitespace removed and blank lines dropped, so whitespace-only edits compare equal;
/// comments between top-level statements belong to no block. `Err` is the parser's message
/// with its line.
pub fn top_level_blocks(text: &str) -> Result<BTreeMap<String, String>, String> {
    let index = LineIndex::new(text);
    let parsed = source::parse(text, "<module>")
        .map_err(|e| format!("line {}: {}", index.line(e.offset), e.message))?;
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for stmt in &parsed.body {
        let (name, decorators) = match stmt {
            Stmt::FunctionDef(f) => (f.name.as_str(), &f.decorator_list),
            Stmt::AsyncFunctionDef(f) => (f.name.as_str(), &f.decorator_list),
            Stmt::ClassDef(c) => (c.name.as_str(), &c.decorator_list),
            _ => (MODULE_CODE, &Vec::new()),
        };
        let start = decorators
            .iter()
            .map(Ranged::start)
            .chain([stmt.start()])
            .min()
            .unwrap_or_else(|| stmt.start());
        let first = index.line_start(index.line(start));
        let last = usize::from(stmt.end());
        let body = out.entry(name.to_owned()).or_default();
        for line in text.get(first..last).unwrap_or_default().lines() {
            let line = line.trim_end();
            if !line.is_empty() {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out.retain(|_, body| !body.is_empty());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_by_name_with_decorators_and_the_rest_as_module_code() {
        let text = "\"\"\"doc\"\"\"\nimport torch\n\n@dataclass(frozen=True)\nclass A:\n    x = 1   \n\n    def f(self):\n        return 1\n\n\
                    # a comment between blocks\nasync def g():\n    pass\nY = 2\n";
        let blocks = top_level_blocks(text).unwrap();
        assert_eq!(
            blocks.keys().map(String::as_str).collect::<Vec<_>>(),
            [MODULE_CODE, "A", "g"]
        );
        assert_eq!(
            blocks["A"],
            "@dataclass(frozen=True)\nclass A:\n    x = 1\n    def f(self):\n        return 1\n"
        );
        assert_eq!(
            blocks[MODULE_CODE],
            "\"\"\"doc\"\"\"\nimport torch\nY = 2\n"
        );
        assert!(
            top_level_blocks("def f(:\n")
                .unwrap_err()
                .starts_with("line 1: ")
        );
    }
}
