//! The tensor model: which names and expressions of a function hold tensors (torch factories
//! and ops, tensor methods, parameters annotated as tensors, model calls and their outputs),
//! which iterables walk a tensor's rows, and which sizes are a tensor's.

use super::Function;
use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, Stmt};

/// A tensor's size: `x.shape[k]`, `x.size(k)`, `x.size()[k]`, `len(tensor)`, or a local
/// name assigned from one (`B = x.shape[0]`, `b, s, _ = x.shape`).
pub fn is_tensor_size(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > 3 {
        return false;
    }
    match expr {
        Expr::Subscript(s) => is_shape(&s.value),
        Expr::Attribute(a) => a.attr.as_str() == "shape",
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => a.attr.as_str() == "size" && !is_self_attr(&a.value),
            Expr::Name(n) if n.id.as_str() == "len" => {
                c.args.first().is_some_and(|a| is_tensor_expr(sem, func, a))
            }
            _ => false,
        },
        Expr::Name(n) => {
            let values = func.assigned(n.id.as_str());
            !values.is_empty()
                && values
                    .iter()
                    .all(|(_, v)| is_tensor_size(sem, func, v, depth + 1))
        }
        _ => false,
    }
}

pub fn is_shape(expr: &Expr) -> bool {
    match expr {
        Expr::Attribute(a) => a.attr.as_str() == "shape",
        Expr::Call(c) => matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "size"),
        _ => false,
    }
}

pub fn is_self_attr(expr: &Expr) -> bool {
    match expr {
        Expr::Name(n) => n.id.as_str() == "self",
        Expr::Attribute(a) => is_self_attr(&a.value),
        _ => false,
    }
}

/// A name that holds a tensor: a parameter annotated `Tensor`, a local assigned from a torch
/// call or a tensor method (`.to`, `.float()`, …), or a local annotated `Tensor` where it is bound.
pub fn is_tensor_expr(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr) -> bool {
    is_tensor_name(sem, func, expr, 0)
}

/// [`is_tensor_expr`], following plain aliases (`total_ids = input_ids`) a few names deep.
pub fn is_tensor_name(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    let Expr::Name(n) = expr else {
        return false;
    };
    let name = n.id.as_str();
    if let Some(annotation) = func.param_annotation(name) {
        return is_tensor_annotation(annotation);
    }
    let values = func.assigned(name);
    if values.is_empty() && func.is_param(name) {
        return depth < 3 && param_holds_tensor(sem, func, name, depth);
    }
    values.iter().any(|(_, v)| {
        holds_tensor(sem, func, v, depth + 1)
            || (depth < 3
                && matches!(v, Expr::Name(alias) if alias.id.as_str() != name)
                && is_tensor_name(sem, func, v, depth + 1))
    }) || (!values.is_empty() && annotated_tensor(func, name))
}

/// A local annotated as a tensor where it is bound (`obs: torch.Tensor = to_torch(batch.obs)`).
pub fn annotated_tensor(func: &Function<'_>, name: &str) -> bool {
    let mut all = Vec::new();
    super::statements(func.body, &mut all);
    all.iter().any(|s| {
        matches!(s, Stmt::AnnAssign(a)
            if matches!(a.target.as_ref(), Expr::Name(t) if t.id.as_str() == name)
                && a.value.is_some()
                && is_tensor_annotation(&a.annotation))
    })
}

/// A tensor type: `torch.Tensor`, `LongTensor`, and the optional forms model code writes for
/// keyword inputs (`Optional[torch.Tensor]`, `Union[Tensor, None]`, `torch.Tensor | None`).
/// A union that admits a sequence (`list[Tensor] | Tensor`, `Union[Tensor, List[Tensor]]`) is
/// not: such code makes a list of the single tensor and walks the list.
pub fn is_tensor_annotation(annotation: &Expr) -> bool {
    if admits_sequence(annotation) {
        return false;
    }
    match union_members(annotation) {
        Some(members) => members.into_iter().any(is_tensor_annotation),
        None => crate::semantic::dotted(annotation).ends_with("Tensor"),
    }
}

/// The members of a union annotation: `Optional[T]`, `Union[A, B]`, `A | B`.
fn union_members(annotation: &Expr) -> Option<Vec<&Expr>> {
    match annotation {
        Expr::Subscript(s)
            if matches!(
                crate::semantic::dotted(&s.value).rsplit('.').next(),
                Some("Optional" | "Union")
            ) =>
        {
            Some(match s.slice.as_ref() {
                Expr::Tuple(t) => t.elts.iter().collect(),
                one => vec![one],
            })
        }
        Expr::BinOp(b) if matches!(b.op, ast::Operator::BitOr) => Some(vec![&b.left, &b.right]),
        _ => None,
    }
}

/// A union annotation with a sequence member: `list[Tensor] | Tensor`, `Union[Tensor, Sequence[Tensor]]`.
fn admits_sequence(annotation: &Expr) -> bool {
    let sequence = |e: &Expr| {
        let base = match e {
            Expr::Subscript(s) => s.value.as_ref(),
            other => other,
        };
        matches!(
            crate::semantic::dotted(base).rsplit('.').next(),
            Some("list" | "List" | "tuple" | "Tuple" | "Sequence" | "Iterable")
        )
    };
    union_members(annotation)
        .is_some_and(|members| members.iter().any(|m| sequence(m) || admits_sequence(m)))
}

/// A local bound to a list comprehension that takes one tensor from each row of a batch
/// (`ids = [row[keep] for row, keep in zip(input_ids, mask)]`): the batch's samples, one
/// tensor each.
pub fn is_rows_comprehension(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> bool {
    func.assigned(name).iter().any(|(_, v)| {
        matches!(v, Expr::ListComp(c)
            if matches!(c.elt.as_ref(), Expr::Subscript(_) | Expr::Call(_))
                && c.generators.first().is_some_and(|g| iterates_rows(sem, func, &g.iter)))
    })
}

/// `iter` walks the rows of a tensor, directly or through `enumerate`/`zip`.
pub fn iterates_rows(sem: &Semantic<'_>, func: &Function<'_>, iter: &Expr) -> bool {
    if let Expr::Call(c) = iter
        && matches!(super::last_name_of(&c.func), "enumerate" | "zip")
    {
        return c.args.iter().any(|a| iterates_rows(sem, func, a));
    }
    iterates_tensor(sem, func, iter)
}

/// Tensor methods that return a tensor of the same rows (or a reshaped view of them).
pub const TENSOR_METHODS: &[&str] = &[
    "to",
    "float",
    "detach",
    "clone",
    "contiguous",
    "cuda",
    "npu",
    "view",
    "reshape",
    "permute",
    "transpose",
    "flatten",
    "squeeze",
    "unsqueeze",
    "expand",
    "expand_as",
    "gather",
    "index_select",
    "masked_fill",
    "type_as",
    "repeat_interleave",
    "flip",
    "roll",
    "long",
    "half",
    "bfloat16",
    "softmax",
    "log_softmax",
    "sqrt",
    "sum",
    "cumsum",
    "argmax",
    "argmin",
    "nonzero",
    "masked_select",
    "abs",
    "sigmoid",
    "clamp",
    "new_zeros",
    "new_ones",
    "new_full",
];

pub fn is_tensor_value(sem: &Semantic<'_>, value: &Expr) -> bool {
    // `x.topk(k).indices`, `x.max(-1).values`
    if let Expr::Attribute(a) = value
        && matches!(a.attr.as_str(), "indices" | "values")
        && matches!(a.value.as_ref(), Expr::Call(c) if matches!(super::last_name_of(&c.func),
            "topk" | "sort" | "max" | "min" | "kthvalue" | "mode" | "median"))
    {
        return true;
    }
    let Expr::Call(c) = value else {
        return false;
    };
    if let Some(q) = sem.resolve(&c.func) {
        if q.starts_with("einops.") {
            return matches!(
                q.as_str(),
                "einops.rearrange" | "einops.repeat" | "einops.reduce" | "einops.einsum"
            );
        }
        // Pipes, process groups and per-parameter gradient tuples are not tensors.
        return q.starts_with("torch.")
            && ![
                "torch.nn",
                "torch.utils",
                "torch.multiprocessing",
                "torch.distributed",
                "torch.cuda",
                "torch.autograd",
            ]
            .iter()
            .any(|p| q.starts_with(p));
    }
    matches!(c.func.as_ref(), Expr::Attribute(a) if TENSOR_METHODS.contains(&a.attr.as_str()))
}

/// `for row in x` over a tensor, or over `x.unbind(...)` / `torch.unbind(x, ...)`.
pub fn iterates_tensor(sem: &Semantic<'_>, func: &Function<'_>, iter: &Expr) -> bool {
    match iter {
        Expr::Name(n) => is_tensor_expr(sem, func, iter) && !is_pieces(func, n.id.as_str()),
        Expr::Call(c) => {
            if sem.resolve(&c.func).is_some_and(|q| q == "torch.unbind") {
                return true;
            }
            matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "unbind" && is_tensor_expr(sem, func, &a.value))
        }
        _ => false,
    }
}

/// A name bound to the pieces of `split`/`chunk`/`tensor_split` (a few chunks or heads, not
/// the rows of a batch); a split by the lengths of a `.tolist()` gives the samples.
pub fn is_pieces(func: &Function<'_>, name: &str) -> bool {
    func.assigned(name).iter().any(|(_, v)| {
        matches!(v, Expr::Call(c)
            if matches!(super::last_name_of(&c.func), "split" | "chunk" | "tensor_split")
                && !c.args.first().is_some_and(|a| matches!(a, Expr::Call(t)
                    if super::last_name_of(&t.func) == "tolist")))
    })
}

/// A local name bound to a list, dict or comprehension literal.
pub fn is_local_container(func: &Function<'_>, name: &str) -> bool {
    let values = func.assigned(name);
    values.iter().any(|(_, v)| {
        matches!(
            v,
            Expr::List(_) | Expr::Dict(_) | Expr::ListComp(_) | Expr::DictComp(_) | Expr::Set(_)
        )
    })
}

/// Attributes of a model's output that hold tensors (`out.logits`, `out.hidden_states[-1]`).
pub const OUTPUT_ATTRS: &[&str] = &[
    "logits",
    "hidden_states",
    "last_hidden_state",
    "pooler_output",
    "attentions",
    "encoder_last_hidden_state",
    "image_embeds",
    "text_embeds",
    "embeddings",
    "indices",
    "values",
];

/// Attributes that only a model's output has, whatever it is bound to (`out.logits` of a
/// parameter `out`).
const STRONG_OUTPUT_ATTRS: &[&str] = &[
    "logits",
    "hidden_states",
    "last_hidden_state",
    "pooler_output",
    "encoder_last_hidden_state",
];

/// A parameter without annotation that holds a tensor by its default (`mask=torch.ones(4)`)
/// or by what the callers in its class pass (the per-function summary of a method: every
/// `self.method(...)` call hands it a tensor).
fn param_holds_tensor(sem: &Semantic<'_>, func: &Function<'_>, name: &str, depth: u32) -> bool {
    if func
        .param_default(name)
        .is_some_and(|d| is_tensor_value(sem, d))
    {
        return true;
    }
    let (Some(pos), Some(_)) = (func.param_position(name), func.class_body()) else {
        return false;
    };
    func.fed_param(name, || {
        let mut fed = false;
        for caller in func.sibling_methods() {
            let calls = super::find(caller.body, |e| {
                matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
                    if a.attr.as_str() == func.name
                        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")))
            });
            for occ in calls {
                let Expr::Call(c) = occ.expr else { continue };
                let arg = c
                    .keywords
                    .iter()
                    .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
                    .map(|k| &k.value)
                    .or_else(|| c.args.get(pos.checked_sub(1)?));
                match arg {
                    Some(a) if holds_tensor(sem, &caller, a, depth + 2) => fed = true,
                    _ => return false,
                }
            }
        }
        fed
    })
}

/// `value` holds a tensor (or a model's output of tensors): a torch call or a tensor method
/// ([`is_tensor_value`]), a call of a submodule of `self` or of a local model instance, an
/// output attribute or key of such a value, a subscript of a tensor (`out.hidden_states[-1][:,
/// a:b]`), or a name bound to one of those.
pub fn holds_tensor(sem: &Semantic<'_>, func: &Function<'_>, value: &Expr, depth: u32) -> bool {
    if depth > 4 {
        return false;
    }
    if is_tensor_value(sem, value) {
        return true;
    }
    match value {
        Expr::Call(c) => {
            is_model_call(sem, func, &c.func)
                || matches!(c.func.as_ref(), Expr::Attribute(a)
                    if TENSOR_METHODS.contains(&a.attr.as_str())
                        && holds_tensor(sem, func, &a.value, depth + 1))
        }
        Expr::Attribute(a) => {
            (STRONG_OUTPUT_ATTRS.contains(&a.attr.as_str()) && !is_self_attr(&a.value))
                || (OUTPUT_ATTRS.contains(&a.attr.as_str())
                    && holds_tensor(sem, func, &a.value, depth + 1))
        }
        Expr::Subscript(s) => holds_tensor(sem, func, &s.value, depth + 1),
        Expr::Name(_) => is_tensor_name(sem, func, value, depth + 1),
        // Elementwise masks and arithmetic with a tensor operand are tensors
        // (`(pc[..., 0] < lo) | torch.isnan(pc[..., 0])`, `~mask`).
        Expr::BinOp(b) if is_elementwise(b.op) => {
            holds_tensor(sem, func, &b.left, depth + 1)
                || holds_tensor(sem, func, &b.right, depth + 1)
        }
        Expr::UnaryOp(u) if matches!(u.op, ast::UnaryOp::Invert | ast::UnaryOp::USub) => {
            holds_tensor(sem, func, &u.operand, depth + 1)
        }
        _ => false,
    }
}

/// Operators that keep a tensor operand's shape: masks and arithmetic.
fn is_elementwise(op: ast::Operator) -> bool {
    matches!(
        op,
        ast::Operator::BitOr
            | ast::Operator::BitAnd
            | ast::Operator::BitXor
            | ast::Operator::Add
            | ast::Operator::Sub
            | ast::Operator::Mult
            | ast::Operator::Div
    )
}

/// A call of a model: a submodule of `self` (`self.encoder(x)`), or a local bound to an
/// instance of one of the project's `nn.Module` classes or of a `torch.nn` class
/// (`enc = Encoder(cfg)`, then `enc(x)`). Tokenizers and processors return host data.
fn is_model_call(sem: &Semantic<'_>, func: &Function<'_>, callee: &Expr) -> bool {
    let host = |name: &str| {
        let lower = name.to_ascii_lowercase();
        [
            "token",
            "process",
            "transform",
            "augment",
            "collat",
            "logger",
            "writer",
        ]
        .iter()
        .any(|w| lower.contains(w))
    };
    match callee {
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
            !host(a.attr.as_str()) && func.self_tensors(sem).contains(&a.attr.as_str())
        }
        Expr::Name(n) if !host(n.id.as_str()) => {
            func.assigned(n.id.as_str()).iter().any(|(_, v)| {
                let Expr::Call(c) = v else { return false };
                let class = super::last_name_of(&c.func);
                sem.project_modules().is_some_and(|m| m.contains(class))
                    || sem.resolves_with_prefix(&c.func, "torch.nn.")
            })
        }
        _ => false,
    }
}
