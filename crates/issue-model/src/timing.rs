//! Time spent on an issue, from its history: the one measure every tool reports.

use crate::schema::{HistoryEntry, HistoryStatus};
use jiff::{SignedDuration, Timestamp};

/// Work time on one issue: a round starts when `--next` shows it (`shown`) or it comes back
/// (`reopened`, `regressed`) and ends at the `fixed`/`skipped` entry that follows; rounds are
/// summed, and a round whose clock went backwards counts as zero. `None` when no round is
/// complete (never shown, or not finished).
pub fn time_spent(history: &[HistoryEntry]) -> Option<SignedDuration> {
    let mut start: Option<Timestamp> = None;
    let mut total: Option<SignedDuration> = None;
    for entry in history {
        let Ok(at) = entry.at.parse::<Timestamp>() else {
            continue;
        };
        match entry.status {
            HistoryStatus::Shown | HistoryStatus::Reopened | HistoryStatus::Regressed => {
                start.get_or_insert(at);
            }
            HistoryStatus::Fixed | HistoryStatus::Skipped => {
                if let Some(began) = start.take() {
                    let spent = at.duration_since(began).max(SignedDuration::ZERO);
                    total = Some(total.unwrap_or(SignedDuration::ZERO) + spent);
                }
            }
            HistoryStatus::Found | HistoryStatus::Resolved => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(&str, HistoryStatus)]) -> Vec<HistoryEntry> {
        entries
            .iter()
            .map(|(at, status)| HistoryEntry {
                at: (*at).to_owned(),
                status: *status,
                note: None,
            })
            .collect()
    }

    #[test]
    fn rounds_are_summed_and_open_or_backward_rounds_do_not_count() {
        use HistoryStatus::{Fixed, Found, Regressed, Shown};
        assert_eq!(
            time_spent(&history(&[("2025-01-01T00:00:00Z", Found)])),
            None
        );
        let two_rounds = history(&[
            ("2025-01-01T00:00:00Z", Found),
            ("2025-01-01T00:01:00Z", Shown),
            ("2025-01-01T00:05:30Z", Fixed),
            ("2025-01-02T00:00:00Z", Regressed),
            ("2025-01-02T00:00:30Z", Fixed),
        ]);
        assert_eq!(
            time_spent(&two_rounds),
            Some(SignedDuration::from_secs(300))
        );
        let backwards = history(&[
            ("2025-01-01T00:05:00Z", Shown),
            ("2025-01-01T00:00:00Z", Fixed),
        ]);
        assert_eq!(time_spent(&backwards), Some(SignedDuration::ZERO));
        let open = history(&[("2025-01-01T00:05:00Z", Shown)]);
        assert_eq!(time_spent(&open), None);
    }
}
