//! The files under `assets/`, embedded in the binary, and the commands that install them.
//!
//! Everything the tools ship (templates, fix templates, the runtime patches, the verify harness,
//! the emulator and the demo project) is compiled in, so one binary is enough on a machine
//! without this repository. On top of the raw files this crate installs them into a model project
//! (`init`, `extract`) without ever overwriting a file the user changed, and drafts the adaptation
//! summary from the tools' records (`summary`). It must not interpret the code assets themselves
//! (the rules, patches and harness belong to their own crates).

pub mod catalog;
// The command line is npu-assets's output module, and its doc comments are the --help text, where
// Markdown backticks would show literally.
#[allow(clippy::print_stdout, clippy::print_stderr, clippy::doc_markdown)]
pub mod cli;
pub mod emulator;
pub mod error;
pub mod install;
pub mod summary;
pub mod torch_npu_layer;
mod write;

use include_dir::{Dir, include_dir};

pub use error::{Error, Result};

/// The folder, in the model project root, that holds everything the port adds.
pub const MIGRATE_DIR: &str = "migrate_to_cloudrobo";

/// The whole `assets/` tree.
pub static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets");

/// The bytes of one asset, by its `/`-separated path under `assets/`.
pub fn get(path: &str) -> Option<&'static [u8]> {
    ASSETS.get_file(path).map(include_dir::File::contents)
}
