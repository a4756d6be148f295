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
    stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::Assert(a) if reads_device(&a.test, true) => Some((
                a.range(),
                "`assert` on a tensor value in the step, a host sync every call",
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
        .collect()
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
