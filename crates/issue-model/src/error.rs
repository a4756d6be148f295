//! Errors: each names the file and says what is wrong with it.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is empty; run `npu-scan <project> --output <dir>` to create it", path.display())]
    Empty { path: PathBuf },
    #[error("{}:{line}:{column}: invalid issues.json: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{} is not an issues.json written by npu-scan: {why}", path.display())]
    Foreign { path: PathBuf, why: String },
    #[error(
        "{} has schema_version {found}, but this tool reads version {}; use the npu-patcher release that wrote it",
        path.display(),
        crate::schema::SCHEMA_VERSION
    )]
    SchemaVersion { path: PathBuf, found: String },
    #[error("{} is read-only; make it writable (chmod u+w) and retry", path.display())]
    ReadOnly { path: PathBuf },
    #[error("{} changed while it was being updated (edited by another program?); nothing was written, retry", path.display())]
    ChangedConcurrently { path: PathBuf },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} has been locked by another process for {seconds}s; wait for the other npu-scan or npu-progress to finish and retry",
        path.display()
    )]
    Locked { path: PathBuf, seconds: u64 },
    /// The JSON is well-formed and of the right shape, but its content breaks a rule of the format.
    #[error("{}:{line}:{column}: invalid issues.json: {message}", path.display())]
    Validation {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}
