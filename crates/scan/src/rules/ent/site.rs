//! The CUDA sites `P_ENT` notes in a file: what `transfer_to_npu` remaps (`.cuda()`,
//! `torch.cuda.*`, `torch.backends.cudnn.*`, `"cuda"` device strings, `"nccl"`), and what only
//! looks like one (a transfer hint, a comparison, a docstring).

use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, Ranged, Stmt};

/// What CUDA-specific thing `expr` is, if it is one that `transfer_to_npu` remaps. CUDA
/// named only as a performance hint (`pin_memory=`, `non_blocking=`) is not one.
pub(super) fn cuda_site(sem: &Semantic<'_>, expr: &Expr) -> Option<String> {
    let site = cuda_site_kind(sem, expr)?;
    (!in_hint_keyword(sem, expr) && !crate::analysis::in_chain_testing_npu(sem)).then_some(site)
}

/// Keywords whose value only tunes transfers, whatever device it names.
const HINT_KEYWORDS: &[&str] = &["pin_memory", "non_blocking", "pin_memory_device"];

fn in_hint_keyword(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let range = expr.range();
    sem.exprs().iter().any(|e| {
        let Expr::Call(call) = e else { return false };
        call.keywords.iter().any(|k| {
            k.arg
                .as_ref()
                .is_some_and(|a| HINT_KEYWORDS.contains(&a.as_str()))
                && k.value.range().contains_range(range)
        })
    })
}

fn cuda_site_kind(sem: &Semantic<'_>, expr: &Expr) -> Option<String> {
    match expr {
        Expr::Call(call) => {
            if let Some(flag) = cuda_flag_keyword(call) {
                return Some(format!(
                    "`{flag}=` (asks a helper for CUDA, which it cannot give on the NPU)"
                ));
            }
            let Expr::Attribute(a) = call.func.as_ref() else {
                return None;
            };
            (a.attr.as_str() == "cuda" && sem.resolve(&a.value).is_none()).then(|| {
                if crate::remap::every(|v| {
                    v.assigned("torch.Tensor.cuda") == Some("torch.Tensor.npu")
                }) {
                    "`.cuda()` (becomes `.npu()` under transfer_to_npu)".to_owned()
                } else {
                    "`.cuda()` (a CUDA copy)".to_owned()
                }
            })
        }
        Expr::Attribute(_) | Expr::Name(_) => {
            // Only the outermost part of a dotted name.
            if let Some(Expr::Attribute(parent)) = sem.parent_expr()
                && std::ptr::eq(parent.value.as_ref(), expr)
            {
                return None;
            }
            // Every name below starts with `torch.cuda` or `torch.backends.cud`: most names do
            // not, and say so without building the name.
            if !sem.resolves_with_prefix(expr, "torch.cuda")
                && !sem.resolves_with_prefix(expr, "torch.backends.cud")
            {
                return None;
            }
            let q = sem.resolve(expr)?;
            let cuda = q == "torch.cuda" || q.starts_with("torch.cuda.");
            let cudnn = q.starts_with("torch.backends.cudnn");
            let backend = q == "torch.backends.cuda" || q.starts_with("torch.backends.cuda.");
            if !cuda && !cudnn && !backend {
                return None;
            }
            Some(if cudnn {
                format!("`{q}` (cuDNN setting, no effect on the NPU)")
            } else if backend {
                format!("`{q}` (CUDA backend setting, no effect on the NPU)")
            } else {
                cuda_name_site(&q)
            })
        }
        Expr::Constant(c) => {
            let ast::Constant::Str(s) = &c.value else {
                return None;
            };
            let kind = if s == "nccl" {
                if crate::remap::every(crate::remap::Version::nccl_becomes_hccl) {
                    "\"nccl\" backend (becomes hccl under transfer_to_npu)".to_owned()
                } else {
                    "\"nccl\" backend (CUDA's collective library)".to_owned()
                }
            } else if is_cuda_device(s) {
                device_string_note(sem)
            } else if s == "PYTORCH_CUDA_ALLOC_CONF" {
                "`PYTORCH_CUDA_ALLOC_CONF` (the NPU allocator reads PYTORCH_NPU_ALLOC_CONF)"
                    .to_owned()
            } else {
                return None;
            };
            if in_comparison(sem) || is_docstring(sem) {
                return None;
            }
            Some(kind)
        }
        Expr::JoinedStr(j) => {
            let Some(Expr::Constant(c)) = j.values.first() else {
                return None;
            };
            let ast::Constant::Str(s) = &c.value else {
                return None;
            };
            s.starts_with("cuda:")
                .then(|| device_string_note(sem).replacen("\"cuda\"", "\"cuda:…\"", 1))
        }
        // `'cuda:%d' % rank`: the printf form of a formatted device string.
        Expr::BinOp(b) if matches!(b.op, ast::Operator::Mod) => {
            let Expr::Constant(c) = b.left.as_ref() else {
                return None;
            };
            let ast::Constant::Str(s) = &c.value else {
                return None;
            };
            (s.starts_with("cuda:%") && !in_comparison(sem))
                .then(|| device_string_note(sem).replacen("\"cuda\"", "\"cuda:…\"", 1))
        }
        _ => None,
    }
}

/// What becomes of a `"cuda"` device string, from the remap table: `transfer_to_npu` rewrites
/// the device arguments of the calls it wraps (`torch.zeros(device="cuda")`, `x.to("cuda")`) and
/// no others (`torch.device("cuda")` stays CUDA's). A call only some pinned versions wrap
/// (`init_device_mesh`, wrapped from the versions that have device meshes) names those versions.
fn device_string_note(sem: &Semantic<'_>) -> String {
    let Some(Expr::Call(call)) = sem.parent_expr() else {
        return "\"cuda\" device string (transfer_to_npu rewrites it only where it is passed to a call it wraps)"
            .to_owned();
    };
    let wraps = |v: &crate::remap::Version| match sem.resolve(&call.func) {
        Some(q) => q
            .rsplit_once('.')
            .is_some_and(|(owner, name)| v.wraps_device_argument(owner, name)),
        None => match call.func.as_ref() {
            Expr::Attribute(a) => {
                v.wraps_device_argument("torch.Tensor", a.attr.as_str())
                    || v.wraps_device_argument("torch.nn.Module", a.attr.as_str())
            }
            _ => false,
        },
    };
    if crate::remap::every(wraps) {
        return "\"cuda\" device string (becomes npu under transfer_to_npu, which wraps this call)"
            .to_owned();
    }
    match crate::remap::versions(wraps) {
        Some(versions) => format!(
            "\"cuda\" device string (becomes npu under the transfer_to_npu of {versions}, which wraps this \
             call; older versions leave it CUDA's)"
        ),
        None => {
            "\"cuda\" device string (transfer_to_npu does not wrap this call, so it stays CUDA's)"
                .to_owned()
        }
    }
}

/// How `transfer_to_npu` treats `q` (`torch.cuda` or `torch.cuda.<name>…`), from the remap
/// table: `torch.cuda.<name>` becomes `torch_npu.npu`'s only when `<name>` is in that module's
/// `__all__` (`torch_npu` copies just those names), and a finding says so only for a name every
/// pinned torch-npu version copies.
pub(super) fn cuda_name_site(q: &str) -> String {
    let Some(name) = q.strip_prefix("torch.cuda.") else {
        return format!(
            "`{q}` (its torch_npu.npu names replace torch.cuda's under transfer_to_npu)"
        );
    };
    let remapped = |v: &crate::remap::Version| v.cuda_name_is_npu(name);
    if crate::remap::every(remapped) {
        return format!("`{q}` (becomes torch.npu under transfer_to_npu)");
    }
    match crate::remap::versions(remapped) {
        Some(versions) => format!(
            "`{q}` (becomes torch.npu under transfer_to_npu only in {versions}; elsewhere it stays CUDA's)"
        ),
        None => {
            format!("`{q}` (torch_npu has no counterpart, so transfer_to_npu leaves it CUDA's)")
        }
    }
}

/// A keyword that asks a helper to use CUDA (`use_cuda=True`, `try_to_use_cuda=cfg.gpu`): its
/// name has `cuda` as a word, and its value is not a literal `False`/`None`.
fn cuda_flag_keyword(call: &ast::ExprCall) -> Option<&str> {
    call.keywords.iter().find_map(|k| {
        let name = k.arg.as_ref()?.as_str();
        let flag = name.split('_').any(|w| w.eq_ignore_ascii_case("cuda"));
        let off = matches!(&k.value, Expr::Constant(c)
            if matches!(c.value, ast::Constant::Bool(false) | ast::Constant::None));
        (flag && !off).then_some(name)
    })
}

fn is_cuda_device(s: &str) -> bool {
    // `"cuda:" + str(rank)` builds an ordinal device string.
    s == "cuda"
        || s == "cuda:"
        || s.strip_prefix("cuda:")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Comparisons are `P_DEV`'s: remapping does not fix them.
fn in_comparison(sem: &Semantic<'_>) -> bool {
    sem.exprs().iter().any(|e| matches!(e, Expr::Compare(_)))
}

fn is_docstring(sem: &Semantic<'_>) -> bool {
    sem.exprs().is_empty() && matches!(sem.current_stmt(), Some(Stmt::Expr(_)))
}
