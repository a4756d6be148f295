//! CUDA capability checks that `transfer_to_npu` turns true on the NPU, gating a CUDA-only path.
//!
//! Under `transfer_to_npu`, `Tensor.is_cuda` is `Tensor.is_npu` and `torch.cuda` gets
//! `torch_npu.npu`'s `is_available`/`device_count` (the remap table, [`crate::remap`], read from
//! each pinned wheel's `contrib/transfer_to_npu.py`), so `if x.is_cuda:` and
//! `if torch.cuda.is_available():` are taken on the NPU. A check is reported only when every
//! pinned torch-npu version remaps it. When such a branch builds a CUDA extension, launches a Triton kernel,
//! compiles `FlexAttention` or calls a CUDA-only library, that path runs on the NPU and fails.
//! `x.device.type == "cuda"` stays false there, so a gate written that way is not reported
//! (and neither is its comparison).

use crate::remap::{self, Version};
use crate::semantic::Semantic;
use crate::source::ast::{self, CmpOp, Expr, Stmt, UnaryOp};
use std::ops::ControlFlow;

/// Libraries whose kernels exist only for CUDA (their import is `P_FLA`'s; the gate is ours).
const CUDA_ONLY_LIBRARIES: &[&str] = &[
    "flash_attn",
    "flash_attn_interface",
    "xformers",
    "mamba_ssm",
    "causal_conv1d",
    "selective_scan_cuda",
    "apex",
    "amp_C",
    "bitsandbytes",
    "triton",
    "deepspeed.ops",
    "torch.utils.cpp_extension",
    "torch_scatter",
    "pointnet2_ops",
    "tinycudann",
];

/// The check in `test` that turns true on the NPU, and whether the branch it selects is the
/// `else` branch (`if not x.is_cuda:`).
pub(super) fn remapped_check<'e>(sem: &Semantic<'_>, test: &'e Expr) -> Option<(&'e Expr, bool)> {
    match test {
        Expr::UnaryOp(u) if matches!(u.op, UnaryOp::Not) => {
            remapped_check(sem, &u.operand).map(|(e, negated)| (e, !negated))
        }
        // The branch a check selects does not depend on what it is combined with.
        Expr::BoolOp(b) => b.values.iter().find_map(|v| remapped_check(sem, v)),
        Expr::Compare(c) => {
            let [op] = c.ops.as_slice() else { return None };
            let [right] = c.comparators.as_slice() else {
                return None;
            };
            let (check, _) = remapped_check(sem, &c.left)?;
            let zero = matches!(right, Expr::Constant(k) if matches!(&k.value, ast::Constant::Int(i) if i.to_string() == "0"));
            match op {
                CmpOp::Gt | CmpOp::NotEq | CmpOp::GtE => Some((check, false)),
                CmpOp::Eq | CmpOp::LtE if zero => Some((check, true)),
                _ => None,
            }
        }
        _ => remap_reason(sem, test).map(|_| (test, false)),
    }
}

/// CUDA presence checks: true (or non-zero) when CUDA is there.
const CUDA_CHECKS: &[&str] = &["is_available", "device_count"];

/// Why `check` (`x.is_cuda`, `torch.cuda.is_available()`, `torch.cuda.device_count()`) turns
/// true on the NPU under `transfer_to_npu`, from the remap table; `None` when it is not such a
/// check or some pinned torch-npu version does not remap it.
fn remap_reason(sem: &Semantic<'_>, check: &Expr) -> Option<String> {
    match check {
        Expr::Attribute(a) if a.attr.as_str() == "is_cuda" => remap::every(Version::is_cuda_is_npu)
            .then(|| {
                let versions = remap::versions(Version::is_cuda_is_npu).unwrap_or_default();
                format!("{versions} sets Tensor.is_cuda to Tensor.is_npu")
            }),
        Expr::Call(call) => {
            let q = sem.resolve(&call.func)?;
            let name = q.strip_prefix("torch.cuda.")?;
            let remapped = |v: &Version| v.cuda_name_is_npu(name);
            (CUDA_CHECKS.contains(&name) && remap::every(remapped)).then(|| {
                let versions = remap::versions(remapped).unwrap_or_default();
                format!("{versions} copies torch_npu.npu.{name} onto torch.cuda")
            })
        }
        _ => None,
    }
}

/// The statements after `stmt` in its function when `body` (the branch `stmt` takes) always
/// returns or raises: what runs when the branch is not taken. Empty otherwise.
pub(super) fn after_early_exit<'a>(
    sem: &Semantic<'a>,
    stmt: &'a Stmt,
    body: &[Stmt],
) -> &'a [Stmt] {
    if !matches!(body.last(), Some(Stmt::Return(_) | Stmt::Raise(_))) {
        return &[];
    }
    let rest = match sem.stmts().last().copied() {
        Some(Stmt::FunctionDef(f)) => &f.body,
        Some(Stmt::AsyncFunctionDef(f)) => &f.body,
        _ => return &[],
    };
    rest.iter()
        .position(|b| std::ptr::eq(b, stmt))
        .map_or(&[], |at| &rest[at + 1..])
}

/// The CUDA-only thing `body` does, described, if any. A call through a name that `test` also
/// checks (`if kernel is not None and x.is_cuda: kernel(x)`, with `kernel` from a guarded
/// import) is not one: without the library on the NPU the name is unset and the branch is
/// not taken.
pub(super) fn cuda_only_path(
    sem: &Semantic<'_>,
    test: Option<&Expr>,
    body: &[Stmt],
) -> Option<String> {
    let checked: Vec<&str> = test
        .map(crate::analysis::find_in_expr)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match e {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        })
        .collect();
    // `if FLASH_AVAILABLE and x.is_cuda:`: a flag set by a guarded import is false on the NPU,
    // where the CUDA-only library is not installed.
    if checked.iter().any(|name| is_availability_flag(name)) {
        return None;
    }
    let mut found = None;
    crate::analysis::try_each_expr(body, |expr| {
        if let Expr::Call(call) = expr
            && let Expr::Name(n) = call.func.as_ref()
            && checked.contains(&n.id.as_str())
        {
            return ControlFlow::Continue(());
        }
        found = cuda_only_expr(sem, expr);
        if found.is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    found
}

/// Modules whose functions run on every device: what a torch fallback is written with.
const PORTABLE_ROOTS: &[&str] = &[
    "torch",
    "numpy",
    "math",
    "einops",
    "functools",
    "itertools",
    "operator",
    "builtins",
    "typing",
    "warnings",
    "logging",
    "random",
    "collections",
];

/// For a tensor-level gate (`if x.is_cuda: … else: …`) with a fallback branch: a call in the
/// CUDA branch of a function imported from a library outside torch that the fallback never
/// calls into, described. Such a branch exists to launch a compiled kernel (the fallback
/// computes the same with torch ops), and under `transfer_to_npu` the NPU takes it.
pub(super) fn imported_kernel(
    sem: &Semantic<'_>,
    test: &Expr,
    check: &Expr,
    branch: &[Stmt],
    fallback: &[Stmt],
) -> Option<String> {
    if fallback.is_empty() || !matches!(check, Expr::Attribute(a) if a.attr.as_str() == "is_cuda") {
        return None;
    }
    // `if kernel is not None and x.is_cuda:` / `if HAS_KERNEL and x.is_cuda:`: the test
    // already asks whether the library imported (see [`cuda_only_path`]).
    let checked: Vec<&str> = crate::analysis::find_in_expr(test)
        .into_iter()
        .filter_map(|e| match e {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        })
        .collect();
    if checked.iter().any(|name| is_availability_flag(name)) {
        return None;
    }
    let root = |q: &str| q.split('.').next().unwrap_or(q).to_owned();
    let mut used = Vec::new();
    crate::analysis::try_each_expr(fallback, |e| {
        if let Expr::Call(call) = e
            && let Some(q) = sem.resolve(&call.func)
        {
            used.push(root(&q));
        }
        ControlFlow::Continue(())
    });
    let mut found = None;
    crate::analysis::try_each_expr(branch, |e| {
        if let Expr::Call(call) = e
            && !matches!(call.func.as_ref(), Expr::Name(n) if checked.contains(&n.id.as_str()))
            && let Some(q) = sem.resolve(&call.func)
            && q.contains('.')
            && !PORTABLE_ROOTS.contains(&root(&q).as_str())
            && !used.contains(&root(&q))
        {
            found = Some(format!(
                "`{q}`, an imported kernel that the torch fallback of the other branch does not use"
            ));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    found
}

/// CUDA streams, events and graphs: optimizations that code may keep to CUDA devices (on the
/// NPU under `transfer_to_npu` they would run as `torch.npu's`, but skipping them is safe).
const CUDA_OPTIMIZATIONS: &[&str] = &[
    "torch.cuda.Stream",
    "torch.cuda.Event",
    "torch.cuda.stream",
    "torch.cuda.graph",
    "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables",
    "torch.cuda.nvtx",
];

/// `body` uses a CUDA-only optimization ([`CUDA_OPTIMIZATIONS`]).
pub(super) fn cuda_optimization(sem: &Semantic<'_>, body: &[Stmt]) -> bool {
    crate::analysis::try_each_expr(body, |expr| {
        let hit = matches!(expr, Expr::Attribute(_))
            && sem.resolves_with_prefix(expr, "torch.cuda.")
            && sem.resolve(expr).is_some_and(|q| {
                CUDA_OPTIMIZATIONS
                    .iter()
                    .any(|o| q == *o || q.strip_prefix(o).is_some_and(|r| r.starts_with('.')))
            });
        if hit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
}

/// A module flag that says whether an optional library imported (`FLASH_AVAILABLE`,
/// `HAS_XFORMERS`, `_flash_attn_available`).
fn is_availability_flag(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("avail")
        || lower.starts_with("has_")
        || lower.starts_with("_has_")
        || (name.len() > 1
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'_' || b.is_ascii_digit()))
}

/// The CUDA-only path an expression (a conditional expression's branch) takes, if any.
pub(super) fn cuda_only_in_expr(sem: &Semantic<'_>, expr: &Expr) -> Option<String> {
    crate::analysis::find_in_expr(expr)
        .into_iter()
        .find_map(|e| cuda_only_expr(sem, e))
}

fn cuda_only_expr(sem: &Semantic<'_>, expr: &Expr) -> Option<String> {
    let Expr::Call(call) = expr else { return None };
    // What the branch calls, read in the project: a function that launches a Triton kernel or
    // a CUDA extension's op, or anything from a module that builds or loads CUDA code.
    if let Some(graph) = sem.project_modules().map(|m| &m.steps) {
        if let Expr::Name(n) = call.func.as_ref()
            && sem.resolve(&call.func).is_none()
            && graph.is_cuda_only_function(&sem.module, n.id.as_str())
        {
            return Some(format!(
                "`{}`, which launches a Triton kernel or a CUDA extension op",
                n.id.as_str()
            ));
        }
        if let Some(q) = sem.resolve(&call.func)
            && !q.starts_with("torch.")
            && graph.is_cuda_only(&q)
        {
            return Some(format!(
                "`{q}`, from project code that imports Triton or builds a CUDA extension"
            ));
        }
    }
    // `kernel[grid](...)` in a file that imports triton launches a Triton kernel.
    if matches!(call.func.as_ref(), Expr::Subscript(_))
        && sem.binds_any(|q| q == "triton" || q.starts_with("triton."))
    {
        return Some("a Triton kernel launch".to_owned());
    }
    let q = sem.resolve(&call.func)?;
    if q == "torch.compile"
        && call
            .args
            .iter()
            .chain(call.keywords.iter().map(|k| &k.value))
            .any(|a| crate::semantic::dotted(a).ends_with("flex_attention"))
    {
        return Some("`torch.compile(flex_attention)` (lowers to Triton)".to_owned());
    }
    is_cuda_only_name(&q).then(|| format!("`{q}`"))
}

/// A qualified name in a CUDA-only library, or in a module named as CUDA or Triton code
/// (`pkg.ops.cuda_kernels`, `pkg.triton_ops`) outside torch, whose `torch.cuda` is remapped.
pub(super) fn is_cuda_only_name(q: &str) -> bool {
    if CUDA_ONLY_LIBRARIES.iter().any(|lib| {
        q == *lib
            || q.strip_prefix(lib)
                .is_some_and(|rest| rest.starts_with('.'))
    }) {
        return true;
    }
    if q.starts_with("torch.") {
        return false;
    }
    let Some((module, _)) = q.rsplit_once('.') else {
        return false;
    };
    module.split('.').any(|part| {
        part.split('_')
            .any(|w| w.eq_ignore_ascii_case("cuda") || w.eq_ignore_ascii_case("triton"))
    })
}

/// The message for the gate `check` (written `text`) whose CUDA-only path is `path`.
pub(super) fn message(sem: &Semantic<'_>, check: &Expr, text: &str, path: &str) -> String {
    let why = remap_reason(sem, check).unwrap_or_default();
    format!(
        "`{text}` turns true on the NPU under transfer_to_npu ({why} in contrib/transfer_to_npu.py), \
         so the CUDA-only path it selects ({path}) runs there and fails; gate it on \
         `x.device.type == \"cuda\"`, which stays false on the NPU (see P_DEV.md)"
    )
}
