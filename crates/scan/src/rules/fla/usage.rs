//! `P_FLA`'s checks of CUDA-only libraries where they are used rather than imported:
//! bitsandbytes quantization (config classes, `load_in_4bit`/`load_in_8bit`/`bnb_4bit_*`
//! keywords, `bnb.*` classes and optimizers, k-bit training preparation), `torch.compile`, and
//! flash-attn selected through parameter and field defaults.

use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};

pub(super) const BNB: &str = "bitsandbytes quantization runs CUDA kernels only, so loading or \
     training this model fails on the NPU; load full-precision (bf16) weights and use \
     torch.optim.AdamW (see P_FLA.md)";

pub(super) const COMPILE: &str = "torch.compile lowers through inductor to Triton kernels, which \
     do not exist on the NPU (transfer_to_npu forces has_triton() to False); run eagerly on the \
     NPU or compile with a torch_npu backend (see P_FLA.md)";

pub(super) const FLAG: &str = "this flag turns flash-attn on by default, and the CUDA-only \
     flash_attn package is missing on the NPU; default it to False or select \"sdpa\" (see P_FLA.md)";

/// `"flash_attention_2"`, `"flash_attention_3"` or a hub flash-attn kernel id
/// (`"kernels-community/flash-attn3"`): an attention implementation that needs CUDA kernels.
pub(super) fn is_flash_value(expr: &Expr) -> bool {
    let Expr::Constant(c) = expr else {
        return false;
    };
    let ast::Constant::Str(s) = &c.value else {
        return false;
    };
    matches!(s.as_str(), "flash_attention_2" | "flash_attention_3")
        || (s.starts_with("kernels-community/") && s.contains("flash"))
}

fn is_true(expr: &Expr) -> bool {
    matches!(expr, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)))
}

/// The short name a call or reference ends in (`BitsAndBytesConfig`, `compile`).
fn short_name(expr: &Expr) -> &str {
    match expr {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        _ => "",
    }
}

/// A quantization config class of bitsandbytes (transformers', diffusers' or peft's).
fn is_bnb_config(name: &str) -> bool {
    matches!(name, "BitsAndBytesConfig" | "DiffusersBitsAndBytesConfig")
}

/// k-bit training preparation helpers (peft), which expect bitsandbytes-quantized layers.
fn is_kbit_prep(name: &str) -> bool {
    matches!(
        name,
        "prepare_model_for_kbit_training" | "prepare_model_for_int8_training"
    )
}

/// A keyword that asks for bitsandbytes quantization: `load_in_4bit=True`,
/// `load_in_8bit=True`, or any `bnb_4bit_*` / `bnb_8bit_*` setting.
fn is_bnb_keyword(name: &str, value: &Expr) -> bool {
    (matches!(name, "load_in_4bit" | "load_in_8bit") && is_true(value))
        || name.starts_with("bnb_4bit_")
        || name.starts_with("bnb_8bit_")
}

/// The range to report for a call that uses bitsandbytes: a quantization config, a k-bit
/// preparation helper, or a call with a bitsandbytes keyword (reported at the keyword).
pub(super) fn bnb_call(call: &ast::ExprCall) -> Option<TextRange> {
    let name = short_name(&call.func);
    if is_bnb_config(name) || is_kbit_prep(name) {
        return Some(call.range());
    }
    call.keywords
        .iter()
        .find(|k| {
            k.arg
                .as_ref()
                .is_some_and(|a| is_bnb_keyword(a.as_str(), &k.value))
        })
        .map(Ranged::range)
}

/// `{"load_in_4bit": True}`: the first bitsandbytes entry of a dict literal.
pub(super) fn bnb_dict_entry(dict: &ast::ExprDict) -> Option<TextRange> {
    dict.keys.iter().zip(&dict.values).find_map(|(k, v)| {
        let Some(Expr::Constant(c)) = k else {
            return None;
        };
        let ast::Constant::Str(s) = &c.value else {
            return None;
        };
        is_bnb_keyword(s, v).then(|| v.range())
    })
}

/// `kwargs["load_in_8bit"] = True`: a bitsandbytes setting stored into a keyword dict.
pub(super) fn bnb_subscript_store(assign: &ast::StmtAssign) -> Option<TextRange> {
    assign.targets.iter().find_map(|target| {
        let Expr::Subscript(sub) = target else {
            return None;
        };
        let Expr::Constant(c) = sub.slice.as_ref() else {
            return None;
        };
        let ast::Constant::Str(key) = &c.value else {
            return None;
        };
        // Only the switches: `bnb_4bit_*` keys are also written when a config serializes itself.
        (matches!(key.as_str(), "load_in_4bit" | "load_in_8bit") && is_true(&assign.value))
            .then(|| target.range())
    })
}

/// A reference to a bitsandbytes class, function or optimizer (`bnb.optim.AdamW8bit`, called or
/// only chosen into a variable; `bnb.nn.Linear4bit(...)`), the outermost attribute of the
/// chain, not inside `isinstance`/`issubclass` (recognising quantized layers is portable).
pub(super) fn bnb_reference(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let Expr::Attribute(attr) = expr else {
        return false;
    };
    if let Some(Expr::Attribute(outer)) = sem.parent_expr()
        && std::ptr::eq(outer.value.as_ref(), expr)
    {
        return false;
    }
    if !sem.resolves_with_prefix(&attr.value, "bitsandbytes") {
        return false;
    }
    !sem.exprs().iter().any(|e| {
        matches!(e, Expr::Call(c) if matches!(short_name(&c.func), "isinstance" | "issubclass" | "hasattr"))
    })
}

/// `torch.compile(...)` or `@torch.compile` (with or without arguments).
pub(super) fn is_compile(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let func = match expr {
        Expr::Call(c) => c.func.as_ref(),
        other => other,
    };
    sem.resolves_to(func, "torch.compile")
}

/// The defaults of a signature or class body that select flash-attn by themselves:
/// `attn_implementation="flash_attention_2"` as a parameter default, and
/// `use_flash_attention_2: bool = True` (or `= field(default=True)`) as a parameter or field
/// default. Returns the default expressions.
pub(super) fn flash_defaults(stmt: &Stmt) -> Vec<&Expr> {
    let mut out = Vec::new();
    for (name, default) in defaults(stmt) {
        let flag = flag_value(default);
        if (is_flash_value(default) && name.contains("attn"))
            || (flag.is_some_and(is_true) && names_flash_attention_2(name))
        {
            out.push(default);
        }
    }
    out
}

/// `(name, default)` of every parameter with a default of a function definition, or of an
/// annotated (or plain) class-body field with a value.
pub(super) fn defaults(stmt: &Stmt) -> Vec<(&str, &Expr)> {
    match stmt {
        Stmt::FunctionDef(f) => params(&f.args),
        Stmt::AsyncFunctionDef(f) => params(&f.args),
        Stmt::AnnAssign(a) => match (a.target.as_ref(), a.value.as_deref()) {
            (Expr::Name(n), Some(v)) => vec![(n.id.as_str(), v)],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn params(args: &ast::Arguments) -> Vec<(&str, &Expr)> {
    args.posonlyargs
        .iter()
        .chain(&args.args)
        .chain(&args.kwonlyargs)
        .filter_map(|a| a.default.as_deref().map(|d| (a.def.arg.as_str(), d)))
        .collect()
}

/// The value a field default gives: the default itself, or `field(default=...)`'s.
pub(super) fn flag_value(default: &Expr) -> Option<&Expr> {
    match default {
        Expr::Call(c) if short_name(&c.func) == "field" => c
            .keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "default"))
            .map(|k| &k.value),
        Expr::Constant(_) => Some(default),
        _ => None,
    }
}

/// A flag named after the transformers switch itself (`use_flash_attention_2`, `flash_attn_2`),
/// not a capability flag (`_supports_flash_attn_2`: the model can use it, nothing selects it).
fn names_flash_attention_2(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !is_capability_flag(&lower)
        && [
            "flash_attention_2",
            "flash_attn_2",
            "flash_attn2",
            "flash_attention2",
        ]
        .iter()
        .any(|n| lower.contains(n))
}

/// A flag whose name says flash attention (`enable_flash`, `use_flash_attn`), which
/// [`selector_names`] must see select a flash value before it counts.
pub(super) fn is_flash_flag_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("flash") && !is_capability_flag(&lower)
}

/// `_supports_flash_attn_2`, `supports_flash`, `can_use_flash`, `is_flash_available`.
fn is_capability_flag(lower: &str) -> bool {
    lower.contains("supports")
        || lower.contains("available")
        || lower.starts_with("can_")
        || lower.starts_with("_can_")
}

/// Names read by the tests of conditionals that choose a flash value
/// (`"flash_attention_2" if cfg.enable_flash else "sdpa"`, or an `if flag:` whose body binds
/// one), in `stmts`.
pub(super) fn selector_names<'a>(stmts: &[&'a Stmt], exprs: &[&'a Expr]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for e in exprs {
        if let Expr::IfExp(i) = e
            && (is_flash_value(&i.body) || is_flash_value(&i.orelse))
        {
            read_names(&i.test, &mut out);
        }
    }
    for s in stmts {
        if let Stmt::If(i) = s
            && crate::analysis::try_each_expr(&i.body, |e| {
                if is_flash_value(e) {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                }
            })
        {
            read_names(&i.test, &mut out);
        }
    }
    out
}

fn read_names<'a>(test: &'a Expr, out: &mut Vec<&'a str>) {
    for e in crate::analysis::find_in_expr(test) {
        match e {
            Expr::Name(n) => out.push(n.id.as_str()),
            Expr::Attribute(a) => out.push(a.attr.as_str()),
            _ => {}
        }
    }
}

/// The flash flags of a file (`enable_flash: bool = field(default=True)`, a parameter
/// `use_flash_attn=True`) that a conditional of the same file turns into a flash-attn
/// selection. Flags named after `flash_attention_2` itself are reported by
/// [`flash_defaults`].
pub(super) fn selecting_flags(body: &[Stmt]) -> Vec<&Expr> {
    let mut walk = FlagWalk::default();
    crate::walk::Visitor::visit_body(&mut walk, body);
    let selectors = selector_names(&walk.stmts, &walk.exprs);
    walk.flags
        .into_iter()
        .filter(|(name, _)| selectors.contains(name))
        .map(|(_, default)| default)
        .collect()
}

#[derive(Default)]
struct FlagWalk<'a> {
    flags: Vec<(&'a str, &'a Expr)>,
    stmts: Vec<&'a Stmt>,
    exprs: Vec<&'a Expr>,
}

impl<'a> crate::walk::Visitor<'a> for FlagWalk<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        for (name, default) in defaults(stmt) {
            if is_flash_flag_name(name)
                && !names_flash_attention_2(name)
                && flag_value(default).is_some_and(is_true)
            {
                self.flags.push((name, default));
            }
        }
        if matches!(stmt, Stmt::If(_)) {
            self.stmts.push(stmt);
        }
        crate::walk::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if matches!(expr, Expr::IfExp(_)) {
            self.exprs.push(expr);
        }
        crate::walk::walk_expr(self, expr);
    }
}
