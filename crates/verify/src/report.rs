//! The verify report: named checks with a status, a detail and a remedy, plus run metadata.
//!
//! `checks` is the stable part other tools read (the adaptation summary draft): every entry has
//! `name`, `status` (`pass` | `warn` | `fail` | `skip`), `detail` and `remedy`.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The report format version; bump only with an incompatible change.
pub const REPORT_VERSION: u32 = 1;

/// What the emulated device cannot tell (`EMULATOR-NOTES.md`, "What the emulator cannot tell you").
pub const EMULATION_LIMITS: &str = "results marked emulated ran on an emulated npu device on the CPU: they check \
control flow, devices and dtypes, not Ascend numerics, per-operator dtype/shape support beyond the documented \
cases, private formats, memory/OOM, streams, HCCL itself (the emulated hccl runs gloo on the host) or graph mode";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    /// Not run (not applicable here, or an earlier failure made it meaningless).
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Dotted, stable name: `static.migrate_dir`, `runtime.torch_npu`, `pipeline.loss`, …
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// What to do about a failure or warning.
    pub remedy: Option<String>,
    /// The result came from the emulated npu device.
    #[serde(default)]
    pub emulated: bool,
    /// Figures behind the detail (step times, shapes…), when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Set in `verify-report.json` on a check kept from an earlier run (its `generated_at`),
    /// because this run did not repeat that check group in that configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_run: Option<String>,
    /// Where a runtime, pipeline or data check ran (processes, emulated or not, versions);
    /// `verify-report.json` keeps the latest result of each check in each configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
}

/// The configuration a harness check ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    /// Processes (ranks) on this machine: 1, or N under torchrun.
    pub processes: u32,
    pub emulated: bool,
    /// `torch.__version__` of the interpreter, when the harness got that far.
    pub torch: Option<String>,
    /// `torch_npu.__version__` (emulated: the stand-in's, which names the release it pairs
    /// with), when the program imported it.
    pub torch_npu: Option<String>,
    /// `label()`, for readers of the JSON.
    pub label: String,
}

impl Configuration {
    pub fn new(
        processes: u32,
        emulated: bool,
        torch: Option<String>,
        torch_npu: Option<String>,
    ) -> Configuration {
        let mut label = if processes == 1 {
            "1 process".to_owned()
        } else {
            format!("{processes} processes under torchrun")
        };
        label.push_str(if emulated { ", emulated npu" } else { ", npu" });
        if let Some(torch) = &torch {
            let _ = write!(label, ", torch {torch}");
        }
        if let Some(npu) = &torch_npu {
            let _ = write!(label, ", torch-npu {npu}");
        }
        Configuration {
            processes,
            emulated,
            torch,
            torch_npu,
            label,
        }
    }

    /// The same processes, device and versions; a version one of them does not know (a run that
    /// died before it could tell) matches any.
    fn same(&self, other: &Configuration) -> bool {
        let version = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.processes == other.processes
            && self.emulated == other.emulated
            && version(&self.torch, &other.torch)
            && version(&self.torch_npu, &other.torch_npu)
    }
}

impl Check {
    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            status,
            detail: detail.into(),
            remedy: None,
            emulated: false,
            from_run: None,
            data: None,
            configuration: None,
        }
    }

    pub fn pass(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Pass, detail)
    }

    pub fn warn(name: &str, detail: impl Into<String>, remedy: impl Into<String>) -> Check {
        Check::new(name, Status::Warn, detail).with_remedy(remedy)
    }

    pub fn fail(name: &str, detail: impl Into<String>, remedy: impl Into<String>) -> Check {
        Check::new(name, Status::Fail, detail).with_remedy(remedy)
    }

    pub fn skip(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Skip, detail)
    }

    #[must_use]
    pub fn with_remedy(mut self, remedy: impl Into<String>) -> Check {
        self.remedy = Some(remedy.into());
        self
    }

    #[must_use]
    pub fn with_data(mut self, data: serde_json::Value) -> Check {
        self.data = Some(data);
        self
    }
}

/// Counts by status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
}

/// The interpreter the harness ran with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterpreterInfo {
    /// The command line prefix (`/env/bin/python`, or `conda run --no-capture-output -n NAME python`).
    pub command: Vec<String>,
    /// Where it was found: `--python`, `--conda-env`, `$CONDA_PREFIX`, `PATH`.
    pub source: String,
    /// The version the harness reported, once it ran.
    pub version: Option<String>,
}

/// The program run for `--pipeline` / `--data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The command as it would be typed in the project root (`python train.py --config …`).
    pub command: Vec<String>,
    /// How the entry was chosen (`--entry`, the launch command, or the entry-point search).
    pub chosen_by: String,
    /// The config passed, if any, and where it came from.
    pub config: Option<String>,
    pub config_source: Option<String>,
    /// The entry builds an optimizer and steps it (scan's facts), when the entry is a Python
    /// script scan reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trains: Option<bool>,
    /// The entry points the search weighed, best first, each with why (`file: reason`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub considered: Vec<String>,
}

/// One harness process: what it took and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessRunInfo {
    pub mode: String,
    /// Wall time of the whole process, seconds.
    pub wall_s: f64,
    /// Exit code, or `None` when killed by a signal or by the timeout.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Timing facts the harness reported (torch import, program start, program time, …).
    pub timing: serde_json::Map<String, serde_json::Value>,
    /// The last lines it printed, when it or the program's run failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// Its whole output, kept in the project (`migrate_to_cloudrobo/logs/verify_…_<mode>.log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// What this run created in the project and verify moved aside before the next run of the
    /// same call (`--pipeline --data`), where it now is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_aside: Vec<String>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub report_version: u32,
    pub tool: Tool,
    /// The project path as given.
    pub project: String,
    /// RFC 3339 time of the run.
    pub generated_at: String,
    /// Which check groups ran: `static`, `runtime`, `pipeline`, `data`.
    pub modes: Vec<String>,
    pub emulated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulation_limits: Option<String>,
    pub interpreter: Option<InterpreterInfo>,
    pub entry: Option<EntryInfo>,
    pub summary: Counts,
    /// `true` when verify could not run what was asked (exit code 2).
    pub incomplete: bool,
    pub checks: Vec<Check>,
    pub harness_runs: Vec<HarnessRunInfo>,
    /// The project files the pipeline run executed (`entry`, `files`), as the harness read
    /// them; written to `scan::scope::EXECUTED_FILE`, not to the report.
    #[serde(skip)]
    pub executed: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Report {
    pub fn new(project: &str, modes: Vec<String>, emulated: bool) -> Report {
        Report {
            report_version: REPORT_VERSION,
            tool: Tool {
                name: "npu-verify".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            project: project.to_owned(),
            generated_at: issue_model::now_rfc3339(),
            modes,
            emulated,
            emulation_limits: emulated.then(|| EMULATION_LIMITS.to_owned()),
            interpreter: None,
            entry: None,
            summary: Counts::default(),
            incomplete: false,
            checks: Vec::new(),
            harness_runs: Vec::new(),
            executed: None,
        }
    }

    /// Recount `summary` from `checks`.
    pub fn finish(&mut self) {
        let mut counts = Counts::default();
        for check in &self.checks {
            match check.status {
                Status::Pass => counts.pass += 1,
                Status::Warn => counts.warn += 1,
                Status::Fail => counts.fail += 1,
                Status::Skip => counts.skip += 1,
            }
        }
        self.summary = counts;
    }

    /// This report plus, from `previous`, the checks of each group this run did not repeat in
    /// their configuration, so that `verify-report.json` holds the latest result of every check
    /// in every configuration (`--runtime --pipeline` in one run and `--data` in the next both
    /// stay on record, and so do a one-process and a two-rank pipeline run). Kept checks carry
    /// `from_run`. A kept check without a configuration (an older report) goes when its group
    /// runs again in any configuration.
    #[must_use]
    pub fn with_previous(&self, previous: &Report) -> Report {
        let mut merged = self.clone();
        if previous.project != self.project {
            return merged;
        }
        let group = |name: &str| name.split('.').next().unwrap_or(name).to_owned();
        let ran: Vec<(String, Option<&Configuration>)> = self
            .checks
            .iter()
            .map(|c| (group(&c.name), c.configuration.as_ref()))
            .collect();
        for check in &previous.checks {
            let g = group(&check.name);
            if g == "static" || g == "entry" || !previous.modes.contains(&g) {
                continue;
            }
            let repeated = ran.iter().any(|(rg, rc)| {
                *rg == g
                    && match (&check.configuration, rc) {
                        (Some(old), Some(new)) => old.same(new),
                        (Some(_), None) => false,
                        (None, _) => true,
                    }
            });
            if repeated || (check.configuration.is_none() && self.modes.contains(&g)) {
                continue;
            }
            let mut check = check.clone();
            check
                .from_run
                .get_or_insert_with(|| previous.generated_at.clone());
            merged.checks.push(check);
            if !merged.modes.contains(&g) {
                merged.modes.push(g);
            }
        }
        merged.finish();
        merged
    }

    /// 0 all passed (warnings allowed), 1 a check failed, 2 verify could not run.
    /// [`Report::exit_code`] over the checks whose names start with `prefix`.
    pub fn exit_code_of(&self, prefix: &str) -> i32 {
        if self.incomplete {
            return 2;
        }
        i32::from(
            self.checks
                .iter()
                .any(|c| c.name.starts_with(prefix) && c.status == Status::Fail),
        )
    }

    pub fn exit_code(&self) -> i32 {
        if self.incomplete {
            return 2;
        }
        i32::from(self.checks.iter().any(|c| c.status == Status::Fail))
    }

    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            // Every field is a string, number, bool, list or string-keyed map: serialization cannot fail.
            unreachable!("verify report serialization failed: {e}")
        });
        text.push('\n');
        text
    }

    /// The table for people: one line per check, the remedy under each failure or warning.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let width = self
            .checks
            .iter()
            .map(|c| c.name.len() + if c.emulated { 2 } else { 0 })
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, "{:<6} {:<width$}  DETAIL", "STATUS", "CHECK");
        for check in &self.checks {
            let status = match check.status {
                Status::Fail => "FAIL",
                Status::Warn => "warn",
                Status::Pass => "pass",
                Status::Skip => "skip",
            };
            let name = if check.emulated {
                format!("{} *", check.name)
            } else {
                check.name.clone()
            };
            let _ = writeln!(
                out,
                "{status:<6} {name:<width$}  {}",
                one_line(check.detail.lines().next().unwrap_or(""))
            );
            // Program output quoted in the detail keeps its lines.
            for line in check.detail.lines().skip(1) {
                let _ = writeln!(out, "{:<6} {:<width$}  | {}", "", "", line.trim_end());
            }
            // A failed run's traceback: the place in the user's code and the error.
            let traceback = check
                .data
                .as_ref()
                .and_then(|d| d.get("traceback"))
                .and_then(serde_json::Value::as_str);
            if let (Status::Fail, Some(traceback)) = (check.status, traceback) {
                for line in traceback.lines() {
                    let _ = writeln!(out, "{:<6} {:<width$}  | {}", "", "", line.trim_end());
                }
            }
            if let (Status::Fail | Status::Warn, Some(remedy)) = (check.status, &check.remedy) {
                let _ = writeln!(out, "{:<6} {:<width$}  fix: {}", "", "", one_line(remedy));
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{} checks: {} pass, {} warn, {} fail, {} skip",
            self.checks.len(),
            s.pass,
            s.warn,
            s.fail,
            s.skip
        );
        if self.emulated {
            let _ = writeln!(out, "* {EMULATION_LIMITS}");
        }
        if self.incomplete {
            let _ = writeln!(
                out,
                "verify could not run every check it was asked for (see the failures and emulator limitations above)"
            );
        }
        out
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_groups_not_rerun_are_kept_with_their_run_time() {
        let mut first = Report::new("demo", vec!["static".into(), "pipeline".into()], true);
        first.generated_at = "2026-01-01T00:00:00Z".into();
        first.checks.push(Check::pass("static.migrate_dir", "ok"));
        first.checks.push(Check::pass("pipeline.loss", "finite"));
        first.finish();
        let mut second = Report::new("demo", vec!["static".into(), "data".into()], true);
        second.checks.push(Check::pass("static.migrate_dir", "ok"));
        second
            .checks
            .push(Check::fail("data.batches", "NaN", "fix the dataset"));
        second.finish();

        let merged = second.with_previous(&first);
        let names: Vec<&str> = merged.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["static.migrate_dir", "data.batches", "pipeline.loss"]
        );
        assert_eq!(
            merged.checks[2].from_run.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(merged.modes, ["static", "data", "pipeline"]);
        assert_eq!((merged.summary.pass, merged.summary.fail), (2, 1));

        // A group that ran again replaces the old one; another project's report is ignored.
        let rerun = first.with_previous(&merged);
        assert_eq!(
            rerun
                .checks
                .iter()
                .filter(|c| c.name == "pipeline.loss")
                .count(),
            1
        );
        let mut other = first.clone();
        other.project = "elsewhere".into();
        assert_eq!(second.with_previous(&other), second);
    }

    #[test]
    fn each_configuration_keeps_its_latest_result() {
        let one = Configuration::new(1, true, Some("2.6.0".into()), Some("2.6.0.post5".into()));
        let two = Configuration::new(2, true, Some("2.6.0".into()), Some("2.6.0.post5".into()));
        assert_eq!(
            two.label,
            "2 processes under torchrun, emulated npu, torch 2.6.0, torch-npu 2.6.0.post5"
        );
        let run = |at: &str, modes: &[&str], checks: Vec<(&str, Status, &Configuration)>| {
            let mut report = Report::new(
                "demo",
                modes.iter().map(|m| (*m).to_owned()).collect(),
                true,
            );
            report.generated_at = at.into();
            for (name, status, configuration) in checks {
                let mut check = Check::new(name, status, "d");
                check.configuration = Some(configuration.clone());
                report.checks.push(check);
            }
            report.finish();
            report
        };
        let first = run(
            "2026-01-01T00:00:00Z",
            &["static", "pipeline", "data"],
            vec![
                ("pipeline.run", Status::Pass, &one),
                ("data.run", Status::Pass, &one),
            ],
        );
        // A two-rank pipeline run keeps the one-process results of both groups.
        let second = run(
            "2026-01-02T00:00:00Z",
            &["static", "pipeline"],
            vec![("pipeline.run", Status::Fail, &two)],
        );
        let merged = second.with_previous(&first);
        let seen: Vec<(&str, &str, Option<&str>)> = merged
            .checks
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.configuration.as_ref().unwrap().label.as_str(),
                    c.from_run.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("pipeline.run", two.label.as_str(), None),
                (
                    "pipeline.run",
                    one.label.as_str(),
                    Some("2026-01-01T00:00:00Z")
                ),
                ("data.run", one.label.as_str(), Some("2026-01-01T00:00:00Z")),
            ]
        );
        assert_eq!(merged.exit_code(), 1);
        assert_eq!(second.exit_code(), 1);
        // The one-process pipeline run again replaces only its own result.
        let third = run(
            "2026-01-03T00:00:00Z",
            &["static", "pipeline"],
            vec![("pipeline.run", Status::Pass, &one)],
        );
        let merged = third.with_previous(&merged);
        let runs: Vec<(&str, Status, Option<&str>)> = merged
            .checks
            .iter()
            .filter(|c| c.name == "pipeline.run")
            .map(|c| {
                (
                    c.configuration.as_ref().unwrap().label.as_str(),
                    c.status,
                    c.from_run.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            runs,
            [
                (one.label.as_str(), Status::Pass, None),
                (
                    two.label.as_str(),
                    Status::Fail,
                    Some("2026-01-02T00:00:00Z")
                ),
            ]
        );
        assert_eq!(merged.checks.len(), 3);
        // Another torch is another configuration.
        let newer = Configuration::new(1, true, Some("2.7.1".into()), Some("2.7.1".into()));
        let fourth = run(
            "2026-01-04T00:00:00Z",
            &["static", "data"],
            vec![("data.run", Status::Pass, &newer)],
        );
        assert_eq!(
            fourth
                .with_previous(&merged)
                .checks
                .iter()
                .filter(|c| c.name == "data.run")
                .count(),
            2
        );
    }

    #[test]
    fn a_run_that_could_not_tell_its_versions_replaces_the_result_of_its_configuration() {
        let known = Configuration::new(1, true, Some("2.6.0".into()), Some("2.6.0.post5".into()));
        let died = Configuration::new(1, true, Some("2.6.0".into()), None);
        let with = |configuration: &Configuration, status: Status, at: &str| {
            let mut report = Report::new("demo", vec!["static".into(), "pipeline".into()], true);
            report.generated_at = at.into();
            let mut check = Check::new("pipeline.run", status, "d");
            check.configuration = Some(configuration.clone());
            report.checks.push(check);
            report.finish();
            report
        };
        let first = with(&known, Status::Pass, "2026-01-01T00:00:00Z");
        let merged = with(&died, Status::Fail, "2026-01-02T00:00:00Z").with_previous(&first);
        assert_eq!(merged.checks.len(), 1);
        assert_eq!(merged.checks[0].status, Status::Fail);
    }

    #[test]
    fn exit_code_follows_the_worst_status() {
        let mut report = Report::new("p", vec!["static".into()], false);
        report.checks.push(Check::pass("a", "ok"));
        report.checks.push(Check::warn("b", "meh", "do x"));
        assert_eq!(report.exit_code(), 0);
        report.checks.push(Check::fail("c", "bad", "do y"));
        assert_eq!(report.exit_code(), 1);
        report.incomplete = true;
        assert_eq!(report.exit_code(), 2);
    }

    #[test]
    fn text_shows_remedies_only_for_problems() {
        let mut report = Report::new("p", vec!["static".into()], true);
        report
            .checks
            .push(Check::pass("a", "fine").with_remedy("never shown"));
        let mut failed = Check::fail("pipeline.run", "broke", "fix it");
        failed.emulated = true;
        report.checks.push(failed);
        report.finish();
        let text = report.to_text();
        assert!(text.contains("FAIL   pipeline.run *"), "{text}");
        assert!(text.contains("fix: fix it"), "{text}");
        assert!(!text.contains("never shown"), "{text}");
        assert!(
            text.contains("2 checks: 1 pass, 0 warn, 1 fail, 0 skip"),
            "{text}"
        );
        assert!(text.contains("emulated npu device"), "{text}");
        report.checks.push(Check::fail(
            "x.harness",
            "it died; it printed last:\nline one\n  line two",
            "r",
        ));
        let text = report.to_text();
        assert!(text.contains("it died; it printed last:\n"), "{text}");
        assert!(text.contains("| line one\n"), "{text}");
        assert!(text.contains("|   line two\n"), "{text}");
    }

    #[test]
    fn json_has_checks_with_the_four_fields() {
        let mut report = Report::new("p", vec!["static".into()], false);
        report.checks.push(Check::fail("x", "d", "r"));
        report.finish();
        let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let check = &value["checks"][0];
        assert_eq!(check["name"], "x");
        assert_eq!(check["status"], "fail");
        assert_eq!(check["detail"], "d");
        assert_eq!(check["remedy"], "r");
        assert_eq!(value["summary"]["fail"], 1);
    }
}
