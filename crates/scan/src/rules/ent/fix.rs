//! The automatic fix of an entry point without NPU setup: insert the setup at the file's
//! setup point ([`crate::facts::SetupPoint`]).
//!
//! The setup does nothing where `torch_npu` is not installed (a CUDA or CPU machine), so the
//! fix is safe. On an Ascend machine it imports `torch_npu` and `transfer_to_npu` and applies
//! the runtime patcher from `migrate_to_cloudrobo/runtime_patches.py` of the project root
//! (`npu-assets init` puts it there), found from the file's own location, and keeps it in
//! `_NPU_PATCHER` (`None` without `torch_npu`) for `_NPU_PATCHER.print_report()`.

use crate::facts::FileFacts;
use crate::fix;
use crate::source::{TextRange, TextSize};
use issue_model::{Applicability, Fix};

/// The directory, under the project root, that holds `runtime_patches.py`.
pub(super) const ASSETS_DIR: &str = "migrate_to_cloudrobo";

/// The fix for the entry file `path` with `facts`, if its setup point is known. With
/// `only_as_main` (another entry point imports this one) the setup runs only where this file
/// starts the program (`__name__ == "__main__"`): imported, the importing program has set up
/// the NPU already, and one import path gets one setup.
pub(super) fn setup_fix(path: &str, facts: &FileFacts, only_as_main: bool) -> Option<Fix> {
    let point = facts.setup_point.as_ref()?;
    let ups = path.matches('/').count();
    let mut dir = String::from("_npu_os.path.dirname(_npu_os.path.abspath(__file__))");
    for _ in 0..ups {
        dir.push_str(", \"..\"");
    }
    let setup = format!(
        "\
try:
    import torch_npu  # noqa: F401  registers the \"npu\" device
    from torch_npu.contrib import transfer_to_npu  # noqa: F401  remaps leftover cuda calls to npu
except ImportError:  # no torch_npu: not an Ascend machine, nothing to set up
    torch_npu = None
_NPU_PATCHER = None  # the runtime patcher; `_NPU_PATCHER.print_report()` shows which patches fired
if torch_npu is not None:
    import os as _npu_os
    import sys as _npu_sys

    _npu_sys.path.insert(0, _npu_os.path.join({dir}, \"{ASSETS_DIR}\"))
    from runtime_patches import build_vla_patcher

    _NPU_PATCHER = build_vla_patcher()
    _NPU_PATCHER.apply()
"
    );
    let content = if only_as_main {
        let mut gated = String::from(
            "if __name__ == \"__main__\":  # run as a program (imported, the importing entry sets up the NPU)\n",
        );
        for line in setup.lines() {
            if !line.is_empty() {
                gated.push_str("    ");
            }
            gated.push_str(line);
            gated.push('\n');
        }
        format!("{}{gated}\n", point.before)
    } else {
        format!("{}{setup}\n", point.before)
    };
    let message = if only_as_main {
        format!(
            "insert the NPU setup (torch_npu, transfer_to_npu, the runtime patcher from {ASSETS_DIR}/) before the first import of torch, run only when this file starts the program: another entry point imports it"
        )
    } else {
        format!(
            "insert the NPU setup (torch_npu, transfer_to_npu, the runtime patcher from {ASSETS_DIR}/) before the first import of torch"
        )
    };
    let mut fix = fix::replacement(
        Applicability::Safe,
        message,
        TextRange::empty(TextSize::new(point.offset)),
        content,
    );
    fix.source_hash.clone_from(&point.source_hash);
    Some(fix)
}
