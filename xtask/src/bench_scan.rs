//! `cargo xtask bench scan`: the scanner on a large real Python tree, against `CPython`'s
//! `ast.parse` over the same files.
//!
//! The corpus is the Python sources of a `transformers` wheel, downloaded once with the test
//! venv's pip into a cache directory outside the clone, plus a synthetic file with a
//! 50,000-term expression and deep nesting. It prints lines/s, files/s, wall time and peak RSS
//! for `npu-scan` (release build, every rule) and for `CPython` parse-only, checks that
//! `--threads 1` and `--threads 2` give identical output, and compares with the targets
//! (3× faster than `CPython` parse-only, RSS under 300 MB). With `--baseline BINARY` it also
//! times that `npu-scan` build on the same files and prints the ratios of wall time and RSS and
//! whether the two outputs are identical. Figures only: nothing is asserted on timing.

use anyhow::{Context, Result, bail};
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Default)]
pub struct Args {
    /// The `transformers` version whose wheel is the corpus.
    #[arg(long, default_value = "4.46.3")]
    pub transformers: String,
    /// Scan this directory instead of the downloaded wheel.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Worker threads for the timed scan.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Also time this `npu-scan` binary (another build, such as main's) on the same files in
    /// the same run, and print new/baseline wall time and RSS and whether the output is the same.
    #[arg(long, value_name = "BINARY")]
    pub baseline: Option<PathBuf>,
}

/// Runs a command, and prints its wall time and its peak RSS as JSON on stderr's last line.
const MEASURE: &str = r#"
import json, resource, subprocess, sys, time
out = open(sys.argv[1], "wb")
start = time.perf_counter()
proc = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
sys.stderr.write("\n" + json.dumps({"rc": proc.returncode, "wall": wall, "rss_kb": usage.ru_maxrss,
                  "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
"#;

/// `CPython` parse-only over a list of files (one path per line in argv[1]).
const PARSE: &str = r#"
import ast, sys, time
paths = open(sys.argv[1], encoding="utf-8").read().splitlines()
lines = failed = 0
start = time.perf_counter()
for p in paths:
    with open(p, "rb") as f:
        data = f.read()
    lines += data.count(b"\n")
    try:
        ast.parse(data, p)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        failed += 1
print(f"{len(paths)} {lines} {failed} {time.perf_counter() - start}")
"#;

struct Measured {
    wall: f64,
    cpu: f64,
    rss_mb: f64,
    stdout: Vec<u8>,
    stderr: String,
    rc: i32,
}

fn measure(python: &Path, work: &Path, command: &[String]) -> Result<Measured> {
    let out_path = work.join("measure.out");
    let mut args: Vec<String> = vec!["-c".into(), MEASURE.into(), out_path.display().to_string()];
    args.extend(command.iter().cloned());
    let output = duct::cmd(python, &args)
        .stderr_capture()
        .stdout_null()
        .unchecked()
        .run()?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let last = stderr.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last)
        .with_context(|| format!("the measuring wrapper failed: {stderr}"))?;
    Ok(Measured {
        wall: v["wall"].as_f64().unwrap_or_default(),
        cpu: v["cpu"].as_f64().unwrap_or_default(),
        rss_mb: v["rss_kb"].as_f64().unwrap_or_default() / 1024.0,
        stdout: std::fs::read(&out_path)?,
        rc: i32::try_from(v["rc"].as_i64().unwrap_or(-1)).unwrap_or(-1),
        stderr,
    })
}

fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("npu-patcher").join("bench");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache").join("npu-patcher").join("bench")
}

/// Download and unpack the wheel once; returns the directory holding its sources.
fn transformers_corpus(python: &Path, version: &str) -> Result<PathBuf> {
    let base = cache_dir().join(format!("transformers-{version}"));
    let unpacked = base.join("src");
    let ready = base.join(".complete");
    if ready.exists() {
        return Ok(unpacked);
    }
    let wheels = base.join("wheel");
    std::fs::create_dir_all(&wheels)?;
    eprintln!("xtask: downloading the transformers {version} wheel (one time)");
    duct::cmd!(
        python,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        format!("transformers=={version}"),
        "-d",
        &wheels
    )
    .run()
    .context("pip download of the transformers wheel failed (is the package index reachable?)")?;
    let wheel = std::fs::read_dir(&wheels)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("pip download produced no wheel")?;
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)?;
    }
    duct::cmd!(python, "-m", "zipfile", "-e", &wheel, &unpacked)
        .run()
        .context("cannot unpack the wheel")?;
    std::fs::write(&ready, version)?;
    Ok(unpacked)
}

/// A file that stresses nesting: a 50,000-term sum, deep parentheses, nested blocks.
fn synthetic_corpus() -> Result<PathBuf> {
    let dir = cache_dir().join("synthetic");
    std::fs::create_dir_all(&dir)?;
    let mut text = String::from("import torch\n\n");
    let _ = writeln!(text, "total = {}", vec!["x"; 50_000].join(" + "));
    // CPython's parser stops at 200 nested parentheses and 100 indentation levels.
    let _ = writeln!(text, "deep = {}1{}", "(".repeat(180), ")".repeat(180));
    for depth in 0..90 {
        text.push_str(&"    ".repeat(depth));
        text.push_str("if torch.cuda.is_available():\n");
    }
    text.push_str(&"    ".repeat(90));
    text.push_str("y = torch.randn(3)\n");
    std::fs::write(dir.join("deep_nesting.py"), text)?;
    Ok(dir)
}

pub(crate) fn scan_binary() -> Result<PathBuf> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask: building npu-scan (release)");
    duct::cmd!(&cargo, "build", "--release", "--quiet", "-p", "scan")
        .dir(&root)
        .run()
        .context("cargo build --release -p scan failed")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let target = if target.is_relative() {
        root.join(target)
    } else {
        target
    };
    let binary = target.join("release").join("npu-scan");
    if !binary.exists() {
        bail!("the release binary is not at {}", binary.display());
    }
    Ok(binary)
}

/// The scanner's own `Scanned N Python files (L lines)` summary line.
fn scanned(stderr: &str) -> (usize, usize) {
    let Some(line) = stderr.lines().find(|l| l.starts_with("Scanned ")) else {
        return (0, 0);
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let files = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(0);
    let lines = words
        .get(4)
        .and_then(|w| w.trim_start_matches('(').parse().ok())
        .unwrap_or(0);
    (files, lines)
}

/// The JSON output without its timestamp, for comparing runs.
fn normalized(json: &[u8]) -> Result<String> {
    let mut file = issue_model::parse(Path::new("npu-scan output"), json)?;
    file.scanned_at = String::new();
    Ok(issue_model::to_json(&file))
}

#[allow(clippy::cast_precision_loss, reason = "figures for display")]
fn row(name: &str, files: usize, lines: usize, m: &Measured) {
    println!(
        "{name:<26} {files:>7} {lines:>10} {:>8.2} {:>8.2} {:>12.0} {:>9.0} {:>9.1}",
        m.wall,
        m.cpu,
        lines as f64 / m.wall,
        files as f64 / m.wall,
        m.rss_mb
    );
}

/// The comparison with the baseline build: ratios new/baseline and whether the outputs match.
fn baseline_lines(path: &Path, new: &Measured, base: &Measured) -> String {
    if base.rc == 2 {
        return format!(
            "baseline {}: FAILED (exit 2): {}",
            path.display(),
            base.stderr.trim()
        );
    }
    let same = match (normalized(&new.stdout), normalized(&base.stdout)) {
        (Ok(a), Ok(b)) => if a == b { "yes" } else { "NO" }.to_owned(),
        (_, Err(e)) => format!("cannot tell: the baseline's output does not read ({e:#})"),
        (Err(e), _) => format!("cannot tell: the output does not read ({e:#})"),
    };
    format!(
        "vs baseline {}: wall {:.2}x, RSS {:.2}x (new / baseline; below 1 is better); output identical: {same}",
        path.display(),
        new.wall / base.wall,
        new.rss_mb / base.rss_mb
    )
}

pub fn run(args: &Args) -> Result<()> {
    let python = crate::venv::ensure(&crate::venv::default_requirements())?;
    let corpus = match &args.corpus {
        Some(dir) => dir.clone(),
        None => transformers_corpus(&python, &args.transformers)?,
    };
    let synthetic = synthetic_corpus()?;
    let binary = scan_binary()?;
    let work_dir = cache_dir().join("work");
    std::fs::create_dir_all(&work_dir)?;
    let work = work_dir.as_path();

    println!(
        "corpus: {} (+ synthetic {})",
        corpus.display(),
        synthetic.display()
    );
    println!(
        "{:<26} {:>7} {:>10} {:>8} {:>8} {:>12} {:>9} {:>9}",
        "run", "files", "lines", "wall s", "cpu s", "lines/s", "files/s", "RSS MB"
    );

    let scan_with = |binary: &Path, root: &Path, threads: usize| -> Vec<String> {
        vec![
            binary.display().to_string(),
            root.display().to_string(),
            "--no-write".into(),
            "--no-progress".into(),
            "--format".into(),
            "json".into(),
            "--select".into(),
            "ALL".into(),
            "--threads".into(),
            threads.to_string(),
        ]
    };
    let scan_cmd = |root: &Path, threads: usize| scan_with(&binary, root, threads);

    // Warm the page cache so that neither side pays for the first read.
    let _ = measure(&python, work, &scan_cmd(&corpus, args.threads))?;
    let two = measure(&python, work, &scan_cmd(&corpus, args.threads))?;
    if two.rc == 2 {
        bail!("npu-scan failed: {}", two.stderr);
    }
    let (files, lines) = scanned(&two.stderr);
    row(
        &format!("npu-scan --threads {}", args.threads),
        files,
        lines,
        &two,
    );
    let one = measure(&python, work, &scan_cmd(&corpus, 1))?;
    row("npu-scan --threads 1", files, lines, &one);
    let baseline = match &args.baseline {
        Some(path) => {
            if !path.is_file() {
                bail!(
                    "--baseline {}: no such file (give the path of an npu-scan binary)",
                    path.display()
                );
            }
            let m = measure(&python, work, &scan_with(path, &corpus, args.threads))?;
            row(
                &format!("baseline --threads {}", args.threads),
                files,
                lines,
                &m,
            );
            Some((path, m))
        }
        None => None,
    };

    // CPython parse-only over exactly the files the scanner reads.
    let excludes = scan::files::exclude_set(&[])?;
    let (entries, _) = scan::files::collect(&corpus, &excludes, 2);
    let list: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == scan::files::FileKind::Python)
        .map(|e| e.path.display().to_string())
        .collect();
    let list_path = work.join("files.txt");
    std::fs::write(&list_path, list.join("\n"))?;
    let cpython = measure(
        &python,
        work,
        &[
            python.display().to_string(),
            "-c".into(),
            PARSE.into(),
            list_path.display().to_string(),
        ],
    )?;
    let parsed = String::from_utf8_lossy(&cpython.stdout).into_owned();
    let fields: Vec<&str> = parsed.split_whitespace().collect();
    let py_files: usize = fields.first().and_then(|f| f.parse().ok()).unwrap_or(0);
    let py_lines: usize = fields.get(1).and_then(|f| f.parse().ok()).unwrap_or(0);
    let py_failed: usize = fields.get(2).and_then(|f| f.parse().ok()).unwrap_or(0);
    row("CPython ast.parse", py_files, py_lines, &cpython);

    let synth = measure(&python, work, &scan_cmd(&synthetic, args.threads))?;
    let (sf, sl) = scanned(&synth.stderr);
    row("npu-scan synthetic deep", sf, sl, &synth);
    let synth_json: serde_json::Value = serde_json::from_slice(&synth.stdout).unwrap_or_default();
    let synth_unparsed = synth_json["unparsed"].as_array().map_or(0, Vec::len);

    let identical = normalized(&one.stdout)? == normalized(&two.stdout)?;
    let issues: serde_json::Value = serde_json::from_slice(&two.stdout)?;
    let n_issues = issues["issues"].as_array().map_or(0, Vec::len);
    let n_unparsed = issues["unparsed"].as_array().map_or(0, Vec::len);
    let speedup = cpython.wall / two.wall;
    println!();
    println!(
        "findings: {n_issues}; files the scanner could not parse: {n_unparsed}; CPython could not parse: {py_failed}"
    );
    println!(
        "synthetic deep nesting: {} (unparsed: {synth_unparsed})",
        if synth.rc == 2 { "FAILED" } else { "scanned" }
    );
    println!(
        "speed vs CPython parse-only: {speedup:.1}x (target >= 3x: {})",
        if speedup >= 3.0 { "met" } else { "NOT met" }
    );
    println!(
        "CPU time: npu-scan {:.2}s on {} threads, CPython {:.2}s on one; CPython CPU / npu-scan CPU = {:.1}x",
        two.cpu,
        args.threads,
        cpython.cpu,
        cpython.cpu / two.cpu
    );
    println!(
        "peak RSS: {:.0} MB (target < 300 MB: {})",
        two.rss_mb,
        if two.rss_mb < 300.0 { "met" } else { "NOT met" }
    );
    println!(
        "--threads 1 and --threads {} output identical: {}",
        args.threads,
        if identical { "yes" } else { "NO" }
    );
    if let Some((path, base)) = &baseline {
        println!("{}", baseline_lines(path, &two, base));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_1m: f64 = load
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0.0);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    #[allow(clippy::cast_precision_loss, reason = "a core count")]
    if load_1m > cores as f64 {
        println!(
            "note: load average {load_1m:.1} on {cores} cores: other processes took CPU, so wall \
             times (and the speed ratio) are inflated; the CPU-time figures are the fairer comparison"
        );
    }
    if !identical {
        bail!("the output depends on the thread count");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(wall: f64, rss_mb: f64, stdout: &[u8], rc: i32) -> Measured {
        Measured {
            wall,
            cpu: wall,
            rss_mb,
            stdout: stdout.to_vec(),
            stderr: "Scanned 1 Python files (1 lines)".into(),
            rc,
        }
    }

    #[test]
    fn the_baseline_line_gives_ratios_and_says_when_outputs_cannot_be_compared() {
        let path = Path::new("/bin/old-npu-scan");
        let line = baseline_lines(
            path,
            &measured(1.0, 50.0, b"{}", 1),
            &measured(2.0, 100.0, b"not json", 1),
        );
        assert!(line.contains("wall 0.50x, RSS 0.50x"), "{line}");
        assert!(
            line.contains("cannot tell: the baseline's output does not read"),
            "{line}"
        );
        let failed = baseline_lines(
            path,
            &measured(1.0, 50.0, b"{}", 1),
            &measured(1.0, 50.0, b"", 2),
        );
        assert!(
            failed.starts_with("baseline /bin/old-npu-scan: FAILED"),
            "{failed}"
        );
    }
}
