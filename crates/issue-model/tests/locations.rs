//! Where a validation error points: the key of the field at fault, found past look-alike keys in
//! strings and nested objects, in characters (not bytes); the issue itself when the key is absent.

use issue_model::{Error, parse};
use std::path::Path;

const FULL: &str = include_str!("golden/full.json");

/// (line, column) of the validation error of `text`.
fn at(text: &str) -> (usize, usize, String) {
    match parse(Path::new("issues.json"), text.as_bytes()) {
        Err(Error::Validation {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a validation error, got {other:?}"),
    }
}

/// 1-based (line, character column) of the `nth` occurrence of `needle` in `text`.
fn place(text: &str, needle: &str, nth: usize) -> (usize, usize) {
    let offset = text
        .match_indices(needle)
        .nth(nth)
        .map_or_else(|| panic!("no {needle}"), |(o, _)| o);
    let before = &text[..offset];
    let start = before.rfind('\n').map_or(0, |p| p + 1);
    (
        before.matches('\n').count() + 1,
        before[start..].chars().count() + 1,
    )
}

#[test]
fn a_top_level_field_is_pointed_at_by_its_key() {
    let text = FULL.replacen(
        "\"2025-03-01T08:00:00Z\",\n  \"summary\"",
        "\"yesterday\",\n  \"summary\"",
        1,
    );
    let (line, column, message) = at(&text);
    assert!(message.contains("scanned_at"), "{message}");
    assert_eq!((line, column), place(&text, "\"scanned_at\"", 0));
}

#[test]
fn an_issue_key_is_found_past_strings_and_nested_objects_in_characters() {
    // The second issue's history note says `"id": ` and its message has non-ASCII text before
    // the id key on the same line; the duplicate id must be pointed at by the real key.
    let text = FULL
        .replacen(
            "\"note\": \"passed device=x.device\"",
            "\"note\": \"say \\\"id\\\": é here\"",
            1,
        )
        .replacen("\"id\": \"RND-77b0d3\"", "\"id\": \"RND-4f1a9c\"", 1);
    let (line, column, message) = at(&text);
    assert!(message.contains("duplicate id"), "{message}");
    assert_eq!((line, column), place(&text, "\"id\": \"RND-4f1a9c\"", 1));

    // Non-ASCII before the key on its line: the column counts characters.
    let text = FULL.replacen("{\"id\": \"ENT-1c9e02\"", "{\"id\": \"ENT-üé1c9e02\"", 1);
    let text = text.replacen("\"pattern\": \"P_ENT\"", "\"pattern\": \"P_\"", 1);
    let (line, column, message) = at(&text);
    assert!(message.contains("pattern `P_`"), "{message}");
    assert_eq!((line, column), place(&text, "\"pattern\": \"P_\"", 0));
}

#[test]
fn a_pattern_is_p_and_upper_case_words() {
    for bad in ["RND", "P_", "P_rnd"] {
        let text = FULL.replacen(
            "\"pattern\": \"P_ENT\"",
            &format!("\"pattern\": \"{bad}\""),
            1,
        );
        let (_, _, message) = at(&text);
        assert!(message.contains(&format!("pattern `{bad}`")), "{message}");
    }
    let text = FULL.replacen("\"pattern\": \"P_ENT\"", "\"pattern\": \"P_X2_Y\"", 1);
    assert!(parse(Path::new("issues.json"), text.as_bytes()).is_ok());
}
