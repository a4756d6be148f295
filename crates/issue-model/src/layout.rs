//! The on-disk layout of `issues.json`: the top two levels indented, everything deeper on one
//! line, so each issue is one line. A rescan or a status change then shows up in a diff as the
//! lines of the issues it touched, and a large file stays small and quick to read and write.

use serde_json::ser::Formatter;
use std::io::{self, Write};

/// Containers nested this deep or less put each member on its own line.
const INDENTED_DEPTH: usize = 2;
const INDENT: &[u8] = b"  ";

/// A `serde_json` formatter for the layout above.
#[derive(Debug, Default)]
pub struct Layout {
    depth: usize,
    has_value: bool,
}

impl Layout {
    fn indented(&self) -> bool {
        self.depth <= INDENTED_DEPTH
    }

    fn begin_member<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if self.indented() {
            writer.write_all(if first { b"\n" } else { b",\n" })?;
            for _ in 0..self.depth {
                writer.write_all(INDENT)?;
            }
            Ok(())
        } else if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn end_container<W: ?Sized + Write>(&mut self, writer: &mut W, close: &[u8]) -> io::Result<()> {
        let was_indented = self.indented();
        self.depth -= 1;
        if was_indented && self.has_value {
            writer.write_all(b"\n")?;
            for _ in 0..self.depth {
                writer.write_all(INDENT)?;
            }
        }
        writer.write_all(close)
    }
}

impl Formatter for Layout {
    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.end_container(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.begin_member(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.end_container(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.begin_member(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Write `value` in the layout above.
pub fn write<W: Write>(writer: W, value: &impl serde::Serialize) -> io::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, Layout::default());
    value.serialize(&mut serializer).map_err(io::Error::from)
}
