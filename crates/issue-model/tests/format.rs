//! The small pieces of the format: enum spellings, the one-issue-per-line layout, fingerprints
//! and short ids, and the time spent on an issue.

use issue_model::layout;
use issue_model::{
    Category, HistoryEntry, HistoryStatus, Severity, Status, fingerprint, short_id, time_spent,
};
use jiff::SignedDuration;

/// `as_str` must spell each value as the file does.
#[test]
fn as_str_matches_the_serialized_spelling() {
    let spelled = |v: serde_json::Value| v.as_str().map(str::to_owned).unwrap_or_default();
    for s in Status::ALL {
        assert_eq!(spelled(serde_json::json!(s)), s.as_str());
    }
    for s in Severity::ALL {
        assert_eq!(spelled(serde_json::json!(s)), s.as_str());
    }
    for c in Category::ALL {
        assert_eq!(spelled(serde_json::json!(c)), c.as_str());
    }
    for h in HistoryStatus::ALL {
        assert_eq!(spelled(serde_json::json!(h)), h.as_str());
    }
}

#[test]
fn two_levels_indented_the_rest_on_one_line() {
    let value = serde_json::json!({
        "a": 1,
        "empty": [],
        "obj": {"k": {"x": [1, 2]}, "e": {}},
        "list": [{"id": "X", "h": [{"at": "t"}]}, {"id": "Y"}],
    });
    let mut out = Vec::new();
    layout::write(&mut out, &value).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8(out).unwrap_or_default();
    let expected = r#"{
  "a": 1,
  "empty": [],
  "obj": {
    "k": {"x": [1, 2]},
    "e": {}
  },
  "list": [
    {"id": "X", "h": [{"at": "t"}]},
    {"id": "Y"}
  ]
}"#;
    assert_eq!(text, expected);
    let back: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(back, value);
}

#[test]
fn fingerprint_ignores_whitespace_but_not_content() {
    let a = fingerprint("P_RND", "a.py", Some("M.forward"), "x = torch.randn(3)", 0);
    let b = fingerprint(
        "P_RND",
        "a.py",
        Some("M.forward"),
        "  x  =  torch.randn(3)\n",
        0,
    );
    let c = fingerprint("P_RND", "a.py", Some("M.forward"), "x = torch.randn(4)", 0);
    let d = fingerprint("P_RND", "a.py", Some("M.forward"), "x = torch.randn(3)", 1);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d);
    assert_eq!(a.len(), 16);
}

#[test]
fn short_id_strips_the_p_prefix() {
    assert_eq!(short_id("P_RND", "4f1a9c0011223344", 6), "RND-4f1a9c");
    assert_eq!(short_id("P_SYN", "abc", 6), "SYN-abc");
}

fn history(entries: &[(&str, HistoryStatus)]) -> Vec<HistoryEntry> {
    entries
        .iter()
        .map(|(at, status)| HistoryEntry {
            at: (*at).to_owned(),
            status: *status,
            note: None,
        })
        .collect()
}

#[test]
fn rounds_are_summed_and_open_or_backward_rounds_do_not_count() {
    use HistoryStatus::{Fixed, Found, Regressed, Shown};
    assert_eq!(
        time_spent(&history(&[("2025-01-01T00:00:00Z", Found)])),
        None
    );
    let two_rounds = history(&[
        ("2025-01-01T00:00:00Z", Found),
        ("2025-01-01T00:01:00Z", Shown),
        ("2025-01-01T00:05:30Z", Fixed),
        ("2025-01-02T00:00:00Z", Regressed),
        ("2025-01-02T00:00:30Z", Fixed),
    ]);
    assert_eq!(
        time_spent(&two_rounds),
        Some(SignedDuration::from_secs(300))
    );
    let backwards = history(&[
        ("2025-01-01T00:05:00Z", Shown),
        ("2025-01-01T00:00:00Z", Fixed),
    ]);
    assert_eq!(time_spent(&backwards), Some(SignedDuration::ZERO));
    let open = history(&[("2025-01-01T00:05:00Z", Shown)]);
    assert_eq!(time_spent(&open), None);
}
