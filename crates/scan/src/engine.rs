//! The scan pipeline: walk, check every file on worker threads with large stacks, run the
//! project-level hooks, apply suppressions and turn findings into issues.

use crate::classes::ModuleClasses;
use crate::contexts::ConfigChecker;
use crate::facts::FileFacts;
use crate::files::{self, FileEntry, FileKind};
use crate::finding::{Finding, SourceFile};
use crate::project::Project;
use crate::rules::{self, RuleInfo};
use crate::source::{self, LineIndex, TextSize};
use crate::suppress::Suppressions;
use crate::visit;
use crate::{Error, Result, ScanResult, Settings, Stats, WALK_STACK_SIZE};
use issue_model::{Issue, Status, Unparsed};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Config files larger than this are data, not configuration: skipped.
const MAX_CONFIG_SIZE: u64 = 2 * 1024 * 1024;

/// What checking one file produced.
#[derive(Debug, Default)]
struct Outcome {
    findings: Vec<Finding>,
    unparsed: Option<Unparsed>,
    facts: Option<FileFacts>,
    suppressions: Suppressions,
    lines: usize,
    python: bool,
    warnings: Vec<String>,
}

/// The rules a settings object enables, in registry order.
pub(crate) fn enabled_rules(settings: &Settings) -> Result<Vec<&'static RuleInfo>> {
    for id in settings.select.iter().chain(&settings.ignore) {
        if id != "ALL" && rules::get(id).is_none() {
            return Err(Error::UnknownRule {
                id: id.clone(),
                suggestion: suggest(id),
            });
        }
    }
    let selected = |id: &str| {
        settings.select.is_empty() || settings.select.iter().any(|s| s == id || s == "ALL")
    };
    let ignored = |id: &str| settings.ignore.iter().any(|s| s == id || s == "ALL");
    Ok(rules::registry()
        .iter()
        .copied()
        .filter(|r| selected(r.id) && !ignored(r.id))
        .collect())
}

fn suggest(id: &str) -> String {
    let upper = id.to_ascii_uppercase();
    let best = rules::registry()
        .iter()
        .map(|r| (strsim::levenshtein(&upper, r.id), r.id))
        .min();
    match best {
        Some((d, known)) if d <= 2 => format!("; did you mean `{known}`?"),
        _ => format!(
            "; known ids: {}",
            rules::registry()
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Scan `root` with `rules`; returns the result and the project facts.
pub(crate) fn run(
    root: &Path,
    settings: &Settings,
    rules: &[&'static RuleInfo],
) -> Result<(ScanResult, Project)> {
    let started = Instant::now();
    let meta = std::fs::metadata(root).map_err(|source| Error::Root {
        path: root.to_owned(),
        source,
    })?;
    let excludes = files::exclude_set(&settings.exclude).map_err(|source| Error::Exclude {
        pattern: settings.exclude.join(", "),
        source,
    })?;
    let threads = settings.threads();
    let (entries, warnings) = if meta.is_file() {
        let rel = files::relative(root, root);
        let entry = FileEntry {
            kind: if std::path::Path::new(&rel)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("py"))
            {
                FileKind::Python
            } else {
                FileKind::Config
            },
            rel,
            path: root.to_owned(),
        };
        (vec![entry], Vec::new())
    } else {
        files::collect(root, &excludes, threads)
    };
    let modules =
        ModuleClasses::collect(&entries, settings.max_file_size, threads).map_err(Error::Thread)?;
    let line_length = crate::line_length::of_project(root);
    run_entries(
        &entries,
        &modules,
        warnings,
        settings,
        rules,
        (started, line_length),
    )
}

/// Scan the one file `rel` of the project at `root`, as if it were the project's only file.
pub(crate) fn run_alone(
    root: &Path,
    rel: &str,
    settings: &Settings,
    rules: &[&'static RuleInfo],
) -> Result<(ScanResult, Project)> {
    let started = Instant::now();
    std::fs::metadata(root).map_err(|source| Error::Root {
        path: root.to_owned(),
        source,
    })?;
    let entry = files::entry(root, rel).ok_or_else(|| Error::NotScannable {
        file: rel.to_owned(),
    })?;
    // A class of the file may derive from a module class of another file: the class headers
    // of the whole tree are read (not parsed), as a scan of the project would.
    let excludes = files::exclude_set(&settings.exclude).map_err(|source| Error::Exclude {
        pattern: settings.exclude.join(", "),
        source,
    })?;
    let (tree, _) = files::collect(root, &excludes, settings.threads());
    let modules = ModuleClasses::collect(&tree, settings.max_file_size, settings.threads())
        .map_err(Error::Thread)?;
    let entries = [entry];
    let line_length = crate::line_length::of_project(root);
    run_entries(
        &entries,
        &modules,
        Vec::new(),
        settings,
        rules,
        (started, line_length),
    )
}

/// Check `entries` (sorted by path), then the project they make up (`modules`: the module
/// classes of the whole tree); `line_length` is the project's, for the code fixes insert.
fn run_entries(
    entries: &[FileEntry],
    modules: &ModuleClasses,
    mut warnings: Vec<String>,
    settings: &Settings,
    rules: &[&'static RuleInfo],
    (started, line_length): (Instant, usize),
) -> Result<(ScanResult, Project)> {
    let threads = settings.threads();
    let python_rules: Vec<&'static RuleInfo> = rules.to_vec();
    let outcomes = check_all(entries, settings, &python_rules, modules, threads)?;

    let cuda_sources: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == FileKind::CudaSource)
        .map(|e| e.rel.clone())
        .collect();
    let config_files: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == FileKind::Config)
        .map(|e| e.rel.clone())
        .collect();

    let mut stats = Stats::default();
    let mut findings = Vec::new();
    let mut unparsed = Vec::new();
    let mut facts = Vec::new();
    let mut suppressions: HashMap<String, Suppressions> = HashMap::new();
    for (entry, outcome) in entries.iter().zip(outcomes) {
        if outcome.python {
            stats.files += 1;
            stats.lines += outcome.lines;
        } else if entry.kind == FileKind::Config {
            stats.config_files += 1;
        }
        findings.extend(outcome.findings);
        warnings.extend(outcome.warnings);
        if let Some(u) = outcome.unparsed {
            unparsed.push(u);
        }
        if let Some(f) = outcome.facts {
            facts.push(f);
        }
        for (line, column, id) in &outcome.suppressions.unknown {
            warnings.push(format!(
                "{}:{line}:{column}: unknown rule id `{id}` in a suppression comment",
                entry.rel
            ));
        }
        for (line, column) in &outcome.suppressions.malformed {
            warnings.push(format!(
                "{}:{line}:{column}: suppression comment without a closing `]`; it suppresses nothing",
                entry.rel
            ));
        }
        suppressions.insert(entry.rel.clone(), outcome.suppressions);
    }
    stats.cuda_sources = cuda_sources.len();
    let mut project = Project::new(facts, cuda_sources, config_files);
    project.line_length = line_length;
    findings.extend(visit::check_project(&project, rules));

    // Fingerprints are made with the suppressed findings among the others, so that adding or
    // removing an ignore comment does not renumber a finding.
    let (ignored, issues): (Vec<Issue>, Vec<Issue>) = to_issues(findings)
        .into_iter()
        .map(|mut issue| {
            let why = suppressions
                .get(&issue.file)
                .and_then(|s| s.reason(&issue.pattern, issue.line, issue.end_line));
            if let Some(why) = why {
                issue.status = Status::Skipped;
                issue.reason = Some(why);
            }
            issue
        })
        .partition(|issue| issue.status == Status::Skipped);
    stats.suppressed = ignored.len();
    stats.unparsed = unparsed.len();
    stats.seconds = started.elapsed().as_secs_f64();

    Ok((
        ScanResult {
            issues,
            ignored,
            exclude: settings.exclude.clone(),
            out_of_scope: Vec::new(),
            scope: None,
            unparsed,
            warnings,
            stats,
        },
        project,
    ))
}

/// Check every entry on `threads` workers with large stacks; outcomes in entry order.
fn check_all(
    entries: &[FileEntry],
    settings: &Settings,
    rules: &[&'static RuleInfo],
    modules: &ModuleClasses,
    threads: usize,
) -> Result<Vec<Outcome>> {
    let done = AtomicUsize::new(0);
    let total = entries.len();
    let builder = || {
        std::thread::Builder::new()
            .name("npu-scan-worker".to_owned())
            .stack_size(WALK_STACK_SIZE)
    };
    // Per-file panics are caught in `check_guarded`; a worker can only panic in the progress
    // callback, and then its files are reported as not checked.
    let slots = crate::parallel::map_ordered(entries, threads, builder, |entry| {
        let outcome = check_guarded(entry, settings, rules, modules);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(progress) = &settings.progress {
            progress(n, total);
        }
        outcome
    })
    .map_err(Error::Thread)?
    .results;
    Ok(entries
        .iter()
        .zip(slots)
        .map(|(entry, slot)| {
            slot.unwrap_or_else(|| Outcome {
                unparsed: Some(Unparsed {
                    file: entry.rel.clone(),
                    reason: "internal error: the file was not checked".to_owned(),
                    line: None,
                    column: None,
                }),
                ..Outcome::default()
            })
        })
        .collect())
}

/// Check one file; a panic in a rule becomes an `unparsed` entry, not an aborted scan.
fn check_guarded(
    entry: &FileEntry,
    settings: &Settings,
    rules: &[&'static RuleInfo],
    modules: &ModuleClasses,
) -> Outcome {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match entry.kind {
        // Debug builds only: a rule panic on the file named, for the tests of this guard.
        #[cfg(debug_assertions)]
        _ if std::env::var("NPU_SCAN_DEBUG_PANIC_IN").is_ok_and(|f| f == entry.rel) => {
            panic!("NPU_SCAN_DEBUG_PANIC_IN={}", entry.rel)
        }
        FileKind::Python => check_python(entry, settings, rules, modules),
        FileKind::Config => check_config(entry, rules),
        FileKind::CudaSource => Outcome::default(),
    }));
    result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Outcome {
            unparsed: Some(Unparsed {
                file: entry.rel.clone(),
                reason: format!("internal error while checking this file: {what}"),
                line: None,
                column: None,
            }),
            python: entry.kind == FileKind::Python,
            warnings: vec![format!(
                "{}: internal error while checking this file (please report it): {what}",
                entry.rel
            )],
            ..Outcome::default()
        }
    })
}

fn skipped(entry: &FileEntry, reason: String) -> Outcome {
    Outcome {
        warnings: vec![format!("{}: skipped: {reason}", entry.rel)],
        unparsed: Some(Unparsed {
            file: entry.rel.clone(),
            reason,
            line: None,
            column: None,
        }),
        python: true,
        ..Outcome::default()
    }
}

fn syn_enabled(rules: &[&'static RuleInfo]) -> bool {
    rules.iter().any(|r| r.id == rules::SYNTAX_ERROR)
}

fn check_python(
    entry: &FileEntry,
    settings: &Settings,
    rules: &[&'static RuleInfo],
    modules: &ModuleClasses,
) -> Outcome {
    let size = std::fs::metadata(&entry.path).map_or(0, |m| m.len());
    if size > settings.max_file_size {
        return skipped(
            entry,
            format!(
                "file too large ({size} bytes; the limit is {} bytes)",
                settings.max_file_size
            ),
        );
    }
    let bytes = match std::fs::read(&entry.path) {
        Ok(b) => b,
        Err(e) => return skipped(entry, format!("cannot read the file: {e}")),
    };
    if memchr::memchr(0, &bytes[..bytes.len().min(8192)]).is_some() {
        return skipped(
            entry,
            "binary file (NUL bytes), not Python source".to_owned(),
        );
    }
    let decoded = source::decode(&bytes);
    drop(bytes);
    let text = decoded.text;
    let index = LineIndex::new(&text);
    let file = SourceFile {
        path: &entry.rel,
        text: &text,
        index: &index,
    };
    let mut outcome = Outcome {
        python: true,
        lines: index.line_count(),
        ..Outcome::default()
    };
    if let Some(why) = &decoded.lossy {
        if syn_enabled(rules) {
            outcome.findings.push(syn_finding(
                &file,
                TextSize::try_from(decoded.lossy_at).unwrap_or_default(),
                &format!("{why}; Python refuses such a file, and the scan may have missed code"),
            ));
        }
        outcome.warnings.push(format!("{}: {why}", entry.rel));
    }
    match source::parse(&text, &entry.rel) {
        Err(err) => {
            let (line, column) = file.position(err.offset);
            if syn_enabled(rules) {
                outcome.findings.push(syn_finding(
                    &file,
                    err.offset,
                    &format!(
                        "cannot parse this file ({}); no other rule checked it",
                        err.message
                    ),
                ));
            }
            outcome.unparsed = Some(Unparsed {
                file: entry.rel.clone(),
                reason: err.message,
                line: Some(line),
                column: Some(column),
            });
            // Comments are not available: suppressions of an unparsable file come from its
            // text, line by line.
            outcome.suppressions =
                Suppressions::parse_config_text(&text, |id| rules::get(id).is_some());
        }
        Ok(parsed) => {
            outcome.suppressions = Suppressions::parse(
                // Only directive comments need a position (most comments are prose).
                parsed
                    .comments
                    .iter()
                    .filter(|c| c.text.contains("npu:"))
                    .map(|c| {
                        let (line, column) = file.position(c.range.start());
                        (line, column, c.text.as_str())
                    }),
                |id| rules::get(id).is_some(),
            );
            let (mut findings, facts) = visit::check_python(file, rules, &parsed.body, modules);
            stamp_fixes(&mut findings, &text);
            if facts.too_deep {
                outcome.warnings.push(format!(
                    "{}: expressions nested deeper than {} levels were not checked",
                    entry.rel,
                    crate::walk::MAX_DEPTH
                ));
            }
            outcome.findings.extend(findings);
            outcome.facts = Some(facts);
        }
    }
    outcome
}

fn syn_finding(file: &SourceFile<'_>, offset: TextSize, message: &str) -> Finding {
    let (line, column) = file.position(offset);
    Finding {
        rule: rules::SYNTAX_ERROR,
        file: file.path.to_owned(),
        line,
        column,
        end_line: line,
        end_column: column,
        symbol: None,
        snippet: file.snippet(line, line),
        message: message.to_owned(),
        related: Vec::new(),
        fix: None,
        blocking: None,
    }
}

fn check_config(entry: &FileEntry, rules: &[&'static RuleInfo]) -> Outcome {
    let size = std::fs::metadata(&entry.path).map_or(0, |m| m.len());
    if size > MAX_CONFIG_SIZE {
        return Outcome::default();
    }
    let Ok(bytes) = std::fs::read(&entry.path) else {
        return Outcome {
            warnings: vec![format!("{}: skipped: cannot read the file", entry.rel)],
            ..Outcome::default()
        };
    };
    if memchr::memchr(0, &bytes).is_some() {
        return Outcome::default();
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let index = LineIndex::new(text);
    let file = SourceFile {
        path: &entry.rel,
        text,
        index: &index,
    };
    let mut findings = visit::check_config(ConfigChecker::new(file), rules);
    stamp_fixes(&mut findings, text);
    Outcome {
        findings,
        suppressions: Suppressions::parse_config_text(text, |id| rules::get(id).is_some()),
        ..Outcome::default()
    }
}

/// Record in each fix the hash of the text it was made for.
fn stamp_fixes(findings: &mut [Finding], text: &str) {
    let mut hash: Option<String> = None;
    for fix in findings.iter_mut().filter_map(|f| f.fix.as_mut()) {
        fix.source_hash
            .clone_from(hash.get_or_insert_with(|| crate::fix::source_hash(text)));
    }
}

/// Several findings of one rule on one line become one: the first (leftmost), with the others'
/// places (and their own related places) in its `related[]`, so that one edit of the line resolves
/// one issue. A merged finding whose message differs keeps that message as the place's note.
/// `findings` must be sorted by file, line and column.
pub(crate) fn one_per_line(findings: Vec<Finding>) -> Vec<Finding> {
    let mut merged: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut first: HashMap<(String, u32, &'static str), usize> = HashMap::new();
    for f in findings {
        let key = (f.file.clone(), f.line, f.rule);
        let Some(&at) = first.get(&key) else {
            first.insert(key, merged.len());
            merged.push(f);
            continue;
        };
        let earlier = &mut merged[at];
        if earlier.blocking.is_none() {
            earlier.blocking.clone_from(&f.blocking);
        }
        // The issue keeps a fix only when every site on the line has one, so that applying
        // it resolves the issue.
        earlier.fix = match (earlier.fix.take(), f.fix) {
            (Some(mut a), Some(b)) if a.applicability == b.applicability => {
                a.edits.extend(b.edits);
                a.edits.sort_by_key(|e| (e.start, e.end));
                let overlap = a.edits.windows(2).any(|w| w[1].start < w[0].end);
                (!overlap).then_some(a)
            }
            _ => None,
        };
        let note = if f.message == earlier.message {
            "another site on this line".to_owned()
        } else {
            f.message
        };
        let place = issue_model::Related {
            file: f.file,
            line: f.line,
            column: f.column,
            note,
        };
        for related in std::iter::once(place).chain(f.related) {
            if !earlier.related.contains(&related) {
                earlier.related.push(related);
            }
        }
    }
    merged
}

/// Sort findings and turn them into pending issues with fingerprints and unique short ids.
pub(crate) fn to_issues(mut findings: Vec<Finding>) -> Vec<Issue> {
    findings.sort_by(|a, b| {
        (
            &a.file,
            a.line,
            a.column,
            a.rule,
            a.end_line,
            a.end_column,
            &a.message,
        )
            .cmp(&(
                &b.file,
                b.line,
                b.column,
                b.rule,
                b.end_line,
                b.end_column,
                &b.message,
            ))
    });
    findings.dedup();
    let findings = one_per_line(findings);
    let mut occurrences: HashMap<(String, String, Option<String>, String), usize> = HashMap::new();
    #[allow(clippy::type_complexity, reason = "the parts of one key")]
    let mut anchors: HashMap<(&str, String, Option<String>, String, (u32, u32)), usize> =
        HashMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut issues = Vec::with_capacity(findings.len());
    for f in findings {
        let Some(rule) = rules::get(f.rule) else {
            continue;
        };
        let normalized = issue_model::normalize_snippet(&f.snippet);
        let key = (
            f.rule.to_owned(),
            f.file.clone(),
            f.symbol.clone(),
            normalized,
        );
        let n = occurrences.entry(key).or_insert(0);
        let line_fingerprint =
            issue_model::fingerprint(f.rule, &f.file, f.symbol.as_deref(), &f.snippet, *n);
        *n += 1;
        // The anchor survives edits of the line by other fixes (`issue_model::merge`).
        let extent = issue_model::extent(f.line, f.column, f.end_line, f.end_column);
        let m = anchors
            .entry((
                f.rule,
                f.file.clone(),
                f.symbol.clone(),
                f.message.clone(),
                extent,
            ))
            .or_insert(0);
        let fingerprint = issue_model::anchored_fingerprint(
            &line_fingerprint,
            f.rule,
            &f.file,
            f.symbol.as_deref(),
            &f.message,
            extent,
            *m,
        );
        *m += 1;
        let mut len = 6;
        let id = loop {
            let id = issue_model::short_id(f.rule, &fingerprint, len);
            if !taken.contains(&id) || len >= fingerprint.len() {
                break id;
            }
            len += 2;
        };
        taken.insert(id.clone());
        issues.push(Issue {
            id,
            pattern: f.rule.to_owned(),
            category: rule.category,
            severity: rule.severity,
            performance: rule.performance,
            file: f.file,
            line: f.line,
            column: f.column,
            end_line: f.end_line,
            end_column: f.end_column,
            symbol: f.symbol,
            message: f.message,
            snippet: f.snippet,
            related: f.related,
            fix: f.fix,
            blocking: f.blocking,
            fix_template: rule.fix_template.to_owned(),
            fingerprint,
            status: Status::Pending,
            reason: None,
            history: Vec::new(),
            measured: None,
            measurement: None,
        });
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::Finding;

    #[test]
    fn findings_of_one_rule_on_one_line_become_one_with_the_others_related() {
        let finding = |rule: &'static str, line: u32, column: u32, message: &str| Finding {
            rule,
            file: "a.py".into(),
            line,
            column,
            end_line: line,
            end_column: column + 3,
            symbol: None,
            snippet: "x".into(),
            message: message.into(),
            related: Vec::new(),
            fix: None,
            blocking: None,
        };
        let merged = super::one_per_line(vec![
            finding("P_F64", 3, 5, "m"),
            finding("P_DEV", 3, 9, "d"),
            finding("P_F64", 3, 20, "m"),
            finding("P_F64", 3, 30, "other"),
            finding("P_F64", 4, 5, "m"),
        ]);
        let kept: Vec<(&str, u32, u32)> =
            merged.iter().map(|f| (f.rule, f.line, f.column)).collect();
        assert_eq!(kept, [("P_F64", 3, 5), ("P_DEV", 3, 9), ("P_F64", 4, 5)]);
        let related: Vec<(u32, &str)> = merged[0]
            .related
            .iter()
            .map(|r| (r.column, r.note.as_str()))
            .collect();
        assert_eq!(related, [(20, "another site on this line"), (30, "other")]);
        assert!(merged[1].related.is_empty() && merged[2].related.is_empty());
    }

    #[test]
    fn a_merged_line_keeps_a_fix_only_when_every_site_has_one() {
        let finding = |column: u32, fix: Option<issue_model::Fix>| Finding {
            rule: "P_F64",
            file: "a.py".into(),
            line: 1,
            column,
            end_line: 1,
            end_column: column + 3,
            symbol: None,
            snippet: "x".into(),
            message: "m".into(),
            related: Vec::new(),
            fix,
            blocking: None,
        };
        let edit = |start: u32| {
            let range = crate::source::TextRange::new(start.into(), (start + 6).into());
            Some(crate::fix::replacement(
                issue_model::Applicability::Unsafe,
                "f",
                range,
                "float",
            ))
        };
        let both = super::one_per_line(vec![finding(1, edit(2)), finding(20, edit(21))]);
        let edits = &both[0].fix.as_ref().map(|f| f.edits.len());
        assert_eq!(*edits, Some(2));
        let one = super::one_per_line(vec![finding(1, edit(2)), finding(20, None)]);
        assert_eq!(one[0].fix, None);
    }
}
