//! Hand labels of the corpus: every `corpus/labels/*.tsv`.
//!
//! Columns, tab-separated: `file  line  label  ambiguous  reason`. `#` lines are comments and
//! blank lines are skipped. `file` is `<name>-<version>/<path in the extracted distribution>`,
//! `label` a rule id (`P_FLA`, a positive) or `NOT_<id>` (a look-alike the scanner must not
//! report there), `ambiguous` is `yes` or `no`, `reason` one line. A repository's rows have
//! `<name>-<commit12>/` in front instead; while the GitHub part is not loaded they are skipped.

use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Label {
    pub file: String,
    pub line: u32,
    /// The rule id, without `NOT_`.
    pub rule: String,
    /// `false` for a `NOT_` label.
    pub positive: bool,
    pub ambiguous: bool,
    pub reason: String,
    /// `labels/<file>.tsv:<row>`, for messages.
    pub origin: String,
}

/// Every label of `dir`, and one message per malformed row (the row is left out).
pub struct Loaded {
    pub labels: Vec<Label>,
    pub problems: Vec<String>,
}

/// An extracted distribution, as labels see it.
pub struct Tree {
    pub root: PathBuf,
    /// The manifest's `exclude` globs: nothing there may be labelled.
    pub exclude: globset::GlobSet,
}

impl Tree {
    /// Whether the scan skips `rel`.
    fn excludes(&self, rel: &str) -> bool {
        excluded(&self.exclude, rel)
    }
}

/// Whether the scan skips `rel` under these `exclude` globs: a glob matches one of its
/// leading paths or names, as the scanner's walker tests every directory and file on the way
/// down.
pub fn excluded(exclude: &globset::GlobSet, rel: &str) -> bool {
    let mut end = 0;
    rel.split('/').any(|name| {
        end += name.len();
        let hit = exclude.is_match(&rel[..end]) || exclude.is_match(name);
        end += 1;
        hit
    })
}

/// Read every `*.tsv` in `dir`. `dists` maps `<name>-<version>` (or `<name>-<commit12>`) to its
/// extracted tree: a label must name a scanned file there and a line the file has. Rows of the
/// trees in `unloaded` (a part of the corpus not loaded) are skipped, neither labels nor
/// problems.
pub fn load(
    dir: &Path,
    dists: &BTreeMap<String, Tree>,
    unloaded: &BTreeSet<String>,
) -> Result<Loaded> {
    let files = crate::accuracy::label_files(dir, "tsv")?;
    let rules: BTreeSet<&str> = scan::rules::registry().iter().map(|r| r.id).collect();
    let mut line_counts: BTreeMap<String, Option<usize>> = BTreeMap::new();
    let mut loaded = Loaded {
        labels: Vec::new(),
        problems: Vec::new(),
    };
    let mut seen: BTreeMap<(String, u32, String, bool), String> = BTreeMap::new();
    for path in files {
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        for (i, row) in text.lines().enumerate() {
            let origin = format!("labels/{name}:{}", i + 1);
            if row.trim().is_empty() || row.starts_with('#') {
                continue;
            }
            let file = row.split('\t').next().unwrap_or_default().trim();
            if unloaded.contains(super::tree_of(file)) {
                continue;
            }
            match parse_row(row, &origin, &rules) {
                Ok(label) => {
                    if let Some(problem) = check_location(&label, dists, &mut line_counts) {
                        loaded.problems.push(format!("{origin}: {problem}"));
                        continue;
                    }
                    let key = (
                        label.file.clone(),
                        label.line,
                        label.rule.clone(),
                        label.positive,
                    );
                    if let Some(first) = seen.get(&key) {
                        loaded
                            .problems
                            .push(format!("{origin}: the same label as {first}"));
                        continue;
                    }
                    seen.insert(key, origin);
                    loaded.labels.push(label);
                }
                Err(problem) => loaded.problems.push(format!("{origin}: {problem}")),
            }
        }
    }
    loaded.labels.sort();
    Ok(loaded)
}

fn parse_row(row: &str, origin: &str, rules: &BTreeSet<&str>) -> Result<Label, String> {
    let cols: Vec<&str> = row.split('\t').collect();
    if cols.len() != 5 {
        return Err(format!(
            "expected 5 tab-separated columns (file, line, label, ambiguous, reason), found {}",
            cols.len()
        ));
    }
    let file = cols[0].trim();
    let line: u32 = cols[1]
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad line number {:?}", cols[1]))?;
    let (rule, positive) = match cols[2].trim().strip_prefix("NOT_") {
        Some(rule) => (rule, false),
        None => (cols[2].trim(), true),
    };
    if !rules.contains(rule) {
        return Err(format!("unknown pattern id {:?}", cols[2]));
    }
    let ambiguous = match cols[3].trim() {
        "yes" => true,
        "no" => false,
        other => return Err(format!("ambiguous must be yes or no, not {other:?}")),
    };
    let reason = cols[4].trim();
    if reason.is_empty() {
        return Err("the reason is empty".to_owned());
    }
    Ok(Label {
        file: file.to_owned(),
        line,
        rule: rule.to_owned(),
        positive,
        ambiguous,
        reason: reason.to_owned(),
        origin: origin.to_owned(),
    })
}

/// Why `label` does not point at a line of the corpus, if it does not.
fn check_location(
    label: &Label,
    dists: &BTreeMap<String, Tree>,
    line_counts: &mut BTreeMap<String, Option<usize>>,
) -> Option<String> {
    let Some((dist, rel)) = label.file.split_once('/') else {
        return Some(format!(
            "{} does not start with <name>-<version>/",
            label.file
        ));
    };
    let Some(tree) = dists.get(dist) else {
        return Some(format!(
            "{dist} is not a distribution or repository of the manifest"
        ));
    };
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some(format!("{} is not a plain relative path", label.file));
    }
    if tree.excludes(rel) {
        return Some(format!(
            "{} is excluded from the corpus by the manifest",
            label.file
        ));
    }
    let count = line_counts.entry(label.file.clone()).or_insert_with(|| {
        fs::read(tree.root.join(rel))
            .ok()
            .map(|bytes| bytes.split(|&b| b == b'\n').count())
    });
    match *count {
        None => Some(format!("{} is not a file of the corpus", label.file)),
        Some(n) if label.line as usize > n => {
            Some(format!("{} has {n} lines, not {}", label.file, label.line))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BTreeSet<&'static str> {
        ["P_FLA", "P_ENT"].into_iter().collect()
    }

    #[test]
    fn a_row_parses_into_a_label() {
        let l = parse_row(
            "d-1/a.py\t12\tNOT_P_FLA\tyes\tguarded import",
            "x",
            &rules(),
        )
        .unwrap();
        assert_eq!(
            (l.file.as_str(), l.line, l.rule.as_str()),
            ("d-1/a.py", 12, "P_FLA")
        );
        assert!(!l.positive && l.ambiguous);
    }

    #[test]
    fn malformed_rows_say_what_is_wrong() {
        let r = rules();
        assert!(
            parse_row("a\t1\tP_FLA\tno", "x", &r)
                .unwrap_err()
                .contains("5 tab-separated")
        );
        assert!(
            parse_row("a\t0\tP_FLA\tno\tr", "x", &r)
                .unwrap_err()
                .contains("line number")
        );
        assert!(
            parse_row("a\t3\tP_XYZ\tno\tr", "x", &r)
                .unwrap_err()
                .contains("unknown pattern")
        );
        assert!(
            parse_row("a\t3\tP_FLA\tmaybe\tr", "x", &r)
                .unwrap_err()
                .contains("yes or no")
        );
        assert!(
            parse_row("a\t3\tP_FLA\tno\t ", "x", &r)
                .unwrap_err()
                .contains("reason")
        );
    }

    #[test]
    fn a_label_must_point_at_a_line_of_the_corpus() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("d-1/pkg")).unwrap();
        fs::write(dir.path().join("d-1/pkg/a.py"), "x = 1\ny = 2\n").unwrap();
        let tree = Tree {
            root: dir.path().join("d-1"),
            exclude: scan::files::exclude_set(&["vendored".to_owned()]).unwrap(),
        };
        let dists: BTreeMap<String, Tree> = [("d-1".to_owned(), tree)].into_iter().collect();
        let mut counts = BTreeMap::new();
        let label = |file: &str, line| Label {
            file: file.to_owned(),
            line,
            rule: "P_FLA".to_owned(),
            positive: true,
            ambiguous: false,
            reason: "r".to_owned(),
            origin: "x".to_owned(),
        };
        assert_eq!(
            check_location(&label("d-1/pkg/a.py", 2), &dists, &mut counts),
            None
        );
        assert!(check_location(&label("d-1/pkg/a.py", 9), &dists, &mut counts).is_some());
        assert!(check_location(&label("d-1/pkg/b.py", 1), &dists, &mut counts).is_some());
        assert!(check_location(&label("e-2/pkg/a.py", 1), &dists, &mut counts).is_some());
        assert!(check_location(&label("d-1/../a.py", 1), &dists, &mut counts).is_some());
        fs::create_dir_all(dir.path().join("d-1/pkg/vendored")).unwrap();
        fs::write(dir.path().join("d-1/pkg/vendored/b.py"), "x = 1\n").unwrap();
        let excluded = check_location(&label("d-1/pkg/vendored/b.py", 1), &dists, &mut counts);
        assert!(excluded.is_some_and(|e| e.contains("excluded")));
    }

    #[test]
    fn rows_of_a_part_not_loaded_are_skipped_silently() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("d-1")).unwrap();
        fs::write(dir.path().join("d-1/a.py"), "x = 1\n").unwrap();
        let labels_dir = dir.path().join("labels");
        fs::create_dir_all(&labels_dir).unwrap();
        // The repository's tree is not extracted: its rows cannot be checked, only skipped.
        fs::write(
            labels_dir.join("a.tsv"),
            "d-1/a.py\t1\tP_FLA\tno\tr\nrepo-0123456789ab/m.py\t7\tP_FLA\tno\tr\n",
        )
        .unwrap();
        let tree = Tree {
            root: dir.path().join("d-1"),
            exclude: scan::files::exclude_set(&[]).unwrap(),
        };
        let dists: BTreeMap<String, Tree> = [("d-1".to_owned(), tree)].into_iter().collect();
        let unloaded: BTreeSet<String> = ["repo-0123456789ab".to_owned()].into_iter().collect();
        let loaded = load(&labels_dir, &dists, &unloaded).unwrap();
        assert_eq!(loaded.labels.len(), 1);
        assert_eq!(loaded.labels[0].file, "d-1/a.py");
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        // Loaded (here: in no tree at all), the same row is judged, and found wanting.
        let loaded = load(&labels_dir, &dists, &BTreeSet::new()).unwrap();
        assert_eq!(loaded.labels.len(), 1);
        assert_eq!(loaded.problems.len(), 1);
        assert!(
            loaded.problems[0].contains("repo-0123456789ab"),
            "{:?}",
            loaded.problems
        );
    }
}
