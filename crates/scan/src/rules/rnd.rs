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
use crate::source::TextSize;
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
        let Some(def) = analysis::function_entry(cx.semantic(), stmt)
            .or_else(|| analysis::script_block(cx.semantic(), stmt))
        else {
            return;
        };
        // A unit test (`test_loss`) builds its model and inputs on the CPU unless it says otherwise.
        let test = cx
            .semantic()
            .current_function()
            .is_some_and(|f| f.name.starts_with("test_"));
        // Test files (`tests/`, `testing/` mocks, `test_*.py`) build their tensors on the CPU
        // on purpose, like unit tests.
        if test || crate::names::is_test_path(cx.path()) {
            return;
        }
        // A free helper reached from a step in another file makes tensors for its caller,
        // which moves them: only methods follow the project's step model here.
        let sem = cx.semantic();
        let method = sem.current_function().is_some_and(|f| f.is_method);
        if analysis::in_step_code(sem) || (method && analysis::in_project_step(sem)) {
            check_function(cx, def, None);
        } else if let Some(body) = analysis::training_loop_body(cx.semantic(), def) {
            check_function(cx, def, Some(body));
        }
    }

    fn file_end<'a>(&self, cx: &mut Checker<'a>, body: &'a [Stmt]) {
        // Module-level helpers called from device code in this file run on the device too.
        for def in analysis::device_helpers(cx.semantic(), cx.file().text, body) {
            check_function(cx, def, None);
        }
    }
}

/// Check the function `def`, or only `body` of it (the loop of a training script).
fn check_function<'a>(cx: &mut Checker<'a>, def: &'a Stmt, body: Option<&'a [Stmt]>) {
    let Some(mut func) = analysis::Function::in_class(cx.semantic(), def) else {
        return;
    };
    if let Some(body) = body {
        func.body = body;
    }
    let sem = cx.semantic();
    let calls = analysis::find(func.body, |e| factory_name(sem, e).is_some());
    // After the function moves its inputs to the CPU (`r = r.to("cpu")`), it computes on the
    // host on purpose: its new tensors meet CPU tensors (a P_TGT round trip when it sends the
    // result back).
    if calls.is_empty() {
        return;
    }
    let host_from = moved_to_cpu(func.body);
    let mut hits = Vec::new();
    for occ in &calls {
        if host_from.is_some_and(|at| occ.expr.start() > at)
            || while_tracing(occ)
            || empty_placeholder(occ)
        {
            continue;
        }
        let Expr::Call(call) = occ.expr else { continue };
        let Some(name) = factory_name(sem, occ.expr) else {
            continue;
        };
        if !creates_on_host(sem, &func, name, call) {
            continue;
        }
        if analysis::classify(sem, &func, occ, 0) != analysis::Flow::Meets
            || handed_to_device_callee(&func, occ)
        {
            continue;
        }
        hits.push((occ.expr.range(), name, fix::device_fix(cx, call, occ.expr)));
    }
    if hits.is_empty() || only_called_from_setup(sem, def) {
        return;
    }
    let helper = analysis::is_module_level(sem).then(|| func.name.to_owned());
    for (range, name, fix) in hits {
        let finding = cx.report(
            range,
            format!(
                "`torch.{name}` without `device=` creates a CPU tensor here that then meets NPU tensors \
                 (device mismatch); pass `device=` from an input tensor (see P_RND.md); check first \
                 that its value reaches device tensors: one that only counts a Python loop or \
                 indexes host data is harmless"
            ),
        );
        if let Some(helper) = &helper {
            finding.symbol = Some(helper.clone());
        }
        finding.fix = fix;
    }
}

/// The creation sits in the body of an `if` taken only while the model is traced or scripted
/// (`if is_torch_fx_proxy(ids):`, `if torch.jit.is_tracing():`): proxies and traced graphs have
/// no device of their own, and the eager path is the other branch.
fn while_tracing(occ: &analysis::Occurrence<'_>) -> bool {
    const TRACING: &[&str] = &[
        "is_torch_fx_proxy",
        "is_tracing",
        "is_fx_tracing",
        "is_scripting",
        "is_compiling",
    ];
    occ.ancestors.iter().any(|n| {
        let analysis::Node::Stmt(Stmt::If(i)) = n else {
            return false;
        };
        let in_body = i
            .body
            .first()
            .is_some_and(|first| first.start() <= occ.expr.start())
            && i.body
                .last()
                .is_some_and(|last| occ.expr.end() <= last.end());
        in_body
            && analysis::find_in_expr(&i.test).iter().any(|e| {
                matches!(e, Expr::Call(c) if TRACING.contains(&analysis::last_name_of(&c.func)))
            })
    })
}

/// The creation sizes a dimension by a count that the `if` around it has just found to be zero
/// (`if n > 0: ... else: out = torch.zeros((n, 4))`, `if not n: torch.zeros(n)`): the tensor is
/// empty, a placeholder with no values to meet anything.
fn empty_placeholder(occ: &analysis::Occurrence<'_>) -> bool {
    let Expr::Call(call) = occ.expr else {
        return false;
    };
    let sizes: Vec<&str> = match call.args.as_slice() {
        [Expr::Tuple(t)] => t.elts.iter().collect::<Vec<_>>(),
        [Expr::List(l)] => l.elts.iter().collect(),
        args => args.iter().collect(),
    }
    .into_iter()
    .filter_map(|e| match e {
        Expr::Name(n) => Some(n.id.as_str()),
        _ => None,
    })
    .collect();
    if sizes.is_empty() {
        return false;
    }
    let inside = |body: &[Stmt]| {
        body.first().is_some_and(|f| f.start() <= occ.expr.start())
            && body.last().is_some_and(|l| occ.expr.end() <= l.end())
    };
    occ.ancestors.iter().any(|node| {
        let analysis::Node::Stmt(Stmt::If(branch)) = node else {
            return false;
        };
        // Which branch means "the count is zero": the body of `if n == 0` / `if not n`, the
        // `else` of `if n > 0` / `if n >= 1` / `if n != 0` / `if n`.
        let zero_in_body = match branch.test.as_ref() {
            Expr::UnaryOp(unary) if matches!(unary.op, ast::UnaryOp::Not) => {
                matches!(unary.operand.as_ref(), Expr::Name(name) if sizes.contains(&name.id.as_str()))
                    .then_some(true)
            }
            Expr::Name(name) if sizes.contains(&name.id.as_str()) => Some(false),
            Expr::Compare(c) => match (c.left.as_ref(), c.ops.as_slice(), c.comparators.as_slice())
            {
                (Expr::Name(n), [op], [Expr::Constant(k)]) if sizes.contains(&n.id.as_str()) => {
                    let ast::Constant::Int(v) = &k.value else {
                        return false;
                    };
                    match op {
                        ast::CmpOp::Eq if *v == 0.into() => Some(true),
                        ast::CmpOp::NotEq | ast::CmpOp::Gt if *v == 0.into() => Some(false),
                        ast::CmpOp::GtE if *v == 1.into() => Some(false),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        match zero_in_body {
            Some(true) => inside(&branch.body),
            Some(false) => !branch.orelse.is_empty() && inside(&branch.orelse),
            None => false,
        }
    })
}

/// The new tensor is bound to a name that is afterwards only handed to calls that are given the device too
/// (`self.rope(frame_indices=idx, device=x.device)`): the callee moves it.
fn handed_to_device_callee(func: &analysis::Function<'_>, occ: &analysis::Occurrence<'_>) -> bool {
    let Some(analysis::Node::Stmt(Stmt::Assign(assign))) = occ
        .ancestors
        .iter()
        .rev()
        .find(|n| matches!(n, analysis::Node::Stmt(_)))
    else {
        return false;
    };
    let [Expr::Name(target)] = assign.targets.as_slice() else {
        return false;
    };
    let name = target.id.as_str();
    let after = occ.expr.end();
    let uses = analysis::find(func.body, |e| {
        matches!(e, Expr::Name(n) if n.id.as_str() == name
            && matches!(n.ctx, ast::ExprContext::Load)
            && n.range.start() > after)
    });
    !uses.is_empty()
        && uses.iter().all(|u| {
            matches!(u.ancestors.last(), Some(analysis::Node::Expr(Expr::Call(c)))
                if !std::ptr::eq(c.func.as_ref(), u.expr)
                    && c.keywords.iter().any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device")))
        })
}

/// Where the function first assigns a tensor moved to the CPU to a local name
/// (`reward = reward.to("cpu")`, `x = x.cpu()`), if it does.
fn moved_to_cpu(body: &[Stmt]) -> Option<TextSize> {
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    all.into_iter().find_map(|s| {
        let Stmt::Assign(a) = s else { return None };
        let [Expr::Name(_)] = a.targets.as_slice() else {
            return None;
        };
        let Expr::Call(c) = a.value.as_ref() else {
            return None;
        };
        let Expr::Attribute(m) = c.func.as_ref() else {
            return None;
        };
        let cpu = match m.attr.as_str() {
            "cpu" => c.args.is_empty(),
            "to" => matches!(c.args.first(), Some(Expr::Constant(k))
                if matches!(&k.value, ast::Constant::Str(v) if v == "cpu")),
            _ => false,
        };
        cpu.then(|| s.start())
    })
}

/// A method that only setup methods of its class call (`self._get_conv_out(shape)` from
/// `__init__`, to size a layer with a dummy input): it runs before the module reaches a device.
/// A method also referenced without a call (`self.assign = self.sinkhorn`) may run anywhere.
fn only_called_from_setup(sem: &Semantic<'_>, def: &Stmt) -> bool {
    let Stmt::FunctionDef(f) = def else {
        return false;
    };
    let Some(Stmt::ClassDef(class)) = sem.stmts().iter().rev().nth(1) else {
        return false;
    };
    let name = f.name.as_str();
    let is_self_attr = |e: &Expr| {
        matches!(e, Expr::Attribute(a) if a.attr.as_str() == name
            && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self"))
    };
    let mut called = false;
    for s in &class.body {
        let Stmt::FunctionDef(m) = s else { continue };
        if std::ptr::eq(s, def) {
            continue;
        }
        let (mut refs, mut calls) = (0_usize, 0_usize);
        analysis::try_each_expr(&m.body, |e| {
            match e {
                Expr::Call(c) if is_self_attr(&c.func) => calls += 1,
                e if is_self_attr(e) => refs += 1,
                _ => {}
            }
            std::ops::ControlFlow::Continue(())
        });
        if refs > calls {
            return false;
        }
        if calls > 0 {
            if !analysis::is_setup_function(m.name.as_str(), &m.decorator_list) {
                return false;
            }
            called = true;
        }
    }
    called
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
