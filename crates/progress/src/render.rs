//! Text rendering of issues, excerpts and tables. Commands decide what to show; this module
//! decides how it looks. JSON output is the domain types serialized, built in the commands.

use crate::excerpt::Excerpt;
use issue_model::{Issue, Severity, Status};
use std::fmt::Write as _;

/// ANSI styling, or none.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    pub fn new(color: bool) -> Style {
        Style { color }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn severity(self, severity: Severity) -> String {
        self.paint(severity_code(severity), severity.as_str())
    }

    pub fn status(self, status: Status) -> String {
        self.paint(status_code(status), status.as_str())
    }
}

fn severity_code(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "1;31",
        Severity::Warning => "1;33",
        Severity::Info => "1;36",
    }
}

fn status_code(status: Status) -> &'static str {
    match status {
        Status::Pending => "33",
        Status::Fixed => "32",
        Status::Skipped => "36",
        Status::OutOfScope => "2",
    }
}

/// `file:line:col`.
pub fn location(issue: &Issue) -> String {
    format!("{}:{}:{}", issue.file, issue.line, issue.column)
}

/// The head of an issue: id, severity, pattern, category, location, symbol, message.
pub fn head(style: Style, issue: &Issue) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}  {}  {}  {}{}",
        style.bold(&issue.id),
        style.severity(issue.severity),
        issue.pattern,
        issue.category,
        if issue.performance {
            "  performance"
        } else {
            ""
        }
    );
    let symbol = issue
        .symbol
        .as_deref()
        .map_or_else(|| "  (module level)".to_owned(), |s| format!("  in {s}"));
    let _ = writeln!(out, "{}{symbol}", style.bold(&location(issue)));
    if let Some(why) = &issue.blocking {
        let _ = writeln!(out, "{}: {why}", style.paint("1;31", "BLOCKING"));
    }
    let _ = writeln!(out, "{}", issue.message);
    out
}

/// The code excerpt with line numbers, the finding's lines marked with `>` and, for a
/// one-line finding, `^` under its columns.
pub fn excerpt(style: Style, excerpt: &Excerpt) -> String {
    let width = excerpt
        .lines
        .last()
        .map_or(1, |l| l.number.to_string().len());
    let mut out = String::new();
    for line in &excerpt.lines {
        let marker = if line.marked { ">" } else { " " };
        let number = format!("{:>width$}", line.number);
        let text = if line.marked {
            style.bold(&line.text)
        } else {
            line.text.clone()
        };
        let _ = writeln!(out, "  {marker} {} | {text}", style.dim(&number));
        if let Some((start, end)) = line.span {
            let _ = writeln!(
                out,
                "    {:width$} | {}",
                "",
                style.paint("1;31", &carets(&line.text, start, end))
            );
        }
    }
    out
}

/// Spaces up to column `start` (tabs kept so they line up), then `^` up to `end` (exclusive),
/// at least one and not past the end of the line.
fn carets(text: &str, start: u32, end: u32) -> String {
    let start = usize::try_from(start.max(1) - 1).unwrap_or(0);
    let end = usize::try_from(end).unwrap_or(0).saturating_sub(1);
    let chars = text.chars().count();
    let mut out: String = text
        .chars()
        .take(start)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let width = end.min(chars).saturating_sub(start).max(1);
    out.extend(std::iter::repeat_n('^', width));
    out
}

/// One line per issue, for lists, appended to `out`: id, status, severity, pattern, location,
/// message. Written in place: a list can have tens of thousands of lines.
pub fn row(out: &mut String, style: Style, issue: &Issue, id_width: usize) {
    let painted = |out: &mut String, code: &str, text: &str, width: usize| {
        if style.color {
            let _ = write!(out, "\x1b[{code}m{text}\x1b[0m");
        } else {
            out.push_str(text);
        }
        let fill = width.saturating_sub(text.chars().count());
        out.extend(std::iter::repeat_n(' ', fill));
    };
    painted(out, "1", &issue.id, id_width);
    out.push_str("  ");
    painted(out, status_code(issue.status), issue.status.as_str(), 7);
    out.push_str("  ");
    painted(
        out,
        severity_code(issue.severity),
        issue.severity.as_str(),
        7,
    );
    let _ = writeln!(
        out,
        "  {:<6}  {}:{}:{}  {}",
        issue.pattern,
        issue.file,
        issue.line,
        issue.column,
        first_line(&issue.message)
    );
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// A table with a header row; columns after the first are right-aligned.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (n, cell) in row.iter().enumerate().take(columns) {
            widths[n] = widths[n].max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut text = String::new();
        for (n, cell) in cells.iter().enumerate() {
            let w = widths[n];
            if n == 0 {
                let _ = write!(text, "{cell:<w$}");
            } else {
                let _ = write!(text, "  {cell:>w$}");
            }
        }
        text.trim_end().to_owned()
    };
    let mut out = line(header);
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carets_follow_tabs_and_stay_on_the_line() {
        assert_eq!(carets("x = torch.randn(3)", 5, 19), "    ^^^^^^^^^^^^^^");
        assert_eq!(carets("\tx = 1", 2, 3), "\t^");
        assert_eq!(carets("ab", 2, 99), " ^");
        assert_eq!(carets("ab", 9, 9), "  ^");
    }

    #[test]
    fn table_aligns_columns() {
        let text = table(
            &["pattern".to_owned(), "n".to_owned()],
            &[vec!["P_RND".to_owned(), "12".to_owned()]],
        );
        assert_eq!(text, "pattern   n\nP_RND    12\n");
    }

    #[test]
    fn no_color_means_plain_text() {
        let style = Style::new(false);
        assert_eq!(style.severity(Severity::Error), "error");
        assert!(Style::new(true).bold("x").contains("\x1b[1m"));
    }
}
