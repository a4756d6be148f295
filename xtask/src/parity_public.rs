//! The public projects the `--parity` tests port, as test data.
//!
//! `crates/verify/tests/parity/public/sources.json` pins each distribution (url, sha256, in the
//! corpus manifest's format). `cargo xtask test` downloads each once, checks it and extracts it to
//! `<cache>/parity-public/<name>-<version>/` with the corpus code ([`crate::corpus::fetch`]), and
//! passes that directory to `cargo test` as `NPU_PATCHER_PARITY_PUBLIC`. Nothing of them is
//! committed; a failed download or a hash mismatch is an error naming the distribution, and the
//! tests that need them fail (never skip) without them.

use crate::corpus::fetch::{self, Distribution};
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Sources {
    #[allow(dead_code, reason = "documentation for readers of the file")]
    about: String,
    distributions: Vec<Distribution>,
}

/// Where the distributions are extracted.
pub fn cache_dir() -> PathBuf {
    crate::venv::cache_dir().join("parity-public")
}

/// Download, check and extract every pinned distribution; return [`cache_dir`].
pub fn ensure_all() -> Result<PathBuf> {
    let path = crate::project_root().join("crates/verify/tests/parity/public/sources.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let sources: Sources = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid sources file", path.display()))?;
    let cache = cache_dir();
    for dist in &sources.distributions {
        fetch::ensure(&cache, dist)
            .with_context(|| format!("parity test project {}", dist.dir_name()))?;
    }
    Ok(cache)
}
