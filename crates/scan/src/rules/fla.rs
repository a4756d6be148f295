//! `P_FLA`: CUDA-only kernels and libraries (`flash_attn`, `xformers`, `apex`, `bitsandbytes`,
//! `mamba_ssm`, `triton`, `deepspeed.ops`, CUDA extensions), `attn_implementation="flash_attention_2"`
//! and `torch.backends.cuda.sdp_kernel`.
//!
//! An import guarded by `try/except ImportError` counts only when the handler re-raises, sets a
//! flag to `True`, or merely logs; a handler that binds a fallback makes it fine.

mod fix;
mod usage;

use super::{Checker, Rule, RuleInfo};
use crate::semantic::{ImportGuard, Semantic};
use crate::source::ast::{self, Expr, Ranged, Stmt};
use crate::walk::{self, Visitor};
use issue_model::{Category, Severity};

pub struct CudaOnlyKernel;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_FLA",
    name: "cuda-only-kernel",
    category: Category::Operator,
    severity: Severity::Error,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_FLA.md",
    summary: "CUDA-only kernels and libraries (flash_attn, xformers, apex, bitsandbytes, triton, …) that fail on the NPU.",
    doc: include_str!("fla.md"),
    check: &CudaOnlyKernel,
};

impl Rule for CudaOnlyKernel {
    /// Config values that select a CUDA-only kernel: `attn_implementation: flash_attention_2`,
    /// `use_liger_kernel: true`, a bitsandbytes `optim:`, `load_in_4bit: true`.
    fn config(&self, cx: &mut crate::contexts::ConfigChecker<'_>) {
        super::cfg::report_pairs(cx, super::cfg::judge_kernel);
    }

    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let modules: Vec<&str> = match stmt {
            Stmt::Import(import) => import.names.iter().map(|a| a.name.as_str()).collect(),
            Stmt::ImportFrom(from) => {
                if from.level.as_ref().is_some_and(|l| l.to_u32() > 0) {
                    return;
                }
                from.module.iter().map(ast::Identifier::as_str).collect()
            }
            Stmt::Assign(a) => {
                if a.targets.iter().any(is_attn_impl_target) && is_flash_attention_2(&a.value) {
                    let fix = fix::flash_fix(cx, &a.value);
                    cx.report(a.value.range(), FLASH_ATTENTION_2).fix = fix;
                }
                if let Some(range) = usage::bnb_subscript_store(a) {
                    cx.report(range, usage::BNB);
                }
                return;
            }
            Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_) | Stmt::AnnAssign(_) => {
                for default in usage::flash_defaults(stmt) {
                    let message = if usage::is_flash_value(default) {
                        FLASH_ATTENTION_2
                    } else {
                        usage::FLAG
                    };
                    let fix = fix::flash_fix(cx, default);
                    cx.report(default.range(), message).fix = fix;
                }
                return;
            }
            _ => return,
        };
        if modules
            .iter()
            .any(|m| m.starts_with("torch.nn.attention.flex_attention"))
        {
            if !guarded_with_fallback(cx.semantic()) && !under_availability_check(cx) {
                cx.report(stmt.range(), FLEX_ATTENTION);
            }
            return;
        }
        let Some((lib, advice)) = modules.iter().find_map(|m| cuda_only(m)) else {
            return;
        };
        let sem = cx.semantic();
        if guarded_with_fallback(sem) || under_availability_check(cx) {
            return;
        }
        // An import already guarded keeps its own error path: a second `try` around it would
        // catch the ImportError first and leave that path dead.
        let fix = (!already_guarded(cx))
            .then(|| fix::sdpa_fallback(cx, stmt))
            .flatten();
        cx.report(
            stmt.range(),
            format!("`{lib}` ships CUDA kernels only, so this import fails on the NPU; {advice} (see P_FLA.md)"),
        )
        .fix = fix;
    }

    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        let message = match expr {
            Expr::Constant(_) if is_flash_attention_2(expr) => {
                binds_flash_attention_2(cx.semantic(), expr).then_some(FLASH_ATTENTION_2.to_owned())
            }
            Expr::Call(call) => {
                if let Some(message) = call_message(cx.semantic(), call) {
                    // A JIT-built extension whose failure falls back to a portable path.
                    let optional = is_extension_build(cx.semantic(), call)
                        && build_has_fallback(cx.semantic(), expr.range());
                    (!optional).then_some(message)
                } else if let Some(range) = usage::bnb_call(call) {
                    if !under_availability_check(cx) {
                        cx.report(range, usage::BNB);
                    }
                    None
                } else if usage::is_compile(cx.semantic(), expr)
                    && !under_cuda_type_check(cx)
                    && !crate::names::is_test_path(cx.path())
                {
                    // A test compiles to check the compiled model, not to train.
                    Some(usage::COMPILE.to_owned())
                } else {
                    None
                }
            }
            // `@torch.compile` without arguments: the decorator is the bare reference.
            Expr::Attribute(_) | Expr::Name(_)
                if crate::analysis::last_name_of(expr) == "compile"
                    && is_decorator(cx.semantic(), expr)
                    && usage::is_compile(cx.semantic(), expr)
                    && !under_cuda_type_check(cx)
                    && !crate::names::is_test_path(cx.path()) =>
            {
                Some(usage::COMPILE.to_owned())
            }
            Expr::Attribute(_) if usage::bnb_reference(cx.semantic(), expr) => {
                // `try: Linear4bit = bnb.nn.Linear4bit except ImportError: Linear4bit = None`
                let optional = under_availability_check(cx) || guarded_with_fallback(cx.semantic());
                (!optional).then(|| usage::BNB.to_owned())
            }
            Expr::Dict(d) => {
                if let Some(range) = usage::bnb_dict_entry(d) {
                    cx.report(range, usage::BNB);
                }
                None
            }
            _ => None,
        };
        if let Some(message) = message {
            let fix = fix::flash_fix(cx, expr).filter(|_| message.contains("flash_attention_2"));
            cx.report(expr.range(), message).fix = fix;
        }
    }

    fn file_end<'a>(&self, cx: &mut Checker<'a>, body: &'a [Stmt]) {
        // A flag selects flash-attn only where the file spells a flash value.
        let text = cx.file().text;
        if text.contains("flash_attention_") || text.contains("kernels-community/") {
            for default in usage::selecting_flags(body) {
                cx.report(default.range(), usage::FLAG);
            }
        }
        // Most files import no attention kernel: a walk over the statements alone says so.
        let mut imports = KernelImports { found: false };
        imports.visit_body(body);
        if !imports.found {
            return;
        }
        let mut walker = KernelCalls {
            text: cx.file().text,
            guards: Vec::new(),
            availability: 0,
            bindings: Vec::new(),
            calls: Vec::new(),
        };
        walker.visit_body(body);
        let hits: Vec<_> = walker
            .calls
            .iter()
            .filter_map(|call| walker.kernel(call).map(|k| (call.range(), k)))
            .collect();
        for (range, (name, advice)) in hits {
            cx.report(
                range,
                format!(
                    "`{name}` runs a CUDA-only attention kernel, which does not exist on the NPU; {advice} \
                     (see P_FLA.md)"
                ),
            );
        }
    }
}

const FLEX_ATTENTION: &str = "FlexAttention is compiled by inductor into Triton kernels, which do \
     not exist on the NPU; use F.scaled_dot_product_attention with an explicit mask (see P_FLA.md)";

const FLASH_ATTENTION_2: &str = "attn_implementation=\"flash_attention_2\" needs the CUDA-only flash_attn \
     package, so loading the model fails on the NPU; use \"sdpa\" (see P_FLA.md)";

/// The library and the advice for a CUDA-only module path.
fn cuda_only(module: &str) -> Option<(&'static str, &'static str)> {
    let top = module.split('.').next().unwrap_or(module);
    let found = match top {
        "flash_attn" | "flash_attn_2_cuda" | "flash_attn_cuda" | "flash_attn_interface" => (
            "flash_attn",
            "port its calls to torch_npu.npu_fusion_attention or F.scaled_dot_product_attention",
        ),
        "xformers" => (
            "xformers",
            "replace memory_efficient_attention with F.scaled_dot_product_attention or torch_npu.npu_fusion_attention",
        ),
        "apex" | "amp_C" | "fused_layer_norm_cuda" => (
            "apex",
            "use torch.optim.AdamW, torch.nn.LayerNorm, torch_npu.npu_rms_norm or torch.autocast instead",
        ),
        "bitsandbytes" => (
            "bitsandbytes",
            "use torch.optim.AdamW and full-precision weights",
        ),
        "mamba_ssm" | "causal_conv1d" | "selective_scan_cuda" => (
            "mamba_ssm",
            "use a pure-PyTorch selective scan and convolution",
        ),
        "triton" => (
            "triton",
            "use the PyTorch reference implementation of the kernel (transfer_to_npu forces has_triton() to False)",
        ),
        "deepspeed" if module.starts_with("deepspeed.ops") => (
            "deepspeed.ops",
            "use torch.optim.AdamW or torch_npu.optim.NpuFusedAdamW",
        ),
        _ => return None,
    };
    Some(found)
}

/// The import sits in a `try` whose `ImportError` handler installs a fallback.
fn guarded_with_fallback(sem: &Semantic<'_>) -> bool {
    guard_has_fallback(sem.import_guard())
}

/// `guard` (the innermost `try` that catches `ImportError`) installs a fallback.
fn guard_has_fallback(guard: Option<&ImportGuard<'_>>) -> bool {
    let Some(guard) = guard else {
        return false;
    };
    if guard.reraises {
        return false;
    }
    // On the NPU the import raises `ImportError`: when a handler names it, that one decides
    // (a later `except Exception:` that only logs does not run).
    let handlers: Vec<&ast::ExceptHandlerExceptHandler> = guard
        .stmt
        .handlers
        .iter()
        .map(|ast::ExceptHandler::ExceptHandler(h)| h)
        .collect();
    let specific: Vec<&ast::ExceptHandlerExceptHandler> = handlers
        .iter()
        .copied()
        .filter(|h| h.type_.as_deref().is_some_and(names_import_error))
        .collect();
    let deciding = if specific.is_empty() {
        handlers
    } else {
        specific
    };
    deciding.iter().all(|h| handler_has_fallback(&h.body))
}

fn names_import_error(expr: &Expr) -> bool {
    match expr {
        Expr::Tuple(t) => t.elts.iter().any(names_import_error),
        other => matches!(
            crate::semantic::dotted(other).as_str(),
            "ImportError" | "ModuleNotFoundError"
        ),
    }
}

/// The handler binds something (a fallback name, a flag set to `False`, a replacement import
/// or definition) or does nothing; it does not set a flag to `True` or only log.
fn handler_has_fallback(body: &[Stmt]) -> bool {
    let sets_true = body.iter().any(|s| match s {
        Stmt::Assign(a) => matches!(a.value.as_ref(), Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true))),
        _ => false,
    });
    if sets_true {
        return false;
    }
    let binds = body.iter().any(|s| {
        matches!(
            s,
            Stmt::Assign(_)
                | Stmt::AnnAssign(_)
                | Stmt::Import(_)
                | Stmt::ImportFrom(_)
                | Stmt::FunctionDef(_)
                | Stmt::ClassDef(_)
                | Stmt::Return(_)
                | Stmt::If(_)
                | Stmt::Try(_)
                | Stmt::Continue(_)
                | Stmt::Break(_)
        )
    });
    let only_pass = body.iter().all(|s| matches!(s, Stmt::Pass(_)));
    binds || only_pass
}

/// Inside `if TYPE_CHECKING:` or an availability check (`if is_flash_attn_2_available():`,
/// `importlib.util.find_spec(...)`), but not `torch.cuda.is_available()`, which the NPU
/// answers `True` under `transfer_to_npu`.
fn under_availability_check(cx: &Checker<'_>) -> bool {
    cx.semantic().stmts().iter().any(|s| {
        let Stmt::If(i) = s else { return false };
        // `if is_bnb_available(): import ... else: raise ...` has no fallback.
        is_availability_test(cx.slice(i.test.range())) && !raises_first(&i.orelse)
    })
}

/// The import sits in a `try` that catches `ImportError` (whatever its handler does) or under
/// an `if` that checks the library's availability (whatever its `else` does).
fn already_guarded(cx: &Checker<'_>) -> bool {
    cx.semantic().import_guard().is_some()
        || cx
            .semantic()
            .stmts()
            .iter()
            .any(|s| matches!(s, Stmt::If(i) if is_availability_test(cx.slice(i.test.range()))))
}

/// The branch starts by raising: the library is required, not optional.
fn raises_first(body: &[Stmt]) -> bool {
    matches!(body.first(), Some(Stmt::Raise(_)))
}

/// Inside an `if` that compares a device type with `"cuda"` (`x.device.type == "cuda"`),
/// which stays false on the NPU even under `transfer_to_npu`.
fn under_cuda_type_check(cx: &Checker<'_>) -> bool {
    cx.semantic().stmts().iter().any(|s| {
        let Stmt::If(i) = s else { return false };
        let test = cx.slice(i.test.range());
        (test.contains("\"cuda\"") || test.contains("'cuda'")) && !test.contains("is_available")
    })
}

fn is_availability_test(test: &str) -> bool {
    let flag = test.trim_start_matches("not ").trim_start_matches("self.");
    (test.contains("available") && !test.contains("cuda.is_available"))
        || flag.starts_with("has_")
        || flag.starts_with("_has_")
        || flag.starts_with("HAS_")
        || flag.starts_with("_HAS_")
        || test.contains("find_spec")
        || test.contains("TYPE_CHECKING")
        || test.contains("is_installed")
        || test.contains("importlib")
}

/// Attention kernels whose calls must be ported one by one: `flash_attn_*` functions of
/// `flash_attn` and `memory_efficient_attention*` of `xformers`. The advice for a call of `name`.
fn kernel_advice(module: &str, name: &str) -> Option<&'static str> {
    let top = module.split('.').next().unwrap_or(module);
    match top {
        "flash_attn" | "flash_attn_interface" if name.starts_with("flash_attn_") => {
            Some(if name.contains("varlen") {
                "port it to torch_npu.npu_fusion_attention with input_layout \"TND\", \
                 actual_seq_qlen=cu_seqlens_q[1:] and actual_seq_kvlen=cu_seqlens_k[1:]"
            } else {
                "port it to torch_npu.npu_fusion_attention (input_layout \"BSND\", scale=1/sqrt(head_dim), \
                 sparse_mode=3 with a 2048x2048 causal mask when causal) or F.scaled_dot_product_attention"
            })
        }
        "xformers" if name.starts_with("memory_efficient_attention") => {
            Some("port it to F.scaled_dot_product_attention or torch_npu.npu_fusion_attention")
        }
        _ => None,
    }
}

/// Walks the statements of a whole file (nested functions included, expressions skipped) for
/// an import that [`KernelCalls::bind`] would record.
struct KernelImports {
    found: bool,
}

impl<'a> Visitor<'a> for KernelImports {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.found {
            return;
        }
        let modules: Vec<&str> = match stmt {
            Stmt::Import(import) => import.names.iter().map(|a| a.name.as_str()).collect(),
            Stmt::ImportFrom(from) if from.level.as_ref().is_none_or(|l| l.to_u32() == 0) => {
                from.module.iter().map(ast::Identifier::as_str).collect()
            }
            _ => {
                walk::walk_stmt(self, stmt);
                return;
            }
        };
        self.found = modules.into_iter().any(is_kernel_module);
    }

    fn visit_expr(&mut self, _expr: &'a Expr) {}
}

/// A module whose imports [`KernelCalls`] tracks.
fn is_kernel_module(module: &str) -> bool {
    let top = module.split('.').next().unwrap_or(module);
    matches!(top, "flash_attn" | "flash_attn_interface" | "xformers")
}

/// A name bound by an import of a CUDA-only attention kernel.
struct KernelBinding {
    /// The imported module (`flash_attn`, `xformers.ops`).
    module: String,
    /// The imported member (`flash_attn_func`), or `None` for `import flash_attn`.
    member: Option<String>,
    guarded: bool,
}

/// Walks a whole file (nested functions included) for the imports of attention kernels and
/// the calls through them.
struct KernelCalls<'a> {
    text: &'a str,
    guards: Vec<ImportGuard<'a>>,
    availability: usize,
    bindings: Vec<(String, KernelBinding)>,
    calls: Vec<&'a ast::ExprCall>,
}

impl<'a> Visitor<'a> for KernelCalls<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let module = alias.name.as_str();
                    let bound = alias.asname.as_ref().map_or_else(
                        || module.split('.').next().unwrap_or(module).to_owned(),
                        |a| a.as_str().to_owned(),
                    );
                    self.bind(bound, module, None);
                }
            }
            Stmt::ImportFrom(from) if from.level.as_ref().is_none_or(|l| l.to_u32() == 0) => {
                let Some(module) = from.module.as_ref().map(ast::Identifier::as_str) else {
                    return;
                };
                for alias in &from.names {
                    let name = alias.name.as_str();
                    let bound = alias.asname.as_ref().map_or(name, ast::Identifier::as_str);
                    self.bind(bound.to_owned(), module, Some(name));
                }
            }
            Stmt::Try(t) if crate::semantic::catches_import_error(&t.handlers) => {
                self.guards.push(ImportGuard {
                    stmt: t,
                    reraises: crate::semantic::import_handler_reraises(&t.handlers),
                });
                self.visit_body(&t.body);
                self.guards.pop();
                for h in &t.handlers {
                    self.visit_except_handler(h);
                }
                self.visit_body(&t.orelse);
                self.visit_body(&t.finalbody);
            }
            Stmt::If(i) => {
                let text = &self.text[usize::from(i.test.start())..usize::from(i.test.end())];
                let available = is_availability_test(text);
                self.availability += usize::from(available);
                walk::walk_stmt(self, stmt);
                self.availability -= usize::from(available);
            }
            _ => walk::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Call(call) = expr {
            self.calls.push(call);
        }
        walk::walk_expr(self, expr);
    }
}

impl KernelCalls<'_> {
    fn bind(&mut self, bound: String, module: &str, member: Option<&str>) {
        if !is_kernel_module(module) {
            return;
        }
        let guarded = self.availability > 0 || guard_has_fallback(self.guards.last());
        self.bindings.push((
            bound,
            KernelBinding {
                module: module.to_owned(),
                member: member.map(str::to_owned),
                guarded,
            },
        ));
    }

    /// The kernel a call runs and the advice, when every import binding its name is unguarded.
    fn kernel(&self, call: &ast::ExprCall) -> Option<(String, &'static str)> {
        let (base, attr) = match call.func.as_ref() {
            Expr::Name(n) => (n.id.as_str(), None),
            Expr::Attribute(a) => match a.value.as_ref() {
                Expr::Name(n) => (n.id.as_str(), Some(a.attr.as_str())),
                _ => return None,
            },
            _ => return None,
        };
        let bindings: Vec<&KernelBinding> = self
            .bindings
            .iter()
            .filter(|(name, _)| name == base)
            .map(|(_, b)| b)
            .collect();
        if bindings.is_empty() || bindings.iter().any(|b| b.guarded) {
            return None;
        }
        let binding = bindings[0];
        let (module, name) = match (&binding.member, attr) {
            (Some(member), None) => (binding.module.clone(), member.clone()),
            (None, Some(attr)) => (binding.module.clone(), attr.to_owned()),
            (Some(member), Some(attr)) => (format!("{}.{member}", binding.module), attr.to_owned()),
            (None, None) => return None,
        };
        kernel_advice(&module, &name).map(|advice| (name, advice))
    }
}

fn is_flash_attention_2(expr: &Expr) -> bool {
    usage::is_flash_value(expr)
}

fn is_attn_impl_target(target: &Expr) -> bool {
    let name = match target {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        _ => return false,
    };
    matches!(name, "attn_implementation" | "_attn_implementation")
}

/// `"flash_attention_2"` passed to a call, stored in a dict or a field default — not compared,
/// not chosen at run time by a conditional, not logged.
fn binds_flash_attention_2(sem: &Semantic<'_>, expr: &Expr) -> bool {
    match sem.parent_expr() {
        None => match sem.current_stmt() {
            Some(Stmt::AnnAssign(a)) => a.value.as_deref().is_some_and(|v| std::ptr::eq(v, expr)),
            _ => false,
        },
        Some(Expr::Call(c)) => {
            let short = match c.func.as_ref() {
                Expr::Name(n) => n.id.as_str(),
                Expr::Attribute(a) => a.attr.as_str(),
                _ => "",
            };
            !matches!(
                short,
                "print"
                    | "info"
                    | "debug"
                    | "warning"
                    | "warn"
                    | "error"
                    | "log"
                    | "startswith"
                    | "endswith"
                    | "format"
                    | "join"
                    | "replace"
                    | "split"
            )
        }
        Some(Expr::Dict(d)) => d.values.iter().any(|v| std::ptr::eq(v, expr)),
        // `"kernels-community/flash-attn3" if torch.version.hip else ...`: both branches are
        // CUDA-only kernels, so no branch is a fallback (reported once, at the first).
        Some(Expr::IfExp(i)) => {
            std::ptr::eq(i.body.as_ref(), expr) && is_flash_attention_2(&i.orelse)
        }
        _ => false,
    }
}

fn call_message(sem: &Semantic<'_>, call: &ast::ExprCall) -> Option<String> {
    if call.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|a| a.as_str() == "use_flash_attention_2")
            && matches!(&k.value, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)))
    }) {
        return Some(FLASH_ATTENTION_2.replace(
            "attn_implementation=\"flash_attention_2\"",
            "use_flash_attention_2=True",
        ));
    }
    // Every name below is under `torch.`: most calls are not, and say so cheaply.
    if !sem.resolves_with_prefix(&call.func, "torch.") {
        return None;
    }
    let q = sem.resolve(&call.func)?;
    let keyword = |name: &str| {
        call.keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
            .map(|k| &k.value)
    };
    match q.as_str() {
        "torch.backends.cuda.sdp_kernel" => Some(
            "torch.backends.cuda.sdp_kernel selects CUDA attention kernels that the NPU does not have; \
             remove the context manager and let SDPA choose (see P_FLA.md)"
                .to_owned(),
        ),
        "torch.utils.cpp_extension.CUDAExtension" => Some(
            "a CUDAExtension builds CUDA kernels, which cannot build or run on the NPU; use a \
             PyTorch or torch_npu implementation of the op (see P_FLA.md)"
                .to_owned(),
        ),
        "torch.utils.cpp_extension.load" => {
            let sources = keyword("sources").or_else(|| call.args.get(1))?;
            mentions_cu(sources).then(|| {
                "this extension compiles `.cu` CUDA sources, which cannot build or run on the NPU; \
                 use a PyTorch or torch_npu implementation of the op (see P_FLA.md)"
                    .to_owned()
            })
        }
        "torch.utils.cpp_extension.load_inline" => keyword("cuda_sources").map(|_| {
            "load_inline with cuda_sources compiles CUDA kernels, which cannot build or run on the \
             NPU; use a PyTorch or torch_npu implementation of the op (see P_FLA.md)"
                .to_owned()
        }),
        _ => None,
    }
}

/// `cpp_extension.load(...)` or `load_inline(...)`: an extension compiled when the code runs.
fn is_extension_build(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    sem.matches(
        &call.func,
        &[
            "torch.utils.cpp_extension.load",
            "torch.utils.cpp_extension.load_inline",
        ],
    )
}

/// The code at `range` is in the body of a `try` with a handler that catches the build's
/// failure (a bare `except`, `Exception`, `RuntimeError`, `OSError`, `ImportError`) and does
/// not raise again: `except Exception: warnings.warn(...); fbd_cuda = None` keeps a portable path.
fn build_has_fallback(sem: &Semantic<'_>, range: crate::source::TextRange) -> bool {
    let catches = |t: &Expr| {
        crate::analysis::find_in_expr(t).iter().any(|e| {
            matches!(
                crate::analysis::last_name_of(e),
                "Exception" | "BaseException" | "RuntimeError" | "OSError" | "ImportError"
            )
        })
    };
    sem.stmts().iter().rev().any(|s| {
        let Stmt::Try(t) = s else { return false };
        t.body.iter().any(|b| b.range().contains_range(range))
            && t.handlers
                .iter()
                .any(|ast::ExceptHandler::ExceptHandler(h)| {
                    h.type_.as_deref().is_none_or(catches)
                        && !h.body.iter().any(|b| matches!(b, Stmt::Raise(_)))
                })
    })
}

fn mentions_cu(expr: &Expr) -> bool {
    crate::analysis::find_in_expr(expr).iter().any(|e| {
        matches!(e, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if std::path::Path::new(s).extension().is_some_and(|e| e.eq_ignore_ascii_case("cu"))))
    })
}

/// `expr` is one of the decorators of the function being defined.
fn is_decorator(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let decorators = match sem.current_stmt() {
        Some(Stmt::FunctionDef(f)) => &f.decorator_list,
        Some(Stmt::AsyncFunctionDef(f)) => &f.decorator_list,
        Some(Stmt::ClassDef(c)) => &c.decorator_list,
        _ => return false,
    };
    decorators.iter().any(|d| d.range() == expr.range())
}
