//! `cargo xtask bench progress`: every `npu-progress` command on realistic issues.json files,
//! next to Python's `json.load` of the same file.
//!
//! For each size (`--issues`, by default 326, 2,000 and 20,000 issues) the demo project
//! (`assets/demo/tiny-vla`) is copied as many times as that takes, the copies are scanned with
//! the scan library, and the first issues of the scan are written as issues.json, as `npu-scan`
//! writes it. Each command then runs `--runs` times on the release binary (median wall ms, the
//! process start included, and median CPU ms, user + system); after each run, one `python3`
//! process kept running for the purpose times one `json.load` of the same file (wall and CPU),
//! so both are measured under the same load of the machine. `--fixed` is timed with its re-check (the issue's file is first replaced by its fixed version
//! from `assets/demo/tiny-vla-fixed`, as a user fixes the code first) and with `--force`.
//! Acceptance: at 2,000 issues every command is no slower than `json.load`.

use anyhow::{Context, Result, bail};
use issue_model::{IssuesFile, Status, Summary, Tool};
use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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
            let wall = rows.iter().all(|row| row.no_slower().0);
            let cpu = rows.iter().all(|row| row.no_slower().1);
            verdict = Some((wall, cpu));
        }
    }
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    match verdict {
        Some((wall, cpu)) => println!(
            "acceptance (every command at {ACCEPTANCE_ISSUES} issues no slower than json.load): wall {}, cpu {}",
            met(wall),
            met(cpu)
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
    let mut bench = Bench {
        binary,
        dir,
        json_load: JsonLoad::start(&json)?,
    };
    println!(
        "\nnpu-progress on {count} issues (issues.json {:.1} MB)",
        bytes_to_mb(fs::metadata(&json)?.len())
    );

    // Every timed change is a real one: each command marks an issue no other command used.
    let mut picks = Picks::new(&file);
    let mut rows = Vec::new();
    let mut row = |name: &'static str, samples: Vec<(Sample, Sample)>| {
        rows.push(Row::new(name, &samples));
    };

    // The first show records a `shown` entry (a write); marking the issue fixed between runs
    // (untimed) moves on to a new one.
    let mut samples = Vec::new();
    for _ in 0..runs {
        samples.push(bench.time(&["--next"], 0)?);
        let id = bench.next_id()?;
        bench.run_untimed(&["--fixed", &id, "--force"])?;
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
        scope: None,
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

/// A `python3` process that times one `json.load` of the file for each line it reads.
struct JsonLoad {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl JsonLoad {
    const SCRIPT: &str = "import json,sys,time\n\
        for _ in sys.stdin:\n    \
            w,c=time.perf_counter(),time.process_time()\n    \
            with open(sys.argv[1]) as f: json.load(f)\n    \
            print((time.perf_counter()-w)*1000,(time.process_time()-c)*1000,flush=True)";

    fn start(path: &Path) -> Result<JsonLoad> {
        let mut child = Command::new("python3")
            .args(["-c", Self::SCRIPT])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot run python3")?;
        let stdin = child.stdin.take().context("python3's stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("python3's stdout")?);
        Ok(JsonLoad {
            child,
            stdin: Some(stdin),
            stdout,
        })
    }

    fn sample(&mut self) -> Result<Sample> {
        let stdin = self.stdin.as_mut().context("python3 has stopped")?;
        writeln!(stdin, "load")?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let figures: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("python3 printed {line:?}"))?;
        match figures.as_slice() {
            [wall_ms, cpu_ms] => Ok(Sample {
                wall_ms: *wall_ms,
                cpu_ms: *cpu_ms,
            }),
            _ => bail!("python3 printed {line:?}"),
        }
    }
}

impl Drop for JsonLoad {
    fn drop(&mut self) {
        // End of input ends the script.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// One timed run: wall and CPU (user + system) milliseconds.
#[derive(Clone, Copy)]
struct Sample {
    wall_ms: f64,
    cpu_ms: f64,
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
    json_load: JsonLoad,
}

impl Bench<'_> {
    /// Run `npu-progress issues.json args` once (it must exit with `expected`), then one
    /// `json.load`.
    fn time(&mut self, args: &[&str], expected: i32) -> Result<(Sample, Sample)> {
        let mut command_line = vec!["issues.json"];
        command_line.extend_from_slice(args);
        let cpu_before = children_cpu_ms()?;
        let started = Instant::now();
        let output = duct::cmd(self.binary, &command_line)
            .dir(self.dir)
            .stdout_null()
            .stderr_capture()
            .unchecked()
            .run()?;
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        let cpu_ms = children_cpu_ms()? - cpu_before;
        if output.status.code() != Some(expected) {
            bail!(
                "npu-progress {} exited with {:?}: {}",
                command_line.join(" "),
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok((Sample { wall_ms, cpu_ms }, self.json_load.sample()?))
    }

    fn repeat(
        &mut self,
        runs: usize,
        args: &[&str],
        expected: i32,
    ) -> Result<Vec<(Sample, Sample)>> {
        (0..runs).map(|_| self.time(args, expected)).collect()
    }

    fn run_untimed(&self, args: &[&str]) -> Result<()> {
        let mut command_line = vec!["issues.json"];
        command_line.extend_from_slice(args);
        duct::cmd(self.binary, &command_line)
            .dir(self.dir)
            .stdout_null()
            .stderr_null()
            .run()?;
        Ok(())
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

/// CPU time (user + system) of the children waited for so far, in ms.
fn children_cpu_ms() -> Result<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    let ms = |t: nix::sys::time::TimeVal| {
        // Seconds of CPU time are far below 2^52: the conversion is exact.
        #[allow(clippy::cast_precision_loss)]
        let ms = t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
        ms
    };
    Ok(ms(usage.user_time()) + ms(usage.system_time()))
}

/// The medians of one command's runs and of the `json.load` after each.
struct Row {
    name: &'static str,
    progress: Sample,
    json_load: Sample,
}

impl Row {
    fn new(name: &'static str, samples: &[(Sample, Sample)]) -> Row {
        let median = |pick: fn(&(Sample, Sample)) -> f64| {
            let mut v: Vec<f64> = samples.iter().map(pick).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Row {
            name,
            progress: Sample {
                wall_ms: median(|s| s.0.wall_ms),
                cpu_ms: median(|s| s.0.cpu_ms),
            },
            json_load: Sample {
                wall_ms: median(|s| s.1.wall_ms),
                cpu_ms: median(|s| s.1.cpu_ms),
            },
        }
    }

    fn no_slower(&self) -> (bool, bool) {
        (
            self.progress.wall_ms <= self.json_load.wall_ms,
            self.progress.cpu_ms <= self.json_load.cpu_ms,
        )
    }
}

fn print_rows(rows: &[Row]) {
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9}  median ms; npu-progress vs json.load",
        "command", "wall", "json.load", "cpu", "json.load"
    );
    let verdict = |ok: bool| if ok { "no slower" } else { "SLOWER" };
    for row in rows {
        let (wall, cpu) = row.no_slower();
        println!(
            "{:<34} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  wall {}, cpu {}",
            row.name,
            row.progress.wall_ms,
            row.json_load.wall_ms,
            row.progress.cpu_ms,
            row.json_load.cpu_ms,
            verdict(wall),
            verdict(cpu),
        );
    }
}

fn bytes_to_mb(bytes: u64) -> f64 {
    // Sizes here are far below 2^52, so the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / (1024.0 * 1024.0);
    mb
}
