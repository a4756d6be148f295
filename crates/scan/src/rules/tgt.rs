//! `P_TGT`: per-step values (training targets, masks, metrics) computed on the host in device
//! code and turned back into tensors: numpy work or a `.cpu().numpy()` / `.tolist()` round trip.

use super::{Checker, Rule, RuleInfo};
use crate::analysis::{self, Function};
use crate::source::ast::{Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct HostTargets;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_TGT",
    name: "host-side-targets",
    category: Category::Semantic,
    severity: Severity::Warning,
    performance: true,
    project_level: false,
    fix_template: "references/fix-templates/P_TGT.md",
    summary: "A tensor built from numpy or a `.cpu().numpy()`/`.tolist()` round trip in device code, every step.",
    doc: include_str!("tgt.md"),
    check: &HostTargets,
};

/// Calls that turn host data into a tensor.
const TO_TENSOR: &[&str] = &[
    "torch.from_numpy",
    "torch.tensor",
    "torch.as_tensor",
    "torch.Tensor",
    "torch.FloatTensor",
    "torch.LongTensor",
    "torch.IntTensor",
    "torch.BoolTensor",
    "torch.DoubleTensor",
    "torch.HalfTensor",
    "torch.ByteTensor",
];

impl Rule for HostTargets {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let Some(def) = analysis::function_entry(cx.semantic(), stmt) else {
            return;
        };
        let Some(func) = Function::in_class(cx.semantic(), def) else {
            return;
        };
        if !analysis::in_step_code(cx.semantic()) {
            round_trip_helper(cx, def, &func);
            return;
        }
        let sem = cx.semantic();
        // Every such call names `from_numpy`, `*tensor` or `*Tensor`, or a name bound to one
        // of them: a function that does neither needs no walk.
        let text = cx.slice(def.range());
        if !text.contains("tensor")
            && !text.contains("Tensor")
            && !text.contains("from_numpy")
            && !sem.binds_any(|q| TO_TENSOR.contains(&q))
        {
            return;
        }
        let calls = analysis::find(func.body, |e| is_to_tensor(sem, e));
        let hits: Vec<_> = calls
            .iter()
            .filter_map(|occ| {
                let Expr::Call(call) = occ.expr else {
                    return None;
                };
                let arg = call.args.first()?;
                analysis::derives_from_host(sem, &func, arg, 0).then(|| occ.expr.range())
            })
            .collect();
        for range in hits {
            cx.report(
                range,
                "this tensor is built from host (numpy or `.cpu().numpy()`/`.tolist()`) data every step, \
                 a host-device sync and copy per step on the NPU; compute it on the device or in the dataset \
                 (see P_TGT.md)",
            );
        }
    }
}

/// A helper outside the step code proper (a target builder the loss or training step calls)
/// that takes a device tensor, pulls it to the host with `.cpu().numpy()`, and sends what it
/// computes from it back to a device: one issue at each pull, with the tensors sent back in
/// `related[]`. Data-loading code (datasets, collate functions) and setup code are left alone.
fn round_trip_helper<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) {
    let sem = cx.semantic();
    if in_data_code(sem) || sem.in_device_code() {
        return;
    }
    // A pull ends in `.numpy()`: most functions never spell it, which is cheaper to see than
    // to walk their bodies.
    if !cx.slice(def.range()).contains("numpy") {
        return;
    }
    let pulls = analysis::find(func.body, |e| {
        pulled_param(e).is_some_and(|n| func.is_param(n))
    });
    if pulls.is_empty() {
        return;
    }
    let back: Vec<_> = analysis::find(func.body, |e| is_to_tensor(sem, e))
        .into_iter()
        .filter(|occ| {
            let Expr::Call(call) = occ.expr else {
                return false;
            };
            call.args
                .first()
                .is_some_and(|arg| analysis::derives_from_host(sem, func, arg, 0))
                && goes_to_device(call, &occ.ancestors)
        })
        .map(|occ| occ.expr.range())
        .collect();
    if back.is_empty() {
        return;
    }
    let related: Vec<_> = back
        .iter()
        .map(|range| cx.related(*range, "the host result goes back to the device here"))
        .collect();
    for occ in pulls {
        let finding = cx.report(
            occ.expr.range(),
            "this helper pulls a device tensor to the host with `.cpu().numpy()`, computes on it and sends \
             the result back to the device, a host-device sync and two copies per call on the NPU; compute \
             it with torch ops on the device (see P_TGT.md)",
        );
        finding.related.clone_from(&related);
    }
}

/// A call that turns host data into a tensor.
fn is_to_tensor(sem: &crate::semantic::Semantic<'_>, expr: &Expr) -> bool {
    matches!(expr, Expr::Call(c) if sem.matches(&c.func, TO_TENSOR))
}

/// Datasets, collate functions and other code that runs in `DataLoader` workers.
fn in_data_code(sem: &crate::semantic::Semantic<'_>) -> bool {
    let dataset = sem.current_class().is_some_and(|c| {
        c.bases
            .iter()
            .any(|b| b.ends_with("Dataset") || b.ends_with("DataLoader") || b.ends_with("Sampler"))
    });
    let data_fn = sem.current_function().is_some_and(|f| {
        let name = f.name.to_ascii_lowercase();
        name.contains("collate") || name == "__getitem__" || name == "__iter__"
    });
    dataset || data_fn
}

/// For `p.cpu().numpy()` (any chain between `p` and `.numpy()` that goes through `.cpu()`,
/// e.g. `p.detach().cpu().numpy()`), the name `p`.
fn pulled_param(expr: &Expr) -> Option<&str> {
    let Expr::Call(call) = expr else {
        return None;
    };
    let Expr::Attribute(numpy) = call.func.as_ref() else {
        return None;
    };
    if numpy.attr.as_str() != "numpy" {
        return None;
    }
    let mut through_cpu = false;
    let mut cur = numpy.value.as_ref();
    loop {
        cur = match cur {
            Expr::Call(c) => c.func.as_ref(),
            Expr::Attribute(a) => {
                through_cpu |= a.attr.as_str() == "cpu";
                a.value.as_ref()
            }
            Expr::Subscript(s) => s.value.as_ref(),
            Expr::Name(n) => return through_cpu.then_some(n.id.as_str()),
            _ => return None,
        };
    }
}

/// The new tensor is created with a `device=` other than the CPU, or moved with an
/// immediate `.to(...)` / `.cuda()` that does not name the CPU.
fn goes_to_device(call: &crate::source::ast::ExprCall, ancestors: &[analysis::Node<'_>]) -> bool {
    let not_cpu = |e: &Expr| {
        !matches!(e, Expr::Constant(c)
            if matches!(&c.value, crate::source::ast::Constant::Str(s) if s == "cpu")
                || matches!(c.value, crate::source::ast::Constant::None))
    };
    if call
        .keywords
        .iter()
        .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device") && not_cpu(&k.value))
    {
        return true;
    }
    // The creation, then `.float()`-style conversions, then `.to(device)` / `.cuda()`.
    let mut chain = ancestors.iter().rev();
    while let Some(analysis::Node::Expr(Expr::Attribute(a))) = chain.next() {
        let Some(analysis::Node::Expr(Expr::Call(outer))) = chain.next() else {
            return false;
        };
        match a.attr.as_str() {
            "cuda" | "npu" => return true,
            "to" => return outer.args.first().is_some_and(not_cpu),
            "float" | "half" | "bfloat16" | "long" | "int" | "bool" | "contiguous" | "reshape"
            | "view" => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host round trip through a name that never spells `tensor`, `Tensor` or `from_numpy`
    /// in the step function is found.
    #[test]
    fn round_trip_through_alias() {
        let text = "import torch\n\
            from torch import as_tensor as to_t\n\
            class Policy(torch.nn.Module):\n    \
                def forward(self, x):\n        \
                    return x + to_t(x.cpu().numpy())\n";
        assert_eq!(super::super::reported_lines(&RULE, "m.py", text), [5]);
    }
}
