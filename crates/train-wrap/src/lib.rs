//! `npu-train`: the pass-through training launcher, `train.sh` in Rust.
//!
//! It runs the model project's own launch command unchanged, in the environment that
//! `migrate_to_cloudrobo/env_npu.sh` produces (CANN plus the performance variables), with
//! `migrate_to_cloudrobo/` first on `PYTHONPATH`, copies the command's output to a timestamped log
//! under `migrate_to_cloudrobo/logs/`, forwards SIGINT/SIGTERM/SIGHUP to the command's whole
//! process group, and exits with the command's exit code. It must not change the command or
//! interpret its output.
//!
//! The environment comes from sourcing the project's real `env_npu.sh` with bash and importing
//! the result, not from a native copy of its defaults: CANN's `set_env.sh` is itself a shell
//! script, and the user's edits to `env_npu.sh` must apply to `npu-train` exactly as to
//! `train.sh`.

// The command line is npu-train's output module, and its doc comments are the --help text, where
// Markdown backticks would show literally.
#[allow(clippy::print_stdout, clippy::print_stderr, clippy::doc_markdown)]
pub mod cli;
pub mod dist;
pub mod env;
pub mod error;
pub mod launch;
pub mod log;

pub use error::{Error, Result};
