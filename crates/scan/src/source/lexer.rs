//! A fast Python tokenizer for the common case.
//!
//! [`tokenize`] yields exactly the tokens that the parser crate's own lexer yields in module
//! mode (`rustpython_parser::lexer::lex(text, Mode::Module)`, soft keywords resolved, no
//! trailing `EndOfFile`), with the same ranges, for every file it accepts. It works on bytes
//! with ASCII fast paths and `memchr` for comments and strings, and it gives up — returns
//! `None` — on anything it does not handle exactly: every lexical error, non-ASCII text
//! outside strings and comments, a number directly followed by a letter, a lone carriage
//! return inside a one-line string, and so on. The caller then lexes the file with the
//! reference lexer, so that syntax errors keep the reference's messages and positions.
//!
//! The token contract it keeps:
//! - `\n`, `\r\n` and a lone `\r` end a line; a line end inside brackets, or on a line that
//!   holds only blanks and a comment, is a `NonLogicalNewline`, otherwise a `Newline`.
//! - Indentation counts tabs and spaces apart (a tab after a space is an error, and levels
//!   compare only when tabs and spaces move the same way); a form feed resets the count.
//!   `Indent` spans the indentation, `Dedent` is empty at the first character of the line.
//! - A comment spans `#` to the end of its line, and its token holds that text.
//! - A string token holds the raw text between its quotes with every line end turned into
//!   `\n`; escapes are kept as written. The prefix decides the kind.
//! - At the end of the file: a `Newline` (empty) unless the last line ended, then a `Dedent`
//!   (empty) for each open indentation level.
//! - `match`, `case` and `type` are keywords only where the parser crate's heuristics say so
//!   (see `resolve_soft_keywords`); elsewhere they are names.

use memchr::{memchr, memchr2, memchr3};
use rustpython_parser::ast::bigint::BigInt;
use rustpython_parser::text_size::{TextRange, TextSize};
use rustpython_parser::{StringKind, Tok};

/// A token and where it is.
pub type Spanned = (Tok, TextRange);

/// The tokens of `text`, equal to the reference lexer's, or `None` when this tokenizer is not
/// certain to produce them (the reference lexer must then be used for this file).
pub fn tokenize(text: &str) -> Option<Vec<Spanned>> {
    // Ranges are 32-bit offsets.
    u32::try_from(text.len()).ok()?;
    let mut lexer = Lexer {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        nesting: 0,
        indents: vec![Level::default()],
        tokens: Vec::with_capacity(text.len() / 5 + 16),
        soft_keywords: false,
    };
    lexer.run()?;
    let mut tokens = lexer.tokens;
    if lexer.soft_keywords {
        resolve_soft_keywords(&mut tokens);
    }
    Some(tokens)
}

/// An indentation level: tabs and spaces are counted apart, as the reference lexer does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Level {
    tabs: u32,
    spaces: u32,
}

impl Level {
    /// Compare with another level; `None` when tabs and spaces disagree (a tab error).
    fn compare(self, other: Level) -> Option<std::cmp::Ordering> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self.tabs.cmp(&other.tabs) {
            Less => (self.spaces <= other.spaces).then_some(Less),
            Greater => (self.spaces >= other.spaces).then_some(Greater),
            Equal => Some(self.spaces.cmp(&other.spaces)),
        }
    }
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// Open brackets of any kind.
    nesting: usize,
    /// Indentation stack; its first level (no indentation) is never popped.
    indents: Vec<Level>,
    tokens: Vec<Spanned>,
    /// Whether a `match`, `case` or `type` keyword token was emitted.
    soft_keywords: bool,
}

/// The offset as a `TextSize`; [`tokenize`] checked that every offset fits.
fn size(pos: usize) -> TextSize {
    TextSize::new(u32::try_from(pos).unwrap_or(u32::MAX))
}

fn range(start: usize, end: usize) -> TextRange {
    TextRange::new(size(start), size(end))
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl Lexer<'_> {
    #[inline]
    fn push(&mut self, tok: Tok, start: usize, end: usize) {
        self.tokens.push((tok, range(start, end)));
    }

    /// Emit a token of `len` bytes at the current position.
    fn op(&mut self, tok: Tok, len: usize) {
        let start = self.pos;
        self.pos += len;
        self.push(tok, start, self.pos);
    }

    /// Emit `with_eq` when the operator character is followed by `=`, else `plain`.
    fn op_eq(&mut self, plain: Tok, with_eq: Tok) {
        if self.bytes.get(self.pos + 1) == Some(&b'=') {
            self.op(with_eq, 2);
        } else {
            self.op(plain, 1);
        }
    }

    fn peek(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.pos + ahead).copied()
    }

    fn run(&mut self) -> Option<()> {
        let mut at_line_start = true;
        loop {
            if at_line_start {
                at_line_start = self.indentation()?;
            }
            let Some(c) = self.peek(0) else {
                return self.end_of_file(at_line_start);
            };
            match c {
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => self.name_or_prefixed_string()?,
                b'0'..=b'9' => self.number()?,
                b' ' | b'\t' | b'\x0c' => {
                    self.pos += 1;
                    while matches!(self.peek(0), Some(b' ' | b'\t' | b'\x0c')) {
                        self.pos += 1;
                    }
                }
                b'\n' | b'\r' => {
                    let len = if c == b'\r' && self.peek(1) == Some(b'\n') {
                        2
                    } else {
                        1
                    };
                    if self.nesting == 0 {
                        at_line_start = true;
                        self.op(Tok::Newline, len);
                    } else {
                        self.op(Tok::NonLogicalNewline, len);
                    }
                }
                b'#' => self.comment()?,
                b'"' | b'\'' => self.string(StringKind::String, 0)?,
                b'.' => match (self.peek(1), self.peek(2)) {
                    (Some(b'0'..=b'9'), _) => self.number()?,
                    (Some(b'.'), Some(b'.')) => self.op(Tok::Ellipsis, 3),
                    _ => self.op(Tok::Dot, 1),
                },
                b'(' => self.open(Tok::Lpar),
                b'[' => self.open(Tok::Lsqb),
                b'{' => self.open(Tok::Lbrace),
                b')' => self.close(Tok::Rpar)?,
                b']' => self.close(Tok::Rsqb)?,
                b'}' => self.close(Tok::Rbrace)?,
                b',' => self.op(Tok::Comma, 1),
                b';' => self.op(Tok::Semi, 1),
                b'~' => self.op(Tok::Tilde, 1),
                b':' => self.op_eq(Tok::Colon, Tok::ColonEqual),
                b'=' => self.op_eq(Tok::Equal, Tok::EqEqual),
                b'+' => self.op_eq(Tok::Plus, Tok::PlusEqual),
                b'%' => self.op_eq(Tok::Percent, Tok::PercentEqual),
                b'|' => self.op_eq(Tok::Vbar, Tok::VbarEqual),
                b'^' => self.op_eq(Tok::CircumFlex, Tok::CircumflexEqual),
                b'&' => self.op_eq(Tok::Amper, Tok::AmperEqual),
                b'@' => self.op_eq(Tok::At, Tok::AtEqual),
                b'-' => match self.peek(1) {
                    Some(b'=') => self.op(Tok::MinusEqual, 2),
                    Some(b'>') => self.op(Tok::Rarrow, 2),
                    _ => self.op(Tok::Minus, 1),
                },
                b'*' => match (self.peek(1), self.peek(2)) {
                    (Some(b'='), _) => self.op(Tok::StarEqual, 2),
                    (Some(b'*'), Some(b'=')) => self.op(Tok::DoubleStarEqual, 3),
                    (Some(b'*'), _) => self.op(Tok::DoubleStar, 2),
                    _ => self.op(Tok::Star, 1),
                },
                b'/' => match (self.peek(1), self.peek(2)) {
                    (Some(b'='), _) => self.op(Tok::SlashEqual, 2),
                    (Some(b'/'), Some(b'=')) => self.op(Tok::DoubleSlashEqual, 3),
                    (Some(b'/'), _) => self.op(Tok::DoubleSlash, 2),
                    _ => self.op(Tok::Slash, 1),
                },
                b'<' => match (self.peek(1), self.peek(2)) {
                    (Some(b'<'), Some(b'=')) => self.op(Tok::LeftShiftEqual, 3),
                    (Some(b'<'), _) => self.op(Tok::LeftShift, 2),
                    (Some(b'='), _) => self.op(Tok::LessEqual, 2),
                    _ => self.op(Tok::Less, 1),
                },
                b'>' => match (self.peek(1), self.peek(2)) {
                    (Some(b'>'), Some(b'=')) => self.op(Tok::RightShiftEqual, 3),
                    (Some(b'>'), _) => self.op(Tok::RightShift, 2),
                    (Some(b'='), _) => self.op(Tok::GreaterEqual, 2),
                    _ => self.op(Tok::Greater, 1),
                },
                // A lone `!` is an error.
                b'!' if self.peek(1) == Some(b'=') => self.op(Tok::NotEqual, 2),
                b'\\' => {
                    // A line continuation: only a line end may follow, and then more text.
                    self.pos += match (self.peek(1), self.peek(2)) {
                        (Some(b'\r'), Some(b'\n')) => 3,
                        (Some(b'\n' | b'\r'), _) => 2,
                        _ => return None,
                    };
                    if self.pos >= self.bytes.len() {
                        return None;
                    }
                }
                // Anything else (`$`, `?`, a lone `!`, control characters, non-ASCII names
                // and emoji) is left to the reference lexer.
                _ => return None,
            }
        }
    }

    fn open(&mut self, tok: Tok) {
        self.nesting += 1;
        self.op(tok, 1);
    }

    fn close(&mut self, tok: Tok) -> Option<()> {
        self.nesting = self.nesting.checked_sub(1)?;
        self.op(tok, 1);
        Some(())
    }

    /// At the start of a line: blank lines and comment-only lines, then the indentation of
    /// the next line and its `Indent`/`Dedent` tokens. Returns whether the end of the file
    /// was reached (the lexer is then still at the start of a line).
    fn indentation(&mut self) -> Option<bool> {
        let mut level = Level::default();
        let at_end = loop {
            match self.peek(0) {
                Some(b' ') => {
                    level.spaces += 1;
                    self.pos += 1;
                }
                Some(b'\t') => {
                    if level.spaces != 0 {
                        return None;
                    }
                    level.tabs += 1;
                    self.pos += 1;
                }
                Some(b'\x0c') => {
                    level = Level::default();
                    self.pos += 1;
                }
                Some(b'#') => {
                    self.comment()?;
                    level = Level::default();
                }
                Some(c @ (b'\n' | b'\r')) => {
                    let len = if c == b'\r' && self.peek(1) == Some(b'\n') {
                        2
                    } else {
                        1
                    };
                    self.op(Tok::NonLogicalNewline, len);
                    level = Level::default();
                }
                None => break true,
                Some(_) => break false,
            }
        };
        if at_end {
            level = Level::default();
        }
        // A line starts only after a logical newline, so no bracket is open here.
        let current = *self.indents.last()?;
        match level.compare(current)? {
            std::cmp::Ordering::Equal => {}
            std::cmp::Ordering::Greater => {
                self.indents.push(level);
                let width = usize::try_from(level.tabs + level.spaces).ok()?;
                let start = self.pos.checked_sub(width)?;
                self.push(Tok::Indent, start, self.pos);
            }
            std::cmp::Ordering::Less => loop {
                let current = *self.indents.last()?;
                match level.compare(current)? {
                    std::cmp::Ordering::Less => {
                        if self.indents.len() == 1 {
                            return None;
                        }
                        self.indents.pop();
                        self.push(Tok::Dedent, self.pos, self.pos);
                    }
                    std::cmp::Ordering::Equal => break,
                    // Dedent to a level that was never opened.
                    std::cmp::Ordering::Greater => return None,
                }
            },
        }
        Some(at_end)
    }

    fn end_of_file(&mut self, at_line_start: bool) -> Option<()> {
        if self.nesting > 0 {
            return None;
        }
        let end = self.pos;
        if !at_line_start {
            self.push(Tok::Newline, end, end);
        }
        while self.indents.len() > 1 {
            self.indents.pop();
            self.push(Tok::Dedent, end, end);
        }
        // The reference lexer stops at its `EndOfFile` token without yielding it.
        Some(())
    }

    fn comment(&mut self) -> Option<()> {
        let start = self.pos;
        let end =
            memchr2(b'\n', b'\r', &self.bytes[start..]).map_or(self.bytes.len(), |i| start + i);
        let text = self.text.get(start..end)?.to_owned();
        self.pos = end;
        self.push(Tok::Comment(text), start, end);
        Some(())
    }

    fn name_or_prefixed_string(&mut self) -> Option<()> {
        let start = self.pos;
        let first = self.bytes[start];
        match (self.peek(1), self.peek(2)) {
            (Some(b'"' | b'\''), _) => {
                if let Some(kind) = one_char_prefix(first) {
                    return self.string(kind, 1);
                }
            }
            (Some(second), Some(b'"' | b'\'')) => {
                if let Some(kind) = two_char_prefix(first, second) {
                    return self.string(kind, 2);
                }
            }
            _ => {}
        }
        let len = self.bytes[start..]
            .iter()
            .position(|&b| !is_name_byte(b))
            .unwrap_or(self.bytes.len() - start);
        let end = start + len;
        if self.bytes.get(end).is_some_and(|b| !b.is_ascii()) {
            // A name that goes on with non-ASCII characters.
            return None;
        }
        let word = self.text.get(start..end)?;
        let tok = match keyword(word) {
            Some(tok) => {
                if matches!(tok, Tok::Match | Tok::Case | Tok::Type) {
                    self.soft_keywords = true;
                }
                tok
            }
            None => Tok::Name {
                name: word.to_owned(),
            },
        };
        self.pos = end;
        self.push(tok, start, end);
        Some(())
    }

    /// A string literal whose prefix (`prefix` bytes long) starts at the current position.
    fn string(&mut self, kind: StringKind, prefix: usize) -> Option<()> {
        let bytes = self.bytes;
        let start = self.pos;
        let quote = bytes[start + prefix];
        let mut i = start + prefix + 1;
        let triple = bytes.get(i) == Some(&quote) && bytes.get(i + 1) == Some(&quote);
        if triple {
            i += 2;
        }
        let content_start = i;
        let content_end = loop {
            let found = if triple {
                memchr2(quote, b'\\', &bytes[i..])?
            } else {
                memchr3(quote, b'\\', b'\n', &bytes[i..])?
            };
            i += found;
            match bytes[i] {
                b'\\' => {
                    // The escaped character is kept as written; a `\r\n` counts as one.
                    i += match (bytes.get(i + 1), bytes.get(i + 2)) {
                        (Some(b'\r'), Some(b'\n')) => 3,
                        (Some(_), _) => 2,
                        (None, _) => return None,
                    };
                }
                // A line end in a one-line string.
                b'\n' => return None,
                _ if !triple => {
                    let end = i;
                    i += 1;
                    break end;
                }
                _ if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) => {
                    let end = i;
                    i += 3;
                    break end;
                }
                _ => i += 1,
            }
        };
        let raw = self.text.get(content_start..content_end)?;
        let value = if memchr(b'\r', raw.as_bytes()).is_none() {
            raw.to_owned()
        } else if triple || only_escaped_carriage_returns(raw.as_bytes()) {
            normalize_line_ends(raw)
        } else {
            // A carriage return in a one-line string ends the line (an error) unless escaped.
            return None;
        };
        self.pos = i;
        self.push(
            Tok::String {
                value,
                kind,
                triple_quoted: triple,
            },
            start,
            i,
        );
        Some(())
    }

    /// A number starting at the current position (a digit, or `.` before a digit).
    fn number(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let start = self.pos;
        let radix = match (bytes[start], self.peek(1)) {
            (b'0', Some(b'x' | b'X')) => 16,
            (b'0', Some(b'o' | b'O')) => 8,
            (b'0', Some(b'b' | b'B')) => 2,
            _ => 10,
        };
        let (tok, end) = if radix == 10 {
            self.decimal_number(start)?
        } else {
            let end = digit_run(bytes, start + 2, radix);
            let value = int_value(&bytes[start + 2..end], radix)?;
            (Tok::Int { value }, end)
        };
        // `1if`, `0x1g`, `1_`, `0b12`: the reference splits these oddly or fails; leave them.
        if bytes
            .get(end)
            .is_some_and(|&b| is_name_byte(b) || !b.is_ascii())
        {
            return None;
        }
        self.pos = end;
        self.push(tok, start, end);
        Some(())
    }

    fn decimal_number(&self, start: usize) -> Option<(Tok, usize)> {
        let bytes = self.bytes;
        let int_end = digit_run(bytes, start, 10);
        let mut i = int_end;
        let is_float = bytes.get(i) == Some(&b'.') || at_exponent(bytes, i);
        if is_float {
            let mut text = String::with_capacity(16);
            push_digits(&mut text, &bytes[start..int_end]);
            if bytes.get(i) == Some(&b'.') {
                if bytes.get(i + 1) == Some(&b'_') {
                    return None;
                }
                text.push('.');
                let end = digit_run(bytes, i + 1, 10);
                push_digits(&mut text, &bytes[i + 1..end]);
                i = end;
            }
            if matches!(bytes.get(i), Some(b'e' | b'E')) {
                if bytes.get(i + 1) == Some(&b'_') {
                    return None;
                }
                text.push('e');
                i += 1;
                if let Some(&sign @ (b'+' | b'-')) = bytes.get(i) {
                    if bytes.get(i + 1) == Some(&b'_') {
                        return None;
                    }
                    text.push(char::from(sign));
                    i += 1;
                }
                let end = digit_run(bytes, i, 10);
                push_digits(&mut text, &bytes[i..end]);
                i = end;
            }
            let value: f64 = text.parse().ok()?;
            if matches!(bytes.get(i), Some(b'j' | b'J')) {
                Some((
                    Tok::Complex {
                        real: 0.0,
                        imag: value,
                    },
                    i + 1,
                ))
            } else {
                Some((Tok::Float { value }, i))
            }
        } else if matches!(bytes.get(i), Some(b'j' | b'J')) {
            let mut text = String::with_capacity(int_end - start);
            push_digits(&mut text, &bytes[start..int_end]);
            let imag: f64 = text.parse().ok()?;
            Some((Tok::Complex { real: 0.0, imag }, i + 1))
        } else {
            let digits = &bytes[start..int_end];
            // Leading zeros are allowed only in zero itself.
            if digits.first() == Some(&b'0') && digits.iter().any(|b| matches!(b, b'1'..=b'9')) {
                return None;
            }
            let value = int_value(digits, 10)?;
            i = int_end;
            Some((Tok::Int { value }, i))
        }
    }
}

/// The end of a run of digits of `radix` from `i`, where single underscores may separate
/// digits (an underscore not followed by a digit ends the run).
fn digit_run(bytes: &[u8], mut i: usize, radix: u32) -> usize {
    loop {
        match bytes.get(i) {
            Some(&b) if is_digit(b, radix) => i += 1,
            Some(b'_') if bytes.get(i + 1).is_some_and(|&b| is_digit(b, radix)) => i += 1,
            _ => return i,
        }
    }
}

fn is_digit(b: u8, radix: u32) -> bool {
    match radix {
        2 => matches!(b, b'0'..=b'1'),
        8 => matches!(b, b'0'..=b'7'),
        16 => b.is_ascii_hexdigit(),
        _ => b.is_ascii_digit(),
    }
}

fn at_exponent(bytes: &[u8], i: usize) -> bool {
    matches!(
        (bytes.get(i), bytes.get(i + 1), bytes.get(i + 2)),
        (Some(b'e' | b'E'), Some(b'+' | b'-'), Some(b'0'..=b'9'))
            | (Some(b'e' | b'E'), Some(b'0'..=b'9'), _)
    )
}

fn push_digits(text: &mut String, digits: &[u8]) {
    text.extend(
        digits
            .iter()
            .filter(|&&b| b != b'_')
            .map(|&b| char::from(b)),
    );
}

/// The value of a run of digits (underscores allowed); `None` when there are no digits.
fn int_value(digits: &[u8], radix: u32) -> Option<BigInt> {
    let mut small: u64 = 0;
    let mut any = false;
    for &b in digits {
        if b == b'_' {
            continue;
        }
        any = true;
        let digit = u64::from(char::from(b).to_digit(radix)?);
        let Some(next) = small
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(digit))
        else {
            // Too big for 64 bits.
            let clean: Vec<u8> = digits.iter().copied().filter(|&b| b != b'_').collect();
            return BigInt::parse_bytes(&clean, radix);
        };
        small = next;
    }
    any.then(|| BigInt::from(small))
}

/// Whether every carriage return in the body of a one-line string is escaped.
fn only_escaped_carriage_returns(raw: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'\\' if raw.get(i + 1) == Some(&b'\r') && raw.get(i + 2) == Some(&b'\n') => i += 3,
            b'\\' => i += 2,
            b'\r' => return false,
            _ => i += 1,
        }
    }
    true
}

/// Turn `\r\n` and lone `\r` into `\n`, as the reference lexer does inside strings.
fn normalize_line_ends(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\r') {
        out.push_str(&rest[..at]);
        out.push('\n');
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('\n') {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn one_char_prefix(c: u8) -> Option<StringKind> {
    match c {
        b'r' | b'R' => Some(StringKind::RawString),
        b'f' | b'F' => Some(StringKind::FString),
        b'u' | b'U' => Some(StringKind::Unicode),
        b'b' | b'B' => Some(StringKind::Bytes),
        _ => None,
    }
}

fn two_char_prefix(first: u8, second: u8) -> Option<StringKind> {
    match (first.to_ascii_lowercase(), second.to_ascii_lowercase()) {
        (b'r', b'f') | (b'f', b'r') => Some(StringKind::RawFString),
        (b'r', b'b') | (b'b', b'r') => Some(StringKind::RawBytes),
        _ => None,
    }
}

fn keyword(word: &str) -> Option<Tok> {
    Some(match word {
        "False" => Tok::False,
        "None" => Tok::None,
        "True" => Tok::True,
        "and" => Tok::And,
        "as" => Tok::As,
        "assert" => Tok::Assert,
        "async" => Tok::Async,
        "await" => Tok::Await,
        "break" => Tok::Break,
        "case" => Tok::Case,
        "class" => Tok::Class,
        "continue" => Tok::Continue,
        "def" => Tok::Def,
        "del" => Tok::Del,
        "elif" => Tok::Elif,
        "else" => Tok::Else,
        "except" => Tok::Except,
        "finally" => Tok::Finally,
        "for" => Tok::For,
        "from" => Tok::From,
        "global" => Tok::Global,
        "if" => Tok::If,
        "import" => Tok::Import,
        "in" => Tok::In,
        "is" => Tok::Is,
        "lambda" => Tok::Lambda,
        "match" => Tok::Match,
        "nonlocal" => Tok::Nonlocal,
        "not" => Tok::Not,
        "or" => Tok::Or,
        "pass" => Tok::Pass,
        "raise" => Tok::Raise,
        "return" => Tok::Return,
        "try" => Tok::Try,
        "type" => Tok::Type,
        "while" => Tok::While,
        "with" => Tok::With,
        "yield" => Tok::Yield,
        _ => return None,
    })
}

/// Turn `match`, `case` and `type` keyword tokens into names where they are not used as
/// keywords, with the parser crate's heuristics:
/// - `match` and `case` stay keywords only at the start of a logical line whose rest holds a
///   colon outside brackets that is neither the next token nor a lambda's colon;
/// - `type` stays a keyword only at the start of a logical line when a name (or soft keyword)
///   follows and then `=` outside square brackets, with only bracketed tokens between.
///
/// Comments and non-logical newlines do not change whether a token starts a line. The look
/// ahead always sees the tokens as lexed, never as already resolved.
fn resolve_soft_keywords(tokens: &mut [Spanned]) {
    let mut line_start = true;
    for i in 0..tokens.len() {
        let keep = match tokens[i].0 {
            Tok::Match | Tok::Case => line_start && match_or_case_is_keyword(&tokens[i + 1..]),
            Tok::Type => line_start && type_is_keyword(&tokens[i + 1..]),
            _ => true,
        };
        if !keep {
            let name = match tokens[i].0 {
                Tok::Match => "match",
                Tok::Case => "case",
                _ => "type",
            };
            tokens[i].0 = Tok::Name {
                name: name.to_owned(),
            };
        }
        line_start = match tokens[i].0 {
            Tok::NonLogicalNewline | Tok::Comment(_) => line_start,
            Tok::Newline | Tok::Indent | Tok::Dedent => true,
            _ => false,
        };
    }
}

fn match_or_case_is_keyword(rest: &[Spanned]) -> bool {
    let mut nesting: i64 = 0;
    let mut first = true;
    let mut seen_colon = false;
    let mut seen_lambda = false;
    for (tok, _) in rest {
        match tok {
            Tok::Newline => break,
            Tok::Lambda if nesting == 0 => seen_lambda = true,
            Tok::Colon if nesting == 0 => {
                if seen_lambda {
                    seen_lambda = false;
                } else if !first {
                    seen_colon = true;
                }
            }
            Tok::Lpar | Tok::Lsqb | Tok::Lbrace => nesting += 1,
            Tok::Rpar | Tok::Rsqb | Tok::Rbrace => nesting -= 1,
            _ => {}
        }
        first = false;
    }
    seen_colon
}

fn type_is_keyword(rest: &[Spanned]) -> bool {
    let Some((next, _)) = rest.first() else {
        return false;
    };
    if !matches!(next, Tok::Name { .. } | Tok::Type | Tok::Match | Tok::Case) {
        return false;
    }
    let mut nesting: i64 = 0;
    for (tok, _) in &rest[1..] {
        match tok {
            Tok::Newline => return false,
            Tok::Equal if nesting == 0 => return true,
            Tok::Lsqb => nesting += 1,
            Tok::Rsqb => nesting -= 1,
            _ if nesting > 0 => {}
            _ => return false,
        }
    }
    false
}
