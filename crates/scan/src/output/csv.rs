//! CSV in msFmkTransplt's columns (`File, Start Line, End Line, OP, Tips`), so users can diff
//! our findings against its reports.

use issue_model::Issue;
use std::fmt::Write;

/// Quote a field when it holds a comma, quote or line break (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The findings as CSV: OP is the pattern id, Tips the message and the fix template.
pub fn render(issues: &[Issue]) -> String {
    let mut out = String::from("File,Start Line,End Line,OP,Tips\n");
    for i in issues {
        let tips = format!("{} (see {})", i.message, i.fix_template);
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            field(&i.file),
            i.line,
            i.end_line,
            field(&i.pattern),
            field(&tips)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_fields() {
        assert_eq!(super::field("a,b"), "\"a,b\"");
        assert_eq!(super::field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(super::field("plain"), "plain");
    }
}
