//! `P_TGT`'s checks of device values that the step moves to the host without a `.numpy()` it
//! can see in one expression: a model result pulled into a field of the host batch (the
//! returns and advantages are then computed from it on the host), and tensors moved to the
//! CPU with `.to("cpu")`/`.cpu()` and sent back to the device after host computation.

use crate::analysis::{self, Function};
use crate::checker::Checker;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use crate::source::{TextRange, TextSize};

/// Report each store of a pulled model result into a field of a parameter (`batch.rew =
/// to_numpy(self.disc(batch))`, `batch.rew += to_numpy(loss * scale)`): the batch is host data,
/// so what is computed from that field afterwards (returns, advantages) runs on the host.
pub(super) fn batch_stores<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) {
    let text = cx.slice(def.range());
    if !text.contains("numpy") {
        return;
    }
    let sem = cx.semantic();
    let mut all = Vec::new();
    analysis::statements(func.body, &mut all);
    let mut found = Vec::new();
    for stmt in all {
        let (targets, value): (&[Expr], &Expr) = match stmt {
            Stmt::Assign(a) => (&a.targets, &a.value),
            Stmt::AugAssign(a) => (std::slice::from_ref(a.target.as_ref()), &a.value),
            _ => continue,
        };
        if !targets.iter().any(|t| field_of_param(func, t)) {
            continue;
        }
        let pulled = analysis::find_in_expr(value).into_iter().find(|e| {
            super::is_pull(sem, e) && pulled_arg(e).is_some_and(|a| from_model(func, a, 0))
        });
        if let Some(pull) = pulled {
            found.push(super::pull_site(pull));
        }
    }
    for range in found {
        cx.report(
            range,
            "the step pulls a model result to the host and stores it in the batch, whose returns or \
             targets are then computed on the host, a host-device sync and two copies per step on the \
             NPU; keep the value a tensor and compute them with torch ops on the device (see P_TGT.md)",
        );
    }
}

/// `batch.rew`, `batch["rew"]` or `batch.extra["rew"]` where `batch` is a parameter other
/// than `self`/`cls`.
fn field_of_param(func: &Function<'_>, target: &Expr) -> bool {
    let mut base = target;
    while let Expr::Attribute(ast::ExprAttribute { value, .. })
    | Expr::Subscript(ast::ExprSubscript { value, .. }) = base
    {
        base = value.as_ref();
    }
    !std::ptr::eq(base, target)
        && matches!(base, Expr::Name(n)
        if !matches!(n.id.as_str(), "self" | "cls") && func.is_param(n.id.as_str()))
}

/// The value a pull takes off the device: the argument of `to_numpy(x)`, the base of
/// `x.cpu().numpy()`.
fn pulled_arg(pull: &Expr) -> Option<&Expr> {
    if let Some(base) = super::pulled_base(pull) {
        return Some(base);
    }
    match pull {
        Expr::Call(c) => c.args.first(),
        _ => None,
    }
}

/// `expr` is computed by a call on `self` (the model, a discriminator, a reward net), directly
/// or through local names.
fn from_model(func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > 4 {
        return false;
    }
    let mut names = Vec::new();
    for e in analysis::find_in_expr(expr) {
        match e {
            Expr::Call(c) if calls_on_self(&c.func) => return true,
            Expr::Name(n) => names.push(n.id.as_str()),
            _ => {}
        }
    }
    names.iter().any(|n| {
        func.assigned(n)
            .iter()
            .any(|(_, v)| !std::ptr::eq(*v, expr) && from_model(func, v, depth + 1))
    })
}

/// `self.f(...)` or `self.net.f(...)`.
fn calls_on_self(callee: &Expr) -> bool {
    let mut cur = callee;
    while let Expr::Attribute(a) = cur {
        cur = a.value.as_ref();
    }
    matches!(cur, Expr::Name(n) if n.id.as_str() == "self") && !matches!(callee, Expr::Name(_))
}

/// Report a step that moves tensors to the CPU with `.to("cpu")` or `.cpu()` (no `.numpy()`)
/// and later moves a value to a device (`.to(x.device)`, `.to(device)`, `.cuda()`): the host
/// computes between the two. One issue, at the first move to the CPU, with the other moves to
/// the CPU and the moves back in `related[]`.
pub(super) fn cpu_round_trip<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) {
    let text = cx.slice(def.range());
    let to_cpu = text.contains(".cpu()") || text.contains("\"cpu\"") || text.contains("'cpu'");
    if !to_cpu || !(text.contains(".to(") || text.contains(".cuda(") || text.contains(".npu(")) {
        return;
    }
    // Code that builds parameters or buffers is setup, whatever its name says.
    let sem = cx.semantic();
    let builds = analysis::try_each_expr(func.body, |e| match e {
        Expr::Call(c)
            if sem.matches(&c.func, &["torch.nn.Parameter"])
                || matches!(
                    analysis::last_name_of(&c.func),
                    "register_buffer" | "Parameter"
                ) =>
        {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    if builds {
        return;
    }
    let to_cpu: Vec<_> = analysis::find(func.body, is_cpu_move)
        .into_iter()
        .filter(|occ| {
            assigned_to_local(&occ.ancestors)
                && !then_numpy(&occ.ancestors)
                && !under_device_test(&occ.ancestors)
        })
        .map(|occ| call_site(occ.expr))
        .collect();
    let Some(first) = to_cpu.first().copied() else {
        return;
    };
    let back: Vec<TextRange> = analysis::find(func.body, is_device_move)
        .into_iter()
        .map(|occ| call_site(occ.expr))
        .filter(|r| r.start() > first.end())
        .collect();
    if back.is_empty() {
        return;
    }
    let mut related: Vec<_> = to_cpu[1..]
        .iter()
        .map(|r| cx.related(*r, "another tensor moved to the CPU here"))
        .collect();
    related.extend(
        back.iter()
            .map(|r| cx.related(*r, "the host result goes back to the device here")),
    );
    let finding = cx.report(
        first,
        "the step moves device tensors to the CPU, computes on them there and sends the result back to \
         the device, a host-device sync and two copies per step on the NPU; compute it with torch ops \
         on the device (see P_TGT.md)",
    );
    finding.related = related;
}

/// The move is the value of an assignment to a local name (`r = r.to("cpu")`): the host
/// computes with it next. A move handed to a call (`Int8Params(w.to("cpu"))`) or stored on an
/// object (an offload cache) is not computed on.
fn assigned_to_local(ancestors: &[analysis::Node<'_>]) -> bool {
    let mut up = ancestors.iter().rev();
    loop {
        match up.next() {
            // A method chained on the move (`.float()`): its attribute, then its call.
            Some(analysis::Node::Expr(Expr::Attribute(_))) => {
                if !matches!(up.next(), Some(analysis::Node::Expr(Expr::Call(_)))) {
                    return false;
                }
            }
            Some(analysis::Node::Expr(Expr::Subscript(_))) => {}
            Some(analysis::Node::Stmt(Stmt::Assign(a))) => {
                return matches!(a.targets.as_slice(), [Expr::Name(_)]);
            }
            _ => return false,
        }
    }
}

/// Inside an `if` that tests a device type (`if x.device.type == "mps": x = x.to("cpu")`): a
/// workaround for one backend, not the step's computation.
fn under_device_test(ancestors: &[analysis::Node<'_>]) -> bool {
    ancestors.iter().any(|n| {
        matches!(n, analysis::Node::Stmt(Stmt::If(i)) if analysis::find_in_expr(&i.test).iter().any(|e| match e {
            Expr::Attribute(a) => a.attr.as_str() == "type",
            Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s)
                if matches!(s.as_str(), "mps" | "cuda" | "npu" | "xla" | "cpu")),
            _ => false,
        }))
    })
}

/// `x.to("cpu")`, `x.to(device="cpu")` or `x.cpu()` of something other than a constant.
fn is_cpu_move(expr: &Expr) -> bool {
    let Expr::Call(c) = expr else {
        return false;
    };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    if matches!(a.value.as_ref(), Expr::Constant(_)) {
        return false;
    }
    match a.attr.as_str() {
        "cpu" => c.args.is_empty(),
        "to" => c
            .args
            .first()
            .or_else(|| device_keyword(c))
            .is_some_and(is_cpu_str),
        _ => false,
    }
}

fn device_keyword(c: &ast::ExprCall) -> Option<&Expr> {
    c.keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"))
        .map(|k| &k.value)
}

pub(super) fn is_cpu_str(e: &Expr) -> bool {
    matches!(e, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if s == "cpu"))
}

/// The move is followed by `.numpy()` or `.tolist()` (a pull the other checks report).
fn then_numpy(ancestors: &[analysis::Node<'_>]) -> bool {
    let mut chain = ancestors.iter().rev();
    while let Some(analysis::Node::Expr(Expr::Attribute(a))) = chain.next() {
        if matches!(a.attr.as_str(), "numpy" | "tolist" | "item") {
            return true;
        }
        if !matches!(chain.next(), Some(analysis::Node::Expr(Expr::Call(_)))) {
            return false;
        }
    }
    false
}

/// `x.cuda()`, `x.npu()`, or `x.to(d)` where `d` names a device (`x.device`, `device`,
/// `self.device`, a string other than `"cpu"`), not a dtype.
fn is_device_move(expr: &Expr) -> bool {
    let Expr::Call(c) = expr else {
        return false;
    };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    match a.attr.as_str() {
        "cuda" | "npu" => true,
        "to" => c
            .args
            .first()
            .or_else(|| device_keyword(c))
            .is_some_and(|d| match d {
                Expr::Constant(k) => matches!(&k.value, ast::Constant::Str(s) if s != "cpu"),
                Expr::Name(_) | Expr::Attribute(_) => analysis::last_name_of(d)
                    .to_ascii_lowercase()
                    .contains("device"),
                _ => false,
            }),
        _ => false,
    }
}

/// The range of a method call from its method name on (`.cpu()` in `x\n.detach()\n.cpu()`),
/// so that a finding in a chain split over lines is on the line that spells the call.
pub(super) fn call_site(expr: &Expr) -> TextRange {
    match expr {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => TextRange::new(attr_name_start(a), expr.range().end()),
            _ => expr.range(),
        },
        _ => expr.range(),
    }
}

/// Where the identifier of `attr` starts (the attribute's range ends with it).
fn attr_name_start(attr: &ast::ExprAttribute) -> TextSize {
    let len = TextSize::try_from(attr.attr.as_str().len()).unwrap_or_default();
    attr.range().end() - len
}

/// Report the calls, in a loop of a return or advantage computation, of a project method that
/// is a round trip ([`crate::callgraph::StepGraph::round_trip`]: a value normaliser's
/// `denormalize` that uploads its numpy argument, computes on the device and returns
/// `.cpu().numpy()`): every iteration pays an upload, a sync and a download. One finding per
/// block of the loop, the block's other calls in `related[]`.
pub(super) fn round_trip_calls<'a>(cx: &mut Checker<'a>, func: &Function<'a>) {
    let Some(graph) = cx.semantic().project_modules().map(|m| &m.steps) else {
        return;
    };
    let found: Vec<_> = analysis::find(func.body, |e| round_trip_method(graph, e).is_some())
        .into_iter()
        .filter(|occ| !analysis::in_log_call(&occ.ancestors))
        .filter_map(|occ| {
            let name = round_trip_method(graph, occ.expr)?;
            Some((block_of(&occ.ancestors)?, occ.expr, name))
        })
        .collect();
    let mut blocks: Vec<(TextRange, Vec<(&Expr, &str)>)> = Vec::new();
    for (block, call, name) in found {
        match blocks.iter_mut().find(|(b, _)| *b == block) {
            Some((_, calls)) => calls.push((call, name)),
            None => blocks.push((block, vec![(call, name)])),
        }
    }
    for (_, calls) in blocks {
        let (first, name) = calls[0];
        let def = graph.round_trip(name).unwrap_or(name);
        let related: Vec<_> = calls[1..]
            .iter()
            .map(|(c, _)| cx.related(c.range(), "another round trip in the same iteration"))
            .collect();
        let finding = cx.report(
            first.range(),
            format!(
                "the loop calls `{name}` every iteration, and every `{name}` method of the project (such as \
                 `{def}`) sends its input to the device and returns the result pulled back with `.cpu().numpy()`: an upload, a host-device sync and a \
                 download per iteration on the NPU; call it once on the whole array before the loop, or \
                 keep the loop's values on the device (see P_TGT.md)"
            ),
        );
        finding.related = related;
    }
}

/// The method name of `obj.name(...)` (not on `self`) when `name` is a round trip of the project.
fn round_trip_method<'e>(graph: &crate::callgraph::StepGraph, e: &'e Expr) -> Option<&'e str> {
    let Expr::Call(c) = e else { return None };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return None;
    };
    let on_self = matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self");
    (!on_self && graph.round_trip(a.attr.as_str()).is_some()).then_some(a.attr.as_str())
}

/// The block of statements a loop runs that holds an expression: the range of the nearest
/// `for`/`while` body or `if`/`else` branch around its statement, or `None` outside any loop.
fn block_of(ancestors: &[analysis::Node<'_>]) -> Option<TextRange> {
    let stmts: Vec<&Stmt> = ancestors
        .iter()
        .filter_map(|n| match n {
            analysis::Node::Stmt(s) => Some(*s),
            analysis::Node::Expr(_) => None,
        })
        .collect();
    if !stmts
        .iter()
        .any(|s| matches!(s, Stmt::For(_) | Stmt::While(_)))
    {
        return None;
    }
    let (inner, outer) = stmts.split_last()?;
    let at = inner.range();
    let branch = |body: &[Stmt]| {
        body.iter()
            .any(|s| s.range().contains_range(at))
            .then(|| span(body))
            .flatten()
    };
    for parent in outer.iter().rev() {
        let found = match parent {
            Stmt::If(s) => branch(&s.body).or_else(|| branch(&s.orelse)),
            Stmt::For(s) => branch(&s.body).or_else(|| branch(&s.orelse)),
            Stmt::While(s) => branch(&s.body).or_else(|| branch(&s.orelse)),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The range from a block's first statement to its last.
fn span(body: &[Stmt]) -> Option<TextRange> {
    Some(TextRange::new(
        body.first()?.range().start(),
        body.last()?.range().end(),
    ))
}
