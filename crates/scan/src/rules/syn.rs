//! `P_SYN`: a Python file that could not be parsed.
//!
//! The engine reports it (parse errors and undecodable bytes are found before any rule
//! runs); this module only holds the registry row and the documentation.

use super::{Rule, RuleInfo};
use issue_model::{Category, Severity};

pub struct SyntaxError;

impl Rule for SyntaxError {}

pub const RULE: RuleInfo = RuleInfo {
    id: "P_SYN",
    name: "unparsable-file",
    category: Category::Structure,
    severity: Severity::Warning,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_SYN.md",
    summary: "A Python file that could not be parsed, so no other rule checked it.",
    doc: include_str!("syn.md"),
    check: &SyntaxError,
};
