//! `P_F64`: explicit float64 on tensors (`torch.float64`, `.double()`, float64 numpy arrays
//! turned into tensors).
//!
//! numpy arrays that are float64 only by default are reported outside device-step code
//! (datasets, constructors); inside it the same conversion is `P_TGT`'s.

mod fix;
mod flow;
mod host;
mod keep;

use super::{Checker, Rule, RuleInfo};
use crate::analysis::{self, Function};
use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct Float64;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_F64",
    name: "explicit-float64",
    category: Category::Device,
    severity: Severity::Warning,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_F64.md",
    summary: "Explicit float64 tensors, which the NPU supports for only part of its ops.",
    doc: include_str!("f64.md"),
    check: &Float64,
};

const MESSAGE: &str = "float64 reaches the device here, and the NPU runs only part of its ops in float64 \
     (`Unsupport data type: at::ScalarType::Double`); use float32 (the Float64To32 runtime patch \
     converts it at run time, see P_F64.md); check first that the device uses the value in float64: \
     a tensor nothing reads, or one cast to float32 before its first op, is harmless";

/// numpy constructors whose result is float64 unless given a `dtype`.
const NUMPY_DEFAULT_FLOAT: &[&str] = &[
    "numpy.zeros",
    "numpy.ones",
    "numpy.empty",
    "numpy.linspace",
    "numpy.logspace",
    "numpy.eye",
    "numpy.identity",
    "numpy.random.rand",
    "numpy.random.randn",
    "numpy.random.random",
    "numpy.random.random_sample",
    "numpy.random.uniform",
    "numpy.random.normal",
];

impl Rule for Float64 {
    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        let sem = cx.semantic();
        let report = match expr {
            Expr::Attribute(_) | Expr::Name(_) => is_float64_dtype_use(sem, expr),
            Expr::Call(call) => {
                is_double_call(sem, call)
                    // Inside functions the numpy checks run once per function (below).
                    || (sem.current_function().is_none()
                        && feeds_float64_numpy(sem, call, sem.parent_expr(), grandparent(sem), None))
            }
            _ => false,
        };
        if report {
            // Where float64 is meant, the finding stands without a fix, and says why.
            if let Some(why) = keep::reason(cx, expr) {
                cx.report(expr.range(), format!("{MESSAGE}; no automatic fix: {why}"));
            } else {
                let fix = fix::float32_fix(cx, expr);
                cx.report(expr.range(), MESSAGE).fix = fix;
            }
        }
    }

    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let Some(def) = analysis::function_entry(cx.semantic(), stmt)
            .or_else(|| analysis::script_block(cx.semantic(), stmt))
        else {
            return;
        };
        let sem = cx.semantic();
        // Such a call names `from_numpy`, `as_tensor` or `tensor`, or a name bound to one of
        // them: most functions do neither, which is cheaper to see than to walk their bodies.
        let text = cx.slice(def.range());
        if !text.contains("tensor")
            && !text.contains("from_numpy")
            && !sem.binds_any(|q| FROM_NUMPY.contains(&q))
        {
            return;
        }
        let Some(func) = Function::in_class(sem, def) else {
            return;
        };
        let calls = analysis::find(
            func.body,
            |e| matches!(e, Expr::Call(c) if sem.matches(&c.func, FROM_NUMPY)),
        );
        let hits: Vec<_> = calls
            .iter()
            .filter(|occ| {
                let Expr::Call(call) = occ.expr else {
                    return false;
                };
                let parent = ancestor_expr(&occ.ancestors, 1);
                let grand = ancestor_expr(&occ.ancestors, 2);
                let bound = flow::bound_name(occ);
                feeds_float64_numpy(sem, call, parent, grand, Some(&func))
                    || bound
                        .is_some_and(|name| bound_conversion_reaches_device(sem, call, name, &func))
            })
            .map(|occ| {
                let origin = match occ.expr {
                    Expr::Call(call) => call
                        .args
                        .first()
                        .and_then(|arg| float64_origin(sem, &func, arg, 0)),
                    _ => None,
                };
                (occ.expr.range(), origin)
            })
            .collect();
        // Several conversions on one line become one issue (the engine merges them).
        for (range, origin) in hits {
            let related = origin.map(|o| cx.related(o, "where the array becomes float64"));
            let finding = cx.report(range, MESSAGE);
            finding.related.extend(related);
        }
    }
}

/// The `n`-th expression above an occurrence (1 = its parent), if the chain has one there.
fn ancestor_expr<'a>(ancestors: &[analysis::Node<'a>], n: usize) -> Option<&'a Expr> {
    let i = ancestors.len().checked_sub(n)?;
    match ancestors[i] {
        analysis::Node::Expr(e) => Some(e),
        analysis::Node::Stmt(_) => None,
    }
}

fn grandparent<'a>(sem: &Semantic<'a>) -> Option<&'a Expr> {
    let exprs = sem.exprs();
    exprs.len().checked_sub(2).map(|i| exprs[i])
}

/// The qualified names of the float64 dtype and tensor types.
const FLOAT64_NAMES: &[&str] = &[
    "torch.float64",
    "torch.double",
    "torch.DoubleTensor",
    "torch.cuda.DoubleTensor",
];

fn is_float64_name(q: &str) -> bool {
    FLOAT64_NAMES.contains(&q)
}

/// Calls that turn a numpy array into a tensor.
const FROM_NUMPY: &[&str] = &["torch.from_numpy", "torch.as_tensor", "torch.tensor"];

/// `torch.float64` used as a dtype, not compared, looked up or asked about.
fn is_float64_dtype_use(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let exprs = sem.exprs();
    if let Some(Expr::Attribute(a)) = exprs.last()
        && std::ptr::eq(a.value.as_ref(), expr)
    {
        // `torch.float64.itemsize`: a question about the dtype (and `torch` in
        // `torch.float64` is no dtype at all).
        return false;
    }
    if !sem.matches(expr, FLOAT64_NAMES) {
        return false;
    }
    if in_cpu_branch(sem, expr) || host::in_npu_workaround(sem) {
        return false;
    }
    for (i, parent) in exprs.iter().enumerate().rev() {
        match parent {
            Expr::Compare(_) | Expr::Dict(_) | Expr::Set(_) => return false,
            // `allowed_dtypes = (torch.float32, torch.float64)`: a collection of dtypes is
            // checked against (`x.dtype in allowed`), like a set, not cast to.
            Expr::Tuple(ast::ExprTuple { elts, .. }) | Expr::List(ast::ExprList { elts, .. })
                if elts.len() > 1
                    && elts
                        .iter()
                        .all(|e| sem.resolve(e).is_some_and(|q| q.starts_with("torch."))) =>
            {
                return false;
            }
            Expr::Subscript(s) if !std::ptr::eq(s.value.as_ref(), expr) => return false,
            Expr::Call(c) => {
                let callee = sem
                    .resolve(&c.func)
                    .unwrap_or_else(|| crate::semantic::dotted(&c.func));
                if matches!(
                    callee.as_str(),
                    "torch.finfo"
                        | "torch.iinfo"
                        | "isinstance"
                        | "issubclass"
                        | "str"
                        | "repr"
                        | "print"
                ) || host::is_dtype_helper(sem, c)
                {
                    return false;
                }
                // `.cpu().to(torch.float64)`, `torch.arange(n).to(torch.float64)`: a host cast.
                if let Expr::Attribute(a) = c.func.as_ref()
                    && matches!(a.attr.as_str(), "to" | "type")
                    && host::receiver_on_host(sem, &a.value)
                {
                    return false;
                }
                // `torch.linspace(..., dtype=torch.float64)` without a device: a host table,
                // reported only where it is taken to the device.
                if is_dtype_keyword(c, expr) && host::is_host_creation(sem, c) {
                    return creation_reaches_device(sem, &exprs[..i]);
                }
                // Only the innermost call decides.
                return true;
            }
            _ => {}
        }
    }
    if matches!(sem.current_stmt(), Some(Stmt::Assert(_))) {
        return false;
    }
    // `freqs_dtype = torch.float32 if mps else torch.float64`: a dtype variable counts where
    // it makes or casts a tensor that can be on the device.
    dtype_variable_reaches_device(sem).unwrap_or(true)
}

/// `expr` is (inside) the `dtype=` argument of `call`.
fn is_dtype_keyword(call: &ast::ExprCall, expr: &Expr) -> bool {
    call.keywords.iter().any(|k| {
        k.arg.as_ref().is_some_and(|a| a.as_str() == "dtype")
            && k.value.start() <= expr.start()
            && expr.end() <= k.value.end()
    })
}

/// A host creation whose enclosing expressions are `outer` (innermost last) is taken to the
/// device: moved at once (`.to(device)`, `.cuda()`), registered as a buffer or parameter, or
/// assigned to a local name that is.
fn creation_reaches_device(sem: &Semantic<'_>, outer: &[&Expr]) -> bool {
    match outer.last() {
        Some(Expr::Attribute(a)) if matches!(a.attr.as_str(), "cuda" | "npu") => return true,
        // `torch.arange(n, dtype=torch.float64).float()`: cast on the host before anything else.
        Some(Expr::Attribute(a)) if NARROWING_METHODS.contains(&a.attr.as_str()) => return false,
        Some(Expr::Attribute(a)) if a.attr.as_str() == "to" => {
            let cast = outer.len().checked_sub(2).and_then(|j| match outer[j] {
                Expr::Call(c) => Some(casts_to_narrower_dtype(sem, c)),
                _ => None,
            });
            return !cast.unwrap_or(true);
        }
        Some(Expr::Call(c)) if is_registration(c) => return true,
        _ => {}
    }
    dtype_variable_reaches_device(sem).unwrap_or(false)
}

/// `self.register_buffer(...)`, `nn.Parameter(...)`: a module's state, moved with the module.
fn is_registration(call: &ast::ExprCall) -> bool {
    let short = match call.func.as_ref() {
        Expr::Attribute(a) => a.attr.as_str(),
        Expr::Name(n) => n.id.as_str(),
        _ => "",
    };
    matches!(short, "register_buffer" | "Parameter")
}

/// For a statement `name = <float64 value>` in a function: whether a use of `name` takes it to
/// a device. `None` outside that shape.
fn dtype_variable_reaches_device(sem: &Semantic<'_>) -> Option<bool> {
    let name = host::assigned_name(sem)?;
    let func = Function::new(host::enclosing_function(sem)?)?;
    Some(host::name_reaches_device(sem, &func, name))
}

/// `x.double()`.
fn is_double_call(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    let Expr::Attribute(a) = call.func.as_ref() else {
        return false;
    };
    a.attr.as_str() == "double"
        && call.args.is_empty()
        && call.keywords.is_empty()
        && sem.resolve(&a.value).is_none()
        && !host::receiver_on_host(sem, &a.value)
        && !host::in_npu_workaround(sem)
}

/// `torch.from_numpy/as_tensor/tensor(a)` with a float64 numpy array `a`, not converted at
/// once.
fn feeds_float64_numpy(
    sem: &Semantic<'_>,
    call: &ast::ExprCall,
    parent: Option<&Expr>,
    grand: Option<&Expr>,
    func: Option<&Function<'_>>,
) -> bool {
    if !sem.matches(&call.func, FROM_NUMPY) {
        return false;
    }
    let Some(arg) = call.args.first() else {
        return false;
    };
    if call
        .keywords
        .iter()
        .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "dtype"))
    {
        return false;
    }
    if converted_at_once(sem, parent, grand) {
        return false;
    }
    // Inside training-step code, numpy values turned into tensors are P_TGT's; inference
    // wrappers and host classes (a robot controller, a model wrapper) are not its.
    let host_class = sem
        .current_class()
        .is_some_and(|c| crate::names::is_host_class(&c.name, &c.bases));
    if analysis::in_step_code(sem) && !analysis::in_inference_code(sem) && !host_class {
        return false;
    }
    // Explicit or not, a float64 array that stays on the host is fine.
    if !(reaches_device(sem, parent) || made_on_device(sem, call))
        || only_dtype_cast(sem, parent, grand)
    {
        return false;
    }
    numpy_float64(sem, func, arg, 0).is_some()
        || (is_moved(parent) && some_branch_float64(sem, func, arg))
}

/// `t = torch.from_numpy(a)` (or `as_tensor`/`tensor`) with a float64 array `a`, where a later
/// use of `t` takes it to the device (`t.to(device)`, `self.register_buffer("t", t)`,
/// `nn.Parameter(t)`) before any cast: the float64 table reaches the device through the name.
fn bound_conversion_reaches_device(
    sem: &Semantic<'_>,
    call: &ast::ExprCall,
    name: &str,
    func: &Function<'_>,
) -> bool {
    if !sem.matches(&call.func, FROM_NUMPY)
        || has_keyword(call, "dtype")
        || call
            .args
            .first()
            .is_none_or(|arg| numpy_float64(sem, Some(func), arg, 0).is_none())
    {
        return false;
    }
    let in_step = analysis::in_step_code(sem) && !analysis::in_inference_code(sem);
    let host_class = sem
        .current_class()
        .is_some_and(|c| crate::names::is_host_class(&c.name, &c.bases));
    (!in_step || host_class) && host::name_reaches_device(sem, func, name)
}

/// `call` is given the keyword `arg`.
fn has_keyword(call: &ast::ExprCall, arg: &str) -> bool {
    call.keywords
        .iter()
        .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == arg))
}

/// `torch.as_tensor(a, device=d)` with a device other than the CPU: made on the device.
fn made_on_device(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    call.keywords.iter().any(|k| {
        k.arg.as_ref().is_some_and(|a| a.as_str() == "device")
            && !host::is_cpu_device(sem, &k.value)
            && !matches!(&k.value, Expr::Constant(c) if matches!(c.value, ast::Constant::None))
    })
}

/// `.to(torch.float64)`: a cast that names only dtypes keeps the tensor where it is.
fn only_dtype_cast(sem: &Semantic<'_>, parent: Option<&Expr>, grand: Option<&Expr>) -> bool {
    let (Some(Expr::Attribute(a)), Some(Expr::Call(c))) = (parent, grand) else {
        return false;
    };
    a.attr.as_str() == "to"
        && c.keywords.is_empty()
        && !c.args.is_empty()
        && c.args.iter().all(|v| {
            sem.resolve(v)
                .is_some_and(|q| q.starts_with("torch.") && is_dtype_name(&q))
        })
}

/// `torch.float64`, `torch.int32`, …: a torch dtype by name.
fn is_dtype_name(q: &str) -> bool {
    let name = q.rsplit('.').next().unwrap_or(q);
    [
        "float", "double", "half", "bfloat", "int", "uint", "bool", "long", "complex",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// `torch.from_numpy(a).to(device)`: the conversion is moved to a device at once.
fn is_moved(parent: Option<&Expr>) -> bool {
    matches!(parent, Some(Expr::Attribute(a)) if matches!(a.attr.as_str(), "to" | "cuda" | "npu"))
}

/// Some assignment of the local name `arg` makes it a float64 array (`timesteps =
/// np.linspace(...)` in one branch): enough when the conversion goes straight to the device.
fn some_branch_float64(sem: &Semantic<'_>, func: Option<&Function<'_>>, arg: &Expr) -> bool {
    let (Some(func), Expr::Name(n)) = (func, arg) else {
        return false;
    };
    let before: Vec<&Expr> = func.assigned_before(n.id.as_str(), n.start()).collect();
    // `a = np.concatenate(...).astype(np.float32)` last: the author chose the dtype.
    let cast_last = before.last().is_some_and(|v| {
        matches!(v, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "astype"))
    });
    !cast_last
        && before
            .iter()
            .any(|v| numpy_float64(sem, Some(func), v, 1).is_some())
}

/// The tensor is bound for the device: registered as a module's buffer or parameter, built in
/// a dataset or collate function (batches are moved to the device), or moved at once. A table
/// built in a constructor and kept as a plain attribute stays on the host.
fn reaches_device(sem: &Semantic<'_>, parent: Option<&Expr>) -> bool {
    if matches!(parent, Some(Expr::Call(c)) if is_registration(c)) {
        return true;
    }
    let dataset = sem
        .current_class()
        .is_some_and(|c| c.bases.iter().any(|b| b.contains("Dataset")));
    let loader_fn = sem.current_function().is_some_and(|f| {
        f.name == "__getitem__" || f.name == "__iter__" || f.name.contains("collate")
    });
    dataset || loader_fn || is_moved(parent)
}

/// Inside the body of an `if` that tests for the CPU (`if device == "cpu":`), where float64 is
/// fine.
fn in_cpu_branch(sem: &Semantic<'_>, expr: &Expr) -> bool {
    sem.stmts().iter().any(|s| {
        let Stmt::If(i) = s else { return false };
        let (Some(first), Some(last)) = (i.body.first(), i.body.last()) else {
            return false;
        };
        let inside = first.start() <= expr.start() && expr.end() <= last.end();
        inside
            && analysis::find_in_expr(&i.test).iter().any(|e| {
                matches!(e, Expr::Compare(c) if std::iter::once(c.left.as_ref()).chain(c.comparators.iter()).any(|x| {
                    matches!(x, Expr::Constant(k) if matches!(&k.value, ast::Constant::Str(v) if v == "cpu"))
                }))
            })
    })
}

/// `.to(...)`/`.type(...)` is given a torch name other than float64 (`torch.float32`, …).
fn casts_to_narrower_dtype(sem: &Semantic<'_>, call: &ast::ExprCall) -> bool {
    call.args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value))
        .any(|v| {
            sem.resolve(v)
                .is_some_and(|q| q.starts_with("torch.") && !is_float64_name(&q))
        })
}

/// Tensor methods that cast to a dtype narrower than float64.
const NARROWING_METHODS: &[&str] = &[
    "float", "half", "bfloat16", "int", "long", "bool", "short", "byte",
];

/// The tensor is cast right away: `.float()`, `.half()`, `.to(torch.float32)`, ….
fn converted_at_once(sem: &Semantic<'_>, parent: Option<&Expr>, grand: Option<&Expr>) -> bool {
    let Some(Expr::Attribute(a)) = parent else {
        return false;
    };
    match a.attr.as_str() {
        attr if NARROWING_METHODS.contains(&attr) => true,
        "to" | "type" => {
            let Some(Expr::Call(c)) = grand else {
                return false;
            };
            casts_to_narrower_dtype(sem, c)
        }
        _ => false,
    }
}

/// How `expr` is known to be a float64 numpy array, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumpyF64 {
    Explicit,
    Default,
}

fn numpy_float64(
    sem: &Semantic<'_>,
    func: Option<&Function<'_>>,
    expr: &Expr,
    depth: u32,
) -> Option<NumpyF64> {
    if depth > 6 {
        return None;
    }
    match expr {
        Expr::Call(c) => {
            if let Expr::Attribute(a) = c.func.as_ref()
                && a.attr.as_str() == "astype"
            {
                return c
                    .args
                    .first()
                    .filter(|t| is_float64_spec(sem, t))
                    .map(|_| NumpyF64::Explicit);
            }
            let q = sem.resolve(&c.func)?;
            if !q.starts_with("numpy.") {
                return None;
            }
            // `np.cumprod(alphas)`, `np.array(table)`: the result keeps a float64 input's dtype.
            if NUMPY_KEEP_DTYPE.contains(&q.as_str())
                && !has_keyword(c, "dtype")
                && let Some(kind) = c
                    .args
                    .first()
                    .and_then(|a| numpy_float64(sem, func, a, depth + 1))
            {
                return Some(kind);
            }
            // `np.exp(-k * np.arange(n))`: a float function of float64 or integer arrays.
            // `np.log(init_temperature)`: of a Python number the result is a numpy float64.
            if NUMPY_FLOAT_UFUNCS.contains(&q.as_str()) {
                return c.args.first().and_then(|a| {
                    numpy_float64(sem, func, a, depth + 1).or_else(|| {
                        (scaled_numpy_ints(sem, a) || python_number(func, a))
                            .then_some(NumpyF64::Default)
                    })
                });
            }
            let dtype = c
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "dtype"))
                .map(|k| &k.value);
            match dtype {
                Some(d) if is_float64_spec(sem, d) => Some(NumpyF64::Explicit),
                Some(_) => None,
                None if matches!(q.as_str(), "numpy.array" | "numpy.asarray") => c
                    .args
                    .first()
                    .filter(|a| holds_floats(a))
                    .map(|_| NumpyF64::Default),
                None => NUMPY_DEFAULT_FLOAT
                    .contains(&q.as_str())
                    .then_some(NumpyF64::Default),
            }
        }
        Expr::Name(n) => {
            let func = func?;
            // The assignments before this read (`w = torch.from_numpy(w)` later rebinds it).
            every_float64(
                func.assigned_before(n.id.as_str(), n.start())
                    .map(|v| numpy_float64(sem, Some(func), v, depth + 1)),
            )
        }
        // `w / w.sum()`, `0.5 * table`: arithmetic keeps (or makes) float64.
        Expr::BinOp(b) => numpy_float64(sem, func, &b.left, depth + 1)
            .or_else(|| numpy_float64(sem, func, &b.right, depth + 1))
            .or_else(|| scaled_numpy_ints(sem, expr).then_some(NumpyF64::Default)),
        Expr::UnaryOp(u) => numpy_float64(sem, func, &u.operand, depth + 1),
        // `table[idx]`, `self.obs[batch_idx]`: indexing keeps the dtype.
        Expr::Subscript(s) => numpy_float64(sem, func, &s.value, depth + 1),
        // An attribute of an object the function builds: `obs_rms.mean` of a running-statistics
        // object of gym, gymnasium, Stable-Baselines3 or baselines (their `RunningMeanStd` keeps
        // `mean` and `var` in float64, `np.zeros(shape, "float64")` in its `__init__`), or
        // `buf.obs` of a class this file defines whose methods assign the attribute a float64
        // array (a replay buffer's `np.zeros((size, dim))`) and nothing else.
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() != "self") =>
        {
            let Expr::Name(n) = a.value.as_ref() else {
                return None;
            };
            every_float64(func?.assigned_before(n.id.as_str(), n.start()).map(|v| {
                let Expr::Call(c) = v else { return None };
                if sem.matches(&c.func, RUNNING_MEAN_STD) {
                    return matches!(a.attr.as_str(), "mean" | "var").then_some(NumpyF64::Explicit);
                }
                let Expr::Name(class) = c.func.as_ref() else {
                    return None;
                };
                let body = sem.module_class(class.id.as_str())?;
                self_attr_float64(sem, body, a.attr.as_str(), depth)
            }))
        }
        // `self.scaler.y_bounds`: an attribute of an object the class holds, when every class
        // the project constructs into `self.scaler` assigns `y_bounds` only float64 arrays
        // (the classes may sit in other files).
        Expr::Attribute(a)
            if matches!(a.value.as_ref(), Expr::Attribute(h)
                if matches!(h.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")) =>
        {
            let Expr::Attribute(holder) = a.value.as_ref() else {
                return None;
            };
            sem.project_modules()?
                .holder_attr_is_float64(holder.attr.as_str(), a.attr.as_str())
                .then_some(NumpyF64::Default)
        }
        // `self.obs`, a float64 array that a method of the class (`__init__`, typically)
        // assigns to the attribute, and no method assigns it anything else.
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
            self_attr_float64(sem, func?.class_body()?, a.attr.as_str(), depth)
        }
        _ => None,
    }
}

/// What a set of values agrees on: float64 when every one is (explicitly so when any one is),
/// nothing when one is not or there are none.
fn every_float64(kinds: impl IntoIterator<Item = Option<NumpyF64>>) -> Option<NumpyF64> {
    let kinds: Option<Vec<NumpyF64>> = kinds.into_iter().collect();
    kinds?.into_iter().min_by_key(|k| *k == NumpyF64::Default)
}

/// `self.<attr>` of the class `class_body`: float64 when every method that assigns it assigns a
/// float64 array.
fn self_attr_float64(
    sem: &Semantic<'_>,
    class_body: &[Stmt],
    attr: &str,
    depth: u32,
) -> Option<NumpyF64> {
    every_float64(
        analysis::self_attr_values(class_body, attr)
            .iter()
            .map(|(v, f)| numpy_float64(sem, Some(f), v, depth + 1)),
    )
}

/// Running mean/variance trackers whose `mean` and `var` are float64 numpy arrays.
const RUNNING_MEAN_STD: &[&str] = &[
    "gym.wrappers.normalize.RunningMeanStd",
    "gymnasium.wrappers.normalize.RunningMeanStd",
    "gymnasium.wrappers.utils.RunningMeanStd",
    "stable_baselines3.common.running_mean_std.RunningMeanStd",
    "baselines.common.running_mean_std.RunningMeanStd",
];

/// numpy functions whose result has the dtype of their (first) array argument.
const NUMPY_KEEP_DTYPE: &[&str] = &[
    "numpy.array",
    "numpy.asarray",
    "numpy.ascontiguousarray",
    "numpy.copy",
    "numpy.cumprod",
    "numpy.cumsum",
    "numpy.clip",
    "numpy.abs",
    "numpy.flip",
    "numpy.sort",
    "numpy.diff",
    "numpy.repeat",
    "numpy.tile",
    "numpy.reshape",
    "numpy.transpose",
    "numpy.squeeze",
    "numpy.expand_dims",
];

/// numpy functions whose result is float64 for integer or float64 input.
const NUMPY_FLOAT_UFUNCS: &[&str] = &[
    "numpy.exp",
    "numpy.log",
    "numpy.sqrt",
    "numpy.sin",
    "numpy.cos",
    "numpy.tanh",
    "numpy.exp2",
    "numpy.log2",
    "numpy.log10",
    "numpy.power",
];

/// An integer numpy array scaled into floats: `-k * np.arange(n)`, `np.arange(n) / n`
/// (division, or a product with something other than an integer literal).
fn scaled_numpy_ints(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let Expr::BinOp(b) = expr else {
        return false;
    };
    let is_arange = |e: &Expr| {
        matches!(e, Expr::Call(c) if sem.resolves_to(&c.func, "numpy.arange")
            && !c.keywords.iter().any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "dtype")))
    };
    let int_literal =
        |e: &Expr| matches!(e, Expr::Constant(c) if matches!(c.value, ast::Constant::Int(_)));
    let other = if is_arange(&b.left) {
        &b.right
    } else if is_arange(&b.right) {
        &b.left
    } else {
        return false;
    };
    matches!(b.op, ast::Operator::Div)
        || (matches!(b.op, ast::Operator::Mult) && !int_literal(other))
}

/// A Python number: a numeric literal, a parameter whose default is one or that is annotated
/// `float`/`int`, or a hyperparameter read from the run's settings (`args.init_temperature`,
/// `cfg.lr`).
fn python_number(func: Option<&Function<'_>>, expr: &Expr) -> bool {
    let numeric = |e: &Expr| matches!(e, Expr::Constant(c) if matches!(c.value, ast::Constant::Float(_) | ast::Constant::Int(_)));
    match expr {
        Expr::Constant(_) => numeric(expr),
        Expr::UnaryOp(u) => python_number(func, &u.operand),
        Expr::Name(n) => func.is_some_and(|f| {
            let name = n.id.as_str();
            f.is_param(name)
                && f.assigned(name).is_empty()
                && (f.param_default(name).is_some_and(numeric)
                    || f.param_annotation(name).is_some_and(
                        |a| matches!(a, Expr::Name(t) if matches!(t.id.as_str(), "float" | "int")),
                    ))
        }),
        Expr::Attribute(a) => matches!(a.value.as_ref(), Expr::Name(n)
            if matches!(n.id.as_str(), "args" | "cfg" | "config" | "opt" | "hparams" | "hp")),
        _ => false,
    }
}

/// A list or tuple literal of Python numbers that are not all integers (`[score]`,
/// `[0.5, 1.0]`): numpy makes it float64 unless every element is an int.
fn holds_floats(expr: &Expr) -> bool {
    let elts = match expr {
        Expr::List(l) => &l.elts,
        Expr::Tuple(t) => &t.elts,
        _ => return false,
    };
    !elts.is_empty()
        && elts.iter().all(|e| {
            matches!(
                e,
                Expr::Name(_) | Expr::Attribute(_) | Expr::Subscript(_) | Expr::Constant(_)
            )
        })
        && elts.iter().any(|e| match e {
            Expr::Constant(c) => matches!(c.value, ast::Constant::Float(_)),
            _ => true,
        })
}

/// `np.float64`, `np.double`, `"float64"`, `"f8"`, `float`.
fn is_float64_spec(sem: &Semantic<'_>, expr: &Expr) -> bool {
    match expr {
        Expr::Constant(c) => {
            matches!(&c.value, ast::Constant::Str(s) if matches!(s.as_str(), "float64" | "double" | "f8" | "<f8"))
        }
        Expr::Name(n) if n.id.as_str() == "float" && sem.resolve(expr).is_none() => true,
        _ => sem
            .resolve(expr)
            .is_some_and(|q| matches!(q.as_str(), "numpy.float64" | "numpy.double")),
    }
}

/// Where a local name passed to a tensor creation became a float64 array (the `np.*` call or
/// `.astype(np.float64)` assigned to it), when that is not the argument itself.
fn float64_origin(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    expr: &Expr,
    depth: u32,
) -> Option<crate::source::TextRange> {
    if depth > 3 {
        return None;
    }
    let Expr::Name(n) = expr else {
        return None;
    };
    func.assigned(n.id.as_str()).iter().find_map(|(_, value)| {
        if matches!(value, Expr::Name(_)) {
            return float64_origin(sem, func, value, depth + 1);
        }
        numpy_float64(sem, Some(func), value, 0).map(|_| value.range())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A numpy conversion through a name that never spells `tensor` or `from_numpy` in the
    /// function is found.
    #[test]
    fn conversion_through_alias() {
        let text = "import numpy as np\n\
            from torch import from_numpy as fnp\n\
            class Data:\n    \
                def __getitem__(self, i):\n        \
                    return fnp(np.zeros(3))\n";
        assert_eq!(crate::visit::reported_lines(&RULE, "m.py", text), [5]);
    }
}
