//! The automatic fix of an entry point without NPU setup: insert the setup at the file's
//! setup point ([`crate::facts::SetupPoint`]).
//!
//! The setup does nothing where `torch_npu` is not installed (a CUDA or CPU machine), so the
//! fix is safe. On an Ascend machine it imports `torch_npu` and `transfer_to_npu` and applies
//! the runtime patcher from `migrate_to_cloudrobo/runtime_patches.py` of the project root
//! (`npu-assets init` puts it there), and keeps it in `_NPU_PATCHER` (`None` without
//! `torch_npu`) for `_NPU_PATCHER.print_report()`. The folder is `$NPU_PATCHER_MIGRATE_DIR`
//! when set (the launchers export it, so an installed package finds it too), else found from
//! the file's own location in a source checkout.

use crate::facts::FileFacts;
use crate::fix;
use crate::source::{TextRange, TextSize};
use issue_model::{Applicability, Fix};
use std::fmt::Write as _;

/// The directory, under the project root, that holds `runtime_patches.py`.
pub(super) const ASSETS_DIR: &str = "migrate_to_cloudrobo";

/// The environment variable the launchers (`train.sh`, `env_npu.sh`, `npu-train`) set to the
/// absolute `migrate_to_cloudrobo/` folder: the inserted setup looks there first, so that it
/// also works where the entry is not in a source checkout (an installed package).
pub const MIGRATE_DIR_VAR: &str = "NPU_PATCHER_MIGRATE_DIR";

/// One line of the setup: its indentation level, code (empty for a blank line) and an optional
/// comment, kept at the end of the line when it fits and moved above it otherwise.
struct Line {
    level: usize,
    code: String,
    comment: Option<&'static str>,
}

fn line(level: usize, code: impl Into<String>, comment: Option<&'static str>) -> Line {
    Line {
        level,
        code: code.into(),
        comment,
    }
}

/// The setup's lines; `ups` is how many folders the entry file is below the project root.
fn setup_lines(ups: usize) -> Vec<Line> {
    let mut lines = vec![
        line(0, "try:", None),
        line(
            1,
            "import torch_npu  # noqa: F401",
            Some("registers the \"npu\" device"),
        ),
        line(
            1,
            "from torch_npu.contrib import transfer_to_npu  # noqa: F401",
            Some("remaps leftover cuda calls to npu"),
        ),
        line(
            0,
            "except ImportError:",
            Some("no torch_npu: not an Ascend machine, nothing to set up"),
        ),
        line(1, "torch_npu = None", None),
        line(
            0,
            "_NPU_PATCHER = None",
            Some("the runtime patcher; `_NPU_PATCHER.print_report()` shows which patches fired"),
        ),
        line(0, "if torch_npu is not None:", None),
        line(1, "import os as _npu_os", None),
        line(1, "import sys as _npu_sys", None),
        line(0, "", None),
        line(
            1,
            format!("_npu_dir = _npu_os.environ.get(\"{MIGRATE_DIR_VAR}\")"),
            Some("migrate_to_cloudrobo/ as exported by train.sh, env_npu.sh, npu-train"),
        ),
        line(
            1,
            "if not _npu_dir:",
            Some("a source checkout: the project root's, found from this file"),
        ),
        line(2, "_npu_dir = _npu_os.path.join(", None),
        line(
            3,
            "_npu_os.path.dirname(_npu_os.path.abspath(__file__)),",
            None,
        ),
    ];
    for _ in 0..ups {
        lines.push(line(3, "\"..\",", None));
    }
    lines.extend([
        line(3, format!("\"{ASSETS_DIR}\","), None),
        line(2, ")", None),
        line(1, "_npu_sys.path.insert(0, _npu_dir)", None),
        line(1, "from runtime_patches import build_vla_patcher", None),
        line(0, "", None),
        line(1, "_NPU_PATCHER = build_vla_patcher()", None),
        line(1, "_NPU_PATCHER.apply()", None),
    ]);
    lines
}

/// `lines` as text, indented by `base` levels (four spaces each), each line within `width`
/// characters where it can be: a comment that does not fit after its code goes above it, wrapped.
fn render(lines: &[Line], base: usize, width: usize) -> String {
    let mut out = String::new();
    for l in lines {
        if l.code.is_empty() {
            out.push('\n');
            continue;
        }
        let pad = " ".repeat(4 * (base + l.level));
        let Some(comment) = l.comment else {
            let _ = writeln!(out, "{pad}{}", l.code);
            continue;
        };
        // A code line with a comment of its own (`# noqa: F401`) continues it.
        let joiner = if l.code.contains("  # ") {
            "  "
        } else {
            "  # "
        };
        let inline = format!("{pad}{}{joiner}{comment}", l.code);
        if inline.chars().count() <= width {
            out.push_str(&inline);
            out.push('\n');
            continue;
        }
        let room = width.saturating_sub(pad.len() + 2).max(20);
        let mut current = String::new();
        for word in comment.split(' ') {
            if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > room {
                let _ = writeln!(out, "{pad}# {current}");
                current.clear();
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
        }
        if !current.is_empty() {
            let _ = writeln!(out, "{pad}# {current}");
        }
        let _ = writeln!(out, "{pad}{}", l.code);
    }
    out
}

/// The fix for the entry file `path` with `facts`, if its setup point is known. With
/// `only_as_main` (another entry point imports this one) the setup runs only where this file
/// starts the program (`__name__ == "__main__"`): imported, the importing program has set up
/// the NPU already, and one import path gets one setup. Lines stay within `line_length`
/// characters (the project's configured limit, [`crate::line_length`]) where they can.
pub(super) fn setup_fix(
    path: &str,
    facts: &FileFacts,
    only_as_main: bool,
    line_length: usize,
) -> Option<Fix> {
    let point = facts.setup_point.as_ref()?;
    let ups = path.matches('/').count();
    let lines = setup_lines(ups);
    let content = if only_as_main {
        let gate = [line(
            0,
            "if __name__ == \"__main__\":",
            Some("run as a program (imported, the importer sets up the NPU)"),
        )];
        format!(
            "{}{}{}\n",
            point.before,
            render(&gate, 0, line_length),
            render(&lines, 1, line_length)
        )
    } else {
        format!("{}{}\n", point.before, render(&lines, 0, line_length))
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

#[cfg(test)]
mod tests {
    use super::{line, render, setup_lines};

    #[test]
    fn the_setup_stays_within_the_line_length_and_reads_the_launchers_variable_first() {
        for (width, base, ups) in [(79, 0, 0), (79, 1, 3), (88, 1, 1), (100, 0, 2)] {
            let text = render(&setup_lines(ups), base, width);
            for l in text.lines() {
                assert!(l.chars().count() <= width, "{width}: {l:?}\n{text}");
            }
            let env = text
                .find("environ.get(\"NPU_PATCHER_MIGRATE_DIR\")")
                .unwrap();
            let relative = text.find("abspath(__file__)").unwrap();
            assert!(env < relative, "{text}");
            assert_eq!(text.matches("\"..\",").count(), ups, "{text}");
            assert!(text.contains("_NPU_PATCHER.apply()"), "{text}");
        }
        // A comment that fits stays on its line; one that does not goes above it, wrapped.
        let lines = [line(1, "x = 1", Some("a short note"))];
        assert_eq!(render(&lines, 0, 79), "    x = 1  # a short note\n");
        let long = [line(
            1,
            "import torch_npu  # noqa: F401",
            Some("a note long enough that it cannot stay on the line of its code"),
        )];
        assert_eq!(
            render(&long, 0, 60),
            "    # a note long enough that it cannot stay on the line of\n    # its code\n    import torch_npu  # noqa: F401\n"
        );
    }
}
