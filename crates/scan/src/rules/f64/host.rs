//! Where `P_F64`'s float64 stays on the host or is already handled for the NPU: device-less
//! creations, casts after `.cpu()`, dtype variables that never reach a device, and existing
//! NPU workarounds (a branch on `"npu"`, a dtype helper that is given the device).

use crate::analysis::{self, Function};
use crate::semantic::Semantic;
use crate::source::TextSize;
use crate::source::ast::{self, Expr, Ranged, Stmt};

/// Inside an `if`/conditional expression that tests for the NPU (`if x.device.type in {"mps",
/// "npu"}:`, `torch.float32 if is_npu else torch.float64`): the code already handles it.
pub(super) fn in_npu_workaround(sem: &Semantic<'_>) -> bool {
    let stmt_test = sem
        .stmts()
        .iter()
        .any(|s| matches!(s, Stmt::If(i) if mentions_npu(&i.test)));
    stmt_test
        || sem
            .exprs()
            .iter()
            .any(|e| matches!(e, Expr::IfExp(i) if mentions_npu(&i.test)))
}

fn mentions_npu(test: &Expr) -> bool {
    analysis::find_in_expr(test).iter().any(|e| match e {
        Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if s.contains("npu")),
        Expr::Name(n) => n.id.as_str().contains("npu"),
        Expr::Attribute(a) => a.attr.as_str().contains("npu"),
        _ => false,
    })
}

/// A project helper given the float64 dtype together with a device
/// (`maybe_adjust_dtype_for_device(torch.float64, x.device)`): it picks the dtype per device.
pub(super) fn is_dtype_helper(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    // A function (`helper(...)`, `utils.helper(...)`), not a tensor method such as `.to`.
    let function = matches!(call.func.as_ref(), Expr::Name(_)) || sem.resolve(&call.func).is_some();
    function
        && !sem.resolves_with_prefix(&call.func, "torch.")
        && call
            .args
            .iter()
            .chain(call.keywords.iter().map(|k| &k.value))
            .any(names_device)
}

/// `device`, `x.device`, `self.device`.
fn names_device(expr: &Expr) -> bool {
    match expr {
        Expr::Name(n) => n.id.as_str() == "device",
        Expr::Attribute(a) => a.attr.as_str() == "device",
        _ => false,
    }
}

/// A creation through an imported callee (`torch.linspace(..., dtype=torch.float64)`,
/// `MemoryMappedTensor.from_filename(dtype=...)`) with no `device=` or a CPU one: the tensor
/// is made on the host. Method calls on values (`x.sum(dtype=torch.float64)`) run where the
/// value lives and are not creations.
pub(super) fn is_host_creation(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    if sem.resolve(&call.func).is_none() {
        return false;
    }
    if in_cpu_device_context(sem) {
        return true;
    }
    if sem.resolves_to(&call.func, "torch.nn.Parameter")
        || sem.resolves_with_prefix(&call.func, "torch.nn.")
    {
        return false;
    }
    match call
        .keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"))
    {
        None => true,
        Some(k) => is_cpu_device(sem, &k.value),
    }
}

/// Inside `with torch.device("cpu"):`, where every creation is on the host.
fn in_cpu_device_context(sem: &Semantic<'_>) -> bool {
    sem.stmts().iter().any(|s| {
        matches!(s, Stmt::With(w) if w.items.iter().any(|i| is_cpu_device(sem, &i.context_expr)))
    })
}

/// `"cpu"`, `torch.device("cpu")`.
pub(super) fn is_cpu_device(sem: &Semantic<'_>, expr: &Expr) -> bool {
    match expr {
        Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if s == "cpu"),
        Expr::Call(c) if sem.resolves_to(&c.func, "torch.device") => {
            c.args.first().is_some_and(|a| is_cpu_device(sem, a))
        }
        _ => false,
    }
}

/// The receiver of a cast is on the host: the chain goes through `.cpu()` or `.numpy()`, or
/// starts at a host creation (`torch.arange(0, d, 2).to(torch.float64)`).
pub(super) fn receiver_on_host(sem: &Semantic<'_>, receiver: &Expr) -> bool {
    let mut cur = receiver;
    loop {
        match cur {
            Expr::Call(c) => {
                if let Expr::Attribute(a) = c.func.as_ref() {
                    if matches!(a.attr.as_str(), "cpu" | "numpy") {
                        return true;
                    }
                    if sem.resolve(&c.func).is_none() {
                        cur = &a.value;
                        continue;
                    }
                }
                return is_host_creation(sem, c) && sem.resolves_with_prefix(&c.func, "torch.");
            }
            Expr::Attribute(a) => cur = &a.value,
            Expr::Subscript(s) => cur = &s.value,
            _ => return false,
        }
    }
}

/// How the host tensor or dtype bound to `name` in `func` is used: true when some use takes
/// it to a device (`register_buffer(..., name)`, `nn.Parameter(name)`, `name.to(device)`,
/// `name.cuda()`) or, for a dtype, makes a tensor on a device with it (`torch.zeros(...,
/// device=d, dtype=name)`, `x.to(name)`, `x.sum(dtype=name)`).
pub(super) fn name_reaches_device(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> bool {
    let uses = analysis::find(
        func.body,
        |e| matches!(e, Expr::Name(n) if n.id.as_str() == name),
    );
    let rebound = rebound_at(sem, func, name);
    uses.iter().any(|occ| {
        // After `name = name.float()` (or any rebinding in the same block), later uses see
        // the new value, not the float64 one.
        if rebound.is_some_and(|end| occ.expr.start() >= end) {
            return false;
        }
        let parent = occ.ancestors.last().and_then(|n| match n {
            analysis::Node::Expr(e) => Some(*e),
            analysis::Node::Stmt(_) => None,
        });
        let Some(parent) = parent else {
            return false;
        };
        match parent {
            // `name.to(device)`, `name.cuda()`
            Expr::Attribute(a) => matches!(a.attr.as_str(), "cuda" | "npu")
                || (a.attr.as_str() == "to" && moves_without_cast(sem, occ, parent)),
            Expr::Call(c) => {
                let short = match c.func.as_ref() {
                    Expr::Attribute(a) => a.attr.as_str(),
                    Expr::Name(n) => n.id.as_str(),
                    _ => "",
                };
                if matches!(short, "register_buffer" | "Parameter") {
                    return true;
                }
                if matches!(short, "to" | "type") {
                    // `x.to(name)`: a cast of a value that may be on the device.
                    return !matches!(c.func.as_ref(), Expr::Attribute(a) if std::ptr::eq(a.value.as_ref(), occ.expr));
                }
                // `dtype=name` in a creation on a device, or in a method of a value.
                let as_dtype = c.keywords.iter().any(|k| {
                    k.arg.as_ref().is_some_and(|a| a.as_str() == "dtype")
                        && std::ptr::eq(std::ptr::from_ref(&k.value), occ.expr)
                });
                as_dtype && !is_host_creation(sem, c)
            }
            _ => false,
        }
    })
}

/// Where the first later statement of the current statement's own block that assigns `name`
/// again ends: from there on, `name` no longer holds the value assigned here. A rebinding in a
/// nested block (one branch of an `if`) leaves the other paths as they were, so it does not count.
fn rebound_at(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> Option<TextSize> {
    let current = sem.current_stmt()?;
    let block = analysis::block_of(func.body, current)?;
    let at = block.iter().position(|s| std::ptr::eq(s, current))?;
    block[at + 1..].iter().find_map(|s| {
        let targets: &[Expr] = match s {
            Stmt::Assign(a) => &a.targets,
            Stmt::AnnAssign(a) if a.value.is_some() => std::slice::from_ref(a.target.as_ref()),
            _ => return None,
        };
        targets
            .iter()
            .any(|t| matches!(t, Expr::Name(n) if n.id.as_str() == name))
            .then(|| s.end())
    })
}

/// `name.to(...)` whose call gives no non-float64 torch dtype: a move, not a cast.
fn moves_without_cast(sem: &Semantic<'_>, occ: &analysis::Occurrence<'_>, attr: &Expr) -> bool {
    let call = occ.ancestors.iter().rev().nth(1).and_then(|n| match n {
        analysis::Node::Expr(Expr::Call(c)) if std::ptr::eq(c.func.as_ref(), attr) => Some(c),
        _ => None,
    });
    let Some(call) = call else {
        return false;
    };
    let casts = call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value))
        .any(|v| {
            sem.resolve(v)
                .is_some_and(|q| q.starts_with("torch.") && !super::is_float64_name(&q))
        });
    let empty = call.args.is_empty() && call.keywords.is_empty();
    !casts && !empty
}

/// The name a float64 value is assigned to (`freqs_dtype = torch.float32 if mps else
/// torch.float64`, `t = torch.linspace(..., dtype=torch.float64)`), when the walk's statement
/// is a single-name assignment.
pub(super) fn assigned_name<'a>(sem: &Semantic<'a>) -> Option<&'a str> {
    match sem.current_stmt()? {
        Stmt::Assign(a) => match a.targets.as_slice() {
            [Expr::Name(n)] => Some(n.id.as_str()),
            _ => None,
        },
        Stmt::AnnAssign(a) => match a.target.as_ref() {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// The innermost enclosing function definition of the walk.
pub(super) fn enclosing_function<'a>(sem: &Semantic<'a>) -> Option<&'a Stmt> {
    sem.stmts()
        .iter()
        .rev()
        .find(|s| matches!(s, Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_)))
        .copied()
}
