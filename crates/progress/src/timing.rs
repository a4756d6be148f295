//! Time spent on issues, from their history: a round of work on an issue starts when `--next`
//! shows it (a `shown` entry) or it comes back (`reopened`, `regressed`), and ends when it is
//! marked fixed or skipped. The same measure as the adaptation summary of `npu-assets`.

use issue_model::{HistoryStatus, Issue};

/// Whether `--next` should record a `shown` entry: the issue was never shown, or it came back
/// (reopened, regressed) since it was last shown.
pub fn needs_shown(issue: &Issue) -> bool {
    for entry in issue.history.iter().rev() {
        match entry.status {
            HistoryStatus::Shown => return false,
            HistoryStatus::Reopened | HistoryStatus::Regressed => return true,
            _ => {}
        }
    }
    true
}

/// Seconds spent on `issue` (see [`issue_model::time_spent`]).
pub fn seconds_spent(issue: &Issue) -> Option<i64> {
    issue_model::time_spent(&issue.history).map(|spent| spent.as_secs())
}

/// `1h02m`, `4m30s`, `12s`.
pub fn human(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use issue_model::HistoryEntry;

    fn with_history(entries: &[(&str, HistoryStatus)]) -> Issue {
        let text = include_str!("../../issue-model/tests/golden/full.json");
        let file = issue_model::parse(std::path::Path::new("full.json"), text.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut issue = file.issues[0].clone();
        issue.history = entries
            .iter()
            .map(|(at, status)| HistoryEntry {
                at: (*at).to_owned(),
                status: *status,
                note: None,
            })
            .collect();
        issue
    }

    #[test]
    fn shown_is_recorded_once_and_again_after_a_reopen() {
        use HistoryStatus::{Found, Reopened, Shown};
        assert!(needs_shown(&with_history(&[(
            "2025-01-01T00:00:00Z",
            Found
        )])));
        assert!(!needs_shown(&with_history(&[
            ("2025-01-01T00:00:00Z", Found),
            ("2025-01-01T00:01:00Z", Shown),
        ])));
        assert!(needs_shown(&with_history(&[
            ("2025-01-01T00:01:00Z", Shown),
            ("2025-01-01T00:02:00Z", Reopened),
        ])));
    }

    #[test]
    fn time_is_the_sum_of_rounds() {
        use HistoryStatus::{Fixed, Found, Regressed, Shown, Skipped};
        assert_eq!(
            seconds_spent(&with_history(&[("2025-01-01T00:00:00Z", Found)])),
            None
        );
        let once = with_history(&[
            ("2025-01-01T00:00:00Z", Found),
            ("2025-01-01T00:01:00Z", Shown),
            ("2025-01-01T00:05:30Z", Fixed),
        ]);
        assert_eq!(seconds_spent(&once), Some(270));
        let twice = with_history(&[
            ("2025-01-01T00:01:00Z", Shown),
            ("2025-01-01T00:02:00Z", Fixed),
            ("2025-01-01T01:00:00Z", Regressed),
            ("2025-01-01T02:00:00Z", Shown),
            ("2025-01-01T02:00:10+00:00", Skipped),
        ]);
        // 60 s, then from the regression at 01:00 to the skip at 02:00:10.
        assert_eq!(seconds_spent(&twice), Some(60 + 3610));
        // Marked fixed without ever being shown: no measure.
        let unshown = with_history(&[
            ("2025-01-01T00:00:00Z", Found),
            ("2025-01-01T00:09:00Z", Fixed),
        ]);
        assert_eq!(seconds_spent(&unshown), None);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(12), "12s");
        assert_eq!(human(270), "4m30s");
        assert_eq!(human(3720), "1h02m");
    }
}
