//! The static reach of a launch command: the project files its entry reaches through imports,
//! where an import that only runs for one choice of a selection is followed only when the launch
//! command (or its config) makes that choice.
//!
//! A selection is an `if`/`elif` chain (or a `match`) that compares a value with string constants
//! (`if name == "act": from .act import ActPolicy`), or a registry: a dict literal with string keys
//! (`{"act": ActPolicy, "diffusion": "pkg.diffusion.DiffusionPolicy"}`), whose entries hold names
//! the file imports only for it, or dotted paths of project modules. `importlib.import_module`
//! with a constant module, or with a constant prefix (`f"pkg.policies.{name}"`), is an import too.
//! A choice is made when one of its keys is among the values the launch command and its config
//! files give ([`super::select::Selection`]); a chain none of whose keys is given is not resolved
//! statically, and every candidate is kept (with a note saying so).

use super::select::Selection;
use crate::project::{ImportFact, Project};
use crate::source::ast::{self, CmpOp, Expr, Ranged, Stmt};
use crate::walk::{self, Visitor};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;

/// One choice of a selection: the keys that take it (none: the `else` branch) and every key of
/// the chain it belongs to, with where the chain is (`file:line`).
#[derive(Debug, Clone)]
struct Guard {
    keys: Vec<String>,
    chain: Vec<String>,
    at: String,
}

impl Guard {
    /// Whether the selection takes this choice; `None` when it makes none of the chain's.
    fn taken(&self, selection: &Selection) -> Option<bool> {
        if !self.chain.iter().any(|k| selection.has(k)) {
            return None;
        }
        Some(self.keys.iter().any(|k| selection.has(k)))
    }
}

/// An import (or a module path in a registry), with the choices it needs.
#[derive(Debug)]
struct Edge {
    candidates: Vec<String>,
    guards: Vec<Guard>,
    /// The local names it binds (for a registry that is its only use).
    bound: Vec<String>,
    line: u32,
}

/// `import_module(f"{prefix}{name}")`: any project module under `prefix`.
#[derive(Debug)]
struct Dynamic {
    prefix: String,
    guards: Vec<Guard>,
    at: String,
}

/// What one file contributes to the reach.
#[derive(Debug, Default)]
struct FileReach {
    edges: Vec<Edge>,
    dynamic: Vec<Dynamic>,
    /// `getattr(name, <not a constant>)`, by the name, and where.
    getattrs: Vec<(String, String)>,
    /// `add_argument("--flag", ..., default="value")`: the flags and the string default.
    arg_defaults: Vec<(Vec<String>, String)>,
}

struct Reader<'p> {
    path: &'p str,
    module: String,
    is_package: bool,
    text: &'p str,
    out: FileReach,
    guards: Vec<Guard>,
    /// Name → how many times it is loaded in the file, and how often in registries (with the
    /// guards of those entries).
    uses: HashMap<String, usize>,
    registry: HashMap<String, Vec<Guard>>,
}

/// The file's reach: its imports and registries, with the choices each needs.
fn read(path: &str, text: &str) -> FileReach {
    let Ok(parsed) = crate::source::parse(text, path) else {
        return FileReach::default();
    };
    let (module, is_package) = crate::names::module_name(path);
    let mut reader = Reader {
        path,
        module,
        is_package,
        text,
        out: FileReach::default(),
        guards: Vec::new(),
        uses: HashMap::new(),
        registry: HashMap::new(),
    };
    reader.visit_body(&parsed.body);
    let Reader {
        mut out,
        uses,
        registry,
        ..
    } = reader;
    // An import whose names are used only in registry entries runs for those entries' choices.
    for edge in &mut out.edges {
        let mut extra: Vec<Guard> = Vec::new();
        let only_registry = !edge.bound.is_empty()
            && edge.bound.iter().all(|name| {
                let in_registry = registry.get(name).map_or(0, Vec::len);
                in_registry > 0 && uses.get(name).copied().unwrap_or(0) == in_registry
            });
        if !only_registry {
            continue;
        }
        for name in &edge.bound {
            for g in &registry[name] {
                match extra.iter_mut().find(|e| e.at == g.at) {
                    Some(e) => e.keys.extend(g.keys.iter().cloned()),
                    None => extra.push(g.clone()),
                }
            }
        }
        edge.guards.extend(extra);
    }
    out
}

impl Reader<'_> {
    fn at(&self, node: &impl Ranged) -> String {
        format!("{}:{}", self.path, self.line(node))
    }

    fn line(&self, node: &impl Ranged) -> u32 {
        let offset = usize::from(node.start()).min(self.text.len());
        u32::try_from(self.text[..offset].matches('\n').count() + 1).unwrap_or(u32::MAX)
    }

    /// The module a `from` import with `level` dots names (as [`crate::semantic::Semantic`]).
    fn module_of_from(&self, level: u32, module: Option<&str>) -> Option<String> {
        if level == 0 {
            return module.map(str::to_owned);
        }
        let mut parts: Vec<&str> = self.module.split('.').filter(|p| !p.is_empty()).collect();
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

    fn import(&mut self, stmt: &Stmt) {
        let line = self.line(stmt);
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let name = alias.name.as_str();
                    let bound = alias.asname.as_ref().map_or_else(
                        || name.split('.').next().unwrap_or(name).to_owned(),
                        |a| a.as_str().to_owned(),
                    );
                    self.out.edges.push(Edge {
                        candidates: vec![name.to_owned()],
                        guards: self.guards.clone(),
                        bound: vec![bound],
                        line,
                    });
                }
            }
            Stmt::ImportFrom(from) => {
                let level = from.level.as_ref().map_or(0, ast::Int::to_u32);
                let Some(module) =
                    self.module_of_from(level, from.module.as_ref().map(ast::Identifier::as_str))
                else {
                    return;
                };
                for alias in &from.names {
                    let name = alias.name.as_str();
                    let mut candidates = Vec::new();
                    if name != "*" {
                        candidates.push(if module.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{module}.{name}")
                        });
                    }
                    if !module.is_empty() {
                        candidates.push(module.clone());
                    }
                    let bound = alias.asname.as_ref().map_or(name, ast::Identifier::as_str);
                    self.out.edges.push(Edge {
                        candidates,
                        guards: self.guards.clone(),
                        bound: if name == "*" {
                            Vec::new()
                        } else {
                            vec![bound.to_owned()]
                        },
                        line,
                    });
                }
            }
            _ => {}
        }
    }

    /// An `if`/`elif` chain on string keys (`first` has some): each body under its choice. A
    /// later `elif` on something else ends the chain and belongs to its `else`.
    fn chain<'a>(&mut self, first: &'a ast::StmtIf) {
        let mut branches: Vec<(Vec<String>, &'a [Stmt])> = Vec::new();
        let mut tests: Vec<&'a Expr> = Vec::new();
        let mut at = first;
        let otherwise: &'a [Stmt] = loop {
            tests.push(&at.test);
            branches.push((keys_of(&at.test), &at.body));
            match at.orelse.as_slice() {
                [Stmt::If(next)] if !keys_of(&next.test).is_empty() => at = next,
                rest => break rest,
            }
        };
        let chain: Vec<String> = branches.iter().flat_map(|(k, _)| k.clone()).collect();
        let where_ = self.at(first);
        for test in tests {
            self.visit_expr(test);
        }
        for (keys, body) in branches {
            self.guards.push(Guard {
                keys,
                chain: chain.clone(),
                at: where_.clone(),
            });
            self.visit_body(body);
            self.guards.pop();
        }
        if !otherwise.is_empty() {
            self.guards.push(Guard {
                keys: Vec::new(),
                chain,
                at: where_,
            });
            self.visit_body(otherwise);
            self.guards.pop();
        }
    }

    /// A dict with string keys: each value is an entry of a registry under its key.
    fn registry(&mut self, dict: &ast::ExprDict) {
        let keys: Vec<&str> = dict
            .keys
            .iter()
            .filter_map(|k| k.as_ref().and_then(str_of))
            .collect();
        if keys.len() < 2 || keys.len() != dict.keys.len() {
            return;
        }
        let chain: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let at = self.at(dict);
        for (key, value) in keys.iter().zip(&dict.values) {
            let guard = Guard {
                keys: vec![(*key).to_owned()],
                chain: chain.clone(),
                at: at.clone(),
            };
            let mut names = Vec::new();
            let mut paths = Vec::new();
            each_expr(value, &mut |e| match e {
                Expr::Name(n) => names.push(n.id.as_str().to_owned()),
                Expr::Constant(_) => {
                    if let Some(s) = str_of(e)
                        && is_dotted(s)
                    {
                        paths.push(s.replace(':', "."));
                    }
                }
                _ => {}
            });
            for name in names {
                self.registry.entry(name).or_default().push(guard.clone());
            }
            for path in paths {
                let mut guards = self.guards.clone();
                guards.push(guard.clone());
                self.out.edges.push(Edge {
                    candidates: module_candidates(&path),
                    guards,
                    bound: Vec::new(),
                    line: self.line(value),
                });
            }
        }
    }

    /// `importlib.import_module(...)`, `__import__(...)` and `getattr(module, name)`.
    fn call(&mut self, call: &ast::ExprCall) {
        let callee = match call.func.as_ref() {
            Expr::Name(n) => n.id.as_str(),
            Expr::Attribute(a) => a.attr.as_str(),
            _ => return,
        };
        let Some(first) = call.args.first() else {
            return;
        };
        match callee {
            "import_module" | "__import__" => {
                if let Some(module) = str_of(first) {
                    self.out.edges.push(Edge {
                        candidates: vec![module.to_owned()],
                        guards: self.guards.clone(),
                        bound: Vec::new(),
                        line: self.line(call),
                    });
                } else if let Some(prefix) = constant_prefix(first)
                    && !prefix.is_empty()
                {
                    let at = self.at(call);
                    self.out.dynamic.push(Dynamic {
                        prefix,
                        guards: self.guards.clone(),
                        at,
                    });
                }
            }
            "add_argument" => {
                let flags: Vec<String> = call
                    .args
                    .iter()
                    .filter_map(str_of)
                    .filter(|f| f.starts_with('-'))
                    .map(str::to_owned)
                    .collect();
                let default = call
                    .keywords
                    .iter()
                    .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "default"))
                    .and_then(|k| str_of(&k.value));
                if let Some(default) = default
                    && !flags.is_empty()
                {
                    self.out.arg_defaults.push((flags, default.to_owned()));
                }
            }
            "getattr" => {
                if let (Expr::Name(n), Some(name)) = (first, call.args.get(1))
                    && str_of(name).is_none()
                {
                    let at = self.at(call);
                    self.out.getattrs.push((n.id.as_str().to_owned(), at));
                }
            }
            _ => {}
        }
    }
}

impl<'a> Visitor<'a> for Reader<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(_) | Stmt::ImportFrom(_) => self.import(stmt),
            Stmt::If(s) if !keys_of(&s.test).is_empty() => self.chain(s),
            Stmt::Match(m) => {
                let keys: Vec<Vec<String>> =
                    m.cases.iter().map(|c| pattern_keys(&c.pattern)).collect();
                let chain: Vec<String> = keys.iter().flatten().cloned().collect();
                if chain.is_empty() {
                    walk::walk_stmt(self, stmt);
                    return;
                }
                self.visit_expr(&m.subject);
                let at = self.at(stmt);
                for (case, keys) in m.cases.iter().zip(keys) {
                    self.guards.push(Guard {
                        keys,
                        chain: chain.clone(),
                        at: at.clone(),
                    });
                    self.visit_match_case(case);
                    self.guards.pop();
                }
            }
            _ => walk::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(n) => *self.uses.entry(n.id.as_str().to_owned()).or_default() += 1,
            Expr::Dict(d) => self.registry(d),
            Expr::Call(c) => self.call(c),
            _ => {}
        }
        walk::walk_expr(self, expr);
    }
}

/// Calls `f` on `expr` and every expression inside it.
fn each_expr<'a>(expr: &'a Expr, f: &mut dyn FnMut(&'a Expr)) {
    struct Each<'f, 'a>(&'f mut dyn FnMut(&'a Expr));
    impl<'a> Visitor<'a> for Each<'_, 'a> {
        fn visit_expr(&mut self, expr: &'a Expr) {
            (self.0)(expr);
            walk::walk_expr(self, expr);
        }
    }
    Each(f).visit_expr(expr);
}

/// The string of a constant string expression.
fn str_of(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Constant(c) => match &c.value {
            ast::Constant::Str(s) => Some(s.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// `pkg.module.Class` or `pkg.module:Class`: a dotted path (two parts at least, identifiers).
fn is_dotted(s: &str) -> bool {
    let parts: Vec<&str> = s.split(['.', ':']).collect();
    parts.len() >= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !p.starts_with(|c: char| c.is_ascii_digit())
        })
}

/// The modules a dotted path may name: itself, then without its last one or two parts (a class,
/// a class's method).
pub(super) fn module_candidates(path: &str) -> Vec<String> {
    let mut out = vec![path.to_owned()];
    let mut at = path;
    for _ in 0..2 {
        match at.rsplit_once('.') {
            Some((head, _)) => {
                out.push(head.to_owned());
                at = head;
            }
            None => break,
        }
    }
    out
}

/// The string keys a test compares with: `x == "a"`, `"a" == x`, `x in ("a", "b")`, joined by
/// `or`.
fn keys_of(test: &Expr) -> Vec<String> {
    match test {
        Expr::BoolOp(b) if b.op == ast::BoolOp::Or => {
            let all: Vec<Vec<String>> = b.values.iter().map(keys_of).collect();
            if all.iter().any(Vec::is_empty) {
                Vec::new()
            } else {
                all.into_iter().flatten().collect()
            }
        }
        Expr::Compare(c) if c.ops.len() == 1 && c.comparators.len() == 1 => {
            let right = &c.comparators[0];
            match c.ops[0] {
                CmpOp::Eq => str_of(right)
                    .or_else(|| str_of(&c.left))
                    .map(|s| vec![s.to_owned()])
                    .unwrap_or_default(),
                CmpOp::In => match right {
                    Expr::Tuple(ast::ExprTuple { elts, .. })
                    | Expr::List(ast::ExprList { elts, .. })
                    | Expr::Set(ast::ExprSet { elts, .. }) => {
                        let keys: Vec<String> =
                            elts.iter().filter_map(str_of).map(str::to_owned).collect();
                        if keys.len() == elts.len() {
                            keys
                        } else {
                            Vec::new()
                        }
                    }
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// The string keys of a `case` pattern: `case "a":`, `case "a" | "b":`.
fn pattern_keys(pattern: &ast::Pattern) -> Vec<String> {
    match pattern {
        ast::Pattern::MatchValue(v) => str_of(&v.value)
            .map(|s| vec![s.to_owned()])
            .unwrap_or_default(),
        ast::Pattern::MatchOr(o) => o.patterns.iter().flat_map(pattern_keys).collect(),
        _ => Vec::new(),
    }
}

/// The constant start of a module name built at run time: `f"pkg.{name}"`, `"pkg." + name`.
fn constant_prefix(expr: &Expr) -> Option<String> {
    match expr {
        Expr::JoinedStr(j) => j.values.first().and_then(str_of).map(str::to_owned),
        Expr::BinOp(b) if b.op == ast::Operator::Add => str_of(&b.left)
            .map(str::to_owned)
            .or_else(|| constant_prefix(&b.left)),
        _ => None,
    }
}

/// The argparse options of the file `entry` (under `root`) with a string default: their flags
/// and the default.
pub(super) fn arg_defaults(root: &Path, entry: &str) -> Vec<(Vec<String>, String)> {
    std::fs::read(root.join(entry))
        .map(|bytes| read(entry, &crate::source::decode(&bytes).text).arg_defaults)
        .unwrap_or_default()
}

/// What the static reach found: the files, and the choices it could not resolve.
#[derive(Debug, Default)]
pub(super) struct Reach {
    pub files: BTreeSet<String>,
    pub notes: Vec<String>,
}

/// The project files `entry` and `roots` reach (see the module documentation); files are read
/// from under `root`. A note is kept only where an unresolved choice keeps a file in scope that
/// the resolved choices alone would not reach.
pub(super) fn reach(
    root: &Path,
    project: &Project,
    entry: &str,
    roots: &[String],
    selection: &Selection,
) -> Reach {
    let mut cache: HashMap<String, FileReach> = HashMap::new();
    let walk = Walk {
        root,
        project,
        selection,
    };
    let (strict, _) = walk.run(entry, roots, false, &mut cache);
    let (files, notes) = walk.run(entry, roots, true, &mut cache);
    let notes = notes
        .into_values()
        .filter(|(_, targets)| targets.iter().any(|t| !strict.contains(t)))
        .map(|(text, _)| text)
        .collect();
    Reach { files, notes }
}

/// Notes by place: the text, and the files the unresolved choice there keeps.
type Notes = BTreeMap<String, (String, BTreeSet<String>)>;

struct Walk<'a> {
    root: &'a Path,
    project: &'a Project,
    selection: &'a Selection,
}

impl Walk<'_> {
    /// Whether an edge with `guards` to `targets` is followed; an unresolved choice is
    /// followed when `keep_all`, with a note.
    fn follows(
        &self,
        guards: &[Guard],
        targets: &[&str],
        keep_all: bool,
        notes: &mut Notes,
    ) -> bool {
        guards.iter().all(|g| {
            if let Some(taken) = g.taken(self.selection) {
                return taken;
            }
            let note = notes.entry(g.at.clone()).or_insert_with(|| {
                (
                    format!(
                        "{}: the choice among {} is not made by the launch command or its config; every candidate is kept",
                        g.at,
                        quoted(&g.chain)
                    ),
                    BTreeSet::new(),
                )
            });
            note.1.extend(targets.iter().map(|t| (*t).to_owned()));
            keep_all
        })
    }

    fn run(
        &self,
        entry: &str,
        roots: &[String],
        keep_all: bool,
        cache: &mut HashMap<String, FileReach>,
    ) -> (BTreeSet<String>, Notes) {
        let (project, selection) = (self.project, self.selection);
        let mut files: BTreeSet<String> = BTreeSet::new();
        let mut notes = Notes::new();
        let mut queue: VecDeque<String> = VecDeque::new();
        for start in std::iter::once(entry).chain(roots.iter().map(String::as_str)) {
            if project.file(start).is_some() && files.insert(start.to_owned()) {
                queue.push_back(start.to_owned());
            }
        }
        while let Some(file) = queue.pop_front() {
            let found = cache.entry(file.clone()).or_insert_with(|| {
                std::fs::read(self.root.join(&file))
                    .map(|bytes| read(&file, &crate::source::decode(&bytes).text))
                    .unwrap_or_default()
            });
            let mut next: Vec<String> = Vec::new();
            let mut modules: HashMap<&str, &str> = HashMap::new();
            for edge in &found.edges {
                let fact = ImportFact {
                    candidates: edge.candidates.clone(),
                    line: edge.line,
                };
                let Some(target) = project.resolve_import(&file, &fact) else {
                    continue;
                };
                for name in &edge.bound {
                    modules.insert(name.as_str(), target);
                }
                if self.follows(&edge.guards, &[target], keep_all, &mut notes) {
                    next.push(target.to_owned());
                }
            }
            for dynamic in &found.dynamic {
                let under = modules_under(project, &dynamic.prefix);
                let all: Vec<&str> = under.iter().map(|(_, f)| f.as_str()).collect();
                if !self.follows(&dynamic.guards, &all, keep_all, &mut notes) {
                    continue;
                }
                let chosen: Vec<&str> = under
                    .iter()
                    .filter(|(key, _)| selection.has(key))
                    .map(|(_, f)| f.as_str())
                    .collect();
                if !chosen.is_empty() {
                    next.extend(chosen.iter().map(|f| (*f).to_owned()));
                    continue;
                }
                if !all.is_empty() {
                    let note = notes.entry(dynamic.at.clone()).or_insert_with(|| {
                        (
                            format!(
                                "{}: the module imported from `{}…` is not named by the launch command or its config; all {} candidates are kept",
                                dynamic.at,
                                dynamic.prefix,
                                all.len()
                            ),
                            BTreeSet::new(),
                        )
                    });
                    note.1.extend(all.iter().map(|f| (*f).to_owned()));
                }
                if keep_all {
                    next.extend(all.iter().map(|f| (*f).to_owned()));
                }
            }
            // `getattr(package, name)`: one of the names a package exports, picked at run time;
            // everything the package imports stays in scope.
            for (name, at) in &found.getattrs {
                if let Some(target) = modules.get(name.as_str())
                    && target.ends_with("__init__.py")
                {
                    let note = notes.entry(at.clone()).or_insert_with(|| {
                        (
                            format!(
                                "{at}: `getattr({name}, …)` picks a name of {target} at run time; every module it imports is kept"
                            ),
                            BTreeSet::new(),
                        )
                    });
                    note.1
                        .extend(project.imports_of(target).iter().map(|f| (*f).to_owned()));
                }
            }
            for target in next {
                if files.insert(target.clone()) {
                    queue.push_back(target);
                }
            }
        }
        (files, notes)
    }
}

/// Up to six keys, quoted, and how many there are when more.
fn quoted(keys: &[String]) -> String {
    let shown: Vec<String> = keys.iter().take(6).map(|k| format!("\"{k}\"")).collect();
    if keys.len() > shown.len() {
        format!("{} … ({} keys)", shown.join(", "), keys.len())
    } else {
        shown.join(", ")
    }
}

/// The project modules under the dotted `prefix` (`pkg.policies.`): (the next part of the name,
/// the file), for the modules and packages directly under it.
fn modules_under(project: &Project, prefix: &str) -> Vec<(String, String)> {
    let base = prefix.trim_end_matches('.');
    let mut out = Vec::new();
    for path in project.files().keys() {
        let (module, _) = crate::names::module_name(path);
        let parts: Vec<&str> = module.split('.').collect();
        for i in 0..parts.len() {
            let suffix = parts[i..].join(".");
            let rest = if prefix.ends_with('.') {
                suffix.strip_prefix(&format!("{base}."))
            } else {
                suffix.strip_prefix(base)
            };
            if let Some(rest) = rest
                && !rest.is_empty()
                && !rest.contains('.')
            {
                out.push((rest.to_owned(), path.clone()));
                break;
            }
        }
    }
    out
}
