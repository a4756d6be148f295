//! Per-function analysis shared by the rules that follow values through a function body:
//! the function's parts and cached indexes (assignments, reads), which code runs on the device,
//! and finding expressions with their ancestors. [`values`] judges what a value is and
//! [`dataflow`] where a new tensor goes.

mod dataflow;
mod step;
pub mod tensors;
mod values;

pub use dataflow::{Flow, classify};
pub use step::{
    device_helpers, in_inference_code, in_log_call, in_project_step, in_step_code, in_update_code,
    is_inference_name, is_module_level, is_rollout, is_setup_function, reached_by_step,
    script_block, training_loop_body,
};
use values::TENSOR_ATTRS;
pub use values::is_device_value;
pub use values::{derives_from_host, is_host_scalar, is_sequence_literal, self_attr_values};

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
    fed_params: RefCell<HashMap<String, bool>>,
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

    /// A script's main block or module-level loop ([`script_block`]) read as the body of a
    /// function without parameters.
    fn script(def: &'a Stmt) -> Option<Function<'a>> {
        static NO_ARGS: std::sync::LazyLock<ast::Arguments> =
            std::sync::LazyLock::new(|| ast::Arguments::empty(ast::OptionalRange::default()));
        let (name, body) = match def {
            Stmt::If(s) => ("__main__", &s.body),
            Stmt::For(s) => ("<module>", &s.body),
            Stmt::While(s) => ("<module>", &s.body),
            _ => return None,
        };
        Some(Function {
            name,
            args: &NO_ARGS,
            body,
            class_body: None,
            cache: Cache::default(),
        })
    }

    /// The function `def`, a method of the innermost class enclosing the walk (if any), or a
    /// script block ([`script_block`]).
    pub fn in_class(sem: &Semantic<'a>, def: &'a Stmt) -> Option<Function<'a>> {
        let mut func = Function::new(def).or_else(|| Function::script(def))?;
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

    /// The default value of parameter `name`, if it has one.
    pub fn param_default(&self, name: &str) -> Option<&'a Expr> {
        self.args
            .posonlyargs
            .iter()
            .chain(&self.args.args)
            .chain(&self.args.kwonlyargs)
            .find(|a| a.def.arg.as_str() == name)
            .and_then(|a| a.default.as_deref())
    }

    /// The position of parameter `name` among the positional parameters (`self` counted).
    pub fn param_position(&self, name: &str) -> Option<usize> {
        self.args
            .posonlyargs
            .iter()
            .chain(&self.args.args)
            .position(|a| a.def.arg.as_str() == name)
    }

    /// The body of the class this function is a method of, if known.
    pub fn class_body(&self) -> Option<&'a [Stmt]> {
        self.class_body
    }

    /// The methods of the same class, each as a [`Function`] of that class.
    pub fn sibling_methods(&self) -> Vec<Function<'a>> {
        self.class_body
            .unwrap_or_default()
            .iter()
            .filter_map(|s| {
                let mut f = Function::new(s)?;
                f.class_body = self.class_body;
                (f.name != self.name).then_some(f)
            })
            .collect()
    }

    /// The cached answer for parameter `name` fed a tensor by its callers, computed by `f`
    /// the first time.
    pub fn fed_param(&self, name: &str, f: impl FnOnce() -> bool) -> bool {
        if let Some(&known) = self.cache.fed_params.borrow().get(name) {
            return known;
        }
        // A recursive question about the same name while it is computed says no.
        self.cache
            .fed_params
            .borrow_mut()
            .insert(name.to_owned(), false);
        let answer = f();
        self.cache
            .fed_params
            .borrow_mut()
            .insert(name.to_owned(), answer);
        answer
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

pub use crate::walk::try_each_expr;

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
