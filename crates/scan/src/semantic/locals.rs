//! Local facts of one function body: which names were assigned from which calls, with
//! `device=` or a move to a device, and whether a value is moved right after it is created.

use super::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use foldhash::HashMap;
use std::ops::ControlFlow;

/// A name's assignment inside one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Where the assignment statement is.
    pub range: TextRange,
    /// The qualified name of the call that creates the value (`torch.arange`), looking
    /// through method chains on its result (`torch.full(...).to(d)` is `torch.full`).
    pub call: Option<String>,
    /// The value is a call given a `device=` keyword.
    pub has_device_kw: bool,
    /// The value moves a tensor to a device: a call of `.to(...)`, `.cuda()`, `.npu()` or
    /// `.type_as(...)` at its top.
    pub moves_to_device: bool,
    /// The value is `<same name>.to(...)` (or `.cuda()`/`.npu()`): an earlier binding moved.
    pub moves_itself: bool,
}

/// Facts about names assigned in one function body (nested functions excluded).
#[derive(Debug, Clone, Default)]
pub struct LocalFacts {
    assignments: HashMap<String, Vec<Assignment>>,
}

impl LocalFacts {
    /// Every assignment of `name` in the function, in source order.
    pub fn assignments(&self, name: &str) -> &[Assignment] {
        self.assignments.get(name).map_or(&[], Vec::as_slice)
    }

    /// Some assignment of `name` was a call with `device=` or moved it to a device.
    pub fn assigned_on_device(&self, name: &str) -> bool {
        self.assignments(name)
            .iter()
            .any(|a| a.has_device_kw || a.moves_to_device)
    }

    /// `name` is re-assigned after `offset` from `name.to(...)` (or `.cuda()`/`.npu()`): the
    /// value created at `offset` is moved to a device right after.
    pub fn moved_after(&self, name: &str, offset: crate::source::TextSize) -> bool {
        self.assignments(name)
            .iter()
            .any(|a| a.range.start() > offset && a.moves_itself)
    }
}

/// Collect the assignments of a function body, not descending into nested functions and
/// classes.
pub(super) fn collect_assignments(semantic: &Semantic<'_>, body: &[Stmt], out: &mut LocalFacts) {
    for stmt in body {
        match stmt {
            Stmt::Assign(a) => {
                for target in &a.targets {
                    record_target(semantic, target, &a.value, stmt.range(), out);
                }
            }
            Stmt::AnnAssign(a) => {
                if let Some(value) = &a.value {
                    record_target(semantic, &a.target, value, stmt.range(), out);
                }
            }
            Stmt::For(s) => {
                collect_assignments(semantic, &s.body, out);
                collect_assignments(semantic, &s.orelse, out);
            }
            Stmt::AsyncFor(s) => {
                collect_assignments(semantic, &s.body, out);
                collect_assignments(semantic, &s.orelse, out);
            }
            Stmt::While(s) => {
                collect_assignments(semantic, &s.body, out);
                collect_assignments(semantic, &s.orelse, out);
            }
            Stmt::If(s) => {
                collect_assignments(semantic, &s.body, out);
                collect_assignments(semantic, &s.orelse, out);
            }
            Stmt::With(s) => collect_assignments(semantic, &s.body, out),
            Stmt::AsyncWith(s) => collect_assignments(semantic, &s.body, out),
            Stmt::Try(s) => {
                collect_assignments(semantic, &s.body, out);
                for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                    collect_assignments(semantic, &h.body, out);
                }
                collect_assignments(semantic, &s.orelse, out);
                collect_assignments(semantic, &s.finalbody, out);
            }
            _ => {}
        }
    }
}

/// The qualified name of the call that creates a value, through method calls on its result.
fn creating_call(semantic: &Semantic<'_>, call: &ast::ExprCall) -> Option<String> {
    if let Some(q) = semantic.resolve(&call.func) {
        return Some(q);
    }
    match call.func.as_ref() {
        Expr::Attribute(attr) => match attr.value.as_ref() {
            Expr::Call(inner) => creating_call(semantic, inner),
            _ => None,
        },
        _ => None,
    }
}

fn record_target(
    semantic: &Semantic<'_>,
    target: &Expr,
    value: &Expr,
    range: TextRange,
    out: &mut LocalFacts,
) {
    let Expr::Name(name) = target else {
        return;
    };
    let name = name.id.as_str();
    let (call, has_device_kw, moves_to_device, moves_itself) = match value {
        Expr::Call(call) => {
            let has_device_kw = call
                .keywords
                .iter()
                .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"));
            let (moves, itself) = match call.func.as_ref() {
                Expr::Attribute(attr)
                    if matches!(attr.attr.as_str(), "to" | "cuda" | "npu" | "type_as") =>
                {
                    (
                        true,
                        matches!(attr.value.as_ref(), Expr::Name(n) if n.id.as_str() == name),
                    )
                }
                _ => (false, false),
            };
            (creating_call(semantic, call), has_device_kw, moves, itself)
        }
        _ => (None, false, false, false),
    };
    let assignment = Assignment {
        range,
        call,
        has_device_kw,
        moves_to_device,
        moves_itself,
    };
    // Allocate the key only for a name not seen before.
    match out.assignments.get_mut(name) {
        Some(list) => list.push(assignment),
        None => {
            out.assignments.insert(name.to_owned(), vec![assignment]);
        }
    }
}

/// The body hands the training over to a trainer object: it builds one (`SomeTrainer(...)`)
/// or calls `.train(...)`/`.fit(...)` on one (`trainer.train()`, `self.trainer.fit(model)`).
/// Such a function (a script's `train()`) runs the whole training once; it is not a step.
pub(super) fn hands_training_over(body: &[Stmt]) -> bool {
    let trainer = |e: &Expr| {
        crate::semantic::dotted(e)
            .rsplit('.')
            .next()
            .is_some_and(|last| last.to_ascii_lowercase().contains("trainer"))
    };
    crate::walk::try_each_expr(body, |e| {
        let Expr::Call(call) = e else {
            return ControlFlow::Continue(());
        };
        let hands_over = match call.func.as_ref() {
            Expr::Attribute(a) if matches!(a.attr.as_str(), "train" | "fit") => trainer(&a.value),
            Expr::Name(n) => n.id.as_str().ends_with("Trainer"),
            Expr::Attribute(a) => a.attr.as_str().ends_with("Trainer"),
            _ => false,
        };
        if hands_over {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
}

/// A step-named function that only evaluates: it computes under `torch.no_grad()` or
/// `torch.inference_mode()` (a `with` block or a decorator), runs no backward pass or optimizer
/// step, binds no loss, and its name does not say it trains (an agent's `run_step` that drives
/// the vehicle, a policy's `act_step`). Its host work goes to the robot or the simulator, not
/// into a training step.
pub(crate) fn evaluates_only(name: &str, decorators: &[Expr], body: &[Stmt]) -> bool {
    let lower = name.to_ascii_lowercase();
    if ["train", "learn", "update", "loss", "optim"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return false;
    }
    let no_grad = |e: &Expr| {
        let callee = match e {
            Expr::Call(c) => c.func.as_ref(),
            other => other,
        };
        crate::semantic::dotted(callee)
            .rsplit('.')
            .next()
            .is_some_and(|last| matches!(last, "no_grad" | "inference_mode"))
    };
    let (mut evaluates, mut trains) = (decorators.iter().any(no_grad), false);
    crate::walk::try_each_expr(body, |e| {
        match e {
            Expr::Call(c) => {
                evaluates |= no_grad(e);
                if let Expr::Attribute(a) = c.func.as_ref() {
                    let receiver = crate::semantic::dotted(&a.value).to_ascii_lowercase();
                    trains |= matches!(a.attr.as_str(), "backward" | "manual_backward")
                        || (a.attr.as_str() == "step"
                            && (receiver.contains("optim") || receiver.contains("scaler")));
                }
            }
            Expr::Name(n) if matches!(n.ctx, ast::ExprContext::Store) => {
                trains |= n.id.as_str().to_ascii_lowercase().contains("loss");
            }
            _ => {}
        }
        if trains {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    evaluates && !trains
}
