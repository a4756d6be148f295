//! `P_DEV`: device assumptions that run-time `cuda` → `npu` remapping cannot fix: string
//! comparisons with `"cuda"`/`"nccl"`, integer device ordinals outside `.to()`, and code gated
//! on CUDA compute capability.

use super::{Checker, Rule, RuleInfo};
use crate::semantic::Semantic;
use crate::source::ast::{self, CmpOp, Expr, Ranged, Stmt};
use crate::source::{TextRange, TextSize};
use issue_model::{Category, Severity};
use std::ops::ControlFlow;

mod allow_list;
mod comparison;
mod dispatch;
mod gate;
mod selected;

pub struct DeviceAssumption;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_DEV",
    name: "device-assumption",
    category: Category::Device,
    severity: Severity::Error,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_DEV.md",
    summary: "Device comparisons, integer ordinals and capability checks that `transfer_to_npu` cannot remap.",
    doc: include_str!("dev.md"),
    check: &DeviceAssumption,
};

/// Parameter-like names that hold an integer device ordinal.
const ORDINAL_NAMES: &[&str] = &[
    "rank",
    "local_rank",
    "gpu",
    "gpu_id",
    "gpu_idx",
    "gpu_index",
    "device_id",
    "device_idx",
    "device_index",
    "local_gpu",
    "devid",
    "gpu_rank",
];

impl Rule for DeviceAssumption {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let (body, decorators) = match stmt {
            Stmt::FunctionDef(f) => (&f.body, &f.decorator_list),
            Stmt::AsyncFunctionDef(f) => (&f.body, &f.decorator_list),
            Stmt::If(s) => {
                if let Some((check, negated)) = gate::remapped_check(cx.semantic(), &s.test) {
                    // `if not x.is_cuda: return fallback(x)` leaves the rest of the function
                    // to CUDA.
                    let branch = match (negated, s.orelse.is_empty()) {
                        (false, _) => &s.body[..],
                        (true, false) => &s.orelse[..],
                        (true, true) => gate::after_early_exit(cx.semantic(), stmt, &s.body),
                    };
                    let fallback = if negated { &s.body[..] } else { &s.orelse[..] };
                    let path =
                        gate::cuda_only_path(cx.semantic(), Some(&s.test), branch).or_else(|| {
                            gate::imported_kernel(cx.semantic(), &s.test, check, branch, fallback)
                        });
                    if let Some(path) = path {
                        let message =
                            gate::message(cx.semantic(), check, cx.slice(check.range()), &path);
                        cx.report(check.range(), message);
                    }
                }
                if let Some((raise, tests)) = dispatch::unknown_device_raise(cx.semantic(), stmt, s)
                {
                    let (blocking, fix) = allow_list::dispatch(cx, &tests);
                    let finding = cx.report(raise.range(), dispatch::UNKNOWN_DEVICE);
                    finding.blocking = blocking;
                    finding.fix = fix;
                }
                return;
            }
            Stmt::Raise(_) => {
                if let Some(tests) = dispatch::raise_after_device_checks(cx.semantic(), stmt) {
                    let (blocking, fix) = allow_list::dispatch(cx, &tests);
                    let finding = cx.report(stmt.range(), dispatch::UNKNOWN_DEVICE);
                    finding.blocking = blocking;
                    finding.fix = fix;
                }
                return;
            }
            Stmt::ClassDef(c) => {
                allow_list::device_enum(cx, c);
                return;
            }
            _ => return,
        };
        // A backend check calls `<module>.is_available` or a name bound to one of them: most
        // functions have neither, which is cheaper to see than to walk their bodies.
        if !cx.slice(stmt.range()).contains("is_available")
            && !cx
                .semantic()
                .binds_any(|q| BACKEND_CHECKS.iter().any(|(f, _)| *f == q))
        {
            return;
        }
        let Some((backends, cuda_check)) = backend_enumeration(cx.semantic(), body) else {
            return;
        };
        let range = def_keyword(cx.file().text, stmt, decorators);
        let related: Vec<_> = cuda_check
            .into_iter()
            .map(|r| cx.related(r, "the CUDA check whose branch picks the device"))
            .collect();
        cx.report(
            range,
            format!(
                "this device helper chooses among {backends} but has no npu branch, so on an NPU machine it \
                 picks the CPU unless transfer_to_npu remaps its CUDA check; add a `torch.npu.is_available()` \
                 branch that returns \"npu\" (see P_DEV.md)"
            ),
        )
        .related = related;
    }

    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        let message = match expr {
            // The exemption walks the enclosing `if`: only for comparisons that would report.
            Expr::Compare(cmp) => {
                // A device allow-list that rejects the NPU (also through a module constant):
                // the fix adds "npu" to the list, whatever the branches do (the rejecting one
                // only raises).
                if let Some((reason, fix)) = allow_list::comparison(cx, cmp, expr)
                    && !gates_cuda_only_path(cx.semantic(), expr)
                {
                    let finding = cx.report(
                        expr.range(),
                        format!("{reason}; add \"npu\" to the list (see P_DEV.md)"),
                    );
                    finding.fix = fix;
                    finding.blocking = Some(reason);
                    return;
                }
                let pin = is_hint(cx.semantic(), expr, "pin_memory");
                let Some(message) = compare(cx.semantic(), cmp).filter(|_| {
                    !gates_cuda_only_path(cx.semantic(), expr)
                        && !is_hint(cx.semantic(), expr, "non_blocking")
                        && !selects_fused_optimizer(cx.semantic(), expr)
                        && !only_falls_back_to_cpu(cx.semantic(), expr)
                }) else {
                    return;
                };
                let message = if pin {
                    "this comparison with \"cuda\" is the value of `pin_memory=`: false on the NPU \
                     (device type \"npu\"), so pinned host memory, and with it asynchronous copies \
                     to the device, is silently off there; accept \"npu\" too (see P_DEV.md)"
                        .to_owned()
                } else {
                    message
                };
                let mut fix = comparison::fix(cx, cmp, expr);
                let mut message = message;
                match fix
                    .as_mut()
                    .and_then(|_| selected::unmapped_in_selected(cx.semantic(), cmp, expr))
                {
                    // Accepting "npu" would send the NPU down a branch it cannot run.
                    Some(selected::Selected::Unmapped(why)) => {
                        fix = None;
                        message = format!(
                            "{message}; no automatic fix: the branch this comparison selects on \
                             CUDA uses {why}, so accepting \"npu\" there would fail on the NPU"
                        );
                    }
                    // The NPU would leave its working fallback for a substitute.
                    Some(selected::Selected::Replaced(why)) => {
                        if let Some(fix) = fix.as_mut() {
                            fix.applicability = issue_model::Applicability::Unsafe;
                            fix.message = format!(
                                "{}; unsafe: the branch this comparison selects on CUDA uses {why}, \
                                 so the NPU leaves its fallback for a path not known to run there",
                                fix.message
                            );
                        }
                    }
                    None => {
                        if let Some(q) = fix
                            .as_ref()
                            .and_then(|_| selected::cuda_only_in_class(cx.semantic()))
                        {
                            fix = None;
                            message = format!(
                                "{message}; no automatic fix: this class also calls `{q}`, CUDA-only \
                                 code that another device check keeps off the NPU, so accepting \
                                 \"npu\" here alone would send the NPU down part of the CUDA path; \
                                 change the class's device checks together"
                            );
                        }
                    }
                }
                cx.report(expr.range(), message).fix = fix;
                return;
            }
            Expr::IfExp(e) => {
                if let Some((check, negated)) = gate::remapped_check(cx.semantic(), &e.test) {
                    let branch = if negated { &e.orelse } else { &e.body };
                    if let Some(path) = gate::cuda_only_in_expr(cx.semantic(), branch) {
                        let message =
                            gate::message(cx.semantic(), check, cx.slice(check.range()), &path);
                        cx.report(check.range(), message);
                    }
                }
                dispatch::device_choice_without_npu(cx.semantic(), e)
            }
            Expr::Subscript(sub) => {
                allow_list::literal(cx, sub);
                None
            }
            Expr::Call(call) => {
                allow_list::choices(cx, call);
                if let Some(value) = integer_device_map(call) {
                    cx.report(value.range(), DEVICE_MAP);
                    return;
                }
                call_message(cx.semantic(), call)
            }
            Expr::Attribute(attr) => capability_attr(cx.semantic(), attr),
            _ => None,
        };
        if let Some(message) = message {
            cx.report(expr.range(), message);
        }
    }
}

/// A device comparison that keeps CUDA-only code off the NPU, which is what the code wants:
/// the test of an `if` whose branch is a CUDA-only path or a CUDA-only optimization (streams,
/// graphs), a test in an `if`/`elif` chain that has an npu branch too, or a check in a function
/// named for a CUDA-only feature (`_use_triton`, `_check_device_cuda`, `supports_flash_kernel`).
fn gates_cuda_only_path(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let named_for_cuda_feature = sem.current_function().is_some_and(|f| {
        f.name.split('_').any(|w| {
            let w = w.to_ascii_lowercase();
            matches!(
                w.as_str(),
                "cuda"
                    | "triton"
                    | "kernel"
                    | "flash"
                    | "graph"
                    | "graphs"
                    | "stream"
                    | "streams"
                    | "compile"
                    | "compiled"
                    | "fused"
                    | "cudnn"
            )
        })
    });
    if named_for_cuda_feature {
        return true;
    }
    if names_renderer(expr) {
        return true;
    }
    // `render_gpu = device.index if device.type == "cuda" else 0`: the renderer's GPU.
    if let Some(Stmt::Assign(a)) = sem.current_stmt()
        && a.targets.iter().any(names_renderer)
    {
        return true;
    }
    let Some(Stmt::If(s)) = sem.current_stmt() else {
        return false;
    };
    if !s.test.range().contains_range(expr.range()) {
        return false;
    }
    gate::cuda_only_path(sem, None, &s.body).is_some()
        || gate::cuda_optimization(sem, &s.body)
        || only_precision_hints(sem, &s.body)
        || only_contiguous_copies(&s.body)
        || only_rendering(&s.body)
        || crate::analysis::in_chain_testing_npu(sem)
}

/// Words that name a renderer's GPU rather than torch's device: the simulator's or the
/// off-screen renderer's (`render_backend`, `EGL_DEVICE_ID`, `MUJOCO_GL`, `PYOPENGL_PLATFORM`).
fn is_render_word(ident: &str) -> bool {
    let lower = ident.to_ascii_lowercase();
    lower.contains("render")
        || lower.contains("egl")
        || lower.contains("opengl")
        || lower.contains("mujoco_gl")
}

/// The comparison is about a renderer's device (`render_backend[:4] == "cuda"`): the NPU
/// renders nothing, so the CUDA branch is the renderer's choice, not the training device's.
fn names_renderer(expr: &Expr) -> bool {
    crate::analysis::find_in_expr(expr)
        .iter()
        .any(|e| is_render_name(e))
}

/// A name or attribute with a renderer's word in it.
fn is_render_name(e: &Expr) -> bool {
    match e {
        Expr::Name(n) => is_render_word(n.id.as_str()),
        Expr::Attribute(a) => is_render_word(a.attr.as_str()),
        _ => false,
    }
}

/// A branch that only configures rendering (`os.environ["MUJOCO_GL"] = "egl"`,
/// `render_device = device.index`): it picks the GPU the simulator renders on, which the NPU
/// does not replace.
fn only_rendering(body: &[Stmt]) -> bool {
    !body.is_empty()
        && body.iter().all(|stmt| {
            let all = crate::analysis::find(std::slice::from_ref(stmt), |_| true);
            all.iter().any(|occ| match occ.expr {
                Expr::Constant(c) => {
                    matches!(&c.value, ast::Constant::Str(s) if is_render_word(s))
                }
                e => is_render_name(e),
            })
        })
}

/// A branch that only makes tensors contiguous (`q = q.contiguous()`): a workaround for a CUDA
/// kernel's layout bug that the NPU can skip without harm.
fn only_contiguous_copies(body: &[Stmt]) -> bool {
    !body.is_empty()
        && body.iter().all(|stmt| {
            matches!(stmt, Stmt::Assign(a) if matches!(a.value.as_ref(), Expr::Call(c)
                if c.args.is_empty()
                    && matches!(c.func.as_ref(), Expr::Attribute(f) if f.attr.as_str() == "contiguous")))
        })
}

/// A branch that only sets matmul precision or backend flags (`torch.set_float32_matmul_precision
/// ("high")`, `torch.backends.cuda.matmul.allow_tf32 = True`): a performance hint the NPU may skip.
fn only_precision_hints(sem: &Semantic<'_>, body: &[Stmt]) -> bool {
    !body.is_empty()
        && body.iter().all(|stmt| match stmt {
            Stmt::Expr(e) => matches!(e.value.as_ref(), Expr::Call(c)
                if sem.resolves_to(&c.func, "torch.set_float32_matmul_precision")),
            Stmt::Assign(a) => a
                .targets
                .iter()
                .all(|t| sem.resolves_with_prefix(t, "torch.backends.")),
            _ => false,
        })
}

/// The comparison is the value of the keyword argument `keyword` of a call
/// (`non_blocking=x.device.type == "cuda"`, `pin_memory=device.type == "cuda"`). As
/// `non_blocking=`, false on the NPU only makes one copy synchronous: not reported. As
/// `pin_memory=` (a `DataLoader`'s), it turns pinned memory off for the whole run: reported.
/// The comparison decides whether an optimizer runs its fused CUDA implementation: it is in
/// the value of a `fused=` keyword, or of a name about it (`use_fused = fused_available and
/// device_type == "cuda"`). On the NPU the optimizer then runs its plain implementation, which
/// is the capability check's fallback, not a failure.
fn selects_fused_optimizer(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let within = |outer: &Expr| outer.range().contains_range(expr.range());
    let keyword = sem.exprs().iter().any(|e| {
        matches!(e, Expr::Call(c) if c.keywords.iter().any(|k| {
            k.arg.as_ref().is_some_and(|a| a.as_str() == "fused") && within(&k.value)
        }))
    });
    let assigned = matches!(sem.stmts().last(), Some(ast::Stmt::Assign(a))
        if within(&a.value)
            && matches!(a.targets.as_slice(), [Expr::Name(n)]
                if n.id.as_str().to_ascii_lowercase().contains("fused")));
    keyword || assigned
}

/// The comparison is in the test of an `if` that only falls back to the CPU when CUDA is
/// missing (`if args.device == "cuda" and not torch.cuda.is_available(): args.device = "cpu"`):
/// its body only assigns `"cpu"` (or `torch.device("cpu")`) and logs, and there is no `else`.
/// On the NPU the comparison is false, no fallback happens, and the configured device is used.
fn only_falls_back_to_cpu(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let Some(ast::Stmt::If(stmt)) = sem.stmts().last() else {
        return false;
    };
    let is_cpu = |v: &Expr| {
        match v {
        Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if s == "cpu"),
        Expr::Call(c) => {
            crate::analysis::last_name_of(c.func.as_ref()) == "device"
                && c.args.first().is_some_and(|a| {
                    matches!(a, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if s == "cpu"))
                })
        }
        _ => false,
    }
    };
    let logs = |v: &Expr| {
        matches!(v, Expr::Call(c) if matches!(
            crate::analysis::last_name_of(c.func.as_ref()),
            "print" | "info" | "warning" | "warn" | "debug"
        ))
    };
    stmt.test.range().contains_range(expr.range())
        && checks_availability(&stmt.test)
        && stmt.orelse.is_empty()
        && !stmt.body.is_empty()
        && stmt.body.iter().all(|s| match s {
            ast::Stmt::Assign(a) => is_cpu(&a.value),
            ast::Stmt::Expr(e) => logs(&e.value),
            _ => false,
        })
}

/// The test calls an `is_available()` (`not torch.cuda.is_available()`, in `and`/`or`).
fn checks_availability(test: &Expr) -> bool {
    match test {
        Expr::Call(c) => crate::analysis::last_name_of(c.func.as_ref()) == "is_available",
        Expr::UnaryOp(u) => checks_availability(&u.operand),
        Expr::BoolOp(b) => b.values.iter().any(checks_availability),
        _ => false,
    }
}

fn is_hint(sem: &Semantic<'_>, expr: &Expr, keyword: &str) -> bool {
    matches!(sem.parent_expr(), Some(Expr::Call(c)) if c.keywords.iter().any(|k| {
        std::ptr::eq(std::ptr::from_ref(&k.value), expr)
            && k.arg.as_ref().is_some_and(|a| a.as_str() == keyword)
    }))
}

fn cuda_literal(expr: &Expr) -> Option<&str> {
    let Expr::Constant(c) = expr else { return None };
    let ast::Constant::Str(s) = &c.value else {
        return None;
    };
    let is_cuda = s == "cuda"
        || s.strip_prefix("cuda:")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (is_cuda || s == "nccl").then_some(s.as_str())
}

/// The CUDA value a comparison operand stands for: a `"cuda"`/`"cuda:N"`/`"nccl"` literal, or
/// torch's own constant for the NCCL backend (`dist.Backend.NCCL`, which is the string `"nccl"`;
/// torch-npu 2.14.0 `contrib/transfer_to_npu.py` rewrites backend arguments in `_wrapper_hccl`
/// and leaves `Backend` alone, so `dist.get_backend() == dist.Backend.NCCL` stays false on the NPU).
fn cuda_value<'e>(sem: &Semantic<'_>, expr: &'e Expr) -> Option<&'e str> {
    cuda_literal(expr).or_else(|| is_nccl_constant(sem, expr).then_some("nccl"))
}

fn is_nccl_constant(sem: &Semantic<'_>, expr: &Expr) -> bool {
    matches!(expr, Expr::Attribute(a) if a.attr.as_str() == "NCCL")
        && [
            "torch.distributed.Backend.NCCL",
            "torch.distributed.distributed_c10d.Backend.NCCL",
        ]
        .iter()
        .any(|name| sem.resolves_to(expr, name))
}

fn is_npu_literal(expr: &Expr) -> bool {
    matches!(expr, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if s.starts_with("npu") || s == "hccl"))
}

/// An expression about a device or backend: it mentions a name or attribute containing
/// `device` or `backend`, `.type`, or `dev`.
fn is_device_like(expr: &Expr) -> bool {
    crate::analysis::find_in_expr(expr).iter().any(|e| {
        let ident = match e {
            Expr::Name(n) => n.id.as_str(),
            Expr::Attribute(a) => a.attr.as_str(),
            _ => return false,
        };
        let lower = ident.to_ascii_lowercase();
        lower.contains("device") || lower.contains("backend") || lower == "type" || lower == "dev"
    })
}

fn compare(sem: &Semantic<'_>, cmp: &ast::ExprCompare) -> Option<String> {
    let mut left = cmp.left.as_ref();
    for (op, right) in cmp.ops.iter().zip(&cmp.comparators) {
        let hit = match op {
            CmpOp::Eq | CmpOp::NotEq | CmpOp::Is | CmpOp::IsNot => {
                match (cuda_value(sem, left), cuda_value(sem, right)) {
                    (Some(lit), None) if is_device_like(right) => Some(lit),
                    (None, Some(lit)) if is_device_like(left) => Some(lit),
                    _ => None,
                }
            }
            CmpOp::In | CmpOp::NotIn => {
                if let Some(lit) = cuda_value(sem, left) {
                    is_device_like(right).then_some(lit)
                } else if is_device_like(left) {
                    literal_list_without_npu(sem, right)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(lit) = hit {
            return Some(comparison_message(lit));
        }
        left = right;
    }
    None
}

/// A list/tuple/set literal naming `"cuda"` (or `"nccl"`) but not the NPU.
fn literal_list_without_npu<'e>(sem: &Semantic<'_>, expr: &'e Expr) -> Option<&'e str> {
    let elts = match expr {
        Expr::List(l) => &l.elts,
        Expr::Tuple(t) => &t.elts,
        Expr::Set(s) => &s.elts,
        _ => return None,
    };
    if elts.iter().any(is_npu_literal) {
        return None;
    }
    elts.iter().find_map(|e| cuda_value(sem, e))
}

fn comparison_message(lit: &str) -> String {
    if lit == "nccl" {
        "comparing the backend with \"nccl\" is false on the NPU, whose backend is \"hccl\", and \
         transfer_to_npu cannot change the comparison; accept \"hccl\" too (see P_DEV.md)"
            .to_owned()
    } else {
        format!(
            "comparing a device with \"{lit}\" is false on the NPU (device type \"npu\"), and \
             transfer_to_npu cannot change the comparison; accept \"npu\" too (see P_DEV.md); check first \
             that the branch matters: a comparison that only picks a log message, or guards a CPU path \
             the NPU never takes, is harmless"
        )
    }
}

fn call_message(sem: &Semantic<'_>, call: &ast::ExprCall) -> Option<String> {
    if sem.resolves_to(&call.func, "torch.cuda.get_device_capability") {
        return Some(
            "torch.cuda.get_device_capability() returns None on the NPU, so the code it gates \
             breaks or takes the wrong branch; use torch.npu.is_bf16_supported() (see P_DEV.md)"
                .to_owned(),
        );
    }
    if sem.resolves_to(&call.func, "torch.device") {
        if let [arg] = call.args.as_slice()
            && call.keywords.is_empty()
            && is_ordinal(arg)
        {
            return Some(
                "torch.device(<int>) means a CUDA ordinal, which transfer_to_npu does not remap; \
                 use torch.device(f\"npu:{index}\") (see P_DEV.md)"
                    .to_owned(),
            );
        }
        return None;
    }
    if let Expr::Attribute(a) = call.func.as_ref()
        && a.attr.as_str() == "startswith"
        && call.args.first().and_then(cuda_literal).is_some()
        && is_device_like(&a.value)
    {
        return Some(comparison_message("cuda"));
    }
    None
}

const DEVICE_MAP: &str = "an integer device_map means a CUDA ordinal to accelerate and is not \
     remapped on the NPU; pass \"npu:<index>\" (see P_DEV.md)";

/// The value of a `device_map=` keyword that is an int or a dict of ints/ranks.
fn integer_device_map(call: &ast::ExprCall) -> Option<&Expr> {
    let device_map = call
        .keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device_map"))?;
    let ordinal = match &device_map.value {
        Expr::Dict(d) => d.values.iter().any(is_ordinal),
        other => is_int_literal(other),
    };
    ordinal.then_some(&device_map.value)
}

fn is_int_literal(expr: &Expr) -> bool {
    matches!(expr, Expr::Constant(c) if matches!(c.value, ast::Constant::Int(_)))
}

/// An integer literal, `int(...)`, or a name such as `local_rank`.
fn is_ordinal(expr: &Expr) -> bool {
    match expr {
        Expr::Constant(_) => is_int_literal(expr),
        Expr::Call(c) => matches!(c.func.as_ref(), Expr::Name(n) if n.id.as_str() == "int"),
        Expr::Name(n) => ORDINAL_NAMES.contains(&n.id.as_str().to_ascii_lowercase().as_str()),
        Expr::Attribute(a) => {
            ORDINAL_NAMES.contains(&a.attr.as_str().to_ascii_lowercase().as_str())
        }
        _ => false,
    }
}

/// `.major`/`.minor` of `torch.cuda.get_device_properties(...)`, directly or through a local
/// name.
fn capability_attr(sem: &Semantic<'_>, attr: &ast::ExprAttribute) -> Option<String> {
    const PROPS: &str = "torch.cuda.get_device_properties";
    if !matches!(attr.attr.as_str(), "major" | "minor") {
        return None;
    }
    let from_props = match attr.value.as_ref() {
        Expr::Call(_) => sem.resolve_call(&attr.value).is_some_and(|q| q == PROPS),
        Expr::Name(n) => sem
            .locals()
            .assignments(n.id.as_str())
            .iter()
            .any(|a| a.call.as_deref() == Some(PROPS)),
        _ => false,
    };
    from_props.then(|| {
        "CUDA compute capability (`get_device_properties(...).major`) has no meaning on the NPU, so \
         the code it gates takes the wrong branch; use torch.npu.is_bf16_supported() (see P_DEV.md)"
            .to_owned()
    })
}

/// Availability checks of accelerator backends, by backend.
const BACKEND_CHECKS: &[(&str, &str)] = &[
    ("torch.cuda.is_available", "cuda"),
    ("torch.backends.mps.is_available", "mps"),
    ("torch.mps.is_available", "mps"),
    ("torch.xpu.is_available", "xpu"),
];

/// A device helper that enumerates backends: its body checks the availability of at least two
/// accelerator backends (`torch.cuda.is_available()`, `torch.backends.mps.is_available()`, …)
/// and never mentions the NPU. The backends it knows, as `cuda/mps/cpu`. A helper that compares a
/// device with `"cuda"` is left to that comparison's own issue.
fn backend_enumeration(sem: &Semantic<'_>, body: &[Stmt]) -> Option<(String, Option<TextRange>)> {
    let mut known: Vec<&str> = Vec::new();
    let mut cuda_check = None;
    let compares_cuda = crate::analysis::try_each_expr(body, |expr| {
        match expr {
            Expr::Call(call) => {
                if let Some(backend) = checked_backend(sem, call)
                    && !known.contains(&backend)
                {
                    if backend == "cuda" {
                        cuda_check = Some(call.range());
                    }
                    known.push(backend);
                }
            }
            // A comparison with "cuda" is reported on its own line, which points at the helper.
            Expr::Compare(cmp) if compare(sem, cmp).is_some() => return ControlFlow::Break(()),
            _ => {}
        }
        ControlFlow::Continue(())
    });
    if compares_cuda || known.len() < 2 {
        return None;
    }
    // Rare: only helpers that check two backends get here.
    let mentions_npu = crate::analysis::try_each_expr(body, |expr| {
        if crate::analysis::names_npu(expr) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    if mentions_npu {
        return None;
    }
    known.push("cpu");
    Some((known.join("/"), cuda_check))
}

/// The backend whose availability `call` checks, if it is one of [`BACKEND_CHECKS`].
fn checked_backend(sem: &Semantic<'_>, call: &ast::ExprCall) -> Option<&'static str> {
    let found = match call.func.as_ref() {
        // Every check is `<module>.is_available`: other attribute calls say so cheaply.
        Expr::Attribute(a) if a.attr.as_str() != "is_available" => return None,
        Expr::Name(n) => {
            let q = sem.lookup(n.id.as_str())?;
            BACKEND_CHECKS.iter().find(|(f, _)| *f == q)
        }
        func => BACKEND_CHECKS
            .iter()
            .find(|(f, _)| sem.resolves_to(func, f)),
    };
    found.map(|(_, backend)| *backend)
}

/// The `def` keyword of a function definition (after its decorators), where the issue goes.
fn def_keyword(text: &str, stmt: &Stmt, decorators: &[Expr]) -> TextRange {
    let from = decorators.last().map_or(stmt.start(), Ranged::end);
    let start = usize::from(from);
    let offset = text
        .get(start..usize::from(stmt.end()))
        .and_then(|rest| rest.find("def"))
        .and_then(|i| u32::try_from(start + i).ok())
        .map_or(from, TextSize::from);
    TextRange::new(offset, offset + TextSize::from(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backend checks through names that never spell `is_available` in the helper are found.
    #[test]
    fn backend_checks_through_aliases() {
        let text = "from torch.cuda import is_available as cuda_ok\n\
            import torch\n\
            mps_ok = torch.backends.mps.is_available\n\
            def pick():\n    \
                if cuda_ok():\n        \
                    return \"cuda\"\n    \
                if mps_ok():\n        \
                    return \"mps\"\n    \
                return \"cpu\"\n\
            def other():\n    \
                return cuda_ok()\n";
        assert_eq!(crate::visit::reported_lines(&RULE, "m.py", text), [4]);
    }
}
