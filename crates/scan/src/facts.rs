//! Per-file facts: what a file imports, its entry-point markers, how it takes its config,
//! whether it sets up the NPU (and where it builds and applies the runtime patcher), and
//! whether it trains (builds an optimizer and steps it). The checker records them as it walks the file (through
//! [`FactRecorder`]); [`crate::project::Project`] gathers them across files.

mod calls;
mod setup;
pub use setup::SetupPoint;

use crate::finding::{SourceFile, locate};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use calls::{
    called_name, is_patcher_builder, is_patcher_call, may_build_optimizer, optimizer_source,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

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
    /// A guard-less script: device work at module level in a file no project file imports
    /// (found by `P_ENT`, never recorded as a marker).
    Script,
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
            EntryKind::Script => "script",
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
    /// The `add_argument` calls those flags come from, in file order.
    pub arguments: Vec<ConfigArgument>,
    /// `@hydra.main(config_path=...)`.
    pub hydra_config_path: Option<String>,
    /// `@hydra.main(config_name=...)`.
    pub hydra_config_name: Option<String>,
    /// `@draccus.wrap(config_path=...)`: the config file read when `--config_path` is not given.
    pub draccus_config_path: Option<String>,
}

impl ConfigStyle {
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
            && self.hydra_config_path.is_none()
            && self.hydra_config_name.is_none()
            && self.draccus_config_path.is_none()
    }

    /// The `add_argument` call that declares `flag`.
    pub fn argument(&self, flag: &str) -> Option<&ConfigArgument> {
        self.arguments.iter().find(|a| a.flag == flag)
    }
}

/// One argparse `add_argument` call of a config flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigArgument {
    /// The first config flag of the call (`--config` in `add_argument("-c", "--config")`).
    pub flag: String,
    /// `default="..."`, when it is a string constant.
    pub default: Option<String>,
    /// `required=True`.
    pub required: bool,
}

/// A call of the runtime patcher's builder (`build_vla_patcher(...)` / `build_npu_patcher(...)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatcherCall {
    pub site: Site,
    /// The patcher is applied: `.apply()` on the call, `with build_…(…):`, or a name it is
    /// assigned to that gets `.apply()` or a `with` somewhere in the file.
    pub applied: bool,
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
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of one file, one field each"
)]
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
    /// Calls of the runtime patcher's builder, in file order.
    pub patcher_calls: Vec<PatcherCall>,
    /// Builds an optimizer (`torch.optim.*`, `torch_npu.optim.*`, apex, bitsandbytes, timm,
    /// transformers, `deepspeed.initialize`) and calls `.step()` on something, or builds a
    /// Lightning / transformers `Trainer`, which does both.
    pub trains: bool,
    /// Builds an optimizer (as for [`Self::trains`]), whether or not this file steps it.
    pub builds_optimizer: bool,
    /// Calls `.step()` on something (or builds a trainer that does).
    pub steps: bool,
    /// An expression was nested deeper than [`crate::walk::MAX_DEPTH`]; the part
    /// below that depth was not checked.
    pub too_deep: bool,
    /// Facts recorded by rules with [`crate::rules::Checker::note`], by key.
    pub notes: BTreeMap<&'static str, Vec<Site>>,
    /// Where the NPU setup goes (files with an entry marker only).
    pub setup_point: Option<SetupPoint>,
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
pub(crate) struct FactRecorder {
    facts: FileFacts,
    patchers: Patchers,
    builds_optimizer: bool,
    steps: bool,
}

/// What decides whether a patcher call is applied, gathered over the whole file.
#[derive(Default)]
struct Patchers {
    /// The start offset of each builder call, by index into `patcher_calls`.
    starts: Vec<u32>,
    /// Start offset of a builder call → the name it is assigned to.
    assigned: BTreeMap<u32, String>,
    /// Names that get `.apply()` or a `with`.
    applied_names: BTreeSet<String>,
    /// Start offsets of builder calls applied in place.
    applied_calls: BTreeSet<u32>,
}

impl FactRecorder {
    pub(crate) fn new(path: &str) -> FactRecorder {
        FactRecorder {
            facts: FileFacts {
                path: path.to_owned(),
                ..FileFacts::default()
            },
            patchers: Patchers::default(),
            builds_optimizer: false,
            steps: false,
        }
    }

    /// Note where the NPU setup goes, for a file with an entry marker or one using torch (a
    /// guard-less script).
    pub(crate) fn module_end(&mut self, file: &SourceFile<'_>, body: &[Stmt]) {
        // A file without a marker may still be a guard-less script (`P_ENT` decides).
        if !self.facts.entry_markers.is_empty() || self.facts.uses_torch {
            self.facts.setup_point = Some(setup::setup_point(file, body));
        }
    }

    pub(crate) fn finish(mut self, too_deep: bool) -> FileFacts {
        self.facts.too_deep = too_deep;
        self.facts.trains = self.builds_optimizer && self.steps;
        self.facts.builds_optimizer = self.builds_optimizer;
        self.facts.steps = self.steps;
        let p = &self.patchers;
        for (call, start) in self.facts.patcher_calls.iter_mut().zip(&p.starts) {
            call.applied = p.applied_calls.contains(start)
                || p.assigned
                    .get(start)
                    .is_some_and(|name| p.applied_names.contains(name));
        }
        self.facts
    }

    /// Statements that decide whether a patcher is applied: `p = build_…(…)`, `with …:`.
    pub(crate) fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Assign(a) => {
                if let ([Expr::Name(n)], true) = (a.targets.as_slice(), is_patcher_call(&a.value)) {
                    self.patchers
                        .assigned
                        .insert(a.value.start().to_u32(), n.id.as_str().to_owned());
                }
            }
            Stmt::AnnAssign(a) => {
                if let (Expr::Name(n), Some(value)) = (a.target.as_ref(), a.value.as_deref())
                    && is_patcher_call(value)
                {
                    self.patchers
                        .assigned
                        .insert(value.start().to_u32(), n.id.as_str().to_owned());
                }
            }
            Stmt::With(w) => self.with_items(&w.items),
            Stmt::AsyncWith(w) => self.with_items(&w.items),
            _ => {}
        }
    }

    fn with_items(&mut self, items: &[ast::WithItem]) {
        for item in items {
            match &item.context_expr {
                Expr::Name(n) => {
                    self.patchers.applied_names.insert(n.id.as_str().to_owned());
                }
                e if is_patcher_call(e) => {
                    self.patchers.applied_calls.insert(e.start().to_u32());
                }
                _ => {}
            }
        }
    }

    /// A rule's note (see [`crate::checker::Checker::note`]).
    pub(crate) fn note(&mut self, key: &'static str, site: Site) {
        self.facts.notes.entry(key).or_default().push(site);
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
                    self.facts.uses_torch = true;
                }
                // `if is_torch_npu_available(): import torch_npu` in a library is that
                // library's own NPU support, not the program's setup.
                if (head == "torch_npu" || c.ends_with("transfer_to_npu")) && !conditional {
                    self.facts.sets_up_npu = true;
                }
            }
            if !candidates.is_empty() {
                self.facts.imports.push(ImportFact { candidates, line });
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
        self.facts.entry_markers.push(EntryMarker {
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
                    self.facts.config.hydra_config_path = keyword_str(c, "config_path");
                    self.facts.config.hydra_config_name = keyword_str(c, "config_name");
                }
            } else if q == "draccus.wrap" {
                self.entry(at, EntryKind::Draccus, d.range(), Some(name.to_owned()));
                if let Expr::Call(c) = d {
                    self.facts.config.draccus_config_path = keyword_str(c, "config_path");
                }
            }
        }
    }

    pub(crate) fn call(&mut self, at: At<'_, '_>, call: &ast::ExprCall, range: TextRange) {
        let last = called_name(&call.func);
        // Resolving allocates: only for the names an entry point or an optimizer can be
        // called by.
        let qualified = (matches!(last, "Fire" | "cli" | "LightningCLI")
            || may_build_optimizer(last))
        .then(|| at.semantic.resolve(&call.func))
        .flatten();
        if is_patcher_builder(last) {
            self.facts.sets_up_npu = true;
            self.patchers.starts.push(range.start().to_u32());
            self.facts.patcher_calls.push(PatcherCall {
                site: at.site(range, String::new()),
                applied: false,
            });
        }
        if let Expr::Attribute(a) = call.func.as_ref() {
            match a.attr.as_str() {
                "apply" => match a.value.as_ref() {
                    Expr::Name(n) => {
                        self.patchers.applied_names.insert(n.id.as_str().to_owned());
                    }
                    e if is_patcher_call(e) => {
                        self.patchers.applied_calls.insert(e.start().to_u32());
                    }
                    _ => {}
                },
                "step" => self.steps = true,
                _ => {}
            }
        }
        if let Some(trainer) = qualified.as_deref().and_then(optimizer_source) {
            self.builds_optimizer = true;
            self.steps |= trainer;
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
            let mut first = None;
            for arg in &call.args {
                if let Expr::Constant(c) = arg
                    && let ast::Constant::Str(flag) = &c.value
                    && flag.starts_with('-')
                {
                    let lower = flag.to_ascii_lowercase();
                    if lower.contains("config") || lower.contains("cfg") {
                        first.get_or_insert_with(|| flag.clone());
                        if !self.facts.config.flags.contains(flag) {
                            self.facts.config.flags.push(flag.clone());
                        }
                    }
                }
            }
            if let Some(flag) = first {
                let required = call.keywords.iter().any(|k| {
                    k.arg.as_ref().is_some_and(|a| a.as_str() == "required")
                        && matches!(&k.value, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)))
                });
                self.facts.config.arguments.push(ConfigArgument {
                    flag,
                    default: keyword_str(call, "default"),
                    required,
                });
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

#[cfg(test)]
mod tests {
    use crate::visit::check_text;

    fn facts(text: &str) -> super::FileFacts {
        check_text(&[], "train.py", text).1
    }

    #[test]
    fn patcher_calls_are_told_applied_or_only_built() {
        let f = facts(
            "from runtime_patches import build_vla_patcher\n\
             import runtime_patches\n\
             build_vla_patcher().apply()\n\
             p = build_vla_patcher(fused_adamw=True)\n\
             q = runtime_patches.build_npu_patcher()\n\
             with q:\n    pass\n\
             with build_vla_patcher() as r:\n    pass\n\
             s = build_vla_patcher()  # s.apply() only in a comment\n\
             t = build_vla_patcher()\n\
             def main():\n    t.apply()\n",
        );
        let calls: Vec<(u32, bool)> = f
            .patcher_calls
            .iter()
            .map(|c| (c.site.line, c.applied))
            .collect();
        assert_eq!(
            calls,
            [
                (3, true),
                (4, false),
                (5, true),
                (8, true),
                (10, false),
                (11, true)
            ]
        );
        assert!(f.sets_up_npu);
    }

    #[test]
    fn trains_means_an_optimizer_is_built_and_stepped() {
        let loop_ = "import torch\nfrom torch.optim import AdamW\n\
                     opt = AdamW(model.parameters())\nloss.backward()\nopt.step()\n";
        assert!(facts(loop_).trains);
        let qualified = "import torch as th\nopt = th.optim.SGD(ps, lr=0.1)\nopt.step()\n";
        assert!(facts(qualified).trains);
        let no_step = "import torch\nopt = torch.optim.AdamW(ps)\n";
        assert!(!facts(no_step).trains, "built but never stepped");
        let scheduler_only = "import torch\ns = torch.optim.lr_scheduler.StepLR(o, 1)\ns.step()\n";
        assert!(!facts(scheduler_only).trains, "a scheduler is no optimizer");
        let checkpoint =
            "import torch\nstate = torch.load('ckpt.pt')\nmodel.load_state_dict(state)\n";
        assert!(!facts(checkpoint).trains);
        let lightning = "import lightning as L\ntrainer = L.Trainer(max_steps=2)\ntrainer.fit(m)\n";
        assert!(facts(lightning).trains);
        let look_alike = "def AdamW(ps):\n    return ps\nopt = AdamW(ps)\nopt.step()\n";
        assert!(!facts(look_alike).trains, "a local AdamW is not torch's");
    }

    #[test]
    fn config_arguments_keep_default_and_required() {
        let f = facts(
            "import argparse, draccus\np = argparse.ArgumentParser()\n\
             p.add_argument('-c', '--config', default='conf/base.yaml')\n\
             p.add_argument('--cfg-file', required=True, help='x')\n\
             p.add_argument('--steps', default='3')\n\
             @draccus.wrap(config_path='configs/train.yaml')\ndef main(cfg):\n    pass\n",
        );
        let config = &f.config;
        assert_eq!(config.flags, ["--config", "--cfg-file"]);
        let c = config.argument("--config").unwrap();
        assert_eq!(
            (c.default.as_deref(), c.required),
            (Some("conf/base.yaml"), false)
        );
        let c = config.argument("--cfg-file").unwrap();
        assert_eq!((c.default.as_deref(), c.required), (None, true));
        assert!(config.argument("--steps").is_none());
        assert_eq!(
            config.draccus_config_path.as_deref(),
            Some("configs/train.yaml")
        );
    }
}
