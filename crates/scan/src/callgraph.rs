//! The per-step model of a project: which functions run once per optimizer step.
//!
//! The roots are what a training step runs: `forward` methods, training-step and loss
//! functions (Lightning, accelerate and HF-Trainer hooks are named so), and the functions
//! whose loop over a data loader runs a backward pass or an optimizer step (a script's
//! `main`/`finetune`). Every project function that a root calls, directly or through other
//! functions, is step code too. Calls are resolved as far as the text allows: a bare name to
//! a function nested in the caller, defined in the same file or imported by name from a
//! project module; `module.name(...)` to the function of a module imported under that name
//! (`import augmentations`, `import pkg.utils as utils`); `self.name(...)` to the methods of
//! the caller's class, its project bases and subclasses; `obj.name(...)` to the one method of
//! that name in the project when there is only one. Inference code and host-side classes stay out because no step reaches them.
//!
//! Like [`crate::classes`], the graph is read from the source text (no parse): definitions by
//! their indentation, calls as an identifier followed by `(`, strings and comments blanked.

mod text;

use std::collections::{HashMap, HashSet};
use text::{Blank, brackets, calls_of};

/// The maps of the linking pass, which hash every call's name.
type FastMap<K, V> = foldhash::HashMap<K, V>;

/// The step functions of a project, by module and qualified name (`Class.method`).
#[derive(Debug, Default)]
pub struct StepGraph {
    /// Module → the qualified names of its step functions.
    steps: HashMap<String, HashSet<String>>,
    /// Module → the functions that run a training loop.
    loops: HashMap<String, HashSet<String>>,
    /// Modules that build or load CUDA code (a Triton import, a CUDA extension, a CUDA-only
    /// kernel library), and module → their functions that launch it.
    cuda_modules: HashSet<String>,
    cuda_functions: HashMap<String, HashSet<String>>,
    /// Module → module-level functions of a CUDA module that launch nothing themselves.
    portable: HashMap<String, HashSet<String>>,
    /// Method name → `module.Class.method` of the project's definitions of that name, when
    /// every one sends its input to a device and returns the result pulled back to numpy.
    round_trips: HashMap<String, String>,
}

impl StepGraph {
    /// The function `symbol` (`Class.method`, `outer.inner`) of `module`, or a function
    /// enclosing it, is reached from a step root.
    pub fn reaches(&self, module: &str, symbol: &str) -> bool {
        let Some(steps) = self.steps.get(module) else {
            return false;
        };
        let mut at = symbol;
        loop {
            if steps.contains(at) {
                return true;
            }
            match at.rsplit_once('.') {
                Some((outer, _)) => at = outer,
                None => return false,
            }
        }
    }

    /// The function `symbol` of `module` runs the training loop: its loop over a data loader
    /// is step code (not what comes before it).
    pub fn runs_training_loop(&self, module: &str, symbol: &str) -> bool {
        self.loops.get(module).is_some_and(|l| l.contains(symbol))
    }

    /// The qualified name `q` (`pkg.ops.scan.warp_scan`, `pkg.ops.fused`) is a function of the
    /// project that launches CUDA-only code, or anything from a project module that builds or
    /// loads a CUDA extension or imports Triton.
    pub fn is_cuda_only(&self, q: &str) -> bool {
        if self.cuda_modules.contains(q) {
            return true;
        }
        // The longest prefix of `q` that is a CUDA module, and what `q` names in it.
        let mut at = q;
        while let Some((module, _)) = at.rsplit_once('.') {
            if self.cuda_modules.contains(module) {
                let rest = &q[module.len() + 1..];
                let first = rest.split('.').next().unwrap_or(rest);
                return self.is_cuda_only_function(module, first)
                    || !self.functions_of(module).contains(first);
            }
            at = module;
        }
        false
    }

    /// The function `name` of `module` (this file) launches CUDA-only code.
    pub fn is_cuda_only_function(&self, module: &str, name: &str) -> bool {
        self.cuda_functions
            .get(module)
            .is_some_and(|f| f.contains(name))
    }

    /// `obj.name(...)` calls a round trip of the project: every method called `name` sends
    /// what it is handed to a device and returns the result as numpy (a value normaliser's
    /// `denormalize` that ends in `.cpu().numpy()`). The definition's `module.Class.method`.
    pub fn round_trip(&self, name: &str) -> Option<&str> {
        self.round_trips.get(name).map(String::as_str)
    }

    /// Functions of a CUDA module that launch nothing (portable fallbacks beside the kernels)
    /// are not CUDA-only; the others are known by name.
    fn functions_of(&self, module: &str) -> HashSet<&str> {
        self.portable
            .get(module)
            .map(|f| f.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The graph of some files, each given as (relative path, source text).
    pub fn build<P: AsRef<str>, T: AsRef<str>>(
        files: impl IntoIterator<Item = (P, T)>,
    ) -> StepGraph {
        StepGraph::from_reads(
            files
                .into_iter()
                .map(|(path, text)| StepGraph::read(path.as_ref(), text.as_ref()))
                .collect(),
        )
    }

    /// What the graph needs of one file (relative path, source text): files are read
    /// independently of each other, so they may be read on several threads.
    pub(crate) fn read(path: &str, text: &str) -> FileRead {
        let module = crate::names::module_name(path).0;
        let defs = read_file(&module, text);
        FileRead { module, defs }
    }

    /// The graph of the files read by [`StepGraph::read`], in the order given.
    pub(crate) fn from_reads(files: Vec<FileRead>) -> StepGraph {
        let mut defs = Vec::new();
        let mut imports = Vec::new();
        let mut classes: HashMap<String, Vec<String>> = HashMap::new();
        let mut cuda_modules = HashSet::new();
        for FileRead { module, defs: file } in files {
            for (name, bases) in file.classes {
                classes.entry(name).or_default().extend(bases);
            }
            if file.cuda {
                cuda_modules.insert(module.clone());
            }
            imports.push((module, file.imports));
            defs.extend(file.defs);
        }
        let imports: HashMap<&str, &HashMap<String, (String, String)>> =
            imports.iter().map(|(m, i)| (m.as_str(), i)).collect();
        let mut graph = link(&defs, &imports, &classes);
        for d in &defs {
            if !cuda_modules.contains(&d.module) || d.qual != d.name {
                continue;
            }
            let table = if d.launches {
                &mut graph.cuda_functions
            } else {
                &mut graph.portable
            };
            table
                .entry(d.module.clone())
                .or_default()
                .insert(d.name.clone());
        }
        // A function of a CUDA module that calls one of its launching functions launches too.
        loop {
            let mut more = Vec::new();
            for d in defs.iter().filter(|d| d.qual == d.name) {
                let Some(launching) = graph.cuda_functions.get(&d.module) else {
                    continue;
                };
                if !launching.contains(&d.name)
                    && d.calls
                        .iter()
                        .any(|c| matches!(c, Call::Bare(n) if launching.contains(n)))
                {
                    more.push((d.module.clone(), d.name.clone()));
                }
            }
            if more.is_empty() {
                break;
            }
            for (m, n) in more {
                if let Some(p) = graph.portable.get_mut(&m) {
                    p.remove(&n);
                }
                graph.cuda_functions.entry(m).or_default().insert(n);
            }
        }
        graph.cuda_modules = cuda_modules;
        graph.round_trips = round_trips(&defs);
        graph
    }
}

/// Method names whose every definition in the project is a round trip (see
/// [`StepGraph::round_trip`]); dunder methods and names that are also module-level functions
/// are left out.
fn round_trips(defs: &[Def]) -> HashMap<String, String> {
    let mut by_name: HashMap<&str, Vec<&Def>> = HashMap::new();
    for d in defs.iter().filter(|d| !d.name.starts_with("__")) {
        by_name.entry(d.name.as_str()).or_default().push(d);
    }
    by_name
        .into_iter()
        .filter(|(_, ds)| {
            ds.iter()
                .all(|d| d.class.is_some() && d.uploads && d.returns_pull)
        })
        .map(|(name, ds)| (name.to_owned(), format!("{}.{}", ds[0].module, ds[0].qual)))
        .collect()
}

/// One file as the graph reads it: its module and its definitions.
#[derive(Debug)]
pub(crate) struct FileRead {
    module: String,
    defs: FileDefs,
}

/// One function definition read from the text.
#[derive(Debug)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts read from a function's text"
)]
struct Def {
    module: String,
    /// `Class.method`, `outer.inner`, `func`.
    qual: String,
    name: String,
    /// The class it is a method of, if any.
    class: Option<String>,
    calls: Vec<Call>,
    /// Its body has a loop over a data loader.
    loader: bool,
    /// Its body runs a backward pass or an optimizer step.
    update: bool,
    /// Its body launches a kernel (`kernel[grid](...)`) or calls a compiled extension's op.
    launches: bool,
    /// Its body builds a trainer or hands it the training (`trainer.train()`): it runs the
    /// whole training once.
    drives: bool,
    /// Its body sends a value to a device (`torch.from_numpy(`, `.to(`, `.cuda(`).
    uploads: bool,
    /// It returns a value pulled back to numpy (`return out.cpu().numpy()`, or a name bound
    /// to such a pull).
    returns_pull: bool,
    /// Names bound to a pull (`out = out.cpu().numpy()`), while the body is read.
    pulled: Vec<String>,
}

impl Def {
    /// A loop over a data loader with a backward pass or an optimizer step: a training loop.
    fn training_loop(&self) -> bool {
        self.loader && self.update
    }
}

#[derive(Debug, PartialEq)]
enum Call {
    Bare(String),
    SelfMethod(String),
    Attr(String),
    /// `alias.name(...)` where `alias` is a bare identifier: a function of an imported module
    /// when the file imports one under that name (`import pkg.utils as utils`).
    Module(String, String),
}

#[derive(Debug, Default)]
struct FileDefs {
    defs: Vec<Def>,
    /// Local name → (module as written, imported name).
    imports: HashMap<String, (String, String)>,
    classes: Vec<(String, Vec<String>)>,
    /// The file imports Triton, a CUDA extension builder or a CUDA-only kernel library.
    cuda: bool,
}

/// A root of the step: `forward`, a training step (`training_step`, `train_batch`, a
/// script's training loop, an agent's `update`) or a loss. A bare `step` is not one: environments, schedulers
/// and callbacks have those.
fn is_root(def: &Def) -> bool {
    let lower = def.name.to_ascii_lowercase();
    let training = lower.split('_').any(|w| w == "train" || w == "training");
    // The update of an agent or algorithm (`agent.update(replay_sample)`) is its training step.
    let update = def.class.is_some()
        && matches!(
            lower.as_str(),
            "update"
                | "_update"
                | "learn"
                | "_learn"
                | "optimize"
                | "_optimize"
                | "train"
                | "_train"
        );
    def.training_loop()
        || (update && !def.drives)
        || def.name == "forward"
        || lower.contains("loss")
        || (training && !def.drives && crate::names::is_training_step_name(&lower))
}

/// A line that builds a trainer (`LLaVATrainer(`) or hands one the training
/// (`trainer.train(`, `self.trainer.fit(`).
fn drives_trainer(code: &str) -> bool {
    // Every spelling below contains "rainer": most lines are settled without lowering them.
    if !code.contains("rainer") {
        return false;
    }
    let lower = code.to_ascii_lowercase();
    lower.contains("trainer.train(") || lower.contains("trainer.fit(") || code.contains("Trainer(")
}

/// Constructors, builders and weight initialisers run once: a step that calls one (a lazy
/// build on the first batch) does not make it step code.
fn is_setup(def: &Def) -> bool {
    if def.name == "__call__" {
        return false;
    }
    crate::names::is_setup_name(&def.name)
}

fn link(
    defs: &[Def],
    imports: &HashMap<&str, &HashMap<String, (String, String)>>,
    classes: &HashMap<String, Vec<String>>,
) -> StepGraph {
    // Module-level functions by name, methods by (class, name) and by name.
    let mut functions: FastMap<&str, Vec<usize>> = FastMap::default();
    let mut methods: FastMap<(&str, &str), Vec<usize>> = FastMap::default();
    let mut by_method_name: FastMap<&str, Vec<usize>> = FastMap::default();
    let mut by_qual: FastMap<(&str, &str), usize> = FastMap::default();
    for (i, d) in defs.iter().enumerate() {
        by_qual.insert((d.module.as_str(), d.qual.as_str()), i);
        match &d.class {
            Some(c) => {
                methods
                    .entry((c.as_str(), d.name.as_str()))
                    .or_default()
                    .push(i);
                by_method_name.entry(d.name.as_str()).or_default().push(i);
            }
            None if d.qual == d.name => functions.entry(d.name.as_str()).or_default().push(i),
            None => {}
        }
    }
    // A class's family: its project bases and subclasses, transitively.
    let mut subclasses: FastMap<&str, Vec<&str>> = FastMap::default();
    for (name, bases) in classes {
        for b in bases {
            subclasses
                .entry(b.as_str())
                .or_default()
                .push(name.as_str());
        }
    }
    let mut families: FastMap<&str, std::rc::Rc<[&str]>> = FastMap::default();
    let mut family = |class: &str| -> std::rc::Rc<[&str]> {
        if let Some(f) = families.get(class) {
            return f.clone();
        }
        let Some((own, _)) = classes.get_key_value(class) else {
            return std::rc::Rc::from([]);
        };
        let mut out: Vec<&str> = vec![own.as_str()];
        let mut i = 0;
        while i < out.len() && out.len() < 64 {
            let c = out[i];
            let next = classes
                .get(c)
                .into_iter()
                .flatten()
                .filter_map(|b| classes.get_key_value(b.as_str()).map(|(k, _)| k.as_str()))
                .chain(subclasses.get(c).into_iter().flatten().copied());
            for n in next {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
            i += 1;
        }
        let out: std::rc::Rc<[&str]> = out.into();
        families.insert(own.as_str(), out.clone());
        out
    };
    let mut callees = |d: &Def, call: &Call| -> Vec<usize> {
        match call {
            Call::Bare(name) => {
                let nested = format!("{}.{name}", d.qual);
                if let Some(&i) = by_qual.get(&(d.module.as_str(), nested.as_str())) {
                    return vec![i];
                }
                let candidates = functions.get(name.as_str()).map_or(&[][..], Vec::as_slice);
                if let Some(&i) = candidates.iter().find(|&&i| defs[i].module == d.module) {
                    return vec![i];
                }
                let Some((from, orig)) = imports.get(d.module.as_str()).and_then(|m| m.get(name))
                else {
                    return Vec::new();
                };
                let last = from.trim_start_matches('.');
                let last = last.rsplit('.').next().unwrap_or(last);
                functions
                    .get(orig.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|&i| {
                        let m = defs[i].module.as_str();
                        last.is_empty()
                            || m == last
                            || m.strip_suffix(last).is_some_and(|p| p.ends_with('.'))
                    })
                    .collect()
            }
            Call::SelfMethod(name) => {
                let Some(class) = &d.class.clone().or_else(|| enclosing_class(d)) else {
                    return Vec::new();
                };
                family(class)
                    .iter()
                    .flat_map(|c| {
                        methods
                            .get(&(*c, name.as_str()))
                            .into_iter()
                            .flatten()
                            .copied()
                    })
                    .collect()
            }
            Call::Module(alias, name) => {
                let Some((from, orig)) = imports.get(d.module.as_str()).and_then(|m| m.get(alias))
                else {
                    return Vec::new();
                };
                let path = if orig.is_empty() {
                    from.clone()
                } else {
                    format!("{from}.{orig}")
                };
                let path = path.trim_start_matches('.');
                functions
                    .get(name.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|&i| {
                        let m = defs[i].module.as_str();
                        !path.is_empty()
                            && (m == path || m.strip_suffix(path).is_some_and(|p| p.ends_with('.')))
                    })
                    .collect()
            }
            Call::Attr(name) => match by_method_name.get(name.as_str()) {
                Some(one) if one.len() == 1 => one.clone(),
                _ => Vec::new(),
            },
        }
    };
    // Methods of host-side classes (callbacks, data, environments, loggers) run around the
    // step, whatever they are called: they neither start nor carry it.
    let host = |d: &Def| {
        d.class
            .clone()
            .or_else(|| enclosing_class(d))
            .is_some_and(|c| {
                crate::names::is_host_class(&c, classes.get(&c).map_or(&[][..], Vec::as_slice))
            })
    };
    let outside: Vec<bool> = defs.iter().map(|d| is_setup(d) || host(d)).collect();
    let mut reached = vec![false; defs.len()];
    let mut work: Vec<usize> = (0..defs.len())
        .filter(|&i| is_root(&defs[i]) && !outside[i])
        .collect();
    for &i in &work {
        reached[i] = true;
    }
    while let Some(i) = work.pop() {
        for call in &defs[i].calls {
            for j in callees(&defs[i], call) {
                if !reached[j] && !outside[j] {
                    reached[j] = true;
                    work.push(j);
                }
            }
        }
    }
    let mut graph = StepGraph::default();
    for (i, d) in defs.iter().enumerate() {
        if reached[i] {
            graph
                .steps
                .entry(d.module.clone())
                .or_default()
                .insert(d.qual.clone());
        }
        if d.training_loop() {
            graph
                .loops
                .entry(d.module.clone())
                .or_default()
                .insert(d.qual.clone());
        }
    }
    graph
}

/// The class of a function nested in a method (`Class.method.inner`).
fn enclosing_class(d: &Def) -> Option<String> {
    let (first, _) = d.qual.split_once('.')?;
    first
        .starts_with(|c: char| c.is_ascii_uppercase())
        .then(|| first.to_owned())
}

/// Names that look like calls but are not calls of project functions.
const NOT_CALLS: &[&str] = &[
    "if",
    "elif",
    "while",
    "for",
    "return",
    "and",
    "or",
    "not",
    "in",
    "is",
    "with",
    "assert",
    "print",
    "len",
    "range",
    "isinstance",
    "super",
    "lambda",
    "yield",
    "await",
    "del",
    "raise",
    "except",
    "def",
    "class",
    "import",
    "from",
    "as",
    "else",
    "int",
    "float",
    "str",
    "list",
    "dict",
    "tuple",
    "set",
    "enumerate",
    "zip",
    "getattr",
    "hasattr",
    "setattr",
    "type",
    "min",
    "max",
    "sum",
    "any",
    "all",
    "sorted",
    "map",
    "filter",
    "open",
    "format",
];

/// One file's definitions, imports and class headers, read line by line.
fn read_file(module: &str, text: &str) -> FileDefs {
    let mut out = FileDefs::default();
    // Open blocks: (indent, name, is class, index in `out.defs` for a def).
    let mut open: Vec<(usize, String, bool, Option<usize>)> = Vec::new();
    let mut lexer = Blank::default();
    let mut depth: i32 = 0;
    let mut pending_import: Option<String> = None;
    let mut code = String::new();
    for raw in text.lines() {
        let continued = depth > 0 || lexer.in_triple();
        lexer.line(raw, &mut code);
        let code = code.as_str();
        let body = code.trim_start();
        if let Some(from) = &pending_import {
            let from = from.clone();
            add_imports(&mut out.imports, &from, body);
            // The closing bracket ends the import and the bracket count it opened.
            depth += brackets(body);
            if body.contains(')') {
                pending_import = None;
            }
            continue;
        }
        if body.is_empty() {
            continue;
        }
        if !continued {
            let indent = code.len() - body.len();
            while open.last().is_some_and(|(at, ..)| *at >= indent) {
                open.pop();
            }
            let header = body.strip_prefix("async ").unwrap_or(body);
            if let Some(rest) = header.strip_prefix("def ") {
                let name = ident(rest);
                if !name.is_empty() {
                    let mut qual: Vec<&str> = open.iter().map(|(_, n, ..)| n.as_str()).collect();
                    qual.push(name);
                    let class = match open.last() {
                        Some((_, c, true, _)) => Some(c.clone()),
                        _ => None,
                    };
                    out.defs.push(Def {
                        module: module.to_owned(),
                        qual: qual.join("."),
                        name: name.to_owned(),
                        class,
                        calls: Vec::new(),
                        loader: false,
                        update: false,
                        launches: false,
                        drives: false,
                        uploads: false,
                        returns_pull: false,
                        pulled: Vec::new(),
                    });
                    open.push((indent, name.to_owned(), false, Some(out.defs.len() - 1)));
                }
            } else if let Some(rest) = body.strip_prefix("class ") {
                let name = ident(rest);
                if !name.is_empty() {
                    let after = &rest[name.len()..];
                    let bases = after
                        .strip_prefix('(')
                        .map(|b| {
                            b.split([',', ')'])
                                .map(str::trim)
                                .filter(|s| !s.is_empty() && !s.contains('='))
                                .map(|s| s.rsplit('.').next().unwrap_or(s).to_owned())
                                .collect()
                        })
                        .unwrap_or_default();
                    out.classes.push((name.to_owned(), bases));
                    open.push((indent, name.to_owned(), true, None));
                }
            } else if indent == 0
                && let Some(rest) = body.strip_prefix("import ")
            {
                // `import pkg.utils as utils`: the alias names the module itself; so does the
                // name of `import augmentations` (a dotted `import a.b` binds only `a`).
                for part in rest.split(',') {
                    let (module, alias) = match part.split_once(" as ") {
                        Some((module, alias)) => (module.trim(), ident(alias.trim())),
                        None if !part.contains('.') => (part.trim(), ident(part.trim())),
                        None => continue,
                    };
                    if !alias.is_empty() {
                        out.imports
                            .insert(alias.to_owned(), (module.to_owned(), String::new()));
                    }
                }
            } else if indent == 0
                && let Some(rest) = body.strip_prefix("from ")
                && let Some((from, names)) = rest.split_once(" import ")
            {
                let from = from.trim().to_owned();
                add_imports(&mut out.imports, &from, names);
                if names.contains('(') && !names.contains(')') {
                    pending_import = Some(from);
                }
            }
        }
        if !out.cuda
            && (indent_free_import(body).is_some_and(is_cuda_import)
                || body.contains("load_inline("))
        {
            out.cuda = true;
        }
        depth += brackets(body);
        let Some(at) = open.iter().rev().find_map(|(.., d)| *d) else {
            continue;
        };
        let def = &mut out.defs[at];
        calls_of(body, &mut def.calls);
        def.loader = def.loader || is_loader_loop(body);
        def.launches =
            def.launches || body.contains("](") || body.contains("_C.") || body.contains("_cuda.");
        def.update = def.update || body.contains(".backward(") || body.contains(".step(");
        def.drives = def.drives || drives_trainer(body);
        read_round_trip(def, body);
    }
    out
}

/// Reads one line of a definition for [`StepGraph::round_trip`]: uploads, pulls bound to
/// names, and returns of a pull.
fn read_round_trip(def: &mut Def, body: &str) {
    def.uploads = def.uploads
        || body.contains("from_numpy(")
        || body.contains("as_tensor(")
        || body.contains(".to(")
        || body.contains(".cuda(");
    let pull = body.contains(".cpu()") && body.contains(".numpy()");
    if let Some(value) = body.strip_prefix("return ") {
        let value = value.trim();
        def.returns_pull = def.returns_pull || pull || def.pulled.iter().any(|n| n == value);
    } else if pull
        && let Some((target, _)) = body.split_once(" = ")
        && !ident(target).is_empty()
        && ident(target).len() == target.len()
    {
        def.pulled.push(target.to_owned());
    }
}

/// The module an `import`/`from` line imports.
fn indent_free_import(body: &str) -> Option<&str> {
    let rest = body
        .strip_prefix("import ")
        .or_else(|| body.strip_prefix("from "))?;
    Some(rest.split([' ', ',']).next().unwrap_or(rest))
}

/// Modules whose code runs only on CUDA devices: Triton, the CUDA extension builder and
/// kernel libraries built for CUDA alone.
fn is_cuda_import(module: &str) -> bool {
    const CUDA: &[&str] = &[
        "triton",
        "torch.utils.cpp_extension",
        "flash_attn",
        "xformers",
        "mamba_ssm",
        "causal_conv1d",
        "selective_scan_cuda",
        "tinycudann",
        "pointnet2_ops",
    ];
    CUDA.iter()
        .any(|c| module == *c || module.strip_prefix(c).is_some_and(|r| r.starts_with('.')))
}

/// `for batch in train_loader:`, `for i, batch in enumerate(tqdm(dataloader)):`.
pub(crate) fn is_loader_loop(body: &str) -> bool {
    let Some(rest) = body.strip_prefix("for ") else {
        return false;
    };
    let Some((_, iter)) = rest.split_once(" in ") else {
        return false;
    };
    let lower = iter.to_ascii_lowercase();
    lower.contains("loader")
}

fn add_imports(imports: &mut HashMap<String, (String, String)>, from: &str, names: &str) {
    for part in names.split(',') {
        let part = part.trim().trim_matches(|c| c == '(' || c == ')').trim();
        if part.is_empty() || part == "*" {
            continue;
        }
        let (orig, local) = match part.split_once(" as ") {
            Some((o, l)) => (o.trim(), l.trim()),
            None => (part, part),
        };
        if !orig.is_empty() && !local.is_empty() {
            imports.insert(local.to_owned(), (from.to_owned(), orig.to_owned()));
        }
    }
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

#[cfg(test)]
mod tests;
