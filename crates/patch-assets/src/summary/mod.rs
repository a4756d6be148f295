//! `npu-assets summary`: a first draft of `migrate_to_cloudrobo/ADAPTATION_SUMMARY.md`.
//!
//! The template `templates/ADAPTATION_SUMMARY.md` holds `<!-- npu-assets:NAME -->` marker lines;
//! each is replaced by what the tools recorded: issues.json (status and per-issue timing from
//! history), `git diff` since the port started, the last verify report and the training logs.
//! The draft ends with a marker holding the SHA-256 of everything above it, so a later run can
//! tell a draft nobody touched (safe to regenerate) from one the user edited (kept unless forced).

pub mod git;
pub mod records;
mod render;
pub use render::MARKERS;
pub mod timing;

use crate::catalog::Source;
use crate::error::{Error, Result};
use crate::install::{self, MIGRATE_DIR};
use crate::write;
use issue_model::IssuesFile;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The template's path among the assets.
pub const TEMPLATE: &str = "templates/ADAPTATION_SUMMARY.md";
/// The summary's file name inside `migrate_to_cloudrobo/`.
pub const FILE_NAME: &str = "ADAPTATION_SUMMARY.md";
/// The verify report's file name inside `migrate_to_cloudrobo/`.
pub const VERIFY_REPORT: &str = "verify-report.json";
/// The first characters of the line that closes a generated draft.
const HASH_MARKER: &str = "<!-- npu-assets:generated sha256=";

/// What to summarize.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The model project root (holds `migrate_to_cloudrobo/`).
    pub project: PathBuf,
    /// issues.json; default `PROJECT/issues.json`, then `./issues.json`.
    pub issues: Option<PathBuf>,
    /// The commit to diff against; default: the first commit that added `migrate_to_cloudrobo/`.
    pub base: Option<String>,
    /// The verify report; default `PROJECT/migrate_to_cloudrobo/verify-report.json`.
    pub verify_report: Option<PathBuf>,
}

/// Everything the draft is made from.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub project_name: String,
    /// The issues file as the user would name it, and its content.
    pub issues: Option<(String, IssuesFile)>,
    /// Where the issues file was looked for, when none was found.
    pub issues_looked: Vec<String>,
    pub inventory: std::result::Result<git::Inventory, String>,
    pub verify_path: String,
    pub verify: records::Verify,
    pub runs: records::Runs,
    /// Every recorded `npu-verify` run.
    pub verify_runs: Vec<records::Span>,
    /// When `npu-assets init` created `migrate_to_cloudrobo/`.
    pub created_at: Option<String>,
    pub now: jiff::Timestamp,
}

/// A rendered draft, and notes for the user about inputs that were missing.
#[derive(Debug, Clone)]
pub struct Draft {
    pub text: String,
    pub notes: Vec<String>,
}

/// What [`write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    /// A previous untouched draft was regenerated.
    Updated,
    /// An edited summary was replaced because of `force`.
    Replaced,
}

/// Read every record the summary needs. Missing records are notes in the draft, not errors;
/// an unreadable issues.json or a `--base` that is not a commit are errors.
pub fn gather(opts: &Options) -> Result<Inputs> {
    let project = &opts.project;
    if !project.is_dir() {
        return Err(Error::NotADirectory {
            path: project.clone(),
        });
    }
    let candidates = if let Some(p) = &opts.issues {
        vec![p.clone()]
    } else {
        let mut c = vec![project.join("issues.json")];
        if fs::canonicalize(project).ok() != fs::canonicalize(".").ok() {
            c.push(PathBuf::from("issues.json"));
        }
        c
    };
    let mut issues = None;
    if let Some(path) = candidates
        .iter()
        .find(|p| opts.issues.is_some() || p.is_file())
    {
        issues = Some((path.display().to_string(), issue_model::load(path)?));
    }
    let verify_path = opts
        .verify_report
        .clone()
        .unwrap_or_else(|| project.join(MIGRATE_DIR).join(VERIFY_REPORT));
    let logs = project.join(MIGRATE_DIR).join("logs");
    let runs = records::read_runs(&logs);
    let verify_runs = records::read_verify_runs(&logs.join("verify-runs.jsonl"));
    // Files written while the program ran under the tools are the run's output, not the port's.
    let run_spans: Vec<records::Span> = runs.spans.iter().chain(&verify_runs).copied().collect();
    let project_name = fs::canonicalize(project)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| project.display().to_string());
    Ok(Inputs {
        project_name,
        issues,
        issues_looked: candidates.iter().map(|p| p.display().to_string()).collect(),
        inventory: git::inventory(project, opts.base.as_deref(), &run_spans)?,
        verify: records::read_verify(&verify_path),
        verify_path: verify_path.display().to_string(),
        runs,
        verify_runs,
        created_at: install::created_at(project),
        now: jiff::Timestamp::now(),
    })
}

/// Render the draft from the template of `source`.
pub fn draft(inputs: &Inputs, source: &Source) -> Result<Draft> {
    let template = source.read(TEMPLATE)?.ok_or_else(|| Error::MissingAsset {
        path: TEMPLATE.to_owned(),
    })?;
    let template = String::from_utf8_lossy(&template);
    let body = render::fill(&template, inputs);
    let mut notes = Vec::new();
    if inputs.issues.is_none() {
        notes.push(format!(
            "no issues.json (looked at {}); pass --issues PATH",
            inputs.issues_looked.join(", ")
        ));
    }
    if let Err(why) = &inputs.inventory {
        notes.push(why.clone());
    }
    match &inputs.verify {
        records::Verify::Absent => {
            notes.push(format!("no verify report at {}", inputs.verify_path));
        }
        records::Verify::Unreadable(why) => {
            notes.push(format!("verify report {}: {why}", inputs.verify_path));
        }
        records::Verify::Report { .. } => {}
    }
    Ok(Draft {
        text: seal(&body),
        notes,
    })
}

/// Where the summary of `project` lives.
pub fn path_in(project: &Path) -> PathBuf {
    project.join(MIGRATE_DIR).join(FILE_NAME)
}

/// Write `text` to `path` unless the file there was edited since we generated it.
pub fn write(path: &Path, text: &str, force: bool) -> Result<Written> {
    let written = match fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Written::Created,
        Err(source) => {
            return Err(Error::Read {
                path: path.to_owned(),
                source,
            });
        }
        Ok(bytes) if is_pristine(&String::from_utf8_lossy(&bytes)) => Written::Updated,
        Ok(_) if force => Written::Replaced,
        Ok(_) => {
            return Err(Error::EditedSummary {
                path: path.to_owned(),
            });
        }
    };
    write::atomic(path, text.as_bytes(), 0o644)?;
    Ok(written)
}

/// Append the marker line that records the hash of `body`.
fn seal(body: &str) -> String {
    let mut text = body.to_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let hash = install::sha256_hex(text.as_bytes());
    let _ = writeln!(
        text,
        "{HASH_MARKER}{hash} (a draft by npu-assets summary; once this file is edited, it is never regenerated without --force) -->"
    );
    text
}

/// Whether `text` is a draft exactly as we generated it.
pub fn is_pristine(text: &str) -> bool {
    let Some(at) = text.rfind(HASH_MARKER) else {
        return false;
    };
    let (body, marker) = text.split_at(at);
    if !(body.is_empty() || body.ends_with('\n')) || marker.trim_end().lines().count() != 1 {
        return false;
    }
    let hash = marker[HASH_MARKER.len()..].get(..64).unwrap_or_default();
    hash == install::sha256_hex(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_draft_is_pristine_until_edited() {
        let text = seal("# Summary\n\nbody");
        assert!(is_pristine(&text));
        assert!(!is_pristine(&text.replace("body", "my edit")));
        assert!(!is_pristine(&format!("{text}\nmore notes\n")));
        assert!(!is_pristine("# Summary written by hand\n"));
    }

    #[test]
    fn write_keeps_an_edited_summary_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("S.md");
        assert_eq!(write(&path, &seal("one"), false).unwrap(), Written::Created);
        assert_eq!(write(&path, &seal("two"), false).unwrap(), Written::Updated);
        fs::write(&path, "mine\n").unwrap();
        let err = write(&path, &seal("three"), false).unwrap_err();
        assert!(matches!(err, Error::EditedSummary { .. }));
        assert_eq!(fs::read_to_string(&path).unwrap(), "mine\n");
        assert_eq!(
            write(&path, &seal("three"), true).unwrap(),
            Written::Replaced
        );
        assert!(fs::read_to_string(&path).unwrap().starts_with("three\n"));
    }
}
