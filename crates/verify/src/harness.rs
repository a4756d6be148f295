//! Running the embedded Python harness: extract it, start it with duct in its own process
//! group, enforce the timeout, and read back its results file.
//!
//! The harness writes one JSON record per line and flushes each, so the checks finished before a
//! crash or a hang are kept; the combined stdout/stderr goes to a log file whose tail is shown
//! when the harness fails.

pub(crate) use crate::outcome::read_results;
pub use crate::outcome::{OUTPUT_BYTES, OUTPUT_LINES, Outcome, keep_logs, tail};

use crate::interpreter::Interpreter;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Files a harness run needs, extracted into a private temporary directory.
pub struct Workspace {
    dir: tempfile::TempDir,
    /// The emulator this run uses, once asked for.
    emulator: Option<patch_assets::emulator::Emulator>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot create the harness directory: {0}")]
    TempDir(#[source] std::io::Error),
    #[error("this npu-verify build lacks the embedded `{0}` assets")]
    MissingAsset(&'static str),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Workspace {
    pub fn new() -> Result<Workspace, Error> {
        let dir = tempfile::Builder::new()
            .prefix("npu-verify-")
            .tempdir()
            .map_err(Error::TempDir)?;
        extract_dir("harness", dir.path())?;
        Ok(Workspace {
            dir,
            emulator: None,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// [`Workspace::emulator`] was already found.
    pub fn has_emulator(&self) -> bool {
        self.emulator.is_some()
    }

    /// The emulator (`npu_emulator`, the stand-in `torch_npu`) for `project`: the same copy
    /// `npu-train --emulate-npu` would use (`patch_assets::emulator` documents the search).
    pub fn emulator(
        &mut self,
        project: &Path,
    ) -> Result<&patch_assets::emulator::Emulator, patch_assets::Error> {
        if self.emulator.is_none() {
            self.emulator = Some(patch_assets::emulator::locate_here(project)?);
        }
        Ok(self
            .emulator
            .as_ref()
            .unwrap_or_else(|| unreachable!("set just above")))
    }

    /// The shipped `runtime_patches.py`, for projects without their own copy.
    pub fn shipped_patches(&self) -> Result<Option<PathBuf>, Error> {
        let Some(bytes) = patch_assets::get("runtime_patches.py") else {
            return Ok(None);
        };
        let path = self.path().join("shipped").join("runtime_patches.py");
        write(&path, bytes)?;
        Ok(Some(path))
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(path, bytes).map_err(err)
}

fn extract_dir(name: &'static str, base: &Path) -> Result<(), Error> {
    let dir = patch_assets::ASSETS
        .get_dir(name)
        .ok_or(Error::MissingAsset(name))?;
    let mut stack = vec![dir];
    let mut any = false;
    while let Some(dir) = stack.pop() {
        for file in dir.files() {
            let path = file.path();
            if path.extension().is_some_and(|e| e == "pyc") || path.ends_with(".keep") {
                continue;
            }
            write(&base.join(path), file.contents())?;
            any = true;
        }
        stack.extend(dir.dirs());
    }
    if any {
        Ok(())
    } else {
        Err(Error::MissingAsset(name))
    }
}

/// One harness run.
pub struct Job<'a> {
    pub mode: &'a str,
    /// The stem of its files in the workspace (request, results, log, shims); the mode when
    /// None. Two runs of one mode at once need their own.
    pub files: Option<&'a str>,
    pub request: serde_json::Value,
    pub cwd: &'a Path,
    pub env: &'a [(String, OsString)],
    pub timeout: Duration,
    /// Run this command with Python shims on `PATH` instead of starting the harness directly.
    pub shell: Option<&'a [String]>,
    /// Run the program under torchrun with this many processes (one harness per rank).
    pub ranks: Option<u32>,
}

/// Shell-quote one word for a generated `/bin/sh` script.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `python`, `python3` and `torchrun` scripts that start the harness in shim mode.
fn write_shims(
    dir: PathBuf,
    base: &Path,
    interpreter: &Interpreter,
    request: &Path,
) -> Result<PathBuf, Error> {
    use std::os::unix::fs::PermissionsExt;
    let mut python: Vec<String> = vec![sh_quote(&interpreter.program.to_string_lossy())];
    python.extend(
        interpreter
            .args
            .iter()
            .map(|a| sh_quote(&a.to_string_lossy())),
    );
    let harness = base.join("harness").join("run_harness.py");
    let script = format!(
        "#!/bin/sh\n# npu-verify: the first Python program this command starts runs under the harness.\n\
         exec {} -u {} --shim {} \"$@\"\n",
        python.join(" "),
        sh_quote(&harness.to_string_lossy()),
        sh_quote(&request.to_string_lossy()),
    );
    let torchrun = format!(
        "#!/bin/sh\nexec {} -m torch.distributed.run \"$@\"\n",
        sh_quote(&dir.join("python").to_string_lossy())
    );
    for (name, text) in [
        ("python", &script),
        ("python3", &script),
        ("torchrun", &torchrun),
    ] {
        let path = dir.join(name);
        write(&path, text.as_bytes())?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|source| Error::Write { path, source })?;
    }
    Ok(dir)
}

pub fn run(
    workspace: &Workspace,
    interpreter: &Interpreter,
    job: Job<'_>,
) -> Result<Outcome, Error> {
    let Job {
        mode,
        files,
        mut request,
        cwd,
        env,
        timeout,
        shell,
        ranks,
    } = job;
    let base = workspace.path();
    let stem = files.unwrap_or(mode);
    let results = base.join(format!("results-{stem}.jsonl"));
    let log = base.join(format!("output-{stem}.log"));
    let request_path = base.join(format!("request-{stem}.json"));
    request["mode"] = mode.into();
    request["results"] = results.display().to_string().into();
    if ranks.is_some() {
        request["rank_results"] = crate::ranks::rank_file(base, mode, "results", "jsonl").into();
        request["rank_output"] = crate::ranks::rank_file(base, mode, "output", "log").into();
    }
    write(
        &request_path,
        serde_json::to_string(&request)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    write(&results, b"")?;

    let (program, args, path_env) = if let Some(words) = shell {
        let shims = write_shims(
            base.join(format!("shim-{stem}")),
            base,
            interpreter,
            &request_path,
        )?;
        let mut paths = vec![shims];
        if let Some(old) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        let joined = std::env::join_paths(paths).ok();
        // A string, not a path: duct runs a one-component path from the current directory.
        let program = OsString::from(words.first().map_or("", String::as_str));
        let args: Vec<OsString> = words.iter().skip(1).map(OsString::from).collect();
        (program, args, joined)
    } else {
        let mut args = interpreter.args.clone();
        args.push("-u".into());
        args.push(base.join("harness").join("run_harness.py").into());
        if ranks.is_some() {
            // The harness replaces itself with torchrun, which starts one harness per rank.
            args.push("--torchrun".into());
        }
        args.push(request_path.into());
        (interpreter.program.clone().into_os_string(), args, None)
    };
    let mut command = duct::cmd(&program, &args)
        .dir(cwd)
        .stdin_null()
        .stderr_to_stdout()
        .stdout_path(&log)
        .unchecked()
        .before_spawn(|cmd| {
            // Its own process group, so the timeout can stop DataLoader workers and launchers too.
            cmd.process_group(0);
            Ok(())
        });
    for (key, value) in env {
        command = command.env(key, value);
    }
    if let Some(path) = path_env {
        command = command.env("PATH", path);
    }

    std::sync::LazyLock::force(&INTERRUPTED);
    let started = Instant::now();
    let spawned_at = std::time::SystemTime::now();
    let mut outcome = Outcome {
        mode: mode.to_owned(),
        program: program.to_string_lossy().into_owned(),
        shell: shell.is_some(),
        ..Outcome::default()
    };
    match command.start() {
        Err(e) => outcome.spawn_error = Some(e.to_string()),
        Ok(handle) => {
            let pgid = handle.pids().first().copied();
            let deadline = started + timeout;
            loop {
                match handle.wait_timeout(Duration::from_millis(100)) {
                    Ok(Some(output)) => {
                        record_status(&mut outcome, output.status);
                        break;
                    }
                    Ok(None) if interrupted() => {
                        outcome.interrupted = true;
                        stop_group(pgid, &handle);
                        break;
                    }
                    Ok(None) if Instant::now() >= deadline => {
                        outcome.timed_out = true;
                        stop_group(pgid, &handle);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        outcome.spawn_error = Some(e.to_string());
                        break;
                    }
                }
            }
            // Workers may outlive the harness; the group goes with it.
            if let Some(pgid) = pgid {
                kill_group(pgid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
    outcome.wall = started.elapsed();
    outcome.tail = tail(&log, 60, 6000);
    outcome.logs.push(log.clone());
    if let Some(count) = ranks {
        outcome.logs.extend(
            (0..count).map(|rank| crate::ranks::rank_path(base, mode, "output", "log", rank)),
        );
    }
    read_results(&results, &mut outcome);
    if let Some(count) = ranks {
        crate::ranks::collect(base, count, &mut outcome);
    }
    // How long the interpreter took to reach the harness's first line (Python, site, conda run).
    let hello_at = outcome
        .hello
        .as_ref()
        .and_then(|h| h.get("unix_time"))
        .and_then(serde_json::Value::as_f64);
    if let (Some(at), Ok(spawned)) = (hello_at, spawned_at.duration_since(std::time::UNIX_EPOCH)) {
        let timing = outcome
            .facts
            .entry("timing")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let Some(timing) = timing.as_object_mut() {
            timing.insert(
                "interpreter_start_s".to_owned(),
                (at - spawned.as_secs_f64()).max(0.0).into(),
            );
        }
    }
    Ok(outcome)
}

static INTERRUPTED: std::sync::LazyLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
    std::sync::LazyLock::new(|| {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The harness runs in its own process group, out of reach of the terminal's Ctrl-C: catch
        // SIGINT/SIGTERM here and stop its group ourselves. If registering fails, the default
        // action still ends npu-verify, as before.
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            let _ = signal_hook::flag::register(signal, std::sync::Arc::clone(&flag));
        }
        flag
    });

/// Ctrl-C (or SIGTERM/SIGHUP) arrived while a harness ran.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

fn record_status(outcome: &mut Outcome, status: std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    outcome.exit_code = status.code();
    outcome.signal = status.signal();
}

fn kill_group(pgid: u32, signal: nix::sys::signal::Signal) {
    if let Ok(pid) = i32::try_from(pgid) {
        // The group may already be gone; nothing to do then.
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// SIGTERM the group, give it 3 s, then SIGKILL.
fn stop_group(pgid: Option<u32>, handle: &duct::Handle) {
    if let Some(pgid) = pgid {
        kill_group(pgid, nix::sys::signal::Signal::SIGTERM);
        if matches!(handle.wait_timeout(Duration::from_secs(3)), Ok(Some(_))) {
            return;
        }
        kill_group(pgid, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = handle.kill();
    let _ = handle.wait_timeout(Duration::from_secs(3));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let text: String = (0..100).fold(String::new(), |mut s, i| {
            use std::fmt::Write as _;
            let _ = writeln!(s, "line {i}");
            s
        });
        std::fs::write(&path, text).unwrap();
        assert_eq!(tail(&path, 2, 4000), "line 98\nline 99");
        let short = tail(&path, 100, 20);
        assert!(short.ends_with("line 99"), "{short}");
        assert!(
            !short.starts_with("ne"),
            "a cut first line is dropped: {short}"
        );
    }

    #[test]
    fn program_output_stops_at_the_raised_traceback_and_is_bounded() {
        let mut outcome = Outcome {
            tail: "loading\nstep 0\nnpu-verify harness: the program raised:\nTraceback ...\n"
                .into(),
            ..Outcome::default()
        };
        assert_eq!(outcome.program_output(), "loading\nstep 0");
        outcome.tail = (0..100).fold(String::new(), |mut s, i| {
            use std::fmt::Write as _;
            let _ = writeln!(s, "line {i}");
            s
        });
        let shown = outcome.program_output();
        assert_eq!(shown.lines().count(), OUTPUT_LINES);
        assert!(
            shown.starts_with("line 80\n") && shown.ends_with("line 99"),
            "{shown}"
        );
        outcome.tail = "x".repeat(5000);
        let shown = outcome.program_output();
        assert!(
            shown.len() <= OUTPUT_BYTES + 3 && shown.starts_with("..."),
            "{}",
            shown.len()
        );
        // A distributed run: the first rank that started printed the program's output.
        outcome.ranks = vec![crate::ranks::RankOutcome {
            rank: 0,
            started: true,
            done: false,
            checks: Vec::new(),
            fact: None,
            tail: "rank zero says why".into(),
        }];
        assert_eq!(outcome.program_output(), "rank zero says why");
    }

    #[test]
    fn an_abort_after_the_last_record_is_an_abort_at_exit_not_a_failed_step_or_a_pass() {
        let interpreter = Interpreter {
            program: "python3".into(),
            args: Vec::new(),
            source: "test".into(),
        };
        let timeout = Duration::from_mins(1);
        let mut outcome = Outcome {
            mode: "pipeline".into(),
            hello: Some(serde_json::json!({})),
            done: true,
            exit_code: Some(0),
            tail: "step 2 loss 0.5\nterminate called without an active exception\n".into(),
            ..Outcome::default()
        };
        assert!(outcome.failure_check(&interpreter, timeout).is_none());
        outcome.exit_code = None;
        outcome.signal = Some(6);
        let check = outcome.failure_check(&interpreter, timeout).unwrap();
        assert_eq!(check.name, "pipeline.harness");
        assert!(
            check
                .detail
                .starts_with("the interpreter aborted at exit after the program finished"),
            "{}",
            check.detail
        );
        assert!(
            check.detail.contains("terminate called"),
            "{}",
            check.detail
        );
        assert!(
            !check.detail.contains("  ")
                && !check.remedy.as_deref().unwrap_or_default().contains("  "),
            "{check:?}"
        );
        // Died before its last record: the run itself crashed.
        outcome.done = false;
        let check = outcome.failure_check(&interpreter, timeout).unwrap();
        assert!(
            check
                .detail
                .starts_with("the harness died during the pipeline run"),
            "{}",
            check.detail
        );
    }

    #[test]
    fn results_survive_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        std::fs::write(
            &path,
            "{\"type\":\"hello\",\"python\":\"3.11\"}\n\
             {\"type\":\"check\",\"name\":\"runtime.torch\",\"status\":\"pass\",\"detail\":\"ok\",\"emulated\":true}\n\
             {\"type\":\"fact\",\"name\":\"timing\",\"value\":{\"a\":1}}\n\
             {\"type\":\"fact\",\"name\":\"timing\",\"value\":{\"b\":2}}\n\
             {\"type\":\"check\",\"name\":\"x\",\"sta",
        )
        .unwrap();
        let mut outcome = Outcome {
            mode: "runtime".into(),
            ..Outcome::default()
        };
        read_results(&path, &mut outcome);
        assert!(outcome.hello.is_some());
        assert!(!outcome.done);
        assert_eq!(outcome.checks.len(), 1);
        assert!(outcome.checks[0].emulated);
        assert_eq!(outcome.facts["timing"], serde_json::json!({"a": 1, "b": 2}));
    }
}
