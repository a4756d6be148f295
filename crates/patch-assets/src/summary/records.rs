//! The other records the summary reads: the last verify report, the record of every verify run
//! and the training logs. All are read leniently: a record in an unexpected shape becomes a note
//! or is left out, never an error.

use jiff::Timestamp;
use serde_json::Value;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// One check of a verify report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: String,
    pub detail: String,
    /// The configuration it ran in (`configuration.label`: processes, emulated or not,
    /// versions), for runtime, pipeline and data checks.
    pub configuration: Option<String>,
    /// When it ran: `from_run` for a result kept from an earlier run, else the report's time.
    pub at: Option<String>,
    /// Its `data`, for the checks the summary shows more of (`parity.loss`, `parity.modules`).
    pub data: Option<Value>,
}

/// What the verify report said, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    Absent,
    Unreadable(String),
    Report {
        /// When it was written, if the report says.
        at: Option<String>,
        checks: Vec<Check>,
    },
}

/// Read `npu-verify`'s JSON report: top-level `checks: [{name, status, detail}]`.
pub fn read_verify(path: &Path) -> Verify {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Verify::Absent,
        Err(e) => return Verify::Unreadable(format!("cannot read it: {e}")),
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return Verify::Unreadable(format!("not valid JSON: {e}")),
    };
    let Some(list) = value.get("checks").and_then(Value::as_array) else {
        return Verify::Unreadable("it has no top-level `checks` list".to_owned());
    };
    let report_at = field(&value, &["generated_at"]);
    let checks = list
        .iter()
        .map(|c| Check {
            name: field(c, &["name", "id", "check"]).unwrap_or_else(|| "(unnamed)".to_owned()),
            status: field(c, &["status", "result", "outcome"])
                .unwrap_or_else(|| "?".to_owned())
                .to_lowercase(),
            detail: field(c, &["detail", "message", "remedy"]).unwrap_or_default(),
            configuration: c
                .get("configuration")
                .and_then(|v| v.get("label"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            at: field(c, &["from_run"]).or_else(|| report_at.clone()),
            data: c
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| n.starts_with("parity."))
                .and_then(|_| c.get("data").cloned()),
        })
        .collect();
    let at = field(
        &value,
        &[
            "finished_at",
            "generated_at",
            "created_at",
            "at",
            "timestamp",
        ],
    );
    Verify::Report { at, checks }
}

fn field(v: &Value, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| match v.get(*n)? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    })
}

/// When one run started and ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub started: Timestamp,
    pub finished: Timestamp,
}

impl Span {
    /// `at` falls in the span (with two seconds' slack for file-time granularity).
    pub fn contains(&self, at: Timestamp) -> bool {
        let slack = jiff::SignedDuration::from_secs(2);
        at >= self.started - slack && at <= self.finished + slack
    }
}

/// The training runs logged under `migrate_to_cloudrobo/logs/` by train.sh and npu-train.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    /// Log file names, sorted (the names sort by start time).
    pub logs: Vec<String>,
    /// `# started:` of the first log.
    pub first_started: Option<String>,
    /// `# exit code:` of the last log; `None` while running or when killed before writing it.
    pub last_exit: Option<String>,
    /// Each log's `# started:` line to its last write (the launcher's `# exit code:` footer),
    /// for the logs that have both.
    pub spans: Vec<Span>,
}

/// The `npu-verify` runs recorded in `migrate_to_cloudrobo/logs/verify-runs.jsonl`.
pub fn read_verify_runs(path: &Path) -> Vec<Span> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let record: Value = serde_json::from_str(line).ok()?;
            let at = |name: &str| record.get(name)?.as_str()?.parse::<Timestamp>().ok();
            let (started, finished) = (at("started_at")?, at("finished_at")?);
            (finished >= started).then_some(Span { started, finished })
        })
        .collect()
}

/// The header time train.sh and npu-train write: `2026-01-01T10:00:00+0000`.
fn parse_started(text: &str) -> Option<Timestamp> {
    jiff::fmt::strtime::parse("%Y-%m-%dT%H:%M:%S%z", text)
        .ok()?
        .to_timestamp()
        .ok()
        .or_else(|| text.parse().ok())
}

fn modified(path: &Path) -> Option<Timestamp> {
    let time = fs::metadata(path).ok()?.modified().ok()?;
    Timestamp::try_from(time).ok()
}

pub fn read_runs(logs_dir: &Path) -> Runs {
    let Ok(entries) = fs::read_dir(logs_dir) else {
        return Runs::default();
    };
    let mut logs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("train_") && Path::new(n).extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let first_started = logs
        .first()
        .and_then(|n| head(&logs_dir.join(n)))
        .and_then(|text| tagged(&text, "# started:"));
    let last_exit = logs
        .last()
        .and_then(|n| tail(&logs_dir.join(n)))
        .and_then(|text| tagged(&text, "# exit code:"));
    let spans = logs
        .iter()
        .filter_map(|n| {
            let path = logs_dir.join(n);
            let started = tagged(&head(&path)?, "# started:").and_then(|t| parse_started(&t))?;
            tagged(&tail(&path)?, "# exit code:")?;
            let finished = modified(&path)?;
            (finished >= started).then_some(Span { started, finished })
        })
        .collect();
    Runs {
        logs,
        first_started,
        last_exit,
        spans,
    }
}

fn tagged(text: &str, tag: &str) -> Option<String> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(tag))
        .map(|v| v.trim().to_owned())
}

fn head(path: &Path) -> Option<String> {
    let mut buf = vec![0; 4096];
    let n = fs::File::open(path).ok()?.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn tail(path: &Path) -> Option<String> {
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_report_is_read_leniently() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        assert_eq!(read_verify(&path), Verify::Absent);
        fs::write(&path, "{not json").unwrap();
        assert!(matches!(read_verify(&path), Verify::Unreadable(m) if m.contains("JSON")));
        fs::write(&path, r#"{"mode": "runtime"}"#).unwrap();
        assert!(matches!(read_verify(&path), Verify::Unreadable(m) if m.contains("checks")));
        fs::write(
            &path,
            r#"{"generated_at": "2026-01-01T00:00:00Z", "checks": [
                {"name": "torch_npu import", "status": "PASS", "detail": "2.6.0"},
                {"id": "bf16", "result": "fail", "remedy": {"hint": "use fp16"}},
                {}
            ]}"#,
        )
        .unwrap();
        let Verify::Report { at, checks } = read_verify(&path) else {
            panic!("expected a report");
        };
        assert_eq!(at.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(checks[0].status, "pass");
        assert_eq!(checks[1].name, "bf16");
        assert_eq!(checks[1].detail, r#"{"hint":"use fp16"}"#);
        assert_eq!(checks[2].name, "(unnamed)");
    }

    #[test]
    fn runs_come_from_log_headers_and_footers() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_runs(&dir.path().join("none")), Runs::default());
        fs::write(
            dir.path().join("train_20260101_100000.log"),
            "# command: python t.py\n# started: 2026-01-01T10:00:00+0000\nloss 1\n# exit code: 1\n",
        )
        .unwrap();
        fs::write(
            dir.path().join("train_20260101_110000.log"),
            "# command: python t.py\n# started: 2026-01-01T11:00:00+0000\nloss 0.5\n# exit code: 0\n",
        )
        .unwrap();
        fs::write(dir.path().join("other.txt"), "x").unwrap();
        let runs = read_runs(dir.path());
        assert_eq!(runs.logs.len(), 2);
        // Each run spans its start line to the log's last write (now, for these files).
        assert_eq!(runs.spans.len(), 2);
        assert_eq!(runs.spans[0].started.to_string(), "2026-01-01T10:00:00Z");
        assert!(runs.spans[0].finished > runs.spans[0].started);
        assert_eq!(
            runs.first_started.as_deref(),
            Some("2026-01-01T10:00:00+0000")
        );
        assert_eq!(runs.last_exit.as_deref(), Some("0"));
    }

    #[test]
    fn verify_runs_are_read_one_a_line_and_bad_lines_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verify-runs.jsonl");
        assert!(read_verify_runs(&path).is_empty());
        fs::write(
            &path,
            "{\"started_at\": \"2026-01-01T10:00:00Z\", \"finished_at\": \"2026-01-01T10:01:30Z\"}\nnot json\n\
             {\"started_at\": \"2026-01-01T11:00:00Z\"}\n",
        )
        .unwrap();
        let runs = read_verify_runs(&path);
        assert_eq!(runs.len(), 1);
        assert_eq!(
            runs[0].finished.duration_since(runs[0].started).as_secs(),
            90
        );
        assert!(runs[0].contains("2026-01-01T10:01:31Z".parse().unwrap()));
        assert!(!runs[0].contains("2026-01-01T10:05:00Z".parse().unwrap()));
    }
}
