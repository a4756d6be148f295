//! What one harness run produced: its checks, facts and ending, read back from its results file
//! (one JSON record per line, so a crash keeps the records before it), the tail of its log, and
//! the copy of that log kept in the project.

use crate::interpreter::Interpreter;
use crate::report::{Check, HarnessRunInfo, Status};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
