//! The files under `assets/`, embedded in the binary.
//!
//! Everything the tools ship (templates, fix templates, the runtime patches, the verify harness,
//! the emulator and the demo project) is compiled in, so one binary is enough on a machine
//! without this repository. This crate must not interpret the files beyond finding them.

use include_dir::{Dir, include_dir};

/// The whole `assets/` tree.
pub static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets");

/// The bytes of one asset, by its `/`-separated path under `assets/`.
pub fn get(path: &str) -> Option<&'static [u8]> {
    ASSETS.get_file(path).map(include_dir::File::contents)
}
