//! Whether a value is a host number, host data or a device tensor.

use super::{Function, find_in_expr, is_self_attr};
use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, ExprContext, Stmt};

pub(super) const MAX_DEPTH: u32 = 4;

/// Attributes and methods whose result lives on the host.
pub(super) const HOST: &[&str] = &[
    "tolist",
    "item",
    "numpy",
    "shape",
    "size",
    "dim",
    "ndim",
    "numel",
    "dtype",
    "device",
    "is_cuda",
    "cpu",
    "data_ptr",
    "element_size",
    "nelement",
    "ndimension",
];

/// Calls that only read or store a value on the host.
pub(super) const HOST_CALLS: &[&str] = &[
    "len",
    "list",
    "tuple",
    "int",
    "float",
    "bool",
    "str",
    "print",
    "range",
    "enumerate",
    "zip",
    "sorted",
    "isinstance",
    "repr",
    "format",
    "hash",
    "id",
    "type",
    "dict",
    "set",
    "iter",
    "next",
    "append",
    "extend",
    "insert",
    "log",
    "log_dict",
    "info",
    "debug",
    "warning",
    "warn",
    "add_scalar",
    "add_histogram",
    "manual_seed",
    "save",
];

/// A Python number (not a tensor): constants, sizes (`x.shape[0]`, `x.size(1)`, `len(x)`),
/// `math.*`, arithmetic of those, and local names only ever assigned such values.
pub fn is_host_scalar(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match expr {
        Expr::Constant(c) => !matches!(c.value, ast::Constant::Str(_) | ast::Constant::Bytes(_)),
        Expr::UnaryOp(u) => is_host_scalar(sem, func, &u.operand, depth + 1),
        Expr::BinOp(b) => {
            is_host_scalar(sem, func, &b.left, depth + 1)
                && is_host_scalar(sem, func, &b.right, depth + 1)
        }
        Expr::Attribute(a) => {
            // Sizes, and configuration values such as `self.config.hidden_size`.
            matches!(a.attr.as_str(), "ndim" | "shape") || is_config_path(expr)
        }
        Expr::Subscript(s) => is_size(&s.value),
        Expr::Call(c) => {
            if let Some(q) = sem.resolve(&c.func) {
                return q.starts_with("math.");
            }
            match c.func.as_ref() {
                Expr::Name(n) => matches!(
                    n.id.as_str(),
                    "len" | "int" | "float" | "round" | "abs" | "min" | "max" | "bool"
                ),
                Expr::Attribute(a) => {
                    matches!(
                        a.attr.as_str(),
                        "size" | "dim" | "numel" | "item" | "ndimension"
                    )
                }
                _ => false,
            }
        }
        Expr::Name(n) => {
            let name = n.id.as_str();
            if let Some(annotation) = func.param_annotation(name) {
                return matches!(annotation, Expr::Name(t) if matches!(t.id.as_str(), "int" | "float" | "bool"));
            }
            if func.is_param(name) {
                return false;
            }
            if func.is_range_loop_var(name) {
                return true;
            }
            if let Some(known) = func.cache.host_names.borrow().get(name) {
                return *known;
            }
            func.cache
                .host_names
                .borrow_mut()
                .insert(name.to_owned(), false);
            let values = func.assigned(name);
            let host = !values.is_empty()
                && values
                    .iter()
                    .all(|(_, v)| is_host_scalar(sem, func, v, depth + 1));
            func.cache
                .host_names
                .borrow_mut()
                .insert(name.to_owned(), host);
            host
        }
        _ => false,
    }
}

/// `x.shape`, `x.size()`.
fn is_size(expr: &Expr) -> bool {
    match expr {
        Expr::Attribute(a) => a.attr.as_str() == "shape",
        Expr::Call(c) => {
            matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "size")
        }
        _ => false,
    }
}

/// A value computed on the host: a numpy call, `.numpy()`/`.tolist()`, or a local name
/// assigned (or appended) such a value.
pub fn derives_from_host(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let mut found = false;
    let mut names: Vec<&str> = Vec::new();
    for occ in find_in_expr(expr) {
        match occ {
            Expr::Call(c) => {
                if sem
                    .resolve(&c.func)
                    .is_some_and(|q| q == "numpy" || q.starts_with("numpy."))
                {
                    found = true;
                }
                if let Expr::Attribute(a) = c.func.as_ref()
                    && matches!(a.attr.as_str(), "numpy" | "tolist")
                {
                    found = true;
                }
                if is_host_library_call(sem, &c.func) {
                    found = true;
                }
            }
            Expr::Name(n) if matches!(n.ctx, ExprContext::Load) => names.push(n.id.as_str()),
            _ => {}
        }
    }
    if found {
        return true;
    }
    names.iter().any(|name| {
        if let Some(known) = func.cache.host_derived.borrow().get(*name) {
            return *known;
        }
        func.cache
            .host_derived
            .borrow_mut()
            .insert((*name).to_owned(), false);
        let derived = func
            .assigned(name)
            .iter()
            .any(|(_, v)| derives_from_host(sem, func, v, depth + 1));
        func.cache
            .host_derived
            .borrow_mut()
            .insert((*name).to_owned(), derived);
        derived
    })
}

/// A call that computes on the host outside numpy: a `to_numpy(...)` helper, or a scipy,
/// scikit-learn or numba function (`linear_sum_assignment`, a `NearestNeighbors` query).
fn is_host_library_call(sem: &Semantic<'_>, callee: &Expr) -> bool {
    let last = match callee {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        _ => "",
    };
    last == "to_numpy"
        || ["scipy.", "sklearn.", "numba."]
            .iter()
            .any(|p| sem.resolves_with_prefix(callee, p))
}

/// Attributes and methods of tensors: a parameter used with one of these is a tensor.
pub(super) const TENSOR_ATTRS: &[&str] = &[
    "shape",
    "device",
    "dtype",
    "size",
    "view",
    "reshape",
    "to",
    "float",
    "half",
    "long",
    "unsqueeze",
    "squeeze",
    "permute",
    "transpose",
    "flatten",
    "contiguous",
    "detach",
    "clone",
    "expand",
    "masked_fill",
    "sum",
    "mean",
    "softmax",
    "repeat",
    "type_as",
    "new_zeros",
    "new_ones",
    "chunk",
    "split",
    "unbind",
];

/// Names that hold configuration, not tensors.
const CONFIG_NAMES: &[&str] = &[
    "self", "cls", "config", "cfg", "args", "kwargs", "hparams", "opt", "conf",
];

/// Plausibly a tensor on the device: an input of the function used as a tensor, a parameter,
/// buffer or submodule output of `self`, or anything computed from those. Host factories,
/// Python numbers and configuration are not.
pub fn is_device_value(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    // Deeper than the other questions: a value passes through many local names, and the
    // per-name memo keeps the cost linear.
    if depth > 4 * MAX_DEPTH {
        return false;
    }
    let next = depth + 1;
    match expr {
        Expr::Name(n) => {
            let name = n.id.as_str();
            if CONFIG_NAMES.contains(&name) {
                return false;
            }
            if let Some(annotation) = func.param_annotation(name) {
                let text = crate::semantic::dotted(annotation);
                // Inside a subscript too: `Optional[Tensor]`, `Tuple[Tensor, Tensor]`.
                let holds_tensor = find_in_expr(annotation).iter().any(|e| match e {
                    Expr::Name(n) => n.id.as_str().contains("Tensor"),
                    Expr::Attribute(a) => a.attr.as_str().contains("Tensor"),
                    Expr::Constant(c) => {
                        matches!(&c.value, ast::Constant::Str(s) if s.contains("Tensor"))
                    }
                    _ => false,
                });
                return holds_tensor || text == "dict" || text == "Dict";
            }
            if func.is_param(name) {
                return func.param_used_as_tensor(name);
            }
            if let Some(known) = func.cache.device_names.borrow().get(name) {
                return *known;
            }
            func.cache
                .device_names
                .borrow_mut()
                .insert(name.to_owned(), false);
            let device = func
                .assigned(name)
                .iter()
                .any(|(_, v)| is_device_value(sem, func, v, next));
            func.cache
                .device_names
                .borrow_mut()
                .insert(name.to_owned(), device);
            device
        }
        Expr::Attribute(a) => {
            if matches!(
                a.attr.as_str(),
                "shape" | "device" | "dtype" | "ndim" | "is_cuda" | "training"
            ) {
                return false;
            }
            match a.value.as_ref() {
                Expr::Name(n) if n.id.as_str() == "self" => {
                    func.self_tensors(sem).contains(&a.attr.as_str())
                }
                Expr::Attribute(inner) if is_self_attr(&inner.value) => {
                    matches!(a.attr.as_str(), "weight" | "bias")
                }
                _ => sem.resolve(expr).is_none() && is_device_value(sem, func, &a.value, next),
            }
        }
        Expr::Subscript(s) => is_device_value(sem, func, &s.value, next),
        Expr::Call(c) => {
            let mut args = c.args.iter().chain(c.keywords.iter().map(|k| &k.value));
            if let Some(q) = sem.resolve(&c.func) {
                if !q.starts_with("torch.") {
                    return false;
                }
                let device_kw = c
                    .keywords
                    .iter()
                    .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"));
                return device_kw || args.any(|a| is_device_value(sem, func, a, next));
            }
            if is_submodule(sem, func, &c.func) {
                return true;
            }
            match c.func.as_ref() {
                Expr::Name(n) if HOST_CALLS.contains(&n.id.as_str()) => false,
                // A method of the model computes from its tensor arguments.
                Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
                    !HOST_CALLS.contains(&a.attr.as_str())
                        && args.any(|arg| is_device_value(sem, func, arg, next))
                }
                Expr::Attribute(a) => {
                    !HOST.contains(&a.attr.as_str())
                        && !HOST_CALLS.contains(&a.attr.as_str())
                        && is_device_value(sem, func, &a.value, next)
                }
                _ => args.any(|a| is_device_value(sem, func, a, next)),
            }
        }
        Expr::BinOp(b) => {
            is_device_value(sem, func, &b.left, next) || is_device_value(sem, func, &b.right, next)
        }
        Expr::UnaryOp(u) => is_device_value(sem, func, &u.operand, next),
        Expr::IfExp(e) => {
            is_device_value(sem, func, &e.body, next) || is_device_value(sem, func, &e.orelse, next)
        }
        Expr::List(l) => l.elts.iter().any(|e| is_device_value(sem, func, e, next)),
        Expr::Tuple(t) => t.elts.iter().any(|e| is_device_value(sem, func, e, next)),
        _ => false,
    }
}

/// `self.<name>` where the class binds `<name>` to a torch module or tensor.
pub(super) fn is_submodule(sem: &Semantic<'_>, func: &Function<'_>, callee: &Expr) -> bool {
    matches!(callee, Expr::Attribute(a)
        if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
            && func.self_tensors(sem).contains(&a.attr.as_str()))
}

/// An attribute path through a configuration object: `self.config.hidden_size`, `cfg.dim`.
fn is_config_path(expr: &Expr) -> bool {
    match expr {
        Expr::Attribute(a) => {
            CONFIG_NAMES[2..].contains(&a.attr.as_str()) || is_config_path(&a.value)
        }
        Expr::Name(n) => CONFIG_NAMES[2..].contains(&n.id.as_str()),
        _ => false,
    }
}

/// A list, tuple or comprehension literal, a local name bound to one, or a parameter annotated
/// as a Python sequence (`weights: List`, `ids: list[int]`).
pub fn is_sequence_literal(func: &Function<'_>, expr: &Expr) -> bool {
    match expr {
        Expr::List(_) | Expr::Tuple(_) | Expr::ListComp(_) => true,
        Expr::Name(n) => {
            let values = func.assigned(n.id.as_str());
            let annotated = func.param_annotation(n.id.as_str()).is_some_and(|a| {
                matches!(
                    super::last_name_of(a),
                    "List" | "list" | "Sequence" | "Tuple" | "tuple"
                )
            });
            annotated
                || values
                    .iter()
                    .any(|(_, v)| matches!(v, Expr::List(_) | Expr::Tuple(_) | Expr::ListComp(_)))
        }
        _ => false,
    }
}

/// `self.<attr>` assignments in every method of `class_body`: the value and the method that
/// assigns it (whose local names the value reads).
pub fn self_attr_values<'a>(class_body: &'a [Stmt], attr: &str) -> Vec<(&'a Expr, Function<'a>)> {
    let mut out = Vec::new();
    for stmt in class_body {
        let Some(method) = Function::new(stmt) else {
            continue;
        };
        let mut all = Vec::new();
        super::statements(method.body, &mut all);
        for s in all {
            let (targets, value): (&[Expr], &Expr) = match s {
                Stmt::Assign(a) => (&a.targets, &a.value),
                Stmt::AnnAssign(a) => match &a.value {
                    Some(v) => (std::slice::from_ref(a.target.as_ref()), v),
                    None => continue,
                },
                _ => continue,
            };
            if targets.iter().any(|t| is_self_attr_named(t, attr))
                && let Some(func) = Function::new(stmt)
            {
                out.push((value, func));
            }
        }
    }
    out
}

/// `self.<attr>`.
fn is_self_attr_named(expr: &Expr, attr: &str) -> bool {
    matches!(expr, Expr::Attribute(a) if a.attr.as_str() == attr
        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self"))
}
