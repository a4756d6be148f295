//! The simulator interface of a training script's loop: an RL script steps its environments
//! and trains in one loop, and the traffic with the environments (the actions pulled to the
//! host for `env.step`, the observations and rewards it returns, uploaded) is needed there.

use crate::analysis;
use crate::checker::Checker;
use crate::source::ast::{Expr, Ranged, Stmt};
use std::collections::HashSet;

/// Line spans (first and last line) of the statements of the script block `def` (a main
/// block or a module-level loop) that talk to environments: those that step or reset one,
/// that compute the actions handed to `step`, and that read what `step` or `reset` returned
/// (directly or through a plain alias such as `obs = next_obs`). Empty when the block steps
/// no environment.
pub fn simulator_lines(cx: &Checker<'_>, def: &Stmt) -> Vec<(u32, u32)> {
    let block: &[Stmt] = match def {
        Stmt::If(s) => &s.body,
        _ => std::slice::from_ref(def),
    };
    let mut all = Vec::new();
    analysis::statements(block, &mut all);
    let simple: Vec<&Stmt> = all.into_iter().filter(|s| value_of(s).is_some()).collect();
    let mut outputs: HashSet<&str> = HashSet::new();
    let mut actions: HashSet<&str> = HashSet::new();
    let mut talks: Vec<&Stmt> = Vec::new();
    for &stmt in &simple {
        let Some(value) = value_of(stmt) else {
            continue;
        };
        for e in analysis::find_in_expr(value) {
            let Some((method, call)) = env_call(e) else {
                continue;
            };
            talks.push(stmt);
            assigned_names(stmt, &mut outputs);
            if method == "step" {
                for arg in &call.args {
                    actions.extend(names_in(arg));
                }
            }
        }
    }
    if talks.is_empty() {
        return Vec::new();
    }
    // Plain aliases of what the environments return (`obs = next_obs`, `o = next_o.copy()`).
    loop {
        let before = outputs.len();
        for &stmt in &simple {
            if let Some(value) = value_of(stmt)
                && is_alias(value, &outputs)
            {
                assigned_names(stmt, &mut outputs);
            }
        }
        if outputs.len() == before {
            break;
        }
    }
    simple
        .iter()
        .filter(|&&stmt| {
            talks.iter().any(|t| std::ptr::eq(*t, stmt)) || {
                let mut assigned = HashSet::new();
                assigned_names(stmt, &mut assigned);
                assigned.iter().any(|n| actions.contains(n))
                    || value_of(stmt).is_some_and(|v| names_in(v).any(|n| outputs.contains(n)))
            }
        })
        .map(|s| lines(cx, s))
        .collect()
}

/// The first and last line of a statement.
fn lines(cx: &Checker<'_>, stmt: &Stmt) -> (u32, u32) {
    let file = cx.file();
    (file.position(stmt.start()).0, file.position(stmt.end()).0)
}

/// The finding's line lies in none of the `spans` (first and last line each).
pub fn outside(spans: &[(u32, u32)], finding: &crate::finding::Finding) -> bool {
    !spans.iter().any(|(a, b)| (*a..=*b).contains(&finding.line))
}

/// The value of a simple statement (an assignment or an expression statement).
fn value_of(stmt: &Stmt) -> Option<&Expr> {
    match stmt {
        Stmt::Assign(a) => Some(&a.value),
        Stmt::AugAssign(a) => Some(&a.value),
        Stmt::AnnAssign(a) => a.value.as_deref(),
        Stmt::Expr(e) => Some(&e.value),
        _ => None,
    }
}

/// `envs.step(actions)`, `self.env.reset()`: the method (`step` or `reset`) and the call.
fn env_call(e: &Expr) -> Option<(&str, &crate::source::ast::ExprCall)> {
    let Expr::Call(call) = e else { return None };
    let Expr::Attribute(a) = call.func.as_ref() else {
        return None;
    };
    let method = a.attr.as_str();
    let receiver = analysis::last_name_of(&a.value).to_ascii_lowercase();
    (matches!(method, "step" | "reset") && receiver.contains("env")).then_some((method, call))
}

/// The plain names a statement assigns (tuple targets included; not subscripts or attributes).
fn assigned_names<'a>(stmt: &'a Stmt, out: &mut HashSet<&'a str>) {
    fn add<'a>(target: &'a Expr, out: &mut HashSet<&'a str>) {
        match target {
            Expr::Name(n) => {
                out.insert(n.id.as_str());
            }
            Expr::Tuple(t) => t.elts.iter().for_each(|e| add(e, out)),
            Expr::List(l) => l.elts.iter().for_each(|e| add(e, out)),
            Expr::Starred(s) => add(&s.value, out),
            _ => {}
        }
    }
    match stmt {
        Stmt::Assign(a) => a.targets.iter().for_each(|t| add(t, out)),
        Stmt::AnnAssign(a) => add(&a.target, out),
        _ => {}
    }
}

/// The names an expression reads.
fn names_in(expr: &Expr) -> impl Iterator<Item = &str> {
    analysis::find_in_expr(expr)
        .into_iter()
        .filter_map(|e| match e {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        })
}

/// `value` only renames a value in `outputs`: the name itself, an item or attribute of it,
/// or a `.copy()` of it.
fn is_alias(value: &Expr, outputs: &HashSet<&str>) -> bool {
    match value {
        Expr::Name(n) => outputs.contains(n.id.as_str()),
        Expr::Subscript(s) => is_alias(&s.value, outputs),
        Expr::Attribute(a) => is_alias(&a.value, outputs),
        Expr::Call(c) if c.args.is_empty() => {
            matches!(c.func.as_ref(), Expr::Attribute(a)
                if a.attr.as_str() == "copy" && is_alias(&a.value, outputs))
        }
        _ => false,
    }
}

/// Line spans of the statements of `body` (a training script's loop) that pull a tensor to the
/// host (`.cpu()`, `.numpy()`, `.tolist()`) for values that never come back to the device:
/// what they compute only reaches logs and host state that no upload in `uploads` and no
/// in-place update of another array reads (`y_pred = values.cpu().numpy()` for an
/// explained-variance figure). Names carry the pulled value through assignments, and a method
/// call handed it (`rms.update(x)`) carries it into its receiver.
pub fn unreturned_pulls(
    cx: &Checker<'_>,
    body: &[Stmt],
    uploads: &[crate::source::TextRange],
) -> Vec<(u32, u32)> {
    let mut all = Vec::new();
    analysis::statements(body, &mut all);
    let simple: Vec<&Stmt> = all.into_iter().filter(|s| value_of(s).is_some()).collect();
    let pulls = simple.iter().filter(|&&s| {
        value_of(s).is_some_and(|v| {
            analysis::find_in_expr(v).into_iter().any(|e| {
                matches!(e, Expr::Call(c) if matches!(analysis::last_name_of(&c.func), "cpu" | "numpy" | "tolist"))
            })
        })
    });
    let mut out = Vec::new();
    for &pull in pulls {
        let mut tainted = HashSet::new();
        carried_names(pull, &mut tainted);
        if tainted.is_empty() || comes_back(&simple, pull, tainted, uploads) {
            continue;
        }
        out.push(lines(cx, pull));
    }
    out
}

/// Calls that make a tensor of host data or move one to the device.
const SENDS: &[&str] = &[
    "from_numpy",
    "tensor",
    "as_tensor",
    "Tensor",
    "FloatTensor",
    "LongTensor",
    "to",
    "cuda",
];

/// Follow the names `tainted` (carried out of `pull`) through `simple` statements until one
/// of them reaches an upload or an in-place update of an array the pull did not make.
fn comes_back<'a>(
    simple: &[&'a Stmt],
    pull: &Stmt,
    mut tainted: HashSet<&'a str>,
    uploads: &[crate::source::TextRange],
) -> bool {
    loop {
        let before = tainted.len();
        for &stmt in simple {
            if std::ptr::eq(stmt, pull) {
                continue;
            }
            let Some(value) = value_of(stmt) else {
                continue;
            };
            if !names_in(value).any(|n| tainted.contains(n)) {
                continue;
            }
            let uploads_it = uploads.iter().any(|u| stmt.range().contains_range(*u))
                || analysis::find_in_expr(value).into_iter().any(|e| {
                    matches!(e, Expr::Call(c) if SENDS.contains(&analysis::last_name_of(&c.func)))
                });
            let updates_array = matches!(stmt, Stmt::AugAssign(a)
                if base_name(&a.target).is_some_and(|n| !tainted.contains(n)));
            if uploads_it || updates_array {
                return true;
            }
            carried_names(stmt, &mut tainted);
        }
        if tainted.len() == before {
            return false;
        }
    }
}

/// The names a statement writes its value into: assigned names (the base of a subscript or
/// attribute target too), or the receiver of a method call statement (`rms.update(x)`).
fn carried_names<'a>(stmt: &'a Stmt, out: &mut HashSet<&'a str>) {
    let targets: Vec<&Expr> = match stmt {
        Stmt::Assign(a) => a.targets.iter().collect(),
        Stmt::AugAssign(a) => vec![a.target.as_ref()],
        Stmt::AnnAssign(a) => vec![a.target.as_ref()],
        Stmt::Expr(e) => match e.value.as_ref() {
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a) => vec![a.value.as_ref()],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    for target in targets {
        match target {
            Expr::Tuple(t) => out.extend(t.elts.iter().filter_map(base_name)),
            Expr::List(l) => out.extend(l.elts.iter().filter_map(base_name)),
            _ => out.extend(base_name(target)),
        }
    }
}

/// `x`, `x[i]`, `x.attr`, `x.attr[i]`: the name `x`.
fn base_name(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Name(n) => Some(n.id.as_str()),
        Expr::Subscript(s) => base_name(&s.value),
        Expr::Attribute(a) => base_name(&a.value),
        Expr::Starred(s) => base_name(&s.value),
        _ => None,
    }
}
