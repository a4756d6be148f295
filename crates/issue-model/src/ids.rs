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
    let mut hasher = Sha256::new();
    for part in [
        pattern,
        file,
        symbol.unwrap_or(""),
        &normalize_snippet(snippet),
        &occurrence.to_string(),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    let digest = hasher.finalize();
    hex(&digest[..8])
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
