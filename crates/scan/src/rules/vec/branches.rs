//! `assert` and `if` statements of training code whose test needs a device value on the host.

use super::is_tensor_expr;
use crate::analysis::{self, Function};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{Expr, Ranged, Stmt};

/// `assert` and `if` statements of the function whose test needs a device value on the host:
/// a torch call (`torch.any(...)`, `torch.allclose(...)`) or a reduction of a tensor
/// (`.any()`, `.all()`, `.item()`, `.max()`, `.sum()`...) that Python then compares or converts
/// (`assert obs.max() > 5`, `if int(mask.sum()) > 0:`). NaN/Inf checks are
/// [`super::nan_guards`]'s, and an `if` on a plain flag or on shapes reads no device value.
pub(super) fn branch_syncs(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    stmts: &[&Stmt],
) -> Vec<(TextRange, &'static str)> {
    const NOT_VALUES: &[&str] = &[
        "torch.is_",
        "torch.jit",
        "torch.cuda",
        "torch.distributed",
        "torch.backends",
        "torch.compiler",
        "torch.onnx",
        "torch._",
        "torch.Size",
        "torch.get_",
        "torch.are_",
        "torch.version",
        "torch.nn",
        "torch.utils",
    ];
    const REDUCTIONS: &[&str] = &[
        "any", "all", "item", "equal", "allclose", "max", "min", "sum", "amax", "amin",
    ];
    // A reduction of a device tensor: `x.max()`, `torch.max(obs)`, `x.any()`.
    let reduces = |e: &Expr| {
        let Expr::Call(c) = e else { return false };
        if REDUCTIONS
            .iter()
            .any(|r| sem.resolves_to(&c.func, &format!("torch.{r}")))
        {
            return c
                .args
                .first()
                .is_some_and(|a| holds_device_tensor(sem, func, a));
        }
        matches!(c.func.as_ref(), Expr::Attribute(m)
            if REDUCTIONS.contains(&m.attr.as_str())
                && !matches!(analysis::last_name_of(&m.value), "isnan" | "isinf" | "isfinite")
                && holds_device_tensor(sem, func, &m.value))
    };
    // `n = ids.max() + 1`, then `if n > limit:`: a local name every assignment of which
    // reduces a device tensor carries the reduction into the test.
    // A value already made a Python number (`int(x.max().item())`) synced where it was bound.
    let to_python = |e: &Expr| matches!(e, Expr::Call(c) if matches!(analysis::last_name_of(&c.func), "int" | "float" | "bool" | "item" | "tolist"));
    let reduced_name = |e: &Expr| {
        let Expr::Name(n) = e else { return false };
        if func.is_param(n.id.as_str()) {
            return false;
        }
        let values: Vec<&Expr> = stmts
            .iter()
            .filter_map(|s| match s {
                Stmt::Assign(a)
                    if a.targets.len() == 1
                        && matches!(&a.targets[0], Expr::Name(t) if t.id == n.id) =>
                {
                    Some(a.value.as_ref())
                }
                Stmt::AugAssign(a) if matches!(a.target.as_ref(), Expr::Name(t) if t.id == n.id) => {
                    Some(a.value.as_ref())
                }
                _ => None,
            })
            .collect();
        !values.is_empty()
            && values.iter().all(|v| {
                let parts = analysis::find_in_expr(v);
                parts.iter().any(|e| reduces(e)) && !parts.iter().any(|e| to_python(e))
            })
    };
    let reads_device = |test: &Expr, torch_calls: bool| {
        let parts = analysis::find_in_expr(test);
        // `x.shape`, `x.dtype`: metadata, read without a sync.
        let metadata: Vec<TextRange> = parts
            .iter()
            .filter_map(|e| match e {
                Expr::Attribute(a)
                    if matches!(
                        a.attr.as_str(),
                        "shape" | "dtype" | "device" | "ndim" | "size" | "is_cuda"
                    ) =>
                {
                    Some(a.value.range())
                }
                _ => None,
            })
            .collect();
        parts.iter().any(|e| {
            if !metadata.contains(&e.range()) && reduced_name(e) {
                return true;
            }
            if reduces(e) {
                return true;
            }
            let Expr::Call(c) = e else { return false };
            torch_calls
                && sem.resolves_with_prefix(&c.func, "torch.")
                && !NOT_VALUES
                    .iter()
                    .any(|p| sem.resolves_with_prefix(&c.func, p))
        })
    };
    // `if torch.any(expired):`, `if not torch.equal(a, b):`, `if x.item():`: a test that is a
    // torch reduction itself (Python's own `any(...)` is not one).
    let bare_reduction = |test: &Expr| {
        let mut test = test;
        while let Expr::UnaryOp(u) = test
            && matches!(u.op, crate::source::ast::UnaryOp::Not)
        {
            test = &u.operand;
        }
        let Expr::Call(c) = test else { return false };
        // NaN/Inf checks (`torch.any(torch.isnan(x))`) are [`super::nan_guards`]'s.
        if analysis::find_in_expr(test)
            .iter()
            .any(|e| super::is_nan_check(sem, e))
        {
            return false;
        }
        // `torch.any(x)` takes a tensor whatever `x` is named: in the step, a device one.
        ["torch.any", "torch.all", "torch.equal", "torch.allclose"]
            .iter()
            .any(|q| sem.resolves_to(&c.func, q))
            || matches!(c.func.as_ref(), Expr::Attribute(m) if m.attr.as_str() == "item")
                && reduces(test)
    };
    let mut found: Vec<(TextRange, &'static str)> = stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Assert(a) if reads_device(&a.test, true) => Some((
                a.range(),
                "`assert` on a tensor value in the step, a host sync every call",
            )),
            Stmt::If(i) if bare_reduction(&i.test) => Some((
                i.test.range(),
                "`if` on a tensor value in the step, a host sync every call",
            )),
            // Only an `if` that compares or converts a reduction: `if x.any():` alone is the
            // same sync, but so is much code that tests Python containers with `any`.
            Stmt::If(i)
                if matches!(i.test.as_ref(), Expr::Compare(_)) && reads_device(&i.test, false) =>
            {
                Some((
                    i.test.range(),
                    "`if` on a tensor value in the step, a host sync every call",
                ))
            }
            _ => None,
        })
        .collect();
    // `max(1, mask.sum())`, `range(n_valid.max() + 1)`: Python compares or counts with a
    // tensor value, which it must first copy to the host.
    for stmt in stmts {
        let own: &[&Expr] = match stmt {
            Stmt::Assign(a) => &[a.value.as_ref()],
            Stmt::AugAssign(a) => &[a.value.as_ref()],
            Stmt::Expr(e) => &[e.value.as_ref()],
            Stmt::Return(r) => match &r.value {
                Some(v) => &[v.as_ref()],
                None => &[],
            },
            Stmt::For(f) => &[f.iter.as_ref()],
            _ => &[],
        };
        for expr in own {
            for e in analysis::find_in_expr(expr) {
                let Expr::Call(c) = e else { continue };
                let Expr::Name(n) = c.func.as_ref() else {
                    continue;
                };
                let what = match n.id.as_str() {
                    "max" | "min" if c.args.len() >= 2 => {
                        "Python `max()`/`min()` compares a tensor value in the step, a host sync every call"
                    }
                    "range" => {
                        "`range()` counts to a tensor value in the step, a host sync every call"
                    }
                    _ => continue,
                };
                if sem.resolve(&c.func).is_some() {
                    continue;
                }
                let syncs = c.args.iter().any(|a| {
                    let parts = analysis::find_in_expr(a);
                    !parts.iter().any(|p| to_python(p))
                        && parts.iter().any(|p| reduces(p) || reduced_name(p))
                });
                if syncs {
                    found.push((c.range(), what));
                }
            }
        }
    }
    found
}

/// A tensor of the step, seen through elementwise conversions and indexing (`typs.float()`,
/// `mask[:, 1:]`): a local tensor, a device value, or an input of `forward`.
fn holds_device_tensor(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr) -> bool {
    let mut base = expr;
    loop {
        base = match base {
            Expr::Subscript(s) => &s.value,
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a)
                    if matches!(
                        a.attr.as_str(),
                        "float" | "long" | "int" | "bool" | "abs" | "detach" | "half"
                    ) =>
                {
                    &a.value
                }
                _ => break,
            },
            _ => break,
        };
    }
    is_tensor_expr(sem, func, base)
        || analysis::is_device_value(sem, func, base, 0)
        || (func.name == "forward"
            && matches!(base, Expr::Name(n) if n.id.as_str() != "self" && func.is_param(n.id.as_str())))
}
