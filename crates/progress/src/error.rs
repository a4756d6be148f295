//! Errors of `npu-progress`: each says what is wrong and what to do. All exit with status 2.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{} does not exist; create it with `npu-scan /path/to/model --output <dir>`", path.display())]
    Missing { path: PathBuf },

    #[error(transparent)]
    Model(#[from] issue_model::Error),

    #[error("no issue `{id}` in {}{}", path.display(), suggest(suggestions))]
    UnknownId {
        id: String,
        path: PathBuf,
        suggestions: Vec<String>,
    },

    #[error(
        "a skip needs a reason: {} {} --skip {id} --reason \"why this is a false positive\"",
        crate::invoked_as(),
        path.display()
    )]
    SkipWithoutReason { id: String, path: PathBuf },

    #[error(
        "{id} is a performance issue ({pattern}) and cannot be skipped: the code runs, but slowly on the NPU, so it must be fixed; follow {template}, then run `{} {} --fixed {id}`. If the finding is wrong, write `# npu: ignore[{pattern}] <why>` at the end of line {line} of {file} and {}",
        crate::invoked_as(),
        path.display(),
        then_again(*measured, path, id)
    )]
    SkipPerformance {
        id: String,
        pattern: String,
        template: String,
        file: String,
        line: u32,
        path: PathBuf,
        /// Recorded by `npu-verify --record-issues`: the comment takes effect at the next
        /// measurement (`--fixed`), not at a rescan.
        measured: bool,
    },

    #[error("{0}")]
    Usage(String),

    #[error("cannot write the output")]
    Output(#[source] std::io::Error),
}

fn suggest(suggestions: &[String]) -> String {
    match suggestions {
        [] => "; list the ids with --list".to_owned(),
        [one] => format!("; did you mean {one}?"),
        many => format!("; did you mean one of: {}?", many.join(", ")),
    }
}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Self {
        Error::Output(error)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a `# npu: ignore[…]` comment takes effect: a rescan, or for a measured issue the next
/// measurement (`npu-verify --record-issues` records no finding on a line with that comment).
fn then_again(measured: bool, path: &std::path::Path, id: &str) -> String {
    if measured {
        format!(
            "run `{} {} --fixed {id}` (it measures again; npu-verify records no finding on a line with that comment)",
            crate::invoked_as(),
            path.display()
        )
    } else {
        "rescan".to_owned()
    }
}
