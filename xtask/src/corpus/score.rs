//! Findings against labels: which labels a finding matches, and the figures per family and
//! per rule id.
//!
//! Matching. A finding matches a label of the same family when it is in the same file and its
//! line is within [`TOLERANCE`] lines of the label's. `P_ENT`, `P_DEV` and `P_CFG` form one family
//! (an entry point, the hard-coded CUDA lines it reaches and the config values it reads are
//! one fix): for a finding of that family its `related[]` locations count as well, so a `P_ENT`
//! finding whose `related[]` names a labelled `.cuda()` line matches that `P_DEV` label.
//! `NOT_` labels are matched by the finding's own line only.
//!
//! Figures, over unambiguous labels only:
//! - recall = positive labels matched by at least one finding / all positive labels;
//! - precision = TP / (TP + FP), where a finding is a TP when it matches a positive label and
//!   an FP when it matches no positive label but a `NOT_` label. Findings whose own line is at
//!   an ambiguous label only are counted apart, and the other findings as unlabelled (to be
//!   reviewed, not scored).
//!
//! Ambiguous labels are scored apart: how many ambiguous positives are matched, and how many
//! ambiguous negatives are hit.

use super::labels::Label;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How far a finding's line may be from the label's line.
pub const TOLERANCE: u32 = 2;

/// One finding of the scanner, with its file prefixed by `<name>-<version>/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub file: String,
    pub line: u32,
    pub pattern: String,
    pub message: String,
    pub related: Vec<(String, u32)>,
}

/// The family a rule id is matched in.
pub fn family(rule: &str) -> &str {
    match rule {
        "P_ENT" | "P_DEV" | "P_CFG" => "P_ENT+P_DEV+P_CFG",
        other => other,
    }
}

pub fn matches(f: &Finding, l: &Label) -> bool {
    // related[] only widens what a finding covers: a NOT_ label is judged by the finding's
    // own line, since the entry point it reports is not wrong for listing a look-alike.
    at_own_line(f, l)
        || (l.positive
            && family(&f.pattern) == family(&l.rule)
            && family(&f.pattern) != f.pattern.as_str()
            && f.related.iter().any(|(file, line)| near(l, file, *line)))
}

fn at_own_line(f: &Finding, l: &Label) -> bool {
    family(&f.pattern) == family(&l.rule) && near(l, &f.file, f.line)
}

fn near(l: &Label, file: &str, line: u32) -> bool {
    file == l.file && line.abs_diff(l.line) <= TOLERANCE
}

/// Counts for one family or one rule id.
#[derive(Debug, Default, Clone)]
pub struct Score {
    pub positives: usize,
    pub matched: usize,
    pub negatives: usize,
    pub negatives_hit: usize,
    pub findings: usize,
    pub true_positives: usize,
    pub false_positives: usize,
    pub unlabelled: usize,
    /// Findings that match only ambiguous labels.
    pub at_ambiguous: usize,
    pub ambiguous_positives: usize,
    pub ambiguous_matched: usize,
    pub ambiguous_negatives: usize,
    pub ambiguous_negatives_hit: usize,
}

impl Score {
    pub fn recall(&self) -> Option<f64> {
        (self.positives > 0).then(|| ratio(self.matched, self.positives))
    }

    pub fn precision(&self) -> Option<f64> {
        let judged = self.true_positives + self.false_positives;
        (judged > 0).then(|| ratio(self.true_positives, judged))
    }

    fn add(&mut self, o: &Score) {
        self.positives += o.positives;
        self.matched += o.matched;
        self.negatives += o.negatives;
        self.negatives_hit += o.negatives_hit;
        self.findings += o.findings;
        self.true_positives += o.true_positives;
        self.false_positives += o.false_positives;
        self.unlabelled += o.unlabelled;
        self.at_ambiguous += o.at_ambiguous;
        self.ambiguous_positives += o.ambiguous_positives;
        self.ambiguous_matched += o.ambiguous_matched;
        self.ambiguous_negatives += o.ambiguous_negatives;
        self.ambiguous_negatives_hit += o.ambiguous_negatives_hit;
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "counts of labels and findings are far below 2^52"
)]
fn ratio(a: usize, b: usize) -> f64 {
    a as f64 / b as f64
}

/// The whole comparison.
#[derive(Debug, Default)]
pub struct Report {
    pub by_family: BTreeMap<String, Score>,
    pub by_rule: BTreeMap<String, Score>,
    /// Unambiguous positive labels no finding matches.
    pub misses: Vec<Label>,
    /// Findings at unambiguous `NOT_` labels (and not at a positive one), with the label.
    pub false_positives: Vec<(Finding, Label)>,
    /// Findings that match no label.
    pub unlabelled: Vec<Finding>,
}

impl Report {
    /// The sum over every family.
    pub fn total(&self) -> Score {
        let mut total = Score::default();
        for s in self.by_family.values() {
            total.add(s);
        }
        total
    }
}

pub fn compare(findings: &[Finding], labels: &[Label], rules: &[&str]) -> Report {
    let mut report = Report::default();
    for rule in rules {
        report.by_rule.entry((*rule).to_owned()).or_default();
        report.by_family.entry(family(rule).to_owned()).or_default();
    }
    // Only findings of the label's file can match it: index findings by file.
    let mut by_file: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for f in findings {
        by_file.entry(f.file.as_str()).or_default().push(f);
        for (file, _) in &f.related {
            if file != &f.file {
                by_file.entry(file.as_str()).or_default().push(f);
            }
        }
    }
    let candidates = |l: &Label| by_file.get(l.file.as_str()).into_iter().flatten();
    for l in labels {
        let hit = candidates(l).any(|f| matches(f, l));
        let score = report.by_rule.entry(l.rule.clone()).or_default();
        match (l.positive, l.ambiguous) {
            (true, false) => {
                score.positives += 1;
                if hit {
                    score.matched += 1;
                } else {
                    report.misses.push(l.clone());
                }
            }
            (false, false) => {
                score.negatives += 1;
                score.negatives_hit += usize::from(hit);
            }
            (true, true) => {
                score.ambiguous_positives += 1;
                score.ambiguous_matched += usize::from(hit);
            }
            (false, true) => {
                score.ambiguous_negatives += 1;
                score.ambiguous_negatives_hit += usize::from(hit);
            }
        }
    }
    let mut by_label_file: BTreeMap<&str, Vec<&Label>> = BTreeMap::new();
    for l in labels {
        by_label_file.entry(l.file.as_str()).or_default().push(l);
    }
    for f in findings {
        let mut files: Vec<&str> = vec![f.file.as_str()];
        files.extend(f.related.iter().map(|(file, _)| file.as_str()));
        files.sort_unstable();
        files.dedup();
        let near: Vec<&Label> = files
            .iter()
            .filter_map(|file| by_label_file.get(file))
            .flatten()
            .copied()
            .filter(|l| matches(f, l))
            .collect();
        let score = report.by_rule.entry(f.pattern.clone()).or_default();
        score.findings += 1;
        if near.iter().any(|l| l.positive && !l.ambiguous) {
            score.true_positives += 1;
        } else if let Some(negative) = near.iter().find(|l| !l.ambiguous) {
            score.false_positives += 1;
            report
                .false_positives
                .push((f.clone(), (*negative).clone()));
        } else if near.iter().any(|l| at_own_line(f, l)) {
            // At an ambiguous label; one reached only through related[] leaves the finding
            // itself unlabelled.
            score.at_ambiguous += 1;
        } else {
            score.unlabelled += 1;
            report.unlabelled.push(f.clone());
        }
    }
    for (rule, score) in &report.by_rule {
        report
            .by_family
            .entry(family(rule).to_owned())
            .or_default()
            .add(score);
    }
    report.misses.sort();
    report.false_positives.sort();
    report.unlabelled.sort();
    report
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
}

fn row(out: &mut String, name: &str, s: &Score) {
    let _ = writeln!(
        out,
        "{name:<18} {:>4} {:>5} {:>6} {:>5} {:>4} {:>4} {:>4} {:>6} {:>9} {:>4} {:>4}   {:>3}/{:<3} {:>3}/{:<3}",
        s.positives,
        s.matched,
        fmt_ratio(s.recall()),
        s.findings,
        s.true_positives,
        s.false_positives,
        s.at_ambiguous,
        s.unlabelled,
        fmt_ratio(s.precision()),
        s.negatives,
        s.negatives_hit,
        s.ambiguous_matched,
        s.ambiguous_positives,
        s.ambiguous_negatives_hit,
        s.ambiguous_negatives,
    );
}

/// One line of overall figures: `name: recall 0.80 (8/10), precision 0.90 (9/10), ...`.
pub fn summary(name: &str, s: &Score) -> String {
    format!(
        "{name:<12} recall {} ({}/{}), precision {} ({}/{}); {} findings, {} unlabelled; {} labels\n",
        fmt_ratio(s.recall()),
        s.matched,
        s.positives,
        fmt_ratio(s.precision()),
        s.true_positives,
        s.true_positives + s.false_positives,
        s.findings,
        s.unlabelled,
        s.positives + s.negatives + s.ambiguous_positives + s.ambiguous_negatives,
    )
}

/// The figures, the misses and the false positives, as `cargo xtask accuracy --corpus` prints
/// them; `verbose` adds every unlabelled finding.
pub fn render(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    let header = format!(
        "{:<18} {:>4} {:>5} {:>6} {:>5} {:>4} {:>4} {:>4} {:>6} {:>9} {:>4} {:>4}   {:>7} {:>7}\n",
        "family / rule",
        "pos",
        "found",
        "recall",
        "finds",
        "tp",
        "fp",
        "amb",
        "unlab",
        "precision",
        "neg",
        "hit",
        "amb+",
        "amb-"
    );
    out.push_str(&header);
    for (name, s) in &report.by_family {
        row(&mut out, name, s);
    }
    row(&mut out, "all", &report.total());
    out.push('\n');
    out.push_str(&header.replacen("family / rule", "rule         ", 1));
    for (name, s) in &report.by_rule {
        if s.positives + s.negatives + s.findings + s.ambiguous_positives + s.ambiguous_negatives
            > 0
        {
            row(&mut out, name, s);
        }
    }
    let _ = writeln!(
        out,
        "\nmisses ({}): unambiguous positive labels no finding matches",
        report.misses.len()
    );
    for l in &report.misses {
        let _ = writeln!(out, "  {} {}:{}  {}", l.rule, l.file, l.line, l.reason);
    }
    let _ = writeln!(
        out,
        "\nfalse positives ({}): findings at NOT_ labels",
        report.false_positives.len()
    );
    for (f, l) in &report.false_positives {
        let _ = writeln!(
            out,
            "  {} {}:{}  {}  (NOT_{} {}:{}: {})",
            f.pattern, f.file, f.line, f.message, l.rule, l.file, l.line, l.reason
        );
    }
    if verbose {
        let _ = writeln!(out, "\nunlabelled findings ({})", report.unlabelled.len());
        for f in &report.unlabelled {
            let _ = writeln!(out, "  {} {}:{}  {}", f.pattern, f.file, f.line, f.message);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(rule: &str, line: u32, positive: bool, ambiguous: bool) -> Label {
        Label {
            file: "d-1/a.py".to_owned(),
            line,
            rule: rule.to_owned(),
            positive,
            ambiguous,
            reason: "r".to_owned(),
            origin: "x".to_owned(),
        }
    }

    fn finding(pattern: &str, line: u32, related: &[u32]) -> Finding {
        Finding {
            file: "d-1/a.py".to_owned(),
            line,
            pattern: pattern.to_owned(),
            message: "m".to_owned(),
            related: related
                .iter()
                .map(|&l| ("d-1/a.py".to_owned(), l))
                .collect(),
        }
    }

    #[test]
    fn a_finding_matches_within_two_lines_of_its_family() {
        assert!(matches(
            &finding("P_FLA", 12, &[]),
            &label("P_FLA", 10, true, false)
        ));
        assert!(!matches(
            &finding("P_FLA", 13, &[]),
            &label("P_FLA", 10, true, false)
        ));
        assert!(!matches(
            &finding("P_RND", 10, &[]),
            &label("P_FLA", 10, true, false)
        ));
        // P_ENT, P_DEV and P_CFG are one family, and related[] lines count there.
        assert!(matches(
            &finding("P_DEV", 10, &[]),
            &label("P_ENT", 10, true, false)
        ));
        assert!(matches(
            &finding("P_ENT", 1, &[40]),
            &label("P_DEV", 41, true, false)
        ));
        assert!(!matches(
            &finding("P_FLA", 1, &[40]),
            &label("P_FLA", 40, true, false)
        ));
    }

    #[test]
    fn a_not_label_is_judged_by_the_findings_own_line() {
        assert!(matches(
            &finding("P_ENT", 40, &[]),
            &label("P_DEV", 41, false, false)
        ));
        assert!(!matches(
            &finding("P_ENT", 1, &[40]),
            &label("P_DEV", 40, false, false)
        ));
    }

    #[test]
    fn figures_count_unambiguous_labels_only() {
        let labels = vec![
            label("P_FLA", 10, true, false),
            label("P_FLA", 50, true, false),
            label("P_FLA", 90, false, false),
            label("P_FLA", 130, true, true),
        ];
        let findings = vec![
            finding("P_FLA", 11, &[]),
            finding("P_FLA", 90, &[]),
            finding("P_FLA", 130, &[]),
            finding("P_FLA", 200, &[]),
        ];
        let report = compare(&findings, &labels, &["P_FLA"]);
        let s = &report.by_family["P_FLA"];
        assert_eq!((s.positives, s.matched), (2, 1));
        assert_eq!(
            (
                s.true_positives,
                s.false_positives,
                s.at_ambiguous,
                s.unlabelled
            ),
            (1, 1, 1, 1)
        );
        assert_eq!((s.ambiguous_positives, s.ambiguous_matched), (1, 1));
        assert_eq!(s.recall(), Some(0.5));
        assert_eq!(s.precision(), Some(0.5));
        assert_eq!(report.misses.len(), 1);
        assert_eq!(report.false_positives.len(), 1);
    }
}
