//! `cargo xtask accuracy`: precision and recall of every rule over the labelled fixture
//! projects, and the generated rule reference `docs/rules.md`.
//!
//! Each project lives in `crates/scan/tests/accuracy/projects/<name>/` and is labelled by
//! `crates/scan/tests/accuracy/labels/<name>.json`:
//! `{"project": "<name>", "description": "…", "labels": [{"rule": "P_RND", "file": "a/b.py", "line": 42}, …]}`.
//! A finding is a true positive when a label has the same rule, file and line. Every finding
//! the scanner reports in a project that no label names is a false positive.
//!
//! `--corpus` measures on real code instead: see [`crate::corpus`].

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Default)]
pub struct Args {
    /// Directory holding `projects/` and `labels/` (default: the scanner's labelled projects).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print every false positive and false negative (with `--corpus`, also every finding no
    /// label judges).
    #[arg(long, short)]
    pub verbose: bool,
    /// Output format of the figures.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Fail when a rule's precision is below this (rules with findings only).
    #[arg(long, value_name = "P")]
    pub min_precision: Option<f64>,
    /// Fail when a rule's recall is below this (rules with labels only).
    #[arg(long, value_name = "R")]
    pub min_recall: Option<f64>,
    /// Instead of measuring: `write` regenerates `docs/rules.md` from the rule registry,
    /// `check` fails when the committed file is stale.
    #[arg(long, value_enum, value_name = "ACTION")]
    pub rules_doc: Option<RulesDoc>,
    #[command(flatten)]
    pub corpus: CorpusArgs,
}

/// The `--corpus` mode and its flags.
#[derive(clap::Args, Default)]
#[command(group(clap::ArgGroup::new("corpus_mode").args(["enabled", "split"]).multiple(true)))]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line flags"
)]
pub struct CorpusArgs {
    /// Measure on the real-code corpus instead (`corpus/`: download, scan, compare with the
    /// hand labels and the baseline).
    #[arg(long = "corpus", conflicts_with_all = ["dir", "rules_doc", "format", "min_precision", "min_recall"])]
    pub enabled: bool,
    /// With `--corpus`: rewrite `corpus/baseline.tsv` from today's findings.
    #[arg(long, requires = "corpus_mode")]
    pub update_baseline: bool,
    /// With `--corpus`: fail on a malformed label row (as CI does).
    #[arg(long, requires = "corpus_mode")]
    pub strict_labels: bool,
    /// With `--corpus`: also the GitHub part, the manifest's repositories read from local git
    /// mirrors (see `--git-mirrors`).
    #[arg(long, requires = "corpus_mode")]
    pub git: bool,
    /// With `--git`: the directory of the git mirrors, `DIR/<owner>+<name>[/repo]` (default:
    /// `$NPU_PATCHER_CORPUS_GIT_MIRRORS`).
    #[arg(long, value_name = "DIR", requires = "git")]
    pub git_mirrors: Option<PathBuf>,
    /// Measure on the corpus (as `--corpus`) and also report the test part of split `K`
    /// (default 0): the labelled trees dealt into 3 folds by project name, fold `K` the test
    /// part, the others the dev part. Change rules looking at the dev part; judge them by the
    /// test part, and rotate `K` over 0..2.
    #[arg(
        long,
        value_name = "K",
        num_args = 0..=1,
        default_missing_value = "0",
        value_parser = clap::value_parser!(u8).range(0..3),
        conflicts_with_all = ["dir", "rules_doc", "format", "min_precision", "min_recall"]
    )]
    pub split: Option<u8>,
}

#[derive(clap::ValueEnum, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum RulesDoc {
    Write,
    Check,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelFile {
    project: String,
    #[allow(dead_code, reason = "documentation for readers of the label file")]
    description: String,
    labels: Vec<Label>,
}

#[derive(Deserialize, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
struct Label {
    rule: String,
    file: String,
    line: u32,
}

/// Counts of one rule over every project.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RuleScore {
    pub labels: usize,
    pub found: usize,
    pub true_positives: usize,
    pub false_positives: Vec<String>,
    pub false_negatives: Vec<String>,
}

impl RuleScore {
    /// `None` when the rule reported nothing.
    pub fn precision(&self) -> Option<f64> {
        (self.found > 0).then(|| ratio(self.true_positives, self.found))
    }

    /// `None` when nothing was labelled for the rule.
    pub fn recall(&self) -> Option<f64> {
        (self.labels > 0).then(|| ratio(self.true_positives, self.labels))
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "counts of findings are far below 2^52"
)]
fn ratio(a: usize, b: usize) -> f64 {
    a as f64 / b as f64
}

pub fn run(args: &Args) -> Result<()> {
    if args.corpus.enabled || args.corpus.split.is_some() {
        return crate::corpus::run(&crate::corpus::Options {
            strict_labels: args.corpus.strict_labels,
            update_baseline: args.corpus.update_baseline,
            verbose: args.verbose,
            git: args.corpus.git.then(|| crate::corpus::GitPart {
                mirrors: args.corpus.git_mirrors.clone(),
            }),
            split: args.corpus.split.map(usize::from),
        });
    }
    if args.rules_doc == Some(RulesDoc::Write) {
        let root = crate::project_root();
        write_rules_doc(&root)?;
        eprintln!("xtask: accuracy: wrote docs/rules.md");
        return Ok(());
    }
    if args.rules_doc == Some(RulesDoc::Check) {
        let problems = check_rules_doc(&crate::project_root());
        if problems.is_empty() {
            eprintln!("xtask: accuracy: docs/rules.md is current");
            return Ok(());
        }
        bail!("{}", problems.join("\n"));
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| crate::project_root().join("crates/scan/tests/accuracy"));
    let scores = measure(&dir)?;
    if args.format == Format::Json {
        let figures: BTreeMap<&str, serde_json::Value> = scores
            .iter()
            .map(|(rule, s)| {
                (
                    rule.as_str(),
                    serde_json::json!({
                        "labels": s.labels,
                        "found": s.found,
                        "true_positives": s.true_positives,
                        "precision": s.precision(),
                        "recall": s.recall(),
                        "false_positives": s.false_positives,
                        "false_negatives": s.false_negatives,
                    }),
                )
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print!("{}", render_table(&scores, args.verbose));
    }
    let mut failures = Vec::new();
    for (rule, s) in &scores {
        if let (Some(min), Some(p)) = (args.min_precision, s.precision())
            && p < min
        {
            failures.push(format!("{rule}: precision {p:.2} < {min:.2}"));
        }
        if let (Some(min), Some(r)) = (args.min_recall, s.recall())
            && r < min
        {
            failures.push(format!("{rule}: recall {r:.2} < {min:.2}"));
        }
    }
    if !failures.is_empty() {
        bail!("accuracy below the bar: {}", failures.join("; "));
    }
    Ok(())
}

/// The files of `dir` whose extension is `ext`, sorted; an error when there are none.
pub fn label_files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no label files (*.{ext}) in {}", dir.display());
    }
    Ok(files)
}

/// Scan every labelled project under `dir` and score each rule of the registry.
pub fn measure(dir: &Path) -> Result<BTreeMap<String, RuleScore>> {
    let label_files = label_files(&dir.join("labels"), "json")?;
    let mut scores: BTreeMap<String, RuleScore> = scan::rules::registry()
        .iter()
        .map(|r| (r.id.to_owned(), RuleScore::default()))
        .collect();
    for path in label_files {
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let file: LabelFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid label file", path.display()))?;
        let project = dir.join("projects").join(&file.project);
        if !project.is_dir() {
            bail!(
                "{}: no project directory {}",
                path.display(),
                project.display()
            );
        }
        let settings = scan::Settings {
            threads: 1,
            ..scan::Settings::default()
        };
        let result = scan::scan(&project, &settings)
            .with_context(|| format!("cannot scan {}", project.display()))?;
        let expected: BTreeSet<Label> = file.labels.iter().cloned().collect();
        let mut found: BTreeMap<Label, String> = BTreeMap::new();
        for issue in &result.issues {
            let label = Label {
                rule: issue.pattern.clone(),
                file: issue.file.clone(),
                line: issue.line,
            };
            found.entry(label).or_insert_with(|| issue.message.clone());
        }
        for label in &expected {
            let score = scores.entry(label.rule.clone()).or_default();
            score.labels += 1;
            if found.contains_key(label) {
                score.true_positives += 1;
            } else {
                score
                    .false_negatives
                    .push(format!("{}/{}:{}", file.project, label.file, label.line));
            }
        }
        for (label, message) in &found {
            let score = scores.entry(label.rule.clone()).or_default();
            score.found += 1;
            if !expected.contains(label) {
                score.false_positives.push(format!(
                    "{}/{}:{}: {message}",
                    file.project, label.file, label.line
                ));
            }
        }
    }
    Ok(scores)
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
}

/// The table `cargo xtask accuracy` prints.
pub fn render_table(scores: &BTreeMap<String, RuleScore>, verbose: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<7} {:>6} {:>6} {:>4} {:>4} {:>4} {:>9} {:>7}",
        "rule", "labels", "found", "tp", "fp", "fn", "precision", "recall"
    );
    let mut total = RuleScore::default();
    for (rule, s) in scores {
        let _ = writeln!(
            out,
            "{:<7} {:>6} {:>6} {:>4} {:>4} {:>4} {:>9} {:>7}",
            rule,
            s.labels,
            s.found,
            s.true_positives,
            s.false_positives.len(),
            s.false_negatives.len(),
            fmt_ratio(s.precision()),
            fmt_ratio(s.recall()),
        );
        total.labels += s.labels;
        total.found += s.found;
        total.true_positives += s.true_positives;
        total
            .false_positives
            .extend(s.false_positives.iter().cloned());
        total
            .false_negatives
            .extend(s.false_negatives.iter().cloned());
    }
    let _ = writeln!(
        out,
        "{:<7} {:>6} {:>6} {:>4} {:>4} {:>4} {:>9} {:>7}",
        "all",
        total.labels,
        total.found,
        total.true_positives,
        total.false_positives.len(),
        total.false_negatives.len(),
        fmt_ratio(total.precision()),
        fmt_ratio(total.recall()),
    );
    if verbose {
        for (rule, s) in scores {
            for fp in &s.false_positives {
                let _ = writeln!(out, "false positive {rule} {fp}");
            }
            for fneg in &s.false_negatives {
                let _ = writeln!(out, "false negative {rule} {fneg}");
            }
        }
    }
    out
}

/// `docs/rules.md`, generated from the rule registry: a table of every rule, then each
/// rule's documentation with its headings one level down.
pub fn render_rules_doc() -> String {
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from the rule registry of crates/scan (crates/scan/src/rules/*.md). -->\n",
    );
    out.push_str("<!-- Do not edit: change the rule docs and regenerate with `cargo xtask accuracy --rules-doc write`. -->\n\n");
    out.push_str("# Rules\n\n");
    out.push_str(
        "Every finding of `npu-scan` carries one of these pattern ids. Performance issues cannot be skipped in the \
         fix workflow. Each rule's fix template is `references/fix-templates/<ID>.md` in the release bundle \
         (`assets/fix-templates/` in this repository); `npu-scan --explain <ID>` prints the text below.\n\n",
    );
    out.push_str(
        "| id | name | category | severity | performance | finds |\n|---|---|---|---|---|---|\n",
    );
    for rule in scan::rules::registry() {
        let _ = writeln!(
            out,
            "| [{id}](#{anchor}) | `{name}` | {category} | {severity} | {perf} | {summary} |",
            id = rule.id,
            anchor = rule.id.to_ascii_lowercase(),
            name = rule.name,
            category = enum_text(&rule.category),
            severity = enum_text(&rule.severity),
            perf = if rule.performance { "yes" } else { "no" },
            summary = rule.summary.replace('|', "\\|"),
        );
    }
    for rule in scan::rules::registry() {
        let _ = writeln!(out, "\n## {}\n", rule.id);
        let _ = writeln!(
            out,
            "`{}` · {} · {} · performance: {} · fix template: `{}`\n",
            rule.name,
            enum_text(&rule.category),
            enum_text(&rule.severity),
            if rule.performance { "yes" } else { "no" },
            rule.fix_template
        );
        let mut in_code = false;
        for line in rule.doc.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            }
            if !in_code && line.starts_with("# ") {
                // The doc's own title: the section heading above replaces it.
                continue;
            }
            if !in_code && line.starts_with('#') {
                let _ = writeln!(out, "#{line}");
            } else {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

fn enum_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Problems with the committed `docs/rules.md` (empty when it is current).
pub fn check_rules_doc(root: &Path) -> Vec<String> {
    let path = root.join("docs/rules.md");
    match fs::read_to_string(&path) {
        Ok(text) if text == render_rules_doc() => Vec::new(),
        Ok(_) => vec![
            "docs/rules.md is out of date: run `cargo xtask accuracy --rules-doc write`".to_owned(),
        ],
        Err(e) => vec![format!("cannot read docs/rules.md: {e}")],
    }
}

/// Write `docs/rules.md` from the registry.
pub fn write_rules_doc(root: &Path) -> Result<()> {
    let path = root.join("docs/rules.md");
    fs::write(&path, render_rules_doc()).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_doc_is_current() {
        let problems = check_rules_doc(&crate::project_root());
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn rules_doc_covers_every_rule() {
        let doc = render_rules_doc();
        for rule in scan::rules::registry() {
            assert!(doc.contains(&format!("\n## {}\n", rule.id)), "{}", rule.id);
            assert!(doc.contains(rule.summary), "{}", rule.id);
        }
    }

    /// The labelled projects hold the rules of this repository to the bar they are measured
    /// against on real repositories.
    #[test]
    fn labelled_projects_meet_the_bar() {
        let dir = crate::project_root().join("crates/scan/tests/accuracy");
        let scores = measure(&dir).expect("labelled projects scan");
        let mut below = Vec::new();
        for (rule, s) in &scores {
            assert!(
                s.labels > 0,
                "{rule} has no labels in the accuracy projects"
            );
            if s.precision().is_some_and(|p| p < 0.90) {
                below.push(format!(
                    "{rule} precision {:?}: {:?}",
                    s.precision(),
                    s.false_positives
                ));
            }
            if s.recall().is_some_and(|r| r < 0.85) {
                below.push(format!(
                    "{rule} recall {:?}: {:?}",
                    s.recall(),
                    s.false_negatives
                ));
            }
        }
        assert!(below.is_empty(), "{}", below.join("\n"));
    }

    #[test]
    fn scores_count_hits_and_misses() {
        let s = RuleScore {
            labels: 4,
            found: 5,
            true_positives: 3,
            ..RuleScore::default()
        };
        assert_eq!(s.precision(), Some(0.6));
        assert_eq!(s.recall(), Some(0.75));
        assert_eq!(RuleScore::default().precision(), None);
    }
}
