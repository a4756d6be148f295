//! The text side of the step graph's reader: brackets, calls and the blanking of strings
//! and comments, line by line.

use super::{Call, NOT_CALLS};

pub(super) fn brackets(code: &str) -> i32 {
    code.bytes()
        .map(|b| match b {
            b'(' | b'[' | b'{' => 1,
            b')' | b']' | b'}' => -1,
            _ => 0,
        })
        .sum()
}

/// The calls of a line of code: identifiers followed by `(`.
pub(super) fn calls_of(code: &str, out: &mut Vec<Call>) {
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphabetic() || b == b'_') || (i > 0 && is_ident_byte(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_ident_byte(bytes[i]) {
            i += 1;
        }
        let name = &code[start..i];
        let mut j = i;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if j >= bytes.len() || bytes[j] != b'(' || NOT_CALLS.contains(&name) {
            continue;
        }
        let before = &code[..start];
        // A name called again in the same function adds no edge (checked before a `Call`
        // is built: most calls repeat).
        if let Some(recv) = before.strip_suffix('.') {
            if recv.ends_with("self") && !recv.ends_with("_self") && !is_ident_before(recv, 4) {
                push_new(
                    out,
                    |call| matches!(call, Call::SelfMethod(called) if called == name),
                    || Call::SelfMethod(name.to_owned()),
                );
            } else {
                let alias_start = recv
                    .bytes()
                    .rposition(|b| !is_ident_byte(b))
                    .map_or(0, |p| p + 1);
                let alias = &recv[alias_start..];
                let bare = alias_start == 0 || recv.as_bytes()[alias_start - 1] != b'.';
                if bare && !alias.is_empty() && !alias.as_bytes()[0].is_ascii_digit() {
                    push_new(
                        out,
                        |call| matches!(call, Call::Module(module, called) if module == alias && called == name),
                        || Call::Module(alias.to_owned(), name.to_owned()),
                    );
                }
                push_new(
                    out,
                    |call| matches!(call, Call::Attr(called) if called == name),
                    || Call::Attr(name.to_owned()),
                );
            }
        } else {
            push_new(
                out,
                |call| matches!(call, Call::Bare(called) if called == name),
                || Call::Bare(name.to_owned()),
            );
        }
    }
}

/// Push the call `make` builds unless one of the last 32 calls is `same`.
fn push_new(out: &mut Vec<Call>, same: impl Fn(&Call) -> bool, make: impl FnOnce() -> Call) {
    if !out.iter().rev().take(32).any(same) {
        out.push(make());
    }
}

/// The byte before the last `n` bytes of `s` continues an identifier (`myself`).
fn is_ident_before(s: &str, n: usize) -> bool {
    s.len() > n && is_ident_byte(s.as_bytes()[s.len() - n - 1])
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Blanks strings and comments out of source lines, carrying triple-quoted strings across
/// lines.
#[derive(Default)]
pub(super) struct Blank {
    triple: Option<u8>,
}

impl Blank {
    pub(super) fn in_triple(&self) -> bool {
        self.triple.is_some()
    }

    pub(super) fn line(&mut self, raw: &str, out: &mut String) {
        let bytes = raw.as_bytes();
        out.clear();
        let mut i = 0;
        while i < bytes.len() {
            if let Some(q) = self.triple {
                // Blank up to and through the closing quotes, or the rest of the line.
                let close = memchr::memmem::find(&bytes[i..], &[q; 3]);
                let end = close.map_or(bytes.len(), |at| i + at + 3);
                out.extend(std::iter::repeat_n(' ', end - i));
                if close.is_some() {
                    self.triple = None;
                }
                i = end;
                continue;
            }
            let b = bytes[i];
            match b {
                b'#' => break,
                b'"' | b'\'' => {
                    if bytes.get(i + 1) == Some(&b) && bytes.get(i + 2) == Some(&b) {
                        self.triple = Some(b);
                        out.push_str("   ");
                        i += 3;
                        continue;
                    }
                    // A one-line string: up to its closing quote.
                    out.push(' ');
                    i += 1;
                    while i < bytes.len() && bytes[i] != b {
                        if bytes[i] == b'\\' {
                            i += 1;
                        }
                        i += 1;
                        out.push(' ');
                    }
                    i += 1;
                    out.push(' ');
                }
                _ if b.is_ascii() => {
                    // A run of plain ASCII code is copied whole.
                    let end = bytes[i..]
                        .iter()
                        .position(|&c| matches!(c, b'#' | b'"' | b'\'') || !c.is_ascii())
                        .map_or(bytes.len(), |p| i + p);
                    out.push_str(&raw[i..end]);
                    i = end;
                }
                _ => {
                    out.push(' ');
                    i += 1;
                }
            }
        }
    }
}
