//! Choosing issues: the `--next` order, the `--status`/`--pattern` filters, and finding an
//! issue by the id the user typed (with the closest ids when it does not exist).

use crate::cli::StatusArg;
use crate::error::{Error, Result};
use issue_model::{Issue, IssuesFile, Severity, Status};
use std::collections::BTreeSet;
use std::path::Path;

/// The pattern of the entry-point rule: its file is set up for the NPU first.
pub const ENTRY_PATTERN: &str = "P_ENT";

/// The work order: blocking issues ([`Issue::blocking`]: they stop the run on the NPU) first;
/// then errors before warnings before infos; within a severity, entry-point files first, then
/// by file; in a file the entry-point issue first, then by position.
pub struct WorkOrder<'a> {
    entry_files: BTreeSet<&'a str>,
}

type Key<'a> = (bool, Severity, bool, &'a str, bool, u32, u32, &'a str);

impl<'a> WorkOrder<'a> {
    pub fn new(issues: &'a [Issue]) -> WorkOrder<'a> {
        WorkOrder {
            entry_files: issues
                .iter()
                .filter(|i| i.pattern == ENTRY_PATTERN)
                .map(|i| i.file.as_str())
                .collect(),
        }
    }

    fn key(&self, i: &'a Issue) -> Key<'a> {
        (
            i.blocking.is_none(),
            i.severity,
            !self.entry_files.contains(i.file.as_str()),
            i.file.as_str(),
            i.pattern != ENTRY_PATTERN,
            i.line,
            i.column,
            i.id.as_str(),
        )
    }

    /// Indexes of the issues `filter` accepts, in work order.
    pub fn sorted(&self, issues: &'a [Issue], filter: &Filter) -> Vec<usize> {
        let mut order: Vec<usize> = (0..issues.len())
            .filter(|&n| filter.accepts(&issues[n]))
            .collect();
        order.sort_by_cached_key(|&n| self.key(&issues[n]));
        order
    }

    /// The index of the first issue `filter` accepts, in work order.
    pub fn first(&self, issues: &'a [Issue], filter: &Filter) -> Option<usize> {
        (0..issues.len())
            .filter(|&n| filter.accepts(&issues[n]))
            .min_by_key(|&n| self.key(&issues[n]))
    }
}

/// The `--status` and `--pattern` filters; empty lists let everything through.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    statuses: Vec<Status>,
    patterns: Vec<String>,
}

impl Filter {
    pub fn new(statuses: &[StatusArg], patterns: &[String]) -> Filter {
        Filter {
            statuses: statuses.iter().map(|s| s.status()).collect(),
            patterns: patterns.iter().map(|p| normalize_pattern(p)).collect(),
        }
    }

    /// Only pending issues (for `--next`), narrowed by the pattern filter.
    pub fn pending_only(&self) -> Filter {
        Filter {
            statuses: vec![Status::Pending],
            patterns: self.patterns.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty() && self.patterns.is_empty()
    }

    pub fn accepts(&self, issue: &Issue) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&issue.status))
            && (self.patterns.is_empty() || self.patterns.contains(&issue.pattern))
    }
}

/// `rnd`, `RND` and `P_RND` all mean `P_RND`.
fn normalize_pattern(pattern: &str) -> String {
    let upper = pattern.trim().to_ascii_uppercase();
    if upper.starts_with("P_") {
        upper
    } else {
        format!("P_{upper}")
    }
}

/// The index of the issue with id `typed` (exact, else ignoring case), or an error that
/// suggests the closest ids.
pub fn find(file: &IssuesFile, path: &Path, typed: &str) -> Result<usize> {
    let typed = typed.trim();
    if let Some(index) = file.issues.iter().position(|i| i.id == typed) {
        return Ok(index);
    }
    let matches: Vec<usize> = file
        .issues
        .iter()
        .enumerate()
        .filter(|(_, i)| i.id.eq_ignore_ascii_case(typed))
        .map(|(n, _)| n)
        .collect();
    if let [index] = matches.as_slice() {
        return Ok(*index);
    }
    Err(Error::UnknownId {
        id: typed.to_owned(),
        path: path.to_owned(),
        suggestions: closest_ids(file, typed),
    })
}

/// Up to three ids that look like `typed`: ids containing it (or whose fingerprint starts with
/// it) first, then the most similar by edit distance.
fn closest_ids(file: &IssuesFile, typed: &str) -> Vec<String> {
    const MAX: usize = 3;
    let lower = typed.to_ascii_lowercase();
    if lower.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(f64, &str)> = file
        .issues
        .iter()
        .filter_map(|issue| {
            let id = issue.id.to_ascii_lowercase();
            let score = if id.contains(&lower)
                || (lower.len() >= 4 && issue.fingerprint.starts_with(&lower))
            {
                2.0
            } else {
                strsim::normalized_damerau_levenshtein(&id, &lower)
            };
            (score >= 0.6).then_some((score, issue.id.as_str()))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(MAX)
        .map(|(_, id)| id.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use issue_model::{Category, Summary, Tool};

    fn issue(id: &str, pattern: &str, severity: Severity, file: &str, line: u32) -> Issue {
        Issue {
            id: id.to_owned(),
            pattern: pattern.to_owned(),
            category: Category::Device,
            severity,
            performance: false,
            file: file.to_owned(),
            line,
            column: 1,
            end_line: line,
            end_column: 2,
            symbol: None,
            message: String::new(),
            snippet: String::new(),
            related: vec![],
            fix_template: String::new(),
            fix: None,
            fingerprint: format!("{id}-fingerprint"),
            status: Status::Pending,
            reason: None,
            history: vec![],
            blocking: None,
            measured: None,
            measurement: None,
        }
    }

    fn file(issues: Vec<Issue>) -> IssuesFile {
        IssuesFile {
            schema_version: 1,
            tool: Tool {
                name: "npu-scan".to_owned(),
                version: "0".to_owned(),
            },
            root: ".".to_owned(),
            scanned_at: "2025-01-01T00:00:00Z".to_owned(),
            summary: Summary::default(),
            issues,
            unparsed: vec![],
            scope: None,
        }
    }

    #[test]
    fn blocking_issues_come_first() {
        let mut issues = vec![
            issue("T0", "P_ENT", Severity::Error, "train.py", 80),
            issue("A", "P_RND", Severity::Error, "a.py", 5),
            issue("W", "P_DEV", Severity::Warning, "z.py", 1),
            issue("D", "P_DEV", Severity::Error, "utils/device.py", 7),
        ];
        issues[2].blocking = Some("an allow-list".to_owned());
        issues[3].blocking = Some("an allow-list".to_owned());
        let order = WorkOrder::new(&issues);
        let all = Filter::default();
        let ids: Vec<&str> = order
            .sorted(&issues, &all)
            .into_iter()
            .map(|n| issues[n].id.as_str())
            .collect();
        assert_eq!(ids, ["D", "W", "T0", "A"]);
        assert_eq!(order.first(&issues, &all), Some(3));
    }

    #[test]
    fn errors_then_entry_points_then_files_then_entry_points_then_files() {
        let issues = vec![
            issue("W", "P_RND", Severity::Warning, "a.py", 1),
            issue("B2", "P_RND", Severity::Error, "b.py", 9),
            issue("T1", "P_RND", Severity::Error, "train.py", 3),
            issue("B1", "P_FLA", Severity::Error, "b.py", 2),
            issue("T0", "P_ENT", Severity::Error, "train.py", 80),
            issue("I", "P_TGT", Severity::Info, "a.py", 1),
            issue("A", "P_RND", Severity::Error, "a.py", 5),
        ];
        let order = WorkOrder::new(&issues);
        let all = Filter::default();
        let ids: Vec<&str> = order
            .sorted(&issues, &all)
            .into_iter()
            .map(|n| issues[n].id.as_str())
            .collect();
        assert_eq!(ids, ["T0", "T1", "A", "B1", "B2", "W", "I"]);
        assert_eq!(order.first(&issues, &all), Some(4));
        let warnings = Filter::new(&[], &["P_RND".to_owned()]);
        assert_eq!(order.first(&issues, &warnings), Some(2));
    }

    #[test]
    fn filters_accept_short_and_long_pattern_names() {
        let filter = Filter::new(&[StatusArg::Pending], &["rnd".to_owned()]);
        let mut fixed = issue("X", "P_RND", Severity::Error, "a.py", 1);
        assert!(filter.accepts(&fixed));
        fixed.status = Status::Fixed;
        assert!(!filter.accepts(&fixed));
        assert!(!filter.accepts(&issue("Y", "P_FLA", Severity::Error, "a.py", 1)));
        assert!(Filter::new(&[], &[]).accepts(&fixed));
    }

    #[test]
    fn find_is_exact_then_case_insensitive_then_suggests() {
        let f = file(vec![
            issue("RND-4f1a9c", "P_RND", Severity::Error, "a.py", 1),
            issue("RND-4f1b00", "P_RND", Severity::Error, "a.py", 2),
            issue("FLA-000001", "P_FLA", Severity::Error, "a.py", 3),
        ]);
        let path = Path::new("issues.json");
        assert_eq!(find(&f, path, "RND-4f1b00").ok(), Some(1));
        assert_eq!(find(&f, path, "rnd-4F1A9C").ok(), Some(0));
        let Err(Error::UnknownId { suggestions, .. }) = find(&f, path, "RND-4f1a9d") else {
            panic!("an unknown id must fail")
        };
        assert_eq!(suggestions.first().map(String::as_str), Some("RND-4f1a9c"));
        assert!(!suggestions.contains(&"FLA-000001".to_owned()));
        let Err(Error::UnknownId { suggestions, .. }) = find(&f, path, "4f1b") else {
            panic!("a part of an id is not an id")
        };
        assert_eq!(suggestions, ["RND-4f1b00"]);
        let Err(error) = find(&f, path, "zzzzzzzzzzzzzz") else {
            panic!("must fail")
        };
        assert!(
            error.to_string().ends_with("list the ids with --list"),
            "{error}"
        );
    }
}
