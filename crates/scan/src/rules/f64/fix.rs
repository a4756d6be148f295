//! The automatic fix of float64 on the device: use float32. Unsafe: values lose precision
//! (about 7 significant digits instead of 16), which matters for sums of many terms,
//! normalization statistics and anything compared for exact equality.

use crate::checker::Checker;
use crate::fix;
use crate::source::ast::{Expr, Ranged};
use crate::source::{TextRange, TextSize};
use issue_model::{Applicability, Fix};

/// The fix of a reported expression: `x.double()` → `x.float()`, `torch.float64` /
/// `torch.double` → `torch.float32`, and a numpy conversion gets `.float()` after it.
pub(super) fn float32_fix(cx: &Checker<'_>, expr: &Expr) -> Option<Fix> {
    let unsafe_fix = |message: &str, range: TextRange, content: String| {
        Some(fix::replacement(
            Applicability::Unsafe,
            message,
            range,
            content,
        ))
    };
    match expr {
        Expr::Call(call) => {
            if let Expr::Attribute(a) = call.func.as_ref()
                && a.attr.as_str() == "double"
                && cx.slice(call.func.range()).ends_with("double")
            {
                let end = call.func.end();
                let start = end - TextSize::new(6);
                return unsafe_fix(
                    "cast to float32 instead (.double() → .float())",
                    TextRange::new(start, end),
                    "float".to_owned(),
                );
            }
            unsafe_fix(
                "convert the array to float32 as it becomes a tensor (append .float())",
                TextRange::empty(expr.end()),
                ".float()".to_owned(),
            )
        }
        Expr::Attribute(_) => {
            let src = cx.slice(expr.range());
            let prefix = src
                .strip_suffix(".float64")
                .or_else(|| src.strip_suffix(".double"))?;
            if prefix.is_empty() || prefix.contains(char::is_whitespace) {
                return None;
            }
            unsafe_fix(
                "use float32 instead of float64",
                expr.range(),
                format!("{prefix}.float32"),
            )
        }
        _ => None,
    }
}
