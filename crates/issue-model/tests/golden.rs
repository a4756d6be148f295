//! Golden files: every `tests/golden/*.json` must keep deserializing, and saving one in the
//! current layout again must give back the same bytes, so the format cannot drift unnoticed.
//! `*-indented.json` files are the same documents fully indented (as the first releases and
//! most editors write them): they must read back to the same data.

use issue_model::{HistoryStatus, Status, parse, to_json};
use std::fs;
use std::path::PathBuf;

fn golden_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()).unwrap_or_default())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 2,
        "golden files are missing from {}",
        dir.display()
    );
    files
}

#[test]
fn every_golden_file_deserializes_and_round_trips_byte_for_byte() {
    for path in golden_files() {
        if path.to_string_lossy().ends_with("-indented.json") {
            continue;
        }
        let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = parse(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let text = to_json(&file);
        assert_eq!(
            text,
            String::from_utf8_lossy(&bytes),
            "{} does not round-trip",
            path.display()
        );
    }
}

#[test]
fn the_full_golden_file_holds_every_kind_of_value() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/full.json");
    let file = parse(&path, &fs::read(&path).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let statuses: Vec<Status> = file.issues.iter().map(|i| i.status).collect();
    for status in Status::ALL {
        assert!(statuses.contains(&status), "no {status} issue");
    }
    let history: Vec<HistoryStatus> = file
        .issues
        .iter()
        .flat_map(|i| i.history.iter().map(|h| h.status))
        .collect();
    for kind in HistoryStatus::ALL {
        assert!(history.contains(&kind), "no {kind:?} history entry");
    }
    assert!(file.issues.iter().any(|i| !i.related.is_empty()));
    assert!(file.unparsed.iter().any(|u| u.line.is_none()));
    assert!(file.issues.iter().any(|i| i.symbol.is_none()));
}

#[test]
fn indented_files_read_back_to_the_same_data() {
    let mut checked = 0;
    for path in golden_files() {
        let name = path.to_string_lossy().into_owned();
        let Some(canonical) = name.strip_suffix("-indented.json") else {
            continue;
        };
        let canonical = PathBuf::from(format!("{canonical}.json"));
        let read = |p: &PathBuf| {
            parse(p, &fs::read(p).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(read(&path), read(&canonical), "{name}");
        checked += 1;
    }
    assert!(checked >= 1, "no -indented.json golden file");
}
