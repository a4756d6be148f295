//! Where an entry file's NPU setup goes, for the automatic fix of `P_ENT`: before the first
//! top-level statement that may import torch, after the module docstring, `from __future__`
//! imports, standard-library imports and the simple statements between them (an
//! `os.environ[...] = ...` that must run before torch loads stays before the setup).

use crate::finding::SourceFile;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use serde::Serialize;

/// The place of the NPU setup in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupPoint {
    /// Byte offset of the start of the line the setup is inserted before.
    pub offset: u32,
    /// What goes before the setup: a blank line after code, or a line break too when the file
    /// does not end with one.
    pub before: &'static str,
    /// [`crate::fix::source_hash`] of the file's text.
    pub source_hash: String,
}

/// Standard-library modules that programs import before torch (the setup may follow them).
const STDLIB: &[&str] = &[
    "__future__",
    "abc",
    "argparse",
    "ast",
    "asyncio",
    "atexit",
    "base64",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "enum",
    "errno",
    "faulthandler",
    "fnmatch",
    "functools",
    "gc",
    "getpass",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "importlib",
    "inspect",
    "io",
    "itertools",
    "json",
    "logging",
    "math",
    "multiprocessing",
    "numbers",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "platform",
    "pprint",
    "queue",
    "random",
    "re",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "string",
    "struct",
    "subprocess",
    "sys",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "traceback",
    "types",
    "typing",
    "uuid",
    "warnings",
    "zipfile",
];

/// The setup point of a file with the module `body`.
pub(crate) fn setup_point(file: &SourceFile<'_>, body: &[Stmt]) -> SetupPoint {
    let docstring = matches!(body.first(), Some(Stmt::Expr(e))
        if matches!(e.value.as_ref(), Expr::Constant(c) if matches!(c.value, ast::Constant::Str(_))));
    let rest = &body[usize::from(docstring)..];
    let stop = rest.iter().find(|stmt| !may_precede_setup(stmt));
    let offset = match stop {
        Some(stmt) => {
            let start = match stmt {
                Stmt::FunctionDef(f) => f.decorator_list.first().map(Ranged::start),
                Stmt::AsyncFunctionDef(f) => f.decorator_list.first().map(Ranged::start),
                Stmt::ClassDef(c) => c.decorator_list.first().map(Ranged::start),
                _ => None,
            }
            .unwrap_or_else(|| stmt.start());
            let (line, _) = file.position(start);
            file.index.line_start(line)
        }
        // Nothing imports torch at the top level: after the last statement.
        None => body.last().map_or(0, |last| {
            let (line, _) = file.position(last.end());
            if (line as usize) < file.index.line_count() {
                file.index.line_start(line + 1)
            } else {
                file.text.len()
            }
        }),
    };
    let before = &file.text[..offset];
    let previous_line = before
        .strip_suffix('\n')
        .map(|b| b.strip_suffix('\r').unwrap_or(b))
        .map_or("", |b| b.rsplit('\n').next().unwrap_or(b));
    let before = if offset > 0 && !before.ends_with('\n') {
        "\n\n"
    } else if offset > 0 && !previous_line.trim().is_empty() {
        "\n"
    } else {
        ""
    };
    SetupPoint {
        offset: u32::try_from(offset).unwrap_or(u32::MAX),
        before,
        source_hash: crate::fix::source_hash(file.text),
    }
}

/// A statement that cannot import torch: a standard-library import, or a simple statement
/// (which can only use what was imported before it).
fn may_precede_setup(stmt: &Stmt) -> bool {
    match stmt {
        Stmt::Import(i) => i.names.iter().all(|a| is_stdlib(a.name.as_str())),
        Stmt::ImportFrom(f) => {
            f.level.as_ref().map_or(0, ast::Int::to_u32) == 0
                && f.module.as_ref().is_some_and(|m| is_stdlib(m.as_str()))
        }
        Stmt::Assign(_)
        | Stmt::AugAssign(_)
        | Stmt::AnnAssign(_)
        | Stmt::Expr(_)
        | Stmt::Pass(_)
        | Stmt::Global(_) => true,
        _ => false,
    }
}

fn is_stdlib(module: &str) -> bool {
    STDLIB.contains(&module.split('.').next().unwrap_or(module))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::LineIndex;

    fn point(text: &str) -> (String, &'static str) {
        let parsed = crate::source::parse(text, "m.py").unwrap();
        let index = LineIndex::new(text);
        let file = SourceFile {
            path: "m.py",
            text,
            index: &index,
        };
        let p = setup_point(&file, &parsed.body);
        (text[p.offset as usize..].to_owned(), p.before)
    }

    #[test]
    fn after_docstring_future_stdlib_and_environment_before_torch() {
        let text = "#!/usr/bin/env python\n\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\n\nimport os\nos.environ[\"X\"] = \"1\"\nimport torch\n";
        let (rest, before) = point(text);
        assert_eq!(rest, "import torch\n");
        assert_eq!(before, "\n");
    }

    #[test]
    fn before_a_project_import_or_a_decorated_function() {
        assert_eq!(
            point("import sys\n\nfrom vla import policy\n").0,
            "from vla import policy\n"
        );
        assert_eq!(
            point("import sys\n\n@dec\ndef f():\n    pass\n").0,
            "@dec\ndef f():\n    pass\n"
        );
        let (rest, before) = point("import sys");
        assert_eq!((rest.as_str(), before), ("", "\n\n"));
    }
}
