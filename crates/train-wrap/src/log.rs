//! The training log: `migrate_to_cloudrobo/logs/train_<YYYYmmdd_HHMMSS>.log`, the same name,
//! header and footer as `train.sh` writes, so both launchers' logs read alike.

use crate::env::shell_quote;
use crate::error::{Error, Result};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// An open log file.
pub struct Log {
    pub path: PathBuf,
    pub file: File,
}

/// The `# command:` line: the command as a shell would need it typed.
pub fn command_line(command: &[OsString]) -> String {
    command
        .iter()
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The name the next log would get (without creating it): for `--dry-run`.
pub fn next_name(dir: &Path) -> PathBuf {
    dir.join(format!("train_{}.log", stamp()))
}

fn stamp() -> String {
    jiff::ZonedDateTime::now()
        .strftime("%Y%m%d_%H%M%S")
        .to_string()
}

/// Create a new log in `dir` (never reusing a name) and write its header.
pub fn create(dir: &Path, command: &[OsString]) -> Result<Log> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Write { path, source }
    };
    fs::create_dir_all(dir).map_err(err(dir))?;
    let base = stamp();
    let mut n = 1;
    let (path, mut file) = loop {
        let name = if n == 1 {
            format!("train_{base}.log")
        } else {
            format!("train_{base}_{n}.log")
        };
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => break (path, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(err(&path)(e)),
        }
    };
    let started = jiff::ZonedDateTime::now()
        .strftime("%Y-%m-%dT%H:%M:%S%z")
        .to_string();
    write!(
        file,
        "# command: {}\n# started: {started}\n",
        command_line(command)
    )
    .map_err(err(&path))?;
    Ok(Log { path, file })
}

/// A `# ` header line after the command and start time (e.g. that the run is emulated).
pub fn note(log: &mut Log, text: &str) -> Result<()> {
    writeln!(log.file, "# {text}").map_err(|source| Error::Write {
        path: log.path.clone(),
        source,
    })
}
