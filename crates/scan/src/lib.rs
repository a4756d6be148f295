//! `npu-scan`: finds what breaks when `PyTorch` code moves from CUDA GPUs to Ascend NPUs.
//!
//! The library walks a project (the `ignore` crate's parallel walker), parses each Python
//! file once (rustpython-parser, behind [`source`] only), walks every node with a complete
//! by-reference walker on threads with large stacks, keeps a semantic model (imports,
//! scopes, `forward`, training steps, main guards, `try/except ImportError`, local facts),
//! and calls the hooks of every enabled rule from one visitor. Project-level facts (entry
//! points and what they import) are gathered after every file was checked. Findings become
//! `issue_model::Issue`s with line-independent fingerprints; [`write_issues_json`] merges them
//! into an `issues.json` so that progress survives rescans.
//!
//! It must not print (the binary and [`output`] do), must never abort a scan because one file
//! is bad (such a file becomes a `P_SYN` issue and an `unparsed` entry), and must produce the
//! same output whatever the thread count.
//!
//! # Public API used by other tools
//! - [`Settings`] (`Default`: every rule, all cores) and [`scan`] → [`ScanResult`]
//!   (`issues`, `unparsed`, `warnings`, [`Stats`]).
//! - [`scan_files`]: re-check some files (as `npu-progress --fixed` does); the whole tree is
//!   still read so that project-level rules see every entry point and import.
//! - [`write_issues_json`]: merge a result into `<dir>/issues.json` (locked, atomic).
//! - [`entry_points`]: the project's entry points, whether each uses torch, sets up the NPU
//!   and trains, and how it takes its config; [`facts`]: every file's [`FileFacts`] (also
//!   where the runtime patcher is built and applied) in a [`Project`], without running rules.
//! - [`blocks::top_level_blocks`]: a module's top-level `class` / `def` blocks by name, for
//!   comparing two versions of one module.
//! - [`rules::registry`]: every rule with its id, name, category, severity, performance flag,
//!   fix template and documentation.

mod analysis;
pub mod blocks;
pub mod checker;
pub mod cli;
mod contexts;
mod engine;
pub mod facts;
pub mod files;
pub mod finding;
pub mod output;
pub mod project;
pub mod remap;
pub mod rules;
pub mod semantic;
pub mod source;
pub mod suppress;
pub mod walk;

pub use facts::FileFacts;
pub use finding::Finding;
pub use project::{ConfigArgument, ConfigStyle, EntryKind, EntryPoint, PatcherCall, Project};

use issue_model::{Issue, MergeReport, Unparsed};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Stack size of the threads that parse and walk files: deep enough for a 50,000-term
/// expression (the walker recurses once per nesting level). Only touched pages use memory.
pub const WALK_STACK_SIZE: usize = 512 * 1024 * 1024;

/// Python files larger than this are reported and skipped (generated code, data dumps).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 16 * 1024 * 1024;

/// Errors that stop a whole scan (a bad file never does).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot scan `{}`", path.display())]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unknown rule id `{id}`{suggestion}")]
    UnknownRule { id: String, suggestion: String },
    #[error("invalid --exclude pattern in `{pattern}`")]
    Exclude {
        pattern: String,
        source: globset::Error,
    },
    #[error("cannot start a scan worker thread")]
    Thread(#[source] std::io::Error),
    #[error("cannot create the output directory `{}`", path.display())]
    OutputDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Issues(#[from] issue_model::Error),
    #[error(
        "`{file}` is not a relative `/` path under the project root of a file the scanner reads (.py, .yaml, .yml, .json, .toml, .cu, .cuh)"
    )]
    NotScannable { file: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Called after each file with (files done, files in total).
pub type ProgressFn = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// What to scan and how.
#[derive(Clone)]
pub struct Settings {
    /// Rule ids to run (`ALL` or empty: every rule).
    pub select: Vec<String>,
    /// Rule ids not to run (wins over `select`).
    pub ignore: Vec<String>,
    /// Glob patterns of files or directories to skip, matched against the relative path and
    /// the name.
    pub exclude: Vec<String>,
    /// Worker threads; 0 means one per available core.
    pub threads: usize,
    /// Python files larger than this many bytes are reported and skipped.
    pub max_file_size: u64,
    /// Progress callback (the CLI draws a bar with it).
    pub progress: Option<ProgressFn>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            select: Vec::new(),
            ignore: Vec::new(),
            exclude: Vec::new(),
            threads: 0,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            progress: None,
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("select", &self.select)
            .field("ignore", &self.ignore)
            .field("exclude", &self.exclude)
            .field("threads", &self.threads)
            .field("max_file_size", &self.max_file_size)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// The number of worker threads to use.
    pub fn threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        }
    }

    /// The rules these settings run, in registry order.
    pub fn enabled_rules(&self) -> Result<Vec<&'static rules::RuleInfo>> {
        engine::enabled_rules(self)
    }
}

/// Figures of one scan.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Python files seen (parsed or not).
    pub files: usize,
    /// Lines of those files.
    pub lines: usize,
    /// YAML/JSON/TOML files checked.
    pub config_files: usize,
    /// `.cu` / `.cuh` files seen.
    pub cuda_sources: usize,
    /// Python files that could not be parsed or read.
    pub unparsed: usize,
    /// Findings dropped by `# npu: ignore` comments.
    pub suppressed: usize,
    /// Wall time of the scan.
    pub seconds: f64,
}

/// The result of a scan: pending issues (sorted by file, line, column), files that could not
/// be parsed, warnings (skipped paths, unknown suppression ids, lossy decoding) and figures.
#[derive(Debug, Clone, Default)]
pub struct ScanResult {
    pub issues: Vec<Issue>,
    pub unparsed: Vec<Unparsed>,
    pub warnings: Vec<String>,
    pub stats: Stats,
}

/// Scan the project at `root` (a directory, or a single file).
pub fn scan(root: &Path, settings: &Settings) -> Result<ScanResult> {
    let rules = engine::enabled_rules(settings)?;
    engine::run(root, settings, &rules).map(|(result, _)| result)
}

/// Scan the project at `root` but keep only the issues and unparsed entries of `files`
/// (relative `/` paths). The whole tree is read: project-level rules need every entry
/// point and import to judge one file. For a rule that judges a file by itself, see
/// [`scan_alone`].
pub fn scan_files(root: &Path, files: &[String], settings: &Settings) -> Result<ScanResult> {
    let wanted: BTreeSet<&str> = files.iter().map(|f| f.trim_start_matches("./")).collect();
    let mut result = scan(root, settings)?;
    result.issues.retain(|i| wanted.contains(i.file.as_str()));
    result.unparsed.retain(|u| wanted.contains(u.file.as_str()));
    Ok(result)
}

/// Scan the one file `file` (a relative `/` path) of the project at `root` as if it were the
/// project's only file, without walking the tree. The findings of rules that judge a file by
/// itself (those not `project_level` in [`rules::registry`]) are exactly those a scan of the
/// whole project reports for that file; project-level rules see a project of one file.
pub fn scan_alone(root: &Path, file: &str, settings: &Settings) -> Result<ScanResult> {
    let rules = engine::enabled_rules(settings)?;
    engine::run_alone(root, file, settings, &rules).map(|(result, _)| result)
}

/// The path of the `issues.json` for an `--output` argument: `<dir>/issues.json`, or the
/// argument itself when it names a `.json` file.
pub fn issues_path(output: &Path) -> PathBuf {
    if output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        output.to_owned()
    } else {
        output.join("issues.json")
    }
}

/// Merge `result` into the `issues.json` under `output_dir` (see [`issues_path`]), creating
/// it if needed. Issues found again keep their id and status, fixed issues found again are
/// pending again (`regressed`), pending issues no longer found are marked resolved.
pub fn write_issues_json(
    output_dir: &Path,
    root_as_given: &str,
    result: &ScanResult,
) -> Result<MergeReport> {
    let path = issues_path(output_dir);
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(|source| Error::OutputDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    let now = issue_model::now_rfc3339();
    let fresh = issue_model::IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: issue_model::Tool {
            name: "npu-scan".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        root: root_as_given.to_owned(),
        scanned_at: now.clone(),
        summary: issue_model::Summary::default(),
        issues: result.issues.clone(),
        unparsed: result.unparsed.clone(),
    };
    let report = issue_model::update(&path, |previous| {
        let (merged, report) = issue_model::merge(previous.as_ref(), fresh, &now);
        Ok((Some(merged), report))
    })?;
    Ok(report)
}

/// The entry points of the project at `root`, sorted by file.
pub fn entry_points(root: &Path) -> Result<Vec<EntryPoint>> {
    Ok(facts(root)?.entry_points())
}

/// The facts of every Python file of the project at `root` (the files a scan reads), without
/// running any rule.
pub fn facts(root: &Path) -> Result<Project> {
    engine::run(root, &Settings::default(), &[]).map(|(_, project)| project)
}

/// The project facts of `root` (entry points, imports, notes of the enabled rules).
pub fn project_facts(root: &Path, settings: &Settings) -> Result<Project> {
    let rules = engine::enabled_rules(settings)?;
    engine::run(root, settings, &rules).map(|(_, project)| project)
}
