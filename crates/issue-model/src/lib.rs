//! The `issues.json` model shared by every npu-patcher tool.
//!
//! It owns the schema (serde types: the file is these types serialized), the line-independent
//! fingerprints and short ids, the validated load, the locked atomic save and read-modify-write,
//! and the rescan merge that keeps each issue's status across scans. It must not know how issues
//! are found (that is the scanner's job) or how they are shown (that is each tool's job).

pub mod error;
pub mod fold;
pub mod ids;
pub mod layout;
pub mod merge;
pub mod schema;
pub mod store;
pub mod timing;
mod validate;

pub use error::{Error, Result};
pub use fold::{Folded, SHARED_PATTERNS, fold_measured};
pub use ids::{
    anchor_part, anchored_fingerprint, extent, fingerprint, line_part, normalize_snippet,
    same_finding, short_id,
};
pub use merge::{MergeReport, merge, merge_measured, merge_scanned};
pub use schema::*;
pub use store::{
    Snapshot, load, lock_path, parse, save, snapshot, to_json, update, update_from, write_atomic,
};
pub use timing::time_spent;

/// The current time as RFC 3339 (UTC, whole seconds), the format of every timestamp in the file.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}
