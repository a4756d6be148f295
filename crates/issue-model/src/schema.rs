//! The serde types of `issues.json`, schema version 1.
//!
//! Field names and enum spellings are part of the file format: never rename one in place.
//! `docs/issues-json.md` documents every field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The only schema version this crate reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// The whole `issues.json` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuesFile {
    pub schema_version: u32,
    pub tool: Tool,
    /// The scanned root exactly as the user gave it; never resolved to an absolute path.
    pub root: String,
    /// RFC 3339 time of the scan that last wrote this file.
    pub scanned_at: String,
    pub summary: Summary,
    pub issues: Vec<Issue>,
    #[serde(default)]
    pub unparsed: Vec<Unparsed>,
    /// The port's scope: the launch command whose training path the port covers (`npu-scan
    /// --scope`, `npu-progress --scope`). Absent: the whole project. Rescans keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// The training path of one launch command: the files a port covers. Findings in the other
/// Python files are `out_of_scope` with the reason [`Scope::reason`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// The launch command, as given (`python train.py --policy act`).
    pub launch: String,
    /// Its entry file, relative to `root`.
    pub entry: String,
    /// The Python files in scope (relative, sorted): those the entry reaches statically
    /// (imports, calls, config-driven factories) and those a verify run executed.
    pub files: Vec<String>,
    /// The project files an `npu-verify` run of the same entry executed (sorted), when one was
    /// recorded; they are in `files` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executed: Vec<String>,
    /// Choices the static reach could not resolve (every candidate was kept), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The start of the reason of an issue outside the scope; see [`Scope::reason`].
pub const OUT_OF_SCOPE: &str = "out of scope: not reached by";

impl Scope {
    /// The reason recorded on an issue outside this scope.
    pub fn reason(&self) -> String {
        format!("{OUT_OF_SCOPE} `{}` (entry {})", self.launch, self.entry)
    }

    /// Whether a finding in `file` is in scope. Only Python files are judged: a config file
    /// (YAML, TOML, JSON) or a CUDA source is kept, as the reach cannot tell which ones a run reads.
    pub fn contains(&self, file: &str) -> bool {
        let python = std::path::Path::new(file)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("py"));
        !python
            || self
                .files
                .binary_search_by(|f| f.as_str().cmp(file))
                .is_ok()
    }
}

/// Whether `reason` is the reason of an issue left out by a scope (not by `--exclude`).
pub fn is_scope_reason(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.starts_with(OUT_OF_SCOPE))
}

/// The program that wrote the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

/// Counts derived from `issues`; recomputed on every save.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub total: usize,
    /// Count per status name (`pending`, `fixed`, `skipped`, `out_of_scope`).
    pub by_status: BTreeMap<String, usize>,
    /// Count per pattern id, then per status name.
    pub by_pattern: BTreeMap<String, BTreeMap<String, usize>>,
}

/// The broad kind of problem; spelled in upper case in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Category {
    Device,
    Operator,
    Structure,
    Framework,
    Semantic,
}

/// How bad a finding is. Ordered so that `Error < Warning < Info` sorts errors first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

/// Where an issue stands in the fix workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Fixed,
    /// Not to be fixed, with a reason: `npu-progress --skip`, `--fixed --force`, or an inline
    /// `# npu: ignore[RULE] <why>` comment (reason prefixed [`INLINE_IGNORE`]).
    Skipped,
    /// Its file was not scanned by the last scan (`--exclude`): neither pending nor fixed. A scan
    /// that reads the file again makes it pending again (or fixed, when it is gone).
    #[serde(rename = "out_of_scope")]
    OutOfScope,
}

/// The start of the reason of an issue skipped by an inline `# npu: ignore` comment; a rescan
/// that no longer sees the comment makes such an issue pending again.
pub const INLINE_IGNORE: &str = "ignored inline:";

/// What a history entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryStatus {
    /// First reported by a scan.
    Found,
    /// First shown by `npu-progress --next`; the start of the work on it.
    Shown,
    Fixed,
    Skipped,
    /// Put back to pending by hand (`--reopen`).
    Reopened,
    /// A `fixed` issue was found again by a rescan and is pending again.
    Regressed,
    /// A pending issue that a rescan no longer finds: the code was changed.
    Resolved,
    /// A scan did not read its file (`--exclude`): out of scope, neither pending nor fixed.
    #[serde(rename = "out_of_scope")]
    OutOfScope,
}

/// One finding, and its progress through the fix workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issue {
    /// Short, stable, human-typable id, e.g. `RND-4f1a9c`.
    pub id: String,
    /// Rule id, e.g. `P_RND`.
    pub pattern: String,
    pub category: Category,
    pub severity: Severity,
    /// A performance issue cannot be skipped.
    pub performance: bool,
    /// Relative to `root`, `/`-separated.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    pub end_line: u32,
    pub end_column: u32,
    /// Enclosing `Class.method`, or `None` at module level.
    pub symbol: Option<String>,
    pub message: String,
    /// The source line(s) of the finding, as scanned.
    pub snippet: String,
    #[serde(default)]
    pub related: Vec<Related>,
    /// e.g. `references/fix-templates/P_RND.md`.
    pub fix_template: String,
    /// The automatic fix (`npu-scan --fix`), when the rule has one for this finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
    /// Set when the finding stops the training run on the NPU before anything else does (a
    /// device allow-list that rejects `npu`): why. Such issues come first in every listing and
    /// in `npu-progress --next`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<String>,
    /// Line-independent fingerprint; see [`crate::fingerprint`].
    pub fingerprint: String,
    pub status: Status,
    /// Why it was skipped (required for `skipped`), or a note on the fix.
    pub reason: Option<String>,
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Set when the finding was measured by `npu-verify --pipeline --record-issues` (its step
    /// profile) rather than found by a scan: a rescan leaves it alone, and `npu-progress --fixed`
    /// measures again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// Set on a scanned issue that `npu-verify --pipeline --record-issues` measured as well: the
    /// step profile saw the problem at a line of the code this issue reports (see
    /// [`crate::fold`]). One problem stays one issue, found by the scan and confirmed by the
    /// measurement; a rescan keeps it, the next measurement of its check renews or removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement: Option<Measured>,
}

/// The pattern of an op that runs on the CPU through `torch_npu`'s fallback: measured by
/// `npu-verify`'s step profile (`pipeline.cpu_fallback`), not a scanner rule.
pub const CPU_FALLBACK_PATTERN: &str = "P_CPU";

/// Patterns only `npu-verify --record-issues` reports, with their fix templates.
pub const MEASURED_PATTERNS: &[(&str, &str)] =
    &[(CPU_FALLBACK_PATTERN, "references/fix-templates/P_CPU.md")];

/// How a measured finding was measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// The `npu-verify` check that measured it: `pipeline.syncs`, `pipeline.per_sample` or
    /// `pipeline.cpu_fallback`.
    pub check: String,
    /// What was measured, e.g. `16 host syncs per step at train.py:26 (_local_scalar_dense)`.
    pub evidence: String,
    /// The `npu-verify` arguments after the project's path that measure it again.
    pub verify_args: Vec<String>,
}

/// An automatic fix: edits of the issue's file, as it was when it was scanned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fix {
    pub applicability: Applicability,
    /// What the fix does, e.g. "replace `cuda` with `npu`".
    pub message: String,
    /// The first 16 hex digits of the SHA-256 of the file's text the edits were made for; a file
    /// whose text no longer has it is not edited.
    pub source_hash: String,
    /// Non-overlapping, in order.
    pub edits: Vec<Edit>,
}

/// Whether `npu-scan --fix` applies a fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Applicability {
    /// The code keeps working where it worked (CUDA) and works on the NPU: applied by `--fix`.
    Safe,
    /// It changes what the code does (precision, speed, which kernel runs): applied only with
    /// `--unsafe-fixes`.
    Unsafe,
}

impl Applicability {
    pub fn as_str(self) -> &'static str {
        match self {
            Applicability::Safe => "safe",
            Applicability::Unsafe => "unsafe",
        }
    }
}

/// Replace the bytes `start..end` of the file's text (UTF-8, without a byte order mark) with
/// `content`; `start == end` inserts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    pub start: u32,
    pub end: u32,
    pub content: String,
}

/// Another place the same fix covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Related {
    pub file: String,
    pub line: u32,
    pub column: u32,
    pub note: String,
}

/// One step in an issue's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    /// RFC 3339 time.
    pub at: String,
    pub status: HistoryStatus,
    pub note: Option<String>,
}

/// A file the scanner could not parse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unparsed {
    pub file: String,
    /// The parser's (or reader's) message.
    pub reason: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 4] = [
        Status::Pending,
        Status::Fixed,
        Status::Skipped,
        Status::OutOfScope,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Fixed => "fixed",
            Status::Skipped => "skipped",
            Status::OutOfScope => "out_of_scope",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Severity {
    /// Every severity, errors first.
    pub const ALL: [Severity; 3] = [Severity::Error, Severity::Warning, Severity::Info];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Category {
    /// Every category.
    pub const ALL: [Category; 5] = [
        Category::Device,
        Category::Operator,
        Category::Structure,
        Category::Framework,
        Category::Semantic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Device => "DEVICE",
            Category::Operator => "OPERATOR",
            Category::Structure => "STRUCTURE",
            Category::Framework => "FRAMEWORK",
            Category::Semantic => "SEMANTIC",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl HistoryStatus {
    /// Every kind of history entry.
    pub const ALL: [HistoryStatus; 8] = [
        HistoryStatus::Found,
        HistoryStatus::Shown,
        HistoryStatus::Fixed,
        HistoryStatus::Skipped,
        HistoryStatus::Reopened,
        HistoryStatus::Regressed,
        HistoryStatus::Resolved,
        HistoryStatus::OutOfScope,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HistoryStatus::Found => "found",
            HistoryStatus::Shown => "shown",
            HistoryStatus::Fixed => "fixed",
            HistoryStatus::Skipped => "skipped",
            HistoryStatus::Reopened => "reopened",
            HistoryStatus::Regressed => "regressed",
            HistoryStatus::Resolved => "resolved",
            HistoryStatus::OutOfScope => "out_of_scope",
        }
    }
}

impl fmt::Display for HistoryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Summary {
    /// Counts of `issues` by status and by pattern.
    pub fn of(issues: &[Issue]) -> Summary {
        // Count with borrowed keys, then own them once per distinct key.
        let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_pattern: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
        for issue in issues {
            let status = issue.status.as_str();
            *by_status.entry(status).or_default() += 1;
            *by_pattern
                .entry(issue.pattern.as_str())
                .or_default()
                .entry(status)
                .or_default() += 1;
        }
        let own = |m: BTreeMap<&str, usize>| -> BTreeMap<String, usize> {
            m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
        };
        Summary {
            total: issues.len(),
            by_status: own(by_status),
            by_pattern: by_pattern
                .into_iter()
                .map(|(k, v)| (k.to_owned(), own(v)))
                .collect(),
        }
    }
}
