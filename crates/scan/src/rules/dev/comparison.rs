//! The automatic fix of a device or backend comparison: accept the NPU's value too.
//!
//! `x.type == "cuda"` becomes `x.type in ("cuda", "npu")`, `!=` becomes `not in`, and a
//! literal list that names `"cuda"` but not `"npu"` gets `"npu"` after it. On CUDA the
//! comparison gives what it gave before; on the NPU it now matches the NPU too.

use crate::checker::Checker;
use crate::fix;
use crate::source::ast::{self, CmpOp, Expr, Ranged};
use issue_model::{Applicability, Fix};

/// The fix of a reported comparison, when it has the simple shape the fix handles: one
/// operator, one string literal.
pub(super) fn fix(cx: &Checker<'_>, cmp: &ast::ExprCompare, whole: &Expr) -> Option<Fix> {
    let ([op], [right]) = (cmp.ops.as_slice(), cmp.comparators.as_slice()) else {
        return None;
    };
    if guards_gpu_only_code(cx, whole) {
        return None;
    }
    let left = cmp.left.as_ref();
    let membership = |subject: &Expr, lit: &Expr, negated: bool| -> Option<Fix> {
        let (lit_src, npu) = npu_twin(cx, lit)?;
        let not = if negated { "not " } else { "" };
        let content = format!("{} {not}in ({lit_src}, {npu})", cx.slice(subject.range()));
        Some(fix::replacement(
            Applicability::Safe,
            format!("accept {npu} as well as {lit_src}"),
            whole.range(),
            content,
        ))
    };
    match op {
        CmpOp::Eq | CmpOp::Is | CmpOp::NotEq | CmpOp::IsNot => {
            let negated = matches!(op, CmpOp::NotEq | CmpOp::IsNot);
            if npu_twin(cx, right).is_some() {
                membership(left, right, negated)
            } else if npu_twin(cx, left).is_some() {
                membership(right, left, negated)
            } else {
                None
            }
        }
        CmpOp::In | CmpOp::NotIn => {
            let elts = match right {
                Expr::List(l) => &l.elts,
                Expr::Tuple(t) => &t.elts,
                Expr::Set(s) => &s.elts,
                _ => return None,
            };
            let (cuda, (lit_src, npu)) = elts
                .iter()
                .find_map(|e| npu_twin(cx, e).map(|twin| (e, twin)))?;
            Some(fix::edits(
                Applicability::Safe,
                format!("accept {npu} as well as {lit_src}"),
                vec![(
                    crate::source::TextRange::empty(cuda.end()),
                    format!(", {npu}"),
                )],
            ))
        }
        _ => None,
    }
}

/// Words in the code a comparison decides about that name CUDA-only machinery: accepting the NPU
/// there would send it down a path it cannot run (GPU physics, triton kernels, NVML, `CuPy`).
const GPU_ONLY_HINTS: &[&str] = &[
    "gpu",
    "triton",
    "cupy",
    "nvml",
    "cudnn",
    "physx",
    "nvtx",
    "cuda_graph",
    "cudagraph",
    "flex",
];

/// Words in the name of the enclosing function that say it decides about a CUDA-only feature.
const FEATURE_HINTS: &[&str] = &["flash", "flex", "compile", "triton", "fused", "kernel"];

/// The comparison decides about CUDA-only code: the `if`/`while`/conditional expression it
/// tests mentions CUDA-only machinery, its branch names CUDA or NCCL itself (`ProcessGroupNCCL`, a
/// `Cuda...` class, an error saying CUDA is required; `torch.cuda.*` and `.cuda()` are remapped
/// and do not count), or the enclosing function is about a CUDA-only feature. The finding stands;
/// the edit needs judgement.
fn guards_gpu_only_code(cx: &Checker<'_>, whole: &Expr) -> bool {
    let sem = cx.semantic();
    let inside = |range: crate::source::TextRange| range.contains_range(whole.range());
    let mut tests: Vec<&str> = Vec::new();
    let mut branches: Vec<&str> = Vec::new();
    for expr in sem.exprs().iter().rev() {
        if let Expr::IfExp(e) = expr
            && inside(e.test.range())
        {
            tests.push(cx.slice(e.test.range()));
            branches.push(cx.slice(e.body.range()));
            branches.push(cx.slice(e.orelse.range()));
            break;
        }
    }
    if let Some(stmt) = sem.stmts().last() {
        let (test, body): (Option<&Expr>, &[ast::Stmt]) = match stmt {
            ast::Stmt::If(s) => (Some(&s.test), &s.body),
            ast::Stmt::While(s) => (Some(&s.test), &s.body),
            _ => (None, &[]),
        };
        if let Some(test) = test.filter(|t| inside(t.range())) {
            tests.push(cx.slice(test.range()));
            if let (Some(first), Some(last)) = (body.first(), body.last()) {
                branches.push(cx.slice(crate::source::TextRange::new(first.start(), last.end())));
            }
        }
    }
    let has = |text: &str, hints: &[&str]| {
        let lower = text.to_ascii_lowercase();
        hints.iter().any(|hint| lower.contains(hint))
    };
    let names_cuda = |text: &str| {
        let lower = text
            .to_ascii_lowercase()
            .replace("torch.cuda.", "")
            .replace(".cuda(", "");
        lower.contains("cuda") || lower.contains("nccl")
    };
    tests
        .iter()
        .chain(&branches)
        .any(|t| has(t, GPU_ONLY_HINTS))
        || branches.iter().any(|b| names_cuda(b))
        || sem
            .current_function()
            .is_some_and(|f| has(&f.name, FEATURE_HINTS))
}

/// For a `"cuda"`, `"cuda:N"` or `"nccl"` literal: its source and the NPU's value in the same
/// quotes.
fn npu_twin(cx: &Checker<'_>, expr: &Expr) -> Option<(String, String)> {
    let value = super::cuda_literal(expr)?;
    let npu = match value.strip_prefix("cuda") {
        Some(index) => format!("npu{index}"),
        None => "hccl".to_owned(),
    };
    let src = cx.slice(expr.range());
    // Escapes or implicit concatenation: the source is not the value in two quotes.
    if src.len() != value.len() + 2 {
        return None;
    }
    Some((src.to_owned(), fix::requote(src, &npu)?))
}
