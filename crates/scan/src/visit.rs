//! The one walk: goes over a parsed file once, keeps the checker's semantic model current, has
//! the file's facts recorded ([`crate::facts`]) and calls every enabled rule's hooks; and the
//! calls of the config and project hooks.

use crate::checker::{Checker, Finding, SourceFile};
use crate::classes::ModuleClasses;
use crate::contexts::{ConfigChecker, ProjectChecker};
use crate::facts::{At, FileFacts};
use crate::rules::RuleInfo;
use crate::semantic::{self, ImportGuard};
use crate::source::ast::{self, Expr, Ranged, Stmt};
use crate::walk::{self, Visitor};

/// Walk `body` of `file` once, calling the Python hooks of `rules` (`modules`: the project's
/// module classes); the findings and the file's facts.
pub(crate) fn check_python<'a>(
    file: SourceFile<'a>,
    rules: &'a [&'static RuleInfo],
    body: &'a [Stmt],
    modules: &'a ModuleClasses,
) -> (Vec<Finding>, FileFacts) {
    walk::take_truncated();
    let mut walk = Walk {
        cx: Checker::new(file),
        rules,
    };
    walk.cx.semantic.set_project_modules(modules);
    walk.cx.semantic.prebind_module(body);
    walk.cx.semantic.set_module_body(body);
    walk.visit_body(body);
    walk.cx.facts.module_end(&walk.cx.file, body);
    for rule in rules {
        walk.cx.set_rule(rule.id);
        rule.check.file_end(&mut walk.cx, body);
    }
    walk.cx.finish(walk::take_truncated())
}

/// Call the config hook of `rules` on one config file.
pub(crate) fn check_config(mut cx: ConfigChecker<'_>, rules: &[&'static RuleInfo]) -> Vec<Finding> {
    for rule in rules {
        cx.set_rule(rule.id);
        rule.check.config(&mut cx);
    }
    cx.finish()
}

/// Call the project hook of `rules` once, over the facts of every file.
pub(crate) fn check_project(project: &crate::Project, rules: &[&'static RuleInfo]) -> Vec<Finding> {
    // Each rule on its own thread (they only read the project), findings in rule order.
    std::thread::scope(|scope| {
        let handles: Vec<_> = rules
            .iter()
            .map(|rule| {
                scope.spawn(move || {
                    let mut cx = ProjectChecker::new(project);
                    cx.set_rule(rule.id);
                    rule.check.project(&mut cx);
                    cx.finish()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

struct Walk<'a> {
    cx: Checker<'a>,
    rules: &'a [&'static RuleInfo],
}

impl<'a> Walk<'a> {
    fn dispatch_stmt(&mut self, stmt: &'a Stmt) {
        for rule in self.rules {
            self.cx.set_rule(rule.id);
            rule.check.stmt(&mut self.cx, stmt);
        }
    }

    fn dispatch_expr(&mut self, expr: &'a Expr) {
        for rule in self.rules {
            self.cx.set_rule(rule.id);
            rule.check.expr(&mut self.cx, expr);
        }
    }

    fn visit_function(
        &mut self,
        stmt: &'a Stmt,
        name: &str,
        decorators: &'a [Expr],
        args: &'a ast::Arguments,
        returns: Option<&'a Expr>,
        body: &'a [Stmt],
    ) {
        for d in decorators {
            self.visit_expr(d);
        }
        self.cx
            .facts
            .decorators(At::new(&self.cx.file, &self.cx.semantic), name, decorators);
        self.visit_arguments(args);
        if let Some(r) = returns {
            self.visit_expr(r);
        }
        self.cx
            .semantic
            .push_function(name, decorators, args, body, stmt.range());
        self.visit_body(body);
        self.cx.semantic.pop_scope();
    }
}

impl<'a> Visitor<'a> for Walk<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        self.dispatch_stmt(stmt);
        self.cx.facts.stmt(stmt);
        self.cx.semantic.push_stmt(stmt);
        match stmt {
            Stmt::Import(_) | Stmt::ImportFrom(_) => {
                self.cx.semantic.bind_import(stmt);
                self.cx
                    .facts
                    .import(At::new(&self.cx.file, &self.cx.semantic), stmt);
            }
            Stmt::FunctionDef(f) => {
                self.visit_function(
                    stmt,
                    f.name.as_str(),
                    &f.decorator_list,
                    &f.args,
                    f.returns.as_deref(),
                    &f.body,
                );
            }
            Stmt::AsyncFunctionDef(f) => {
                self.visit_function(
                    stmt,
                    f.name.as_str(),
                    &f.decorator_list,
                    &f.args,
                    f.returns.as_deref(),
                    &f.body,
                );
            }
            Stmt::ClassDef(c) => {
                for d in &c.decorator_list {
                    self.visit_expr(d);
                }
                for b in &c.bases {
                    self.visit_expr(b);
                }
                for k in &c.keywords {
                    self.visit_keyword(k);
                }
                self.cx.semantic.push_class(c);
                self.visit_body(&c.body);
                self.cx.semantic.pop_scope();
            }
            Stmt::If(s) if semantic::is_main_guard_test(&s.test) => {
                self.visit_expr(&s.test);
                if self.cx.semantic.scopes().len() == 1 {
                    self.cx
                        .facts
                        .main_guard(At::new(&self.cx.file, &self.cx.semantic), stmt, s);
                }
                self.cx.semantic.enter_main_guard();
                self.visit_body(&s.body);
                self.cx.semantic.exit_main_guard();
                self.visit_body(&s.orelse);
            }
            Stmt::Try(t) if semantic::catches_import_error(&t.handlers) => {
                self.cx.semantic.enter_import_guard(ImportGuard {
                    stmt: t,
                    reraises: semantic::import_handler_reraises(&t.handlers),
                });
                self.visit_body(&t.body);
                self.cx.semantic.exit_import_guard();
                for h in &t.handlers {
                    self.visit_except_handler(h);
                }
                self.visit_body(&t.orelse);
                self.visit_body(&t.finalbody);
            }
            _ => walk::walk_stmt(self, stmt),
        }
        self.cx.semantic.pop_stmt();
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        self.dispatch_expr(expr);
        if let Expr::Call(call) = expr {
            self.cx.facts.call(
                At::new(&self.cx.file, &self.cx.semantic),
                call,
                expr.range(),
            );
        }
        self.cx.semantic.push_expr(expr);
        walk::walk_expr(self, expr);
        self.cx.semantic.pop_expr();
    }
}

/// Parse `text` as the file `path` and run `rules` over it.
#[cfg(test)]
pub(crate) fn check_text(
    rules: &[&'static RuleInfo],
    path: &str,
    text: &str,
) -> (Vec<Finding>, FileFacts) {
    let parsed = crate::source::parse(text, path).unwrap();
    let index = crate::source::LineIndex::new(text);
    let file = SourceFile {
        path,
        text,
        index: &index,
    };
    let modules = crate::classes::ModuleClasses::from_sources([text]);
    check_python(file, rules, &parsed.body, &modules)
}

/// The lines `rule` reports in the file `path` with the source `text`.
#[cfg(test)]
pub(crate) fn reported_lines(rule: &'static RuleInfo, path: &str, text: &str) -> Vec<u32> {
    let (findings, _) = check_text(&[rule], path, text);
    findings.iter().map(|f| f.line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Rule;
    use issue_model::{Category, Severity};

    /// Reports what the semantic model knows at every call and import.
    struct Probe;

    impl Rule for Probe {
        fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
            if matches!(stmt, Stmt::Import(_) | Stmt::ImportFrom(_)) {
                let guard = cx.semantic().import_guard().map(|g| g.reraises);
                cx.report(stmt.range(), format!("import guard={guard:?}"));
            }
        }
        fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
            let Expr::Call(call) = expr else { return };
            let s = cx.semantic();
            let message = format!(
                "{} fwd={} dev={} loss_or_step={} main={}",
                s.resolve(&call.func).unwrap_or_else(|| "?".to_owned()),
                s.in_forward(),
                s.in_device_code(),
                s.in_training_or_loss(),
                s.in_main_guard(),
            );
            cx.report(expr.range(), message);
        }
    }

    static PROBE: RuleInfo = RuleInfo {
        id: "P_TEST",
        name: "probe",
        category: Category::Structure,
        severity: Severity::Info,
        performance: false,
        project_level: false,
        fix_template: "references/fix-templates/P_TEST.md",
        summary: "",
        doc: "",
        check: &Probe,
    };

    const SOURCE: &str = r#"import torch as th
from torch import randn as rn
from flash_attn import flash_attn_func
from .heads import ActionHead
from ..utils import helpers
import torch.nn.functional as F
from torch import nn

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

try:
    import xformers.ops
except ImportError as e:
    raise RuntimeError("need xformers") from e


class Policy(nn.Module):
    def forward(self, x):
        noise = rn(3)
        idx = th.arange(4)
        idx = idx.to(x.device)
        z = th.zeros(2, device=x.device)
        return flash_attn_func(x)


class Helper:
    def run(self):
        return th.ones(1)


def compute_loss(pred):
    return F.mse_loss(pred, pred)


def training_step(batch):
    return helpers.go(batch)


if __name__ == "__main__":
    ActionHead()
"#;

    fn probe(path: &str, text: &str) -> (Vec<Finding>, FileFacts) {
        check_text(&[&PROBE], path, text)
    }

    fn at(findings: &[Finding], line: u32) -> Vec<(&str, Option<&str>)> {
        findings
            .iter()
            .filter(|f| f.line == line)
            .map(|f| (f.message.as_str(), f.symbol.as_deref()))
            .collect()
    }

    #[test]
    fn semantic_model_at_each_call() {
        let (findings, facts) = probe("pkg/models/policy.py", SOURCE);
        assert_eq!(at(&findings, 2), [("import guard=None", None)]);
        assert_eq!(at(&findings, 10), [("import guard=Some(false)", None)]);
        assert_eq!(at(&findings, 15), [("import guard=Some(true)", None)]);
        assert_eq!(
            at(&findings, 22),
            [(
                "torch.randn fwd=true dev=true loss_or_step=false main=false",
                Some("Policy.forward")
            )]
        );
        assert_eq!(
            at(&findings, 26),
            [(
                "flash_attn.flash_attn_func fwd=true dev=true loss_or_step=false main=false",
                Some("Policy.forward")
            )]
        );
        assert_eq!(
            at(&findings, 31),
            [(
                "torch.ones fwd=false dev=false loss_or_step=false main=false",
                Some("Helper.run")
            )]
        );
        assert_eq!(
            at(&findings, 35),
            [(
                "torch.nn.functional.mse_loss fwd=false dev=true loss_or_step=true main=false",
                Some("compute_loss")
            )]
        );
        assert_eq!(
            at(&findings, 39),
            [(
                "pkg.utils.helpers.go fwd=false dev=true loss_or_step=true main=false",
                Some("training_step")
            )]
        );
        assert_eq!(
            at(&findings, 43),
            [(
                "pkg.models.heads.ActionHead fwd=false dev=false loss_or_step=false main=true",
                None
            )]
        );
        assert!(facts.uses_torch);
        assert!(!facts.sets_up_npu);
        assert_eq!(facts.entry_markers.len(), 1);
        assert_eq!(facts.entry_markers[0].site.line, 42);
        assert_eq!(
            facts.entry_markers[0].function.as_deref(),
            Some("ActionHead")
        );
        assert!(
            facts
                .imports
                .iter()
                .any(|i| i.candidates == ["pkg.models.heads.ActionHead", "pkg.models.heads"])
        );
    }

    /// Reports the local facts of every name loaded in a `return`.
    struct Locals;

    impl Rule for Locals {
        fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
            let Stmt::Return(r) = stmt else { return };
            let Some(Expr::Tuple(t)) = r.value.as_deref() else {
                return;
            };
            for elt in &t.elts {
                let Expr::Name(n) = elt else { continue };
                let locals = cx.semantic().locals();
                let name = n.id.as_str();
                let first = locals.assignments(name).first().map(|a| a.range.start());
                let message = format!(
                    "{name} on_device={} moved_after_first={} call={:?}",
                    locals.assigned_on_device(name),
                    first.is_some_and(|o| locals.moved_after(name, o)),
                    locals
                        .assignments(name)
                        .first()
                        .and_then(|a| a.call.clone()),
                );
                cx.report(elt.range(), message);
            }
        }
    }

    static LOCALS: RuleInfo = RuleInfo {
        id: "P_TEST",
        name: "locals",
        category: Category::Structure,
        severity: Severity::Info,
        performance: false,
        project_level: false,
        fix_template: "references/fix-templates/P_TEST.md",
        summary: "",
        doc: "",
        check: &Locals,
    };

    #[test]
    fn local_facts() {
        let text = "import torch\n\
            def f(x):\n    \
                a = torch.arange(4)\n    \
                a = a.to(x.device)\n    \
                b = torch.zeros(2, device=x.device)\n    \
                c = torch.randn(3)\n    \
                d = torch.full((2,), 1.0).to(x.device)\n    \
                return (a, b, c, d)\n";
        let (findings, _) = check_text(&[&LOCALS], "m.py", text);
        let messages: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "a on_device=true moved_after_first=true call=Some(\"torch.arange\")",
                "b on_device=true moved_after_first=false call=Some(\"torch.zeros\")",
                "c on_device=false moved_after_first=false call=Some(\"torch.randn\")",
                "d on_device=true moved_after_first=false call=Some(\"torch.full\")",
            ]
        );
    }
}
