//! The automatic fix of a flash-attn selection: `"flash_attention_2"` → `"sdpa"`, and a
//! `use_flash_attention_2=True` switch (or a flash flag's `True` default) → `False`. Unsafe:
//! the model then runs SDPA, which computes the same attention at another speed and memory.

use crate::checker::Checker;
use crate::fix;
use crate::source::ast::{self, Expr, Ranged};
use issue_model::{Applicability, Fix};

/// The fix of the reported expression, when it is one of the shapes above.
pub(super) fn flash_fix(cx: &Checker<'_>, expr: &Expr) -> Option<Fix> {
    let target = match expr {
        Expr::Call(call) => call
            .keywords
            .iter()
            .find(|k| {
                k.arg
                    .as_ref()
                    .is_some_and(|a| a.as_str() == "use_flash_attention_2")
            })
            .map(|k| &k.value)?,
        other => other,
    };
    let Expr::Constant(c) = target else {
        return None;
    };
    let (content, message) = match &c.value {
        ast::Constant::Str(s)
            if matches!(s.as_str(), "flash_attention_2" | "flash_attention_3") =>
        {
            let src = cx.slice(target.range());
            let quote = src.chars().next().filter(|q| matches!(q, '"' | '\''))?;
            (
                format!("{quote}sdpa{quote}"),
                format!("use SDPA instead of flash-attn ({src} → {quote}sdpa{quote})"),
            )
        }
        ast::Constant::Bool(true) => (
            "False".to_owned(),
            "turn the flash-attn switch off (True → False), so SDPA runs".to_owned(),
        ),
        _ => return None,
    };
    Some(fix::replacement(
        Applicability::Unsafe,
        message,
        target.range(),
        content,
    ))
}
