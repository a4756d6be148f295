//! Per-function analysis shared by the rules that follow values through a function body.
use crate::semantic::Semantic;
use crate::source::TextSize;
use crate::source::ast::{self, Expr, ExprContext, Ranged, Stmt};
use crate::walk::{self, Visitor};
use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};

/// A function definition's parts.
pub struct Function<'a> {
    pub name: &'a str,
    pub args: &'a ast::Arguments,
    pub body: &'a [Stmt],
    /// Attributes of `self` that hold tensors or submodules (parameters, buffers, modules and
    /// tensors assigned in any method of the enclosing class).
    pub self_tensors: Vec<&'a str>,
    /// Lazily built indexes of the body, so that each question costs a lookup, not a walk.
    cache: Cache<'a>,
}

#[derive(Default)]
struct Cache<'a> {
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
                self_tensors: Vec::new(),
                cache: Cache::default(),
            }),
            Stmt::AsyncFunctionDef(f) => Some(Function {
                name: f.name.as_str(),
                args: &f.args,
                body: &f.body,
                self_tensors: Vec::new(),
                cache: Cache::default(),
            }),
            _ => None,
        }
    }

    /// The function `def` with the tensor attributes of the innermost class enclosing the walk.
    pub fn in_class(sem: &Semantic<'a>, def: &'a Stmt) -> Option<Function<'a>> {
        let mut func = Function::new(def)?;
        let class = sem.stmts().iter().rev().find_map(|s| match s {
            Stmt::ClassDef(c) => Some(c),
            _ => None,
        });
        if let Some(class) = class {
            func.self_tensors = self_tensor_attrs(sem, &class.body);
        }
        Some(func)
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

fn is_setup_function(name: &str, decorators: &[Expr]) -> bool {
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

/// The walk is at module level (no enclosing function or class).
pub fn is_module_level(sem: &Semantic<'_>) -> bool {
    sem.scopes().len() == 1
}

/// Module-level functions of `body` that device code of the same file calls by name and
/// that are not device code themselves (those are checked where they are defined).
pub fn device_helpers<'a>(sem: &Semantic<'a>, body: &'a [Stmt]) -> Vec<&'a Stmt> {
    let module_classes = module_classes(sem, body);
    let mut called: Vec<&'a str> = Vec::new();
    let mut collect = |stmts: &'a [Stmt]| {
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
                        collect(&f.body);
                    }
                }
            }
            Stmt::FunctionDef(f) if is_step_or_loss_name(f.name.as_str()) => collect(&f.body),
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
    if lower.contains("loss")
        || ["train", "fit", "step", "train_step", "training_step"].contains(&lower.as_str())
    {
        return true;
    }
    let words: Vec<&str> = lower.split('_').filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    (has("train") || has("training") || has("validation") || has("val") || has("eval"))
        && (has("step") || has("epoch") || has("loop") || has("batch") || has("iter"))
        || lower.ends_with("_step")
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

// ---- host values ----------------------------------------------------------------------

const MAX_DEPTH: u32 = 4;

/// A Python number (not a tensor): constants, sizes (`x.shape[0]`, `x.size(1)`, `len(x)`),
/// `math.*`, arithmetic of those, and local names only ever assigned such values.
pub fn is_host_scalar(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match expr {
        Expr::Constant(c) => !matches!(c.value, ast::Constant::Str(_) | ast::Constant::Bytes(_)),
        Expr::UnaryOp(u) => is_host_scalar(sem, func, &u.operand, depth + 1),
        Expr::BinOp(b) => {
            is_host_scalar(sem, func, &b.left, depth + 1)
                && is_host_scalar(sem, func, &b.right, depth + 1)
        }
        Expr::Attribute(a) => {
            // Sizes, and configuration values such as `self.config.hidden_size`.
            matches!(a.attr.as_str(), "ndim" | "shape") || is_config_path(expr)
        }
        Expr::Subscript(s) => is_size(&s.value),
        Expr::Call(c) => {
            if let Some(q) = sem.resolve(&c.func) {
                return q.starts_with("math.");
            }
            match c.func.as_ref() {
                Expr::Name(n) => matches!(
                    n.id.as_str(),
                    "len" | "int" | "float" | "round" | "abs" | "min" | "max" | "bool"
                ),
                Expr::Attribute(a) => {
                    matches!(
                        a.attr.as_str(),
                        "size" | "dim" | "numel" | "item" | "ndimension"
                    )
                }
                _ => false,
            }
        }
        Expr::Name(n) => {
            let name = n.id.as_str();
            if let Some(annotation) = func.param_annotation(name) {
                return matches!(annotation, Expr::Name(t) if matches!(t.id.as_str(), "int" | "float" | "bool"));
            }
            if func.is_param(name) {
                return false;
            }
            if func.is_range_loop_var(name) {
                return true;
            }
            if let Some(known) = func.cache.host_names.borrow().get(name) {
                return *known;
            }
            func.cache
                .host_names
                .borrow_mut()
                .insert(name.to_owned(), false);
            let values = func.assigned(name);
            let host = !values.is_empty()
                && values
                    .iter()
                    .all(|(_, v)| is_host_scalar(sem, func, v, depth + 1));
            func.cache
                .host_names
                .borrow_mut()
                .insert(name.to_owned(), host);
            host
        }
        _ => false,
    }
}

/// `x.shape`, `x.size()`.
fn is_size(expr: &Expr) -> bool {
    match expr {
        Expr::Attribute(a) => a.attr.as_str() == "shape",
        Expr::Call(c) => {
            matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "size")
        }
        _ => false,
    }
}

/// A value computed on the host: a numpy call, `.numpy()`/`.tolist()`, or a local name
/// assigned (or appended) such a value.
pub fn derives_from_host(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let mut found = false;
    let mut names: Vec<&str> = Vec::new();
    for occ in find_in_expr(expr) {
        match occ {
            Expr::Call(c) => {
                if sem
                    .resolve(&c.func)
                    .is_some_and(|q| q == "numpy" || q.starts_with("numpy."))
                {
                    found = true;
                }
                if let Expr::Attribute(a) = c.func.as_ref()
                    && matches!(a.attr.as_str(), "numpy" | "tolist")
                {
                    found = true;
                }
            }
            Expr::Name(n) if matches!(n.ctx, ExprContext::Load) => names.push(n.id.as_str()),
            _ => {}
        }
    }
    if found {
        return true;
    }
    names.iter().any(|name| {
        if let Some(known) = func.cache.host_derived.borrow().get(*name) {
            return *known;
        }
        func.cache
            .host_derived
            .borrow_mut()
            .insert((*name).to_owned(), false);
        let derived = func
            .assigned(name)
            .iter()
            .any(|(_, v)| derives_from_host(sem, func, v, depth + 1));
        func.cache
            .host_derived
            .borrow_mut()
            .insert((*name).to_owned(), derived);
        derived
    })
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

// ---- where a tensor flows ---------------------------------------------------------------

/// What happens to a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// It is combined with other tensors, used as an index, passed on or returned.
    Meets,
    /// It is moved to a device first (`.to`, `.cuda()`, `type_as`, a buffer).
    Moved,
    /// It stays on the host or its use is unknown.
    Host,
}

/// Methods that move a tensor to a device.
const MOVES: &[&str] = &["to", "cuda", "npu", "type_as", "to_device"];
/// Attributes and methods whose result lives on the host.
const HOST: &[&str] = &[
    "tolist",
    "item",
    "numpy",
    "shape",
    "size",
    "dim",
    "ndim",
    "numel",
    "dtype",
    "device",
    "is_cuda",
    "cpu",
    "data_ptr",
    "element_size",
    "nelement",
    "ndimension",
];
/// Tensor methods whose arguments are shapes, dims or dtypes.
const SHAPE_METHODS: &[&str] = &[
    "view",
    "reshape",
    "expand",
    "repeat",
    "permute",
    "transpose",
    "flatten",
    "unsqueeze",
    "squeeze",
    "narrow",
    "split",
    "chunk",
    "type",
    "float",
    "long",
    "int",
    "bool",
    "half",
    "unflatten",
    "movedim",
    "roll",
    "flip",
    "sum",
    "mean",
    "max",
    "min",
    "argmax",
    "argmin",
    "cumsum",
    "softmax",
    "clamp",
    "clamp_",
    "pow",
    "tile",
    "repeat_interleave",
    "sort",
    "topk",
];

/// Calls that only read or store a value on the host.
const HOST_CALLS: &[&str] = &[
    "len",
    "list",
    "tuple",
    "int",
    "float",
    "bool",
    "str",
    "print",
    "range",
    "enumerate",
    "zip",
    "sorted",
    "isinstance",
    "repr",
    "format",
    "hash",
    "id",
    "type",
    "dict",
    "set",
    "iter",
    "next",
    "append",
    "extend",
    "insert",
    "log",
    "log_dict",
    "info",
    "debug",
    "warning",
    "warn",
    "add_scalar",
    "add_histogram",
    "manual_seed",
    "save",
];

/// Follow an occurrence of a tensor-valued expression upwards to decide where it flows.
pub fn classify(sem: &Semantic<'_>, func: &Function<'_>, occ: &Occurrence<'_>, depth: u32) -> Flow {
    let mut child: &Expr = occ.expr;
    let mut skip_next = false;
    let n = occ.ancestors.len();
    for i in (0..n).rev() {
        if skip_next {
            skip_next = false;
            if let Node::Expr(e) = occ.ancestors[i] {
                child = e;
                continue;
            }
        }
        match occ.ancestors[i] {
            Node::Expr(parent) => {
                let grand = i.checked_sub(1).map(|g| occ.ancestors[g]);
                match step_expr(sem, func, parent, child, grand) {
                    Step::Done(flow) => return flow,
                    Step::Up => child = parent,
                    Step::UpCall => {
                        child = parent;
                        skip_next = true;
                    }
                }
            }
            Node::Stmt(stmt) => return step_stmt(sem, func, stmt, child, depth),
        }
    }
    Flow::Host
}

enum Step {
    Done(Flow),
    /// The parent is a tensor derived from the child.
    Up,
    /// The parent is a method of the child and the grandparent calls it: the call is the
    /// derived tensor.
    UpCall,
}

fn step_expr(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    parent: &Expr,
    child: &Expr,
    grand: Option<Node<'_>>,
) -> Step {
    match parent {
        Expr::Attribute(a) => {
            let attr = a.attr.as_str();
            let call = match grand {
                Some(Node::Expr(Expr::Call(c))) if std::ptr::eq(c.func.as_ref(), parent) => Some(c),
                _ => None,
            };
            if MOVES.contains(&attr) && call.is_some() {
                return Step::Done(Flow::Moved);
            }
            if HOST.contains(&attr) {
                return Step::Done(Flow::Host);
            }
            let Some(call) = call else {
                return Step::Up;
            };
            if SHAPE_METHODS.contains(&attr) {
                // Their arguments are sizes and dims, not tensors.
                return Step::UpCall;
            }
            let tensor_arg = call
                .args
                .iter()
                .chain(call.keywords.iter().map(|k| &k.value))
                .any(|a| is_device_value(sem, func, a, 0));
            if tensor_arg {
                Step::Done(Flow::Meets)
            } else {
                Step::UpCall
            }
        }
        Expr::Call(c) => {
            if std::ptr::eq(c.func.as_ref(), child) {
                return Step::Done(Flow::Host);
            }
            let qualified = sem.resolve(&c.func);
            let short = match c.func.as_ref() {
                Expr::Name(n) => n.id.as_str(),
                Expr::Attribute(a) => a.attr.as_str(),
                _ => "",
            };
            if qualified.is_none() && HOST_CALLS.contains(&short) {
                return Step::Done(Flow::Host);
            }
            if matches!(
                short,
                "register_buffer" | "register_parameter" | "Parameter" | "Buffer"
            ) {
                return Step::Done(Flow::Moved);
            }
            let others_tensor = c
                .args
                .iter()
                .chain(c.keywords.iter().map(|k| &k.value))
                .filter(|a| !std::ptr::eq(*a, child))
                .any(|a| is_device_value(sem, func, a, 0));
            if others_tensor {
                return Step::Done(Flow::Meets);
            }
            if let Some(q) = qualified {
                return if q.starts_with("torch.") {
                    Step::Up
                } else {
                    Step::Done(Flow::Host)
                };
            }
            // A submodule of the model gets the tensor (it meets the weights), or a method of a
            // device tensor does: `x.masked_fill(mask, 0)`.
            let device_callee = is_submodule(func, &c.func)
                || matches!(c.func.as_ref(), Expr::Attribute(a) if is_device_value(sem, func, &a.value, 0));
            if device_callee {
                Step::Done(Flow::Meets)
            } else {
                Step::Done(Flow::Host)
            }
        }
        Expr::Subscript(s) => {
            if std::ptr::eq(s.value.as_ref(), child) {
                Step::Up
            } else if is_device_value(sem, func, &s.value, 0) {
                // A host index into a device tensor.
                Step::Done(Flow::Meets)
            } else {
                Step::Done(Flow::Host)
            }
        }
        Expr::BinOp(b) => {
            let other = if std::ptr::eq(b.left.as_ref(), child) {
                &b.right
            } else {
                &b.left
            };
            if is_device_value(sem, func, other, 0) {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::Compare(c) => {
            let device = std::iter::once(c.left.as_ref())
                .chain(c.comparators.iter())
                .filter(|e| !std::ptr::eq(*e, child))
                .any(|e| is_device_value(sem, func, e, 0));
            if device {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::UnaryOp(_) | Expr::Starred(_) => Step::Up,
        Expr::IfExp(e) => {
            if std::ptr::eq(e.test.as_ref(), child) {
                Step::Done(Flow::Host)
            } else {
                Step::Up
            }
        }
        Expr::Tuple(t) => {
            if let Some(Node::Expr(Expr::Subscript(s))) = grand
                && std::ptr::eq(s.slice.as_ref(), parent)
            {
                // One index of a multi-dimensional index.
                return if is_device_value(sem, func, &s.value, 0) {
                    Step::Done(Flow::Meets)
                } else {
                    Step::Done(Flow::Host)
                };
            }
            let others = t.elts.iter().filter(|e| !std::ptr::eq(*e, child));
            if others.clone().any(|e| is_device_value(sem, func, e, 0)) {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        Expr::List(l) => {
            if l.elts
                .iter()
                .filter(|e| !std::ptr::eq(*e, child))
                .any(|e| is_device_value(sem, func, e, 0))
            {
                Step::Done(Flow::Meets)
            } else {
                Step::Up
            }
        }
        _ => Step::Done(Flow::Host),
    }
}

fn step_stmt(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    stmt: &Stmt,
    child: &Expr,
    depth: u32,
) -> Flow {
    match stmt {
        Stmt::Assign(a) if std::ptr::eq(a.value.as_ref(), child) => match a.targets.as_slice() {
            [Expr::Name(n)] => name_flow(sem, func, n.id.as_str(), stmt.end(), depth + 1),
            _ => Flow::Host,
        },
        Stmt::AnnAssign(a) if a.value.as_deref().is_some_and(|v| std::ptr::eq(v, child)) => {
            match a.target.as_ref() {
                Expr::Name(n) => name_flow(sem, func, n.id.as_str(), stmt.end(), depth + 1),
                _ => Flow::Host,
            }
        }
        Stmt::AugAssign(a) if std::ptr::eq(a.value.as_ref(), child) => {
            if is_device_value(sem, func, &a.target, 0) {
                Flow::Meets
            } else {
                Flow::Host
            }
        }
        _ => Flow::Host,
    }
}

/// Where the value bound to `name` at `after` flows: the first use, in source order, that
/// moves it or meets a device tensor decides. Uses after a rebinding that does not read
/// the name are another value.
pub fn name_flow(
    sem: &Semantic<'_>,
    func: &Function<'_>,
    name: &str,
    after: TextSize,
    depth: u32,
) -> Flow {
    if depth > MAX_DEPTH {
        return Flow::Host;
    }
    let cutoff = func
        .assigned(name)
        .iter()
        .filter(|(at, v)| *at >= after && !reads(v, name))
        .map(|(at, _)| *at)
        .min();
    let uses = func
        .loads(name)
        .iter()
        .filter(|occ| occ.expr.start() >= after && cutoff.is_none_or(|c| occ.expr.start() < c));
    // In source order, the first use that moves it or meets a device tensor decides.
    for occ in uses {
        match classify(sem, func, occ, depth) {
            Flow::Host => {}
            decided => return decided,
        }
    }
    Flow::Host
}

/// `expr` reads `name`.
pub fn reads(expr: &Expr, name: &str) -> bool {
    find_in_expr(expr)
        .iter()
        .any(|e| matches!(e, Expr::Name(n) if n.id.as_str() == name))
}

/// Attributes and methods of tensors: a parameter used with one of these is a tensor.
const TENSOR_ATTRS: &[&str] = &[
    "shape",
    "device",
    "dtype",
    "size",
    "view",
    "reshape",
    "to",
    "float",
    "half",
    "long",
    "unsqueeze",
    "squeeze",
    "permute",
    "transpose",
    "flatten",
    "contiguous",
    "detach",
    "clone",
    "expand",
    "masked_fill",
    "sum",
    "mean",
    "softmax",
    "repeat",
    "type_as",
    "new_zeros",
    "new_ones",
    "chunk",
    "split",
    "unbind",
];

/// Names that hold configuration, not tensors.
const CONFIG_NAMES: &[&str] = &[
    "self", "cls", "config", "cfg", "args", "kwargs", "hparams", "opt", "conf",
];

/// Plausibly a tensor on the device: an input of the function used as a tensor, a parameter,
/// buffer or submodule output of `self`, or anything computed from those. Host factories,
/// Python numbers and configuration are not.
pub fn is_device_value(sem: &Semantic<'_>, func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    // Deeper than the other questions: a value passes through many local names, and the
    // per-name memo keeps the cost linear.
    if depth > 4 * MAX_DEPTH {
        return false;
    }
    let next = depth + 1;
    match expr {
        Expr::Name(n) => {
            let name = n.id.as_str();
            if CONFIG_NAMES.contains(&name) {
                return false;
            }
            if let Some(annotation) = func.param_annotation(name) {
                let text = crate::semantic::dotted(annotation);
                return text.contains("Tensor") || text == "dict" || text == "Dict";
            }
            if func.is_param(name) {
                return func.param_used_as_tensor(name);
            }
            if let Some(known) = func.cache.device_names.borrow().get(name) {
                return *known;
            }
            func.cache
                .device_names
                .borrow_mut()
                .insert(name.to_owned(), false);
            let device = func
                .assigned(name)
                .iter()
                .any(|(_, v)| is_device_value(sem, func, v, next));
            func.cache
                .device_names
                .borrow_mut()
                .insert(name.to_owned(), device);
            device
        }
        Expr::Attribute(a) => {
            if matches!(
                a.attr.as_str(),
                "shape" | "device" | "dtype" | "ndim" | "is_cuda" | "training"
            ) {
                return false;
            }
            match a.value.as_ref() {
                Expr::Name(n) if n.id.as_str() == "self" => {
                    func.self_tensors.contains(&a.attr.as_str())
                }
                Expr::Attribute(inner) if is_self_attr(&inner.value) => {
                    matches!(a.attr.as_str(), "weight" | "bias")
                }
                _ => sem.resolve(expr).is_none() && is_device_value(sem, func, &a.value, next),
            }
        }
        Expr::Subscript(s) => is_device_value(sem, func, &s.value, next),
        Expr::Call(c) => {
            let mut args = c.args.iter().chain(c.keywords.iter().map(|k| &k.value));
            if let Some(q) = sem.resolve(&c.func) {
                if !q.starts_with("torch.") {
                    return false;
                }
                let device_kw = c
                    .keywords
                    .iter()
                    .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device"));
                return device_kw || args.any(|a| is_device_value(sem, func, a, next));
            }
            if is_submodule(func, &c.func) {
                return true;
            }
            match c.func.as_ref() {
                Expr::Name(n) if HOST_CALLS.contains(&n.id.as_str()) => false,
                Expr::Attribute(a) => {
                    !HOST.contains(&a.attr.as_str())
                        && !HOST_CALLS.contains(&a.attr.as_str())
                        && is_device_value(sem, func, &a.value, next)
                }
                _ => args.any(|a| is_device_value(sem, func, a, next)),
            }
        }
        Expr::BinOp(b) => {
            is_device_value(sem, func, &b.left, next) || is_device_value(sem, func, &b.right, next)
        }
        Expr::UnaryOp(u) => is_device_value(sem, func, &u.operand, next),
        Expr::IfExp(e) => {
            is_device_value(sem, func, &e.body, next) || is_device_value(sem, func, &e.orelse, next)
        }
        Expr::List(l) => l.elts.iter().any(|e| is_device_value(sem, func, e, next)),
        Expr::Tuple(t) => t.elts.iter().any(|e| is_device_value(sem, func, e, next)),
        _ => false,
    }
}

/// `self.x`, `self.x.y`.
fn is_self_attr(expr: &Expr) -> bool {
    match expr {
        Expr::Name(n) => n.id.as_str() == "self",
        Expr::Attribute(a) => is_self_attr(&a.value),
        _ => false,
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
                            sem.resolve(&c.func)
                                .is_some_and(|q| q.starts_with("torch."))
                                || crate::semantic::dotted(&c.func)
                                    .rsplit('.')
                                    .next()
                                    .is_some_and(|last| {
                                        last.starts_with(|ch: char| ch.is_ascii_uppercase())
                                    })
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

/// `self.<name>` where the class binds `<name>` to a torch module or tensor.
fn is_submodule(func: &Function<'_>, callee: &Expr) -> bool {
    matches!(callee, Expr::Attribute(a)
        if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
            && func.self_tensors.contains(&a.attr.as_str()))
}

/// An attribute path through a configuration object: `self.config.hidden_size`, `cfg.dim`.
fn is_config_path(expr: &Expr) -> bool {
    match expr {
        Expr::Attribute(a) => {
            CONFIG_NAMES[2..].contains(&a.attr.as_str()) || is_config_path(&a.value)
        }
        Expr::Name(n) => CONFIG_NAMES[2..].contains(&n.id.as_str()),
        _ => false,
    }
}

/// A list, tuple or comprehension literal, or a local name bound to one.
pub fn is_sequence_literal(func: &Function<'_>, expr: &Expr) -> bool {
    match expr {
        Expr::List(_) | Expr::Tuple(_) | Expr::ListComp(_) => true,
        Expr::Name(n) => {
            let values = func.assigned(n.id.as_str());
            values
                .iter()
                .any(|(_, v)| matches!(v, Expr::List(_) | Expr::Tuple(_) | Expr::ListComp(_)))
        }
        _ => false,
    }
}
