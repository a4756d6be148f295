//! Per-function analysis shared by the rules that follow values through a function body:
//! the function's parts and cached indexes (assignments, reads), which code runs on the device,
//! and finding expressions with their ancestors. [`values`] judges what a value is and
//! [`dataflow`] where a new tensor goes.

mod dataflow;
mod values;

pub use dataflow::{Flow, classify};
use values::TENSOR_ATTRS;
pub use values::is_device_value;
pub use values::{derives_from_host, is_host_scalar, is_sequence_literal};

use crate::semantic::Semantic;
use crate::source::TextSize;
use crate::source::ast::{self, Expr, ExprContext, Ranged, Stmt};
use crate::walk::{self, Visitor};
use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

/// A function definition's parts.
pub struct Function<'a> {
    pub name: &'a str,
    pub args: &'a ast::Arguments,
    pub body: &'a [Stmt],
    /// The body of the innermost class enclosing the walk, if any.
    class_body: Option<&'a [Stmt]>,
    /// Lazily built indexes of the body, so that each question costs a lookup, not a walk.
    cache: Cache<'a>,
}

#[derive(Default)]
struct Cache<'a> {
    self_tensors: OnceCell<Vec<&'a str>>,
    assignments: OnceCell<HashMap<&'a str, Vec<(TextSize, &'a Expr)>>>,
    loads: OnceCell<HashMap<&'a str, Vec<Occurrence<'a>>>>,
    range_vars: OnceCell<HashSet<&'a str>>,
    tensor_params: OnceCell<HashSet<&'a str>>,
    device_names: RefCell<HashMap<String, bool>>,
    host_names: RefCell<HashMap<String, bool>>,
    host_derived: RefCell<HashMap<String, bool>>,
}

impl<'a> Function<'a> {
    pub fn new(def: &'a Stmt) -> Option<Function<'a>> {
        match def {
            Stmt::FunctionDef(f) => Some(Function {
                name: f.name.as_str(),
                args: &f.args,
                body: &f.body,
                class_body: None,
                cache: Cache::default(),
            }),
            Stmt::AsyncFunctionDef(f) => Some(Function {
                name: f.name.as_str(),
                args: &f.args,
                body: &f.body,
                class_body: None,
                cache: Cache::default(),
            }),
            _ => None,
        }
    }

    /// The function `def`, a method of the innermost class enclosing the walk (if any).
    pub fn in_class(sem: &Semantic<'a>, def: &'a Stmt) -> Option<Function<'a>> {
        let mut func = Function::new(def)?;
        func.class_body = sem.stmts().iter().rev().find_map(|s| match s {
            Stmt::ClassDef(c) => Some(c.body.as_slice()),
            _ => None,
        });
        Some(func)
    }

    /// Attributes of `self` that hold tensors or submodules (parameters, buffers, modules and
    /// tensors assigned in any method of the enclosing class). Built on first use, with the
    /// semantic model of the walk's current point.
    pub fn self_tensors(&self, sem: &Semantic<'_>) -> &[&'a str] {
        self.cache.self_tensors.get_or_init(|| {
            self.class_body
                .map_or_else(Vec::new, |body| self_tensor_attrs(sem, body))
        })
    }

    /// The annotation of parameter `name`, if it has one.
    pub fn param_annotation(&self, name: &str) -> Option<&'a Expr> {
        self.args
            .posonlyargs
            .iter()
            .chain(&self.args.args)
            .chain(&self.args.kwonlyargs)
            .find(|a| a.def.arg.as_str() == name)
            .and_then(|a| a.def.annotation.as_deref())
    }

    /// The values assigned to `name` in the body (plain, annotated, tuple targets and
    /// `name.append(v)`), in source order, with where each assignment starts.
    pub fn assigned(&self, name: &str) -> &[(TextSize, &'a Expr)] {
        self.cache
            .assignments
            .get_or_init(|| index_assignments(self.body))
            .get(name)
            .map_or(&[], Vec::as_slice)
    }

    /// The values assigned to `name` before `at` (the read they reach), in source order. An
    /// assignment whose value holds the read (`w = f(w)`) binds after the read, so it is not
    /// one of them.
    pub fn assigned_before(&self, name: &str, at: TextSize) -> impl Iterator<Item = &'a Expr> + '_ {
        self.assigned(name)
            .iter()
            .filter(move |(start, value)| *start < at && value.end() <= at)
            .map(|(_, v)| *v)
    }

    /// Every read of `name` in the body, in source order, with its ancestors.
    fn loads(&self, name: &str) -> &[Occurrence<'a>] {
        self.cache
            .loads
            .get_or_init(|| {
                let mut out: HashMap<&'a str, Vec<Occurrence<'a>>> = HashMap::new();
                for occ in find(
                    self.body,
                    |e| matches!(e, Expr::Name(n) if matches!(n.ctx, ExprContext::Load)),
                ) {
                    if let Expr::Name(n) = occ.expr {
                        out.entry(n.id.as_str()).or_default().push(occ);
                    }
                }
                out
            })
            .get(name)
            .map_or(&[], Vec::as_slice)
    }

    /// `name` is the target of a `for` loop over `range(...)`.
    fn is_range_loop_var(&self, name: &str) -> bool {
        self.cache
            .range_vars
            .get_or_init(|| {
                let mut all = Vec::new();
                statements(self.body, &mut all);
                let mut vars = HashSet::new();
                for s in all {
                    if let Stmt::For(f) = s
                        && matches!(f.iter.as_ref(), Expr::Call(c)
                            if matches!(c.func.as_ref(), Expr::Name(n) if n.id.as_str() == "range"))
                    {
                        let mut names = Vec::new();
                        target_names(&f.target, &mut names);
                        vars.extend(names);
                    }
                }
                vars
            })
            .contains(name)
    }

    /// A parameter without annotation that the body uses as a tensor (`x.shape`, `x[...]`,
    /// `x.view(...)`).
    fn param_used_as_tensor(&self, name: &str) -> bool {
        self.cache
            .tensor_params
            .get_or_init(|| {
                let mut used = HashSet::new();
                for occ in find(self.body, |e| match e {
                    Expr::Attribute(a) => {
                        matches!(a.value.as_ref(), Expr::Name(_))
                            && TENSOR_ATTRS.contains(&a.attr.as_str())
                    }
                    Expr::Subscript(s) => matches!(s.value.as_ref(), Expr::Name(_)),
                    _ => false,
                }) {
                    let base = match occ.expr {
                        Expr::Attribute(a) => a.value.as_ref(),
                        Expr::Subscript(s) => s.value.as_ref(),
                        _ => continue,
                    };
                    if let Expr::Name(n) = base {
                        used.insert(n.id.as_str());
                    }
                }
                used
            })
            .contains(name)
    }

    /// `name` is a parameter of this function.
    pub fn is_param(&self, name: &str) -> bool {
        self.args
            .posonlyargs
            .iter()
            .chain(&self.args.args)
            .chain(&self.args.kwonlyargs)
            .any(|a| a.def.arg.as_str() == name)
    }
}

/// The innermost statement is inside an `if`/`elif` chain that tests for the NPU in one of its
/// branches (`elif torch.npu.is_available():`, `elif device == "npu":`): code that already
/// dispatches on the NPU, whose CUDA branch is only one of several.
pub fn in_chain_testing_npu(sem: &Semantic<'_>) -> bool {
    sem.stmts().iter().any(|stmt| {
        let Stmt::If(head) = stmt else { return false };
        let mut current = head;
        loop {
            if tests_npu(&current.test) {
                return true;
            }
            match current.orelse.as_slice() {
                [Stmt::If(next)] => current = next,
                _ => return false,
            }
        }
    })
}

/// A test that names the NPU somewhere ([`names_npu`]).
fn tests_npu(test: &Expr) -> bool {
    find_in_expr(test).into_iter().any(names_npu)
}

/// A node that names the NPU: an `npu…` string, or a name or attribute with `npu` as a word
/// (`npu`, `npu_*`, `torch_npu`, `is_npu_available`; not `inputs`).
pub fn names_npu(expr: &Expr) -> bool {
    let word = |ident: &str| ident.split('_').any(|w| w.eq_ignore_ascii_case("npu"));
    match expr {
        Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(v) if v.starts_with("npu")),
        Expr::Attribute(a) => word(a.attr.as_str()),
        Expr::Name(n) => word(n.id.as_str()),
        _ => false,
    }
}

/// When `stmt` is the first statement of a function body, that function's definition.
/// Rules that analyse a whole function do it here, once the function's scope is entered.
pub fn function_entry<'a>(sem: &Semantic<'a>, stmt: &'a Stmt) -> Option<&'a Stmt> {
    let def = *sem.stmts().last()?;
    let first = match def {
        Stmt::FunctionDef(f) => f.body.first(),
        Stmt::AsyncFunctionDef(f) => f.body.first(),
        _ => None,
    }?;
    std::ptr::eq(first, stmt).then_some(def)
}

/// Code that runs on the device once per step: device code (module methods, training
/// steps, losses) other than constructors, builders, weight initialisers, class methods,
/// host-side batch preparation and data transforms.
pub fn in_step_code(sem: &Semantic<'_>) -> bool {
    if !sem.in_device_code() {
        return false;
    }
    // torchvision transforms are `nn.Module`s that run in DataLoader workers.
    let transform = sem.current_class().is_some_and(|c| {
        c.bases
            .iter()
            .any(|b| b.starts_with("torchvision.") || b.ends_with("Transform"))
    });
    !transform
        && !sem.stmts().iter().any(|s| match s {
            Stmt::FunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            Stmt::AsyncFunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            _ => false,
        })
}

/// A constructor, weight initialiser, builder or host-side batch preparation (by its name or
/// decorators): code that runs once, or before the batch reaches the device.
pub fn is_setup_function(name: &str, decorators: &[Expr]) -> bool {
    const SETUP: &[&str] = &[
        "__init__",
        "__post_init__",
        "__setstate__",
        "reset_parameters",
        "_reset_parameters",
        "init_weights",
        "_init_weights",
        "initialize_weights",
        "from_config",
        "from_pretrained",
        "build",
    ];
    let lower = name.to_ascii_lowercase();
    // Batch preparation runs on the host batch before it is moved to the device.
    let host_batch = [
        "process_batch",
        "preprocess",
        "collate",
        "prepare_batch",
        "prepare_data",
    ]
    .iter()
    .any(|p| lower.contains(p));
    host_batch
        || SETUP.contains(&name)
        || [
            "_init", "init_", "_build", "build_", "_setup", "setup", "_make", "_create", "create_",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
        || decorators
            .iter()
            .any(|d| matches!(d, Expr::Name(n) if n.id.as_str() == "classmethod"))
}

/// The update side of a trainer, agent or algorithm that is not an `nn.Module` (RL libraries'
/// `update`, `learn`, `train_step`, `_train`, `_update_with_batch`, `compute_*_loss`): it runs on
/// the device once per optimisation step like a module's `forward`. So does the `__call__` of
/// an attention processor. Methods of data, environment, logging and metric classes are not,
/// and neither are setup methods.
pub fn in_update_code(sem: &Semantic<'_>) -> bool {
    let Some(f) = sem.current_function() else {
        return false;
    };
    if !f.is_method || is_inference_name(&f.name) {
        return false;
    }
    let Some(class) = sem.current_class() else {
        return false;
    };
    // An attention processor's `__call__` is the attention of the model's `forward`.
    if f.name == "__call__"
        && (class.name.contains("AttnProcessor") || class.name.contains("AttentionProcessor"))
    {
        return true;
    }
    if is_host_class(&class.name, &class.bases) {
        return false;
    }
    let setup = sem.stmts().iter().any(|s| match s {
        Stmt::FunctionDef(d) => is_setup_function(d.name.as_str(), &d.decorator_list),
        _ => false,
    });
    !setup && (is_update_name(&f.name.to_ascii_lowercase()) || called_by_update(sem, &f.name))
}

/// A private helper (`_one_hot_targets`) that an update method of the same class calls as
/// `self._one_hot_targets(...)`: part of the update step.
fn called_by_update(sem: &Semantic<'_>, name: &str) -> bool {
    if !name.starts_with('_') || name.starts_with("__") {
        return false;
    }
    let Some(class) = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::ClassDef(c) => Some(c),
        _ => None,
    }) else {
        return false;
    };
    class.body.iter().any(|stmt| {
        let Stmt::FunctionDef(d) = stmt else {
            return false;
        };
        d.name.as_str() != name
            && is_update_name(&d.name.as_str().to_ascii_lowercase())
            && !find(&d.body, |e| {
                matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
                    if a.attr.as_str() == name
                        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")))
            })
            .is_empty()
    })
}

/// An update, learning or loss method name.
fn is_update_name(lower: &str) -> bool {
    const EXACT: &[&str] = &[
        "update",
        "learn",
        "optimize",
        "_optimize",
        "_train",
        "_update",
    ];
    EXACT.contains(&lower)
        || lower.contains("loss")
        || crate::semantic::is_training_step_name(lower)
        || [
            "update_", "_update_", "learn_", "_learn_", "train_", "_train_",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
}

/// A class whose methods run on the host around the training step: data, replay storage,
/// environments and their wrappers, collectors, callbacks, loggers, metrics, tokenizers and
/// processors (attention processors excepted: they run inside `forward`).
pub fn is_host_class(name: &str, bases: &[String]) -> bool {
    const HOST: &[&str] = &[
        "Dataset",
        "DataLoader",
        "Sampler",
        "Buffer",
        "Storage",
        "Env",
        "Wrapper",
        "Collector",
        "Callback",
        "Logger",
        "Writer",
        "Observer",
        "Meter",
        "Metric",
        "Tokenizer",
        "Transform",
        "Explorer",
        "Pipeline",
        "Player",
        "Controller",
    ];
    std::iter::once(name)
        .chain(bases.iter().map(|b| b.rsplit('.').next().unwrap_or(b)))
        .any(|n| {
            // By suffix: a `Transformer` is no `Transform`.
            HOST.iter().any(|h| n.ends_with(h))
                || (n.ends_with("Processor") && !n.contains("Attn") && !n.contains("Attention"))
        })
}

/// The walk is inside a function (at any depth) that [`is_inference_name`] says runs at
/// inference, in rollouts or around loading and logging.
pub fn in_inference_code(sem: &Semantic<'_>) -> bool {
    in_evaluation_module(sem)
        || sem.scopes().iter().any(|s| {
            matches!(&s.kind, crate::semantic::ScopeKind::Function(f) if is_inference_name(&f.name))
        })
}

/// The file belongs to evaluation or deployment code by its path (`eval/simpler/model_wrapper.py`,
/// `evaluate/wrapper/…`, `deploy.py`): simulator benchmarks and robot servers, not the
/// training step.
fn in_evaluation_module(sem: &Semantic<'_>) -> bool {
    sem.module.split('.').any(|part| {
        matches!(
            part,
            "eval" | "evals" | "evaluate" | "evaluation" | "deploy" | "deployment" | "inference"
        ) || part.starts_with("eval_")
    })
}

/// A function that runs at inference or in rollouts, not in the optimisation step: its
/// host-side work (action post-processing, decoding, sampling loops) is expected there.
pub fn is_inference_name(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "generate",
        "predict",
        "infer",
        "inference",
        "sample",
        "sampling",
        "rank",
        "rollout",
        "collect",
        "act",
        "decode",
        "extract",
        "evaluate",
        "eval",
        "test",
        "render",
        "explore",
        "exploration",
        "visualize",
        "plot",
        "export",
        "dumps",
        "save",
        "load",
        "env",
    ];
    let lower = name.to_ascii_lowercase();
    // A loss is computed for training, whatever else the name says (`compute_act_loss`).
    !lower.contains("loss") && lower.split('_').any(|w| WORDS.contains(&w))
}

/// Some enclosing expression (of the `ancestors` of an [`Occurrence`]) hands the value to a
/// log, a print, a formatted string, a stats list or dict: a value that leaves the step only
/// to be looked at.
pub fn in_log_call(ancestors: &[Node<'_>]) -> bool {
    const LOG: &[&str] = &[
        "append",
        "extend",
        "log",
        "log_dict",
        "add_scalar",
        "add_scalars",
        "add_histogram",
        "print",
        "info",
        "debug",
        "warning",
        "record",
        "record_mean",
        "format",
        "str",
        "set_postfix",
        "Histogram",
    ];
    ancestors.iter().any(|n| match n {
        Node::Expr(Expr::Call(c)) => LOG.contains(&last_name(&c.func)),
        Node::Expr(Expr::JoinedStr(_) | Expr::FormattedValue(_) | Expr::Dict(_)) => true,
        _ => false,
    })
}

/// The walk is at module level (no enclosing function or class).
pub fn is_module_level(sem: &Semantic<'_>) -> bool {
    sem.scopes().len() == 1
}

/// Module-level functions of `body` (a file with the source `text`) that device code of the
/// same file calls by name and that are not device code themselves (those are checked where
/// they are defined).
pub fn device_helpers<'a>(sem: &Semantic<'a>, text: &str, body: &'a [Stmt]) -> Vec<&'a Stmt> {
    let candidates: Vec<&'a str> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::FunctionDef(f) if !is_step_or_loss_name(f.name.as_str()) => Some(f.name.as_str()),
            _ => None,
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let module_classes = module_classes(sem, body);
    let mut called: Vec<&'a str> = Vec::new();
    let mut collect = |def: &Stmt, stmts: &'a [Stmt]| {
        // A call by name spells the name: code that spells no candidate calls none.
        let source = text
            .get(usize::from(def.start())..usize::from(def.end()))
            .unwrap_or(text);
        if !candidates.iter().any(|name| source.contains(name)) {
            return;
        }
        for occ in find(
            stmts,
            |e| matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Name(_))),
        ) {
            if let Expr::Call(c) = occ.expr
                && let Expr::Name(n) = c.func.as_ref()
            {
                called.push(n.id.as_str());
            }
        }
    };
    for stmt in body {
        match stmt {
            Stmt::ClassDef(c) if module_classes.contains(&c.name.as_str()) => {
                for item in &c.body {
                    if let Stmt::FunctionDef(f) = item
                        && !is_setup_function(f.name.as_str(), &f.decorator_list)
                    {
                        collect(item, &f.body);
                    }
                }
            }
            Stmt::FunctionDef(f) if is_step_or_loss_name(f.name.as_str()) => collect(stmt, &f.body),
            _ => {}
        }
    }
    body.iter()
        .filter(|s| match s {
            Stmt::FunctionDef(f) => {
                !is_step_or_loss_name(f.name.as_str()) && called.contains(&f.name.as_str())
            }
            _ => false,
        })
        .collect()
}

/// Classes of `body` that are `nn.Module`s: a `forward` method, a torch/Lightning/
/// transformers base, or a base that is such a class of this file.
fn module_classes<'a>(sem: &Semantic<'a>, body: &'a [Stmt]) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for stmt in body {
        let Stmt::ClassDef(c) = stmt else { continue };
        let has_forward = c
            .body
            .iter()
            .any(|s| matches!(s, Stmt::FunctionDef(f) if f.name.as_str() == "forward"));
        let base_is_module = c.bases.iter().any(|b| {
            let q = sem.resolve(b).unwrap_or_else(|| crate::semantic::dotted(b));
            q.starts_with("torch.nn.")
                || q.starts_with("pytorch_lightning.")
                || q.starts_with("lightning.")
                || q.ends_with("Module")
                || q.ends_with("PreTrainedModel")
                || out.contains(&q.as_str())
        });
        if has_forward || base_is_module {
            out.push(c.name.as_str());
        }
    }
    out
}

/// Training-step and loss function names, as the semantic model judges them.
fn is_step_or_loss_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("loss") || crate::semantic::is_training_step_name(&lower)
}

// ---- finding expressions with their ancestors ----------------------------------------

/// A node on the path from a function body to an expression.
#[derive(Clone, Copy)]
pub enum Node<'a> {
    Stmt(&'a Stmt),
    Expr(&'a Expr),
}

/// An expression found in a function body, with its ancestors (outermost first).
pub struct Occurrence<'a> {
    pub expr: &'a Expr,
    pub ancestors: Vec<Node<'a>>,
}

struct Finder<'a, F> {
    pred: F,
    stack: Vec<Node<'a>>,
    out: Vec<Occurrence<'a>>,
}

impl<'a, F: FnMut(&'a Expr) -> bool> Visitor<'a> for Finder<'a, F> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        // Nested functions and classes are analysed on their own.
        if matches!(
            stmt,
            Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_) | Stmt::ClassDef(_)
        ) {
            return;
        }
        self.stack.push(Node::Stmt(stmt));
        walk::walk_stmt(self, stmt);
        self.stack.pop();
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if (self.pred)(expr) {
            self.out.push(Occurrence {
                expr,
                ancestors: self.stack.clone(),
            });
        }
        self.stack.push(Node::Expr(expr));
        walk::walk_expr(self, expr);
        self.stack.pop();
    }
}

/// Every expression of `body` (nested functions and classes excluded) that satisfies
/// `pred`, in source order.
pub fn find<'a>(body: &'a [Stmt], pred: impl FnMut(&'a Expr) -> bool) -> Vec<Occurrence<'a>> {
    let mut finder = Finder {
        pred,
        stack: Vec::new(),
        out: Vec::new(),
    };
    finder.visit_body(body);
    finder.out
}

struct EachExpr<F> {
    f: F,
    done: bool,
}

impl<'a, F: FnMut(&'a Expr) -> ControlFlow<()>> Visitor<'a> for EachExpr<F> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        // Nested functions and classes are analysed on their own.
        if self.done
            || matches!(
                stmt,
                Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_) | Stmt::ClassDef(_)
            )
        {
            return;
        }
        walk::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.done {
            return;
        }
        if (self.f)(expr).is_break() {
            self.done = true;
            return;
        }
        walk::walk_expr(self, expr);
    }
}

/// Calls `f` on every expression of `body` (nested functions and classes excluded), in the
/// order of [`find`], until it breaks; true when it did. Cheaper than [`find`] when the
/// ancestors are not needed.
pub fn try_each_expr<'a>(body: &'a [Stmt], f: impl FnMut(&'a Expr) -> ControlFlow<()>) -> bool {
    let mut each = EachExpr { f, done: false };
    each.visit_body(body);
    each.done
}

/// The statement list of `body` (or of a block nested in it, nested functions and classes
/// excluded) that holds `target` itself.
pub fn block_of<'a>(body: &'a [Stmt], target: &Stmt) -> Option<&'a [Stmt]> {
    if body.iter().any(|s| std::ptr::eq(s, target)) {
        return Some(body);
    }
    body.iter().find_map(|stmt| {
        let nested: Vec<&'a [Stmt]> = match stmt {
            Stmt::For(s) => vec![&s.body, &s.orelse],
            Stmt::AsyncFor(s) => vec![&s.body, &s.orelse],
            Stmt::While(s) => vec![&s.body, &s.orelse],
            Stmt::If(s) => vec![&s.body, &s.orelse],
            Stmt::With(s) => vec![&s.body],
            Stmt::AsyncWith(s) => vec![&s.body],
            Stmt::Try(s) => {
                let mut blocks: Vec<&'a [Stmt]> = vec![&s.body, &s.orelse, &s.finalbody];
                for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                    blocks.push(&h.body);
                }
                blocks
            }
            _ => Vec::new(),
        };
        nested.into_iter().find_map(|b| block_of(b, target))
    })
}

/// Every statement of `body`, nested blocks included (nested functions and classes
/// excluded), in source order.
pub fn statements<'a>(body: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for stmt in body {
        out.push(stmt);
        match stmt {
            Stmt::For(s) => {
                statements(&s.body, out);
                statements(&s.orelse, out);
            }
            Stmt::AsyncFor(s) => {
                statements(&s.body, out);
                statements(&s.orelse, out);
            }
            Stmt::While(s) => {
                statements(&s.body, out);
                statements(&s.orelse, out);
            }
            Stmt::If(s) => {
                statements(&s.body, out);
                statements(&s.orelse, out);
            }
            Stmt::With(s) => statements(&s.body, out),
            Stmt::AsyncWith(s) => statements(&s.body, out),
            Stmt::Try(s) => {
                statements(&s.body, out);
                for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                    statements(&h.body, out);
                }
                statements(&s.orelse, out);
                statements(&s.finalbody, out);
            }
            _ => {}
        }
    }
}

/// The values assigned to each name of `body` (plain, annotated, tuple targets and
/// `name.append(v)`/`name.extend(v)`), in source order.
fn index_assignments(body: &[Stmt]) -> HashMap<&str, Vec<(TextSize, &Expr)>> {
    let mut all = Vec::new();
    statements(body, &mut all);
    let mut out: HashMap<&str, Vec<(TextSize, &Expr)>> = HashMap::new();
    for stmt in all {
        let mut names = Vec::new();
        let value: &Expr = match stmt {
            Stmt::Assign(a) => {
                for t in &a.targets {
                    target_names(t, &mut names);
                }
                &a.value
            }
            Stmt::AnnAssign(a) => {
                let Some(v) = &a.value else { continue };
                target_names(&a.target, &mut names);
                v
            }
            Stmt::Expr(e) => {
                let Expr::Call(c) = e.value.as_ref() else {
                    continue;
                };
                let Expr::Attribute(attr) = c.func.as_ref() else {
                    continue;
                };
                let (Expr::Name(n), Some(arg)) = (attr.value.as_ref(), c.args.first()) else {
                    continue;
                };
                if !matches!(attr.attr.as_str(), "append" | "extend") {
                    continue;
                }
                names.push(n.id.as_str());
                arg
            }
            _ => continue,
        };
        for name in names {
            out.entry(name).or_default().push((stmt.start(), value));
        }
    }
    out
}

/// The names a target binds.
fn target_names<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Name(n) => out.push(n.id.as_str()),
        Expr::Tuple(t) => t.elts.iter().for_each(|e| target_names(e, out)),
        Expr::List(l) => l.elts.iter().for_each(|e| target_names(e, out)),
        Expr::Starred(st) => target_names(&st.value, out),
        _ => {}
    }
}

struct All<'a> {
    out: Vec<&'a Expr>,
}

impl<'a> Visitor<'a> for All<'a> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        self.out.push(expr);
        walk::walk_expr(self, expr);
    }
}

/// `expr` and every expression inside it.
pub fn find_in_expr(expr: &Expr) -> Vec<&Expr> {
    let mut all = All { out: Vec::new() };
    all.visit_expr(expr);
    all.out
}

/// `expr` reads `name`.
pub fn reads(expr: &Expr, name: &str) -> bool {
    find_in_expr(expr)
        .iter()
        .any(|e| matches!(e, Expr::Name(n) if n.id.as_str() == name))
}

/// `self.x`, `self.x.y`.
fn is_self_attr(expr: &Expr) -> bool {
    match expr {
        Expr::Name(n) => n.id.as_str() == "self",
        Expr::Attribute(a) => is_self_attr(&a.value),
        _ => false,
    }
}

/// The last name of a callee or attribute chain (`split` for `torch.split`, `x.split`).
pub fn last_name_of(expr: &Expr) -> &str {
    last_name(expr)
}

/// The last part of [`crate::semantic::dotted`]'s text for `expr`, without building it.
fn last_name(expr: &Expr) -> &str {
    match expr {
        Expr::Name(n) => n.id.as_str(),
        Expr::Attribute(a) => a.attr.as_str(),
        Expr::Call(c) => last_name(&c.func),
        Expr::Subscript(s) => last_name(&s.value),
        _ => "?",
    }
}

/// Attributes of `self` that the methods of a class body bind to tensors or modules:
/// `self.x = nn.Linear(...)`, `self.x = torch.zeros(...)`, `self.x = nn.Parameter(...)`,
/// `self.register_buffer("x", ...)`.
fn self_tensor_attrs<'a>(sem: &Semantic<'_>, class_body: &'a [Stmt]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for item in class_body {
        let (Stmt::FunctionDef(ast::StmtFunctionDef { body, .. })
        | Stmt::AsyncFunctionDef(ast::StmtAsyncFunctionDef { body, .. })) = item
        else {
            continue;
        };
        let mut all = Vec::new();
        statements(body, &mut all);
        for stmt in all {
            match stmt {
                Stmt::Assign(a) => {
                    // A torch object, or an instance of a class (`LinearNormalizer()`), which in a
                    // model is a submodule.
                    let tensor = match a.value.as_ref() {
                        Expr::Call(c) => {
                            sem.resolves_with_prefix(&c.func, "torch.")
                                || last_name(&c.func)
                                    .starts_with(|ch: char| ch.is_ascii_uppercase())
                        }
                        _ => false,
                    };
                    if !tensor {
                        continue;
                    }
                    for t in &a.targets {
                        if let Expr::Attribute(attr) = t
                            && matches!(attr.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                        {
                            out.push(attr.attr.as_str());
                        }
                    }
                }
                Stmt::Expr(e) => {
                    if let Expr::Call(c) = e.value.as_ref()
                        && let Expr::Attribute(f) = c.func.as_ref()
                        && matches!(f.attr.as_str(), "register_buffer" | "register_parameter")
                        && let Some(Expr::Constant(k)) = c.args.first()
                        && let ast::Constant::Str(name) = &k.value
                    {
                        out.push(name.as_str());
                    }
                }
                _ => {}
            }
        }
    }
    out
}
