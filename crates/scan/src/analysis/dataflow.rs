//! Where a new tensor flows in a function body: moved to a device, kept on the host, or
//! combined with device tensors.

use super::values::{HOST, HOST_CALLS, MAX_DEPTH, is_device_value, is_submodule};
use super::{Function, Node, Occurrence, reads};
use crate::semantic::Semantic;
use crate::source::TextSize;
use crate::source::ast::{Expr, Ranged, Stmt};

/// What happens to a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// It is combined with other tensors, used as an index, passed on or returned.
    Meets,
    /// It is moved to a device first (`.to`, `.cuda()`, `type_as`, a buffer).
    Moved,
    /// It stays on the host or its use is unknown.
    Host,
}

/// Methods that move a tensor to a device.
const MOVES: &[&str] = &["to", "cuda", "npu", "type_as", "to_device"];
/// Tensor methods whose arguments are shapes, dims or dtypes, or a tensor read for its shape
/// only (`alpha.expand_as(x)`: the result keeps `alpha`'s device).
const SHAPE_METHODS: &[&str] = &[
    "view",
    "view_as",
    "reshape_as",
    "expand_as",
    "reshape",
    "expand",
    "repeat",
    "permute",
    "transpose",
    "flatten",
    "unsqueeze",
    "squeeze",
    "narrow",
    "split",
    "chunk",
    "type",
    "float",
    "long",
    "int",
    "bool",
    "half",
    "unflatten",
    "movedim",
    "roll",
    "flip",
    "sum",
    "mean",
    "max",
    "min",
    "argmax",
    "argmin",
    "cumsum",
    "softmax",
    "clamp",
    "clamp_",
    "pow",
    "tile",
    "repeat_interleave",
    "sort",
    "topk",
];

/// Follow an occurrence of a tensor-valued expression upwards to decide where it flows.
pub fn classify(sem: &Semantic<'_>, func: &Function<'_>, occ: &Occurrence<'_>, depth: u32) -> Flow {
    let mut child: &Expr = occ.expr;
    let mut skip_next = false;
    let n = occ.ancestors.len();
    for i in (0..n).rev() {
        if skip_next {
            skip_next = false;
            if let Node::Expr(e) = occ.ancestors[i] {
                child = e;
                continue;
            }
        }
        match occ.ancestors[i] {
            Node::Expr(parent) => {
                let grand = i.checked_sub(1).map(|g| occ.ancestors[g]);
                match step_expr(sem, func, parent, child, grand) {
                    Step::Done(flow) => return flow,
                    Step::Up => child = parent,
                    Step::UpCall => {
                        child = parent;
                        skip_next = true;
                    }
                }
            }
            Node::Stmt(stmt) => return step_stmt(sem, func, stmt, child, depth),
        }
    }
    Flow::Host
}

enum Step {
    Done(Flow),
    /// The parent is a tensor derived from the child.
    Up,
    /// The parent is a method of the child and the grandparent calls it: the call is the
    /// derived tensor.
    UpCall,
}

fn step_expr(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    parent: &Expr,
    child: &Expr,
    grand: Option<Node<'_>>,
) -> Step {
    match parent {
        Expr::Attribute(a) => {
            let attr = a.attr.as_str();
            let call = match grand {
                Some(Node::Expr(Expr::Call(c))) if std::ptr::eq(c.func.as_ref(), parent) => Some(c),
                _ => None,
            };
            if MOVES.contains(&attr) && call.is_some() {
                return Step::Done(Flow::Moved);
            }
            if HOST.contains(&attr) {
                return Step::Done(Flow::Host);
            }
            let Some(call) = call else {
                return Step::Up;
            };
            if SHAPE_METHODS.contains(&attr) {
                // Their arguments are sizes and dims, not tensors.
                return Step::UpCall;
            }
            let tensor_arg = call
                .args
                .iter()
                .chain(call.keywords.iter().map(|k| &k.value))
                .any(|a| is_device_value(sem, func, a, 0));
            if tensor_arg {
                Step::Done(Flow::Meets)
            } else {
                Step::UpCall
            }
        }
        Expr::Call(c) => {
            if std::ptr::eq(c.func.as_ref(), child) {
                return Step::Done(Flow::Host);
            }
            let qualified = sem.resolve(&c.func);
            let short = match c.func.as_ref() {
                Expr::Name(n) => n.id.as_str(),
                Expr::Attribute(a) => a.attr.as_str(),
                _ => "",
            };
            if qualified.is_none() && HOST_CALLS.contains(&short) {
                return Step::Done(Flow::Host);
            }
            if matches!(
                short,
                "register_buffer" | "register_parameter" | "Parameter" | "Buffer"
            ) {
                return Step::Done(Flow::Moved);
            }
            let others_tensor = c
                .args
                .iter()
                .chain(c.keywords.iter().map(|k| &k.value))
                .filter(|a| !std::ptr::eq(*a, child))
                .any(|a| is_device_value(sem, func, a, 0));
            if others_tensor {
                return Step::Done(Flow::Meets);
            }
            if let Some(q) = qualified {
                return if q.starts_with("torch.") {
                    Step::Up
                } else {
                    Step::Done(Flow::Host)
                };
            }
            // A submodule of the model gets the tensor (it meets the weights), or a method of a
            // device tensor does: `x.masked_fill(mask, 0)`.
            let device_callee = is_submodule(sem, func, &c.func)
                || matches!(c.func.as_ref(), Expr::Attribute(a) if is_device_value(sem, func, &a.value, 0));
            if device_callee {
                Step::Done(Flow::Meets)
            } else {
                Step::Done(Flow::Host)
            }
        }
        Expr::Subscript(s) => {
            if std::ptr::eq(s.value.as_ref(), child) {
                Step::Up
            } else if is_device_value(sem, func, &s.value, 0) {
                // A host index into a device tensor.
                Step::Done(Flow::Meets)
            } else {
                Step::Done(Flow::Host)
            }
        }
        Expr::BinOp(b) => {
            let other = if std::ptr::eq(b.left.as_ref(), child) {
                &b.right
            } else {
                &b.left
            };
            if is_device_value(sem, func, other, 0) {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::Compare(c) => {
            let device = std::iter::once(c.left.as_ref())
                .chain(c.comparators.iter())
                .filter(|e| !std::ptr::eq(*e, child))
                .any(|e| is_device_value(sem, func, e, 0));
            if device {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::UnaryOp(_) | Expr::Starred(_) => Step::Up,
        Expr::IfExp(e) => {
            if std::ptr::eq(e.test.as_ref(), child) {
                Step::Done(Flow::Host)
            } else {
                Step::Up
            }
        }
        Expr::Tuple(t) => {
            if let Some(Node::Expr(Expr::Subscript(s))) = grand
                && std::ptr::eq(s.slice.as_ref(), parent)
            {
                // One index of a multi-dimensional index.
                return if is_device_value(sem, func, &s.value, 0) {
                    Step::Done(Flow::Meets)
                } else {
                    Step::Done(Flow::Host)
                };
            }
            let others = t.elts.iter().filter(|e| !std::ptr::eq(*e, child));
            if others.clone().any(|e| is_device_value(sem, func, e, 0)) {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::List(l) => {
            if l.elts
                .iter()
                .filter(|e| !std::ptr::eq(*e, child))
                .any(|e| is_device_value(sem, func, e, 0))
            {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        _ => Step::Done(Flow::Host),
    }
}

fn step_stmt(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    stmt: &Stmt,
    child: &Expr,
    depth: u32,
) -> Flow {
    match stmt {
        Stmt::Assign(a) if std::ptr::eq(a.value.as_ref(), child) => match a.targets.as_slice() {
            [Expr::Name(n)] => name_flow(sem, func, n.id.as_str(), stmt.end(), depth + 1),
            _ => Flow::Host,
        },
        Stmt::AnnAssign(a) if a.value.as_deref().is_some_and(|v| std::ptr::eq(v, child)) => {
            match a.target.as_ref() {
                Expr::Name(n) => name_flow(sem, func, n.id.as_str(), stmt.end(), depth + 1),
                _ => Flow::Host,
            }
        }
        Stmt::AugAssign(a) if std::ptr::eq(a.value.as_ref(), child) => {
            if is_device_value(sem, func, &a.target, 0) {
                Flow::Meets
            } else {
                Flow::Host
            }
        }
        _ => Flow::Host,
    }
}

/// Where the value bound to `name` at `after` flows: the first use, in source order, that
/// moves it or meets a device tensor decides. Uses after a rebinding that does not read
/// the name are another value.
pub fn name_flow(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    name: &str,
    after: TextSize,
    depth: u32,
) -> Flow {
    if depth > MAX_DEPTH {
        return Flow::Host;
    }
    let cutoff = func
        .assigned(name)
        .iter()
        .filter(|(at, v)| *at >= after && !reads(v, name))
        .map(|(at, _)| *at)
        .min();
    let uses = func
        .loads(name)
        .iter()
        .filter(|occ| occ.expr.start() >= after && cutoff.is_none_or(|c| occ.expr.start() < c));
    // In source order, the first use that moves it or meets a device tensor decides.
    for occ in uses {
        match classify(sem, func, occ, depth) {
            Flow::Host => {}
            decided => return decided,
        }
    }
    Flow::Host
}
