//! A quick reader for issue lines exactly as [`crate::layout`] writes them.
//!
//! The format's issue lines are written by one serializer, always with the same keys in the same
//! order and the same separators. This reader accepts only that exact form and returns the issue
//! it holds; anything else (another key order, other spacing, an escape it does not decode, a
//! number serde would reject) returns `None`, and the caller parses the line with `serde_json`,
//! which also gives the error. Whenever it returns an issue, it is the one `serde_json` reads
//! from the same text: the tests check this on generated issues and on mutated lines.

use crate::schema::{Category, HistoryEntry, HistoryStatus, Issue, Related, Severity, Status};

/// The issue on `line` (an issue's JSON text, without indentation or trailing comma), if the
/// line is in the exact form the layout writes.
pub(crate) fn issue(line: &str) -> Option<Issue> {
    let mut r = Reader { text: line, pos: 0 };
    r.lit("{\"id\": ")?;
    let id = r.string()?;
    r.lit(", \"pattern\": ")?;
    let pattern = r.string()?;
    r.lit(", \"category\": ")?;
    let category = spelled(Category::ALL, Category::as_str, r.str_raw()?)?;
    r.lit(", \"severity\": ")?;
    let severity = spelled(Severity::ALL, Severity::as_str, r.str_raw()?)?;
    r.lit(", \"performance\": ")?;
    let performance = r.boolean()?;
    r.lit(", \"file\": ")?;
    let file = r.string()?;
    r.lit(", \"line\": ")?;
    let line_no = r.number()?;
    r.lit(", \"column\": ")?;
    let column = r.number()?;
    r.lit(", \"end_line\": ")?;
    let end_line = r.number()?;
    r.lit(", \"end_column\": ")?;
    let end_column = r.number()?;
    r.lit(", \"symbol\": ")?;
    let symbol = if r.null() { None } else { Some(r.string()?) };
    r.lit(", \"message\": ")?;
    let message = r.string()?;
    r.lit(", \"snippet\": ")?;
    let snippet = r.string()?;
    r.lit(", \"related\": [")?;
    let related = r.list(Reader::related)?;
    r.lit(", \"fix_template\": ")?;
    let fix_template = r.string()?;
    r.lit(", \"fingerprint\": ")?;
    let fingerprint = r.string()?;
    r.lit(", \"status\": ")?;
    let status = spelled(Status::ALL, Status::as_str, r.str_raw()?)?;
    r.lit(", \"reason\": ")?;
    let reason = if r.null() { None } else { Some(r.string()?) };
    r.lit(", \"history\": [")?;
    let history = r.list(Reader::history_entry)?;
    r.lit("}")?;
    if r.pos != line.len() {
        return None;
    }
    #[cfg(test)]
    tests::READ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(Issue {
        id,
        pattern,
        category,
        severity,
        performance,
        file,
        line: line_no,
        column,
        end_line,
        end_column,
        symbol,
        message,
        snippet,
        related,
        fix_template,
        fingerprint,
        status,
        reason,
        history,
    })
}

/// The value of `all` spelled `name` in the file (`as_str` is tested to spell each value as
/// serde does).
fn spelled<T: Copy, const N: usize>(
    all: [T; N],
    as_str: fn(T) -> &'static str,
    name: &str,
) -> Option<T> {
    all.into_iter().find(|&value| as_str(value) == name)
}

/// Whether `bytes` hold a control character, which `serde_json` refuses in strings. The least
/// byte, found without an early exit, compiles to vector instructions.
fn has_control(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .copied()
        .min()
        .is_some_and(|least| least < 0x20)
}

struct Reader<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a [u8] {
        self.text.as_bytes().get(self.pos..).unwrap_or_default()
    }

    /// Exactly `literal` next.
    fn lit(&mut self, literal: &str) -> Option<()> {
        self.rest().starts_with(literal.as_bytes()).then(|| {
            self.pos += literal.len();
        })
    }

    /// A string free of escapes, borrowed; nothing is read when the next value is not one.
    fn str_raw(&mut self) -> Option<&'a str> {
        let rest = self.rest().strip_prefix(b"\"")?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' {
            return None;
        }
        if has_control(&rest[..end]) {
            return None;
        }
        let start = self.pos + 1;
        let text = self.text.get(start..start + end)?;
        self.pos = start + end + 1;
        Some(text)
    }

    /// A string, with the escapes the layout's serializer writes for quotes, backslashes and
    /// the common control characters decoded; `\u` escapes are left to `serde_json`.
    fn string(&mut self) -> Option<String> {
        // Most strings have no escape: one copy of the right size.
        if let Some(text) = self.str_raw() {
            return Some(text.to_owned());
        }
        if self.rest().first() != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let mut out = String::new();
        let mut pos = start;
        loop {
            let rest = self.text.as_bytes().get(pos..)?;
            let n = memchr::memchr2(b'"', b'\\', rest)?;
            if has_control(&rest[..n]) {
                return None;
            }
            out.push_str(self.text.get(pos..pos + n)?);
            pos += n;
            if rest[n] == b'"' {
                self.pos = pos + 1;
                return Some(out);
            }
            let decoded = match rest.get(n + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'n' => '\n',
                b't' => '\t',
                b'r' => '\r',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                _ => return None,
            };
            out.push(decoded);
            pos += 2;
        }
    }

    /// `null` next (read).
    fn null(&mut self) -> bool {
        self.lit("null").is_some()
    }

    fn boolean(&mut self) -> Option<bool> {
        if self.lit("true").is_some() {
            Some(true)
        } else {
            self.lit("false").map(|()| false)
        }
    }

    /// A `u32` as `serde_json` reads it: digits without a leading zero, in range.
    fn number(&mut self) -> Option<u32> {
        let rest = self.rest();
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && rest[0] == b'0') || digits > 10 {
            return None;
        }
        // A fraction or exponent makes it a float, which `serde_json` does not read as a u32.
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut value: u64 = 0;
        for &b in &rest[..digits] {
            value = value * 10 + u64::from(b - b'0');
        }
        let value = u32::try_from(value).ok()?;
        self.pos += digits;
        Some(value)
    }

    /// The members of an array whose `[` has been read, each read by `member`, then `]`.
    fn list<T>(&mut self, member: fn(&mut Reader<'a>) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::new();
        if self.lit("]").is_some() {
            return Some(items);
        }
        loop {
            items.push(member(self)?);
            if self.lit("]").is_some() {
                return Some(items);
            }
            self.lit(", ")?;
        }
    }

    fn related(&mut self) -> Option<Related> {
        self.lit("{\"file\": ")?;
        let file = self.string()?;
        self.lit(", \"line\": ")?;
        let line = self.number()?;
        self.lit(", \"column\": ")?;
        let column = self.number()?;
        self.lit(", \"note\": ")?;
        let note = self.string()?;
        self.lit("}")?;
        Some(Related {
            file,
            line,
            column,
            note,
        })
    }

    fn history_entry(&mut self) -> Option<HistoryEntry> {
        self.lit("{\"at\": ")?;
        let at = self.string()?;
        self.lit(", \"status\": ")?;
        let status = spelled(HistoryStatus::ALL, HistoryStatus::as_str, self.str_raw()?)?;
        self.lit(", \"note\": ")?;
        let note = if self.null() {
            None
        } else {
            Some(self.string()?)
        };
        self.lit("}")?;
        Some(HistoryEntry { at, status, note })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Issues read here, by every test of the crate.
    pub(super) static READ: AtomicUsize = AtomicUsize::new(0);

    /// A large file in the layout is read here, line by line.
    #[test]
    fn large_files_are_read_here() {
        let (file, text) = crate::lines::large_sample();
        let before = READ.load(Ordering::Relaxed);
        let parsed = crate::lines::parse_parallel(&text);
        assert!(parsed.is_some_and(|parsed| parsed.issues == file.issues));
        let read = READ.load(Ordering::Relaxed) - before;
        assert!(
            read >= file.issues.len(),
            "{read} of {} read here",
            file.issues.len()
        );
    }

    fn line_of(issue: &Issue) -> String {
        let mut bytes = Vec::new();
        crate::layout::write_member(&mut bytes, issue).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8(bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    fn golden_issues() -> Vec<Issue> {
        let text = include_str!("../tests/golden/full.json");
        crate::store::parse(std::path::Path::new("full.json"), text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"))
            .issues
    }

    /// Issues with every kind of value the format allows: strings that need escapes, non-ASCII
    /// text, empty and optional fields, extreme numbers, every enum value.
    fn varied() -> Vec<Issue> {
        let texts = [
            "",
            "plain",
            "a \"quoted\" word",
            "back\\slash and a path C:\\x\\y",
            "two\nlines\r\nand\ttabs",
            "bell \u{8} and feed \u{c}",
            "control \u{1} and \u{1f}",
            "é, 中文, 🚀 and \u{7f}",
            "slash / and </script>",
            "ends with a backslash \\",
        ];
        let base = golden_issues();
        let categories = Category::ALL;
        let statuses = Status::ALL;
        let severities = Severity::ALL;
        let histories = HistoryStatus::ALL;
        let mut out = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let mut issue = base[n % base.len()].clone();
            issue.message = (*text).to_owned();
            issue.snippet = format!("{text}{text}");
            issue.symbol = (n % 2 == 0).then(|| (*text).to_owned());
            issue.reason = (n % 3 == 0).then(|| (*text).to_owned());
            issue.file = format!("dir/{text}.py");
            issue.category = categories[n % categories.len()];
            issue.severity = severities[n % severities.len()];
            issue.status = statuses[n % statuses.len()];
            issue.performance = n % 2 == 1;
            issue.line = [0, 1, 9, 10, 4_294_967_295][n % 5];
            issue.column = u32::try_from(n).unwrap_or(0);
            issue.related = (0..n % 3)
                .map(|k| Related {
                    file: (*text).to_owned(),
                    line: u32::try_from(k).unwrap_or(0),
                    column: 100,
                    note: (*text).to_owned(),
                })
                .collect();
            issue.history = (0..n % 4)
                .map(|k| HistoryEntry {
                    at: (*text).to_owned(),
                    status: histories[(n + k) % histories.len()],
                    note: (k % 2 == 0).then(|| (*text).to_owned()),
                })
                .collect();
            out.push(issue);
        }
        out.extend(base);
        out
    }

    /// What the layout writes reads back as the same issue; only `\u` escapes (control
    /// characters other than the common ones) are left to `serde_json`.
    #[test]
    fn reads_back_what_the_layout_writes() {
        let mut fast = 0;
        for issue in varied() {
            let line = line_of(&issue);
            match super::issue(&line) {
                Some(read) => {
                    assert_eq!(read, issue, "{line}");
                    fast += 1;
                }
                None => assert!(line.contains("\\u"), "left to serde_json: {line}"),
            }
        }
        assert!(fast >= 10, "{fast} lines read");
    }

    /// Lines `serde_json` reads but not in the layout's exact form, or that `serde_json` refuses:
    /// never read here.
    #[test]
    fn anything_but_the_exact_form_is_left_to_serde_json() {
        let line = line_of(&golden_issues()[1]);
        let variants = [
            line.replacen("\"id\": ", "\"id\":", 1),
            line.replacen(", \"pattern\"", ",\"pattern\"", 1),
            format!(" {line}"),
            format!("{line} "),
            format!("{line},"),
            line.replacen("\"line\": ", "\"line\": 0", 1),
            line.replacen(", \"column\"", ".0, \"column\"", 1),
            line.replacen(", \"column\"", "e0, \"column\"", 1),
            line.replacen("\"line\": ", "\"line\": -", 1),
            line.replacen("\"line\": ", "\"line\": 4294967296", 1),
            line.replacen("\"line\": ", "\"line\": 99999999999", 1),
            line.replacen("\"performance\": false", "\"performance\": 0", 1),
            line.replacen("\"DEVICE\"", "\"device\"", 1),
            line.replacen("\"message\": \"", "\"message\": \"\u{1}", 1),
            line.replacen("\"message\": \"", "\"message\": \"\\u0041", 1),
            line.replacen("\"message\": \"", "\"message\": \"\\x", 1),
            line.replacen("\"symbol\": \"", "\"symbol\": nul\"", 1),
        ];
        for (n, variant) in variants.iter().enumerate() {
            assert_ne!(variant, &line, "variant {n} changes the line");
            assert_eq!(super::issue(variant), None, "variant {n}: {variant}");
        }
    }

    /// Bytes inserted, deleted and replaced all over real lines: whenever a mutated line is
    /// read here, `serde_json` reads the same issue from it.
    #[test]
    fn never_reads_what_serde_json_does_not() {
        let lines: Vec<String> = varied().iter().map(line_of).collect();
        let pieces = [
            "\"", "\\", "\\\"", ",", ", ", " ", ":", "{", "}", "[", "]", "0", "7", "null", "n",
            "true", "e", "\n", "\u{1}", "é", "\\n", "\\u00e9",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(seed >> 33).unwrap_or(0) % bound.max(1)
        };
        let (mut read, mut tried) = (0, 0);
        for _ in 0..20_000 {
            let line = &lines[next(lines.len())];
            let mut mutated = line.clone();
            for _ in 0..=next(2) {
                let at = next(mutated.len() + 1);
                if !mutated.is_char_boundary(at) {
                    continue;
                }
                match next(3) {
                    0 => mutated.insert_str(at, pieces[next(pieces.len())]),
                    1 => {
                        let end = (at + 1 + next(3)).min(mutated.len());
                        if mutated.is_char_boundary(end) {
                            mutated.replace_range(at..end, "");
                        }
                    }
                    _ => {
                        let end = (at + 1).min(mutated.len());
                        if mutated.is_char_boundary(end) {
                            mutated.replace_range(at..end, pieces[next(pieces.len())]);
                        }
                    }
                }
            }
            tried += 1;
            if let Some(fast) = super::issue(&mutated) {
                read += 1;
                let slow: Result<Issue, _> = serde_json::from_str(&mutated);
                assert!(
                    slow.as_ref().is_ok_and(|slow| *slow == fast),
                    "read here as {fast:?}, by serde_json as {slow:?}: {mutated}"
                );
            }
        }
        // Edits inside strings keep the form: a good share must have been read.
        assert!(read > tried / 20, "{read} of {tried} mutated lines read");
    }
}
