//! What the NPU would run once a device comparison's fix makes it match as on CUDA: the branch
//! the comparison selects there, and the first thing in it that `transfer_to_npu` does not map.
//!
//! A fix that accepts `"npu"` beside `"cuda"` sends the NPU down the CUDA branch. That is right
//! when the branch only calls torch, whose `torch.cuda` names `transfer_to_npu` maps to
//! `torch_npu` ([`crate::remap`], read from each pinned wheel), and wrong when the branch calls a
//! `torch.cuda` name that some pinned torch-npu does not map (`torch.cuda.nvtx`,
//! `torch.cuda.jiterator`), a CUDA-only library (NVML, `CuPy`, Triton, flash-attn), or hands a
//! device index to code outside torch (an EGL rendering device, `CUDA_VISIBLE_DEVICES`), which
//! nothing remaps. A `torch.cuda` object that `transfer_to_npu` swaps for another
//! (`torch.cuda.CUDAGraph` becomes `torch.npu.NPUGraph`) makes the fix unsafe: the NPU would
//! leave the path it runs today for one nobody has seen run there.

use super::gate;
use crate::remap::{self, Version};
use crate::semantic::Semantic;
use crate::source::ast::{self, CmpOp, Expr, Ranged, Stmt, UnaryOp};
use std::ops::ControlFlow;

/// Which branches of a test run on CUDA.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// The test is true on CUDA: its body.
    Body,
    /// The test is false on CUDA: its `else`, or what follows an early exit.
    Else,
    /// Combined with other conditions: either.
    Either,
}

impl Taken {
    fn negate(self) -> Taken {
        match self {
            Taken::Body => Taken::Else,
            Taken::Else => Taken::Body,
            Taken::Either => Taken::Either,
        }
    }
}

/// What the branch a comparison selects on CUDA uses that the NPU does not run as CUDA does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Selected {
    /// Something `transfer_to_npu` does not map (described): accepting `"npu"` fails there.
    Unmapped(String),
    /// A `torch.cuda` name that `transfer_to_npu` replaces with another object (described,
    /// `torch.cuda.CUDAGraph` becomes `torch.npu.NPUGraph`): the NPU would run a different
    /// thing than today's fallback, which the fix cannot promise works.
    Replaced(String),
}

/// What the fix of the comparison `whole` (`cmp`) would send the NPU into, from the branch it
/// selects on CUDA; `None` when that branch only uses what `transfer_to_npu` maps name for name.
pub(super) fn unmapped_in_selected(
    sem: &Semantic<'_>,
    cmp: &ast::ExprCompare,
    whole: &Expr,
) -> Option<Selected> {
    let on_cuda = match cmp.ops.first()? {
        CmpOp::Eq | CmpOp::Is | CmpOp::In => Taken::Body,
        CmpOp::NotEq | CmpOp::IsNot | CmpOp::NotIn => Taken::Else,
        _ => return None,
    };
    // `unittest.skipUnless(device == "cuda", ...)`: what runs is the tests it gates.
    if let Some(q) = sem.exprs().iter().rev().find_map(|parent| match parent {
        Expr::Call(call) => sem.resolve(&call.func).filter(|q| is_test_skip(q)),
        _ => None,
    }) {
        return Some(Selected::Unmapped(format!(
            "a test skip condition (`{q}`), and the tests it gates were not read"
        )));
    }
    // The comparison's polarity through `not` and boolean operators up to the test that holds it.
    let mut taken = on_cuda;
    for parent in sem.exprs().iter().rev() {
        match parent {
            Expr::UnaryOp(u) if matches!(u.op, UnaryOp::Not) => taken = taken.negate(),
            Expr::BoolOp(_) => taken = Taken::Either,
            Expr::IfExp(e) if e.test.range().contains_range(whole.range()) => {
                let mut branches = Vec::new();
                if taken != Taken::Else {
                    branches.push(e.body.as_ref());
                }
                if taken != Taken::Body {
                    branches.push(e.orelse.as_ref());
                }
                if let Some(why) = branches.iter().find_map(|b| in_expr(sem, b)) {
                    return Some(why);
                }
                // `num_gpus = 0.5 if device == "cuda" else 0`: a count of CUDA GPUs.
                if let Some(Stmt::Assign(a)) = sem.current_stmt()
                    && let [Expr::Name(target)] = a.targets.as_slice()
                    && std::ptr::eq(a.value.as_ref(), *parent)
                    && is_gpu_count(target.id.as_str())
                {
                    return Some(Selected::Unmapped(format!(
                        "`{}`, a count of CUDA GPUs for code outside torch (a scheduler such as \
                         Ray counts CUDA GPUs only)",
                        target.id
                    )));
                }
                // `render_gpu = device.index if device.type == "cuda" else 0`: follow the index.
                if !branches.iter().any(|b| is_device_index_argument(sem, b)) {
                    return None;
                }
                let Some(Stmt::Assign(a)) = sem.current_stmt() else {
                    return None;
                };
                let ([Expr::Name(target)], true) = (
                    a.targets.as_slice(),
                    std::ptr::eq(a.value.as_ref(), *parent),
                ) else {
                    return None;
                };
                return index_flow(sem, enclosing_body(sem, false)?, target.id.as_str())
                    .map(Selected::Unmapped);
            }
            _ => break,
        }
    }
    let stmt = sem.current_stmt()?;
    match stmt {
        Stmt::If(s) if s.test.range().contains_range(whole.range()) => {
            let scope = enclosing_body(sem, false).unwrap_or_default();
            in_branches(sem, scope, stmt, &s.body, &s.orelse, taken)
        }
        Stmt::While(s) if s.test.range().contains_range(whole.range()) => {
            let scope = enclosing_body(sem, false).unwrap_or_default();
            in_branches(sem, scope, stmt, &s.body, &s.orelse, taken)
        }
        // `use_graphs = device.type == "cuda"`, then `if use_graphs:` (or `if self.use_graphs:`
        // in another method).
        Stmt::Assign(a) if a.value.range() == whole.range() => match a.targets.as_slice() {
            [target] => graph_setting(sem, target).or_else(|| flag_uses(sem, target, taken)),
            _ => None,
        },
        Stmt::AnnAssign(a)
            if a.value
                .as_deref()
                .is_some_and(|v| v.range() == whole.range()) =>
        {
            flag_uses(sem, &a.target, taken)
        }
        _ => None,
    }
}

/// What the CUDA branches of `stmt` (an `if` or `while` in `scope`, a function's body) use.
fn in_branches<'a>(
    sem: &Semantic<'_>,
    scope: &'a [Stmt],
    stmt: &'a Stmt,
    body: &'a [Stmt],
    orelse: &'a [Stmt],
    taken: Taken,
) -> Option<Selected> {
    let mut branches: Vec<&[Stmt]> = Vec::new();
    if taken != Taken::Else {
        branches.push(body);
    }
    if taken != Taken::Body {
        branches.push(orelse);
        // `if device.type != "cuda": return eager(x)` leaves the rest of the block to CUDA.
        if matches!(body.last(), Some(Stmt::Return(_) | Stmt::Raise(_))) {
            let block = crate::analysis::block_of(scope, stmt).unwrap_or_default();
            if let Some(at) = block.iter().position(|b| std::ptr::eq(b, stmt)) {
                branches.push(&block[at + 1..]);
            }
        }
    }
    branches.into_iter().find_map(|b| in_stmts(sem, b))
}

/// The `if` statements that test the flag `target` is assigned, in the enclosing function (a
/// name) or class (a `self.` attribute), and what their CUDA branch calls.
fn flag_uses(sem: &Semantic<'_>, target: &Expr, taken: Taken) -> Option<Selected> {
    let (scope, flag): (&[Stmt], String) = match target {
        Expr::Name(n) => (enclosing_body(sem, false)?, n.id.to_string()),
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
            (enclosing_body(sem, true)?, format!("self.{}", a.attr))
        }
        _ => return None,
    };
    // A name is tested in its function; a `self.` flag in any method of the class.
    let functions: Vec<&[Stmt]> = if matches!(target, Expr::Name(_)) {
        vec![scope]
    } else {
        scope
            .iter()
            .filter_map(|s| match s {
                Stmt::FunctionDef(f) => Some(&f.body[..]),
                Stmt::AsyncFunctionDef(f) => Some(&f.body[..]),
                _ => None,
            })
            .collect()
    };
    functions.into_iter().find_map(|function| {
        let mut ifs: Vec<&Stmt> = Vec::new();
        crate::analysis::statements(function, &mut ifs);
        ifs.into_iter().find_map(|stmt| {
            let Stmt::If(s) = stmt else { return None };
            let polarity = flag_polarity(&s.test, &flag)?;
            let taken = if polarity { taken } else { taken.negate() };
            in_branches(sem, function, stmt, &s.body, &s.orelse, taken)
        })
    })
}

/// Whether `test` is the flag (`true`), its negation (`false`) or a combination with it
/// (`true`: its branches are checked both ways by the caller's `Either`); `None` when it does
/// not read the flag.
fn flag_polarity(test: &Expr, flag: &str) -> Option<bool> {
    match test {
        Expr::UnaryOp(u) if matches!(u.op, UnaryOp::Not) => {
            flag_polarity(&u.operand, flag).map(|p| !p)
        }
        Expr::BoolOp(b) => b.values.iter().find_map(|v| flag_polarity(v, flag)),
        _ => (crate::semantic::dotted(test) == flag).then_some(true),
    }
}

/// The body of the innermost enclosing function, or of the class when `class` is set.
fn enclosing_body<'a>(sem: &Semantic<'a>, class: bool) -> Option<&'a [Stmt]> {
    sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::ClassDef(c) if class => Some(&c.body[..]),
        Stmt::FunctionDef(f) if !class => Some(&f.body[..]),
        Stmt::AsyncFunctionDef(f) if !class => Some(&f.body[..]),
        _ => None,
    })
}

fn in_stmts(sem: &Semantic<'_>, body: &[Stmt]) -> Option<Selected> {
    let mut found = Found::default();
    crate::analysis::try_each_expr(body, |expr| found.visit(sem, expr));
    if let Some(why) = found.finish() {
        return Some(why);
    }
    let mut stmts = Vec::new();
    crate::analysis::statements(body, &mut stmts);
    stmts
        .into_iter()
        .find_map(|s| environment_write(sem, s))
        .map(Selected::Unmapped)
}

fn in_expr(sem: &Semantic<'_>, expr: &Expr) -> Option<Selected> {
    let mut found = Found::default();
    for e in crate::analysis::find_in_expr(expr) {
        if found.visit(sem, e).is_break() {
            break;
        }
    }
    found.finish()
}

/// What a branch uses that `transfer_to_npu` leaves to CUDA, gathered node by node.
#[derive(Default)]
struct Found {
    /// Every `torch.cuda.` name the branch reads; only the longest of a chain is judged
    /// (`torch.cuda.amp` inside `torch.cuda.amp.autocast` is decided by `autocast`).
    cuda_names: Vec<String>,
    other: Option<String>,
}

impl Found {
    fn visit(&mut self, sem: &Semantic<'_>, expr: &Expr) -> ControlFlow<()> {
        match expr {
            Expr::Attribute(_) | Expr::Name(_) => {
                if let Some(q) = sem.resolve(expr).filter(|q| q.starts_with("torch.cuda.")) {
                    self.cuda_names.push(q);
                }
                // `get_device_properties(0).major`: mapped, but meaningless on the NPU.
                if let Expr::Attribute(a) = expr
                    && super::capability_attr(sem, a).is_some()
                {
                    self.other = Some(differs_on_npu(expr));
                }
            }
            Expr::Call(call) => {
                self.other = unmapped_call(sem, call).or_else(|| {
                    // A call transfer_to_npu maps but whose NPU result is not CUDA's
                    // (`torch.cuda.get_device_capability()` returns None there): the rule's own
                    // judgement of the call, so the fix and the finding agree.
                    super::call_message(sem, call).map(|_| differs_on_npu(expr))
                });
            }
            _ => {}
        }
        if self.other.is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn finish(self) -> Option<Selected> {
        if let Some(other) = self.other {
            return Some(Selected::Unmapped(other));
        }
        let names = &self.cuda_names;
        let longest = names.iter().filter(|q| {
            !names.iter().any(|longer| {
                longer
                    .strip_prefix(q.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            })
        });
        let mut replaced = None;
        for q in longest {
            let path = &q["torch.cuda.".len()..];
            let mapped = |v: &Version| v.cuda_name_is_npu(path);
            if !remap::every(mapped) {
                return Some(Selected::Unmapped(match remap::versions(mapped) {
                    Some(some) => format!("`{q}`, which only {some} maps to torch_npu"),
                    None => format!("`{q}`, which transfer_to_npu does not map to torch_npu"),
                }));
            }
            if replaced.is_none() {
                replaced = replacement(q).map(|by| {
                    Selected::Replaced(format!("`{q}`, which transfer_to_npu replaces with `{by}`"))
                });
            }
        }
        replaced
    }
}

/// How a branch's call or attribute that `P_DEV` reports by itself is named in a refused fix.
fn differs_on_npu(expr: &Expr) -> String {
    let call = if matches!(expr, Expr::Call(_)) {
        "()"
    } else {
        ""
    };
    format!(
        "`{}{call}`, which does not give on the NPU what it gives on CUDA (reported on its own \
         line)",
        crate::semantic::dotted(expr)
    )
}

/// The other object every pinned `transfer_to_npu` assigns to `q` (`torch.npu.NPUGraph` for
/// `torch.cuda.CUDAGraph`); `None` when one keeps the name (a `torch_npu` function copied under
/// it, or a wrapper of the CUDA one that only rewrites device arguments).
fn replacement(q: &str) -> Option<&'static str> {
    let by = remap::all().first()?.assigned(q)?;
    let substituted = |v: &Version| {
        v.assigned(q)
            .is_some_and(|a| a == by && !a.starts_with('_') && !a.contains('('))
    };
    remap::every(substituted).then_some(by)
}

/// A call into a CUDA-only library, or one that hands a device index to code outside torch.
fn unmapped_call(sem: &Semantic<'_>, call: &ast::ExprCall) -> Option<String> {
    let q = sem.resolve(&call.func)?;
    if gate::is_cuda_only_name(&q) || in_module(&q, NVIDIA_ONLY_LIBRARIES) {
        return Some(format!("`{q}`, a CUDA-only library"));
    }
    if names_cuda_class(&q) {
        return Some(format!("`{q}`, a CUDA class outside torch"));
    }
    for keyword in &call.keywords {
        if let Some(arg) = &keyword.arg
            && let Expr::Constant(c) = &keyword.value
            && let ast::Constant::Str(value) = &c.value
            && gate::is_cuda_only_name(value)
        {
            return Some(format!(
                "`{arg}=\"{value}\"`, which asks `{q}` for a CUDA-only library"
            ));
        }
    }
    if let Some((_, keyword, overload)) = CUDA_KERNEL_ONLY
        .iter()
        .find(|(f, k, _)| *f == q && call.keywords.iter().any(|kw| kw.arg.as_deref() == Some(*k)))
    {
        return Some(format!(
            "`{q}` with `{keyword}=` ({overload}), which torch implements for CUDA only"
        ));
    }
    if !outside_torch(&q) {
        return None;
    }
    let index = call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value))
        .find(|a| is_device_index_argument(sem, a))?;
    Some(format!(
        "`{q}` with the device index `{}`, which is outside torch and not remapped (an NPU \
         index there names another device)",
        crate::semantic::dotted(index)
    ))
}

/// A module function outside torch that takes values as they are (a device index is not
/// remapped there); logging aside.
fn outside_torch(q: &str) -> bool {
    q != "torch" && !q.starts_with("torch.") && q.contains('.') && !in_module(q, DISPLAY_ONLY)
}

/// Where the device index held by `name` goes in `body`: a call outside torch that takes it
/// (`make_env(gpu_id=render_gpu)`), or an environment variable set from it.
fn index_flow(sem: &Semantic<'_>, body: &[Stmt], name: &str) -> Option<String> {
    let is_it = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == name);
    let passes_it = |e: &Expr| {
        is_it(e)
            || matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Name(f) if matches!(f.id.as_str(), "int" | "str"))
                && matches!(c.args.as_slice(), [one] if is_it(one)))
    };
    let mut found = None;
    crate::analysis::try_each_expr(body, |expr| {
        if let Expr::Call(call) = expr
            && let Some(q) = sem.resolve(&call.func).filter(|q| outside_torch(q))
            && call
                .args
                .iter()
                .chain(call.keywords.iter().map(|k| &k.value))
                .any(passes_it)
        {
            found = Some(format!(
                "`{q}` with the device index `{name}` it picks, which is outside torch and not \
                 remapped (an NPU index there names another device)"
            ));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    if found.is_some() {
        return found;
    }
    let mut stmts = Vec::new();
    crate::analysis::statements(body, &mut stmts);
    stmts.into_iter().find_map(|stmt| {
        let Stmt::Assign(a) = stmt else { return None };
        let env = a
            .targets
            .iter()
            .any(|t| matches!(t, Expr::Subscript(s) if sem.resolves_to(&s.value, "os.environ")));
        (env && crate::analysis::find_in_expr(&a.value)
            .into_iter()
            .any(is_it))
        .then(|| {
            format!(
                "an environment variable set from the device index `{name}` it picks, which is \
                 outside torch and not remapped (an NPU index there names another device)"
            )
        })
    })
}

/// Libraries that talk to the NVIDIA driver (NVML) or run CUDA kernels themselves, beside the
/// CUDA-only kernel libraries that [`gate`] knows.
const NVIDIA_ONLY_LIBRARIES: &[&str] = &[
    "pynvml",
    "py3nvml",
    "nvidia_smi",
    "nvitop",
    "GPUtil",
    "cupy",
    "pycuda",
    "numba.cuda",
];

/// Modules whose calls only show a value (a device index logged is not a device chosen).
const DISPLAY_ONLY: &[&str] = &["logging", "warnings"];

fn in_module(q: &str, modules: &[&str]) -> bool {
    modules
        .iter()
        .any(|m| q == *m || q.strip_prefix(m).is_some_and(|rest| rest.starts_with('.')))
}

/// A call argument that is a device index itself, or `int()`/`str()` of one.
fn is_device_index_argument(sem: &Semantic<'_>, arg: &Expr) -> bool {
    let inner = match arg {
        Expr::Call(c) if matches!(c.func.as_ref(), Expr::Name(n) if matches!(n.id.as_str(), "int" | "str")) => {
            match c.args.as_slice() {
                [one] => one,
                _ => return false,
            }
        }
        other => other,
    };
    match inner {
        Expr::Attribute(a) if a.attr.as_str() == "index" => super::is_device_like(&a.value),
        Expr::Call(c) => sem.resolves_to(&c.func, "torch.cuda.current_device"),
        Expr::Name(_) | Expr::Attribute(_) => super::is_ordinal(inner),
        _ => false,
    }
}

/// `os.environ[KEY] = <device index>` (or `os.environ.update`/`setdefault`, `os.putenv`):
/// the index goes to whatever reads the environment (an EGL renderer, CUDA itself).
fn environment_write(sem: &Semantic<'_>, stmt: &Stmt) -> Option<String> {
    let Stmt::Assign(a) = stmt else { return None };
    let key = a.targets.iter().find_map(|t| match t {
        Expr::Subscript(s) if sem.resolves_to(&s.value, "os.environ") => Some(s.slice.as_ref()),
        _ => None,
    })?;
    if !reads_device_index(sem, &a.value) {
        return None;
    }
    let key = match key {
        Expr::Constant(c) => match &c.value {
            ast::Constant::Str(k) => k.clone(),
            _ => "a variable".to_owned(),
        },
        _ => "a variable".to_owned(),
    };
    Some(format!(
        "the environment variable `{key}` set from a device index, which is outside torch and \
         not remapped (an NPU index there names another device)"
    ))
}

/// `expr` reads a device index: `<device>.index`, `torch.cuda.current_device()`, or a name such
/// as `local_rank` or `gpu_id` (also through `str()`/`int()`/f-strings).
fn reads_device_index(sem: &Semantic<'_>, expr: &Expr) -> bool {
    crate::analysis::find_in_expr(expr).iter().any(|e| match e {
        Expr::Attribute(a) if a.attr.as_str() == "index" => super::is_device_like(&a.value),
        Expr::Call(c) => sem.resolves_to(&c.func, "torch.cuda.current_device"),
        Expr::Name(_) | Expr::Attribute(_) => super::is_ordinal(e),
        _ => false,
    })
}

/// torch overloads that have a CUDA kernel and no other device kernel (their dispatch table in
/// torch 2.14, `torch._C._dispatch_dump`, lists CUDA and Meta only, and no pinned torch-npu
/// registers one): the function, the keyword that selects the overload, the overload.
const CUDA_KERNEL_ONLY: &[(&str, &str, &str)] = &[
    ("torch.mm", "out_dtype", "aten::mm.dtype"),
    ("torch.addmm", "out_dtype", "aten::addmm.dtype"),
    ("torch.bmm", "out_dtype", "aten::bmm.dtype"),
    ("torch.baddbmm", "out_dtype", "aten::baddbmm.dtype"),
];

/// The functions and decorators that skip tests on a condition.
fn is_test_skip(q: &str) -> bool {
    matches!(
        q,
        "unittest.skipIf"
            | "unittest.skipUnless"
            | "pytest.mark.skipif"
            | "pytest.skip"
            | "pytest.mark.xfail"
    )
}

/// A name that holds a number of GPUs (`num_gpus`, `gpus_per_worker`, `n_gpu`, `gpu_count`).
fn is_gpu_count(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower.split('_').collect();
    words.contains(&"gpus")
        || (words.contains(&"gpu") && words.iter().any(|w| matches!(*w, "num" | "n" | "count")))
}

/// A class outside torch named for CUDA (`CudaSumSegmentTreeFp32`, `CUDAKernel`): a CUDA
/// extension's object, which nothing remaps.
fn names_cuda_class(q: &str) -> bool {
    if q.starts_with("torch.") || !q.contains('.') {
        return false;
    }
    let last = q.rsplit('.').next().unwrap_or(q);
    ["Cuda", "CUDA"].iter().any(|prefix| {
        last.strip_prefix(prefix)
            .and_then(|rest| rest.chars().next())
            .is_some_and(char::is_uppercase)
    })
}

/// `cudagraph = is_cuda if ... else ...` after `is_cuda = device.type == "cuda"`: the flag
/// also turns on CUDA graphs, which the NPU would capture as its own graphs.
fn graph_setting(sem: &Semantic<'_>, target: &Expr) -> Option<Selected> {
    let Expr::Name(flag) = target else {
        return None;
    };
    let body = enclosing_body(sem, false)?;
    let mut stmts = Vec::new();
    crate::analysis::statements(body, &mut stmts);
    stmts.into_iter().find_map(|stmt| {
        let Stmt::Assign(a) = stmt else { return None };
        let [Expr::Name(setting)] = a.targets.as_slice() else {
            return None;
        };
        let lower = setting.id.to_ascii_lowercase();
        let graphs = lower.contains("cudagraph") || lower.contains("cuda_graph");
        let reads_flag = crate::analysis::find_in_expr(&a.value)
            .into_iter()
            .any(|e| matches!(e, Expr::Name(n) if n.id == flag.id));
        (graphs && reads_flag).then(|| {
            Selected::Replaced(format!(
                "`{}`, a CUDA-graph setting read from this flag",
                setting.id
            ))
        })
    })
}

/// A CUDA-only call (a CUDA-only library, a CUDA class outside torch) anywhere in the class
/// the comparison is in: its other device checks keep the NPU off that code, so accepting
/// `"npu"` in this one alone sends the NPU down half of the CUDA path.
pub(super) fn cuda_only_in_class(sem: &Semantic<'_>) -> Option<String> {
    let class = enclosing_body(sem, true)?;
    let methods = class.iter().filter_map(|s| match s {
        Stmt::FunctionDef(f) => Some(&f.body[..]),
        Stmt::AsyncFunctionDef(f) => Some(&f.body[..]),
        _ => None,
    });
    let mut found = None;
    for body in std::iter::once(class).chain(methods) {
        crate::analysis::try_each_expr(body, |expr| {
            if let Expr::Call(call) = expr
                && let Some(q) = sem.resolve(&call.func)
                && (gate::is_cuda_only_name(&q) || names_cuda_class(&q))
            {
                found = Some(q);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
        if found.is_some() {
            break;
        }
    }
    found
}
