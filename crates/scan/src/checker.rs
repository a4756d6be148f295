//! The context a rule's Python hooks get ([`Checker`]): the file, the semantic model kept
//! current by the walk ([`crate::visit`]), the file's facts, and where findings go.

use crate::facts::{At, FactRecorder, FileFacts};
use crate::finding::locate;
pub use crate::finding::{Finding, SourceFile};
use crate::semantic::Semantic;
use crate::source::TextRange;
use issue_model::Related;

/// The context a rule's Python hooks get: the file, the semantic model, and where to report.
pub struct Checker<'a> {
    pub(crate) file: SourceFile<'a>,
    pub(crate) semantic: Semantic<'a>,
    current: &'static str,
    findings: Vec<Finding>,
    pub(crate) facts: FactRecorder,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(file: SourceFile<'a>) -> Checker<'a> {
        let facts = FactRecorder::new(file.path);
        Checker {
            semantic: Semantic::new(file.path),
            file,
            current: "",
            findings: Vec::new(),
            facts,
        }
    }

    /// Findings reported from now on are the rule `id`'s.
    pub(crate) fn set_rule(&mut self, id: &'static str) {
        self.current = id;
    }

    /// The findings and the file's facts (`too_deep`: the walk stopped at a nesting limit).
    pub(crate) fn finish(self, too_deep: bool) -> (Vec<Finding>, FileFacts) {
        (self.findings, self.facts.finish(too_deep))
    }

    /// The semantic model at the current point of the walk.
    pub fn semantic(&self) -> &Semantic<'a> {
        &self.semantic
    }

    /// The file being checked.
    pub fn file(&self) -> &SourceFile<'a> {
        &self.file
    }

    /// Relative `/` path of the file.
    pub fn path(&self) -> &str {
        self.file.path
    }

    /// The source text of a node.
    pub fn slice(&self, range: TextRange) -> &str {
        self.file.slice(range)
    }

    /// How many findings the file has so far: a mark for [`Checker::retain_since`].
    pub fn mark(&self) -> usize {
        self.findings.len()
    }

    /// Keep, of the findings reported since `mark`, those that `keep` accepts.
    pub fn retain_since(&mut self, mark: usize, keep: impl Fn(&Finding) -> bool) {
        let mut i = 0;
        self.findings.retain(|f| {
            i += 1;
            i <= mark || keep(f)
        });
    }

    /// Report a finding of the running rule at `range`, in the current symbol. Returns it so
    /// that the caller can add `related` places.
    pub fn report(&mut self, range: TextRange, message: impl Into<String>) -> &mut Finding {
        let (line, column, end_line, end_column) = locate(&self.file, range);
        let finding = Finding {
            rule: self.current,
            file: self.file.path.to_owned(),
            line,
            column,
            end_line,
            end_column,
            symbol: self.semantic.symbol(),
            snippet: self.file.snippet(line, end_line),
            message: message.into(),
            related: Vec::new(),
            fix: None,
            blocking: None,
        };
        self.findings.push(finding);
        let last = self.findings.len() - 1;
        &mut self.findings[last]
    }

    /// A related place in this file, for [`Finding::related`].
    pub fn related(&self, range: TextRange, note: impl Into<String>) -> Related {
        let (line, column) = self.file.position(range.start());
        Related {
            file: self.file.path.to_owned(),
            line,
            column,
            note: note.into(),
        }
    }

    /// Record a fact about a place under `key`, for the running rule's [`crate::rules::Rule::project`]
    /// hook (which reads it back with [`ProjectChecker::notes`]).
    pub fn note(&mut self, key: &'static str, range: TextRange, note: impl Into<String>) {
        let site = At::new(&self.file, &self.semantic).site(range, note.into());
        self.facts.note(key, site);
    }
}
