//! Atomic file writes: a temporary file in the same directory, renamed over the target.

use crate::error::{Error, Result};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Write `bytes` to `path` atomically with Unix permission bits `mode`, creating parent folders.
pub(crate) fn atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let err = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => Path::new(".").to_owned(),
    };
    fs::create_dir_all(&dir).map_err(err)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".npu-assets.")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// The permission bits an asset gets when written out: shell scripts are executable.
pub(crate) fn mode_for(path: &str) -> u32 {
    if Path::new(path).extension().is_some_and(|e| e == "sh") {
        0o755
    } else {
        0o644
    }
}
