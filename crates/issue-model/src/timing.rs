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
            HistoryStatus::Found | HistoryStatus::Resolved | HistoryStatus::OutOfScope => {}
        }
    }
    total
}
