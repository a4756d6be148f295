//! Running the command: its own process group, one pipe for its stdout and stderr copied to our
//! stdout and the log, signals forwarded to the group, and its exit code passed through.
//!
//! stdout and stderr share one pipe (as `2>&1 | tee` in `train.sh`): the kernel keeps the
//! command's writes in the order it made them, so the log never reorders lines between the two
//! streams. Bytes are copied as they arrive, so progress bars that redraw with `\r` still show.

use crate::env::Plan;
use crate::error::{Error, Result};
use crate::log::Log;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// How long to wait for the output pipe to close after the command exited. A background
/// process the command left behind can hold the pipe open forever.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How the run ended.
#[derive(Debug)]
pub struct Finished {
    /// The exit code to report: the command's, or 128+N when signal N ended it.
    pub code: u8,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// Things the user should know (the log could not be written, the output stayed open…).
    pub notes: Vec<String>,
}

/// Run `command` with `plan`'s environment, copying its output to stdout and `log`.
pub fn run(command: &[OsString], plan: &Plan, log: Option<Log>) -> Result<Finished> {
    let Some((program, args)) = command.split_first() else {
        return Err(Error::NotFound {
            command: String::new(),
        });
    };
    let name = program.to_string_lossy().into_owned();
    let (reader, writer) = io::pipe().map_err(|source| Error::CannotRun {
        command: name.clone(),
        source,
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in &plan.changes {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let writer2 = writer.try_clone().map_err(|source| Error::CannotRun {
        command: name.clone(),
        source,
    })?;
    cmd.stdout(writer).stderr(writer2).process_group(0);

    // Registered before the spawn, so a Ctrl-C that arrives meanwhile is still forwarded.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(Error::Signals)?;
    let spawned = cmd.spawn();
    // The pipe's write ends live in `cmd` too: drop them, or the reader never sees the end.
    drop(cmd);
    let mut child = match spawned {
        Ok(child) => child,
        Err(source) => {
            let error = spawn_error(&name, source);
            if let Some(mut log) = log {
                // The log says why the run never started, like a shell's own message would.
                let _ = writeln!(
                    log.file,
                    "npu-train: error: {error}\n# exit code: {}",
                    error.exit_code()
                );
            }
            return Err(error);
        }
    };
    let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));

    let signal_handle = signals.handle();
    let forwarder = thread::spawn(move || {
        for sig in signals.forever() {
            if let Ok(sig) = Signal::try_from(sig) {
                // The group may be gone already; nothing to do then.
                let _ = killpg(pgid, sig);
            }
        }
    });

    let log = log.map(|l| (l.path, Arc::new(Mutex::new(l.file))));
    let (done_tx, done_rx) = mpsc::channel();
    let tee_log = log.as_ref().map(|(_, f)| Arc::clone(f));
    thread::spawn(move || {
        let report = tee(reader, tee_log.as_deref());
        let _ = done_tx.send(report);
    });

    let status = child.wait().map_err(|source| Error::Wait {
        command: name.clone(),
        source,
    });
    let mut notes = Vec::new();
    let mut unterminated = false;
    match done_rx.recv_timeout(DRAIN_TIMEOUT) {
        Ok(report) => {
            unterminated = report.unterminated;
            if report.stdout_closed {
                notes.push("stdout was closed; the output went on to the log only".to_owned());
            }
            if let (Some(e), Some((path, _))) = (report.log_error, &log) {
                notes.push(format!("writing {} failed: {e}; the log is incomplete", path.display()));
            }
        }
        Err(_) => notes.push(format!(
            "{name} exited but its output stayed open (a background process it started?); stopped copying it"
        )),
    }
    signal_handle.close();
    let _ = forwarder.join();

    let status = status?;
    let code = exit_code(status);
    if let Some((path, file)) = &log {
        let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
        let newline = if unterminated { "\n" } else { "" };
        let footer = writeln!(file, "{newline}# exit code: {code}")
            .and_then(|()| file.flush())
            .and_then(|()| file.sync_all());
        if let Err(e) = footer {
            notes.push(format!("writing {} failed: {e}", path.display()));
        }
    }
    Ok(Finished {
        code,
        signal: status.signal(),
        notes,
    })
}

fn spawn_error(name: &str, source: io::Error) -> Error {
    let exists_as_path = name.contains('/') && Path::new(name).exists();
    if source.kind() == io::ErrorKind::NotFound && !exists_as_path {
        Error::NotFound {
            command: name.to_owned(),
        }
    } else {
        // Found but not runnable: no permission, a directory, or a missing `#!` interpreter.
        Error::CannotRun {
            command: name.to_owned(),
            source,
        }
    }
}

/// The shell convention: the exit code, or 128+N for death by signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    let signal = status.signal().unwrap_or(0);
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

struct TeeReport {
    stdout_closed: bool,
    /// The log's last byte was not a newline (the footer then starts a line of its own).
    unterminated: bool,
    log_error: Option<io::Error>,
}

/// Copy `reader` to stdout and `log` until it ends. A closed stdout or a failing log stops
/// only that copy; the command keeps running and the other copy goes on.
fn tee(mut reader: io::PipeReader, log: Option<&Mutex<File>>) -> TeeReport {
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdout_closed = false;
    let mut log_error = None;
    let mut unterminated = false;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        unterminated = chunk.last() != Some(&b'\n');
        if !stdout_closed {
            let mut out = io::stdout().lock();
            stdout_closed = out.write_all(chunk).and_then(|()| out.flush()).is_err();
        }
        if let (Some(log), None) = (log, &log_error) {
            let mut file = log.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = file.write_all(chunk) {
                log_error = Some(e);
            }
        }
    }
    TeeReport {
        stdout_closed,
        unterminated,
        log_error,
    }
}
