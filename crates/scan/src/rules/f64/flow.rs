//! How `P_F64`'s float64 numpy arrays travel beyond one expression: arrays kept on `self` by
//! one method and converted by another (a replay buffer filled in `__init__` with `np.zeros`,
//! sampled into tensors in `sample`), and conversions bound to a local name that a later
//! statement takes to the device.

use crate::analysis::{self, Function};
use crate::source::ast::{Expr, Stmt};

/// `self.<attr>` assignments in every method of `class_body`: the value and the method that
/// assigns it (whose local names the value reads).
pub(crate) fn self_attr_values<'a>(
    class_body: &'a [Stmt],
    attr: &str,
) -> Vec<(&'a Expr, Function<'a>)> {
    let mut out = Vec::new();
    for stmt in class_body {
        let Some(method) = Function::new(stmt) else {
            continue;
        };
        let mut all = Vec::new();
        analysis::statements(method.body, &mut all);
        for s in all {
            let (targets, value): (&[Expr], &Expr) = match s {
                Stmt::Assign(a) => (&a.targets, &a.value),
                Stmt::AnnAssign(a) => match &a.value {
                    Some(v) => (std::slice::from_ref(a.target.as_ref()), v),
                    None => continue,
                },
                _ => continue,
            };
            if targets.iter().any(|t| is_self_attr(t, attr))
                && let Some(func) = Function::new(stmt)
            {
                out.push((value, func));
            }
        }
    }
    out
}

/// `self.<attr>`.
pub(super) fn is_self_attr(expr: &Expr, attr: &str) -> bool {
    matches!(expr, Expr::Attribute(a) if a.attr.as_str() == attr
        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self"))
}

/// The conversion at `occ` is the whole value of `name = <conversion>`: the local name it is
/// bound to.
pub(super) fn bound_name<'a>(occ: &analysis::Occurrence<'a>) -> Option<&'a str> {
    let analysis::Node::Stmt(Stmt::Assign(assign)) = occ.ancestors.last()? else {
        return None;
    };
    match (assign.targets.as_slice(), assign.value.as_ref()) {
        ([Expr::Name(n)], value) if std::ptr::eq(value, occ.expr) => Some(n.id.as_str()),
        _ => None,
    }
}
