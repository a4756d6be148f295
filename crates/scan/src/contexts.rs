//! The contexts of the hooks that do not walk Python: config files and the whole project.

use crate::facts::Site;
use crate::finding::{Finding, SourceFile, locate};
use crate::project::Project;
use crate::source::{TextRange, TextSize};

/// The context of a rule's [`crate::rules::Rule::config`] hook: one YAML/JSON/TOML file.
pub struct ConfigChecker<'a> {
    file: SourceFile<'a>,
    current: &'static str,
    findings: Vec<Finding>,
}

impl<'a> ConfigChecker<'a> {
    pub(crate) fn new(file: SourceFile<'a>) -> ConfigChecker<'a> {
        ConfigChecker {
            file,
            current: "",
            findings: Vec::new(),
        }
    }

    /// Findings reported from now on are the rule `id`'s.
    pub(crate) fn set_rule(&mut self, id: &'static str) {
        self.current = id;
    }

    pub(crate) fn finish(self) -> Vec<Finding> {
        self.findings
    }

    /// Relative `/` path of the file.
    pub fn path(&self) -> &str {
        self.file.path
    }

    /// The extension, lower case: `yaml`, `yml`, `json` or `toml`.
    pub fn extension(&self) -> String {
        self.file
            .path
            .rsplit_once('.')
            .map_or(String::new(), |(_, e)| e.to_ascii_lowercase())
    }

    /// The whole text.
    pub fn text(&self) -> &'a str {
        self.file.text
    }

    /// The file's lines, 1-based, without line endings.
    pub fn lines(&self) -> impl Iterator<Item = (u32, &'a str)> + '_ {
        let text = self.file.text;
        (1..=u32::try_from(self.file.index.line_count()).unwrap_or(u32::MAX))
            .map(move |l| (l, self.file.index.line_text(text, l)))
    }

    /// Report a finding of the running rule at a byte range of the text.
    pub fn report(&mut self, range: TextRange, message: impl Into<String>) -> &mut Finding {
        let (line, column, end_line, end_column) = locate(&self.file, range);
        self.findings.push(Finding {
            rule: self.current,
            file: self.file.path.to_owned(),
            line,
            column,
            end_line,
            end_column,
            symbol: None,
            snippet: self.file.snippet(line, end_line),
            message: message.into(),
            related: Vec::new(),
            fix: None,
            blocking: None,
        });
        let last = self.findings.len() - 1;
        &mut self.findings[last]
    }

    /// Report a finding on 1-based `line`, from 0-based byte `start` to `end` within it.
    pub fn report_in_line(
        &mut self,
        line: u32,
        start: usize,
        end: usize,
        message: impl Into<String>,
    ) -> &mut Finding {
        let range = self.line_range(line, start, end);
        self.report(range, message)
    }

    /// The range of 0-based bytes `start..end` within 1-based `line`, clamped to the line.
    pub fn line_range(&self, line: u32, start: usize, end: usize) -> TextRange {
        let base = self.file.index.line_start(line);
        let len = self.file.index.line_text(self.file.text, line).len();
        let to = |n: usize| TextSize::try_from(base + n.min(len)).unwrap_or_default();
        TextRange::new(to(start), to(end.max(start)))
    }
}

/// The context of a rule's [`crate::rules::Rule::project`] hook: facts of every file.
pub struct ProjectChecker<'a> {
    project: &'a Project,
    current: &'static str,
    findings: Vec<Finding>,
}

impl<'a> ProjectChecker<'a> {
    pub(crate) fn new(project: &'a Project) -> ProjectChecker<'a> {
        ProjectChecker {
            project,
            current: "",
            findings: Vec::new(),
        }
    }

    /// Findings reported from now on are the rule `id`'s.
    pub(crate) fn set_rule(&mut self, id: &'static str) {
        self.current = id;
    }

    pub(crate) fn finish(self) -> Vec<Finding> {
        self.findings
    }

    /// Facts of every file.
    pub fn project(&self) -> &'a Project {
        self.project
    }

    /// Sites noted under `key` in `file` by [`Checker::note`].
    pub fn notes(&self, file: &str, key: &str) -> &'a [Site] {
        self.project.notes(file, key)
    }

    /// Report a finding of the running rule at a noted site (or entry point) of `file`.
    pub fn report(&mut self, file: &str, site: &Site, message: impl Into<String>) -> &mut Finding {
        self.findings.push(Finding {
            rule: self.current,
            file: file.to_owned(),
            line: site.line,
            column: site.column,
            end_line: site.end_line,
            end_column: site.end_column,
            symbol: site.symbol.clone(),
            snippet: site.snippet.clone(),
            message: message.into(),
            related: Vec::new(),
            fix: None,
            blocking: None,
        });
        let last = self.findings.len() - 1;
        &mut self.findings[last]
    }

    /// A site for an entry point (its line, column and snippet).
    pub fn entry_site(entry: &crate::project::EntryPoint) -> Site {
        Site {
            line: entry.line,
            column: entry.column,
            end_line: entry.line,
            end_column: entry.column,
            snippet: entry.snippet.clone(),
            symbol: entry.symbol.clone(),
            note: String::new(),
        }
    }

    /// Report at line 1 of a file that is not Python (a `.cu` source).
    pub fn report_file(&mut self, file: &str, message: impl Into<String>) -> &mut Finding {
        let site = Site {
            line: 1,
            column: 1,
            end_line: 1,
            end_column: 1,
            snippet: String::new(),
            symbol: None,
            note: String::new(),
        };
        self.report(file, &site, message)
    }
}
