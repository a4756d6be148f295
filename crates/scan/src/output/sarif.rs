//! SARIF 2.1.0, for code-scanning UIs: one run, every rule with its documentation.

use crate::rules;
use issue_model::{Issue, Severity};
use serde_json::{Value, json};

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// The findings as a SARIF log.
pub fn render(issues: &[Issue]) -> String {
    let rule_list: Vec<Value> = rules::registry()
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                "shortDescription": { "text": r.summary },
                "fullDescription": { "text": r.summary },
                "help": { "text": r.doc, "markdown": r.doc },
                "defaultConfiguration": { "level": level(r.severity) },
                "properties": {
                    "category": r.category.as_str(),
                    "performance": r.performance,
                    "fixTemplate": r.fix_template,
                },
            })
        })
        .collect();
    let results: Vec<Value> = issues
        .iter()
        .map(|i| {
            let related: Vec<Value> = i
                .related
                .iter()
                .map(|r| {
                    json!({
                        "physicalLocation": {
                            "artifactLocation": { "uri": r.file },
                            "region": { "startLine": r.line, "startColumn": r.column },
                        },
                        "message": { "text": r.note },
                    })
                })
                .collect();
            let fixes: Vec<Value> = i
                .fix
                .iter()
                .map(|f| {
                    let replacements: Vec<Value> = f
                        .edits
                        .iter()
                        .map(|e| {
                            json!({
                                "deletedRegion": {
                                    "byteOffset": e.start,
                                    "byteLength": e.end - e.start,
                                },
                                "insertedContent": { "text": e.content },
                            })
                        })
                        .collect();
                    json!({
                        "description": { "text": f.message },
                        "artifactChanges": [{
                            "artifactLocation": { "uri": i.file, "uriBaseId": "SRCROOT" },
                            "replacements": replacements,
                        }],
                        "properties": {
                            "applicability": f.applicability.as_str(),
                            "sourceHash": f.source_hash,
                        },
                    })
                })
                .collect();
            json!({
                "ruleId": i.pattern,
                "level": level(i.severity),
                "message": { "text": i.message },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": i.file, "uriBaseId": "SRCROOT" },
                        "region": {
                            "startLine": i.line,
                            "startColumn": i.column,
                            "endLine": i.end_line,
                            "endColumn": i.end_column,
                            "snippet": { "text": i.snippet },
                        },
                    },
                }],
                "relatedLocations": related,
                "fixes": fixes,
                "partialFingerprints": { "npuScan/v1": i.fingerprint },
                "properties": { "id": i.id, "status": i.status.as_str() },
            })
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "npu-scan",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://example.invalid/npu-patcher",
                "rules": rule_list,
            }},
            "results": results,
        }],
    });
    let mut text = serde_json::to_string_pretty(&log).unwrap_or_default();
    text.push('\n');
    text
}
