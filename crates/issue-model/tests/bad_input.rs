//! Bad input never crashes and never damages the file: each case gets a clear error naming the
//! file, and the bytes on disk are identical afterwards.

use issue_model::{Error, IssuesFile, Status, load, parse, snapshot, to_json, update, update_from};
use std::fs;
use std::path::{Path, PathBuf};

const FULL: &str = include_str!("golden/full.json");

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("issues.json");
    fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// Try to mark every issue fixed; return the error, and check the file did not change.
fn update_must_fail(path: &Path) -> Error {
    let before = fs::read(path).unwrap_or_default();
    let result = update(path, |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        for issue in &mut file.issues {
            issue.status = Status::Fixed;
        }
        Ok((Some(file), ()))
    });
    let error = match result {
        Ok(()) => panic!("update of {} should have failed", path.display()),
        Err(e) => e,
    };
    assert_eq!(
        fs::read(path).unwrap_or_default(),
        before,
        "the file changed after: {error}"
    );
    error
}

fn full() -> IssuesFile {
    parse(Path::new("full.json"), FULL.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("issues.json");
    let error = load(&path)
        .err()
        .unwrap_or_else(|| panic!("loaded a missing file"));
    assert!(matches!(error, Error::Read { .. }), "{error:?}");
    assert!(error.to_string().contains("issues.json"), "{error}");
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for text in ["", " \n\t\n", "\u{feff}"] {
        let path = write(dir.path(), text);
        let error = update_must_fail(&path);
        assert!(matches!(error, Error::Empty { .. }), "{error:?}");
        assert!(error.to_string().contains("is empty"), "{error}");
        assert!(
            error.to_string().contains("npu-scan"),
            "says how to make one: {error}"
        );
    }
}

#[test]
fn truncated_file_names_line_and_column() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cut = &FULL[..FULL.len() / 2];
    let path = write(dir.path(), cut);
    let error = update_must_fail(&path);
    let Error::Json { line, column, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(*line, cut.lines().count(), "{error}");
    assert!(*column >= 1);
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("{}:{line}:{column}: ", path.display())),
        "{text}"
    );
}

#[test]
fn corrupt_byte_names_line_and_column() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let corrupt = FULL.replacen("\"line\": 42,", "\"line\": 42;", 1);
    let path = write(dir.path(), &corrupt);
    let error = update_must_fail(&path);
    let want_line = corrupt
        .lines()
        .position(|l| l.contains("\"line\": 42;"))
        .map(|n| n + 1);
    match error {
        Error::Json { line, .. } => assert_eq!(Some(line), want_line),
        other => panic!("{other:?}"),
    }
}

#[test]
fn files_that_are_not_ours() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for text in [
        "[1, 2, 3]",
        "\"issues\"",
        r#"{"name": "left-pad", "version": "1.0.0"}"#,
        r#"{"schema_version": 1, "rules": []}"#,
    ] {
        let path = write(dir.path(), text);
        let error = update_must_fail(&path);
        assert!(matches!(error, Error::Foreign { .. }), "{text}: {error:?}");
        assert!(
            error.to_string().contains("is not an issues.json"),
            "{error}"
        );
    }
}

#[test]
fn unknown_schema_version() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for (found, text) in [
        (
            "2",
            FULL.replacen("\"schema_version\": 1", "\"schema_version\": 2", 1),
        ),
        (
            "\"1\"",
            FULL.replacen("\"schema_version\": 1", "\"schema_version\": \"1\"", 1),
        ),
        (
            "99",
            r#"{"schema_version": 99, "something": "else"}"#.to_owned(),
        ),
    ] {
        let path = write(dir.path(), &text);
        let error = update_must_fail(&path);
        match &error {
            Error::SchemaVersion { found: f, .. } => assert_eq!(f, found),
            other => panic!("{other:?}"),
        }
        assert!(
            error.to_string().contains("this tool reads version 1"),
            "{error}"
        );
    }
}

#[cfg(unix)]
#[test]
fn read_only_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = write(dir.path(), FULL);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap_or_else(|e| panic!("{e}"));
    let error = update_must_fail(&path);
    assert!(matches!(error, Error::ReadOnly { .. }), "{error:?}");
    assert!(error.to_string().contains("chmod u+w"), "{error}");
    let mode = fs::metadata(&path).map_or(0, |m| m.permissions().mode() & 0o777);
    assert_eq!(mode, 0o444);
}

#[test]
fn file_edited_during_an_update_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = write(dir.path(), FULL);
    let edited = FULL.replacen("passed device=x.device", "edited by hand meanwhile", 1);
    let result = update(&path, |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        file.issues[0].status = Status::Fixed;
        // Another program, which does not take the lock, writes the file meanwhile.
        fs::write(&path, &edited).unwrap_or_else(|e| panic!("{e}"));
        Ok((Some(file), ()))
    });
    let error = result
        .err()
        .unwrap_or_else(|| panic!("the update should be refused"));
    assert!(
        matches!(error, Error::ChangedConcurrently { .. }),
        "{error:?}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap_or_default(), edited);
}

#[test]
fn an_update_after_an_unlocked_read_sees_the_file_as_it_is_under_the_lock() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = write(dir.path(), FULL);
    let seen = snapshot(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen.file.issues[0].status, Status::Pending);
    // Another process marks issue 0 between the unlocked read and the update.
    update(&path, |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        file.issues[0].status = Status::Skipped;
        file.issues[0].reason = Some("not ours".to_owned());
        Ok((Some(file), ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    update_from(&path, Some(seen), |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        assert_eq!(
            file.issues[0].status,
            Status::Skipped,
            "a stale parse was used"
        );
        file.issues[2].status = Status::Fixed;
        Ok((Some(file), ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let after = load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after.issues[0].status, Status::Skipped);
    assert_eq!(after.issues[2].status, Status::Fixed);
    // Unchanged bytes: the earlier parse is the file.
    let seen = snapshot(&path).unwrap_or_else(|e| panic!("{e}"));
    update_from(&path, Some(seen), |file| {
        let file = file.unwrap_or_else(|| panic!("the file exists"));
        assert_eq!(file.issues[2].status, Status::Fixed);
        Ok((None, ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Each rule of the format beyond serde, with the line and column it is reported at.
#[test]
fn validation_errors_point_at_the_field() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // The line and character column where the `nth` occurrence of `needle` starts.
    let line_of = |text: &str, needle: &str, nth: usize| {
        let offset = text
            .match_indices(needle)
            .nth(nth)
            .map_or_else(|| panic!("no {needle}"), |(offset, _)| offset);
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |p| p + 1);
        (line, before[line_start..].chars().count() + 1)
    };
    let cases: Vec<(String, &str, usize, &str)> = vec![
        (
            FULL.replacen("\"id\": \"RND-77b0d3\"", "\"id\": \"RND-4f1a9c\"", 1),
            "\"id\": \"RND-4f1a9c\"",
            1,
            "duplicate id RND-4f1a9c",
        ),
        (
            FULL.replacen(
                "\"reason\": \"runs in the CPU data loader worker, never on the NPU\"",
                "\"reason\": \"  \"",
                1,
            ),
            "\"reason\": \"  \"",
            0,
            "skipped without a reason",
        ),
        (
            FULL.replacen("\"line\": 42,", "\"line\": 0,", 1),
            "\"line\": 0,",
            0,
            "line 0",
        ),
        (
            FULL.replacen("\"column\": 17,", "\"column\": 0,", 1),
            "\"column\": 0,",
            0,
            "column 0",
        ),
        (
            FULL.replacen("\"end_line\": 42,", "\"end_line\": 41,", 1),
            "\"end_line\": 41,",
            0,
            "ends (line 41) before it starts (line 42)",
        ),
        (
            FULL.replacen(
                "\"fingerprint\": \"77b0d3aa01c4e96f\"",
                "\"fingerprint\": \"4f1a9c0e55d2b871\"",
                1,
            ),
            "\"fingerprint\": \"4f1a9c0e55d2b871\"",
            1,
            "same fingerprint",
        ),
        (
            FULL.replacen("\"pattern\": \"P_ENT\"", "\"pattern\": \"entry\"", 1),
            "\"pattern\": \"entry\"",
            0,
            "pattern `entry`",
        ),
        (
            FULL.replacen(
                "\"file\": \"train.py\"",
                "\"file\": \"/home/me/train.py\"",
                1,
            ),
            "\"file\": \"/home/me/train.py\"",
            0,
            "absolute `file`",
        ),
        (
            FULL.replacen(
                "\"at\": \"2025-03-01T08:05:10Z\"",
                "\"at\": \"yesterday\"",
                1,
            ),
            "\"history\": [",
            1,
            "history[1].at is `yesterday`",
        ),
        (
            FULL.replacen(
                "\"scanned_at\": \"2025-03-01T08:00:00Z\"",
                "\"scanned_at\": \"soon\"",
                1,
            ),
            "\"scanned_at\"",
            0,
            "`scanned_at` is `soon`",
        ),
    ];
    for (text, needle, nth, message) in cases {
        let path = write(dir.path(), &text);
        let error = update_must_fail(&path);
        let Error::Validation {
            line,
            column,
            message: got,
            ..
        } = &error
        else {
            panic!("{message}: {error:?}")
        };
        assert!(got.contains(message), "want {message:?} in {got:?}");
        assert_eq!((*line, *column), line_of(&text, needle, nth), "{error}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("{}:{line}:{column}: ", path.display())),
            "{error}"
        );
    }
}

#[test]
fn several_problems_are_counted() {
    let text = FULL.replacen("\"line\": 42,", "\"line\": 0,", 1).replacen(
        "\"column\": 17,",
        "\"column\": 0,",
        1,
    );
    let error = parse(Path::new("x.json"), text.as_bytes()).err();
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("line 0") && text.ends_with("(and 1 more problem)"),
        "{text}"
    );
}

#[test]
fn update_writes_atomically_with_a_fresh_summary() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = write(dir.path(), FULL);
    update(&path, |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        file.issues[0].status = Status::Fixed;
        Ok((Some(file), ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let after = load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after.issues[0].status, Status::Fixed);
    assert_eq!(after.summary.by_status.get("fixed"), Some(&2));
    assert_eq!(after.summary.by_status.get("pending"), Some(&1));
    // No temporary file and no lock file is left behind.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    assert_eq!(names, ["issues.json"]);
    // Writing nothing leaves the bytes alone.
    let before = fs::read(&path).unwrap_or_default();
    update(&path, |_| Ok((None, ()))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fs::read(&path).unwrap_or_default(), before);
    assert_eq!(to_json(&after).as_bytes(), before.as_slice());
}

#[cfg(unix)]
#[test]
fn update_keeps_the_mode_and_writes_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let real = write(dir.path(), FULL);
    fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap_or_else(|e| panic!("{e}"));
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
    update(&link, |file| {
        let mut file = file.unwrap_or_else(|| panic!("the file exists"));
        file.issues[0].status = Status::Fixed;
        Ok((Some(file), ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()));
    let mode = fs::metadata(&real).map_or(0, |m| m.permissions().mode() & 0o777);
    assert_eq!(mode, 0o640);
    assert_eq!(
        load(&real).map(|f| f.issues[0].status).ok(),
        Some(Status::Fixed)
    );
}

#[test]
fn update_of_a_missing_file_may_create_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("new.json");
    update(&path, |file| {
        assert!(file.is_none());
        Ok((Some(full()), ()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fs::read_to_string(&path).unwrap_or_default(), FULL);
    // A new file gets the mode of any file made there, not an owner-only one.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).map_or(0, |m| m.permissions().mode() & 0o777);
        let plain = dir.path().join("plain");
        fs::write(&plain, "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(&path), mode(&plain));
    }
}
