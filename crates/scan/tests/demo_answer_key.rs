//! The demo project against its answer key (`assets/demo/tiny-vla.expected.json`): every
//! planted finding is reported at the key's line (with the related sites the key lists), no
//! listed non-finding is reported, nothing unlisted is reported, and the fixed tree is clean.
//! Each failure lists exactly what differs.

use issue_model::Issue;
use scan::Settings;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// (rule, file, line).
type Key = (String, String, u32);

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/demo")
}

fn answer_key() -> Value {
    let path = demo_dir().join("tiny-vla.expected.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn str_field<'a>(entry: &'a Value, name: &str) -> &'a str {
    entry[name]
        .as_str()
        .unwrap_or_else(|| panic!("answer key entry lacks string `{name}`: {entry}"))
}

fn line_field(entry: &Value) -> u32 {
    entry["line"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or_else(|| panic!("answer key entry lacks `line`: {entry}"))
}

fn key_of(entry: &Value) -> Key {
    (
        str_field(entry, "rule").to_owned(),
        str_field(entry, "file").to_owned(),
        line_field(entry),
    )
}

fn entries<'a>(key: &'a Value, list: &str) -> &'a [Value] {
    key[list]
        .as_array()
        .unwrap_or_else(|| panic!("answer key lacks the list `{list}`"))
}

fn scan_tree(name: &str) -> Vec<Issue> {
    let root = demo_dir().join(name);
    let settings = Settings {
        threads: 2,
        ..Settings::default()
    };
    let result = scan::scan(&root, &settings)
        .unwrap_or_else(|e| panic!("scanning {} failed: {e:#}", root.display()));
    assert!(
        result.unparsed.is_empty(),
        "{name}: files that did not parse: {:?}",
        result.unparsed
    );
    result.issues
}

fn describe(issues: &[&Issue]) -> String {
    let mut out = String::new();
    for issue in issues {
        let _ = writeln!(
            out,
            "  {} {}:{}: {}",
            issue.pattern,
            issue.file,
            issue.line,
            issue.snippet.trim()
        );
    }
    out
}

/// Every key entry names a line that exists and contains its `contains` text, so that the key
/// and the demo cannot drift apart unnoticed.
#[test]
fn answer_key_lines_match_the_demo_sources() {
    let key = answer_key();
    let root = demo_dir().join("tiny-vla");
    let mut problems = Vec::new();
    let mut check = |entry: &Value, what: &str| {
        let file = str_field(entry, "file");
        let line = line_field(entry);
        let contains = str_field(entry, "contains");
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        let actual = text.lines().nth(line as usize - 1).unwrap_or("");
        if !actual.contains(contains) {
            problems.push(format!(
                "{what} {file}:{line}: expected the line to contain {contains:?}, it is {actual:?}"
            ));
        }
    };
    for entry in entries(&key, "findings") {
        check(entry, "finding");
        for related in entry["related"].as_array().map_or(&[][..], Vec::as_slice) {
            check(related, "related");
        }
    }
    for entry in entries(&key, "non_findings") {
        check(entry, "non-finding");
    }
    assert!(
        problems.is_empty(),
        "answer key lines that do not match the demo:\n{}",
        problems.join("\n")
    );
}

#[test]
fn demo_findings_match_the_answer_key() {
    let key = answer_key();
    let issues = scan_tree(str_field(&key, "root"));
    let mut reported: BTreeMap<Key, Vec<&Issue>> = BTreeMap::new();
    for issue in &issues {
        reported
            .entry((issue.pattern.clone(), issue.file.clone(), issue.line))
            .or_default()
            .push(issue);
    }
    let expected: BTreeSet<Key> = entries(&key, "findings").iter().map(key_of).collect();
    let mut report = String::new();

    let missing: Vec<&Value> = entries(&key, "findings")
        .iter()
        .filter(|f| !reported.contains_key(&key_of(f)))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(report, "planted findings not reported:");
        for f in missing {
            let (rule, file, line) = key_of(f);
            let _ = writeln!(
                report,
                "  {rule} {file}:{line}: {}",
                str_field(f, "contains")
            );
        }
    }

    let mut missing_related = Vec::new();
    for f in entries(&key, "findings") {
        let Some(issues) = reported.get(&key_of(f)) else {
            continue;
        };
        let listed: BTreeSet<(&str, u32)> = issues
            .iter()
            .flat_map(|i| &i.related)
            .map(|r| (r.file.as_str(), r.line))
            .collect();
        for related in f["related"].as_array().map_or(&[][..], Vec::as_slice) {
            let site = (str_field(related, "file"), line_field(related));
            if !listed.contains(&site) {
                let (rule, file, line) = key_of(f);
                missing_related.push(format!(
                    "  {rule} {file}:{line} lacks related {}:{} ({})",
                    site.0,
                    site.1,
                    str_field(related, "contains")
                ));
            }
        }
    }
    if !missing_related.is_empty() {
        let _ = writeln!(
            report,
            "related sites the key lists but the issue does not:"
        );
        let _ = writeln!(report, "{}", missing_related.join("\n"));
    }

    let non_findings: Vec<&Issue> = entries(&key, "non_findings")
        .iter()
        .filter_map(|n| reported.get(&key_of(n)))
        .flatten()
        .copied()
        .collect();
    if !non_findings.is_empty() {
        let _ = writeln!(
            report,
            "look-alikes the key marks as non-findings but were reported:"
        );
        report.push_str(&describe(&non_findings));
    }

    let non_keys: BTreeSet<Key> = entries(&key, "non_findings").iter().map(key_of).collect();
    let unlisted: Vec<&Issue> = reported
        .iter()
        .filter(|(k, _)| !expected.contains(*k) && !non_keys.contains(*k))
        .flat_map(|(_, issues)| issues.iter().copied())
        .collect();
    if !unlisted.is_empty() {
        let _ = writeln!(
            report,
            "reported on lines the key does not list (false positives):"
        );
        report.push_str(&describe(&unlisted));
    }

    assert!(
        report.is_empty(),
        "the scan of the demo differs from its answer key ({} issues reported, {} planted):\n{report}",
        issues.len(),
        expected.len()
    );
}

#[test]
fn fixed_demo_has_no_findings() {
    let key = answer_key();
    let issues = scan_tree(str_field(&key, "fixed_root"));
    let all: Vec<&Issue> = issues.iter().collect();
    assert!(
        all.is_empty(),
        "the fixed demo must scan clean, but {} issues were reported:\n{}",
        all.len(),
        describe(&all)
    );
}

/// `scan_alone` of each file reports exactly what the whole scan reports for that file from
/// the rules that judge a file by itself, without walking the tree.
#[test]
fn each_file_scanned_alone_has_its_file_local_findings() {
    let root = demo_dir().join("tiny-vla");
    let settings = Settings {
        threads: 1,
        ..Settings::default()
    };
    let whole = scan::scan(&root, &settings).unwrap_or_else(|e| panic!("{e}"));
    let file_local =
        |issue: &&Issue| scan::rules::get(&issue.pattern).is_some_and(|rule| !rule.project_level);
    let files: BTreeSet<&str> = whole.issues.iter().map(|i| i.file.as_str()).collect();
    assert!(files.len() >= 3, "the demo has findings in several files");
    let mut compared = 0;
    for file in files {
        let alone =
            scan::scan_alone(&root, file, &settings).unwrap_or_else(|e| panic!("{file}: {e}"));
        let expected: Vec<&Issue> = whole
            .issues
            .iter()
            .filter(|i| i.file == file)
            .filter(file_local)
            .collect();
        let got: Vec<&Issue> = alone.issues.iter().filter(file_local).collect();
        assert_eq!(got, expected, "{file}");
        assert!(alone.issues.iter().all(|i| i.file == file), "{file}");
        compared += expected.len();
    }
    assert!(compared > 5, "{compared} findings compared");
    // Not a file of the project the scanner reads: an error, not an empty result.
    for bad in [
        "../tiny-vla/train.py",
        "/etc/passwd",
        "",
        "README.md",
        "a//b.py",
    ] {
        let result = scan::scan_alone(&root, bad, &settings);
        assert!(
            matches!(result, Err(scan::Error::NotScannable { .. })),
            "{bad}: {:?}",
            result.map(|r| r.issues.len())
        );
    }
}
