//! The fixture harness: every rule has `tests/fixtures/<ID>/`, scanned as one project with
//! only that rule selected. Lines carrying a `# error` comment must be exactly the reported
//! lines; lines carrying `# ok` are look-alikes that must not be reported. The rendered
//! findings are pinned by an insta snapshot per rule (`snapshots/fixtures__<ID>.snap`).

use regex::Regex;
use scan::{Settings, rules};
use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// (file, line) of every `# error` and `# ok` marker under `dir`.
/// (file, line) pairs.
type Lines = BTreeSet<(String, u32)>;

fn markers(dir: &Path) -> (Lines, Lines) {
    let error = Regex::new(r"#\s*error\b").unwrap();
    let ok = Regex::new(r"#\s*ok\b").unwrap();
    let mut errors = BTreeSet::new();
    let mut oks = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            let rel = scan::files::relative(dir, &path);
            for (i, line) in text.lines().enumerate() {
                let n = u32::try_from(i + 1).unwrap();
                if error.is_match(line) {
                    errors.insert((rel.clone(), n));
                } else if ok.is_match(line) {
                    oks.insert((rel.clone(), n));
                }
            }
        }
    }
    (errors, oks)
}

/// Check one rule's fixture; returns the problems found and the rendered findings.
pub fn check_rule(id: &str) -> (Vec<String>, String) {
    let dir = fixtures_root().join(id);
    let mut problems = Vec::new();
    if !dir.is_dir() {
        return (
            vec![format!("{id}: no fixture directory {}", dir.display())],
            String::new(),
        );
    }
    let (errors, oks) = markers(&dir);
    if errors.is_empty() {
        problems.push(format!("{id}: the fixture has no `# error` line"));
    }
    if oks.is_empty() {
        problems.push(format!("{id}: the fixture has no `# ok` look-alike line"));
    }
    let settings = Settings {
        select: vec![id.to_owned()],
        threads: 2,
        ..Settings::default()
    };
    let result = scan::scan(&dir, &settings).unwrap();
    let reported: BTreeSet<(String, u32)> = result
        .issues
        .iter()
        .filter(|i| i.pattern == id)
        .map(|i| (i.file.clone(), i.line))
        .collect();
    for (file, line) in errors.difference(&reported) {
        problems.push(format!(
            "{id}: {file}:{line} is marked `# error` but was not reported"
        ));
    }
    for (file, line) in reported.difference(&errors) {
        let kind = if oks.contains(&(file.clone(), *line)) {
            "marked `# ok`"
        } else {
            "not marked `# error`"
        };
        problems.push(format!("{id}: {file}:{line} was reported but is {kind}"));
    }
    let mut rendered = scan::output::text::findings(&result.issues);
    for u in &result.unparsed {
        let _ = writeln!(
            rendered,
            "unparsed: {}:{}:{}: {}",
            u.file,
            u.line.unwrap_or(0),
            u.column.unwrap_or(0),
            u.reason
        );
    }
    (problems, rendered)
}

#[test]
fn every_rule_matches_its_fixture_markers() {
    let mut problems = Vec::new();
    for rule in rules::registry() {
        problems.extend(check_rule(rule.id).0);
    }
    assert!(
        problems.is_empty(),
        "fixture mismatches:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_rule_snapshot() {
    for rule in rules::registry() {
        let (_, rendered) = check_rule(rule.id);
        insta::assert_snapshot!(rule.id, rendered);
    }
}
