//! Turning the bytes of a Python file into text, comments, an AST and a position map.
//!
//! This is the only module that talks to the parser crate's parsing API, so the parser can be
//! swapped here alone. Decoding honours a PEP 263 coding line (via `encoding_rs`); without one
//! the bytes must be UTF-8, and invalid UTF-8 is decoded lossily and reported.
//!
//! Each file is lexed once and the same tokens are parsed; comments are collected from that
//! token stream. Lexing first tries our own tokenizer ([`lexer::tokenize`]): byte-oriented,
//! several times faster than the parser crate's lexer, and equal to it token for token and
//! range for range on every file it accepts. It gives up on anything it does not handle
//! exactly (every lexical error, non-ASCII names, unusual number forms, ...); such a file is
//! lexed again by the parser crate's own lexer, so that syntax errors always carry the
//! reference messages and positions.
//!
//! Positions are byte offsets into the decoded text; [`LineIndex`] maps them to 1-based lines
//! and 1-based character columns.

pub mod lexer;

use regex::Regex;
use std::sync::LazyLock;

pub use rustpython_parser::ast;
pub use rustpython_parser::text_size::{TextRange, TextSize};

use rustpython_parser::{Mode, Tok, parse_tokens};

/// A decoded source file, ready to parse.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub text: String,
    /// Set when the bytes were not valid in their declared (or default UTF-8) encoding and
    /// were decoded with replacement characters; the message says where.
    pub lossy: Option<String>,
    /// Byte offset in `text` of the first replaced byte (0 when unknown).
    pub lossy_at: usize,
    /// The encoding the bytes were decoded from.
    pub encoding: &'static encoding_rs::Encoding,
    /// The bytes began with a UTF-8 byte order mark (not part of `text`).
    pub bom: bool,
}

static CODING: LazyLock<Regex> = LazyLock::new(|| {
    // PEP 263: `# -*- coding: latin-1 -*-` and friends, on line 1 or 2.
    Regex::new(r"^[ \t\x0c]*#.*?coding[:=][ \t]*([-\w.]+)").unwrap_or_else(|e| {
        unreachable!("the PEP 263 pattern is a valid regex: {e}");
    })
});

/// Decode `bytes` as Python does: a UTF-8 BOM wins, then a PEP 263 coding line in the first
/// two lines, then UTF-8. A leading BOM is removed.
pub fn decode(bytes: &[u8]) -> Decoded {
    let (bytes, had_bom) = match bytes.strip_prefix(b"\xef\xbb\xbf") {
        Some(rest) => (rest, true),
        None => (bytes, false),
    };
    let declared = if had_bom { None } else { coding_label(bytes) };
    let encoding = declared
        .as_deref()
        .and_then(encoding_for_label)
        .unwrap_or(encoding_rs::UTF_8);
    if encoding == encoding_rs::UTF_8 {
        return match std::str::from_utf8(bytes) {
            Ok(text) => Decoded {
                text: text.to_owned(),
                lossy: None,
                lossy_at: 0,
                encoding,
                bom: had_bom,
            },
            Err(e) => {
                let at = e.valid_up_to();
                let line = memchr::memchr_iter(b'\n', &bytes[..at]).count() + 1;
                Decoded {
                    text: String::from_utf8_lossy(bytes).into_owned(),
                    lossy: Some(format!(
                        "invalid UTF-8 at byte {at} (line {line}); decoded with replacement characters"
                    )),
                    // The valid prefix decodes to the same bytes.
                    lossy_at: at,
                    encoding,
                    bom: had_bom,
                }
            }
        };
    }
    let (text, had_errors) = encoding.decode_without_bom_handling(bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text).to_owned();
    Decoded {
        lossy_at: 0,
        encoding,
        bom: had_bom,
        lossy: had_errors.then(|| {
            format!(
                "bytes not valid in the declared encoding {}; decoded with replacement characters",
                encoding.name()
            )
        }),
        text,
    }
}

/// The encoding for a Python codec name: Python spells some names differently from the
/// WHATWG labels `encoding_rs` knows (`latin-1`, `utf_8`, `iso8859_15`).
fn encoding_for_label(label: &str) -> Option<&'static encoding_rs::Encoding> {
    let label = label.trim().to_ascii_lowercase().replace('_', "-");
    if label == "utf8" || label.starts_with("utf-8") {
        return Some(encoding_rs::UTF_8);
    }
    let label = match label.as_str() {
        "latin-1" | "iso-latin-1" | "l1" | "latin1" => "iso-8859-1",
        other => other,
    };
    encoding_rs::Encoding::for_label(label.as_bytes()).or_else(|| {
        // `iso8859-15` → `iso-8859-15`
        let dashed = label.replacen("iso8859", "iso-8859", 1);
        encoding_rs::Encoding::for_label(dashed.as_bytes())
    })
}

/// The PEP 263 encoding label declared on line 1 or 2, if any.
fn coding_label(bytes: &[u8]) -> Option<String> {
    let mut lines = bytes.split(|&b| b == b'\n').take(2);
    for _ in 0..2 {
        let line = lines.next()?;
        let line = String::from_utf8_lossy(line);
        // Most files have no coding line; they never pay for compiling the pattern.
        if line.contains("coding")
            && let Some(caps) = CODING.captures(&line)
        {
            return caps.get(1).map(|m| m.as_str().to_ascii_lowercase());
        }
        // Line 2 only counts when line 1 is blank or a comment.
        let trimmed = line.trim_start();
        if !(trimmed.is_empty() || trimmed.starts_with('#')) {
            return None;
        }
    }
    None
}

/// A comment: its text (with the `#`) and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub text: String,
    pub range: TextRange,
    /// True when nothing but whitespace precedes it on its line.
    pub own_line: bool,
}

/// Why a file could not be parsed, with the position the parser gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub message: String,
    pub offset: TextSize,
}

/// A parsed file.
#[derive(Debug)]
pub struct Parsed {
    pub body: Vec<ast::Stmt>,
    pub comments: Vec<Comment>,
}

/// Lex `text` once, collect its comments and parse the same tokens into a module body.
///
/// The parser is not known to panic, but a scan must survive one if it does: a panic becomes
/// a syntax error at offset 0 instead of aborting the scan.
pub fn parse(text: &str, path: &str) -> Result<Parsed, SyntaxError> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse_inner(text, path)));
    match result {
        Ok(r) => r,
        Err(_) => Err(SyntaxError {
            message: "the parser failed on this file (internal error)".to_owned(),
            offset: TextSize::default(),
        }),
    }
}

fn parse_inner(text: &str, path: &str) -> Result<Parsed, SyntaxError> {
    let mut comments = Vec::new();
    let result = if let Some(tokens) = lexer::tokenize(text) {
        // The parser drops comments and non-logical newlines itself; taking them out here
        // moves each comment's text instead of cloning it.
        let tokens = tokens.into_iter().filter_map(|(tok, range)| match tok {
            Tok::Comment(value) => {
                comments.push(Comment {
                    text: value,
                    range,
                    own_line: own_line(text, range.start()),
                });
                None
            }
            Tok::NonLogicalNewline => None,
            tok => Some(Ok((tok, range))),
        });
        parse_tokens(tokens, Mode::Module, path)
    } else {
        let tokens = rustpython_parser::lexer::lex(text, Mode::Module).inspect(|token| {
            if let Ok((Tok::Comment(value), range)) = token {
                comments.push(Comment {
                    text: value.clone(),
                    range: *range,
                    own_line: own_line(text, range.start()),
                });
            }
        });
        parse_tokens(tokens, Mode::Module, path)
    };
    match result {
        Ok(ast::Mod::Module(module)) => Ok(Parsed {
            body: module.body,
            comments,
        }),
        Ok(_) => Err(SyntaxError {
            message: "not a module".to_owned(),
            offset: TextSize::default(),
        }),
        Err(e) => Err(SyntaxError {
            message: e.error.to_string(),
            offset: e.offset,
        }),
    }
}

fn own_line(text: &str, start: TextSize) -> bool {
    let start = usize::from(start).min(text.len());
    let before = &text[..start];
    let line_start = before.rfind(['\n', '\r']).map_or(0, |i| i + 1);
    before[line_start..].trim().is_empty()
}

/// Byte offset → 1-based line and 1-based character column.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// Byte offset of the start of each line.
    starts: Vec<usize>,
    ascii: bool,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', &bytes[i..]) {
            let at = i + pos;
            let next = if bytes[at] == b'\r' && bytes.get(at + 1) == Some(&b'\n') {
                at + 2
            } else {
                at + 1
            };
            starts.push(next);
            i = next;
            if i >= bytes.len() {
                break;
            }
        }
        LineIndex {
            starts,
            ascii: text.is_ascii(),
        }
    }

    /// Number of lines (a trailing newline does not start a new one that counts).
    pub fn line_count(&self) -> usize {
        self.starts.len()
    }

    /// 1-based line of a byte offset.
    pub fn line(&self, offset: TextSize) -> u32 {
        let offset = usize::from(offset);
        let idx = self.starts.partition_point(|&s| s <= offset).max(1);
        u32::try_from(idx).unwrap_or(u32::MAX)
    }

    /// 1-based (line, character column) of a byte offset.
    pub fn position(&self, text: &str, offset: TextSize) -> (u32, u32) {
        let line = self.line(offset);
        let start = self.starts[(line as usize).saturating_sub(1)];
        let offset = usize::from(offset).min(text.len()).max(start);
        let column = if self.ascii {
            offset - start
        } else {
            text.get(start..offset)
                .map_or(offset - start, |s| s.chars().count())
        };
        (line, u32::try_from(column + 1).unwrap_or(u32::MAX))
    }

    /// The text of 1-based line `line`, without its line ending.
    pub fn line_text<'a>(&self, text: &'a str, line: u32) -> &'a str {
        let i = (line as usize).saturating_sub(1);
        let Some(&start) = self.starts.get(i) else {
            return "";
        };
        let end = self.starts.get(i + 1).copied().unwrap_or(text.len());
        text.get(start..end)
            .unwrap_or("")
            .trim_end_matches(['\n', '\r'])
    }

    /// Byte offset of the start of 1-based line `line`.
    pub fn line_start(&self, line: u32) -> usize {
        self.starts
            .get((line as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pep263_latin1() {
        let bytes = b"# -*- coding: latin-1 -*-\nx = '\xe9'\n";
        let d = decode(bytes);
        assert!(d.lossy.is_none());
        assert!(d.text.contains("x = '\u{e9}'"));
    }

    #[test]
    fn invalid_utf8_is_lossy_and_says_where() {
        let d = decode(b"x = 1\ny = '\xff'\n");
        assert!(d.text.contains('\u{fffd}'));
        assert!(d.lossy.as_deref().unwrap().contains("line 2"));
    }

    #[test]
    fn bom_is_dropped() {
        let d = decode(b"\xef\xbb\xbfimport torch\n");
        assert_eq!(d.text, "import torch\n");
    }

    #[test]
    fn coding_on_line_two_only_after_comment_line() {
        assert_eq!(
            coding_label(b"#!/usr/bin/env python\n# coding=cp1252\n").as_deref(),
            Some("cp1252")
        );
        assert_eq!(coding_label(b"import os\n# coding=cp1252\n"), None);
    }

    #[test]
    fn comments_and_positions() {
        let text = "import torch  # npu: ignore[P_FLA]\r\n# own line\nx = 'é'  # tail\n";
        let parsed = parse(text, "t.py").unwrap();
        assert_eq!(parsed.comments.len(), 3);
        assert!(!parsed.comments[0].own_line);
        assert!(parsed.comments[1].own_line);
        let index = LineIndex::new(text);
        let (line, col) = index.position(text, parsed.comments[2].range.start());
        assert_eq!((line, col), (3, 10));
        assert_eq!(
            index.line_text(text, 1),
            "import torch  # npu: ignore[P_FLA]"
        );
    }

    #[test]
    fn syntax_error_has_position() {
        let text = "def f(:\n    pass\n";
        let err = parse(text, "t.py").unwrap_err();
        let index = LineIndex::new(text);
        assert_eq!(index.position(text, err.offset).0, 1);
        assert!(!err.message.is_empty());
    }
}
