//! The unified diff of one fixed file, as bytes: the file's own bytes (any encoding, byte order
//! mark and line ending), split into lines at `\n` only, as `git apply` and `patch` read them, so
//! applying the diff reproduces the fixed file exactly.

use similar::{Algorithm, DiffOp, DiffTag};

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// A unified diff of `before` → `after` with `a/` and `b/` headers; empty when they are equal.
///
/// A line is everything up to and including a `\n`; a `\r` is part of its line (a file with `\r`
/// line endings only is one line). A last line without `\n` is marked `\ No newline at end of
/// file`, so every hunk, and the diff, ends with a line break.
pub fn unified_diff(file: &str, before: &[u8], after: &[u8]) -> Vec<u8> {
    if before == after {
        return Vec::new();
    }
    let old = lines(before);
    let new = lines(after);
    let ops = similar::capture_diff_slices(Algorithm::Myers, &old, &new);
    let mut out = Vec::with_capacity(before.len().max(after.len()) / 4 + 64);
    out.extend_from_slice(format!("--- a/{file}\n+++ b/{file}\n").as_bytes());
    for hunk in similar::group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (hunk.first(), hunk.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        out.extend_from_slice(
            format!(
                "@@ -{} +{} @@\n",
                range(old_range.start, old_range.len()),
                range(new_range.start, new_range.len())
            )
            .as_bytes(),
        );
        for op in &hunk {
            for (tag, line) in op_lines(op, &old, &new) {
                out.push(tag);
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.extend_from_slice(b"\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// The lines of `bytes`, each with its `\n` (the last one may have none).
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

/// `start,len` as a hunk header writes it (1-based; an empty range names the line before it).
fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// The tagged lines of one diff op: ` ` context, `-` removed, `+` added.
fn op_lines<'a>(op: &DiffOp, old: &[&'a [u8]], new: &[&'a [u8]]) -> Vec<(u8, &'a [u8])> {
    let (tag, old_range, new_range) = op.as_tag_tuple();
    match tag {
        DiffTag::Equal => old[old_range].iter().map(|l| (b' ', *l)).collect(),
        DiffTag::Delete => old[old_range].iter().map(|l| (b'-', *l)).collect(),
        DiffTag::Insert => new[new_range].iter().map(|l| (b'+', *l)).collect(),
        DiffTag::Replace => old[old_range]
            .iter()
            .map(|l| (b'-', *l))
            .chain(new[new_range].iter().map(|l| (b'+', *l)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_usual_text_diff() {
        let before = "a\nb\nc\nd\ne\nf\ng\nh\ni\n";
        let after = "a\nB\nc\nd\ne\nf\ng\nh\nI\n";
        let usual = similar::TextDiff::from_lines(before, after)
            .unified_diff()
            .context_radius(3)
            .header("a/x.py", "b/x.py")
            .to_string();
        assert_eq!(
            String::from_utf8(unified_diff("x.py", before.as_bytes(), after.as_bytes())).unwrap(),
            usual
        );
        assert!(unified_diff("x.py", b"same", b"same").is_empty());
    }

    #[test]
    fn keeps_carriage_returns_in_their_lines_and_marks_a_missing_newline() {
        let diff = unified_diff("m.py", b"a = 1\rb = 2\r", b"import os\ra = 1\rb = 2\r");
        assert_eq!(
            diff,
            b"--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-a = 1\rb = 2\r\n\\ No newline at end of file\n+import os\ra = 1\rb = 2\r\n\\ No newline at end of file\n"
        );
        let diff = unified_diff("m.py", b"\xe9\r\n", b"\xe9\r\nx\r\n");
        assert_eq!(
            diff,
            b"--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n \xe9\r\n+x\r\n"
        );
    }
}
