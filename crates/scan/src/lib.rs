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
mod callgraph;
pub mod checker;
pub mod classes;
pub mod cli;
mod contexts;
mod engine;
pub mod facts;
pub mod files;
pub mod finding;
pub mod fix;
pub mod line_length;
mod names;
pub mod output;
mod parallel;
pub mod project;
pub mod remap;
pub mod rules;
pub mod scope;
pub mod semantic;
pub mod source;
pub mod support;
pub mod suppress;
mod visit;
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
    #[error("--scope `{launch}`: {why}")]
    Scope { launch: String, why: String },
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
    /// `--scope`: a launch command; only the findings in the files on its training path are
    /// issues, the others are out of scope ([`scope::of`]).
    pub scope: Option<String>,
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
            scope: None,
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
            .field("scope", &self.scope)
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
    /// Findings an inline `# npu: ignore` comment suppresses: `skipped`, with the comment's
    /// reason (see [`suppress::Suppressions::reason`]); recorded in `issues.json` as skipped,
    /// never reported as findings.
    pub ignored: Vec<Issue>,
    /// The `--exclude` patterns of the scan: the previous issues of files they skip are not
    /// resolved by it (`out_of_scope` in `issues.json`).
    pub exclude: Vec<String>,
    /// Findings outside `--scope`: `out_of_scope`, with the reason; recorded in `issues.json`
    /// so, never reported as findings nor fixed by `--fix`.
    pub out_of_scope: Vec<Issue>,
    /// The scope of `--scope` (what `issues.json` records), when one was given.
    pub scope: Option<scope::Scope>,
    pub unparsed: Vec<Unparsed>,
    pub warnings: Vec<String>,
    pub stats: Stats,
}

/// Scan the project at `root` (a directory, or a single file).
pub fn scan(root: &Path, settings: &Settings) -> Result<ScanResult> {
    let rules = engine::enabled_rules(settings)?;
    let (mut result, project) = engine::run(root, settings, &rules)?;
    if let Some(launch) = &settings.scope {
        let scope = scope::of(&project, launch, &root.to_string_lossy(), root).map_err(|why| {
            Error::Scope {
                launch: launch.clone(),
                why,
            }
        })?;
        let (kept, mut outside): (Vec<Issue>, Vec<Issue>) = std::mem::take(&mut result.issues)
            .into_iter()
            .partition(|i| scope.contains(&i.file));
        let why = scope.reason();
        for issue in &mut outside {
            issue.status = issue_model::Status::OutOfScope;
            issue.reason = Some(why.clone());
        }
        result.issues = kept;
        result.out_of_scope = outside;
        result.scope = Some(scope);
    }
    Ok(result)
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
/// project's only file: only the class headers of the other files are read (a class may derive
/// from an `nn.Module` defined elsewhere), nothing else of them is checked. The findings of rules that judge a file by
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
    write_merged(output_dir, root_as_given, &[result], &BTreeSet::new())
}

/// Record a [`fix_project`] run in the `issues.json` under `output_dir`: the scan before the fixes is
/// merged first (so every finding is recorded), then the scan after them; an issue that a fix
/// removed becomes `fixed` with the history note "fixed by --fix".
pub fn write_fixed_issues_json(
    output_dir: &Path,
    root_as_given: &str,
    run: &FixRun,
) -> Result<MergeReport> {
    write_merged(
        output_dir,
        root_as_given,
        &[&run.before, &run.after],
        &run.fixed(),
    )
}

/// Merge `results` one after the other into the `issues.json` under `output_dir`, in one
/// locked update; issues whose fingerprints are in `fixed` and that the last result no longer
/// has are recorded as fixed by `--fix`.
fn write_merged(
    output_dir: &Path,
    root_as_given: &str,
    results: &[&ScanResult],
    fixed: &BTreeSet<String>,
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
    let fresh = |result: &ScanResult| issue_model::IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: issue_model::Tool {
            name: "npu-scan".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        root: root_as_given.to_owned(),
        scanned_at: now.clone(),
        summary: issue_model::Summary::default(),
        issues: result
            .issues
            .iter()
            .chain(&result.ignored)
            .chain(&result.out_of_scope)
            .cloned()
            .collect(),
        unparsed: result.unparsed.clone(),
        scope: result.scope.clone(),
    };
    let mut excludes = Vec::new();
    for result in results {
        let set = files::exclude_set(&result.exclude).map_err(|source| Error::Exclude {
            pattern: result.exclude.join(", "),
            source,
        })?;
        excludes.push(set);
    }
    let report = issue_model::update(&path, |previous| {
        let mut merged = previous;
        let mut report = MergeReport::default();
        for (result, excludes) in results.iter().zip(&excludes) {
            let not_scanned = |issue: &Issue| {
                files::is_excluded(excludes, &issue.file).then(|| {
                    let patterns: Vec<String> =
                        result.exclude.iter().map(|p| format!("`{p}`")).collect();
                    format!("not scanned: excluded by --exclude {}", patterns.join(", "))
                })
            };
            let (file, r) =
                issue_model::merge_scanned(merged.as_ref(), fresh(result), &now, &not_scanned);
            merged = Some(file);
            // New, regressed, ignored and reopened issues of every merge; kept, resolved and
            // out of scope of the last.
            report.new.extend(r.new);
            report.regressed.extend(r.regressed);
            report.ignored.extend(r.ignored);
            report.reopened.extend(r.reopened);
            report.out_of_scope = r.out_of_scope;
            report.kept = r.kept;
            report.resolved = r.resolved;
        }
        let mut merged = merged.unwrap_or_else(|| fresh(&ScanResult::default()));
        // A finding npu-verify measured in the code of a finding of this scan is that finding.
        let root = Path::new(root_as_given);
        issue_model::fold_measured(&mut merged, &[], &|relative| {
            std::fs::read_to_string(root.join(relative)).ok()
        });
        for issue in &mut merged.issues {
            let Some(last) = issue.history.last_mut() else {
                continue;
            };
            if fixed.contains(&issue.fingerprint)
                && issue.status == issue_model::Status::Fixed
                && last.status == issue_model::HistoryStatus::Resolved
                && last.at == now
            {
                last.status = issue_model::HistoryStatus::Fixed;
                last.note = Some("fixed by --fix".to_owned());
            }
        }
        Ok((Some(merged), report))
    })?;
    Ok(report)
}

/// How [`fix_project`] applies fixes.
#[derive(Debug, Clone, Default)]
pub struct FixSettings {
    /// Apply `unsafe` fixes too.
    pub unsafe_fixes: bool,
    /// Write the fixed files; without it nothing is written (`--diff`).
    pub write: bool,
    /// Fingerprints of issues not to fix: those skipped in `issues.json` (false positives).
    pub skipped: BTreeSet<String>,
    /// The project as the user named it, for the commands messages suggest (empty: the root
    /// path).
    pub shown_root: String,
    /// Fix test and example files too ([`support`]); without it their fixes are left alone
    /// (counted in [`FixRun::left_alone`]). The entry of `--scope` and a file scanned on its
    /// own are fixed either way: they were asked for.
    pub tests_and_examples: bool,
}

/// What [`fix_project`] did.
#[derive(Debug, Clone, Default)]
pub struct FixRun {
    /// The scan before any fix.
    pub before: ScanResult,
    /// The scan after the fixes (the same as `before` when nothing was written).
    pub after: ScanResult,
    /// What happened in each file, pass by pass (keys are issue fingerprints).
    pub files: Vec<fix::FileOutcome>,
    /// Passes made (a pass applies the fixes that do not overlap, then rescans).
    pub passes: usize,
    /// Fixes held back because the project lacks what they need: per rule, why, and the
    /// fingerprints held ([`fix::missing_prerequisite`]).
    pub held: Vec<(String, String, Vec<String>)>,
    /// Fixes left alone because their file is a test or an example ([`support`]) and
    /// [`FixSettings::tests_and_examples`] is off: the fingerprints, by file.
    pub left_alone: std::collections::BTreeMap<String, Vec<String>>,
}

impl FixRun {
    /// Fingerprints of the issues whose fix was applied and that the last scan no longer has.
    pub fn fixed(&self) -> BTreeSet<String> {
        let left: BTreeSet<&str> = self
            .after
            .issues
            .iter()
            .map(|i| i.fingerprint.as_str())
            .collect();
        self.files
            .iter()
            .flat_map(|f| &f.applied)
            .filter(|key| !left.contains(key.as_str()))
            .cloned()
            .collect()
    }
}

/// At most this many fix passes.
const MAX_FIX_PASSES: usize = 4;

/// Scan `root`, apply every fix that `fix_settings` allows, and rescan; repeat while fixes
/// that overlapped an applied one are left, at most [`MAX_FIX_PASSES`] times. A fix is applied
/// once at most, whatever the rescan finds.
pub fn fix_project(root: &Path, settings: &Settings, fix_settings: &FixSettings) -> Result<FixRun> {
    let before = scan(root, settings)?;
    let mut run = FixRun {
        after: before.clone(),
        before,
        ..FixRun::default()
    };
    let mut tried: BTreeSet<String> = BTreeSet::new();
    let mut held: std::collections::BTreeMap<String, (String, Vec<String>)> =
        std::collections::BTreeMap::new();
    while run.passes < MAX_FIX_PASSES {
        let outcomes: Vec<fix::FileOutcome> = {
            let mut by_file: std::collections::BTreeMap<&str, Vec<fix::Planned<'_>>> =
                std::collections::BTreeMap::new();
            for issue in &run.after.issues {
                let Some(fix) = &issue.fix else { continue };
                let allowed = fix.applicability == issue_model::Applicability::Safe
                    || fix_settings.unsafe_fixes;
                if allowed
                    && !tried.contains(&issue.fingerprint)
                    && !fix_settings
                        .skipped
                        .iter()
                        .any(|s| issue_model::same_finding(s, &issue.fingerprint))
                {
                    if !fix_settings.tests_and_examples
                        && support::kind(&issue.file).is_some()
                        && !root.is_file()
                        && !settings
                            .scope
                            .as_deref()
                            .is_some_and(|launch| support::launched_by(launch, &issue.file))
                    {
                        let keys = run.left_alone.entry(issue.file.clone()).or_default();
                        if !keys.contains(&issue.fingerprint) {
                            keys.push(issue.fingerprint.clone());
                        }
                        continue;
                    }
                    let missing = held
                        .get(&issue.pattern)
                        .map(|(why, _)| why.clone())
                        .or_else(|| {
                            fix::missing_prerequisite(
                                root,
                                &issue.pattern,
                                &fix_settings.shown_root,
                            )
                        });
                    if let Some(why) = missing {
                        let entry = held
                            .entry(issue.pattern.clone())
                            .or_insert((why, Vec::new()));
                        if !entry.1.contains(&issue.fingerprint) {
                            entry.1.push(issue.fingerprint.clone());
                        }
                        continue;
                    }
                    by_file.entry(&issue.file).or_default().push(fix::Planned {
                        key: &issue.fingerprint,
                        fix,
                    });
                }
            }
            by_file
                .iter()
                .map(|(file, fixes)| fix::apply_to_file(root, file, fixes, fix_settings.write))
                .collect()
        };
        if outcomes.is_empty() {
            break;
        }
        run.passes += 1;
        let mut applied = false;
        for outcome in &outcomes {
            applied |= !outcome.applied.is_empty();
            tried.extend(outcome.applied.iter().cloned());
            tried.extend(outcome.dropped.iter().map(|(key, _)| key.clone()));
        }
        run.files.extend(outcomes);
        if !fix_settings.write || !applied {
            break;
        }
        run.after = scan(root, settings)?;
    }
    run.held = held
        .into_iter()
        .map(|(rule, (why, keys))| (rule, why, keys))
        .collect();
    Ok(run)
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
