//! Shared helpers of the binary tests: a temp dir with a project and an issues.json in it.

#![allow(dead_code)]

use assert_cmd::Command;
use issue_model::{
    Category, HistoryEntry, HistoryStatus, Issue, IssuesFile, Severity, Status, Summary, Tool,
};
use std::fs;
use std::path::{Path, PathBuf};

/// The binary under test, built by cargo for the integration tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_npu-progress");

pub const T0: &str = "2025-03-01T08:00:00Z";

/// A temp dir holding `proj/` and `issues.json`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new(issues: Vec<Issue>) -> Fixture {
        let fixture = Fixture::empty();
        fixture.write_issues(&file_with(issues));
        fixture
    }

    pub fn empty() -> Fixture {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        Fixture { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn issues_json(&self) -> PathBuf {
        self.path("issues.json")
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn write_issues(&self, file: &IssuesFile) {
        self.write("issues.json", &issue_model::to_json(file));
    }

    pub fn bytes(&self) -> Vec<u8> {
        fs::read(self.issues_json()).unwrap_or_default()
    }

    pub fn load(&self) -> IssuesFile {
        issue_model::load(&self.issues_json()).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn issue(&self, id: &str) -> Issue {
        self.load()
            .issues
            .into_iter()
            .find(|i| i.id == id)
            .unwrap_or_else(|| panic!("no issue {id}"))
    }

    /// `npu-progress` run in the fixture's directory.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(self.dir.path()).env("NO_COLOR", "1");
        cmd
    }

    /// Run with `args`; return (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output = self
            .cmd()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

pub fn file_with(issues: Vec<Issue>) -> IssuesFile {
    IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: Tool {
            name: "npu-scan".to_owned(),
            version: "0.1.0".to_owned(),
        },
        root: "proj".to_owned(),
        scanned_at: T0.to_owned(),
        summary: Summary::default(),
        issues,
        unparsed: vec![],
        scope: None,
    }
}

/// A pending issue with a found entry; the fingerprint is derived from the id.
pub fn issue(id: &str, pattern: &str, severity: Severity, file: &str, line: u32) -> Issue {
    Issue {
        id: id.to_owned(),
        pattern: pattern.to_owned(),
        category: Category::Device,
        severity,
        performance: false,
        file: file.to_owned(),
        line,
        column: 5,
        end_line: line,
        end_column: 10,
        symbol: Some("Policy.forward".to_owned()),
        message: format!("message of {id}"),
        snippet: format!("snippet of {id}"),
        related: vec![],
        fix_template: format!("references/fix-templates/{pattern}.md"),
        fix: None,
        fingerprint: issue_model::ids::hex(id.as_bytes()),
        status: Status::Pending,
        reason: None,
        history: vec![HistoryEntry {
            at: T0.to_owned(),
            status: HistoryStatus::Found,
            note: None,
        }],
        blocking: None,
        measured: None,
        measurement: None,
    }
}

pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected {needle:?} in:\n{haystack}"
    );
}

pub fn exists(path: &Path) -> bool {
    path.exists()
}
