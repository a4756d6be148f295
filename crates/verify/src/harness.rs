//! Running the embedded Python harness: extract it, start it with duct in its own process
//! group, enforce the timeout, and read back its results file.
//!
//! The harness writes one JSON record per line and flushes each, so the checks finished before a
//! crash or a hang are kept; the combined stdout/stderr goes to a log file whose tail is shown
//! when the harness fails.

use crate::interpreter::Interpreter;
use crate::report::{Check, HarnessRunInfo, Status};
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
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

/// What one harness process produced.
#[derive(Debug, Default)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts about how the process ended"
)]
pub struct Outcome {
    pub mode: String,
    /// Every `check` record, in order.
    pub checks: Vec<Check>,
    /// `fact` records by name (later ones merged into earlier objects).
    pub facts: serde_json::Map<String, serde_json::Value>,
    /// The `hello` record: the harness started under this interpreter.
    pub hello: Option<serde_json::Value>,
    /// The `done` record: the harness reached its end.
    pub done: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Stopped because npu-verify was interrupted (Ctrl-C).
    pub interrupted: bool,
    pub spawn_error: Option<String>,
    /// The program started: the interpreter, or the first word of a shell launch command.
    pub program: String,
    /// The run went through a shell launch command with Python shims.
    pub shell: bool,
    pub wall: Duration,
    /// The last lines of its combined output.
    pub tail: String,
    /// A distributed run: one entry per rank, in rank order (empty for a one-process run).
    pub ranks: Vec<crate::ranks::RankOutcome>,
    /// Its combined stdout and stderr, in the workspace (then each rank's own, for a distributed
    /// run); [`keep_logs`] copies them into the project.
    pub logs: Vec<PathBuf>,
    /// Where [`keep_logs`] kept the first of `logs`, relative to the project root.
    pub kept_log: Option<String>,
}

impl Outcome {
    /// The harness could not run at all (no `hello`): the interpreter is unusable.
    pub fn never_started(&self) -> bool {
        self.hello.is_none()
    }

    pub fn info(&self) -> HarnessRunInfo {
        let timing = self
            .facts
            .get("timing")
            .and_then(serde_json::Value::as_object)
            .cloned()
            .unwrap_or_default();
        let failed = !self.done || self.timed_out || self.exit_code != Some(0);
        HarnessRunInfo {
            mode: self.mode.clone(),
            wall_s: (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            exit_code: self.exit_code,
            timed_out: self.timed_out,
            timing,
            output_tail: failed.then(|| self.tail.clone()),
            log: self.kept_log.clone(),
            set_aside: Vec::new(),
        }
    }

    /// The program's last output: [`Outcome::tail`] up to the harness's own traceback of an
    /// exception the program raised (the report shows that traceback under the check), its last
    /// [`OUTPUT_LINES`] lines and at most [`OUTPUT_BYTES`] bytes.
    /// A distributed run's program output is the log of its first rank that started.
    pub fn program_output(&self) -> String {
        let tail = self
            .ranks
            .iter()
            .find(|r| r.started)
            .map_or(self.tail.as_str(), |r| r.tail.as_str());
        let text = match tail.find(RAISED_MARKER) {
            Some(at) => &tail[..at],
            None => tail,
        };
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let mut kept: Vec<&str> = lines[lines.len().saturating_sub(OUTPUT_LINES)..].to_vec();
        while kept.len() > 1 && kept.iter().map(|l| l.len() + 1).sum::<usize>() > OUTPUT_BYTES {
            kept.remove(0);
        }
        let mut out = kept.join("\n");
        if out.len() > OUTPUT_BYTES {
            let mut cut = out.len() - OUTPUT_BYTES;
            while !out.is_char_boundary(cut) {
                cut += 1;
            }
            out = format!("...{}", &out[cut..]);
        }
        out
    }

    /// A check saying how the harness died, when it did not end normally.
    pub fn failure_check(&self, interpreter: &Interpreter, timeout: Duration) -> Option<Check> {
        let name = format!("{}.harness", self.mode);
        let tail = if self.tail.trim().is_empty() {
            "it printed nothing".to_owned()
        } else {
            format!("it printed last:\n{}", self.tail.trim_end())
        };
        let shown = interpreter.info().command.join(" ");
        if let Some(e) = &self.spawn_error {
            let remedy = if self.shell {
                "check the launch command after `--` (its first word must be a program on PATH)"
            } else {
                "pass a working interpreter with --python PATH or --conda-env NAME"
            };
            return Some(Check::fail(
                &name,
                format!("cannot start `{}`: {e}", self.program),
                remedy,
            ));
        }
        if self.interrupted {
            return Some(Check::fail(
                &name,
                format!("interrupted: the {} run was stopped; {tail}", self.mode),
                "run npu-verify again",
            ));
        }
        if self.timed_out {
            return Some(Check::fail(
                &name,
                format!(
                    "the {} run did not finish within {} s and was stopped; {tail}",
                    self.mode,
                    timeout.as_secs()
                ),
                "find where it waits (a hung DataLoader worker, a distributed init waiting for peers, input()); \
                 raise --timeout if the program only needs more time",
            ));
        }
        if self.never_started() && self.shell {
            return Some(Check::fail(
                &name,
                format!(
                    "the launch command ended ({}) without starting a Python program through `python`, `python3` \
                     or `torchrun` on PATH; {tail}",
                    self.ended()
                ),
                "give the Python command itself after `--` (e.g. `-- python train.py --config X`), or make the \
                 script call `python` from PATH rather than by absolute path",
            ));
        }
        if self.never_started() {
            return Some(Check::fail(
                &name,
                format!(
                    "`{shown}` did not start the harness ({}); {tail}",
                    self.ended()
                ),
                "pass a Python >= 3.10 interpreter with --python PATH or --conda-env NAME",
            ));
        }
        if !self.done {
            return Some(Check::fail(
                &name,
                format!(
                    "the harness died during the {} run ({}); {tail}",
                    self.mode,
                    self.ended()
                ),
                "the program killed the interpreter (a segfault or an out-of-memory kill is typical); run the same \
                 command by hand to see the crash",
            ));
        }
        if let Some(sig) = self.signal {
            // The harness wrote its last record (`done`) and only then died: every check above was
            // reached; the crash is the interpreter's exit, reported as such (not as a failed step,
            // and not as a pass).
            return Some(Check::fail(
                &name,
                format!(
                    "the interpreter aborted at exit after the program finished: the {} run's results are \
                     complete, then the process was killed by signal {sig}; {tail}",
                    self.mode
                ),
                "the program's work is done and its checks above stand; the abort comes from a thread or \
                 destructor of torch or an extension at interpreter exit (`terminate called without an \
                 active exception` is typical); run the command by hand to see it, and with --emulate-npu \
                 report it as an emulator fault",
            ));
        }
        None
    }

    fn ended(&self) -> String {
        match (self.exit_code, self.signal) {
            (_, Some(sig)) => format!("killed by signal {sig}"),
            (Some(code), None) => format!("exit status {code}"),
            (None, None) => "no exit status".to_owned(),
        }
    }
}

/// The line the harness prints before the traceback of an exception the program raised.
const RAISED_MARKER: &str = "npu-verify harness: the program raised:";
/// The most lines of the program's output a run check quotes.
pub const OUTPUT_LINES: usize = 20;
/// The most bytes of the program's output a run check quotes.
pub const OUTPUT_BYTES: usize = 2000;

/// Copy a run's logs ([`Outcome::logs`]) into `PROJECT/migrate_to_cloudrobo/logs/` as
/// `verify_<YYYYmmdd_HHMMSS>_<mode>.log` (a rank's as `…_<mode>.rank<R>.log`), each after a
/// `# ` header with the command; sets [`Outcome::kept_log`]. Nothing is kept when the project has
/// no `migrate_to_cloudrobo/`; a log that cannot be copied is a warning on stderr, not an error.
pub fn keep_logs(root: &Path, command: &str, outcome: &mut Outcome) -> Result<(), String> {
    use std::io::Write as _;
    let migrate = root.join(crate::statics::MIGRATE_DIR);
    if !migrate.is_dir() || outcome.logs.is_empty() {
        return Ok(());
    }
    let dir = migrate.join("logs");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let stamp = jiff::Timestamp::now().strftime("%Y%m%d_%H%M%S").to_string();
    let mut n = 1;
    let base = loop {
        let base = if n == 1 {
            format!("verify_{stamp}_{}", outcome.mode)
        } else {
            format!("verify_{stamp}_{}_{n}", outcome.mode)
        };
        if !dir.join(format!("{base}.log")).exists() || n >= 1000 {
            break base;
        }
        n += 1;
    };
    for (index, from) in outcome.logs.iter().enumerate() {
        let name = if index == 0 {
            format!("{base}.log")
        } else {
            format!("{base}.rank{}.log", index - 1)
        };
        let to = dir.join(&name);
        let copied = std::fs::File::create(&to).and_then(|mut file| {
            writeln!(
                file,
                "# npu-verify {} run: {command}\n# started: {}",
                outcome.mode,
                issue_model::now_rfc3339()
            )?;
            if let Ok(mut log) = std::fs::File::open(from) {
                std::io::copy(&mut log, &mut file)?;
            }
            Ok(())
        });
        copied.map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        if index == 0 {
            outcome.kept_log = Some(format!("{}/logs/{name}", crate::statics::MIGRATE_DIR));
        }
    }
    Ok(())
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
    dir: &Path,
    base: &Path,
    interpreter: &Interpreter,
    request: &Path,
) -> Result<PathBuf, Error> {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir.to_owned();
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
            &base.join(format!("shim-{stem}")),
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

/// The last `lines` lines (at most `bytes` bytes) of a file.
pub fn tail(path: &Path, lines: usize, bytes: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(bytes);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let mut kept = &all[all.len().saturating_sub(lines)..];
    if start > 0 && kept.len() == all.len() && !kept.is_empty() {
        kept = &kept[1..]; // the first line was cut in the middle
    }
    kept.join("\n")
}

pub(crate) fn read_results(path: &Path, outcome: &mut Outcome) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        // A line cut short by a crash is not JSON: skip it.
        let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match record.get("type").and_then(serde_json::Value::as_str) {
            Some("hello") => outcome.hello = Some(record),
            Some("done") => outcome.done = true,
            Some("fact") => {
                let Some(name) = record.get("name").and_then(serde_json::Value::as_str) else {
                    continue;
                };
                let value = record.get("value").cloned().unwrap_or_default();
                match (outcome.facts.get_mut(name), value) {
                    (Some(serde_json::Value::Object(old)), serde_json::Value::Object(new)) => {
                        old.extend(new);
                    }
                    (_, value) => {
                        outcome.facts.insert(name.to_owned(), value);
                    }
                }
            }
            Some("check") => {
                if let Some(check) = parse_check(&record) {
                    outcome.checks.push(check);
                }
            }
            _ => {}
        }
    }
}

fn parse_check(record: &serde_json::Value) -> Option<Check> {
    let text = |key: &str| {
        record
            .get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let status = match text("status")?.as_str() {
        "pass" => Status::Pass,
        "warn" => Status::Warn,
        "fail" => Status::Fail,
        "skip" => Status::Skip,
        _ => return None,
    };
    let mut check = Check::new(&text("name")?, status, text("detail").unwrap_or_default());
    check.remedy = text("remedy");
    check.emulated = record
        .get("emulated")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    check.data = record.get("data").filter(|d| !d.is_null()).cloned();
    Some(check)
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
