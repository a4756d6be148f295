//! The automatic fix of a flash-attn selection: `"flash_attention_2"` → `"sdpa"`, and a
//! `use_flash_attention_2=True` switch (or a flash flag's `True` default) → `False`. Unsafe:
//! the model then runs SDPA, which computes the same attention at another speed and memory.

use crate::checker::Checker;
use crate::fix;
use crate::source::ast::{self, Expr, Ranged, Stmt};
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
            let sdpa = fix::requote(src, "sdpa")?;
            let message = format!("use SDPA instead of flash-attn ({src} → {sdpa})");
            (sdpa, message)
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

/// The fix of an unguarded `from flash_attn import flash_attn_func [as name]`: guard the import
/// and define, where flash-attn is missing, a function of the same name and layout
/// (`(batch, seq, heads, dim)`) that runs SDPA. Unsafe: SDPA is another kernel (speed, memory),
/// and with a causal mask and fewer query than key positions flash-attn aligns the mask to the
/// end while SDPA aligns it to the start.
pub(super) fn sdpa_fallback(cx: &Checker<'_>, stmt: &Stmt) -> Option<Fix> {
    let Stmt::ImportFrom(from) = stmt else {
        return None;
    };
    let plain = from.level.as_ref().is_none_or(|l| l.to_u32() == 0);
    let [alias] = from.names.as_slice() else {
        return None;
    };
    if !plain
        || from.module.as_ref().map(ast::Identifier::as_str) != Some("flash_attn")
        || alias.name.as_str() != "flash_attn_func"
    {
        return None;
    }
    let name = alias
        .asname
        .as_ref()
        .map_or("flash_attn_func", ast::Identifier::as_str);
    let text = cx.file().text;
    let start = usize::from(stmt.start());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let indent = &text[line_start..start];
    if !indent.chars().all(|c| c == ' ' || c == '\t') {
        return None;
    }
    // A comment after the import stays on the import's line.
    let end = usize::from(stmt.end());
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    let rest = text[end..line_end].trim_end_matches('\r');
    let (range, comment) = if rest.trim_start().starts_with('#') {
        let end = crate::source::TextSize::try_from(end + rest.len()).ok()?;
        (crate::source::TextRange::new(stmt.start(), end), rest)
    } else {
        (stmt.range(), "")
    };
    let import = format!("{}{comment}", cx.slice(stmt.range()));
    let body = [
        "try:".to_owned(),
        format!("    {import}"),
        "except ImportError:  # no flash-attn (as on the NPU): the same attention through SDPA"
            .to_owned(),
        format!("    def {name}(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False):"),
        "        import torch.nn.functional as F".to_owned(),
        String::new(),
        "        if k.shape[2] != q.shape[2]:  # grouped-query attention: repeat the k/v heads"
            .to_owned(),
        "            k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)".to_owned(),
        "            v = v.repeat_interleave(q.shape[2] // v.shape[2], dim=2)".to_owned(),
        "        out = F.scaled_dot_product_attention(".to_owned(),
        "            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),".to_owned(),
        "            dropout_p=dropout_p, is_causal=causal, scale=softmax_scale,".to_owned(),
        "        )".to_owned(),
        "        return out.transpose(1, 2)".to_owned(),
    ];
    let mut content = String::new();
    for (i, line) in body.iter().enumerate() {
        if i > 0 {
            content.push('\n');
            if !line.is_empty() {
                content.push_str(indent);
            }
        }
        content.push_str(line);
    }
    Some(fix::replacement(
        Applicability::Unsafe,
        format!(
            "guard the flash-attn import and fall back to SDPA in `{name}` where flash-attn is missing"
        ),
        range,
        content,
    ))
}
