//! What a loop or comprehension of training code walks, and the per-element shapes judged on
//! it: `.item()` per element, comprehensions over the rows of a tensor, `any(...)` over tensor
//! conditions, and tensors built from lists of device scalars.

use super::{
    is_recurrent, is_self_attr, is_tensor_expr, is_tensor_size, iterates_tensor, names_of,
};
use crate::analysis::tensors;
use crate::analysis::{self, Function, Node};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};

/// What an iterable walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// The rows of a device tensor (`x`, `x.unbind()`, `x.split(lens.tolist())`, `x[:, 0]`,
    /// and `zip`/`enumerate` of those).
    Rows,
    /// Host values pulled from a tensor (`lens.tolist()`, `x.cpu().numpy()`, a name bound to one).
    HostValues,
    /// Something small fixed by the model or the config (layers, heads, cameras, dict
    /// entries), the data loader, or a schedule: never per element.
    Fixed,
    /// `range(...)`, or anything else.
    Other,
}

/// Names of iterables that are small and fixed, or sequential by nature.
const FIXED_WORDS: &[&str] = &[
    "layer",
    "head",
    "block",
    "camera",
    "cams",
    "image",
    "frame",
    "critic",
    "expert",
    "axis",
    "axes",
    "level",
    "scale",
    "crop",
    "stage",
    "loader",
    "epoch",
    "timestep",
    "sigma",
    "horizon",
    "env",
    "schedule",
    "step",
    "module",
    "param",
    "quantizer",
    "chunk",
    "factor",
    "batches",
    "minibatch",
    "mini_batch",
    "grad",
    "split",
    "pipe",
    "queue",
];

/// Methods whose result is a view of a container of modules, parameters or dict entries.
const FIXED_METHODS: &[&str] = &[
    "items",
    "keys",
    "values",
    "parameters",
    "named_parameters",
    "modules",
    "named_modules",
    "children",
    "named_children",
    "buffers",
    "named_buffers",
];

/// What `iter` walks.
pub(super) fn walks(sem: &Semantic<'_>, func: &Function<'_>, iter: &Expr) -> Walk {
    if is_fixed(iter) {
        return Walk::Fixed;
    }
    match iter {
        Expr::Call(c) => {
            let name = analysis::last_name_of(c.func.as_ref());
            if matches!(name, "enumerate" | "reversed" | "list" | "tuple") {
                return c.args.first().map_or(Walk::Other, |a| walks(sem, func, a));
            }
            // `zip`, `zip_longest`, `_zip_strict`.
            if name.contains("zip") {
                let all: Vec<Walk> = c.args.iter().map(|a| walks(sem, func, a)).collect();
                return [Walk::Fixed, Walk::Rows, Walk::HostValues]
                    .into_iter()
                    .find(|w| all.contains(w))
                    .unwrap_or(Walk::Other);
            }
            let Expr::Attribute(a) = c.func.as_ref() else {
                return Walk::Other;
            };
            match name {
                "tolist" | "numpy" if !is_self_attr(&a.value) => Walk::HostValues,
                "unbind" => Walk::Rows,
                "split" if c.args.first().is_some_and(|arg| spells_tolist(func, arg)) => Walk::Rows,
                "split" if splits_by_one(c, false) => Walk::Rows,
                _ if sem.resolves_to(&c.func, "torch.unbind") => Walk::Rows,
                _ if sem.resolves_to(&c.func, "torch.split") && splits_by_one(c, true) => {
                    Walk::Rows
                }
                // `for row in enc(x)["indices"].squeeze():` walks the rows of a model's output.
                _ if matches!(
                    name,
                    "squeeze" | "flatten" | "view" | "reshape" | "detach" | "long"
                ) && !matches!(a.value.as_ref(), Expr::Name(_))
                    && tensors::holds_tensor(sem, func, &a.value, 0) =>
                {
                    Walk::Rows
                }
                _ => Walk::Other,
            }
        }
        // The per-layer tuple of a model's output, sliced, walks layers.
        Expr::Subscript(s)
            if matches!(s.slice.as_ref(), Expr::Slice(_))
                && matches!(s.value.as_ref(), Expr::Attribute(a)
                    if matches!(a.attr.as_str(), "hidden_states" | "attentions")) =>
        {
            Walk::Fixed
        }
        Expr::Subscript(s)
            if is_tensor_expr(sem, func, &s.value)
                || tensors::holds_tensor(sem, func, &s.value, 0) =>
        {
            Walk::Rows
        }
        // One entry per process of a collective (`[torch.empty(1) for _ in range(world)]`
        // handed to `all_gather`): its length is the world size, not a batch dimension.
        Expr::Name(n) if per_rank_list(sem, func, n.id.as_str()) => Walk::Fixed,
        Expr::Name(n) => {
            // Pieces of a split, or a list of per-head results later stacked into a tensor.
            if super::is_rows_comprehension(sem, func, n.id.as_str())
                || appended_per_sample(sem, func, n.id.as_str())
            {
                Walk::Rows
            } else if super::is_pieces(func, n.id.as_str())
                || super::is_local_container(func, n.id.as_str())
            {
                Walk::Other
            } else if iterates_tensor(sem, func, iter) || bound_to_rows(func, n.id.as_str()) {
                Walk::Rows
            } else if func
                .assigned(n.id.as_str())
                .iter()
                .any(|(_, v)| spells_tolist(func, v) && !matches!(v, Expr::ListComp(_)))
            {
                Walk::HostValues
            } else {
                Walk::Other
            }
        }
        _ => Walk::Other,
    }
}

/// `x.split(1)` or `torch.split(x, 1)` (`function`) along the batch dimension: pieces of
/// one sample each, the rows of `x`.
fn splits_by_one(c: &crate::source::ast::ExprCall, function: bool) -> bool {
    let skip = usize::from(function);
    let is_int = |e: &Expr, want: i64| {
        matches!(e, Expr::Constant(k)
            if matches!(&k.value, crate::source::ast::Constant::Int(i) if *i == want.into()))
    };
    let size_one = c.args.get(skip).is_some_and(|a| is_int(a, 1))
        || c.keywords.iter().any(|k| {
            k.arg
                .as_ref()
                .is_some_and(|a| a.as_str() == "split_size_or_sections")
                && is_int(&k.value, 1)
        });
    let dim = c.args.get(skip + 1).or_else(|| {
        c.keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "dim"))
            .map(|k| &k.value)
    });
    size_one && dim.is_none_or(|d| is_int(d, 0))
}

/// A local list built by a comprehension over `range(n)` where `n` is the size of a
/// process group (`n = dist.get_world_size(group)`): one entry per rank.
fn per_rank_list(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> bool {
    func.assigned(name).iter().any(|(_, v)| {
        let Expr::ListComp(c) = v else { return false };
        let Some(Expr::Call(range)) = c.generators.first().map(|g| &g.iter) else {
            return false;
        };
        analysis::last_name_of(range.func.as_ref()) == "range"
            && range.args.len() == 1
            && match &range.args[0] {
                Expr::Call(call) => sem.resolves_with_prefix(&call.func, "torch.distributed."),
                Expr::Name(bound) => func.assigned(bound.id.as_str()).iter().any(|(_, b)| {
                    matches!(b, Expr::Call(call)
                        if sem.resolves_with_prefix(&call.func, "torch.distributed."))
                }),
                _ => false,
            }
    })
}

/// A local list filled with one entry per sample: `out.append(...)` inside a loop over the rows
/// of a batch tensor (`for ids in input_ids: … new_embeds.append(torch.cat(...))`), so a later
/// loop over it walks the samples again.
fn appended_per_sample(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> bool {
    if !super::is_local_container(func, name) {
        return false;
    }
    let mut all = Vec::new();
    analysis::statements(func.body, &mut all);
    all.iter().any(|stmt| {
        let Stmt::For(f) = stmt else { return false };
        let over_itself = analysis::reads(&f.iter, name);
        !over_itself
            && !analysis::find(&f.body, |e| {
                matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
                    if a.attr.as_str() == "append"
                        && matches!(a.value.as_ref(), Expr::Name(l) if l.id.as_str() == name)))
            })
            .is_empty()
            && walks_rows_directly(sem, func, &f.iter)
    })
}

/// [`walks`] says `Rows` without following appended lists (which would recurse).
fn walks_rows_directly(sem: &Semantic<'_>, func: &Function<'_>, iter: &Expr) -> bool {
    match iter {
        Expr::Call(c) => {
            let name = analysis::last_name_of(c.func.as_ref());
            if matches!(name, "enumerate" | "zip") {
                return c.args.iter().any(|a| walks_rows_directly(sem, func, a));
            }
            false
        }
        Expr::Name(n) => {
            super::is_rows_comprehension(sem, func, n.id.as_str())
                || (!is_fixed(iter)
                    && !super::is_pieces(func, n.id.as_str())
                    && !super::is_local_container(func, n.id.as_str())
                    && iterates_tensor(sem, func, iter))
        }
        _ => false,
    }
}

/// A local bound to the samples of a tensor: `x.unbind()` (along the batch) or
/// `x.split(lens.tolist())` (`indices = flat[mask].split(num_tokens.tolist())`, then
/// `for one in indices:`). `x.unbind(time_dim)` walks another axis, often in order.
fn bound_to_rows(func: &Function<'_>, name: &str) -> bool {
    func.assigned(name).iter().any(|(_, v)| {
        matches!(v, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
            if (a.attr.as_str() == "unbind" && unbinds_dim0(c))
                || (a.attr.as_str() == "split"
                    && c.args.first().is_some_and(|arg| spells_tolist(func, arg)))))
    })
}

/// `x.unbind()`, `x.unbind(0)` or `x.unbind(dim=0)`.
fn unbinds_dim0(c: &ast::ExprCall) -> bool {
    let zero = |e: &Expr| matches!(e, Expr::Constant(k) if matches!(&k.value, ast::Constant::Int(n) if *n == 0.into()));
    match (c.args.first(), c.keywords.first()) {
        (None, None) => true,
        (Some(a), _) => zero(a),
        (None, Some(k)) => zero(&k.value),
    }
}

/// `iter` pulls the rows of a tensor to the host itself (`x.cpu().numpy()`), rather than a few
/// sizes (`lens.tolist()`).
pub(super) fn pulled_rows(iter: &Expr) -> bool {
    matches!(iter, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "numpy"))
}

/// `expr` is a `.tolist()` call, or a local name assigned one.
fn spells_tolist(func: &Function<'_>, expr: &Expr) -> bool {
    let is_tolist = |e: &Expr| matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "tolist"));
    match expr {
        Expr::Name(n) => func
            .assigned(n.id.as_str())
            .iter()
            .any(|(_, v)| is_tolist(v)),
        _ => is_tolist(expr),
    }
}

/// An iterable fixed by the model or the config, a loader or a schedule: one that reads a
/// `self` attribute as the thing iterated, a dict or module view, a `range` of a constant or
/// of a `self`/config attribute, a torch factory without `device=` (a host tensor), or a name
/// that says what it holds.
fn is_fixed(iter: &Expr) -> bool {
    match iter {
        Expr::Attribute(_) if is_self_attr(iter) => true,
        Expr::Call(c) => {
            let name = analysis::last_name_of(c.func.as_ref());
            if FIXED_METHODS.contains(&name) {
                return true;
            }
            // One sample per piece: [`walks`] decides.
            if name == "split" && (splits_by_one(c, false) || splits_by_one(c, true)) {
                return false;
            }
            if let Expr::Attribute(a) = c.func.as_ref()
                && is_self_attr(&a.value)
                && !matches!(name, "unbind" | "tolist" | "split")
            {
                return true;
            }
            if name == "range" {
                return c.args.iter().all(|a| {
                    matches!(a, Expr::Constant(_))
                        || is_self_attr(a)
                        || matches!(a, Expr::Call(l) if matches!(l.func.as_ref(), Expr::Name(n) if n.id.as_str() == "len")
                            && l.args.first().is_some_and(is_self_attr))
                }) || c.args.iter().any(named_fixed);
            }
            let host_factory = matches!(name, "linspace" | "arange" | "logspace" | "tensor")
                && !c
                    .keywords
                    .iter()
                    .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"));
            host_factory || c.args.iter().any(is_fixed) || named_fixed(iter)
        }
        _ => named_fixed(iter),
    }
}

/// The last name of `expr` (or of the callee) says it holds layers, heads, cameras, a loader,
/// a schedule and the like.
pub(super) fn named_fixed(expr: &Expr) -> bool {
    // Names and keys of metrics or batch entries (`metric_names`, `cu_keys`, `loss_stats`):
    // one iteration per name, a set the code fixes, not the elements of a tensor.
    const KEY_WORDS: &[&str] = &["names", "keys", "metrics", "stats"];
    let text = crate::semantic::dotted(expr).to_ascii_lowercase();
    let last = text.rsplit('.').next().unwrap_or(&text);
    FIXED_WORDS.iter().any(|w| last.contains(w)) || last.split('_').any(|w| KEY_WORDS.contains(&w))
}

/// A loop bound named after the batch: `bs`, `bsz`, `batch_size`, `num_samples`, …
pub(super) fn is_batch_count(bound: &Expr) -> bool {
    const NAMES: &[&str] = &[
        "b",
        "bs",
        "bsz",
        "batch",
        "batchsize",
        "nbatch",
        "n_batch",
        "num_batch",
        "n_samples",
        "num_samples",
        "n_seqs",
        "num_seqs",
        "num_sequences",
    ];
    let text = match bound {
        Expr::Name(n) => n.id.as_str().to_ascii_lowercase(),
        Expr::Attribute(a) if !is_self_attr(&a.value) => a.attr.as_str().to_ascii_lowercase(),
        _ => return false,
    };
    NAMES.contains(&text.as_str()) || text.contains("batch_size") || text.ends_with("_bs")
}

/// The body does tensor work with the loop variables: a torch call, or an index into a
/// device tensor that reads one of `vars`.
pub(super) fn tensor_work(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    body: &[Stmt],
    vars: &[&str],
) -> bool {
    analysis::try_each_expr(body, |e| {
        if expr_tensor_work(sem, func, e, vars) {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
}

fn expr_tensor_work(sem: &Semantic<'_>, func: &Function<'_>, e: &Expr, vars: &[&str]) -> bool {
    match e {
        Expr::Call(c) => {
            sem.resolves_with_prefix(&c.func, "torch.")
                && !sem.resolves_with_prefix(&c.func, "torch.is_")
                && !sem.resolves_with_prefix(&c.func, "torch.no_grad")
        }
        Expr::Subscript(s) => {
            vars.iter().any(|v| analysis::reads(&s.slice, v))
                && (is_tensor_expr(sem, func, &s.value)
                    || analysis::is_device_value(sem, func, &s.value, 0))
        }
        _ => false,
    }
}

/// The first `.item()` of a loop over elements that reads the loop variables (directly or
/// through names the body computes from them): a host sync per element. `.item()`s inside a
/// nested loop are that loop's, and values that only go to a log are left alone.
pub(super) fn item_per_element(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    stmt: &Stmt,
) -> Option<TextRange> {
    let Stmt::For(f) = stmt else {
        return None;
    };
    if !element_iterable(sem, func, &f.iter) {
        return None;
    }
    let mut vars = Vec::new();
    names_of(&f.target, &mut vars);
    // `for batch in iterator:` is the training loop over the data, one step per iteration.
    let data_loop = vars
        .iter()
        .any(|v| *v == "batch" || v.ends_with("_batch") || v.ends_with("batch_data"));
    if vars.is_empty() || data_loop || is_recurrent(&f.body, &vars) {
        return None;
    }
    derived_names(&f.body, &mut vars);
    let items = analysis::find(&f.body, is_item_call);
    items.iter().find_map(|occ| {
        let nested = occ
            .ancestors
            .iter()
            .any(|n| matches!(n, Node::Stmt(Stmt::For(_) | Stmt::While(_))));
        (!nested && synced_element(sem, func, occ, &vars)).then(|| occ.expr.range())
    })
}

/// `model.parameters()`, `self.named_parameters()`, also through `enumerate`/`zip`/`list`/
/// `filter`: one iteration per parameter tensor.
pub(super) fn walks_parameters(iter: &Expr) -> bool {
    let Expr::Call(c) = iter else { return false };
    match analysis::last_name_of(c.func.as_ref()) {
        "parameters" | "named_parameters" => matches!(c.func.as_ref(), Expr::Attribute(_)),
        "enumerate" | "list" | "tuple" | "zip" | "filter" | "reversed" => {
            c.args.iter().any(walks_parameters)
        }
        _ => false,
    }
}

/// An iterable whose trip count is the batch or the elements.
fn element_iterable(sem: &Semantic<'_>, func: &Function<'_>, iter: &Expr) -> bool {
    if walks_parameters(iter) {
        return true;
    }
    if let Some(bound) = super::range_bound(iter) {
        let len_of_local = matches!(bound, Expr::Call(c)
            if matches!(c.func.as_ref(), Expr::Name(n) if n.id.as_str() == "len")
                && c.args.first().is_some_and(|a| !is_self_attr(a) && !named_fixed(a)));
        return !is_fixed(iter)
            && (is_tensor_size(sem, func, bound, 0) || is_batch_count(bound) || len_of_local);
    }
    if matches!(iter, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Name(n) if n.id.as_str() == "range"))
    {
        return false;
    }
    walks(sem, func, iter) != Walk::Fixed
}

/// Names assigned in `body` from values that read one of `vars`, added to `vars`.
fn derived_names<'a>(body: &'a [Stmt], vars: &mut Vec<&'a str>) {
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    // Two passes reach names derived from derived names, which is as deep as loop bodies go.
    for _ in 0..2 {
        for stmt in &all {
            let (targets, value): (Vec<&Expr>, &Expr) = match stmt {
                Stmt::Assign(a) => (a.targets.iter().collect(), &a.value),
                Stmt::AnnAssign(a) => match &a.value {
                    Some(v) => (vec![a.target.as_ref()], v),
                    None => continue,
                },
                _ => continue,
            };
            if !vars.iter().any(|v| analysis::reads(value, v)) {
                continue;
            }
            for t in targets {
                let mut names = Vec::new();
                names_of(t, &mut names);
                for n in names {
                    if !vars.contains(&n) {
                        vars.push(n);
                    }
                }
            }
        }
    }
}

/// A loss or metric scalar (`policy_loss.item()`, `approx_kl.item()`): per-step logging, which
/// this rule leaves alone.
fn is_logged_scalar(receiver: &Expr) -> bool {
    let Expr::Name(n) = receiver else {
        return false;
    };
    let lower = n.id.as_str().to_ascii_lowercase();
    ["loss", "kl", "entropy", "acc", "reward", "return"]
        .iter()
        .any(|w| lower.contains(w))
}

fn is_item_call(e: &Expr) -> bool {
    matches!(e, Expr::Call(c) if c.args.is_empty()
        && matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "item"))
}

/// An `.item()` occurrence whose receiver reads one of `vars`, is not host data, and whose
/// value is not only logged.
fn synced_element(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    occ: &analysis::Occurrence<'_>,
    vars: &[&str],
) -> bool {
    let Expr::Call(c) = occ.expr else {
        return false;
    };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    vars.iter().any(|v| analysis::reads(&a.value, v))
        && !analysis::derives_from_host(sem, func, &a.value, 0)
        && !analysis::in_log_call(&occ.ancestors)
        && !is_logged_scalar(&a.value)
}

/// Comprehensions of the body that do per-element device work: `.item()` per element,
/// `any(...)`/`all(...)` over tensor conditions, tensor ops per row of a tensor or per host
/// value of one. One finding per comprehension (not for one nested in a reported one).
/// The comprehensions of the function that work per element: each one's range, what it
/// does, and the range of its first `for` clause (target to iterable).
pub(super) fn comprehensions(
    sem: &Semantic<'_>,
    func: &Function<'_>,
) -> Vec<(TextRange, String, TextRange)> {
    let comps = analysis::find(func.body, |e| {
        matches!(
            e,
            Expr::ListComp(_) | Expr::SetComp(_) | Expr::GeneratorExp(_) | Expr::DictComp(_)
        )
    });
    let mut out: Vec<(TextRange, String, TextRange)> = Vec::new();
    for occ in &comps {
        let range = occ.expr.range();
        if out.iter().any(|(r, _, _)| r.contains_range(range)) {
            continue;
        }
        let first = match occ.expr {
            Expr::ListComp(c) => c.generators.first(),
            Expr::SetComp(c) => c.generators.first(),
            Expr::GeneratorExp(c) => c.generators.first(),
            Expr::DictComp(c) => c.generators.first(),
            _ => None,
        };
        let Some(first) = first else { continue };
        if let Some(what) = comprehension(sem, func, occ) {
            out.push((
                range,
                what,
                TextRange::new(first.target.start(), first.iter.end()),
            ));
        }
    }
    out
}

fn comprehension(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    occ: &analysis::Occurrence<'_>,
) -> Option<String> {
    let (elts, generators): (Vec<&Expr>, &[ast::Comprehension]) = match occ.expr {
        Expr::ListComp(c) => (vec![c.elt.as_ref()], &c.generators),
        Expr::SetComp(c) => (vec![c.elt.as_ref()], &c.generators),
        Expr::GeneratorExp(c) => (vec![c.elt.as_ref()], &c.generators),
        Expr::DictComp(c) => (vec![c.key.as_ref(), c.value.as_ref()], &c.generators),
        _ => return None,
    };
    let g = generators.first()?;
    let walk = walks(sem, func, &g.iter);
    let mut vars = Vec::new();
    names_of(&g.target, &mut vars);
    if vars.is_empty() {
        return None;
    }
    let inner = |pred: &dyn Fn(&Expr) -> bool| {
        elts.iter()
            .any(|e| analysis::find_in_expr(e).iter().any(|x| pred(x)))
    };
    let reads_var = |e: &Expr| vars.iter().any(|v| analysis::reads(e, v));
    // `[p.grad.norm().item() for p in model.parameters()]`: one sync per parameter tensor, a
    // few hundred per step in a real model.
    if walk == Walk::Fixed {
        let per_parameter = walks_parameters(&g.iter)
            && inner(&|x: &Expr| {
                is_item_call(x)
                    && matches!(x, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a) if reads_var(&a.value)))
            });
        return per_parameter.then(|| {
            "`.item()` per parameter tensor in a comprehension, a host sync per parameter"
                .to_owned()
        });
    }
    // `[torch.cat(clip) for clip in clips]`: each element is itself a sequence of tensors,
    // so the comprehension walks a list (clips, views), not the rows of a tensor.
    let joins_element = inner(&|x: &Expr| {
        matches!(x, Expr::Call(c)
            if sem.matches(&c.func, &["torch.cat", "torch.stack", "torch.concat", "torch.concatenate", "torch.vstack", "torch.hstack"])
                && c.args.first().is_some_and(|a| matches!(a, Expr::Name(n) if vars.contains(&n.id.as_str()))))
    });
    if joins_element {
        return None;
    }
    let item = inner(&|x: &Expr| {
        is_item_call(x)
            && matches!(x, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
                if reads_var(&a.value) && !analysis::derives_from_host(sem, func, &a.value, 0)))
    });
    if item && !analysis::in_log_call(&occ.ancestors) {
        return Some(
            "`.item()` per element in a comprehension, a host sync per element".to_owned(),
        );
    }
    let in_any = matches!(occ.ancestors.last(), Some(Node::Expr(Expr::Call(c)))
        if matches!(c.func.as_ref(), Expr::Name(n) if matches!(n.id.as_str(), "any" | "all")));
    let condition = inner(&|x: &Expr| {
        matches!(x, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
            if matches!(a.attr.as_str(), "any" | "all") && reads_var(&a.value)))
    });
    if in_any && condition {
        return Some(
            "`any()`/`all()` over a generator of tensor conditions, a host sync per element"
                .to_owned(),
        );
    }
    // `f[i] for f, i in zip(feats, topk)`: a gather from each row by an index of that row.
    let row_gather = |x: &Expr| {
        matches!(x, Expr::Subscript(s)
            if matches!(s.value.as_ref(), Expr::Name(n) if vars.contains(&n.id.as_str()))
                && reads_var(&s.slice))
    };
    if let Some(what) = super::range_comprehension(sem, func, &g.iter, &g.target, &elts) {
        return Some(what);
    }
    let work = inner(&|x: &Expr| {
        expr_tensor_work(sem, func, x, &vars)
            || row_method(x, &vars)
            || (walk == Walk::Rows && row_gather(x))
    });
    match walk {
        Walk::Rows if work => Some("comprehension runs tensor ops on each row of a batch tensor".to_owned()),
        Walk::HostValues if work => Some(
            "comprehension over the host values of a tensor (`.tolist()`) does tensor work per sample"
                .to_owned(),
        ),
        _ => None,
    }
}

/// A method call on a loop variable (a row of the tensor walked): `row.view(...)`, `t.sum()`.
fn row_method(e: &Expr, vars: &[&str]) -> bool {
    matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
        if matches!(a.value.as_ref(), Expr::Name(n) if vars.contains(&n.id.as_str()))))
}

/// `torch.tensor(xs)` / `torch.as_tensor(xs)` of a local list whose appended values are
/// device tensors: every element is copied to the host one at a time.
pub(super) fn tensor_of_device_list(
    sem: &Semantic<'_>,
    func: &Function<'_>,
) -> Vec<(TextRange, String)> {
    let calls = analysis::find(
        func.body,
        |e| matches!(e, Expr::Call(c) if sem.matches(&c.func, &["torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor"])),
    );
    calls
        .iter()
        .filter(|occ| {
            let Expr::Call(c) = occ.expr else { return false };
            let Some(Expr::Name(n)) = c.args.first() else {
                return false;
            };
            let values = func.assigned(n.id.as_str());
            values.iter().any(|(_, v)| matches!(v, Expr::List(l) if l.elts.is_empty()))
                && values.iter().any(|(_, v)| {
                    // `xs = torch.tensor(xs, device=...)` is the conversion itself, not a value.
                    !std::ptr::eq(*v, occ.expr)
                        && matches!(v, Expr::Call(vc) if sem.resolves_with_prefix(&vc.func, "torch."))
                        && analysis::is_device_value(sem, func, v, 0)
                })
        })
        .map(|occ| {
            (
                occ.expr.range(),
                "a tensor built from a Python list of device scalars copies every element to the host"
                    .to_owned(),
            )
        })
        .collect()
}
