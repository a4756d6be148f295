//! A complete, by-reference AST walker.
//!
//! The parser crate's own visitor consumes nodes and skips keyword arguments, `with` items,
//! comprehensions, argument defaults and `case` bodies. This one visits every child of every
//! node, in source order, by reference. Implement [`Visitor`], override the hooks you need and
//! call the matching `walk_*` function to descend.
//!
//! Recursion depth follows the nesting of the source; callers walk on a thread with a large
//! stack (see [`crate::WALK_STACK_SIZE`]). Every walk on a thread shares one depth count (a
//! rule's own walk inside the checker's walk adds to it): below [`MAX_DEPTH`] nested nodes
//! the walk does not descend, and [`take_truncated`] says so.

use std::cell::Cell;
use std::ops::ControlFlow;

use crate::source::ast::{
    Arg, ArgWithDefault, Arguments, Comprehension, ExceptHandler, Expr, Keyword, MatchCase,
    Pattern, Stmt, TypeParam, WithItem,
};

/// Nodes nested deeper than this are not visited: far beyond real code, and the bound keeps
/// every walk inside its thread's stack in every build profile.
pub const MAX_DEPTH: usize = 100_000;

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    static TRUNCATED: Cell<bool> = const { Cell::new(false) };
}

/// One level of nesting, released on drop (also when a hook panics).
struct Level;

impl Level {
    /// Enter a level; `None` when the walk is already [`MAX_DEPTH`] deep.
    fn enter() -> Option<Level> {
        let depth = DEPTH.with(Cell::get);
        if depth >= MAX_DEPTH {
            TRUNCATED.with(|t| t.set(true));
            return None;
        }
        DEPTH.with(|d| d.set(depth + 1));
        Some(Level)
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether some walk on this thread stopped at [`MAX_DEPTH`] since the last call; resets it.
pub fn take_truncated() -> bool {
    TRUNCATED.with(|t| t.replace(false))
}

/// Hooks for each node kind. Every default descends into all children.
pub trait Visitor<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        walk_stmt(self, stmt);
    }
    fn visit_expr(&mut self, expr: &'a Expr) {
        walk_expr(self, expr);
    }
    fn visit_body(&mut self, body: &'a [Stmt]) {
        for stmt in body {
            self.visit_stmt(stmt);
        }
    }
    fn visit_arguments(&mut self, args: &'a Arguments) {
        walk_arguments(self, args);
    }
    fn visit_arg(&mut self, arg: &'a Arg) {
        if let Some(annotation) = &arg.annotation {
            self.visit_expr(annotation);
        }
    }
    fn visit_keyword(&mut self, keyword: &'a Keyword) {
        self.visit_expr(&keyword.value);
    }
    fn visit_comprehension(&mut self, comprehension: &'a Comprehension) {
        self.visit_expr(&comprehension.iter);
        self.visit_expr(&comprehension.target);
        for cond in &comprehension.ifs {
            self.visit_expr(cond);
        }
    }
    fn visit_except_handler(&mut self, handler: &'a ExceptHandler) {
        let ExceptHandler::ExceptHandler(h) = handler;
        if let Some(t) = &h.type_ {
            self.visit_expr(t);
        }
        self.visit_body(&h.body);
    }
    fn visit_with_item(&mut self, item: &'a WithItem) {
        self.visit_expr(&item.context_expr);
        if let Some(vars) = &item.optional_vars {
            self.visit_expr(vars);
        }
    }
    fn visit_match_case(&mut self, case: &'a MatchCase) {
        self.visit_pattern(&case.pattern);
        if let Some(guard) = &case.guard {
            self.visit_expr(guard);
        }
        self.visit_body(&case.body);
    }
    fn visit_pattern(&mut self, pattern: &'a Pattern) {
        walk_pattern(self, pattern);
    }
    fn visit_type_param(&mut self, param: &'a TypeParam) {
        if let TypeParam::TypeVar(v) = param
            && let Some(bound) = &v.bound
        {
            self.visit_expr(bound);
        }
    }
}

/// Visit every child of `stmt`.
pub fn walk_stmt<'a, V: Visitor<'a> + ?Sized>(v: &mut V, stmt: &'a Stmt) {
    let Some(_level) = Level::enter() else { return };
    match stmt {
        Stmt::FunctionDef(s) => {
            for d in &s.decorator_list {
                v.visit_expr(d);
            }
            for p in &s.type_params {
                v.visit_type_param(p);
            }
            v.visit_arguments(&s.args);
            if let Some(r) = &s.returns {
                v.visit_expr(r);
            }
            v.visit_body(&s.body);
        }
        Stmt::AsyncFunctionDef(s) => {
            for d in &s.decorator_list {
                v.visit_expr(d);
            }
            for p in &s.type_params {
                v.visit_type_param(p);
            }
            v.visit_arguments(&s.args);
            if let Some(r) = &s.returns {
                v.visit_expr(r);
            }
            v.visit_body(&s.body);
        }
        Stmt::ClassDef(s) => {
            for d in &s.decorator_list {
                v.visit_expr(d);
            }
            for p in &s.type_params {
                v.visit_type_param(p);
            }
            for b in &s.bases {
                v.visit_expr(b);
            }
            for k in &s.keywords {
                v.visit_keyword(k);
            }
            v.visit_body(&s.body);
        }
        Stmt::Return(s) => {
            if let Some(value) = &s.value {
                v.visit_expr(value);
            }
        }
        Stmt::Delete(s) => {
            for t in &s.targets {
                v.visit_expr(t);
            }
        }
        Stmt::Assign(s) => {
            v.visit_expr(&s.value);
            for t in &s.targets {
                v.visit_expr(t);
            }
        }
        Stmt::TypeAlias(s) => {
            v.visit_expr(&s.name);
            for p in &s.type_params {
                v.visit_type_param(p);
            }
            v.visit_expr(&s.value);
        }
        Stmt::AugAssign(s) => {
            v.visit_expr(&s.value);
            v.visit_expr(&s.target);
        }
        Stmt::AnnAssign(s) => {
            if let Some(value) = &s.value {
                v.visit_expr(value);
            }
            v.visit_expr(&s.annotation);
            v.visit_expr(&s.target);
        }
        Stmt::For(s) => {
            v.visit_expr(&s.iter);
            v.visit_expr(&s.target);
            v.visit_body(&s.body);
            v.visit_body(&s.orelse);
        }
        Stmt::AsyncFor(s) => {
            v.visit_expr(&s.iter);
            v.visit_expr(&s.target);
            v.visit_body(&s.body);
            v.visit_body(&s.orelse);
        }
        Stmt::While(s) => {
            v.visit_expr(&s.test);
            v.visit_body(&s.body);
            v.visit_body(&s.orelse);
        }
        Stmt::If(s) => {
            v.visit_expr(&s.test);
            v.visit_body(&s.body);
            v.visit_body(&s.orelse);
        }
        Stmt::With(s) => {
            for item in &s.items {
                v.visit_with_item(item);
            }
            v.visit_body(&s.body);
        }
        Stmt::AsyncWith(s) => {
            for item in &s.items {
                v.visit_with_item(item);
            }
            v.visit_body(&s.body);
        }
        Stmt::Match(s) => {
            v.visit_expr(&s.subject);
            for case in &s.cases {
                v.visit_match_case(case);
            }
        }
        Stmt::Raise(s) => {
            if let Some(exc) = &s.exc {
                v.visit_expr(exc);
            }
            if let Some(cause) = &s.cause {
                v.visit_expr(cause);
            }
        }
        Stmt::Try(s) => {
            v.visit_body(&s.body);
            for h in &s.handlers {
                v.visit_except_handler(h);
            }
            v.visit_body(&s.orelse);
            v.visit_body(&s.finalbody);
        }
        Stmt::TryStar(s) => {
            v.visit_body(&s.body);
            for h in &s.handlers {
                v.visit_except_handler(h);
            }
            v.visit_body(&s.orelse);
            v.visit_body(&s.finalbody);
        }
        Stmt::Assert(s) => {
            v.visit_expr(&s.test);
            if let Some(msg) = &s.msg {
                v.visit_expr(msg);
            }
        }
        Stmt::Expr(s) => v.visit_expr(&s.value),
        Stmt::Import(_)
        | Stmt::ImportFrom(_)
        | Stmt::Global(_)
        | Stmt::Nonlocal(_)
        | Stmt::Pass(_)
        | Stmt::Break(_)
        | Stmt::Continue(_) => {}
    }
}

/// Visit every child of `expr`.
pub fn walk_expr<'a, V: Visitor<'a> + ?Sized>(v: &mut V, expr: &'a Expr) {
    let Some(_level) = Level::enter() else { return };
    match expr {
        Expr::BoolOp(e) => {
            for value in &e.values {
                v.visit_expr(value);
            }
        }
        Expr::NamedExpr(e) => {
            v.visit_expr(&e.value);
            v.visit_expr(&e.target);
        }
        Expr::BinOp(e) => {
            v.visit_expr(&e.left);
            v.visit_expr(&e.right);
        }
        Expr::UnaryOp(e) => v.visit_expr(&e.operand),
        Expr::Lambda(e) => {
            v.visit_arguments(&e.args);
            v.visit_expr(&e.body);
        }
        Expr::IfExp(e) => {
            v.visit_expr(&e.test);
            v.visit_expr(&e.body);
            v.visit_expr(&e.orelse);
        }
        Expr::Dict(e) => {
            for (key, value) in e.keys.iter().zip(&e.values) {
                if let Some(key) = key {
                    v.visit_expr(key);
                }
                v.visit_expr(value);
            }
        }
        Expr::Set(e) => {
            for elt in &e.elts {
                v.visit_expr(elt);
            }
        }
        Expr::ListComp(e) => {
            for g in &e.generators {
                v.visit_comprehension(g);
            }
            v.visit_expr(&e.elt);
        }
        Expr::SetComp(e) => {
            for g in &e.generators {
                v.visit_comprehension(g);
            }
            v.visit_expr(&e.elt);
        }
        Expr::DictComp(e) => {
            for g in &e.generators {
                v.visit_comprehension(g);
            }
            v.visit_expr(&e.key);
            v.visit_expr(&e.value);
        }
        Expr::GeneratorExp(e) => {
            for g in &e.generators {
                v.visit_comprehension(g);
            }
            v.visit_expr(&e.elt);
        }
        Expr::Await(e) => v.visit_expr(&e.value),
        Expr::Yield(e) => {
            if let Some(value) = &e.value {
                v.visit_expr(value);
            }
        }
        Expr::YieldFrom(e) => v.visit_expr(&e.value),
        Expr::Compare(e) => {
            v.visit_expr(&e.left);
            for c in &e.comparators {
                v.visit_expr(c);
            }
        }
        Expr::Call(e) => {
            v.visit_expr(&e.func);
            for a in &e.args {
                v.visit_expr(a);
            }
            for k in &e.keywords {
                v.visit_keyword(k);
            }
        }
        Expr::FormattedValue(e) => {
            v.visit_expr(&e.value);
            if let Some(spec) = &e.format_spec {
                v.visit_expr(spec);
            }
        }
        Expr::JoinedStr(e) => {
            for value in &e.values {
                v.visit_expr(value);
            }
        }
        Expr::Attribute(e) => v.visit_expr(&e.value),
        Expr::Subscript(e) => {
            v.visit_expr(&e.value);
            v.visit_expr(&e.slice);
        }
        Expr::Starred(e) => v.visit_expr(&e.value),
        Expr::List(e) => {
            for elt in &e.elts {
                v.visit_expr(elt);
            }
        }
        Expr::Tuple(e) => {
            for elt in &e.elts {
                v.visit_expr(elt);
            }
        }
        Expr::Slice(e) => {
            for part in [&e.lower, &e.upper, &e.step].into_iter().flatten() {
                v.visit_expr(part);
            }
        }
        Expr::Constant(_) | Expr::Name(_) => {}
    }
}

/// Visit defaults, annotations and every parameter of a signature.
pub fn walk_arguments<'a, V: Visitor<'a> + ?Sized>(v: &mut V, args: &'a Arguments) {
    let with_defaults = |v: &mut V, list: &'a [ArgWithDefault]| {
        for a in list {
            v.visit_arg(&a.def);
            if let Some(d) = &a.default {
                v.visit_expr(d);
            }
        }
    };
    with_defaults(v, &args.posonlyargs);
    with_defaults(v, &args.args);
    if let Some(a) = &args.vararg {
        v.visit_arg(a);
    }
    with_defaults(v, &args.kwonlyargs);
    if let Some(a) = &args.kwarg {
        v.visit_arg(a);
    }
}

/// Visit every child of a `match` pattern.
pub fn walk_pattern<'a, V: Visitor<'a> + ?Sized>(v: &mut V, pattern: &'a Pattern) {
    let Some(_level) = Level::enter() else { return };
    match pattern {
        Pattern::MatchValue(p) => v.visit_expr(&p.value),
        Pattern::MatchSingleton(_) | Pattern::MatchStar(_) => {}
        Pattern::MatchSequence(p) => {
            for p in &p.patterns {
                v.visit_pattern(p);
            }
        }
        Pattern::MatchMapping(p) => {
            for k in &p.keys {
                v.visit_expr(k);
            }
            for p in &p.patterns {
                v.visit_pattern(p);
            }
        }
        Pattern::MatchClass(p) => {
            v.visit_expr(&p.cls);
            for p in p.patterns.iter().chain(&p.kwd_patterns) {
                v.visit_pattern(p);
            }
        }
        Pattern::MatchAs(p) => {
            if let Some(p) = &p.pattern {
                v.visit_pattern(p);
            }
        }
        Pattern::MatchOr(p) => {
            for p in &p.patterns {
                v.visit_pattern(p);
            }
        }
    }
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
        walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.done {
            return;
        }
        if (self.f)(expr).is_break() {
            self.done = true;
            return;
        }
        walk_expr(self, expr);
    }
}

/// Calls `f` on every expression of `body` (nested functions and classes excluded), in the
/// order of `analysis::find`, until it breaks; true when it did. Cheaper than `analysis::find` when the
/// ancestors are not needed.
pub fn try_each_expr<'a>(body: &'a [Stmt], f: impl FnMut(&'a Expr) -> ControlFlow<()>) -> bool {
    let mut each = EachExpr { f, done: false };
    each.visit_body(body);
    each.done
}
