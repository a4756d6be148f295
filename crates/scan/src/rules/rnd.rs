//! `P_RND`: a tensor factory without `device=` in code that runs on the device, whose result
//! meets device tensors.
//!
//! The analysis runs once per function, when the walk enters its body, so it can follow a
//! new tensor through the function's local names. The shared per-function helpers (device
//! code, host scalars, where a value flows) live in [`crate::analysis`].

mod fix;

use super::{Checker, Rule, RuleInfo};
use crate::analysis;
use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct HostTensor;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_RND",
    name: "tensor-created-on-host",
    category: Category::Device,
    severity: Severity::Error,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_RND.md",
    summary: "A tensor factory without `device=` in device code creates a CPU tensor that then meets NPU tensors.",
    doc: include_str!("rnd.md"),
    check: &HostTensor,
};

/// Factories that create a tensor on the CPU unless given `device=`.
const FACTORIES: &[&str] = &[
    "randn", "rand", "randint", "randperm", "normal", "arange", "zeros", "ones", "full", "empty",
    "eye", "linspace", "logspace", "tensor",
];

impl Rule for HostTensor {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let Some(def) = analysis::function_entry(cx.semantic(), stmt) else {
            return;
        };
        if !analysis::in_step_code(cx.semantic()) {
            return;
        }
        check_function(cx, def);
    }

    fn file_end<'a>(&self, cx: &mut Checker<'a>, body: &'a [Stmt]) {
        // Module-level helpers called from device code in this file run on the device too.
        for def in analysis::device_helpers(cx.semantic(), cx.file().text, body) {
            check_function(cx, def);
        }
    }
}

fn check_function<'a>(cx: &mut Checker<'a>, def: &'a Stmt) {
    let Some(func) = analysis::Function::in_class(cx.semantic(), def) else {
        return;
    };
    let sem = cx.semantic();
    let calls = analysis::find(func.body, |e| factory_name(sem, e).is_some());
    let mut hits = Vec::new();
    for occ in &calls {
        let Expr::Call(call) = occ.expr else { continue };
        let Some(name) = factory_name(sem, occ.expr) else {
            continue;
        };
        if !creates_on_host(sem, &func, name, call) {
            continue;
        }
        if analysis::classify(sem, &func, occ, 0) != analysis::Flow::Meets {
            continue;
        }
        hits.push((occ.expr.range(), name, fix::device_fix(cx, call, occ.expr)));
    }
    let helper = analysis::is_module_level(sem).then(|| func.name.to_owned());
    for (range, name, fix) in hits {
        let finding = cx.report(
            range,
            format!(
                "`torch.{name}` without `device=` creates a CPU tensor here that then meets NPU tensors \
                 (device mismatch); pass `device=` from an input tensor (see P_RND.md)"
            ),
        );
        if let Some(helper) = &helper {
            finding.symbol = Some(helper.clone());
        }
        finding.fix = fix;
    }
}

/// The factory's short name when `expr` is a call of a torch factory.
fn factory_name(sem: &Semantic<'_>, expr: &Expr) -> Option<&'static str> {
    let Expr::Call(call) = expr else {
        return None;
    };
    // The qualified name is `torch.<factory>`: `<torch>.<factory>` or a name bound to it.
    let short = match call.func.as_ref() {
        Expr::Attribute(a) => {
            let short = a.attr.as_str();
            if !FACTORIES.contains(&short) || !sem.resolves_to(&a.value, "torch") {
                return None;
            }
            short
        }
        Expr::Name(n) => sem.lookup(n.id.as_str())?.strip_prefix("torch.")?,
        _ => return None,
    };
    FACTORIES.iter().copied().find(|f| *f == short)
}

/// The call creates its tensor on the host: no `device=`, no `**kwargs` that may carry one,
/// no `out=`, and (for `tensor`/`normal`) not a plain scalar or a tensor argument.
fn creates_on_host(
    sem: &Semantic<'_>,
    func: &analysis::Function<'_>,
    name: &str,
    call: &ast::ExprCall,
) -> bool {
    let blocked = call.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_none_or(|a| matches!(a.as_str(), "device" | "out"))
    });
    if blocked {
        return false;
    }
    let first = call.args.first();
    // `torch.rand([])` is 0-dim, which acts as a scalar on any device; `torch.empty([0])` is
    // an empty placeholder.
    let degenerate = |elts: &[Expr]| {
        elts.is_empty()
            || matches!(elts, [Expr::Constant(c)] if matches!(&c.value, ast::Constant::Int(n) if *n == 0.into()))
    };
    if matches!(first, Some(Expr::List(l)) if degenerate(&l.elts))
        || matches!(first, Some(Expr::Tuple(t)) if degenerate(&t.elts))
    {
        return false;
    }
    match name {
        // A 0-dim tensor of a Python number acts as a scalar on any device; numpy-built
        // values are P_TGT's.
        // Only data that is visibly a sequence: anything else may be a Python number (a
        // 0-dim tensor acts as a scalar on any device).
        "tensor" => first.is_some_and(|a| {
            analysis::is_sequence_literal(func, a) && !analysis::derives_from_host(sem, func, a, 0)
        }),
        // `normal(mean_tensor, std_tensor)` follows its arguments.
        "normal" => first.is_some_and(|a| analysis::is_host_scalar(sem, func, a, 0)),
        _ => true,
    }
}
