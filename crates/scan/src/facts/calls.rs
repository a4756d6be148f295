//! What a call's name says: a runtime patcher builder, a name an optimizer may be built by, and
//! the qualified names that build an optimizer (or a trainer that also steps it).

use crate::source::ast::Expr;

/// Names of the runtime patcher's builders.
pub(super) fn is_patcher_builder(name: &str) -> bool {
    matches!(name, "build_vla_patcher" | "build_npu_patcher")
}

/// The last name of a called expression (`f` in `f(...)`, `m.f(...)`).
pub(super) fn called_name(func: &Expr) -> &str {
    match func {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        _ => "",
    }
}

/// The expression is a call of a patcher builder.
pub(super) fn is_patcher_call(expr: &Expr) -> bool {
    matches!(expr, Expr::Call(c) if is_patcher_builder(called_name(&c.func)))
}

/// A name that may build an optimizer; only these are resolved (resolving allocates).
pub(super) fn may_build_optimizer(name: &str) -> bool {
    name.contains("Adam")
        || name.starts_with("create_optimizer")
        || matches!(
            name,
            "SGD"
                | "RMSprop"
                | "Adagrad"
                | "Adadelta"
                | "ASGD"
                | "LBFGS"
                | "Rprop"
                | "Adafactor"
                | "Lion"
                | "LAMB"
                | "FusedLAMB"
                | "FusedSGD"
                | "NpuFusedSGD"
                | "Muon"
                | "initialize"
                | "Trainer"
        )
}

/// Where a qualified name builds an optimizer: `Some(true)` for a trainer that also steps it.
pub(super) fn optimizer_source(qualified: &str) -> Option<bool> {
    const OPTIMIZER_MODULES: &[&str] = &[
        "torch.optim.",
        "torch_npu.optim.",
        "apex.optimizers.",
        "bitsandbytes.optim.",
        "timm.optim.",
        "transformers.optimization.",
        "deepspeed.ops.",
    ];
    if matches!(
        qualified,
        "lightning.Trainer"
            | "lightning.pytorch.Trainer"
            | "pytorch_lightning.Trainer"
            | "transformers.Trainer"
    ) {
        return Some(true);
    }
    let optimizer = (OPTIMIZER_MODULES.iter().any(|m| qualified.starts_with(m))
        && !qualified.starts_with("torch.optim.lr_scheduler")
        && !qualified.starts_with("torch.optim.swa_utils"))
        || matches!(
            qualified,
            "transformers.AdamW" | "deepspeed.initialize" | "bitsandbytes.optim"
        );
    optimizer.then_some(false)
}
