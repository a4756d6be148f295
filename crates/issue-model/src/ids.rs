//! Line-independent fingerprints and the short ids derived from them.

use sha2::{Digest, Sha256};

/// Collapse runs of whitespace to one space and trim, so re-indenting or
/// re-wrapping a line keeps its fingerprint.
pub fn normalize_snippet(snippet: &str) -> String {
    snippet.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The fingerprint of a finding: a hash of what it is and where it lives, but not of its line number.
///
/// `occurrence` tells apart identical findings in the same symbol (0 for the first, 1 for the
/// second, in source order).
pub fn fingerprint(
    pattern: &str,
    file: &str,
    symbol: Option<&str>,
    snippet: &str,
    occurrence: usize,
) -> String {
    hash_parts(&[
        pattern,
        file,
        symbol.unwrap_or(""),
        &normalize_snippet(snippet),
        &occurrence.to_string(),
    ])
}

/// 16 hex digits of the SHA-256 of `parts`, each ended by a NUL byte.
fn hash_parts(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex(&hasher.finalize()[..8])
}

/// Hex digits of the line part of a fingerprint; what follows is the anchor part.
pub const LINE_PART: usize = 16;

/// The fingerprint of a finding that also survives edits of its line by other fixes: the line
/// fingerprint ([`fingerprint`]) followed by an anchor that leaves the line's text out.
///
/// A fix on a line changes the line's text, and with it the line fingerprint of every other
/// finding there (a float64 cast on a line whose device comparison was fixed). The anchor hashes
/// what the finding itself is, which such an edit leaves alone: the rule, file and symbol, the
/// message, the extent of the finding's own range (its width on one line, or its line count and
/// end column), and `occurrence` among findings with the same anchor in the symbol. Merging
/// ([`crate::merge`]) matches by the line part first, then by the anchor.
#[allow(clippy::too_many_arguments, reason = "the parts of one hash")]
pub fn anchored_fingerprint(
    line_fingerprint: &str,
    pattern: &str,
    file: &str,
    symbol: Option<&str>,
    message: &str,
    extent: (u32, u32),
    occurrence: usize,
) -> String {
    let anchor = hash_parts(&[
        pattern,
        file,
        symbol.unwrap_or(""),
        message,
        &format!("{}:{}", extent.0, extent.1),
        &occurrence.to_string(),
    ]);
    format!("{line_fingerprint}{anchor}")
}

/// The extent of a range for [`anchored_fingerprint`]: `(0, width)` on one line, else
/// `(lines spanned, end column)`.
pub fn extent(line: u32, column: u32, end_line: u32, end_column: u32) -> (u32, u32) {
    if end_line <= line {
        (0, end_column.saturating_sub(column))
    } else {
        (end_line - line, end_column)
    }
}

/// The line part of a fingerprint (all of it for one written before anchors existed).
pub fn line_part(fingerprint: &str) -> &str {
    fingerprint.get(..LINE_PART).unwrap_or(fingerprint)
}

/// The anchor part of a fingerprint, if it has one.
pub fn anchor_part(fingerprint: &str) -> Option<&str> {
    fingerprint.get(LINE_PART..).filter(|a| !a.is_empty())
}

/// Whether two fingerprints name the same finding: equal, the same line part, or the same
/// anchor part (see [`anchored_fingerprint`]).
pub fn same_finding(a: &str, b: &str) -> bool {
    a == b
        || line_part(a) == line_part(b)
        || anchor_part(a).is_some_and(|x| anchor_part(b) == Some(x))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// The short id for a fingerprint, e.g. `RND-4f1a9c` for `P_RND`.
///
/// `len` is the number of hex digits (6 normally; longer only to break a collision).
pub fn short_id(pattern: &str, fingerprint: &str, len: usize) -> String {
    let prefix = pattern.strip_prefix("P_").unwrap_or(pattern);
    let len = len.min(fingerprint.len());
    format!("{prefix}-{}", &fingerprint[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchored_fingerprint_names_the_same_finding_by_either_part() {
        let line = fingerprint("P_F64", "a.py", None, "y = x.double()", 0);
        let other_line = fingerprint("P_F64", "a.py", None, "y = x.double()  # edited", 0);
        let anchored = anchored_fingerprint(&line, "P_F64", "a.py", None, "m", (0, 8), 0);
        let edited = anchored_fingerprint(&other_line, "P_F64", "a.py", None, "m", (0, 8), 0);
        let elsewhere = anchored_fingerprint(&other_line, "P_F64", "a.py", None, "m", (0, 9), 0);
        assert_eq!(anchored.len(), 32);
        assert_eq!(line_part(&anchored), line);
        assert_eq!(anchor_part(&line), None);
        // A file written before anchors (the line part only) and an edited line.
        assert!(same_finding(&line, &anchored));
        assert!(same_finding(&anchored, &edited));
        assert!(!same_finding(&anchored, &elsewhere));
        assert!(!same_finding(&line, &other_line));
    }
}
