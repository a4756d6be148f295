//! `P_VEC`: Python loops that walk tensors one sample or element at a time in device code.
//!
//! One issue per loop. Loops over layers, cameras, config entries, fixed small ranges and
//! scheduler timesteps are left alone, and so are recurrent loops whose iterations depend on
//! each other (`h = cell(x[:, t], h)`).

use super::{Checker, Rule, RuleInfo};
use crate::analysis::tensors::{
    is_local_container, is_pieces, is_rows_comprehension, is_self_attr, is_tensor_expr,
    is_tensor_size, iterates_tensor,
};
use crate::analysis::{self, Function};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{Expr, ExprContext, Ranged, Stmt};
use issue_model::{Category, Severity};

mod branches;
mod elements;
mod recurrence;

use recurrence::{is_recurrent, names_of};

pub struct PerElementLoop;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_VEC",
    name: "per-element-loop",
    category: Category::Structure,
    severity: Severity::Warning,
    performance: true,
    project_level: false,
    fix_template: "references/fix-templates/P_VEC.md",
    summary: "A Python loop over samples or elements of a tensor in device code launches tiny NPU ops (and host syncs) per iteration.",
    doc: include_str!("vec.md"),
    check: &PerElementLoop,
};

impl Rule for PerElementLoop {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let Some(def) = analysis::function_entry(cx.semantic(), stmt)
            .or_else(|| analysis::script_block(cx.semantic(), stmt))
        else {
            return;
        };
        let sem = cx.semantic();
        let step = analysis::in_project_step(sem) || is_metric_loss(sem);
        let training_loop = analysis::training_loop_body(sem, def).filter(|_| !step);
        if !step && training_loop.is_none() && !analysis::in_update_code(sem) {
            return;
        }
        // Callbacks, metrics, buffers and environments run on the host around the step. A
        // tokenizer that is an `nn.Module` (a learned or entropy-based one) runs on tensors.
        if sem.current_class().is_some_and(|c| {
            crate::names::is_host_class(&c.name, &c.bases)
                && !(sem.in_module_method() && c.name.ends_with("Tokenizer"))
        }) {
            return;
        }
        let Some(mut func) = Function::in_class(sem, def) else {
            return;
        };
        if let Some(body) = training_loop {
            func.body = body;
        }
        // Host work expected at inference (sampling loops, decoding, action post-processing)
        // is left to the loop shapes that were always reported there.
        // A function that the project's step reaches is training code whatever its name says.
        let training = !is_validation(sem)
            && (!analysis::in_inference_code(sem) || analysis::reached_by_step(sem));
        let mut loops = Vec::new();
        analysis::statements(func.body, &mut loops);
        let mut reported: Vec<&Stmt> = Vec::new();
        let mut hits: Vec<(TextRange, String)> = Vec::new();
        let mut branches = Vec::new();
        for stmt in &loops {
            if reported.iter().any(|outer| contains(outer, stmt)) {
                continue;
            }
            // A loop that steps an environment is a rollout over time, not a walk over the batch.
            let body = match stmt {
                Stmt::For(f) => f.body.as_slice(),
                Stmt::While(w) => w.body.as_slice(),
                _ => &[],
            };
            if analysis::is_rollout(body) {
                continue;
            }
            let Some(what) = per_element(sem, &func, stmt, training) else {
                continue;
            };
            // A `while` over a tensor condition is a retry loop, not a walk over the batch:
            // the per-sample loops inside it are their own findings.
            let retry = matches!(stmt, Stmt::While(_));
            if !retry {
                reported.push(stmt);
            }
            let first_sync = first_host_sync(sem, stmt);
            // A `while` over a device condition already says it syncs every iteration.
            let sync = if first_sync.is_some() && !retry {
                " with a host sync (`.item()`/`.cpu()`/`.tolist()`) in every iteration"
            } else {
                ""
            };
            let header = header_range(stmt);
            hits.push((header, format!("{what}{sync}")));
            // The sync is its own stall, reported where it is when the header is lines away.
            if let Some(sync) = first_sync
                && !retry
                && cx.file().index.line(sync.start()) > cx.file().index.line(header.start()) + 2
            {
                hits.push((
                    sync,
                    "this host sync runs once per sample of the loop over the batch above, \
                     a copy and a wait per sample"
                        .to_owned(),
                ));
            }
        }
        if training {
            for stmt in &loops {
                if reported.iter().any(|r| std::ptr::eq(*r, *stmt)) {
                    continue;
                }
                if let Some(range) = elements::item_per_element(sem, &func, stmt) {
                    hits.push((
                        range,
                        "`.item()` on a tensor element in every iteration of a loop over elements, \
                         a host sync per element"
                            .to_owned(),
                    ));
                }
            }
            let inside = |r: TextRange| reported.iter().any(|l| l.range().contains_range(r));
            for (range, what, clause) in elements::comprehensions(sem, &func) {
                if inside(range) {
                    continue;
                }
                // A comprehension whose element spans lines is reported at its `for` clause.
                let line = |r: TextRange| cx.file().index.line(r.start());
                let at = if line(clause) > line(range) + 2 {
                    clause
                } else {
                    range
                };
                hits.push((at, what));
            }
            // A check inside a loop already reported is part of that loop's cost.
            branches = branches::branch_syncs(sem, &func, &loops)
                .into_iter()
                .filter(|(range, _)| !inside(*range))
                .collect();
            hits.extend(elements::tensor_of_device_list(sem, &func));
        }
        if training {
            for range in nan_guards(sem, &loops) {
                cx.report(
                    range,
                    "a NaN/Inf check of a tensor (`isnan`/`isinf`/`isfinite`) decides a Python \
                     `if` in the step: a host sync every step (per tensor checked), which drains \
                     the NPU op queue; check every N steps or under a debug flag, or keep the \
                     guard on the device (`torch.where`, `nan_to_num`) (see P_VEC.md); check \
                     first that this code runs every step and not only in a debug mode",
                );
            }
        }
        for (range, what) in branches {
            cx.report(
                range,
                format!(
                    "{what}: Python needs the value on the host and waits for the NPU to \
                     finish the queued work first (see P_VEC.md); keep the check on the device \
                     (masks, `torch.where`) or run it only in a debug mode; check first that \
                     this code runs every step"
                ),
            );
        }
        hits.sort_by_key(|(range, _)| range.start());
        for (range, what) in hits {
            cx.report(
                range,
                format!(
                    "{what}: each iteration launches small NPU ops and stalls the op queue; \
                     vectorize it over the batch (see P_VEC.md); check first that the loop walks the \
                     batch or its elements: a small fixed set (cameras, layers, heads) or a rollout \
                     over environment steps is not per-sample work"
                ),
            );
        }
    }
}

/// The tests of `if` statements (and conditional expressions) among `stmts` that branch on a
/// torch NaN/Inf check (`if torch.isnan(loss).any():`, `if not x.isfinite().all():`). A check
/// behind a plain flag (`if self.debug and torch.isnan(x).any():`, or anywhere inside an `if flag:`
/// block) is opt-in and not counted;
/// numpy's and `math`'s checks run on host values.
fn nan_guards(sem: &Semantic<'_>, stmts: &[&Stmt]) -> Vec<TextRange> {
    let is_check = |e: &Expr| is_nan_check(sem, e);
    let guarded = |test: &Expr| match test {
        Expr::BoolOp(b) if matches!(b.op, crate::source::ast::BoolOp::And) => b
            .values
            .first()
            .is_some_and(|first| !analysis::find_in_expr(first).into_iter().any(is_check)),
        _ => false,
    };
    // The bodies of `if flag:` blocks (`if safe_merge:`, `if self.cfg.debug:`): a check
    // anywhere inside one is opt-in too.
    let opt_in: Vec<TextRange> = stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::If(i) if is_plain_flag(&i.test) => Some(TextRange::new(
                i.body.first()?.start(),
                i.body.last()?.end(),
            )),
            _ => None,
        })
        .collect();
    stmts
        .iter()
        .filter_map(|s| match s {
            Stmt::If(i) => Some(&i.test),
            _ => None,
        })
        .filter(|test| !guarded(test) && analysis::find_in_expr(test).into_iter().any(is_check))
        .map(|test| test.range())
        .filter(|range| !opt_in.iter().any(|body| body.contains_range(*range)))
        .collect()
}

/// A torch NaN/Inf check: `torch.isnan(x)`, `x.isfinite()`; numpy's and `math`'s are not.
fn is_nan_check(sem: &Semantic<'_>, e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    let name = analysis::last_name_of(&c.func);
    matches!(
        name,
        "isnan" | "isinf" | "isfinite" | "isneginf" | "isposinf"
    ) && match sem.resolve(&c.func) {
        Some(q) => q.starts_with("torch."),
        // `x.isnan()`: a tensor method.
        None => matches!(c.func.as_ref(), Expr::Attribute(_)),
    }
}

/// A plain flag: a name or attribute (`safe_merge`, `self.cfg.debug`), or `not` one.
fn is_plain_flag(test: &Expr) -> bool {
    match test {
        Expr::Name(_) => true,
        Expr::Attribute(a) => is_plain_flag(&a.value),
        Expr::UnaryOp(u) if matches!(u.op, crate::source::ast::UnaryOp::Not) => {
            is_plain_flag(&u.operand)
        }
        _ => false,
    }
}

/// A free function named after the loss it computes (`masked_mse`, `weighted_l1`,
/// `kl_divergence`, `bce_with_mask`): loss code that the semantic model's `*loss*` naming
/// misses. Methods of classes other than `nn.Module`s are not (a metric object or dataset
/// helper with such a name runs on the host).
fn is_metric_loss(sem: &Semantic<'_>) -> bool {
    const LOSS_WORDS: &[&str] = &[
        "mse",
        "mae",
        "l1",
        "l2",
        "nll",
        "bce",
        "huber",
        "kl",
        "kld",
        "xent",
        "entropy",
        "divergence",
        "softmax",
        "logps",
        "logprobs",
    ];
    let Some(f) = sem.current_function() else {
        return false;
    };
    if f.is_method && !f.in_module_class {
        return false;
    }
    f.name
        .to_ascii_lowercase()
        .split('_')
        .any(|word| LOSS_WORDS.contains(&word))
}

/// Validation and test steps write per-sample results for the evaluation on the host.
fn is_validation(sem: &Semantic<'_>) -> bool {
    sem.current_function().is_some_and(|f| {
        let lower = f.name.to_ascii_lowercase();
        ["valid", "val_", "test"].iter().any(|w| lower.contains(w))
    })
}

/// What kind of per-element loop `stmt` is, as the start of the message. `training` admits
/// the shapes that are only judged in training code (a batch-named bound, rows of zipped
/// tensors, values of a `.tolist()`).
fn per_element(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    stmt: &Stmt,
    training: bool,
) -> Option<String> {
    match stmt {
        Stmt::For(f) => {
            let target = match f.target.as_ref() {
                Expr::Name(n) => Some(n.id.as_str()),
                _ => None,
            };
            // `for layer, (w, h) in enumerate(zip(weights, h_0)):` names what it walks.
            if elements::walks(sem, func, &f.iter) == elements::Walk::Fixed
                || names_fixed_target(&f.target)
            {
                return None;
            }
            if let Some(bound) = range_bound(&f.iter) {
                let var = target?;
                // A count read from a tensor's values (`int(ids.max())`, `labels[b].max()`):
                // one iteration per id or sample the data holds.
                let per_id = training && counts_tensor_values(func, bound, 0);
                let batch = is_tensor_size(sem, func, bound, 0)
                    || (training && elements::is_batch_count(bound))
                    || per_id;
                if !batch || !indexes_with(sem, func, &f.body, var) {
                    return None;
                }
                if sized_tensor(bound).is_some_and(|t| moved_later(func.body, t, stmt.end())) {
                    return None;
                }
                if is_recurrent(&f.body, &[var]) || indexes_own_attribute(&f.body, var) {
                    return None;
                }
                let text = crate::semantic::dotted(bound);
                if per_id {
                    return Some(format!(
                        "Python loop over `range({})`, a count read from a tensor's values, \
                         selects tensors one id or sample at a time",
                        short(bound, &text)
                    ));
                }
                return Some(format!(
                    "Python loop over `range({})` indexes tensors one element at a time",
                    short(bound, &text)
                ));
            }
            let mut vars = Vec::new();
            names_of(&f.target, &mut vars);
            if iterates_tensor(sem, func, &f.iter) {
                let walked = match f.iter.as_ref() {
                    Expr::Name(n) => Some(n.id.as_str()),
                    _ => None,
                };
                if walked.is_some_and(|t| moved_later(func.body, t, stmt.end())) {
                    return None;
                }
                if is_recurrent(&f.body, &vars)
                    || !(uses_rows(&f.body, &vars) || updates_at(&f.body, &vars))
                {
                    return None;
                }
                return Some("Python loop iterates a tensor row by row".to_owned());
            }
            if !training || is_recurrent(&f.body, &vars) {
                return None;
            }
            match elements::walks(sem, func, &f.iter) {
                elements::Walk::Rows => Some(
                    "Python loop walks the rows of a batch tensor one sample at a time".to_owned(),
                ),
                elements::Walk::HostValues
                    if elements::tensor_work(sem, func, &f.body, &vars)
                        || elements::pulled_rows(&f.iter) && uses_rows(&f.body, &vars) =>
                {
                    Some(
                        "Python loop over the host values of a tensor (`.tolist()`/`.numpy()`) \
                         does tensor work per sample"
                            .to_owned(),
                    )
                }
                _ => None,
            }
        }
        Stmt::While(w) => {
            // A condition over a tensor the function moves to the device only later reads
            // host memory.
            let host = analysis::find_in_expr(&w.test).iter().any(
                |e| matches!(e, Expr::Name(n) if moved_later(func.body, n.id.as_str(), stmt.end())),
            );
            if !host && reads_device_tensor(sem, func, &w.test) {
                Some(
                    "`while` condition reads a device tensor, a host sync per iteration".to_owned(),
                )
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `[f(hm[i]) for i in range(bs)]` over the batch (a batch-like name, outside inference code)
/// whose element indexes a tensor with the index: the comprehension form of the `range` loop.
fn range_comprehension(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    iter: &Expr,
    target: &Expr,
    elts: &[&Expr],
) -> Option<String> {
    let bound = range_bound(iter)?;
    let Expr::Name(var) = target else {
        return None;
    };
    // Named after the batch: a comprehension over `range(x.shape[1])` walks dims or chunks
    // as often as samples.
    if analysis::in_inference_code(sem) || !elements::is_batch_count(bound) {
        return None;
    }
    let var = var.id.as_str();
    let indexes = elts.iter().any(|e| {
        analysis::find_in_expr(e).iter().any(|x| {
            matches!(x, Expr::Subscript(s)
            if analysis::reads(&s.slice, var)
                && !is_self_attr(&s.value)
                && match s.value.as_ref() {
                    Expr::Name(n) => is_tensor_expr(sem, func, &s.value)
                        && !is_local_container(func, n.id.as_str()),
                    _ => false,
                })
        })
    });
    indexes.then(|| {
        let text = crate::semantic::dotted(bound);
        format!(
            "comprehension over `range({})` indexes tensors one sample at a time",
            short(bound, &text)
        )
    })
}

/// A loop variable named after something small and fixed (`layer`, `head`, `camera`).
fn names_fixed_target(target: &Expr) -> bool {
    let mut names = Vec::new();
    names_of(target, &mut names);
    names.iter().any(|n| {
        let lower = n.to_ascii_lowercase();
        [
            "layer", "head", "camera", "expert", "critic", "level", "stage", "block",
        ]
        .iter()
        .any(|w| lower.contains(w))
    })
}

/// The body picks a component of the module by the loop index (`self.codebooks[q]`,
/// `self.heads[i]`): the loop walks groups or quantizers fixed by the config, not samples.
fn indexes_own_attribute(body: &[Stmt], var: &str) -> bool {
    !analysis::find(body, |e| {
        matches!(e, Expr::Subscript(s)
            if matches!(s.slice.as_ref(), Expr::Name(n) if n.id.as_str() == var)
                && matches!(s.value.as_ref(), Expr::Attribute(a)
                    if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                        && (elements::named_fixed(&s.value) || a.attr.as_str().ends_with("codebooks"))))
    })
    .is_empty()
}

/// The body writes a tensor of the module at the loop variables (`self.usage[idx] += 1`): an
/// indexed update per element.
fn updates_at(body: &[Stmt], vars: &[&str]) -> bool {
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    all.iter().any(|s| {
        let target = match s {
            Stmt::AugAssign(a) => a.target.as_ref(),
            Stmt::Assign(a) if a.targets.len() == 1 => &a.targets[0],
            _ => return false,
        };
        matches!(target, Expr::Subscript(t)
            if vars.iter().any(|v| analysis::reads(&t.slice, v)) && is_self_attr(&t.value))
    })
}

/// The body computes with the loop variables (a call reads one), beyond checking their type.
fn uses_rows(body: &[Stmt], vars: &[&str]) -> bool {
    analysis::try_each_expr(body, |e| {
        let Expr::Call(c) = e else {
            return std::ops::ControlFlow::Continue(());
        };
        // Type checks and the errors they raise do not compute.
        let checks = matches!(c.func.as_ref(), Expr::Name(n)
            if matches!(n.id.as_str(), "isinstance" | "len" | "type" | "print" | "str" | "repr" | "id")
                || n.id.as_str().ends_with("Error")
                || n.id.as_str().ends_with("Exception"));
        let reads = vars.iter().any(|v| analysis::reads(e, v));
        if !checks && reads {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
}

fn short(bound: &Expr, dotted: &str) -> String {
    match bound {
        Expr::Subscript(s) => format!("{}[…]", crate::semantic::dotted(&s.value)),
        Expr::Call(c) => format!("{}(…)", crate::semantic::dotted(&c.func)),
        Expr::BinOp(b) => format!("{} …", short(&b.left, &crate::semantic::dotted(&b.left))),
        _ => dotted.to_owned(),
    }
}

/// The `for`/`while` line: from the keyword to the end of the header expression.
fn header_range(stmt: &Stmt) -> crate::source::TextRange {
    let end = match stmt {
        Stmt::For(f) => f.iter.end(),
        Stmt::While(w) => w.test.end(),
        _ => stmt.end(),
    };
    crate::source::TextRange::new(stmt.start(), end)
}

fn contains(outer: &Stmt, inner: &Stmt) -> bool {
    outer.start() <= inner.start() && inner.end() <= outer.end()
}

/// The upper bound of `range(...)`.
fn range_bound(iter: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = iter else { return None };
    let Expr::Name(n) = c.func.as_ref() else {
        return None;
    };
    if n.id.as_str() != "range" {
        return None;
    }
    // `range(0, n, chunk)` walks chunks, which is how code bounds memory on purpose.
    match c.args.as_slice() {
        [stop] | [_, stop] => Some(stop),
        _ => None,
    }
}

/// The local tensor whose size bounds a loop: `labels` of `labels.shape[0]`, `labels.size(0)`,
/// `len(labels)`.
fn sized_tensor(bound: &Expr) -> Option<&str> {
    let base = match bound {
        Expr::Subscript(s) => match s.value.as_ref() {
            Expr::Attribute(a) if a.attr.as_str() == "shape" => a.value.as_ref(),
            _ => return None,
        },
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) if a.attr.as_str() == "size" => a.value.as_ref(),
            Expr::Name(n) if n.id.as_str() == "len" && c.args.len() == 1 => &c.args[0],
            _ => return None,
        },
        _ => return None,
    };
    match base {
        Expr::Name(n) => Some(n.id.as_str()),
        _ => None,
    }
}

/// The function moves the local tensor `name` to a device after `after` (`labels =
/// labels.to(device)`, `model(x.cuda())`): until then it is a host tensor, built by the data
/// pipeline, and a loop over it does host work, not NPU work. A cast (`.to(torch.float32)`,
/// `.to(dtype=...)`) moves nothing.
fn moved_later(body: &[Stmt], name: &str, after: crate::source::TextSize) -> bool {
    let moves = |e: &Expr| {
        let Expr::Call(c) = e else { return false };
        let Expr::Attribute(m) = c.func.as_ref() else {
            return false;
        };
        if !matches!(m.value.as_ref(), Expr::Name(n) if n.id.as_str() == name) {
            return false;
        }
        match m.attr.as_str() {
            "cuda" | "npu" => true,
            "to" => {
                let dtype = |a: &Expr| {
                    matches!(a, Expr::Attribute(d) if matches!(
                        d.attr.as_str(),
                        "float" | "float16" | "float32" | "float64" | "half" | "bfloat16" | "double"
                            | "long" | "int" | "int32" | "int64" | "bool" | "uint8"
                    ))
                };
                c.args.first().is_some_and(|a| !dtype(a))
                    || c.keywords
                        .iter()
                        .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"))
            }
            _ => false,
        }
    };
    analysis::find(body, moves)
        .iter()
        .any(|occ| occ.expr.start() >= after)
}

/// The loop body indexes something that may be a tensor with `var` (not `self.layers[i]`,
/// not a local list or dict).
fn indexes_with(sem: &Semantic<'_>, func: &Function<'_>, body: &[Stmt], var: &str) -> bool {
    // Also through a name the body binds from the index (`m = ids == b`, then `x[m]`).
    let mut derived = vec![var];
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    for stmt in &all {
        if let Stmt::Assign(a) = stmt
            && analysis::reads(&a.value, var)
        {
            for t in &a.targets {
                names_of(t, &mut derived);
            }
        }
    }
    let subs = analysis::find(
        body,
        |e| matches!(e, Expr::Subscript(s) if derived.iter().any(|d| analysis::reads(&s.slice, d))),
    );
    subs.iter().any(|occ| {
        let Expr::Subscript(s) = occ.expr else {
            return false;
        };
        if is_self_attr(&s.value) {
            return false;
        }
        match s.value.as_ref() {
            Expr::Name(n) => {
                !is_local_container(func, n.id.as_str())
                    && !is_numpy_array(sem, func, n.id.as_str())
            }
            _ => true,
        }
    })
}

/// A loop bound read from the values of a tensor: `.item()`, `.max()`, `.sum()` of one
/// (`int(ids[-1].item()) + 1`, `labels[b].max()`), or a local name bound to such a count.
fn counts_tensor_values(func: &Function<'_>, bound: &Expr, depth: u32) -> bool {
    if depth > 3 {
        return false;
    }
    match bound {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => {
                matches!(a.attr.as_str(), "item" | "max" | "sum" | "amax")
                    && !is_self_attr(&a.value)
                    && !matches!(a.value.as_ref(), Expr::Constant(_))
            }
            Expr::Name(n) if n.id.as_str() == "int" => c
                .args
                .first()
                .is_some_and(|a| counts_tensor_values(func, a, depth + 1)),
            _ => false,
        },
        Expr::BinOp(b) => {
            counts_tensor_values(func, &b.left, depth + 1)
                || counts_tensor_values(func, &b.right, depth + 1)
        }
        Expr::Name(n) => {
            let values = func.assigned(n.id.as_str());
            !values.is_empty()
                && values
                    .iter()
                    .all(|(_, v)| counts_tensor_values(func, v, depth + 1))
        }
        _ => false,
    }
}

/// A local name bound to a numpy call (`out = np.zeros((bs, n))`): a host array, whose
/// per-row writes launch nothing on the device.
fn is_numpy_array(sem: &Semantic<'_>, func: &Function<'_>, name: &str) -> bool {
    func.assigned(name)
        .iter()
        .any(|(_, v)| matches!(v, Expr::Call(c) if sem.resolves_with_prefix(&c.func, "numpy.")))
}

/// A `while` test that needs a device value on the host: `.item()`, `.any()`, `.all()`, a
/// torch call, or a local tensor. Shapes, dims and dtypes of a tensor are host values.
fn reads_device_tensor(sem: &Semantic<'_>, func: &Function<'_>, test: &Expr) -> bool {
    match test {
        Expr::Attribute(a) => {
            !matches!(
                a.attr.as_str(),
                "ndim" | "shape" | "dtype" | "device" | "is_cuda"
            ) && reads_device_tensor(sem, func, &a.value)
        }
        Expr::Call(c) => {
            // `np.any(active)` tests host data; only a tensor handed to it would sync.
            if sem.resolves_with_prefix(&c.func, "numpy.") {
                return c.args.iter().any(|a| reads_device_tensor(sem, func, a));
            }
            if let Expr::Attribute(a) = c.func.as_ref() {
                if matches!(a.attr.as_str(), "dim" | "size" | "numel" | "ndimension") {
                    return false;
                }
                if matches!(a.attr.as_str(), "item" | "any" | "all") {
                    return true;
                }
            }
            sem.resolve(&c.func)
                .is_some_and(|q| q.starts_with("torch.") && !q.starts_with("torch.is_"))
                || c.args.iter().any(|a| reads_device_tensor(sem, func, a))
        }
        Expr::Name(n) if matches!(n.ctx, ExprContext::Load) => is_tensor_expr(sem, func, test),
        Expr::Subscript(s) => reads_device_tensor(sem, func, &s.value),
        Expr::Compare(c) => {
            reads_device_tensor(sem, func, &c.left)
                || c.comparators
                    .iter()
                    .any(|e| reads_device_tensor(sem, func, e))
        }
        Expr::BoolOp(b) => b.values.iter().any(|e| reads_device_tensor(sem, func, e)),
        Expr::UnaryOp(u) => reads_device_tensor(sem, func, &u.operand),
        Expr::BinOp(b) => {
            reads_device_tensor(sem, func, &b.left) || reads_device_tensor(sem, func, &b.right)
        }
        _ => false,
    }
}

/// The first `.item()`/`.cpu()`/`.tolist()`/`.numpy()` call in the body of a loop, other than
/// one on a tensor a torch factory just made on the host (`torch.rand(1).item()`: no device, no
/// sync).
fn first_host_sync(sem: &Semantic<'_>, stmt: &Stmt) -> Option<TextRange> {
    let body: &[Stmt] = match stmt {
        Stmt::For(f) => &f.body,
        Stmt::While(w) => &w.body,
        _ => return None,
    };
    analysis::find(body, |e| {
        matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
            if matches!(a.attr.as_str(), "item" | "cpu" | "tolist" | "numpy")
                && !is_host_factory(sem, &a.value)))
    })
    .iter()
    .map(|e| e.expr.range())
    .min_by_key(|r| r.start())
}

/// A call of a torch tensor factory without `device=` (`torch.rand(1)`, `torch.randint(0, 9, (1,))`):
/// a tensor on the host (`torch.set_default_device` aside, which training code rarely calls).
fn is_host_factory(sem: &Semantic<'_>, expr: &Expr) -> bool {
    const FACTORIES: &[&str] = &[
        "torch.rand",
        "torch.randn",
        "torch.randint",
        "torch.randperm",
        "torch.zeros",
        "torch.ones",
        "torch.empty",
        "torch.full",
        "torch.arange",
        "torch.linspace",
    ];
    let Expr::Call(c) = expr else {
        return false;
    };
    sem.matches(&c.func, FACTORIES)
        && !c
            .keywords
            .iter()
            .any(|k| k.arg.as_ref().is_none_or(|a| a.as_str() == "device"))
}
