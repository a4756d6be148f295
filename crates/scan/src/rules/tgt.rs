//! `P_TGT`: per-step values (training targets, masks, metrics) computed on the host in device
//! code and turned back into tensors: numpy work or a `.cpu().numpy()` / `.tolist()` round trip.

use super::rnd::flow::{self, Function};
use super::{Checker, Rule, RuleInfo};
use crate::source::ast::{Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct HostTargets;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_TGT",
    name: "host-side-targets",
    category: Category::Semantic,
    severity: Severity::Warning,
    performance: true,
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
        let Some(def) = flow::function_entry(cx.semantic(), stmt) else {
            return;
        };
        if !flow::in_step_code(cx.semantic()) {
            return;
        }
        let Some(func) = Function::in_class(cx.semantic(), def) else {
            return;
        };
        let sem = cx.semantic();
        let calls = flow::find(func.body, |e| {
            sem.resolve_call(e)
                .is_some_and(|q| TO_TENSOR.contains(&q.as_str()))
        });
        let hits: Vec<_> = calls
            .iter()
            .filter_map(|occ| {
                let Expr::Call(call) = occ.expr else {
                    return None;
                };
                let arg = call.args.first()?;
                flow::derives_from_host(sem, &func, arg, 0).then(|| occ.expr.range())
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
