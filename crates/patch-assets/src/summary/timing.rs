//! Time spent per issue, from its history.

use issue_model::{HistoryEntry, HistoryStatus};
use jiff::{SignedDuration, Timestamp};

pub use issue_model::time_spent;

/// The earliest time any entry with `status` was recorded.
pub fn first(
    histories: impl IntoIterator<Item = impl AsRef<[HistoryEntry]>>,
    wanted: &[HistoryStatus],
) -> Option<Timestamp> {
    extreme(histories, wanted, false)
}

/// The latest time any entry with `status` was recorded.
pub fn last(
    histories: impl IntoIterator<Item = impl AsRef<[HistoryEntry]>>,
    wanted: &[HistoryStatus],
) -> Option<Timestamp> {
    extreme(histories, wanted, true)
}

fn extreme(
    histories: impl IntoIterator<Item = impl AsRef<[HistoryEntry]>>,
    wanted: &[HistoryStatus],
    latest: bool,
) -> Option<Timestamp> {
    let times = histories.into_iter().flat_map(|h| {
        h.as_ref()
            .iter()
            .filter(|e| wanted.contains(&e.status))
            .filter_map(|e| e.at.parse::<Timestamp>().ok())
            .collect::<Vec<_>>()
    });
    if latest { times.max() } else { times.min() }
}

/// `45s`, `4m 05s`, `2h 07m`: short and readable in a table.
pub fn format_duration(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m {:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h {:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

/// A timestamp as shown in the summary: UTC, to the minute.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: &str, status: HistoryStatus) -> HistoryEntry {
        HistoryEntry {
            at: at.to_owned(),
            status,
            note: None,
        }
    }

    #[test]
    fn time_spent_sums_rounds_and_ignores_unpaired_entries() {
        let history = [
            entry("2026-01-01T10:00:00Z", HistoryStatus::Found),
            entry("2026-01-01T10:05:00Z", HistoryStatus::Shown),
            entry("2026-01-01T10:09:30Z", HistoryStatus::Fixed),
            entry("2026-01-01T11:00:00Z", HistoryStatus::Regressed),
            entry("2026-01-01T11:01:00Z", HistoryStatus::Fixed),
        ];
        assert_eq!(time_spent(&history), Some(SignedDuration::from_secs(330)));
        let unpaired = [
            entry("2026-01-01T10:00:00Z", HistoryStatus::Found),
            entry("2026-01-01T10:09:30Z", HistoryStatus::Fixed),
        ];
        assert_eq!(time_spent(&unpaired), None);
        let bad_time = [
            entry("yesterday", HistoryStatus::Shown),
            entry("2026-01-01T10:09:30Z", HistoryStatus::Skipped),
        ];
        assert_eq!(time_spent(&bad_time), None);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(format_duration(SignedDuration::from_secs(45)), "45s");
        assert_eq!(format_duration(SignedDuration::from_secs(245)), "4m 05s");
        assert_eq!(format_duration(SignedDuration::from_secs(7620)), "2h 07m");
    }

    #[test]
    fn first_and_last_over_many_histories() {
        let a = vec![entry("2026-01-01T10:05:00Z", HistoryStatus::Shown)];
        let b = vec![
            entry("2026-01-01T09:00:00Z", HistoryStatus::Shown),
            entry("2026-01-01T12:00:00Z", HistoryStatus::Fixed),
        ];
        let all = [a, b];
        assert_eq!(
            first(&all, &[HistoryStatus::Shown]).unwrap().to_string(),
            "2026-01-01T09:00:00Z"
        );
        assert_eq!(
            last(&all, &[HistoryStatus::Fixed, HistoryStatus::Skipped])
                .unwrap()
                .to_string(),
            "2026-01-01T12:00:00Z"
        );
    }
}
