//! Whether a loop's iterations depend on each other: a recurrence (`h = cell(x[:, t], h)`)
//! is sequential work, an accumulation (`loss += l`, `out = torch.cat([out, y])`) is not.

use crate::analysis;
use crate::source::ast::{self, Expr, Ranged, Stmt};

/// What a tensor tells about itself without its values being read.
const META: &[&str] = &["device", "dtype", "shape", "ndim"];

/// `expr` reads the values of `name`, not only its metadata (`x.device`, `x.dtype`, `x.shape`):
/// `pos[..., i] = ids.to(pos.device)` writes `pos` without depending on what it holds.
fn reads_data(expr: &Expr, name: &str) -> bool {
    let found = analysis::find_in_expr(expr);
    let reads = found
        .iter()
        .filter(|e| matches!(e, Expr::Name(n) if n.id.as_str() == name))
        .count();
    let metadata = found
        .iter()
        .filter(|e| {
            matches!(e, Expr::Attribute(a) if META.contains(&a.attr.as_str())
            && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == name))
        })
        .count();
    reads > metadata
}

/// An iteration depends on the previous one: a name (other than the loop variables) is
/// reassigned from itself in a way that is not a plain accumulation (`s = s + x`, `s += x`).
pub(super) fn is_recurrent(body: &[Stmt], loop_vars: &[&str]) -> bool {
    // Built on first need: most loop bodies rebind no name from itself.
    let fresh = std::cell::OnceCell::new();
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    all.iter().any(|stmt| {
        let Stmt::Assign(a) = stmt else {
            return false;
        };
        let mut targets = Vec::new();
        let mut written = Vec::new();
        for t in &a.targets {
            names_of(t, &mut targets);
            subscripted_names(t, &mut written);
        }
        // Also through a name bound from it in this iteration (`out = self.cell(h, x[t])`, then
        // `h = out["hidden"]`): the state goes round the loop all the same.
        let rebound = targets.iter().any(|name| {
            !loop_vars.contains(name)
                && !fresh.get_or_init(|| iteration_locals(body)).contains(name)
                && ((analysis::reads(&a.value, name) && !is_accumulation(&a.value, name))
                    || read_from(&all, name)
                        .iter()
                        .any(|d| analysis::reads(&a.value, d)))
        });
        // A tensor or list written in place from what was read out of it in this iteration
        // (`h_prev = h[layer]` ... `h[layer] = cell(x, h_prev)`).
        rebound
            || written.iter().any(|name| {
                !loop_vars.contains(name)
                    && ((reads_data(&a.value, name) && !same_element(a, name, loop_vars))
                        || read_from(&all, name)
                            .iter()
                            .any(|d| analysis::reads(&a.value, d)))
            })
    })
}

/// `x[i] = f(x[i])`, `img[i, j] = blur(img[i, j])`: the element the loop variables pick is
/// rewritten from itself alone, so nothing carries over to the next iteration (each sample is
/// transformed on its own). Every read of `name` in the value is that same element; what other
/// statements of the iteration read out of `name` is checked apart.
fn same_element(assign: &ast::StmtAssign, name: &str, loop_vars: &[&str]) -> bool {
    let [Expr::Subscript(target)] = assign.targets.as_slice() else {
        return false;
    };
    if !matches!(target.value.as_ref(), Expr::Name(n) if n.id.as_str() == name) {
        return false;
    }
    let Some(key) = element_key(&target.slice) else {
        return false;
    };
    if !loop_vars.iter().any(|v| analysis::reads(&target.slice, v)) {
        return false;
    }
    let found = analysis::find_in_expr(&assign.value);
    // `outs[j] = torch.cat([outs[j], y])` grows the slot over an outer loop: an accumulation
    // of that loop, not a transformation of one sample.
    let grows = found.iter().any(|e| {
        matches!(e, Expr::Call(c) if matches!(analysis::last_name_of(c.func.as_ref()),
            "cat" | "concat" | "concatenate" | "stack" | "hstack" | "vstack"))
    });
    let element = |e: &Expr| {
        matches!(e, Expr::Subscript(s)
            if matches!(s.value.as_ref(), Expr::Name(n) if n.id.as_str() == name)
                && element_key(&s.slice).as_deref() == Some(key.as_str()))
    };
    let reads = found
        .iter()
        .filter(|e| matches!(e, Expr::Name(n) if n.id.as_str() == name))
        .count();
    let same = found.iter().filter(|e| element(e)).count();
    // `x[i] = np.zeros(x[i].shape)` only asks the element its shape.
    let metadata = found
        .iter()
        .filter(|e| {
            matches!(e, Expr::Attribute(a)
                if META.contains(&a.attr.as_str()) && element(&a.value))
        })
        .count();
    !grows && reads > 0 && reads == same && same > metadata
}

/// A plain index, spelled out for comparison: names, integer constants, and tuples of them
/// (`i`, `i, j`, `b, 0`). `None` for anything computed (`i - 1`, `idx[i]`).
fn element_key(slice: &Expr) -> Option<String> {
    match slice {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Constant(c) => match &c.value {
            ast::Constant::Int(i) => Some(i.to_string()),
            _ => None,
        },
        Expr::Tuple(t) => t
            .elts
            .iter()
            .map(element_key)
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join(",")),
        _ => None,
    }
}

/// Names that every iteration binds afresh before reading them: the first assignment of the
/// name in the body does not read it, and no read of it comes before (`start = starts[i]` ...
/// `start = start + 1` carries nothing to the next iteration).
fn iteration_locals<'a>(body: &'a [Stmt]) -> Vec<&'a str> {
    // Where each name is first read, in one walk of the body.
    let mut first_read: std::collections::HashMap<&'a str, crate::source::TextSize> =
        std::collections::HashMap::new();
    for occ in analysis::find(
        body,
        |e| matches!(e, Expr::Name(n) if matches!(n.ctx, crate::source::ast::ExprContext::Load)),
    ) {
        if let Expr::Name(n) = occ.expr {
            first_read.entry(n.id.as_str()).or_insert(n.range.start());
        }
    }
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    let mut seen: Vec<&'a str> = Vec::new();
    let mut fresh = Vec::new();
    for stmt in all {
        let Stmt::Assign(a) = stmt else { continue };
        let mut targets = Vec::new();
        for t in &a.targets {
            names_of(t, &mut targets);
        }
        for name in targets {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let read_before = first_read.get(name).is_some_and(|r| *r < stmt.start());
            if !read_before && !analysis::reads(&a.value, name) {
                fresh.push(name);
            }
        }
    }
    fresh
}

/// Names the statements bind from a value that reads `name`, followed one step further
/// (`h_prev = h[layer]`, then `h_new = cell(x, h_prev)`).
fn read_from<'a>(all: &[&'a Stmt], name: &str) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for _ in 0..2 {
        for stmt in all {
            let Stmt::Assign(a) = stmt else { continue };
            let source =
                analysis::reads(&a.value, name) || out.iter().any(|d| analysis::reads(&a.value, d));
            if !source {
                continue;
            }
            let mut targets = Vec::new();
            for t in &a.targets {
                names_of(t, &mut targets);
            }
            for t in targets {
                if t != name && !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    out
}

pub(super) fn names_of<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Name(n) => out.push(n.id.as_str()),
        Expr::Tuple(t) => t.elts.iter().for_each(|e| names_of(e, out)),
        Expr::List(l) => l.elts.iter().for_each(|e| names_of(e, out)),
        _ => {}
    }
}

/// Tensors written in place by an assignment target (`z[t + 1] = ...`): reading the same
/// tensor on the right-hand side carries state from one iteration to the next.
fn subscripted_names<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Subscript(s) => {
            if let Expr::Name(n) = s.value.as_ref() {
                out.push(n.id.as_str());
            }
        }
        Expr::Tuple(t) => t.elts.iter().for_each(|e| subscripted_names(e, out)),
        Expr::List(l) => l.elts.iter().for_each(|e| subscripted_names(e, out)),
        _ => {}
    }
}

/// `name + x`, `x + name`, `name - x` where `x` does not read `name` (a product such as
/// `m = a[i] @ m` is a sequential reduction, not an accumulation), and the concatenations that
/// collect one result per iteration: `torch.cat([name, x])`, also as the `else` of a first
/// iteration (`out if i == 0 else torch.cat([name, out])`).
fn is_accumulation(value: &Expr, name: &str) -> bool {
    if let Expr::IfExp(e) = value {
        let branch = |b: &Expr| !analysis::reads(b, name) || is_accumulation(b, name);
        return !analysis::reads(&e.test, name) && branch(&e.body) && branch(&e.orelse);
    }
    if let Expr::Call(c) = value
        && matches!(
            analysis::last_name_of(&c.func),
            "cat" | "concat" | "concatenate"
        )
        && let Some(elts) = c.args.first().and_then(|a| match a {
            Expr::List(l) => Some(&l.elts),
            Expr::Tuple(t) => Some(&t.elts),
            _ => None,
        })
    {
        let is_name = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == name);
        return elts.iter().filter(|e| is_name(e)).count() == 1
            && elts.iter().all(|e| is_name(e) || !analysis::reads(e, name))
            && c.args[1..].iter().all(|a| !analysis::reads(a, name));
    }
    let Expr::BinOp(b) = value else {
        return false;
    };
    if !matches!(
        b.op,
        crate::source::ast::Operator::Add | crate::source::ast::Operator::Sub
    ) {
        return false;
    }
    let is_name = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == name);
    (is_name(&b.left) && !analysis::reads(&b.right, name))
        || (is_name(&b.right) && !analysis::reads(&b.left, name))
}
