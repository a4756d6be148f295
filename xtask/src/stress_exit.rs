//! `cargo xtask stress-exit`: many fresh interpreters that install the emulated npu, train one step
//! and exit; counts how many of them abort at exit, per torch version.
//!
//! Each run is `tests/stress-exit/step_and_exit.py`, pinned to one CPU (runs alternate between the
//! CPUs), which must print its step, run its `atexit` handler, flush its buffered output and exit
//! with its own status (3). An abort at exit (a signal such as SIGABRT from `terminate called
//! without an active exception`), a hang (killed after `--timeout` seconds) and any other
//! difference are counted apart; the command fails when any run did not end as expected.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Fresh interpreters per torch version.
    #[arg(long, default_value_t = 200)]
    pub runs: usize,
    /// A torch version to stress (repeatable); default: the test venv's torch and the matrix's.
    #[arg(long = "torch", value_name = "X.Y.Z")]
    pub torch: Vec<String>,
    /// Interpreters run at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Seconds after which a run counts as hung and is killed.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// The exit status the stress program ends with; any other status is a failure.
const EXPECTED_STATUS: i32 = 3;

/// How the runs of one torch version ended.
#[derive(Debug, Default)]
pub struct Tally {
    pub runs: usize,
    pub aborted: usize,
    pub hung: usize,
    pub other: usize,
    /// The first few failures: what the run printed last.
    pub examples: Vec<String>,
}

impl Tally {
    pub fn clean(&self) -> bool {
        self.aborted == 0 && self.hung == 0 && self.other == 0
    }
}

/// How one run ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Clean,
    Aborted(String),
    Hung,
    Other(String),
}

pub fn run(args: &Args) -> Result<()> {
    run_versions(&versions(&args.torch), args)
}

/// Stress each torch of `versions` (`None`: the test venv's) as `args` says; `args.torch` is
/// not read.
pub fn run_versions(versions: &[Option<String>], args: &Args) -> Result<()> {
    let mut all_clean = true;
    for version in versions {
        let python = python_for(version.as_deref())?;
        let label = version
            .clone()
            .unwrap_or_else(|| "of the test venv".to_owned());
        let started = Instant::now();
        let tally = stress(&python, args.runs, args.jobs, args.timeout)?;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "torch {label}: {} runs, {} aborted at exit, {} hung, {} other failures ({:.1} s, {:.2} s per run)",
            tally.runs,
            tally.aborted,
            tally.hung,
            tally.other,
            secs,
            secs / f64::from(u32::try_from(tally.runs.max(1)).unwrap_or(u32::MAX))
        );
        for example in &tally.examples {
            println!("  {example}");
        }
        all_clean &= tally.clean();
    }
    if !all_clean {
        bail!("some interpreters did not exit cleanly (see above)");
    }
    Ok(())
}

/// `None` stands for the default test venv.
fn versions(given: &[String]) -> Vec<Option<String>> {
    if given.is_empty() {
        std::iter::once(None)
            .chain(crate::venv::MATRIX.iter().map(|v| Some((*v).to_owned())))
            .collect()
    } else {
        given.iter().cloned().map(Some).collect()
    }
}

fn python_for(version: Option<&str>) -> Result<PathBuf> {
    let requirements = match version {
        Some(v) => crate::venv::requirements_for_torch(v)?,
        None => crate::venv::default_requirements(),
    };
    crate::venv::ensure(&requirements)
}

/// Run `runs` fresh interpreters of `python`, `jobs` at a time.
pub fn stress(python: &Path, runs: usize, jobs: Option<usize>, timeout: u64) -> Result<Tally> {
    let root = crate::project_root();
    let program = root.join("tests/stress-exit/step_and_exit.py");
    let emulator = root.join("assets/emulator");
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let jobs = jobs.unwrap_or(cpus).clamp(1, runs.max(1));
    // The first run builds the C++ extension of older torch (cached): alone, so that the others
    // wait for nothing and no run is judged on a build.
    let first = run_once(python, &program, &emulator, 0, timeout)?;
    let tally = Mutex::new(Tally::default());
    record(&tally, first);
    let next = AtomicUsize::new(1);
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= runs {
                            return Ok(());
                        }
                        let outcome = run_once(python, &program, &emulator, i % cpus, timeout)?;
                        record(&tally, outcome);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("a stress worker panicked"))??;
        }
        Ok(())
    })?;
    Ok(tally
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
}

fn record(tally: &Mutex<Tally>, outcome: Outcome) {
    let mut t = tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    t.runs += 1;
    let example = match outcome {
        Outcome::Clean => None,
        Outcome::Aborted(tail) => {
            t.aborted += 1;
            Some(format!("aborted at exit: {tail}"))
        }
        Outcome::Hung => {
            t.hung += 1;
            Some("hung: killed after the timeout".to_owned())
        }
        Outcome::Other(what) => {
            t.other += 1;
            Some(what)
        }
    };
    if let Some(example) = example
        && t.examples.len() < 3
    {
        t.examples.push(example);
    }
}

fn run_once(
    python: &Path,
    program: &Path,
    emulator: &Path,
    cpu: usize,
    timeout: u64,
) -> Result<Outcome> {
    let dir = tempfile::tempdir().context("cannot create a temporary folder")?;
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(python)
        .arg(program)
        .arg(emulator)
        .arg(cpu.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    Ok(judge(status, &stdout, &stderr))
}

fn judge(status: Option<std::process::ExitStatus>, stdout: &str, stderr: &str) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        return Outcome::Hung;
    };
    let tail = last_line(stderr);
    if let Some(signal) = status.signal() {
        return Outcome::Aborted(format!("signal {signal}; {tail}"));
    }
    if status.code() != Some(EXPECTED_STATUS) {
        return Outcome::Other(format!(
            "exit status {:?} instead of {EXPECTED_STATUS}: {tail}",
            status.code()
        ));
    }
    if !stdout.contains("step done") || !stdout.contains("atexit handler ran") {
        return Outcome::Other(format!(
            "lost output (buffered line or atexit handler): {:?}",
            stdout.trim()
        ));
    }
    Outcome::Clean
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output on stderr)")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn status(raw: i32) -> std::process::ExitStatus {
        std::process::ExitStatus::from_raw(raw)
    }

    const GOOD: &str = "step done, loss 0.1\natexit handler ran\n";

    #[test]
    fn a_run_that_kept_its_output_and_status_is_clean() {
        assert_eq!(judge(Some(status(3 << 8)), GOOD, ""), Outcome::Clean);
    }

    #[test]
    fn a_signal_is_an_abort_with_the_last_line_of_stderr() {
        let got = judge(
            Some(status(6)),
            GOOD,
            "terminate called without an active exception\n",
        );
        assert_eq!(
            got,
            Outcome::Aborted("signal 6; terminate called without an active exception".to_owned())
        );
    }

    #[test]
    fn lost_output_and_wrong_status_and_timeouts_are_failures() {
        assert!(matches!(
            judge(Some(status(3 << 8)), "step done\n", ""),
            Outcome::Other(_)
        ));
        assert!(matches!(
            judge(Some(status(0)), GOOD, ""),
            Outcome::Other(_)
        ));
        assert_eq!(judge(None, "", ""), Outcome::Hung);
    }
}
