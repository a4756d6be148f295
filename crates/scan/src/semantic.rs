//! The semantic model of one file, as the checker walks it.
//!
//! It resolves names to qualified names through imports and simple aliases
//! (`import torch as th` → `th.randn` is `torch.randn`; relative imports become absolute
//! module paths of the project), keeps the stack of enclosing scopes (module, class,
//! function) with what each one is (an `nn.Module` subclass, its `forward`, a training step
//! or loss function), the enclosing statements and expressions, whether the walk is inside
//! `if __name__ == "__main__":` or a `try/except ImportError` (and whether that handler
//! re-raises), and per-function local facts (which names were assigned from a call with
//! `device=`, and which were moved with `.to(...)` afterwards).
//!
//! It only knows facts of the file being walked; facts across files live in
//! [`crate::project`].

use crate::classes::ModuleClasses;
use crate::names::{is_training_step_name, module_name};
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Stmt};
use foldhash::{HashMap, HashMapExt as _};

mod locals;

use locals::collect_assignments;
pub(crate) use locals::evaluates_only;
pub use locals::{Assignment, LocalFacts};

/// What kind of scope a [`Scope`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeKind {
    Module,
    Class(ClassInfo),
    Function(FunctionInfo),
}

/// Facts about a class definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassInfo {
    pub name: String,
    /// Qualified names of its bases where they resolve, else their source text.
    pub bases: Vec<String>,
    /// A `torch.nn.Module` (or Lightning / transformers model) subclass, directly, through
    /// another module class of this file, or judged by having a `forward` method.
    pub is_module: bool,
    /// A `LightningModule` subclass.
    pub is_lightning: bool,
    /// A loss module (`_Loss` subclass or a module class whose name contains `Loss`).
    pub is_loss: bool,
}

/// Facts about a function definition.
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts, not a state machine"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    pub name: String,
    /// A method (its parent scope is a class).
    pub is_method: bool,
    /// A method of an `nn.Module` subclass.
    pub in_module_class: bool,
    /// `forward` (or `__call__`) of an `nn.Module` subclass.
    pub is_forward: bool,
    /// A training/validation step or loop by name (`training_step`, `train_step`,
    /// `train_one_epoch`, `train_loop`, …).
    pub is_training_step: bool,
    /// A loss function by name (`compute_loss`, `loss_fn`, `*_loss`), or `forward` of a loss
    /// module.
    pub is_loss: bool,
    /// Parameter names, in order.
    pub params: Vec<String>,
    pub range: TextRange,
}

/// One enclosing scope.
#[derive(Debug, Clone)]
pub struct Scope {
    pub kind: ScopeKind,
    /// Names bound by imports and aliases in this scope, to their qualified names.
    bindings: HashMap<String, String>,
    /// Local facts of a function scope.
    pub locals: LocalFacts,
    /// The names of the enclosing classes and functions and this one, joined with `.`
    /// (empty for the module).
    symbol: String,
}

/// An enclosing `try` whose handlers catch `ImportError` (or a parent of it).
#[derive(Debug, Clone, Copy)]
pub struct ImportGuard<'a> {
    pub stmt: &'a ast::StmtTry,
    /// Some matching handler raises (re-raises or raises another error).
    pub reraises: bool,
}

/// The semantic state at the current point of the walk.
#[derive(Debug)]
pub struct Semantic<'a> {
    /// Dotted module name of this file (`pkg.models.policy`; `pkg` for `pkg/__init__.py`).
    pub module: String,
    /// True for `__init__.py`.
    pub is_package: bool,
    scopes: Vec<Scope>,
    stmts: Vec<&'a Stmt>,
    exprs: Vec<&'a Expr>,
    main_guard_depth: usize,
    import_guards: Vec<ImportGuard<'a>>,
    /// Classes of this file known to be `nn.Module` subclasses.
    module_classes: HashMap<String, bool>,
    /// The project's module classes, for bases defined in other files.
    project_modules: Option<&'a ModuleClasses>,
    /// Every name bound in some scope so far.
    bound: BoundNames,
    /// The module body has a `from … import *`, which may bring the conventional aliases.
    star_import: bool,
    /// The file's top-level statements, for module constants ([`Semantic::module_constant`]).
    module_body: &'a [Stmt],
}

/// A superset of the names bound so far, as a 256-bit set of their length and first and last
/// bytes: most names looked up (locals, `self`) are bound nowhere, and a name missing here
/// needs no hashing in each scope.
#[derive(Debug, Default)]
struct BoundNames([u64; 4]);

impl BoundNames {
    fn slot(name: &str) -> (usize, u64) {
        let bytes = name.as_bytes();
        let first = usize::from(bytes.first().copied().unwrap_or(0));
        let last = usize::from(bytes.last().copied().unwrap_or(0));
        let bit = (first * 7 + last * 3 + bytes.len()) & 255;
        (bit >> 6, 1 << (bit & 63))
    }

    fn insert(&mut self, name: &str) {
        let (word, bit) = BoundNames::slot(name);
        self.0[word] |= bit;
    }

    fn may_contain(&self, name: &str) -> bool {
        let (word, bit) = BoundNames::slot(name);
        self.0[word] & bit != 0
    }
}

/// Qualified bases that make a class an `nn.Module`.
const MODULE_BASE_PREFIXES: &[&str] = &["torch.nn.", "pytorch_lightning.", "lightning."];
const MODULE_BASES: &[&str] = &[
    "torch.nn.Module",
    "pytorch_lightning.LightningModule",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "transformers.PreTrainedModel",
];

impl<'a> Semantic<'a> {
    /// A model for the file at `path` (relative, `/`-separated).
    pub fn new(path: &str) -> Semantic<'a> {
        let (module, is_package) = module_name(path);
        Semantic {
            module,
            is_package,
            scopes: vec![Scope {
                kind: ScopeKind::Module,
                bindings: HashMap::new(),
                locals: LocalFacts::default(),
                symbol: String::new(),
            }],
            stmts: Vec::new(),
            exprs: Vec::new(),
            main_guard_depth: 0,
            import_guards: Vec::new(),
            module_classes: HashMap::new(),
            project_modules: None,
            bound: BoundNames::default(),
            star_import: false,
            module_body: &[],
        }
    }

    /// The file's top-level statements.
    pub fn set_module_body(&mut self, body: &'a [Stmt]) {
        self.module_body = body;
    }

    /// The value last assigned to `name` by a top-level statement of the file (`NAME = …` or
    /// `NAME: T = …`), if any.
    pub fn module_constant(&self, name: &str) -> Option<&'a Expr> {
        self.module_body.iter().rev().find_map(|stmt| match stmt {
            Stmt::Assign(a) => {
                matches!(a.targets.as_slice(), [Expr::Name(n)] if n.id.as_str() == name)
                    .then_some(a.value.as_ref())
            }
            Stmt::AnnAssign(a) => match (a.target.as_ref(), a.value.as_deref()) {
                (Expr::Name(n), Some(value)) if n.id.as_str() == name => Some(value),
                _ => None,
            },
            _ => None,
        })
    }

    /// The body of the class the file defines at top level under `name`, if any.
    pub fn module_class(&self, name: &str) -> Option<&'a [Stmt]> {
        self.module_body.iter().rev().find_map(|stmt| match stmt {
            Stmt::ClassDef(c) if c.name.as_str() == name => Some(c.body.as_slice()),
            _ => None,
        })
    }

    /// Let classes derive from the project's module classes of other files.
    pub fn set_project_modules(&mut self, modules: &'a ModuleClasses) {
        self.project_modules = Some(modules);
    }

    /// The project's module classes and step graph, when the scan gave them.
    pub fn project_modules(&self) -> Option<&'a ModuleClasses> {
        self.project_modules
    }

    // ---- name resolution -------------------------------------------------------------

    /// The qualified name an expression refers to through imports: `th.randn` → `torch.randn`,
    /// `F.interpolate` → `torch.nn.functional.interpolate`. `None` for anything that is not a
    /// dotted name rooted in an import or alias.
    ///
    /// Hot paths that only compare the name use [`Semantic::resolves_to`] or
    /// [`Semantic::resolves_with_prefix`], which build nothing.
    pub fn resolve(&self, expr: &Expr) -> Option<String> {
        self.resolve_with_room(expr, 0)
    }

    /// [`Semantic::resolve`] into one allocation with `room` more bytes for the attributes
    /// that follow.
    fn resolve_with_room(&self, expr: &Expr, room: usize) -> Option<String> {
        match expr {
            Expr::Name(name) => {
                let bound = self.lookup(name.id.as_str())?;
                let mut qualified = String::with_capacity(bound.len() + room);
                qualified.push_str(bound);
                Some(qualified)
            }
            Expr::Attribute(attr) => {
                let name = attr.attr.as_str();
                let mut qualified = self.resolve_with_room(&attr.value, room + 1 + name.len())?;
                qualified.push('.');
                qualified.push_str(name);
                Some(qualified)
            }
            _ => None,
        }
    }

    /// `expr` resolves to exactly `qualified` (what `resolve(expr) == Some(qualified)` says,
    /// without building the name).
    pub fn resolves_to(&self, expr: &Expr, qualified: &str) -> bool {
        match expr {
            Expr::Name(name) => self.lookup(name.id.as_str()) == Some(qualified),
            Expr::Attribute(attr) => qualified
                .strip_suffix(attr.attr.as_str())
                .and_then(|base| base.strip_suffix('.'))
                .is_some_and(|base| self.resolves_to(&attr.value, base)),
            _ => false,
        }
    }

    /// `expr` resolves to a qualified name that starts with `prefix` (what
    /// `resolve(expr).is_some_and(|q| q.starts_with(prefix))` says, without building the name).
    pub fn resolves_with_prefix(&self, expr: &Expr, prefix: &str) -> bool {
        self.prefix_left(expr, prefix) == Some("")
    }

    /// What is left of `prefix` once the qualified name of `expr` is matched against it: `""`
    /// when the name covers the prefix, `None` when the two differ or `expr` does not resolve.
    fn prefix_left<'p>(&self, expr: &Expr, prefix: &'p str) -> Option<&'p str> {
        /// Match one piece of the name against what is left of the prefix.
        fn consume<'p>(left: &'p str, piece: &str) -> Option<&'p str> {
            if left.len() <= piece.len() {
                piece.starts_with(left).then_some("")
            } else {
                left.strip_prefix(piece)
            }
        }
        match expr {
            Expr::Name(name) => consume(prefix, self.lookup(name.id.as_str())?),
            Expr::Attribute(attr) => {
                let left = self.prefix_left(&attr.value, prefix)?;
                if left.is_empty() {
                    return Some("");
                }
                consume(consume(left, ".")?, attr.attr.as_str())
            }
            _ => None,
        }
    }

    /// The qualified name of a call's function (`torch.randn` for `th.randn(3)`).
    pub fn resolve_call(&self, expr: &Expr) -> Option<String> {
        match expr {
            Expr::Call(call) => self.resolve(&call.func),
            _ => None,
        }
    }

    /// True when `expr` resolves to one of `names` (exact qualified names).
    pub fn matches(&self, expr: &Expr, names: &[&str]) -> bool {
        match expr {
            Expr::Name(name) => self
                .lookup(name.id.as_str())
                .is_some_and(|q| names.contains(&q)),
            _ => names.iter().any(|name| self.resolves_to(expr, name)),
        }
    }

    /// The qualified name bound to a bare name, looking through enclosing function scopes
    /// and the module scope (class scopes are skipped from inside functions, as in Python).
    pub fn lookup(&self, name: &str) -> Option<&str> {
        if self.bound.may_contain(name) {
            let innermost = self.scopes.len() - 1;
            for (i, scope) in self.scopes.iter().enumerate().rev() {
                if scope.bindings.is_empty()
                    || (i != innermost && matches!(scope.kind, ScopeKind::Class(_)))
                {
                    continue;
                }
                if let Some(q) = scope.bindings.get(name) {
                    return Some(q);
                }
            }
        }
        self.implicit_alias(name)
    }

    /// What a conventional name that nothing here binds most likely is: `torch` itself in any
    /// file (a missing import, a snippet, a star import), and `nn`, `F`, `np` in a file whose
    /// `from … import *` may bring them. Binding lists are not changed, so the file does not
    /// count as importing torch.
    fn implicit_alias(&self, name: &str) -> Option<&'static str> {
        match name {
            "torch" => Some("torch"),
            "nn" if self.star_import => Some("torch.nn"),
            "F" if self.star_import => Some("torch.nn.functional"),
            "np" if self.star_import => Some("numpy"),
            _ => None,
        }
    }

    /// Some name that [`Semantic::lookup`] sees here is bound to a qualified name that
    /// satisfies `pred` (shadowed bindings included).
    pub fn binds_any(&self, pred: impl Fn(&str) -> bool) -> bool {
        let innermost = self.scopes.len() - 1;
        self.scopes.iter().enumerate().any(|(i, scope)| {
            (i == innermost || !matches!(scope.kind, ScopeKind::Class(_)))
                && scope.bindings.values().any(|q| pred(q))
        })
    }

    /// Bind `name` to a qualified name in the current scope.
    pub fn bind(&mut self, name: &str, qualified: String) {
        if let Some(scope) = self.scopes.last_mut() {
            self.bound.insert(name);
            scope.bindings.insert(name.to_owned(), qualified);
        }
    }

    /// The absolute module an import statement names (relative imports resolved against
    /// this file's package). `None` when a relative import climbs above the root.
    pub fn import_from_module(&self, level: u32, module: Option<&str>) -> Option<String> {
        if level == 0 {
            return module.map(str::to_owned);
        }
        let mut parts: Vec<&str> = if self.module.is_empty() {
            Vec::new()
        } else {
            self.module.split('.').collect()
        };
        if !self.is_package {
            parts.pop()?;
        }
        for _ in 1..level {
            parts.pop()?;
        }
        let mut base = parts.join(".");
        if let Some(m) = module {
            if !base.is_empty() {
                base.push('.');
            }
            base.push_str(m);
        }
        Some(base)
    }

    /// Record the bindings an import statement makes in the current scope.
    pub fn bind_import(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let full = alias.name.as_str();
                    if let Some(asname) = &alias.asname {
                        self.bind(asname.as_str(), full.to_owned());
                    } else {
                        let head = full.split('.').next().unwrap_or(full);
                        self.bind(head, head.to_owned());
                    }
                }
            }
            Stmt::ImportFrom(from) => {
                let level = from.level.map_or(0, |l| l.to_u32());
                let Some(module) = self
                    .import_from_module(level, from.module.as_ref().map(ast::Identifier::as_str))
                else {
                    return;
                };
                for alias in &from.names {
                    let name = alias.name.as_str();
                    if name == "*" {
                        self.star_import |= self.scopes.len() == 1;
                        continue;
                    }
                    let bound = alias.asname.as_ref().map_or(name, |a| a.as_str());
                    let qualified = if module.is_empty() {
                        name.to_owned()
                    } else {
                        format!("{module}.{name}")
                    };
                    self.bind(bound, qualified);
                }
            }
            Stmt::Assign(assign) => {
                // `randn = torch.randn`, `F = nn.functional`: simple aliases of imported names.
                if let [Expr::Name(target)] = assign.targets.as_slice()
                    && let Some(q) = self.resolve(&assign.value)
                {
                    self.bind(target.id.as_str(), q);
                }
            }
            _ => {}
        }
    }

    /// Bind the imports and aliases of a module body (recursing into `if`/`try`/`with`
    /// blocks, not into functions or classes) before the walk, so that functions defined
    /// above an import still resolve names through it.
    pub fn prebind_module(&mut self, body: &[Stmt]) {
        for stmt in body {
            match stmt {
                Stmt::Import(_) | Stmt::ImportFrom(_) | Stmt::Assign(_) => self.bind_import(stmt),
                Stmt::If(s) => {
                    self.prebind_module(&s.body);
                    self.prebind_module(&s.orelse);
                }
                Stmt::Try(s) => {
                    self.prebind_module(&s.body);
                    for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                        self.prebind_module(&h.body);
                    }
                    self.prebind_module(&s.orelse);
                    self.prebind_module(&s.finalbody);
                }
                Stmt::With(s) => self.prebind_module(&s.body),
                _ => {}
            }
        }
    }

    // ---- scopes ------------------------------------------------------------------------

    /// Enter a class body.
    pub fn push_class(&mut self, class: &ast::StmtClassDef) {
        let bases: Vec<String> = class
            .bases
            .iter()
            .map(|b| self.resolve(b).unwrap_or_else(|| dotted(b)))
            .collect();
        let has_forward = class.body.iter().any(|s| {
            matches!(s, Stmt::FunctionDef(f) if f.name.as_str() == "forward")
                || matches!(s, Stmt::AsyncFunctionDef(f) if f.name.as_str() == "forward")
        });
        let is_lightning = bases.iter().any(|b| b.ends_with("LightningModule"));
        let is_module = has_forward
            || is_lightning
            || bases.iter().any(|b| {
                MODULE_BASES.contains(&b.as_str())
                    || MODULE_BASE_PREFIXES.iter().any(|p| b.starts_with(p))
                    || b.ends_with("PreTrainedModel")
                    || match self.module_classes.get(b) {
                        Some(&local) => local,
                        None => self.project_modules.is_some_and(|m| m.contains(b)),
                    }
            });
        let name = class.name.as_str().to_owned();
        let is_loss = bases.iter().any(|b| b.ends_with("_Loss"))
            || (is_module && name.to_ascii_lowercase().contains("loss"));
        self.module_classes.insert(name.clone(), is_module);
        let symbol = self.nested_symbol(&name);
        self.scopes.push(Scope {
            kind: ScopeKind::Class(ClassInfo {
                name,
                bases,
                is_module,
                is_lightning,
                is_loss,
            }),
            bindings: HashMap::new(),
            locals: LocalFacts::default(),
            symbol,
        });
    }

    /// Enter a function body; computes its local facts.
    pub fn push_function(
        &mut self,
        name: &str,
        decorators: &[Expr],
        args: &ast::Arguments,
        body: &[Stmt],
        range: TextRange,
    ) {
        let class = match self.scopes.last().map(|s| &s.kind) {
            Some(ScopeKind::Class(c)) => Some(c.clone()),
            _ => None,
        };
        let in_module_class = class.as_ref().is_some_and(|c| c.is_module);
        let is_forward = in_module_class && matches!(name, "forward" | "__call__");
        let lower = name.to_ascii_lowercase();
        let is_training_step = is_training_step_name(&lower)
            && !locals::hands_training_over(body)
            && !locals::evaluates_only(name, decorators, body);
        let is_loss =
            lower.contains("loss") || (is_forward && class.as_ref().is_some_and(|c| c.is_loss));
        let params = args
            .posonlyargs
            .iter()
            .chain(&args.args)
            .map(|a| a.def.arg.as_str().to_owned())
            .chain(args.vararg.iter().map(|a| a.arg.as_str().to_owned()))
            .chain(
                args.kwonlyargs
                    .iter()
                    .map(|a| a.def.arg.as_str().to_owned()),
            )
            .chain(args.kwarg.iter().map(|a| a.arg.as_str().to_owned()))
            .collect();
        let mut locals = LocalFacts::default();
        collect_assignments(self, body, &mut locals);
        let symbol = self.nested_symbol(name);
        self.scopes.push(Scope {
            kind: ScopeKind::Function(FunctionInfo {
                name: name.to_owned(),
                is_method: class.is_some(),
                in_module_class,
                is_forward,
                is_training_step,
                is_loss,
                params,
                range,
            }),
            bindings: HashMap::new(),
            locals,
            symbol,
        });
    }

    /// The symbol of a class or function `name` defined in the innermost scope.
    fn nested_symbol(&self, name: &str) -> String {
        let outer = self.scopes.last().map_or("", |s| s.symbol.as_str());
        if outer.is_empty() {
            name.to_owned()
        } else {
            format!("{outer}.{name}")
        }
    }

    /// Leave the innermost class or function.
    pub fn pop_scope(&mut self) {
        if self.scopes.len() > 1 {
            self.scopes.pop();
        }
    }

    /// All enclosing scopes, outermost (the module) first.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// The innermost enclosing function, if any.
    pub fn current_function(&self) -> Option<&FunctionInfo> {
        self.scopes.iter().rev().find_map(|s| match &s.kind {
            ScopeKind::Function(f) => Some(f),
            _ => None,
        })
    }

    /// Local facts of the innermost enclosing function (empty at module level).
    pub fn locals(&self) -> &LocalFacts {
        self.scopes
            .iter()
            .rev()
            .find(|s| matches!(s.kind, ScopeKind::Function(_)))
            .map_or(&self.scopes[0].locals, |s| &s.locals)
    }

    /// The class enclosing the innermost function (or the class body being walked).
    pub fn current_class(&self) -> Option<&ClassInfo> {
        self.scopes.iter().rev().find_map(|s| match &s.kind {
            ScopeKind::Class(c) => Some(c),
            _ => None,
        })
    }

    /// Inside any function enclosed (at any depth) by an `nn.Module` subclass.
    pub fn in_module_method(&self) -> bool {
        self.scopes
            .iter()
            .any(|s| matches!(&s.kind, ScopeKind::Function(f) if f.in_module_class))
    }

    /// Inside `forward` of an `nn.Module` subclass (or a function nested in it).
    pub fn in_forward(&self) -> bool {
        self.scopes
            .iter()
            .any(|s| matches!(&s.kind, ScopeKind::Function(f) if f.is_forward))
    }

    /// Inside a training-step or loss function (or a function nested in one).
    pub fn in_training_or_loss(&self) -> bool {
        self.scopes
            .iter()
            .any(|s| matches!(&s.kind, ScopeKind::Function(f) if f.is_training_step || f.is_loss))
    }

    /// Code that runs on the device: methods of `nn.Module` subclasses, loss and
    /// training-step functions.
    pub fn in_device_code(&self) -> bool {
        self.in_module_method() || self.in_training_or_loss()
    }

    /// The enclosing symbol as `Class.method` (nested names joined with `.`); `None` at
    /// module level.
    pub fn symbol(&self) -> Option<String> {
        let symbol = self.scopes.last().map_or("", |s| s.symbol.as_str());
        (!symbol.is_empty()).then(|| symbol.to_owned())
    }

    // ---- statement and expression context ----------------------------------------------

    pub fn push_stmt(&mut self, stmt: &'a Stmt) {
        self.stmts.push(stmt);
    }
    pub fn pop_stmt(&mut self) {
        self.stmts.pop();
    }
    pub fn push_expr(&mut self, expr: &'a Expr) {
        self.exprs.push(expr);
    }
    pub fn pop_expr(&mut self) {
        self.exprs.pop();
    }

    /// Enclosing statements, outermost first (the statement being checked is not included
    /// while its own hook runs; while an expression hook runs, the last one is the
    /// statement that contains it).
    pub fn stmts(&self) -> &[&'a Stmt] {
        &self.stmts
    }

    /// The innermost enclosing statement.
    pub fn current_stmt(&self) -> Option<&'a Stmt> {
        self.stmts.last().copied()
    }

    /// Enclosing expressions of the expression being checked, outermost first, up to the
    /// enclosing statement.
    pub fn exprs(&self) -> &[&'a Expr] {
        &self.exprs
    }

    /// The direct parent expression of the expression being checked.
    pub fn parent_expr(&self) -> Option<&'a Expr> {
        self.exprs.last().copied()
    }

    /// Enclosing `for`/`while` loops within the innermost function, innermost first.
    pub fn loops(&self) -> impl Iterator<Item = &'a Stmt> + '_ {
        self.stmts
            .iter()
            .rev()
            .take_while(|s| !matches!(s, Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_)))
            .filter(|s| matches!(s, Stmt::For(_) | Stmt::AsyncFor(_) | Stmt::While(_)))
            .copied()
    }

    /// Inside the body of `if __name__ == "__main__":`.
    pub fn in_main_guard(&self) -> bool {
        self.main_guard_depth > 0
    }
    pub fn enter_main_guard(&mut self) {
        self.main_guard_depth += 1;
    }
    pub fn exit_main_guard(&mut self) {
        self.main_guard_depth = self.main_guard_depth.saturating_sub(1);
    }

    /// The innermost `try` block that catches `ImportError`, when the walk is in its body.
    pub fn import_guard(&self) -> Option<&ImportGuard<'a>> {
        self.import_guards.last()
    }
    pub fn enter_import_guard(&mut self, guard: ImportGuard<'a>) {
        self.import_guards.push(guard);
    }
    pub fn exit_import_guard(&mut self) {
        self.import_guards.pop();
    }
}

/// The source-like dotted text of a name or attribute chain (`nn.Module`), else `?`.
pub fn dotted(expr: &Expr) -> String {
    match expr {
        Expr::Name(n) => n.id.as_str().to_owned(),
        Expr::Attribute(a) => format!("{}.{}", dotted(&a.value), a.attr.as_str()),
        Expr::Call(c) => dotted(&c.func),
        Expr::Subscript(s) => dotted(&s.value),
        _ => "?".to_owned(),
    }
}

/// Does a handler list catch `ImportError` (or `ModuleNotFoundError`, `Exception`,
/// `BaseException`, a bare `except:`)?
pub fn catches_import_error(handlers: &[ast::ExceptHandler]) -> bool {
    handlers.iter().any(|ast::ExceptHandler::ExceptHandler(h)| {
        h.type_.as_deref().is_none_or(is_import_error_type)
    })
}

fn is_import_error_type(expr: &Expr) -> bool {
    match expr {
        Expr::Tuple(t) => t.elts.iter().any(is_import_error_type),
        other => matches!(
            dotted(other).as_str(),
            "ImportError" | "ModuleNotFoundError" | "Exception" | "BaseException"
        ),
    }
}

/// Does some `ImportError`-catching handler raise?
pub fn import_handler_reraises(handlers: &[ast::ExceptHandler]) -> bool {
    handlers.iter().any(|ast::ExceptHandler::ExceptHandler(h)| {
        h.type_.as_deref().is_none_or(is_import_error_type) && body_raises(&h.body)
    })
}

fn body_raises(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Raise(_) => true,
        Stmt::If(i) => body_raises(&i.body) || body_raises(&i.orelse),
        Stmt::With(w) => body_raises(&w.body),
        Stmt::Try(t) => body_raises(&t.body) || body_raises(&t.finalbody),
        _ => false,
    })
}

/// Is this `if` test `__name__ == "__main__"` (either order)?
pub fn is_main_guard_test(test: &Expr) -> bool {
    let Expr::Compare(cmp) = test else {
        return false;
    };
    let ([op], [right]) = (cmp.ops.as_slice(), cmp.comparators.as_slice()) else {
        return false;
    };
    if !matches!(op, ast::CmpOp::Eq) {
        return false;
    }
    let is_name = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == "__name__");
    let is_main = |e: &Expr| matches!(e, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if s == "__main__"));
    (is_name(&cmp.left) && is_main(right)) || (is_main(&cmp.left) && is_name(right))
}

#[cfg(test)]
mod tests;
