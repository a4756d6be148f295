//! The rules: the registry of every rule and the trait each one implements.
//!
//! A rule is a unit struct implementing [`Rule`] plus a registry row ([`RuleInfo`]) in its own
//! module `rules/<name>.rs`, with its documentation in `rules/<name>.md`. The checker walks
//! each file once and calls the hooks of every enabled rule; a rule never walks the tree
//! itself.
//!
//! # Adding a rule
//!
//! 1. `rules/<name>.rs`: a unit struct implementing [`Rule`] (override only the hooks you
//!    need: [`Rule::stmt`], [`Rule::expr`], [`Rule::file_end`], [`Rule::config`],
//!    [`Rule::project`]) and `pub const RULE: RuleInfo` with the id, name, category,
//!    severity, performance flag, fix template path
//!    (`references/fix-templates/<ID>.md`), a one-line summary and
//!    `doc: include_str!("<name>.md")`. Keep the checks pure and use early returns.
//! 2. `rules/<name>.md` with the sections `## What it does`, `## Why is this bad on NPU?`,
//!    `## Example`, `## Use instead`, `## Fix`, `## Fix safety`, `## Known limitations`,
//!    `## References`. A rule that attaches fixes ([`crate::fix`]) says there which are safe.
//! 3. One line `mod <name>;` below and one line `&<name>::RULE,` in [`REGISTRY`] (ids sorted).
//! 4. A fixture directory `tests/fixtures/<ID>/` scanned as one project with only that rule
//!    selected: every line that carries a `# error` comment must be reported, and every line
//!    with a `# ok` comment must not be. Unmarked lines must not be reported either.
//! 5. Run `cargo test -p scan --test fixtures` with `INSTA_UPDATE=always` once to write
//!    the snapshot `tests/snapshots/fixtures__<ID>.snap`, review it, and commit it.
//! 6. The fix template `assets/fix-templates/<ID>.md`.
//!
//! In a hook, [`Checker::semantic`] gives the semantic model (qualified names through
//! imports via [`Semantic::resolve`], enclosing scopes, `forward` / training-step / loss
//! functions, the main guard, `try/except ImportError`, local facts of the function) and
//! [`Checker::report`] records a finding at a range. Project-level rules record facts per
//! file with [`Checker::note`] and read them back in [`Rule::project`] through
//! [`ProjectChecker`] (entry points, the files each one reaches through imports).
//!
//! [`Semantic::resolve`]: crate::semantic::Semantic::resolve

use crate::source::ast::{Expr, Stmt};
use issue_model::{Category, Severity};

pub use crate::checker::Checker;
pub use crate::contexts::{ConfigChecker, ProjectChecker};

mod cfg;
pub mod cpu;
mod dev;
mod ent;
mod f64;
mod fla;
mod ltm;
mod net;
mod rnd;
mod syn;
mod tgt;
mod vec;

/// Every rule, sorted by id. One line per rule.
pub static REGISTRY: &[&RuleInfo] = &[
    &cfg::RULE,
    &cpu::RULE,
    &dev::RULE,
    &ent::RULE,
    &f64::RULE,
    &fla::RULE,
    &ltm::RULE,
    &net::RULE,
    &rnd::RULE,
    &syn::RULE,
    &tgt::RULE,
    &vec::RULE,
];

/// A rule's registry row: everything the engine, `--explain`, SARIF and the docs need.
pub struct RuleInfo {
    /// Stable id, e.g. `P_LTM`. Never reused or renamed.
    pub id: &'static str,
    /// Kebab-case name, e.g. `lightning-gpu-assumptions`.
    pub name: &'static str,
    pub category: Category,
    pub severity: Severity,
    /// A performance issue cannot be skipped in the fix workflow.
    pub performance: bool,
    /// The rule judges a file by facts of the whole project (entry points, imports across
    /// files), so re-checking one of its findings needs the whole tree; every other rule sees
    /// one file at a time.
    pub project_level: bool,
    /// The fix template in the release bundle: `references/fix-templates/<ID>.md`.
    pub fix_template: &'static str,
    /// One sentence: what the rule finds.
    pub summary: &'static str,
    /// The rule's documentation (Markdown), from `rules/<name>.md`.
    pub doc: &'static str,
    /// The checks.
    pub check: &'static dyn Rule,
}

impl std::fmt::Debug for RuleInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleInfo")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The checks of one rule. Every hook defaults to doing nothing.
///
/// Hooks run in source order while the checker walks the file once: [`Rule::stmt`] before a
/// statement's children, [`Rule::expr`] before an expression's children (so
/// [`Semantic::exprs`](crate::semantic::Semantic::exprs) holds the ancestors), then
/// [`Rule::file_end`]. [`Rule::config`] runs on each YAML/JSON/TOML file and
/// [`Rule::project`] once after every file was checked.
pub trait Rule: Sync {
    fn stmt<'a>(&self, _cx: &mut Checker<'a>, _stmt: &'a Stmt) {}
    fn expr<'a>(&self, _cx: &mut Checker<'a>, _expr: &'a Expr) {}
    fn file_end<'a>(&self, _cx: &mut Checker<'a>, _body: &'a [Stmt]) {}
    fn config(&self, _cx: &mut ConfigChecker<'_>) {}
    fn project(&self, _cx: &mut ProjectChecker<'_>) {}
}

/// Every rule, sorted by id.
pub fn registry() -> &'static [&'static RuleInfo] {
    REGISTRY
}

/// The rule with this id (`P_LTM`), if any.
pub fn get(id: &str) -> Option<&'static RuleInfo> {
    REGISTRY.iter().copied().find(|r| r.id == id)
}

/// The id used for files that cannot be parsed.
pub const SYNTAX_ERROR: &str = "P_SYN";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_sorted_unique_and_complete() {
        let ids: Vec<&str> = REGISTRY.iter().map(|r| r.id).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(ids, sorted, "registry ids must be sorted and unique");
        for rule in REGISTRY {
            assert!(rule.id.starts_with("P_"), "{}", rule.id);
            assert_eq!(
                rule.fix_template,
                format!("references/fix-templates/{}.md", rule.id)
            );
            for section in [
                "## What it does",
                "## Why is this bad on NPU?",
                "## Example",
                "## Use instead",
                "## Fix",
                "## Fix safety",
                "## Known limitations",
                "## References",
            ] {
                assert!(
                    rule.doc.contains(section),
                    "{} doc lacks `{section}`",
                    rule.id
                );
            }
        }
    }
}
