//! One problem, one issue: a finding `npu-verify --record-issues` measured in the code of a
//! scanned finding of the same pattern is that scanned issue, not a second one.
//!
//! The step profile reports the line that ran (`total += x[i].item()`), the scanner the construct
//! (the `for` loop that runs it per sample, or the `.item()` call itself). A measured issue whose
//! line lies in the code a scanned issue reports — its lines, and for a compound statement such
//! as a loop, the block it heads — is folded into that scanned issue: the scanned issue keeps its
//! id, status and history and takes the measurement as [`Issue::measurement`]; the measured issue
//! is dropped. A scanned issue that is `fixed` takes nothing: a measurement there is a problem
//! the fix left, and stays an issue of its own.

use crate::schema::{Issue, IssuesFile, Status, Summary};
use std::collections::{BTreeMap, BTreeSet};

/// The patterns both `npu-scan` and `npu-verify`'s step profile report.
pub const SHARED_PATTERNS: [&str; 2] = ["P_VEC", "P_TGT"];

/// A measured issue folded into a scanned one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded {
    /// The measured issue's id (gone from the file).
    pub measured: String,
    /// The scanned issue's id (the one issue now).
    pub into: String,
}

/// Fold the measured issues of `file` into the scanned issues whose code holds their line (see
/// the module's documentation). `text_of` gives a file's text by its path relative to the root
/// (`None` when it cannot be read: then only the scanned issue's own lines count). The
/// measurements of scanned issues are set from the measured issues folded now; those of checks
/// in `remeasured` that nothing measured again are removed.
pub fn fold_measured(
    file: &mut IssuesFile,
    remeasured: &[&str],
    text_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<Folded> {
    for issue in file.issues.iter_mut().filter(|i| i.measured.is_none()) {
        if issue
            .measurement
            .as_ref()
            .is_some_and(|m| remeasured.contains(&m.check.as_str()))
        {
            issue.measurement = None;
        }
    }
    let mut texts: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    let mut folded = Vec::new();
    let mut dropped = BTreeSet::new();
    // Scanned issues that took a measurement in this pass: a second measured line in the same
    // code (two per-sample lines of one loop) adds its figures rather than replacing the first.
    let mut took = BTreeSet::new();
    for m in 0..file.issues.len() {
        let measured = &file.issues[m];
        if measured.measured.is_none()
            || measured.status == Status::Fixed
            || !SHARED_PATTERNS.contains(&measured.pattern.as_str())
        {
            continue;
        }
        let lines = texts.entry(measured.file.clone()).or_insert_with(|| {
            text_of(&measured.file).map(|t| t.lines().map(str::to_owned).collect())
        });
        let into = file
            .issues
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.measured.is_none()
                    && s.status != Status::Fixed
                    && s.pattern == measured.pattern
                    && s.file == measured.file
            })
            .filter_map(|(at, s)| {
                let (first, last) = code_of(s, lines.as_deref());
                (first..=last)
                    .contains(&measured.line)
                    .then_some((last - first, at))
            })
            .min();
        let Some((_, at)) = into else { continue };
        let taken = file.issues[m].measured.clone();
        let id = file.issues[m].id.clone();
        let scanned = &mut file.issues[at];
        match (&mut scanned.measurement, taken) {
            (Some(kept), Some(more)) if took.contains(&at) => {
                kept.evidence = format!("{}; {}", kept.evidence, more.evidence);
                for arg in more.verify_args {
                    if !kept.verify_args.contains(&arg) {
                        kept.verify_args.push(arg);
                    }
                }
            }
            (_, taken) => scanned.measurement = taken,
        }
        took.insert(at);
        folded.push(Folded {
            measured: id,
            into: scanned.id.clone(),
        });
        dropped.insert(m);
    }
    let mut index = 0;
    file.issues.retain(|_| {
        index += 1;
        !dropped.contains(&(index - 1))
    });
    file.summary = Summary::of(&file.issues);
    folded
}

/// The lines of the code a scanned issue reports: its own, and when it starts a compound
/// statement (a header ending in `:`), the block under it, found by indentation.
fn code_of(issue: &Issue, lines: Option<&[String]>) -> (u32, u32) {
    code_span(issue.line, issue.end_line, lines)
}

/// The lines of the code that starts at line `first` and whose own text ends at `own_last`
/// (1-based, inclusive) in a file of `lines`: those lines, and when they start a compound
/// statement (a header ending in `:`), the block under it, found by indentation. Without the
/// file's text, the own lines.
pub fn code_span(first: u32, own_last: u32, lines: Option<&[String]>) -> (u32, u32) {
    let own_last = own_last.max(first);
    let Some(lines) = lines else {
        return (first, own_last);
    };
    let at = |n: u32| lines.get(usize::try_from(n).ok()?.checked_sub(1)?);
    let Some(head) = at(first) else {
        return (first, own_last);
    };
    let indent = indentation(head);
    // The header may span lines (a long `for ... in zip(...)`): it ends at the first line whose
    // code ends with `:`, at most a few lines on.
    let Some(header_end) = (first..=own_last.max(first + 4))
        .find(|&n| at(n).is_some_and(|l| code(l).trim_end().ends_with(':')))
    else {
        return (first, own_last);
    };
    let mut last = header_end;
    let mut n = header_end + 1;
    while let Some(line) = at(n) {
        let text = code(line);
        if !text.trim().is_empty() {
            if indentation(line) <= indent {
                break;
            }
            last = n;
        }
        n += 1;
    }
    (first, last.max(own_last))
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The line without a trailing `#` comment (a `#` inside a string is rare on the lines that
/// matter here: loop and `with` headers).
fn code(line: &str) -> &str {
    line.find('#').map_or(line, |at| &line[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Category, Measured, Severity};

    fn issue(id: &str, pattern: &str, line: u32, measured: Option<&str>) -> Issue {
        Issue {
            id: id.to_owned(),
            pattern: pattern.to_owned(),
            category: Category::Structure,
            severity: Severity::Warning,
            performance: true,
            file: "train.py".to_owned(),
            line,
            column: 1,
            end_line: line,
            end_column: 10,
            symbol: None,
            message: "m".to_owned(),
            snippet: String::new(),
            related: Vec::new(),
            fix_template: String::new(),
            fix: None,
            fingerprint: format!("{id}-fp"),
            status: Status::Pending,
            reason: None,
            history: Vec::new(),
            measured: measured.map(|check| Measured {
                check: check.to_owned(),
                evidence: format!("measured at train.py:{line}"),
                verify_args: vec!["--pipeline".to_owned()],
            }),
            measurement: None,
            blocking: None,
        }
    }

    fn file(issues: Vec<Issue>) -> IssuesFile {
        IssuesFile {
            schema_version: crate::schema::SCHEMA_VERSION,
            tool: crate::schema::Tool {
                name: "npu-scan".to_owned(),
                version: "0".to_owned(),
            },
            root: ".".to_owned(),
            scanned_at: "t".to_owned(),
            summary: Summary::default(),
            issues,
            unparsed: Vec::new(),
            scope: None,
        }
    }

    const TRAIN: &str = "\
for x, y in loader:
    total = 0.0
    for i in range(x.shape[0]):  # per sample
        total += x[i].sum()

        total += y[i].sum()
    loss = total.item()
";

    fn text(path: &str) -> Option<String> {
        (path == "train.py").then(|| TRAIN.to_owned())
    }

    #[test]
    fn a_measurement_in_a_scanned_loop_is_that_issue() {
        let mut f = file(vec![
            issue("VEC-scan", "P_VEC", 3, None),
            issue("VEC-meas", "P_VEC", 6, Some("pipeline.per_sample")),
            issue("TGT-scan", "P_TGT", 7, None),
            issue("TGT-meas", "P_TGT", 7, Some("pipeline.syncs")),
        ]);
        let folded = fold_measured(&mut f, &["pipeline.per_sample", "pipeline.syncs"], &text);
        assert_eq!(
            folded,
            [
                Folded {
                    measured: "VEC-meas".into(),
                    into: "VEC-scan".into()
                },
                Folded {
                    measured: "TGT-meas".into(),
                    into: "TGT-scan".into()
                },
            ]
        );
        let ids: Vec<&str> = f.issues.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["VEC-scan", "TGT-scan"]);
        assert_eq!(f.summary.total, 2);
        assert_eq!(
            f.issues[0].measurement.as_ref().map(|m| m.check.as_str()),
            Some("pipeline.per_sample")
        );
    }

    #[test]
    fn outside_the_block_another_pattern_or_a_fixed_issue_stays_apart() {
        let mut fixed = issue("VEC-fixed", "P_VEC", 3, None);
        fixed.status = Status::Fixed;
        let mut f = file(vec![
            issue("VEC-scan", "P_VEC", 3, None),
            // Line 7 is after the loop's block (lines 3-6).
            issue("VEC-after", "P_VEC", 7, Some("pipeline.per_sample")),
            // P_TGT measured in the loop is not the loop's P_VEC.
            issue("TGT-meas", "P_TGT", 4, Some("pipeline.syncs")),
        ]);
        assert!(fold_measured(&mut f, &[], &text).is_empty());
        assert_eq!(f.issues.len(), 3);
        let mut g = file(vec![
            fixed,
            issue("VEC-meas", "P_VEC", 4, Some("pipeline.per_sample")),
        ]);
        assert!(fold_measured(&mut g, &[], &text).is_empty());
        assert_eq!(g.issues.len(), 2);
    }

    #[test]
    fn the_innermost_code_takes_it_and_an_unreadable_file_counts_own_lines_only() {
        let mut f = file(vec![
            issue("VEC-outer", "P_VEC", 1, None),
            issue("VEC-inner", "P_VEC", 3, None),
            issue("VEC-meas", "P_VEC", 4, Some("pipeline.per_sample")),
        ]);
        let folded = fold_measured(&mut f, &[], &text);
        assert_eq!(folded[0].into, "VEC-inner");
        let mut g = file(vec![
            issue("VEC-scan", "P_VEC", 3, None),
            issue("VEC-meas", "P_VEC", 4, Some("pipeline.per_sample")),
        ]);
        assert!(fold_measured(&mut g, &[], &|_| None).is_empty());
    }

    #[test]
    fn two_measured_lines_in_one_loop_keep_both_figures() {
        let mut f = file(vec![
            issue("VEC-scan", "P_VEC", 3, None),
            issue("VEC-a", "P_VEC", 4, Some("pipeline.per_sample")),
            issue("VEC-b", "P_VEC", 6, Some("pipeline.per_sample")),
        ]);
        let folded = fold_measured(&mut f, &["pipeline.per_sample"], &text);
        assert_eq!(folded.len(), 2);
        assert_eq!(f.issues.len(), 1);
        let evidence = &f.issues[0].measurement.as_ref().unwrap().evidence;
        assert!(
            evidence.contains("train.py:4") && evidence.contains("train.py:6"),
            "{evidence}"
        );
    }

    #[test]
    fn a_remeasured_check_clears_what_it_no_longer_measures() {
        let mut scanned = issue("VEC-scan", "P_VEC", 3, None);
        scanned.measurement = issue("x", "P_VEC", 4, Some("pipeline.per_sample")).measured;
        let mut f = file(vec![scanned]);
        fold_measured(&mut f, &["pipeline.syncs"], &text);
        assert!(
            f.issues[0].measurement.is_some(),
            "another check's measurement stays"
        );
        fold_measured(&mut f, &["pipeline.per_sample"], &text);
        assert!(f.issues[0].measurement.is_none());
    }
}
