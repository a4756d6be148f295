//! The automatic fix of a factory without `device=`: pass the device of the tensor whose
//! shape the call already reads (`torch.arange(x.shape[1])` → `torch.arange(x.shape[1],
//! device=x.device)`). Unsafe: the tensor the factory meets may live on another device than
//! the one its shape comes from; review the edit.

use crate::checker::Checker;
use crate::fix;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged};
use issue_model::{Applicability, Fix};

/// The fix of the factory call `call`, when one of its arguments reads a named tensor's shape.
pub(super) fn device_fix(cx: &Checker<'_>, call: &ast::ExprCall, whole: &Expr) -> Option<Fix> {
    if call.keywords.iter().any(|k| k.arg.is_none()) {
        return None;
    }
    let tensor = call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value))
        .find_map(shape_source)?;
    // After the last argument, so that the keyword joins the argument list where it is.
    let last = call
        .args
        .iter()
        .map(Ranged::end)
        .chain(call.keywords.iter().map(Ranged::end))
        .max()?;
    if !cx.slice(whole.range()).ends_with(')') {
        return None;
    }
    Some(fix::replacement(
        Applicability::Unsafe,
        format!("create it on {tensor}'s device (device={tensor}.device)"),
        TextRange::empty(last),
        format!(", device={tensor}.device"),
    ))
}

/// The name of the tensor whose shape `expr` reads: `x.shape[...]`, `x.shape`, `x.size(...)`.
fn shape_source(expr: &Expr) -> Option<String> {
    crate::analysis::find_in_expr(expr)
        .iter()
        .find_map(|e| match e {
            Expr::Attribute(a) if a.attr.as_str() == "shape" => name_of(&a.value),
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a) if a.attr.as_str() == "size" => name_of(&a.value),
                _ => None,
            },
            _ => None,
        })
}

fn name_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Name(n) => Some(n.id.as_str().to_owned()),
        _ => None,
    }
}
