//! Device dispatch that cannot reach the NPU: `if`/`elif` chains over known device names that
//! raise for every other device, and device choices among literal names that leave the NPU out.

use super::{checked_backend, is_device_like};
use crate::semantic::Semantic;
use crate::source::ast::{self, CmpOp, Expr, Ranged, Stmt};

pub(super) const UNKNOWN_DEVICE: &str = "this device dispatch raises for any device it does not list, and it \
     lists no npu, so on the NPU it stops here; add an `\"npu\"` branch (see P_DEV.md)";

/// The `raise` in the `else` of an `if`/`elif` chain comparing a device with known device
/// strings (`"cuda"`, `"mps"`, `"cpu"`, …) none of which is `"npu"`: the helper fails for the NPU.
pub(super) fn unknown_device_raise<'a>(
    sem: &Semantic<'a>,
    stmt: &'a Stmt,
    s: &'a ast::StmtIf,
) -> Option<(&'a Stmt, Vec<&'a Expr>)> {
    // An `elif` is part of the chain its first `if` starts.
    if let Some(Stmt::If(p)) = sem.stmts().last().copied()
        && p.orelse
            .first()
            .is_some_and(|first| std::ptr::eq(first, stmt))
    {
        return None;
    }
    let mut known = 0;
    let mut tests = Vec::new();
    let mut current = s;
    loop {
        known += devices_tested(&current.test)?;
        tests.push(current.test.as_ref());
        match current.orelse.as_slice() {
            [Stmt::If(next)] => current = next,
            [raise @ Stmt::Raise(_), ..] if known >= 2 => return Some((raise, tests)),
            _ => return None,
        }
    }
}

/// A `raise` right after `if` statements that each compare a device with known device strings
/// and return, none naming the NPU: every other device, the NPU among them, gets here. The
/// tests of those `if` statements.
pub(super) fn raise_after_device_checks<'a>(
    sem: &Semantic<'a>,
    stmt: &'a Stmt,
) -> Option<Vec<&'a Expr>> {
    let body = match sem.stmts().last().copied() {
        Some(Stmt::FunctionDef(f)) => &f.body,
        Some(Stmt::AsyncFunctionDef(f)) => &f.body,
        _ => return None,
    };
    let at = body.iter().position(|b| std::ptr::eq(b, stmt))?;
    let mut known = 0;
    let mut tests = Vec::new();
    for prev in body[..at].iter().rev() {
        let Stmt::If(s) = prev else { break };
        let mut current = s;
        loop {
            known += devices_tested(&current.test)?;
            tests.push(current.test.as_ref());
            match current.orelse.as_slice() {
                [Stmt::If(next)] => current = next,
                [] => break,
                _ => return None,
            }
        }
    }
    (known >= 2).then_some(tests)
}

/// How many device names a test compares a device with, if it only compares with device
/// names and none is the NPU.
fn devices_tested(test: &Expr) -> Option<usize> {
    let names = device_literals_tested(test)?;
    (!names.iter().any(|n| n.starts_with("npu"))).then_some(names.len())
}

/// The device strings a test compares a device-like value with (`device == "cuda"`,
/// `device.type in ("cuda", "mps")`, `"cuda" in device`, `str(device).startswith("mps")`).
fn device_literals_tested(test: &Expr) -> Option<Vec<&str>> {
    let (subject, literals): (&Expr, Vec<&Expr>) = match test {
        Expr::Compare(c) => {
            let [op] = c.ops.as_slice() else { return None };
            let [right] = c.comparators.as_slice() else {
                return None;
            };
            match (op, right) {
                (CmpOp::Eq | CmpOp::Is, _) => (c.left.as_ref(), vec![right]),
                (CmpOp::In, Expr::Name(_) | Expr::Attribute(_)) => (right, vec![c.left.as_ref()]),
                (CmpOp::In, Expr::Tuple(t)) => (c.left.as_ref(), t.elts.iter().collect()),
                (CmpOp::In, Expr::List(l)) => (c.left.as_ref(), l.elts.iter().collect()),
                _ => return None,
            }
        }
        Expr::Call(call) => match call.func.as_ref() {
            Expr::Attribute(a) if a.attr.as_str() == "startswith" => {
                (a.value.as_ref(), call.args.iter().collect())
            }
            _ => return None,
        },
        _ => return None,
    };
    if !is_device_like(subject) {
        return None;
    }
    let strings: Vec<&str> = literals
        .iter()
        .filter_map(|e| match e {
            Expr::Constant(c) => match &c.value {
                ast::Constant::Str(s) => Some(s.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    if strings.is_empty() || !strings.iter().all(|s| is_device_name(s)) {
        return None;
    }
    Some(strings)
}

pub(super) fn is_device_name(s: &str) -> bool {
    let base = s.split(':').next().unwrap_or(s);
    matches!(
        base,
        "cuda" | "mps" | "xpu" | "cpu" | "npu" | "hpu" | "tpu" | "xla" | "gpu"
    )
}

/// `"mps" if torch.backends.mps.is_available() else "cpu"`: a device choice among literal
/// device strings, made by availability checks, none of which is the NPU. A choice that names
/// `"cuda"` is left to `P_ENT`, since `transfer_to_npu` remaps both its check and its string.
pub(super) fn device_choice_without_npu(sem: &Semantic<'_>, e: &ast::ExprIfExp) -> Option<String> {
    // The `else` of an outer choice is judged with it.
    if let Some(Expr::IfExp(outer)) = sem.parent_expr()
        && outer.orelse.range() == e.range
    {
        return None;
    }
    let mut names: Vec<&str> = Vec::new();
    let mut current = e;
    loop {
        checked_backend_in(sem, &current.test)?;
        names.push(device_string(&current.body)?);
        match current.orelse.as_ref() {
            Expr::IfExp(next) => current = next,
            last => {
                names.push(device_string(last)?);
                break;
            }
        }
    }
    if names
        .iter()
        .any(|n| n.starts_with("npu") || n.starts_with("cuda"))
    {
        return None;
    }
    Some(format!(
        "this device choice knows only {}, so on an NPU machine it picks the CPU; check \
         `torch.npu.is_available()` first and choose \"npu\" (see P_DEV.md)",
        names.join("/")
    ))
}

fn checked_backend_in(sem: &Semantic<'_>, test: &Expr) -> Option<&'static str> {
    crate::analysis::find_in_expr(test)
        .into_iter()
        .find_map(|e| match e {
            Expr::Call(call) => checked_backend(sem, call),
            _ => None,
        })
}

fn device_string(expr: &Expr) -> Option<&str> {
    let Expr::Constant(c) = expr else { return None };
    let ast::Constant::Str(s) = &c.value else {
        return None;
    };
    is_device_name(s).then_some(s.as_str())
}
