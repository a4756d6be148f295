//! `cargo xtask bench progress`: `npu-progress` on a generated issues.json with many issues.
//!
//! Generates a project of small Python files and an issues.json with `--issues` issues over
//! them (ids and fingerprints made by issue-model, as the scanner makes them), builds the
//! release binary, then times each command over `--runs` runs (median, min, max wall ms) and
//! measures its peak RSS with `/usr/bin/time`. Targets: under 50 ms and 100 MB. `--fixed`
//! re-checks the fix by scanning the issue's file (the whole project for a project-level
//! rule; the generated issues are all file-local), so it is reported both with the re-check
//! and with `--force` (the issues.json work alone).

use anyhow::{Context, Result, bail};
use issue_model::{
    Category, HistoryEntry, HistoryStatus, Issue, IssuesFile, Related, Severity, Status, Summary,
    Tool,
};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Issues in the generated issues.json.
    #[arg(long, default_value_t = 20_000)]
    issues: usize,
    /// Timed runs per command.
    #[arg(long, default_value_t = 9)]
    runs: usize,
    /// Issues per generated Python file.
    #[arg(long, default_value_t = 40)]
    per_file: usize,
    /// Use this npu-progress binary instead of building the release one.
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Generate into this directory and keep it (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            issues: 20_000,
            runs: 9,
            per_file: 40,
            binary: None,
            dir: None,
        }
    }
}

const TARGET_MS: f64 = 50.0;
const TARGET_MB: f64 = 100.0;

pub fn run(args: &Args) -> Result<()> {
    if args.runs == 0 || args.issues < 2 * args.runs + 1 || args.per_file == 0 {
        bail!("need --runs >= 1, --per-file >= 1 and --issues > 2 x --runs");
    }
    let binary = match &args.binary {
        Some(binary) => binary
            .canonicalize()
            .with_context(|| format!("{}", binary.display()))?,
        None => build()?,
    };
    let work = WorkDir::new(args.dir.clone())?;
    let dir = work.path.as_path();
    eprintln!(
        "bench: generating {} issues in {}",
        args.issues,
        dir.display()
    );
    let file = generate(dir, args.issues, args.per_file)?;
    let json = dir.join("issues.json");
    issue_model::save(&json, &file)?;
    let size_mb = bytes_to_mb(fs::metadata(&json)?.len());
    let lines: usize = args.per_file * 3 + 4;
    let files = args.issues.div_ceil(args.per_file);
    println!(
        "npu-progress on {} issues: issues.json {size_mb:.1} MB; project {files} files, {} lines",
        args.issues,
        files * lines
    );

    // Issues to mark, from the end of the file (`pop` takes the last), which the --next runs
    // below do not reach; any they do reach is skipped, so every timed --fixed is a real change.
    let mut ids: Vec<(String, String)> = file
        .issues
        .iter()
        .map(|i| (i.id.clone(), i.file.clone()))
        .collect();
    let mut shown = std::collections::HashSet::new();
    let bench = Bench {
        binary,
        dir,
        time: Path::new("/usr/bin/time").exists(),
    };
    let runs = args.runs;
    let mut rows: Vec<Row> = Vec::new();

    // --next, first time an issue is shown: records a `shown` entry (a write). Marking the
    // shown issue fixed between runs (untimed) moves on to a new one.
    let mut samples = Vec::new();
    for _ in 0..runs {
        samples.push(bench.sample(&["issues.json", "--next"], 0)?);
        let id = bench.next_id()?;
        bench.run_quiet(&["issues.json", "--fixed", &id, "--force"])?;
        shown.insert(id);
    }
    rows.push(Row::new("--next (first show, writes)", &samples));

    let samples = (0..runs)
        .map(|_| bench.sample(&["issues.json", "--next"], 0))
        .collect::<Result<Vec<_>>>()?;
    rows.push(Row::new("--next (shown before, read only)", &samples));

    let mut unmarked = || loop {
        let (id, rel) = ids.pop().context("out of issues")?;
        if !shown.contains(&id) {
            return anyhow::Ok((id, rel));
        }
    };
    let mut marked = Vec::new();
    let mut samples = Vec::new();
    for _ in 0..runs {
        let (id, _) = unmarked()?;
        samples.push(bench.sample(&["issues.json", "--fixed", &id, "--force"], 0)?);
        marked.push(id);
    }
    rows.push(Row::new("--fixed --force (no re-check)", &samples));

    // The code is fixed first (untimed), as a user does before running --fixed.
    let mut samples = Vec::new();
    for _ in 0..runs {
        let (id, rel) = unmarked()?;
        fs::write(dir.join("proj").join(rel), source(args.per_file, true))?;
        samples.push(bench.sample(&["issues.json", "--fixed", &id], 0)?);
        marked.push(id);
    }
    rows.push(Row::new("--fixed (re-checks the file)", &samples));
    // Every timed --fixed left its issue fixed; none of them had been marked before (`unmarked`
    // skips the ones the --next runs fixed), so each was a real change, not a no-op.
    let after = issue_model::load(&json)?;
    let fixed_now = after
        .issues
        .iter()
        .filter(|i| marked.contains(&i.id) && i.status == Status::Fixed)
        .count();
    if fixed_now != marked.len() {
        bail!(
            "only {fixed_now} of the {} issues marked are fixed",
            marked.len()
        );
    }

    let samples = (0..runs)
        .map(|_| bench.sample(&["issues.json", "--check-complete"], 1))
        .collect::<Result<Vec<_>>>()?;
    rows.push(Row::new("--check-complete (lists all pending)", &samples));

    print_rows(&rows, bench.time);
    Ok(())
}

/// Build the release binary; return its path.
fn build() -> Result<PathBuf> {
    eprintln!("bench: building npu-progress (release)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = duct::cmd!(
        cargo,
        "build",
        "--release",
        "--package",
        "progress",
        "--bin",
        "npu-progress",
        "--message-format",
        "json-render-diagnostics"
    )
    .dir(crate::project_root())
    .stdout_capture()
    .run()
    .context("cargo build --release -p progress failed")?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact"
            && message["target"]["name"] == "npu-progress"
            && let Some(path) = message["executable"].as_str()
        {
            return Ok(PathBuf::from(path));
        }
    }
    bail!("cargo did not report the npu-progress executable")
}

/// The directory the benchmark works in; a temporary one is removed on drop.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn new(given: Option<PathBuf>) -> Result<WorkDir> {
        let keep = given.is_some();
        let path = given.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("npu-progress-bench-{}", std::process::id()))
        });
        if path.exists() {
            if path.join("issues.json").exists() || fs::read_dir(&path)?.next().is_none() {
                fs::remove_dir_all(&path)?;
            } else {
                bail!("{} exists and is not a benchmark directory", path.display());
            }
        }
        fs::create_dir_all(&path)?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// The project under `dir/proj` and its issues: `per_file` findings per file, a mix of
/// patterns, severities and symbols, some with related places, all pending.
fn generate(dir: &Path, count: usize, per_file: usize) -> Result<IssuesFile> {
    const PATTERNS: [(&str, Category); 6] = [
        ("P_RND", Category::Device),
        ("P_FLA", Category::Operator),
        ("P_VEC", Category::Structure),
        ("P_LTM", Category::Framework),
        ("P_TGT", Category::Semantic),
        ("P_DEV", Category::Device),
    ];
    let now = "2025-03-01T08:00:00Z";
    let mut issues = Vec::with_capacity(count);
    let files = count.div_ceil(per_file);
    for f in 0..files {
        let rel = format!("pkg_{:02}/module_{f:04}.py", f % 25);
        let path = dir.join("proj").join(&rel);
        fs::create_dir_all(path.parent().context("a file has a parent")?)?;
        fs::write(&path, source(per_file, false))?;
        for k in 0..per_file.min(count - issues.len()) {
            let n = issues.len();
            let (pattern, category) = PATTERNS[n % PATTERNS.len()];
            let line = u32::try_from(4 + 3 * k + 2)?;
            let symbol = format!("Block.step_{k}");
            let snippet = format!("noise_{k} = torch.randn(x.shape[0], {k})");
            let fingerprint = issue_model::fingerprint(pattern, &rel, Some(&symbol), &snippet, 0);
            issues.push(Issue {
                id: String::new(),
                pattern: pattern.to_owned(),
                category,
                severity: if n % 3 == 0 {
                    Severity::Warning
                } else {
                    Severity::Error
                },
                performance: pattern == "P_TGT",
                file: rel.clone(),
                line,
                column: 9,
                end_line: line,
                end_column: 48,
                symbol: Some(symbol),
                message: "torch.randn without device= creates the tensor on the CPU while the model runs on the NPU; pass device=x.device".to_owned(),
                snippet,
                related: if n % 10 == 0 {
                    vec![Related {
                        file: rel.clone(),
                        line: line + 1,
                        column: 9,
                        note: "the tensor is used here".to_owned(),
                    }]
                } else {
                    Vec::new()
                },
                fix_template: format!("references/fix-templates/{pattern}.md"),
                fingerprint,
                status: Status::Pending,
                reason: None,
                history: vec![HistoryEntry {
                    at: now.to_owned(),
                    status: HistoryStatus::Found,
                    note: None,
                }],
            });
        }
    }
    let fresh = IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: Tool {
            name: "npu-scan".to_owned(),
            version: "bench".to_owned(),
        },
        root: "proj".to_owned(),
        scanned_at: now.to_owned(),
        summary: Summary::default(),
        issues,
        unparsed: Vec::new(),
    };
    // The merge gives each issue its short id, exactly as a first scan does.
    Ok(issue_model::merge(None, fresh, now).0)
}

/// A generated module: one method per finding, each drawing noise with `torch.randn`; `fixed`
/// draws it on the input's device.
fn source(per_file: usize, fixed: bool) -> String {
    let device = if fixed { ", device=x.device" } else { "" };
    let mut text = String::from("import torch\n\n\nclass Block(torch.nn.Module):\n");
    for k in 0..per_file {
        let _ = write!(
            text,
            "    def step_{k}(self, x):\n        noise_{k} = torch.randn(x.shape[0], {k}{device})\n        return x + noise_{k}\n"
        );
    }
    text
}

struct Bench<'a> {
    binary: PathBuf,
    dir: &'a Path,
    /// `/usr/bin/time` is there to report CPU time and peak memory.
    time: bool,
}

/// One run: wall time, and where `/usr/bin/time` is available, CPU time and peak RSS.
struct Sample {
    wall_ms: f64,
    cpu_ms: Option<f64>,
    rss_mb: Option<f64>,
}

impl Bench<'_> {
    /// Run `npu-progress args` once; it must exit with `expected`.
    fn sample(&self, args: &[&str], expected: i32) -> Result<Sample> {
        let report = self.dir.join("time.txt");
        let (program, command_line): (PathBuf, Vec<String>) = if self.time {
            let mut command_line: Vec<String> = ["-f", "%U %S %M", "-o"]
                .map(str::to_owned)
                .into_iter()
                .collect();
            command_line.push(report.display().to_string());
            command_line.push(self.binary.display().to_string());
            command_line.extend(args.iter().map(|a| (*a).to_owned()));
            (PathBuf::from("/usr/bin/time"), command_line)
        } else {
            let command_line = args.iter().map(|a| (*a).to_owned()).collect();
            (self.binary.clone(), command_line)
        };
        let started = Instant::now();
        let output = duct::cmd(program, command_line)
            .dir(self.dir)
            .stdout_null()
            .stderr_capture()
            .unchecked()
            .run()?;
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        if output.status.code() != Some(expected) {
            bail!(
                "npu-progress {} exited with {:?}: {}",
                args.join(" "),
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let (mut cpu_ms, mut rss_mb) = (None, None);
        if self.time {
            // `/usr/bin/time` writes a line first when the command fails; the figures are last.
            let text = fs::read_to_string(&report)?;
            let figures: Vec<f64> = text
                .lines()
                .last()
                .unwrap_or("")
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .with_context(|| format!("unexpected /usr/bin/time output: {text}"))?;
            if let [user, system, kib] = figures.as_slice() {
                cpu_ms = Some((user + system) * 1000.0);
                rss_mb = Some(kib / 1024.0);
            }
        }
        Ok(Sample {
            wall_ms,
            cpu_ms,
            rss_mb,
        })
    }

    fn run_quiet(&self, args: &[&str]) -> Result<()> {
        duct::cmd(&self.binary, args)
            .dir(self.dir)
            .stdout_null()
            .stderr_null()
            .run()?;
        Ok(())
    }

    /// The id `--next` shows now.
    fn next_id(&self) -> Result<String> {
        let out = duct::cmd(&self.binary, ["issues.json", "--next", "--format", "json"])
            .dir(self.dir)
            .stdout_capture()
            .read()?;
        let value: serde_json::Value = serde_json::from_str(&out)?;
        value["issue"]["id"]
            .as_str()
            .map(str::to_owned)
            .context("--next showed no issue")
    }
}

struct Row {
    name: &'static str,
    wall: (f64, f64, f64),
    cpu_ms: Option<f64>,
    rss_mb: Option<f64>,
}

impl Row {
    fn new(name: &'static str, samples: &[Sample]) -> Row {
        let median = |mut v: Vec<f64>| -> Option<f64> {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let mut wall: Vec<f64> = samples.iter().map(|s| s.wall_ms).collect();
        wall.sort_by(f64::total_cmp);
        let cpu: Vec<f64> = samples.iter().filter_map(|s| s.cpu_ms).collect();
        Row {
            name,
            wall: (wall[wall.len() / 2], wall[0], wall[wall.len() - 1]),
            cpu_ms: median(cpu),
            rss_mb: samples
                .iter()
                .filter_map(|s| s.rss_mb)
                .max_by(f64::total_cmp),
        }
    }
}

fn print_rows(rows: &[Row], timed: bool) {
    if timed {
        println!(
            "wall includes starting /usr/bin/time; cpu = user + system, 10 ms resolution; peak = max RSS"
        );
    }
    println!(
        "{:<38} {:>9} {:>8} {:>8} {:>8} {:>8}  targets (<50 ms, <100 MB)",
        "command", "median ms", "min ms", "max ms", "cpu ms", "peak MB"
    );
    let figure = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
    };
    for row in rows {
        let (median, min, max) = row.wall;
        let verdict = match (median < TARGET_MS, row.rss_mb.map(|mb| mb < TARGET_MB)) {
            (true, Some(true)) => "met",
            (true, None) => "time met; memory not measured (no /usr/bin/time)",
            (false, Some(true)) => "time MISSED, memory met",
            (true, Some(false)) => "time met, memory MISSED",
            (false, _) => "MISSED",
        };
        println!(
            "{:<38} {median:>9.1} {min:>8.1} {max:>8.1} {:>8} {:>8}  {verdict}",
            row.name,
            figure(row.cpu_ms, 0),
            figure(row.rss_mb, 1),
        );
    }
}

fn bytes_to_mb(bytes: u64) -> f64 {
    // Sizes here are far below 2^52, so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / (1024.0 * 1024.0);
    mb
}
