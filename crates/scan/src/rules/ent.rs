//! `P_ENT`: an entry point whose program uses torch but never sets up the NPU.
//!
//! Each file notes its CUDA call sites (`.cuda()`, `torch.cuda.*`, `torch.backends.cudnn.*`,
//! `"cuda"` device strings, `"nccl"`) and whether it defines `nn.Module` classes; the project
//! hook then reports one issue per entry point, with the CUDA sites of every project file the
//! program imports in `related[]`, since the one setup at the entry covers them all.

mod fix;
mod site;

use site::cuda_site;

use super::{Checker, ProjectChecker, Rule, RuleInfo};
use crate::semantic::Semantic;
use crate::source::TextRange;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use issue_model::{Category, Related, Severity};
use std::collections::{BTreeMap, BTreeSet};

pub struct EntryWithoutNpu;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_ENT",
    name: "entry-without-npu-setup",
    category: Category::Structure,
    severity: Severity::Error,
    performance: false,
    project_level: true,
    fix_template: "references/fix-templates/P_ENT.md",
    summary: "An entry point whose program uses torch but never imports torch_npu, transfer_to_npu or the runtime patcher.",
    doc: include_str!("ent.md"),
    check: &EntryWithoutNpu,
};

const CUDA_SITE: &str = "cuda-site";
const MODULE_CLASS: &str = "module-class";
const DEVICE_USE: &str = "device-use";
/// A call to a function by name: the qualified name through imports, or `.name` for a name
/// defined in the same file.
const CALL: &str = "call";
/// Device work and calls made in the file's own `if __name__ == "__main__":` block.
const MAIN_DEVICE: &str = "main-device";
const MAIN_CALL: &str = "main-call";
/// Device work at module level, outside any function, class or main guard: the program of a
/// guard-less script (`model.to(args.device)` or `Trainer(...).fit(...)` run on import).
const SCRIPT_DEVICE: &str = "script-device";
/// How many calls deep [`calls_device_work`] follows functions across files.
const CALL_DEPTH: usize = 4;

impl Rule for EntryWithoutNpu {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        // At the first statement of a class body the class scope is entered.
        let Some(Stmt::ClassDef(class)) = cx.semantic().stmts().last().copied() else {
            return;
        };
        if !class
            .body
            .first()
            .is_some_and(|first| std::ptr::eq(first, stmt))
        {
            return;
        }
        // torchvision transforms are modules that run in DataLoader workers.
        let is_model = cx.semantic().current_class().is_some_and(|c| {
            c.is_module
                && !c
                    .bases
                    .iter()
                    .any(|b| b.starts_with("torchvision.") || b.ends_with("Transform"))
        });
        if is_model {
            cx.note(MODULE_CLASS, class.range(), class.name.as_str());
        }
    }

    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        let in_main = cx.semantic().in_main_guard() && cx.semantic().current_function().is_none();
        if let Some(note) = cuda_site(cx.semantic(), expr) {
            // `.cuda()` is located at `.cuda`, after a receiver that may span lines.
            let range = match expr {
                Expr::Call(call) => match call.func.as_ref() {
                    Expr::Attribute(a) => TextRange::new(a.value.end(), expr.end()),
                    _ => expr.range(),
                },
                _ => expr.range(),
            };
            if in_main {
                cx.note(MAIN_DEVICE, range, "");
            }
            cx.note(CUDA_SITE, range, note);
        }
        let Expr::Call(call) = expr else {
            return;
        };
        let qualified = cx.semantic().resolve(&call.func);
        let at_module_level = !cx.semantic().in_main_guard()
            && cx.semantic().current_function().is_none()
            && cx.semantic().current_class().is_none();
        let cuda_call =
            matches!(call.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "cuda");
        let device_use = is_device_use(cx.semantic(), call, qualified.as_deref());
        if at_module_level && (device_use || cuda_call) {
            cx.note(SCRIPT_DEVICE, expr.range(), "");
        }
        if device_use {
            if in_main {
                cx.note(MAIN_DEVICE, expr.range(), "");
            }
            cx.note(DEVICE_USE, expr.range(), "");
        }
        // A call of a parameter whose default is a project class or function
        // (`experiment_type=amago.Experiment` … `experiment_type(...)`) calls that default.
        let qualified = qualified.or_else(|| parameter_default(cx.semantic(), call));
        if let Some(callee) = callee(call, qualified) {
            if in_main {
                cx.note(MAIN_CALL, expr.range(), callee.clone());
            }
            cx.note(CALL, expr.range(), callee);
        }
    }

    fn project(&self, cx: &mut ProjectChecker<'_>) {
        let project = cx.project();
        let mut entries = project.entry_points();
        // Who imports each file (tests and packaging scripts aside), computed once.
        let mut importers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for importer in project.files().keys() {
            if is_test_or_setup(importer) {
                continue;
            }
            for imported in project.imports_of(importer) {
                importers
                    .entry(imported)
                    .or_default()
                    .push(importer.as_str());
            }
        }
        entries.extend(script_entries(cx, &importers));
        let entry_files: BTreeSet<&str> = entries.iter().map(|e| e.file.as_str()).collect();
        // The entry points reported below.
        let reported: Vec<&crate::project::EntryPoint> = entries
            .iter()
            .filter(|entry| {
                if !entry.uses_torch || entry.sets_up_npu || is_test_or_setup(&entry.file) {
                    return false;
                }
                let imported_by = importers
                    .get(entry.file.as_str())
                    .map_or(&[][..], Vec::as_slice);
                let library = is_library_module(cx, &entry.file, imported_by, &entry_files)
                    && !main_runs_on_device(cx, &entry.file);
                !library && runs_on_device(cx, entry) && !cpu_self_test(cx, entry)
            })
            .collect();
        // The programs that set up the NPU (already, or by the fix of their issue), with the
        // files each one imports: an entry another one imports gets its setup only where it
        // starts the program.
        let programs: Vec<(&str, BTreeSet<&str>)> = entries
            .iter()
            .filter(|e| {
                (e.sets_up_npu && e.uses_torch && !is_test_or_setup(&e.file))
                    || reported.iter().any(|r| r.file == e.file)
            })
            .map(|e| {
                let reached: BTreeSet<&str> = project.reachable(&e.file).into_iter().collect();
                (e.file.as_str(), reached)
            })
            .collect();
        // CUDA sites in the related[] of a reported entry point.
        let mut covered: BTreeSet<(String, u32, u32)> = BTreeSet::new();
        for entry in reported {
            let mut related: Vec<Related> = Vec::new();
            for file in project.reachable(&entry.file) {
                for site in cx.notes(file, CUDA_SITE) {
                    related.push(Related {
                        file: file.to_owned(),
                        line: site.line,
                        column: site.column,
                        note: site.note.clone(),
                    });
                }
            }
            related.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
            // A site transfer_to_npu leaves CUDA's is not covered by the setup: it says so.
            let mut edits = 0;
            for site in &mut related {
                if site.note.contains("CUDA's") {
                    edits += 1;
                    site.note = format!(
                        "needs an edit, the entry setup does not cover it: {}",
                        site.note
                    );
                }
            }
            let covers = match (related.len(), edits) {
                (0, _) => String::new(),
                (1, 0) => ", which also covers the CUDA call site listed in related".to_owned(),
                (n, 0) => format!(", which also covers the {n} CUDA call sites listed in related"),
                (n, e) if e == n => format!(
                    "; it does not cover the {n} CUDA call site(s) listed in related (transfer_to_npu leaves \
                     them CUDA's): edit each to take its device from the caller or the config"
                ),
                (n, e) => format!(
                    ", which also covers {} of the {n} CUDA call sites listed in related; the {e} marked \
                     `needs an edit` stay CUDA's under transfer_to_npu: edit each to take its device from the \
                     caller or the config",
                    n - e
                ),
            };
            let what = if entry.kind == crate::project::EntryKind::Script {
                "guard-less script (its module-level code is the program)".to_owned()
            } else {
                format!("{} entry point", entry.kind.as_str())
            };
            let message = format!(
                "this {what} runs torch code but never imports torch_npu or applies \
                 transfer_to_npu or the runtime patcher, so the program will not use the NPU; add the \
                 NPU setup at the top of this file (see P_ENT.md){covers}; a program that never \
                 runs on an accelerator (a data tool, a CPU-only demo) needs none"
            );
            let site =
                decorator_site(cx, entry).unwrap_or_else(|| ProjectChecker::entry_site(entry));
            covered.extend(related.iter().map(|r| (r.file.clone(), r.line, r.column)));
            let imported_by_entry = programs.iter().any(|(file, reached)| {
                *file != entry.file && reached.contains(entry.file.as_str())
            });
            // Only a main guard says "this file starts the program"; a `fire.Fire(...)` or
            // `LightningCLI(...)` at module level runs on import too.
            let only_as_main =
                imported_by_entry && entry.kinds.contains(&crate::project::EntryKind::MainGuard);
            let fix = project.file(&entry.file).and_then(|facts| {
                fix::setup_fix(&entry.file, facts, only_as_main, project.line_length)
            });
            // Reported at the decorator of a decorated main: the main guard that calls it
            // starts the program, and the NPU setup goes above both.
            let guard = ProjectChecker::entry_site(entry);
            if guard.line != site.line {
                related.push(Related {
                    file: entry.file.clone(),
                    line: guard.line,
                    column: guard.column,
                    note: "the main guard that starts this program".to_owned(),
                });
            }
            let finding = cx.report(&entry.file, &site, message);
            finding.related = related;
            finding.fix = fix;
        }
        report_unreached_sites(cx, &entries, &covered);
    }
}

/// Guard-less scripts: project files outside any package, with no entry marker, that run
/// device work at module level (outside any function, class or main guard) and that no other
/// project file imports, so running the file is what starts the program. Each is an entry
/// point anchored at its first such line.
fn script_entries(
    cx: &ProjectChecker<'_>,
    importers: &BTreeMap<&str, Vec<&str>>,
) -> Vec<crate::project::EntryPoint> {
    let project = cx.project();
    let mut out = Vec::new();
    for (file, facts) in project.files() {
        if !facts.entry_markers.is_empty()
            || is_test_or_setup(file)
            || project.in_package(file)
            || importers
                .get(file.as_str())
                .is_some_and(|i| i.iter().any(|f| f != file))
        {
            continue;
        }
        let Some(first) = cx.notes(file, SCRIPT_DEVICE).first() else {
            continue;
        };
        out.extend(project.script_entry(file, first));
    }
    out
}

/// CUDA sites that no reported entry point covers, in code that no entry point setting up the
/// NPU reaches: library code that an outside harness (a simulator benchmark, a policy server,
/// a notebook) launches. One issue per function, at its first site, the others in `related[]`,
/// since one setup in the launching program covers them all.
fn report_unreached_sites(
    cx: &mut ProjectChecker<'_>,
    entries: &[crate::project::EntryPoint],
    covered: &BTreeSet<(String, u32, u32)>,
) {
    let project = cx.project();
    let set_up: BTreeSet<&str> = entries
        .iter()
        .filter(|e| e.sets_up_npu)
        .flat_map(|e| project.reachable(&e.file))
        .collect();
    for file in project.files().keys() {
        if is_test_or_setup(file) || set_up.contains(file.as_str()) {
            continue;
        }
        let mut by_symbol: BTreeMap<Option<&str>, Vec<&crate::project::Site>> = BTreeMap::new();
        for site in cx.notes(file, CUDA_SITE) {
            if !covered.contains(&(file.clone(), site.line, site.column)) {
                by_symbol
                    .entry(site.symbol.as_deref())
                    .or_default()
                    .push(site);
            }
        }
        for (symbol, sites) in by_symbol {
            let Some((first, rest)) = sites.split_first() else {
                continue;
            };
            let scope = symbol.map_or_else(|| "module-level code".to_owned(), |s| format!("`{s}`"));
            let more = match rest.len() {
                0 => String::new(),
                1 => "; the other CUDA site of it is listed in related".to_owned(),
                n => format!("; the {n} other CUDA sites of it are listed in related"),
            };
            let message = format!(
                "{scope} hard-codes CUDA ({}) and no entry point of this project reaches it, so \
                 whatever launches it (an evaluation harness, a policy server, a notebook) must set \
                 up the NPU first: import torch_npu and transfer_to_npu in that program (see \
                 P_ENT.md), or take the device from the caller{more}",
                first.note
            );
            let related = rest
                .iter()
                .map(|s| Related {
                    file: file.clone(),
                    line: s.line,
                    column: s.column,
                    note: s.note.clone(),
                })
                .collect();
            let finding = cx.report(file, first, message);
            finding.related = related;
        }
    }
}

/// The decorator of a decorated main (`@hydra.main`, `@draccus.wrap`): the function it wraps
/// is the program, and a main guard below it only calls that function.
fn decorator_site(
    cx: &ProjectChecker<'_>,
    entry: &crate::project::EntryPoint,
) -> Option<crate::project::Site> {
    use crate::project::EntryKind;
    cx.project()
        .file(&entry.file)?
        .entry_markers
        .iter()
        .find(|m| matches!(m.kind, EntryKind::Hydra | EntryKind::Draccus))
        .map(|m| m.site.clone())
}

/// Test modules and packaging scripts are not programs that train on the device.
fn is_test_or_setup(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_tests = path
        .split('/')
        .rev()
        .skip(1)
        .any(|dir| matches!(dir, "test" | "tests" | "testing"));
    in_tests
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name == "conftest.py"
        || name == "setup.py"
}

/// A module the project imports that keeps a `__main__` block as a smoke test: imported by a
/// file that is not an entry point, or imported at all (tests aside) while it defines
/// `nn.Module` classes or sits in a package (a directory with `__init__.py`). A script imported
/// only by other scripts stays an entry point.
fn is_library_module(
    cx: &ProjectChecker<'_>,
    file: &str,
    imported_by: &[&str],
    entry_files: &BTreeSet<&str>,
) -> bool {
    let project = cx.project();
    let defines_modules = project.in_package(file) || !cx.notes(file, MODULE_CLASS).is_empty();
    imported_by
        .iter()
        .any(|importer| *importer != file && (defines_modules || !entry_files.contains(importer)))
}

/// A model file's `__main__` block that builds modules and runs them on host tensors (a
/// self-test or a demo): the block places nothing on a device, names no CUDA, calls no project
/// function that does, and the file trains nothing. It runs on no accelerator, so it is no
/// entry point to set up, whichever model file it is in.
fn cpu_self_test(cx: &ProjectChecker<'_>, entry: &crate::project::EntryPoint) -> bool {
    entry.kind == crate::project::EntryKind::MainGuard
        && !entry.trains_here
        && !cx.notes(&entry.file, MODULE_CLASS).is_empty()
        && !main_runs_on_accelerator(cx, &entry.file)
}

/// The file's main block places work on an accelerator: as [`main_runs_on_device`], except that
/// building and calling a module class (of the same file or another project file) counts only
/// when that class names CUDA: its own `.to(device)` follows its parameters or inputs, which
/// stay on the host here.
fn main_runs_on_accelerator(cx: &ProjectChecker<'_>, file: &str) -> bool {
    !cx.notes(file, MAIN_DEVICE).is_empty()
        || cx
            .notes(file, MAIN_CALL)
            .iter()
            .any(|call| match module_class(cx, file, &call.note) {
                Some((defined_in, class)) => names_cuda(cx, defined_in, class),
                None => calls_device_work(cx, file, &call.note, CALL_DEPTH),
            })
}

/// The `nn.Module` class a call (a [`MAIN_CALL`] note made in `from_file`) builds, and the file
/// that defines it.
fn module_class<'c>(
    cx: &'c ProjectChecker<'_>,
    from_file: &'c str,
    callee: &'c str,
) -> Option<(&'c str, &'c str)> {
    let (file, class) = if let Some(local) = callee.strip_prefix('.') {
        (from_file, local)
    } else {
        let (module, class) = callee.rsplit_once('.')?;
        let import = crate::project::ImportFact {
            candidates: vec![module.to_owned()],
            line: 0,
        };
        (cx.project().resolve_import(from_file, &import)?, class)
    };
    with_reexports(cx, file)
        .into_iter()
        .find(|f| cx.notes(f, MODULE_CLASS).iter().any(|c| c.note == class))
        .map(|f| (f, class))
}

/// `file` and, for a package's `__init__.py`, the modules it imports: an `__init__.py`
/// re-exports what they define (`from .experiment import Experiment`), so `pkg.Experiment` is
/// looked up there too.
fn with_reexports<'c>(cx: &'c ProjectChecker<'_>, file: &'c str) -> Vec<&'c str> {
    let mut files = vec![file];
    if file.ends_with("__init__.py") {
        files.extend(cx.project().imports_of(file));
    }
    files
}

/// A CUDA site of `file` lies in `class` (one of its methods).
fn names_cuda(cx: &ProjectChecker<'_>, file: &str, class: &str) -> bool {
    cx.notes(file, CUDA_SITE).iter().any(|site| {
        site.symbol
            .as_deref()
            .is_some_and(|s| s == class || s.starts_with(&format!("{class}.")))
    })
}

/// The file's main block puts work on a device itself or through a project function it calls:
/// a module the project imports whose `__main__` block trains, evaluates or serves a model is
/// still a program of its own.
fn main_runs_on_device(cx: &ProjectChecker<'_>, file: &str) -> bool {
    !cx.notes(file, MAIN_DEVICE).is_empty()
        || cx
            .notes(file, MAIN_CALL)
            .iter()
            .any(|call| calls_device_work(cx, file, &call.note, CALL_DEPTH))
}

/// The program puts work on an accelerator: the entry file places tensors or models on a
/// device (or names CUDA, or builds objects from a hydra config), it is a `LightningCLI`
/// application, or it imports a
/// project module that defines `nn.Module` classes while some file it reaches places work on a
/// device. Robot, dataset and conversion tools that
/// only import torch through the project's packages do not.
fn runs_on_device(cx: &ProjectChecker<'_>, entry: &crate::project::EntryPoint) -> bool {
    use crate::project::EntryKind;
    let file = entry.file.as_str();
    if !cx.notes(file, DEVICE_USE).is_empty() || !cx.notes(file, CUDA_SITE).is_empty() {
        return true;
    }
    if entry
        .kinds
        .iter()
        .any(|k| matches!(k, EntryKind::LightningCli))
    {
        return true;
    }
    let imports_models = cx
        .project()
        .imports_of(file)
        .iter()
        .any(|imported| !cx.notes(imported, MODULE_CLASS).is_empty());
    // Models alone do not choose an accelerator: some code the program imports must place work
    // on one (a CPU-only exercise that trains a project model on host tensors is no port).
    let reaches_device_code = || {
        cx.project()
            .reachable(file)
            .into_iter()
            .any(|f| !cx.notes(f, DEVICE_USE).is_empty() || !cx.notes(f, CUDA_SITE).is_empty())
    };
    (imports_models && reaches_device_code())
        || cx
            .notes(file, CALL)
            .iter()
            .any(|call| calls_device_work(cx, file, &call.note, CALL_DEPTH))
}

/// The function `callee` (a [`CALL`] note made in `from_file`) is a project function whose
/// body, or a project function it calls (up to `depth` calls deep), puts work on a device or
/// names CUDA: the training loop an entry point delegates to, e.g. `from pkg.trainer import
/// train` … `train(cfg)`.
fn calls_device_work(cx: &ProjectChecker<'_>, from_file: &str, callee: &str, depth: usize) -> bool {
    if depth == 0 {
        return false;
    }
    let (file, function) = if let Some(local) = callee.strip_prefix('.') {
        (from_file, local)
    } else {
        let Some((module, function)) = callee.rsplit_once('.') else {
            return false;
        };
        let import = crate::project::ImportFact {
            candidates: vec![module.to_owned()],
            line: 0,
        };
        let Some(file) = cx.project().resolve_import(from_file, &import) else {
            return false;
        };
        (file, function)
    };
    let in_function = |site: &&crate::project::Site| {
        site.symbol.as_deref().is_some_and(|s| {
            s == function
                || s.strip_prefix(function)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    with_reexports(cx, file).into_iter().any(|file| {
        let works = cx.notes(file, DEVICE_USE).iter().any(|s| in_function(&s))
            || cx.notes(file, CUDA_SITE).iter().any(|s| in_function(&s));
        works
            || cx
                .notes(file, CALL)
                .iter()
                .filter(in_function)
                .filter(|call| {
                    !(file == from_file && call.note.strip_prefix('.') == Some(function))
                })
                .any(|call| calls_device_work(cx, file, &call.note, depth - 1))
    })
}

/// For a call of a bare name that is a parameter of the enclosing function, the qualified name
/// of that parameter's default (a class or function reference), if it has one.
fn parameter_default(sem: &Semantic<'_>, call: &ast::ExprCall) -> Option<String> {
    let Expr::Name(name) = call.func.as_ref() else {
        return None;
    };
    let args = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(f) => Some(&f.args),
        Stmt::AsyncFunctionDef(f) => Some(&f.args),
        _ => None,
    })?;
    let default = args
        .posonlyargs
        .iter()
        .chain(&args.args)
        .chain(&args.kwonlyargs)
        .find(|a| a.def.arg.as_str() == name.id.as_str())?
        .default
        .as_deref()?;
    matches!(default, Expr::Name(_) | Expr::Attribute(_))
        .then(|| sem.resolve(default))
        .flatten()
}

/// The function a call names: its qualified name through imports, or `.name` for a bare name
/// that no import binds (a function of the same file). Library calls (torch, numpy, the
/// standard library) resolve to modules outside the project and are dropped later.
fn callee(call: &ast::ExprCall, qualified: Option<String>) -> Option<String> {
    if let Some(q) = qualified {
        return q.contains('.').then_some(q);
    }
    match call.func.as_ref() {
        Expr::Name(name) => Some(format!(".{}", name.id.as_str())),
        _ => None,
    }
}

/// A place that moves work to a device: `torch.device(...)`, `.to(device)`, a `device=`
/// argument other than `"cpu"`, a Lightning/transformers `Trainer`, an accelerate
/// `Accelerator`, or objects built from a hydra config (`hydra.utils.instantiate`).
/// `qualified` is the resolved name of the call's function.
fn is_device_use(sem: &Semantic<'_>, call: &ast::ExprCall, qualified: Option<&str>) -> bool {
    if let Some(q) = qualified {
        if matches!(
            q,
            "torch.device"
                | "accelerate.Accelerator"
                | "hydra.utils.instantiate"
                | "hydra.utils.get_class"
        ) {
            return true;
        }
        // `Trainer`, `SFTTrainer`, `DPOTrainer`…: a library trainer places the model itself.
        // `Trainer.from_argparse_args(...)` too.
        let trainer = q.split('.').any(|part| part.ends_with("Trainer"))
            && ["pytorch_lightning", "lightning", "transformers", "trl"]
                .iter()
                .any(|p| q.starts_with(p) && q[p.len()..].starts_with('.'));
        if trainer {
            return true;
        }
    }
    let device_kw = call.keywords.iter().any(|k| {
        k.arg.as_ref().is_some_and(|a| a.as_str() == "device")
            && !matches!(&k.value, Expr::Constant(c)
                if matches!(&c.value, ast::Constant::Str(s) if s == "cpu") || matches!(c.value, ast::Constant::None))
            && !follows_input(sem, &k.value)
    });
    if device_kw {
        return true;
    }
    let Expr::Attribute(a) = call.func.as_ref() else {
        return false;
    };
    a.attr.as_str() == "to"
        && call.args.iter().any(|arg| {
            !follows_input(sem, arg)
                && crate::analysis::find_in_expr(arg).iter().any(|e| match e {
                    Expr::Name(n) => n.id.as_str().to_ascii_lowercase().contains("device"),
                    Expr::Attribute(at) => at.attr.as_str().to_ascii_lowercase().contains("device"),
                    _ => false,
                })
        })
}

/// A device that only follows what the code was given, so placing work on it chooses no
/// accelerator: the device of a tensor or module (`x.device`, `self.device`, not a config's
/// `args.device`), or a parameter of the enclosing function (the caller chooses).
fn follows_input(sem: &Semantic<'_>, device: &Expr) -> bool {
    const CONFIGS: &[&str] = &[
        "args", "cfg", "config", "conf", "opt", "opts", "hparams", "flags", "params",
    ];
    match device {
        Expr::Attribute(a) if a.attr.as_str() == "device" => !matches!(
            a.value.as_ref(),
            Expr::Name(n) if CONFIGS.contains(&n.id.as_str().to_ascii_lowercase().as_str())
        ),
        Expr::Name(n) => sem
            .current_function()
            .is_some_and(|f| f.params.iter().any(|p| p == n.id.as_str())),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::site::cuda_name_site;
    use super::{CUDA_SITE, RULE};

    #[test]
    fn a_cuda_device_string_is_said_to_become_npu_only_in_a_call_the_table_wraps() {
        let text = "import torch\n\nx = torch.zeros(3, device=\"cuda\")\ny = x.to(\"cuda\")\nd = torch.device(\"cuda\")\n";
        let (_, facts) = crate::visit::check_text(&[&RULE], "m.py", text);
        let notes: Vec<(u32, &str)> = facts.notes[CUDA_SITE]
            .iter()
            .map(|s| (s.line, s.note.as_str()))
            .collect();
        assert!(
            notes
                .iter()
                .any(|(l, n)| *l == 3 && n.contains("becomes npu")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|(l, n)| *l == 4 && n.contains("becomes npu")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|(l, n)| *l == 5 && n.contains("stays CUDA's")),
            "{notes:?}"
        );
    }

    #[test]
    fn an_entry_issue_says_which_related_sites_its_setup_covers_and_which_need_an_edit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import torch\n\n\ndef main():\n    x = torch.zeros(3, device=\"cuda\")\n    \
             d = torch.device(\"cuda\")\n    return x, d\n\n\nif __name__ == \"__main__\":\n    main()\n",
        )
        .unwrap();
        let result = crate::scan(dir.path(), &crate::Settings::default()).unwrap();
        let entry = result
            .issues
            .iter()
            .find(|i| i.pattern == "P_ENT" && i.file == "train.py" && i.line == 10)
            .unwrap_or_else(|| panic!("{:#?}", result.issues));
        assert!(
            entry.message.contains(
                ", which also covers 1 of the 2 CUDA call sites listed in related; the 1 marked `needs an edit` \
                 stay CUDA's under transfer_to_npu"
            ),
            "{}",
            entry.message
        );
        let notes: Vec<(u32, &str)> = entry
            .related
            .iter()
            .map(|r| (r.line, r.note.as_str()))
            .collect();
        assert!(
            notes[0].0 == 5
                && notes[0]
                    .1
                    .starts_with("\"cuda\" device string (becomes npu"),
            "{notes:?}"
        );
        assert!(
            notes[1].0 == 6
                && notes[1]
                    .1
                    .starts_with("needs an edit, the entry setup does not cover it: "),
            "{notes:?}"
        );
    }

    #[test]
    fn a_torch_cuda_name_is_said_to_become_npu_only_where_the_table_copies_it() {
        assert!(cuda_name_site("torch.cuda.is_available").contains("becomes torch.npu"));
        assert!(cuda_name_site("torch.cuda.amp.GradScaler").contains("becomes torch.npu"));
        let nvtx = cuda_name_site("torch.cuda.nvtx.range_push");
        assert!(
            nvtx.contains("no counterpart") && !nvtx.contains("becomes"),
            "{nvtx}"
        );
    }
}
