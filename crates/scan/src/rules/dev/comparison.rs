//! The automatic fix of a device or backend comparison: accept the NPU's value too.
//!
//! `x.type == "cuda"` becomes `x.type in ("cuda", "npu")`, `!=` becomes `not in`, and a
//! literal list that names `"cuda"` but not `"npu"` gets `"npu"` after it. On CUDA the
//! comparison gives what it gave before; on the NPU it now matches the NPU too.

use crate::checker::Checker;
use crate::fix;
use crate::source::ast::{self, CmpOp, Expr, Ranged};
use issue_model::{Applicability, Fix};

/// The fix of a reported comparison, when it has the simple shape the fix handles: one
/// operator, one string literal.
pub(super) fn fix(cx: &Checker<'_>, cmp: &ast::ExprCompare, whole: &Expr) -> Option<Fix> {
    let ([op], [right]) = (cmp.ops.as_slice(), cmp.comparators.as_slice()) else {
        return None;
    };
    let left = cmp.left.as_ref();
    let membership = |subject: &Expr, lit: &Expr, negated: bool| -> Option<Fix> {
        let (lit_src, npu) = npu_twin(cx, lit)?;
        let not = if negated { "not " } else { "" };
        let content = format!("{} {not}in ({lit_src}, {npu})", cx.slice(subject.range()));
        Some(fix::replacement(
            Applicability::Safe,
            format!("accept {npu} as well as {lit_src}"),
            whole.range(),
            content,
        ))
    };
    match op {
        CmpOp::Eq | CmpOp::Is | CmpOp::NotEq | CmpOp::IsNot => {
            let negated = matches!(op, CmpOp::NotEq | CmpOp::IsNot);
            if npu_twin(cx, right).is_some() {
                membership(left, right, negated)
            } else if npu_twin(cx, left).is_some() {
                membership(right, left, negated)
            } else {
                None
            }
        }
        CmpOp::In | CmpOp::NotIn => {
            let elts = match right {
                Expr::List(l) => &l.elts,
                Expr::Tuple(t) => &t.elts,
                Expr::Set(s) => &s.elts,
                _ => return None,
            };
            let (cuda, (lit_src, npu)) = elts
                .iter()
                .find_map(|e| npu_twin(cx, e).map(|twin| (e, twin)))?;
            Some(fix::edits(
                Applicability::Safe,
                format!("accept {npu} as well as {lit_src}"),
                vec![(
                    crate::source::TextRange::empty(cuda.end()),
                    format!(", {npu}"),
                )],
            ))
        }
        _ => None,
    }
}

/// For a `"cuda"`, `"cuda:N"` or `"nccl"` literal: its source and the NPU's value in the same
/// quotes.
fn npu_twin(cx: &Checker<'_>, expr: &Expr) -> Option<(String, String)> {
    let Expr::Constant(c) = expr else { return None };
    let ast::Constant::Str(value) = &c.value else {
        return None;
    };
    let npu = if value == "nccl" {
        "hccl".to_owned()
    } else {
        let index = value.strip_prefix("cuda")?;
        if !(index.is_empty()
            || index
                .strip_prefix(':')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
        {
            return None;
        }
        format!("npu{index}")
    };
    let src = cx.slice(expr.range());
    let quote = src.chars().next().filter(|q| matches!(q, '"' | '\''))?;
    if !src.ends_with(quote) || src.len() != value.len() + 2 {
        return None;
    }
    Some((src.to_owned(), format!("{quote}{npu}{quote}")))
}
