//! Errors of the launcher itself. Their exit codes follow `env(1)`/`timeout(1)`: 125 for the
//! launcher's own failures, 126 for a command that cannot be run, 127 for one that is not found.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A usage error clap cannot see (the text says what to type instead).
    #[error("{0}")]
    Usage(String),
    #[error(
        "{} does not exist; create it first with `npu-assets init {}` (or pass --project)",
        path.display(),
        project.display()
    )]
    NoMigrateDir { path: PathBuf, project: PathBuf },
    #[error("cannot run bash to source {}: {source}; npu-train needs bash on PATH", path.display())]
    Bash {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sourcing {} failed ({status}) before the environment could be read; fix the script, or try `bash -c '. {}'`", path.display(), path.display())]
    EnvScript { path: PathBuf, status: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up the emulated npu device: {0}")]
    Emulator(#[from] patch_assets::Error),
    #[error("cannot set up signal forwarding: {0}")]
    Signals(#[source] std::io::Error),
    #[error("{command}: command not found")]
    NotFound { command: String },
    #[error("{command}: cannot run it: {source}")]
    CannotRun {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for {command} failed: {source}")]
    Wait {
        command: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The exit code `npu-train` reports for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotFound { .. } => 127,
            Error::CannotRun { .. } => 126,
            _ => 125,
        }
    }
}
