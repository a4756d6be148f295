//! `cargo xtask bench progress`: every `npu-progress` command on realistic issues.json files,
//! next to CPython's `json.load` of the same file.
//!
//! For each size (`--issues`, by default 326, 2,000 and 20,000 issues) the demo project
//! (`assets/demo/tiny-vla`) is copied as many times as that takes, the copies are scanned with
//! the scan library, and the first issues of the scan are written as issues.json, as `npu-scan`
//! writes it. Each command then runs `--runs` times on the release binary (median, min and max
//! wall ms, the process start included); `json.load` is timed inside one `python3` process.
//! `--fixed` is timed with its re-check (the issue's file is first replaced by its fixed version
//! from `assets/demo/tiny-vla-fixed`, as a user fixes the code first) and with `--force`.
//! Acceptance: at 2,000 issues every command is no slower than `json.load`.

use anyhow::{Context, Result, bail};
use issue_model::{IssuesFile, Status, Summary, Tool};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Sizes of the issues.json files, in issues (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [326, 2_000, 20_000])]
    issues: Vec<usize>,
    /// Timed runs per command.
    #[arg(long, default_value_t = 9)]
    runs: usize,
    /// Use this npu-progress binary instead of building the release one.
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Generate into this directory and keep it (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// The size the acceptance is judged at.
const ACCEPTANCE_ISSUES: usize = 2_000;

pub fn run(args: &Args) -> Result<()> {
    if args.runs == 0 || args.issues.iter().any(|&n| n < 6 * args.runs) {
        bail!("need --runs >= 1 and every size >= 6 x --runs");
    }
    let binary = match &args.binary {
        Some(binary) => binary
            .canonicalize()
            .with_context(|| format!("{}", binary.display()))?,
        None => build()?,
    };
    let work = WorkDir::new(args.dir.clone())?;
    let mut verdict = None;
    for &count in &args.issues {
        let dir = work.path.join(format!("issues-{count}"));
        fs::create_dir_all(&dir)?;
        let rows = bench_size(&binary, &dir, count, args.runs)?;
        if count == ACCEPTANCE_ISSUES {
            verdict = Some(rows.iter().all(|row| row.median_ms <= row.json_load_ms));
        }
    }
    match verdict {
        Some(met) => println!(
            "acceptance (every command at {ACCEPTANCE_ISSUES} issues no slower than json.load): {}",
            if met { "met" } else { "NOT met" }
        ),
        None => println!("acceptance not judged: no {ACCEPTANCE_ISSUES}-issue run"),
    }
    Ok(())
}

/// Generate a project and issues.json of `count` issues in `dir`, time every command, print
/// the table.
fn bench_size(binary: &Path, dir: &Path, count: usize, runs: usize) -> Result<Vec<Row>> {
    eprintln!("bench: scanning copies of the demo for {count} issues");
    let file = generate(dir, count)?;
    let json = dir.join("issues.json");
    issue_model::save(&json, &file)?;
    let json_load_ms = json_load(&json, runs)?;
    let bench = Bench { binary, dir };
    println!(
        "\nnpu-progress on {count} issues (issues.json {:.1} MB); json.load median {json_load_ms:.1} ms",
        bytes_to_mb(fs::metadata(&json)?.len())
    );

    // Every timed change is a real one: each command marks an issue no other command used.
    let mut picks = Picks::new(&file);
    let mut rows = Vec::new();
    let mut row = |name: &'static str, samples: Vec<f64>| {
        rows.push(Row::new(name, samples, json_load_ms));
    };

    // The first show records a `shown` entry (a write); marking the issue fixed between runs
    // (untimed) moves on to a new one.
    let mut samples = Vec::new();
    for _ in 0..runs {
        samples.push(bench.time(&["--next"], 0)?);
        let id = bench.next_id()?;
        bench.time(&["--fixed", &id, "--force"], 0)?;
        picks.used.insert(id);
    }
    row("--next (first show, writes)", samples);
    // Shown once (untimed), the issue is then read without a write.
    let shown = bench.next_id()?;
    row(
        "--next (shown before, read only)",
        bench.repeat(runs, &["--next"], 0)?,
    );
    row("--show", bench.repeat(runs, &["--show", &shown], 0)?);
    row("--list", bench.repeat(runs, &["--list"], 0)?);
    row("--summary", bench.repeat(runs, &["--summary"], 0)?);
    row(
        "--check-complete",
        bench.repeat(runs, &["--check-complete"], 1)?,
    );

    let mut samples = Vec::new();
    let mut forced = Vec::new();
    for _ in 0..runs {
        let issue = picks.take(|_| true)?;
        samples.push(bench.time(&["--fixed", &issue.id, "--force"], 0)?);
        forced.push(issue.id);
    }
    row("--fixed --force", samples);

    let mut samples = Vec::new();
    for _ in 0..runs {
        let issue =
            picks.take(|i| !scan::rules::get(&i.pattern).is_none_or(|r| r.project_level))?;
        bench.fix_code(&issue.file)?;
        samples.push(bench.time(&["--fixed", &issue.id], 0)?);
    }
    row("--fixed (re-checks the file)", samples);

    let mut samples = Vec::new();
    for _ in 0..runs {
        let issue = picks.take(|i| !i.performance)?;
        let args = ["--skip", &issue.id, "--reason", "bench: not on this port"];
        samples.push(bench.time(&args, 0)?);
    }
    row("--skip", samples);

    let mut samples = Vec::new();
    for id in &forced {
        samples.push(bench.time(&["--reopen", id], 0)?);
    }
    row("--reopen", samples);

    let after = issue_model::load(&json)?;
    let reopened = after
        .issues
        .iter()
        .filter(|i| forced.contains(&i.id) && i.status == Status::Pending)
        .count();
    if reopened != forced.len() || after.issues.len() != count {
        bail!("the timed commands did not leave the file as they should have");
    }
    print_rows(&rows);
    Ok(rows)
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
            let ours = fs::read_dir(&path)?
                .flatten()
                .all(|entry| entry.file_name().to_string_lossy().starts_with("issues-"));
            if !ours {
                bail!("{} exists and is not a benchmark directory", path.display());
            }
            fs::remove_dir_all(&path)?;
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

fn demo() -> PathBuf {
    crate::project_root().join("assets/demo")
}

/// Copies of the demo under `dir/proj` (`copy_0000/...`), enough for `count` issues, scanned;
/// the first `count` issues of the scan, with ids, as a first `npu-scan` writes them.
fn generate(dir: &Path, count: usize) -> Result<IssuesFile> {
    let demo = demo().join("tiny-vla");
    let per_copy = scan::scan(&demo, &scan::Settings::default())?.issues.len();
    if per_copy == 0 {
        bail!("the demo project has no findings");
    }
    let proj = dir.join("proj");
    for copy in 0..=count.div_ceil(per_copy) {
        copy_tree(&demo, &proj.join(format!("copy_{copy:04}")))?;
    }
    let mut result = scan::scan(&proj, &scan::Settings::default())?;
    if result.issues.len() < count {
        bail!(
            "the copies of the demo gave {} issues, fewer than {count}",
            result.issues.len()
        );
    }
    result.issues.truncate(count);
    let now = issue_model::now_rfc3339();
    let fresh = IssuesFile {
        schema_version: issue_model::SCHEMA_VERSION,
        tool: Tool {
            name: "npu-scan".to_owned(),
            version: "bench".to_owned(),
        },
        root: "proj".to_owned(),
        scanned_at: now.clone(),
        summary: Summary::default(),
        issues: result.issues,
        unparsed: result.unparsed,
    };
    Ok(issue_model::merge(None, fresh, &now).0)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_tree(&entry.path(), &target)?;
            }
        } else {
            fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// CPython's `json.load` of `path`, median ms of `runs` loads in one process.
fn json_load(path: &Path, runs: usize) -> Result<f64> {
    const SCRIPT: &str = "import json,statistics,sys,time\n\
        ts=[]\n\
        for _ in range(int(sys.argv[2])):\n    \
            t=time.perf_counter()\n    \
            with open(sys.argv[1]) as f: json.load(f)\n    \
            ts.append(time.perf_counter()-t)\n\
        print(statistics.median(ts)*1000)";
    let out = duct::cmd!("python3", "-c", SCRIPT, path, runs.to_string())
        .read()
        .context("python3 -c 'import json; json.load(...)' failed")?;
    out.trim()
        .parse()
        .with_context(|| format!("python3 printed {out:?}"))
}

/// Issues not yet used by a command, taken from the end of the file.
struct Picks {
    issues: Vec<issue_model::Issue>,
    used: std::collections::HashSet<String>,
}

impl Picks {
    fn new(file: &IssuesFile) -> Picks {
        Picks {
            issues: file.issues.clone(),
            used: std::collections::HashSet::new(),
        }
    }

    /// The last unused issue that `fits`.
    fn take(&mut self, fits: impl Fn(&issue_model::Issue) -> bool) -> Result<issue_model::Issue> {
        let at = self
            .issues
            .iter()
            .rposition(|i| fits(i) && !self.used.contains(&i.id))
            .context("out of issues to mark")?;
        let issue = self.issues.remove(at);
        self.used.insert(issue.id.clone());
        Ok(issue)
    }
}

struct Bench<'a> {
    binary: &'a Path,
    dir: &'a Path,
}

impl Bench<'_> {
    /// Run `npu-progress issues.json args` once; it must exit with `expected`. Wall ms.
    fn time(&self, args: &[&str], expected: i32) -> Result<f64> {
        let mut command_line = vec!["issues.json"];
        command_line.extend_from_slice(args);
        let started = Instant::now();
        let output = duct::cmd(self.binary, &command_line)
            .dir(self.dir)
            .stdout_null()
            .stderr_capture()
            .unchecked()
            .run()?;
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        if output.status.code() != Some(expected) {
            bail!(
                "npu-progress {} exited with {:?}: {}",
                command_line.join(" "),
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(wall_ms)
    }

    fn repeat(&self, runs: usize, args: &[&str], expected: i32) -> Result<Vec<f64>> {
        (0..runs).map(|_| self.time(args, expected)).collect()
    }

    /// The id `--next` shows now.
    fn next_id(&self) -> Result<String> {
        let out = duct::cmd(self.binary, ["issues.json", "--next", "--format", "json"])
            .dir(self.dir)
            .stdout_capture()
            .read()?;
        let value: serde_json::Value = serde_json::from_str(&out)?;
        value["issue"]["id"]
            .as_str()
            .map(str::to_owned)
            .context("--next showed no issue")
    }

    /// Replace `rel` (under `proj/copy_NNNN/`) by its fixed version from the demo.
    fn fix_code(&self, rel: &str) -> Result<()> {
        let (_, in_demo) = rel.split_once('/').context("a file of a copy")?;
        let fixed = demo().join("tiny-vla-fixed").join(in_demo);
        fs::copy(&fixed, self.dir.join("proj").join(rel))
            .with_context(|| format!("{}", fixed.display()))?;
        Ok(())
    }
}

struct Row {
    name: &'static str,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    json_load_ms: f64,
}

impl Row {
    fn new(name: &'static str, mut samples: Vec<f64>, json_load_ms: f64) -> Row {
        samples.sort_by(f64::total_cmp);
        Row {
            name,
            median_ms: samples[samples.len() / 2],
            min_ms: samples[0],
            max_ms: samples[samples.len() - 1],
            json_load_ms,
        }
    }
}

fn print_rows(rows: &[Row]) {
    println!(
        "{:<30} {:>9} {:>8} {:>8} {:>13}  vs json.load",
        "command", "median ms", "min ms", "max ms", "json.load ms"
    );
    for row in rows {
        let verdict = if row.median_ms <= row.json_load_ms {
            "no slower"
        } else {
            "SLOWER"
        };
        println!(
            "{:<30} {:>9.1} {:>8.1} {:>8.1} {:>13.1}  {verdict} ({:.2}x)",
            row.name,
            row.median_ms,
            row.min_ms,
            row.max_ms,
            row.json_load_ms,
            row.median_ms / row.json_load_ms
        );
    }
}

fn bytes_to_mb(bytes: u64) -> f64 {
    // Sizes here are far below 2^52, so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / (1024.0 * 1024.0);
    mb
}
