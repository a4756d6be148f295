//! Rendering results: the summary table, and findings as text, JSON, SARIF or CSV.
//!
//! Every renderer returns a `String`; the binary decides where it goes (stdout carries the
//! product, stderr the progress and warnings).

pub mod csv;
pub mod sarif;
pub mod text;

use issue_model::IssuesFile;

/// The findings of a scan as the `issues.json` document a fresh scan would write (what
/// `--format json` prints): the domain types, serialized.
pub fn json(root: &str, result: &crate::ScanResult) -> String {
    let file = IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: issue_model::Tool {
            name: "npu-scan".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        root: root.to_owned(),
        scanned_at: issue_model::now_rfc3339(),
        summary: issue_model::Summary::of(&result.issues),
        issues: result.issues.clone(),
        unparsed: result.unparsed.clone(),
        scope: None,
    };
    issue_model::to_json(&file)
}
