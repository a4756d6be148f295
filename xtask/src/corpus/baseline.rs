//! `corpus/baseline.tsv`: the findings of the scanner on the corpus when it was last accepted,
//! so a rule change shows what it adds and removes on real code (like ruff's ecosystem check).
//!
//! One row per finding, sorted: `file  line  pattern  message`. Rows are compared whole, so a
//! changed message shows as one vanished and one new row. The rows of a part of the corpus
//! that is not loaded (the GitHub part without `--git`) are neither diffed nor dropped.

use super::score::Finding;
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

const HEADER: &str = "# file\tline\tpattern\tmessage\n# Written by `cargo xtask accuracy --corpus --update-baseline`; do not edit.\n";

/// `(file, line, pattern, message)`.
pub type Row = (String, u32, String, String);

/// The baseline rows; `None` when there is no baseline yet.
pub fn read(path: &Path) -> Result<Option<BTreeSet<Row>>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut rows = BTreeSet::new();
    for (i, row) in text.lines().enumerate() {
        if row.is_empty() || row.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = row.splitn(4, '\t').collect();
        let line = cols.get(1).and_then(|l| l.parse::<u32>().ok());
        let (Some(line), 4) = (line, cols.len()) else {
            bail!("{}:{}: not a baseline row", path.display(), i + 1);
        };
        rows.insert((
            cols[0].to_owned(),
            line,
            cols[2].to_owned(),
            cols[3].to_owned(),
        ));
    }
    Ok(Some(rows))
}

fn rows(findings: &[Finding]) -> BTreeSet<Row> {
    findings
        .iter()
        .map(|f| {
            (
                f.file.clone(),
                f.line,
                f.pattern.clone(),
                f.message.replace(['\t', '\n', '\r'], " "),
            )
        })
        .collect()
}

/// `rows` split into those of the trees in `unloaded` and the others.
pub fn split(rows: BTreeSet<Row>, unloaded: &BTreeSet<String>) -> (BTreeSet<Row>, BTreeSet<Row>) {
    rows.into_iter()
        .partition(|row| unloaded.contains(super::tree_of(&row.0)))
}

/// The baseline file's text for `findings`, plus the `kept` rows of parts not loaded.
pub fn render(findings: &[Finding], kept: &BTreeSet<Row>) -> String {
    let mut out = HEADER.to_owned();
    let mut all = rows(findings);
    all.extend(kept.iter().cloned());
    for (file, line, pattern, message) in all {
        let _ = writeln!(out, "{file}\t{line}\t{pattern}\t{message}");
    }
    out
}

/// New and vanished findings against `baseline`: their counts and the sorted `+`/`-` lines.
pub fn diff(baseline: &BTreeSet<Row>, findings: &[Finding]) -> (usize, usize, String) {
    let current = rows(findings);
    let mut changes: Vec<(&Row, char)> = current
        .difference(baseline)
        .map(|k| (k, '+'))
        .chain(baseline.difference(&current).map(|k| (k, '-')))
        .collect();
    changes.sort();
    let added = current.difference(baseline).count();
    let vanished = changes.len() - added;
    let mut out = String::new();
    for ((file, line, pattern, message), sign) in changes {
        let _ = writeln!(out, "{sign} {pattern} {file}:{line}  {message}");
    }
    (added, vanished, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(line: u32, pattern: &str) -> Finding {
        Finding {
            file: "d-1/a.py".to_owned(),
            line,
            pattern: pattern.to_owned(),
            message: "a\tb".to_owned(),
            related: Vec::new(),
        }
    }

    #[test]
    fn the_baseline_round_trips_and_diffs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.tsv");
        assert!(read(&path).unwrap().is_none());
        fs::write(
            &path,
            render(
                &[finding(3, "P_FLA"), finding(9, "P_DEV")],
                &BTreeSet::new(),
            ),
        )
        .unwrap();
        let baseline = read(&path).unwrap().unwrap();
        assert_eq!(baseline.len(), 2);
        let (added, vanished, text) = diff(&baseline, &[finding(3, "P_FLA"), finding(5, "P_ENT")]);
        assert_eq!((added, vanished), (1, 1));
        assert_eq!(text, "+ P_ENT d-1/a.py:5  a b\n- P_DEV d-1/a.py:9  a b\n");
    }

    #[test]
    fn rows_of_a_part_not_loaded_are_kept_and_not_diffed() {
        let repo_row: Row = (
            "repo-0123456789ab/m.py".to_owned(),
            4,
            "P_DEV".to_owned(),
            "m".to_owned(),
        );
        let mut rows = BTreeSet::from([repo_row.clone()]);
        rows.extend(super::rows(&[finding(3, "P_FLA")]));
        let unloaded = BTreeSet::from(["repo-0123456789ab".to_owned()]);
        let (kept, compared) = split(rows, &unloaded);
        assert_eq!(kept, BTreeSet::from([repo_row]));
        let (added, vanished, text) = diff(&compared, &[finding(3, "P_FLA")]);
        assert_eq!((added, vanished, text.as_str()), (0, 0, ""));
        let written = render(&[finding(5, "P_ENT")], &kept);
        assert_eq!(
            written
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            [
                "d-1/a.py\t5\tP_ENT\ta b",
                "repo-0123456789ab/m.py\t4\tP_DEV\tm"
            ]
        );
    }
}
