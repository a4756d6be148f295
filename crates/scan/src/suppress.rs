//! Inline suppressions: `# npu: ignore[P_RND] reason` on a finding's line, and
//! `# npu: ignore-file[P_RND] reason` anywhere in a file (by convention near the top).
//!
//! Several ids may be listed (`[P_RND, P_DEV]`). A bare `# npu: ignore` without ids suppresses
//! every rule on its line. Ids that name no rule are reported so that a typo does not
//! silently suppress nothing.

use regex::Regex;
use std::collections::HashMap;
use std::sync::LazyLock;

static DIRECTIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"#\s*npu:\s*(ignore-file|ignore)\b(?:\[([^\]]*)\])?").unwrap_or_else(|e| {
        unreachable!("the suppression pattern is a valid regex: {e}");
    })
});

/// Which rules are suppressed where in one file.
#[derive(Debug, Clone, Default)]
pub struct Suppressions {
    /// Line → ids suppressed there (`None`: every rule).
    lines: HashMap<u32, Option<Vec<String>>>,
    /// Line → the reason its directives give (the text after them), when one does.
    line_reasons: HashMap<u32, String>,
    /// Ids suppressed in the whole file (`None` entry: every rule), with the directive's reason
    /// and line.
    file: Vec<(Option<Vec<String>>, String, u32)>,
    /// Unknown ids: (line, column, id).
    pub unknown: Vec<(u32, u32, String)>,
    /// Directives with an unclosed `[`: (line, column). They suppress nothing.
    pub malformed: Vec<(u32, u32)>,
}

impl Suppressions {
    /// Parse the directives in `comments`: (line, 1-based column of the comment, text).
    pub fn parse<'c>(
        comments: impl IntoIterator<Item = (u32, u32, &'c str)>,
        is_known: impl Fn(&str) -> bool,
    ) -> Suppressions {
        let mut out = Suppressions::default();
        for (line, column, text) in comments {
            if !text.contains("npu:") {
                continue;
            }
            let Some(caps) = DIRECTIVE.captures(text) else {
                continue;
            };
            let end = caps.get(0).map_or(0, |m| m.end());
            if caps.get(2).is_none() && text[end..].starts_with('[') {
                out.malformed.push((line, column));
                continue;
            }
            let ids: Option<Vec<String>> = caps.get(2).map(|m| {
                m.as_str()
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            });
            if let Some(ids) = &ids {
                for id in ids {
                    if !is_known(id) {
                        out.unknown.push((line, column, id.clone()));
                    }
                }
            }
            let reason = text[end..]
                .trim()
                .trim_start_matches([':', '-', '—'])
                .trim()
                .to_owned();
            if caps.get(1).is_some_and(|m| m.as_str() == "ignore-file") {
                out.file.push((ids, reason, line));
            } else {
                if !reason.is_empty() {
                    out.line_reasons.entry(line).or_insert(reason);
                }
                match (out.lines.get_mut(&line), ids) {
                    (Some(Some(existing)), Some(ids)) => existing.extend(ids),
                    (Some(slot), None) => *slot = None,
                    (Some(None), Some(_)) => {}
                    (None, ids) => {
                        out.lines.insert(line, ids);
                    }
                }
            }
        }
        out
    }

    /// Directives found in the `#` comments of a config file's lines (YAML/TOML).
    pub fn parse_config_text(text: &str, is_known: impl Fn(&str) -> bool) -> Suppressions {
        let comments = text.lines().enumerate().filter_map(|(i, line)| {
            let at = line.find('#')?;
            let line_no = u32::try_from(i + 1).ok()?;
            let column = u32::try_from(line[..at].chars().count() + 1).ok()?;
            Some((line_no, column, &line[at..]))
        });
        Suppressions::parse(comments, is_known)
    }

    /// Is `rule` suppressed for a finding spanning `line..=end_line` (a directive on its first
    /// or last line counts)?
    pub fn is_suppressed(&self, rule: &str, line: u32, end_line: u32) -> bool {
        self.reason(rule, line, end_line).is_some()
    }

    /// When `rule` is suppressed for a finding spanning `line..=end_line`: the skip reason to
    /// record, which starts with [`issue_model::INLINE_IGNORE`] and quotes the comment's reason
    /// (or says that it gives none).
    pub fn reason(&self, rule: &str, line: u32, end_line: u32) -> Option<String> {
        let matches = |ids: &Option<Vec<String>>| {
            ids.as_ref().is_none_or(|ids| ids.iter().any(|i| i == rule))
        };
        let (why, at, kind) =
            if let Some((_, why, at)) = self.file.iter().find(|(ids, _, _)| matches(ids)) {
                (why.as_str(), *at, "ignore-file")
            } else {
                let at = [line, end_line]
                    .into_iter()
                    .find(|l| self.lines.get(l).is_some_and(matches))?;
                let why = self.line_reasons.get(&at).map_or("", String::as_str);
                (why, at, "ignore")
            };
        let inline = issue_model::INLINE_IGNORE;
        Some(if why.is_empty() {
            format!("{inline} no reason given (`# npu: {kind}` comment on line {at})")
        } else {
            format!("{inline} {why} (`# npu: {kind}` comment on line {at})")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(id: &str) -> bool {
        matches!(id, "P_RND" | "P_DEV" | "P_LTM")
    }

    #[test]
    fn line_file_and_unknown() {
        let s = Suppressions::parse(
            [
                (
                    1,
                    1,
                    "# npu: ignore-file[P_LTM] legacy trainer kept on purpose",
                ),
                (5, 20, "# npu: ignore[P_RND, P_DEV] seeded on cpu"),
                (7, 9, "#npu:ignore"),
                (9, 3, "# npu: ignore[P_RDN]"),
                (10, 3, "# npu: ignore[P_RND"),
                (11, 1, "# not a directive: npu ignore"),
            ],
            known,
        );
        assert!(s.is_suppressed("P_LTM", 40, 40));
        assert!(s.is_suppressed("P_RND", 5, 5));
        assert!(s.is_suppressed("P_DEV", 3, 5));
        assert!(!s.is_suppressed("P_FLA", 5, 5));
        assert!(s.is_suppressed("P_FLA", 7, 7));
        assert!(!s.is_suppressed("P_RND", 11, 11));
        assert_eq!(s.unknown, vec![(9, 3, "P_RDN".to_owned())]);
        assert!(!s.is_suppressed("P_FLA", 10, 10));
        assert_eq!(s.malformed, vec![(10, 3)]);
        assert_eq!(
            s.reason("P_DEV", 5, 5).as_deref(),
            Some("ignored inline: seeded on cpu (`# npu: ignore` comment on line 5)")
        );
        assert_eq!(
            s.reason("P_LTM", 40, 40).as_deref(),
            Some(
                "ignored inline: legacy trainer kept on purpose (`# npu: ignore-file` comment on line 1)"
            )
        );
        assert_eq!(
            s.reason("P_FLA", 7, 7).as_deref(),
            Some("ignored inline: no reason given (`# npu: ignore` comment on line 7)")
        );
        assert_eq!(s.reason("P_FLA", 5, 5), None);
    }

    #[test]
    fn config_comments() {
        let s = Suppressions::parse_config_text(
            "trainer:\n  accelerator: gpu  # npu: ignore[P_CFG] overridden by launcher\n",
            |id| id == "P_CFG",
        );
        assert!(s.is_suppressed("P_CFG", 2, 2));
        assert!(!s.is_suppressed("P_CFG", 1, 1));
    }
}
