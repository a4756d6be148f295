//! Per-file facts: what a file imports, its entry-point markers, how it takes its config and
//! whether it sets up the NPU. The checker records them as it walks the file (through
//! [`FactRecorder`]); [`crate::project::Project`] gathers them across files.

use crate::finding::{SourceFile, locate};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use serde::Serialize;
use std::collections::BTreeMap;

/// A place in a file, for facts and related locations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Site {
    pub line: u32,
    pub column: u32,
    pub end_line: u32,
    pub end_column: u32,
    /// The source line, trimmed.
    pub snippet: String,
    /// Enclosing `Class.method`, if any.
    pub symbol: Option<String>,
    /// What a rule noted about the place.
    pub note: String,
}

/// How a program is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// `if __name__ == "__main__":`
    MainGuard,
    /// `@hydra.main(...)`
    Hydra,
    /// `fire.Fire(...)`
    Fire,
    /// `tyro.cli(...)`
    Tyro,
    /// `LightningCLI(...)`
    LightningCli,
    /// `@draccus.wrap()`
    Draccus,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::MainGuard => "main-guard",
            EntryKind::Hydra => "hydra",
            EntryKind::Fire => "fire",
            EntryKind::Tyro => "tyro",
            EntryKind::LightningCli => "lightning-cli",
            EntryKind::Draccus => "draccus",
        }
    }
}

/// One sign of an entry point in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryMarker {
    pub kind: EntryKind,
    pub site: Site,
    /// The function it runs, when visible (`main` in `if __name__ == ...: main()`, the
    /// function decorated with `@hydra.main`).
    pub function: Option<String>,
}

/// How an entry point takes its configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfigStyle {
    /// argparse flags naming a config (`--config`, `--cfg`, `--config-file`…).
    pub flags: Vec<String>,
    /// `@hydra.main(config_path=...)`.
    pub hydra_config_path: Option<String>,
    /// `@hydra.main(config_name=...)`.
    pub hydra_config_name: Option<String>,
}

impl ConfigStyle {
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
            && self.hydra_config_path.is_none()
            && self.hydra_config_name.is_none()
    }
}

/// An import statement, with the dotted names it may refer to (most specific first:
/// `from pkg import models` may be the module `pkg.models` or a name in `pkg`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportFact {
    pub candidates: Vec<String>,
    pub line: u32,
}

/// What the checker learned about one Python file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileFacts {
    /// Relative `/` path.
    pub path: String,
    pub imports: Vec<ImportFact>,
    /// Imports torch (or Lightning / accelerate, which import it).
    pub uses_torch: bool,
    /// Imports `torch_npu` or `transfer_to_npu`, or calls `build_vla_patcher` /
    /// `build_npu_patcher`.
    pub sets_up_npu: bool,
    pub entry_markers: Vec<EntryMarker>,
    pub config: ConfigStyle,
    /// An expression was nested deeper than [`crate::walk::MAX_DEPTH`]; the part
    /// below that depth was not checked.
    pub too_deep: bool,
    /// Facts recorded by rules with [`crate::rules::Checker::note`], by key.
    pub notes: BTreeMap<&'static str, Vec<Site>>,
}

/// Top-level packages whose import means the program runs torch: torch itself and libraries
/// built on it that put models on the device for their caller (trainers, policies, pipelines).
const TORCH_LIBRARIES: &[&str] = &[
    "torch",
    "pytorch_lightning",
    "lightning",
    "accelerate",
    "transformers",
    "trl",
    "peft",
    "diffusers",
    "timm",
    "deepspeed",
    "stable_baselines3",
    "sb3_contrib",
    "tianshou",
    "torchrl",
    "skrl",
    "d3rlpy",
];

/// The walk's position, for locating a fact.
#[derive(Clone, Copy)]
pub(crate) struct At<'s, 'a> {
    pub file: &'s SourceFile<'a>,
    pub semantic: &'s Semantic<'a>,
}

impl<'s, 'a> At<'s, 'a> {
    pub(crate) fn new(file: &'s SourceFile<'a>, semantic: &'s Semantic<'a>) -> At<'s, 'a> {
        At { file, semantic }
    }

    /// The place of `range`, in the current symbol.
    pub(crate) fn site(self, range: TextRange, note: String) -> Site {
        let (line, column, end_line, end_column) = locate(self.file, range);
        Site {
            line,
            column,
            end_line,
            end_column,
            snippet: self.file.snippet(line, line),
            symbol: self.semantic.symbol(),
            note,
        }
    }
}

/// Fills a file's [`FileFacts`] as the checker walks it.
pub(crate) struct FactRecorder(FileFacts);

impl FactRecorder {
    pub(crate) fn new(path: &str) -> FactRecorder {
        FactRecorder(FileFacts {
            path: path.to_owned(),
            ..FileFacts::default()
        })
    }

    pub(crate) fn finish(mut self, too_deep: bool) -> FileFacts {
        self.0.too_deep = too_deep;
        self.0
    }

    /// A rule's note (see [`crate::checker::Checker::note`]).
    pub(crate) fn note(&mut self, key: &'static str, site: Site) {
        self.0.notes.entry(key).or_default().push(site);
    }

    /// `if __name__ == "__main__":` at module level, and the function its body calls first.
    pub(crate) fn main_guard(&mut self, at: At<'_, '_>, stmt: &Stmt, guard: &ast::StmtIf) {
        let function = guard.body.iter().find_map(|b| match b {
            Stmt::Expr(e) => match e.value.as_ref() {
                Expr::Call(c) => match c.func.as_ref() {
                    Expr::Name(n) => Some(n.id.as_str().to_owned()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        });
        let test_range = TextRange::new(stmt.start(), guard.test.end());
        self.entry(at, EntryKind::MainGuard, test_range, function);
    }

    pub(crate) fn import(&mut self, at: At<'_, '_>, stmt: &Stmt) {
        let line = at.file.position(stmt.start()).0;
        let conditional = at
            .semantic
            .stmts()
            .iter()
            .any(|s| matches!(s, Stmt::If(i) if !crate::semantic::is_main_guard_test(&i.test)));
        let mut modules: Vec<Vec<String>> = Vec::new();
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    modules.push(vec![alias.name.as_str().to_owned()]);
                }
            }
            Stmt::ImportFrom(from) => {
                let level = from.level.as_ref().map_or(0, ast::Int::to_u32);
                let Some(module) = at
                    .semantic
                    .import_from_module(level, from.module.as_ref().map(ast::Identifier::as_str))
                else {
                    return;
                };
                for alias in &from.names {
                    let name = alias.name.as_str();
                    let mut candidates = Vec::new();
                    if name != "*" {
                        candidates.push(if module.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{module}.{name}")
                        });
                    }
                    if !module.is_empty() {
                        candidates.push(module.clone());
                    }
                    modules.push(candidates);
                }
            }
            _ => return,
        }
        for candidates in modules {
            for c in &candidates {
                let head = c.split('.').next().unwrap_or("");
                if TORCH_LIBRARIES.contains(&head) {
                    self.0.uses_torch = true;
                }
                // `if is_torch_npu_available(): import torch_npu` in a library is that
                // library's own NPU support, not the program's setup.
                if (head == "torch_npu" || c.ends_with("transfer_to_npu")) && !conditional {
                    self.0.sets_up_npu = true;
                }
            }
            if !candidates.is_empty() {
                self.0.imports.push(ImportFact { candidates, line });
            }
        }
    }

    fn entry(
        &mut self,
        at: At<'_, '_>,
        kind: EntryKind,
        range: TextRange,
        function: Option<String>,
    ) {
        let site = at.site(range, String::new());
        self.0.entry_markers.push(EntryMarker {
            kind,
            site,
            function,
        });
    }

    pub(crate) fn decorators(&mut self, at: At<'_, '_>, name: &str, decorators: &[Expr]) {
        for d in decorators {
            let qualified = match d {
                Expr::Call(c) => at.semantic.resolve(&c.func),
                other => at.semantic.resolve(other),
            };
            let Some(q) = qualified else { continue };
            if q == "hydra.main" {
                self.entry(at, EntryKind::Hydra, d.range(), Some(name.to_owned()));
                if let Expr::Call(c) = d {
                    self.0.config.hydra_config_path = keyword_str(c, "config_path");
                    self.0.config.hydra_config_name = keyword_str(c, "config_name");
                }
            } else if q == "draccus.wrap" {
                self.entry(at, EntryKind::Draccus, d.range(), Some(name.to_owned()));
            }
        }
    }

    pub(crate) fn call(&mut self, at: At<'_, '_>, call: &ast::ExprCall, range: TextRange) {
        let last = match call.func.as_ref() {
            Expr::Name(n) => n.id.as_str(),
            Expr::Attribute(a) => a.attr.as_str(),
            _ => "",
        };
        // Resolving allocates: only for the names an entry point can be called by.
        let qualified = matches!(last, "Fire" | "cli" | "LightningCLI")
            .then(|| at.semantic.resolve(&call.func))
            .flatten();
        if matches!(last, "build_vla_patcher" | "build_npu_patcher") {
            self.0.sets_up_npu = true;
        }
        let first_arg_name = || match call.args.first() {
            Some(Expr::Name(n)) => Some(n.id.as_str().to_owned()),
            _ => None,
        };
        match qualified.as_deref() {
            Some("fire.Fire") => self.entry(at, EntryKind::Fire, range, first_arg_name()),
            Some("tyro.cli") => self.entry(at, EntryKind::Tyro, range, first_arg_name()),
            Some(q) if q.ends_with("LightningCLI") => {
                self.entry(at, EntryKind::LightningCli, range, None);
            }
            _ => {}
        }
        if last == "add_argument" {
            for arg in &call.args {
                if let Expr::Constant(c) = arg
                    && let ast::Constant::Str(flag) = &c.value
                    && flag.starts_with('-')
                {
                    let lower = flag.to_ascii_lowercase();
                    if (lower.contains("config") || lower.contains("cfg"))
                        && !self.0.config.flags.contains(flag)
                    {
                        self.0.config.flags.push(flag.clone());
                    }
                }
            }
        }
    }
}

/// A string keyword argument of a call (`config_path="conf"`).
fn keyword_str(call: &ast::ExprCall, name: &str) -> Option<String> {
    call.keywords.iter().find_map(|k| {
        if k.arg.as_ref().is_some_and(|a| a.as_str() == name)
            && let Expr::Constant(c) = &k.value
            && let ast::Constant::Str(s) = &c.value
        {
            Some(s.clone())
        } else {
            None
        }
    })
}
