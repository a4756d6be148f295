//! `P_NET`: weights or data fetched from the network at run time, in code an entry point
//! reaches.
//!
//! Finds torchvision/timm constructors with `pretrained=True` or a `weights=` enum,
//! `from_pretrained("<org>/<name>")` of a Hugging Face hub id, a weights enum's
//! `get_state_dict(progress=…)`, `torch.hub.load` and its URL loaders, `hf_hub_download`/`snapshot_download`, and `urlopen`/`urlretrieve`/`requests.get`,
//! `wget`/`gdown` downloads of model files. Each call is noted per file; the project hook reports
//! the ones in files an entry point using torch reaches through imports. Not reported: calls
//! with `local_files_only=`, calls under an `if` that checks a local path or an offline flag,
//! local paths and values from a config, and tests, docs and download/preparation scripts.

use super::{Checker, ProjectChecker, Rule, RuleInfo};
use crate::facts::EntryKind;
use crate::project::Project;
use crate::source::ast::{self, Expr, Ranged, Stmt};
use issue_model::{Category, Severity};
use std::collections::BTreeSet;

pub struct RuntimeDownload;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_NET",
    name: "runtime-downloads",
    category: Category::Structure,
    severity: Severity::Warning,
    performance: false,
    project_level: true,
    fix_template: "references/fix-templates/P_NET.md",
    summary: "Weights or data downloaded at run time (pretrained=True, hub ids, torch.hub, hf_hub_download, urlopen), which an offline NPU cluster cannot reach.",
    doc: include_str!("net.md"),
    check: &RuntimeDownload,
};

/// A download call, with what it fetches.
const DOWNLOAD: &str = "download";

/// A weights-zoo constructor whose `pretrained=` is the enclosing function's parameter.
const GATED_DOWNLOAD: &str = "gated-download";

/// A project call asking for pretrained weights, with the callee's qualified name.
const PRETRAINED_CALL: &str = "pretrained-call";

/// Model constructors that fetch weights when asked for pretrained ones.
const WEIGHT_ZOOS: &[&str] = &["torchvision.models.", "timm."];

/// Calls that always fetch from the network (the Hugging Face hub, torch.hub's URL loaders).
const FETCHERS: &[&str] = &[
    "huggingface_hub.hf_hub_download",
    "huggingface_hub.file_download.hf_hub_download",
    "huggingface_hub.snapshot_download",
    "huggingface_hub._snapshot_download.snapshot_download",
    "torch.hub.load",
    "torch.hub.load_state_dict_from_url",
    "torch.hub.download_url_to_file",
    "torch.utils.model_zoo.load_url",
    "torchvision.models.utils.load_state_dict_from_url",
    "wget.download",
    "gdown.download",
    "gdown.download_folder",
    // allenai's `prior` clones its datasets and models from GitHub (git-lfs) into ~/.prior
    // (README of allenai/prior: "prior.load_dataset(\"procthor-10k\")").
    "prior.load_dataset",
    "prior.load_model",
];

/// Schemes that name a model on the Hugging Face hub in a model-name string
/// (`open_clip.create_model("hf-hub:org/name")`, `timm.create_model("hf_hub:org/name")`).
const HUB_SCHEMES: &[&str] = &["hf-hub:", "hf_hub:"];

/// The model names that `clip.load` (the `clip` package) fetches from its release URLs into `~/.cache/clip`
/// (`clip.available_models()`); any other name is read as a local checkpoint path.
const OPENAI_CLIP_MODELS: &[&str] = &[
    "RN50",
    "RN101",
    "RN50x4",
    "RN50x16",
    "RN50x64",
    "ViT-B/32",
    "ViT-B/16",
    "ViT-L/14",
    "ViT-L/14@336px",
];

/// The model factories of `open_clip`: a `pretrained=` tag (`"openai"`, `"laion2b_s34b_b79k"`)
/// downloads the tagged weights; a file path loads a local checkpoint.
const OPEN_CLIP_FACTORIES: &[&str] = &[
    "create_model",
    "create_model_and_transforms",
    "create_model_from_pretrained",
];

/// URL readers: a download only when they fetch a file (a literal URL of a model or data
/// file, or a call in a function that downloads).
const URL_READERS: &[&str] = &[
    "urllib.request.urlopen",
    "urllib.request.urlretrieve",
    "urllib.urlretrieve",
    "requests.get",
];

/// File extensions of weights and data archives.
const FILE_EXTENSIONS: &[&str] = &[
    "pt",
    "pth",
    "bin",
    "ckpt",
    "safetensors",
    "onnx",
    "h5",
    "pkl",
    "npz",
    "npy",
    "zip",
    "tar",
    "gz",
    "tgz",
    "json",
    "model",
    "yaml",
];

/// Words in an `if` test that make the call behind it cache-first or opt-in.
const GUARD_WORDS: &[&str] = &[
    "exists",
    "isfile",
    "isdir",
    "is_file",
    "is_dir",
    "offline",
    "local_files_only",
];

impl Rule for RuntimeDownload {
    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        let Expr::Call(call) = expr else {
            return;
        };
        if skipped_file(cx.path()) || has_keyword(call, "local_files_only") || in_demo(cx) {
            return;
        }
        let qualified = cx.semantic().resolve(&call.func).unwrap_or_default();
        let Some(what) = download(cx, call, &qualified) else {
            if gated_weights(cx, call, &qualified) {
                cx.note(GATED_DOWNLOAD, expr.range(), "");
            } else if asks_for_pretrained(call, &qualified) {
                cx.note(PRETRAINED_CALL, expr.range(), qualified);
            }
            return;
        };
        if guarded(cx) {
            return;
        }
        cx.note(DOWNLOAD, expr.range(), what);
    }

    fn project(&self, cx: &mut ProjectChecker<'_>) {
        let project = cx.project();
        let entries: Vec<_> = project
            .entry_points()
            .into_iter()
            .filter(|e| e.uses_torch && !preparation_file(&e.file))
            // A data tool (`scripts/data/build_mix.py`, importing `datasets` or `transformers`
            // and reaching torch only through the project's helpers) that trains nothing
            // prepares data by hand: not a run on the cluster.
            .filter(|e| imports_torch(project, &e.file) || project.trains(&e.file))
            .collect();
        let mut reached: BTreeSet<&str> = entries
            .iter()
            .map(|e| e.file.as_str())
            .chain(training_scripts(project))
            .flat_map(|file| project.reachable(file))
            .collect();
        // A Hydra entry builds its objects from `_target_` strings in its configs, which imports
        // do not show: every module of the project that is no entry point of its own may be one.
        if entries.iter().any(|e| e.kinds.contains(&EntryKind::Hydra)) {
            let own_entries: BTreeSet<&str> = project
                .files()
                .iter()
                .filter(|(_, facts)| !facts.entry_markers.is_empty())
                .map(|(path, _)| path.as_str())
                .collect();
            reached.extend(
                project
                    .files()
                    .keys()
                    .map(String::as_str)
                    .filter(|f| !own_entries.contains(f)),
            );
        }
        // A preparation script runs once by hand; a module with such a name that other project
        // files import (`preprocessors.py` of a model) is training code.
        reached.retain(|file| {
            !preparation_file(file) || project.importers_of(file).iter().any(|i| i != file)
        });
        for &file in &reached {
            for site in cx.notes(file, PRETRAINED_CALL) {
                let Some(download) = download_behind(cx, file, &site.note) else {
                    continue;
                };
                let callee = site.note.rsplit('.').next().unwrap_or(&site.note);
                let message = format!(
                    "`{callee}(…)` is asked for pretrained weights, and the code it builds \
                     downloads them from the network at run time ({download}); an offline NPU \
                     cluster cannot reach it, so the run fails here first; fetch the weights \
                     once into a local cache or directory and load them from there (TORCH_HOME, \
                     HF_HUB_OFFLINE=1, a local path; see P_NET.md); check first that the training \
                     run builds it: a model nobody trains is harmless"
                );
                cx.report(file, site, message);
            }
        }
        for file in reached {
            for site in cx.notes(file, DOWNLOAD) {
                let message = format!(
                    "{} from the network at run time, and an offline NPU cluster cannot reach \
                     it, so the run fails here first; fetch it once into a local cache or \
                     directory and load it from there (HF_HUB_OFFLINE=1, TORCH_HOME, a local \
                     path; see P_NET.md); check first that the training run reaches it: a script \
                     run by hand, a helper nothing calls, or a fetch behind a cache or offline check \
                     is not one",
                    site.note
                );
                cx.report(file, site, message);
            }
        }
    }
}

/// The file imports torch, or a training framework that drives it, itself.
fn imports_torch(project: &Project, file: &str) -> bool {
    const DRIVERS: &[&str] = &[
        "torch",
        "lightning",
        "pytorch_lightning",
        "accelerate",
        "deepspeed",
    ];
    project.files().get(file).is_some_and(|facts| {
        facts.imports.iter().any(|i| {
            i.candidates
                .iter()
                .any(|c| DRIVERS.contains(&c.split('.').next().unwrap_or("")))
        })
    })
}

/// Where the module of `callee` (a project function or class, by qualified name) downloads,
/// directly or through the project files it imports: a download, or a pretrained-weights
/// constructor whose `pretrained=` is a parameter (`path:line`).
fn download_behind(cx: &ProjectChecker<'_>, from_file: &str, callee: &str) -> Option<String> {
    let project = cx.project();
    let (module, _) = callee.rsplit_once('.')?;
    let candidates = std::iter::successors(Some(module), |m| m.rsplit_once('.').map(|(p, _)| p))
        .take(2)
        .map(str::to_owned)
        .collect();
    let fact = crate::project::ImportFact {
        candidates,
        line: 0,
    };
    let defined_in = project.resolve_import(from_file, &fact)?;
    project.reachable(defined_in).into_iter().find_map(|file| {
        cx.notes(file, DOWNLOAD)
            .iter()
            .chain(cx.notes(file, GATED_DOWNLOAD))
            .next()
            .map(|site| format!("{file}:{}", site.line))
    })
}

/// Guard-less training scripts: files outside any package, with no entry marker, that no
/// other project file imports and whose program trains (builds an optimizer and steps it, or
/// builds a trainer). Running such a file is what starts the training.
fn training_scripts(project: &Project) -> Vec<&str> {
    project
        .files()
        .iter()
        .filter(|(file, facts)| {
            facts.entry_markers.is_empty()
                && facts.uses_torch
                && !preparation_file(file)
                && !project.in_package(file)
                && project.importers_of(file).iter().all(|i| i == file)
        })
        .map(|(file, _)| file.as_str())
        .filter(|file| project.trains(file))
        .collect()
}

/// What the call downloads, if it is a download (`qualified`: the callee's resolved name, or
/// empty).
fn download(cx: &Checker<'_>, call: &ast::ExprCall, qualified: &str) -> Option<String> {
    if WEIGHT_ZOOS.iter().any(|zoo| qualified.starts_with(zoo)) {
        return pretrained_weights(cx, call)
            .then(|| format!("`{qualified}` downloads its weights"));
    }
    // efficientnet_pytorch fetches the ImageNet weights of the named model from its release
    // URLs unless given `weights_path=` (`load_pretrained_weights` calls `model_zoo.load_url`).
    if qualified == "efficientnet_pytorch.EfficientNet.from_pretrained"
        && !has_keyword(call, "weights_path")
    {
        return Some(format!("`{qualified}` downloads its weights"));
    }
    if let Expr::Attribute(attr) = call.func.as_ref()
        && attr.attr.as_str() == "from_pretrained"
    {
        let id = call
            .args
            .first()
            .or_else(|| keyword(call, "pretrained_model_name_or_path"))?;
        let id = literal_or_default(cx, id)?;
        return is_hub_id(&id)
            .then(|| format!("`from_pretrained(\"{id}\")` downloads the hub model"));
    }
    if let Some(what) = hub_loader(cx, call, qualified) {
        return Some(what);
    }
    if let Some(what) = hub_scheme(call).or_else(|| named_weights(cx, call, qualified)) {
        return Some(what);
    }
    // A torchvision dataset asked to `download=True` fetches its archives whenever the root
    // directory lacks them (`torchvision.datasets.MNIST(root, download=True)`).
    if qualified.starts_with("torchvision.datasets.")
        && keyword(call, "download").is_some_and(|value| is_true(cx, value))
    {
        return Some(format!(
            "`{qualified}(…, download=True)` downloads the dataset"
        ));
    }
    // A torchvision weights enum member fetching its file: `weights.get_state_dict(progress=…)`.
    if let Expr::Attribute(attr) = call.func.as_ref()
        && attr.attr.as_str() == "get_state_dict"
        && (has_keyword(call, "progress") || has_keyword(call, "check_hash"))
    {
        return Some(
            "`get_state_dict` of a torchvision weights enum downloads its weights".to_owned(),
        );
    }
    if FETCHERS.contains(&qualified) {
        if qualified == "torch.hub.load"
            && keyword(call, "source").and_then(string).as_deref() == Some("local")
        {
            return None;
        }
        return Some(format!("`{qualified}` downloads a file"));
    }
    if URL_READERS.contains(&qualified) && fetches_a_file(cx, call) {
        return Some(format!("`{qualified}` downloads a file"));
    }
    None
}

/// `pretrained=True` (also through a parameter defaulting to `True`, or as the first positional
/// argument), or `weights=` an enum member or a weights name.
fn pretrained_weights(cx: &Checker<'_>, call: &ast::ExprCall) -> bool {
    if let Some(value) = keyword(call, "pretrained") {
        return is_true(cx, value);
    }
    if let Some(value) = keyword(call, "weights") {
        let value = param_default(cx, value).unwrap_or(value);
        return match value {
            Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if !s.is_empty()),
            Expr::Attribute(_) => crate::semantic::dotted(value).contains("_Weights"),
            _ => false,
        };
    }
    call.args.first().is_some_and(|e| is_true(cx, e))
}

/// A literal `True`, or a parameter of the enclosing function defaulting to `True`.
fn is_true(cx: &Checker<'_>, expr: &Expr) -> bool {
    let literal =
        |e: &Expr| matches!(e, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)));
    literal(expr) || param_default(cx, expr).is_some_and(literal)
}

/// Hugging Face loaders that fetch from the hub by name: `datasets.load_dataset` of a hub
/// dataset (not a packaged builder such as `json` reading local files), `transformers.pipeline`
/// of a hub model (or of none: the task's default model), and `evaluate.load` of a metric.
fn hub_loader(cx: &Checker<'_>, call: &ast::ExprCall, qualified: &str) -> Option<String> {
    match qualified {
        "datasets.load_dataset" => {
            let name = call.args.first().or_else(|| keyword(call, "path"))?;
            let name = literal_or_default(cx, name)?;
            ((is_hub_id(&name) || is_name_part(&name)) && !LOCAL_BUILDERS.contains(&name.as_str()))
                .then(|| format!("`load_dataset(\"{name}\")` downloads the hub dataset"))
        }
        "transformers.pipeline" | "transformers.pipelines.pipeline" => {
            match call.args.get(1).or_else(|| keyword(call, "model")) {
                Some(model) => {
                    let id = literal_or_default(cx, model)?;
                    is_hub_id(&id)
                        .then(|| format!("`pipeline(…, \"{id}\")` downloads the hub model"))
                }
                // No model anywhere, not even through `**kwargs`.
                None if (call.args.len() == 1 || has_keyword(call, "task"))
                    && call.keywords.iter().all(|k| k.arg.is_some()) =>
                {
                    Some(
                        "`pipeline(…)` without a model downloads the task's default hub model"
                            .to_owned(),
                    )
                }
                None => None,
            }
        }
        "evaluate.load" => {
            let name = literal_or_default(cx, call.args.first()?)?;
            (!name.starts_with(['/', '.', '~']) && extension(&name).is_none())
                .then(|| format!("`evaluate.load(\"{name}\")` downloads the metric from the hub"))
        }
        _ => None,
    }
}

/// A model-name argument on the Hugging Face hub by its scheme: a literal, f-string, `.format`
/// template or concatenation beginning `hf-hub:` (`open_clip`, `timm`).
fn hub_scheme(call: &ast::ExprCall) -> Option<String> {
    let values = call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value));
    let id = values.filter_map(leading_text).find(|text| {
        HUB_SCHEMES
            .iter()
            .any(|scheme| text.len() > scheme.len() && text.starts_with(scheme))
    })?;
    let callee = crate::semantic::dotted(&call.func);
    let callee = callee.rsplit('.').next().unwrap_or(&callee);
    Some(format!("`{callee}(\"{id}…\")` downloads the hub model"))
}

/// The literal text a string expression begins with: a literal, the first piece of an
/// f-string, the template of `"….format(…)"`, or the left operand of `+`.
fn leading_text(expr: &Expr) -> Option<&str> {
    fn literal(e: &Expr) -> Option<&str> {
        match e {
            Expr::Constant(c) => match &c.value {
                ast::Constant::Str(s) => Some(s.as_str()),
                _ => None,
            },
            _ => None,
        }
    }
    match expr {
        Expr::JoinedStr(joined) => joined.values.first().and_then(literal),
        Expr::Call(call) => match call.func.as_ref() {
            Expr::Attribute(attr) if attr.attr.as_str() == "format" => literal(&attr.value),
            _ => None,
        },
        Expr::BinOp(op) if matches!(op.op, ast::Operator::Add) => leading_text(&op.left),
        _ => literal(expr),
    }
}

/// Weights named by a library's own model list: `clip.load("RN50")`, and an `open_clip`
/// factory's `pretrained=` tag (not a checkpoint path).
fn named_weights(cx: &Checker<'_>, call: &ast::ExprCall, qualified: &str) -> Option<String> {
    if matches!(qualified, "clip.load" | "clip.clip.load") {
        let name = call.args.first().or_else(|| keyword(call, "name"))?;
        let name = literal_or_default(cx, name)?;
        return OPENAI_CLIP_MODELS
            .contains(&name.as_str())
            .then(|| format!("`clip.load(\"{name}\")` downloads the OpenAI CLIP weights"));
    }
    let (module, function) = qualified.rsplit_once('.')?;
    if !(module == "open_clip" || module.starts_with("open_clip."))
        || !OPEN_CLIP_FACTORIES.contains(&function)
    {
        return None;
    }
    let tag = keyword(call, "pretrained").or_else(|| call.args.get(1))?;
    let tag = literal_or_default(cx, tag)?;
    let is_tag = !tag.is_empty()
        && !tag.contains(['/', '\\'])
        && !tag.starts_with(['.', '~'])
        && extension(&tag).is_none();
    is_tag.then(|| format!("`{function}(…, pretrained=\"{tag}\")` downloads the tagged weights"))
}

/// `datasets` builders that read local files or objects rather than a hub dataset.
const LOCAL_BUILDERS: &[&str] = &[
    "json",
    "csv",
    "parquet",
    "text",
    "arrow",
    "pandas",
    "sql",
    "xml",
    "generator",
    "imagefolder",
    "audiofolder",
    "videofolder",
    "webdataset",
    "spark",
];

/// A weights-zoo constructor whose `pretrained=` (or `weights=`) is a parameter of the
/// enclosing function without a default that asks for weights: it downloads when a caller
/// asks.
fn gated_weights(cx: &Checker<'_>, call: &ast::ExprCall, qualified: &str) -> bool {
    WEIGHT_ZOOS.iter().any(|zoo| qualified.starts_with(zoo))
        && ["pretrained", "weights"].iter().any(|k| {
            keyword(call, k)
                .is_some_and(|value| matches!(value, Expr::Name(_)) && is_parameter(cx, value))
        })
}

/// A call of something other than a weights zoo with a literal `True` for a keyword naming
/// pretrained weights (`pretrained=True`, `use_pretrained=True`), of a callee whose qualified
/// name the project hook can look up.
fn asks_for_pretrained(call: &ast::ExprCall, qualified: &str) -> bool {
    let asks = call.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|a| a.as_str().contains("pretrained"))
            && matches!(&k.value, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)))
    });
    asks && qualified.contains('.') && !WEIGHT_ZOOS.iter().any(|zoo| qualified.starts_with(zoo))
}

/// A file fetch by a URL reader: a literal URL naming a weights or data file, or a call inside
/// a function whose name says it downloads.
fn fetches_a_file(cx: &Checker<'_>, call: &ast::ExprCall) -> bool {
    let literal_file = call.args.iter().filter_map(string).any(|url| {
        url.starts_with("http") && extension(&url).is_some_and(|e| FILE_EXTENSIONS.contains(&e))
    });
    literal_file
        || cx
            .semantic()
            .current_function()
            .is_some_and(|f| f.name.to_ascii_lowercase().contains("download"))
}

/// A Hugging Face hub id (`org/name`, or a canonical name such as `bert-base-uncased`), not a
/// local path or a file.
fn is_hub_id(id: &str) -> bool {
    if id.is_empty()
        || id.starts_with(['/', '.', '~'])
        || id.contains("://")
        || extension(id).is_some_and(|e| FILE_EXTENSIONS.contains(&e))
    {
        return false;
    }
    let parts: Vec<&str> = id.split('/').collect();
    let well_formed = parts.iter().all(|p| is_name_part(p));
    match parts.len() {
        2 => well_formed,
        // A canonical model name has a version digit or a dash (`gpt2`, `t5-small`); a bare
        // word is more likely a local directory.
        1 => well_formed && id.contains(|c: char| c == '-' || c.is_ascii_digit()),
        _ => false,
    }
}

/// One component of a hub id: letters, digits, `-`, `_` and `.`, not empty.
fn is_name_part(part: &str) -> bool {
    !part.is_empty()
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The extension of a path or URL's last component.
fn extension(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    let (_, ext) = last.rsplit_once('.')?;
    Some(ext).filter(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Under an `if` (or a conditional expression) whose test checks a local path or an offline
/// flag, or after such an `if` that returns: the download runs only when the local copy is
/// missing, or only when asked for.
fn guarded(cx: &Checker<'_>) -> bool {
    let test_guards = |test: &Expr| {
        let text = cx.slice(test.range()).to_ascii_lowercase();
        GUARD_WORDS.iter().any(|w| text.contains(w))
    };
    let in_if = cx.semantic().stmts().iter().any(|s| match s {
        Stmt::If(stmt) => test_guards(&stmt.test),
        _ => false,
    });
    // `if os.path.exists(repo): return` earlier in the function: the download below runs only
    // for what is not on disk.
    let call_start = cx.semantic().stmts().last().map(|s| s.range().start());
    let returns_early = cx
        .semantic()
        .stmts()
        .iter()
        .rev()
        .find_map(|s| match s {
            Stmt::FunctionDef(f) => Some(f.body.as_slice()),
            Stmt::AsyncFunctionDef(f) => Some(f.body.as_slice()),
            _ => None,
        })
        .is_some_and(|body| {
            body.iter().any(|s| match s {
                Stmt::If(stmt) => {
                    call_start.is_some_and(|at| stmt.range().end() <= at)
                        && test_guards(&stmt.test)
                        && matches!(stmt.body.last(), Some(Stmt::Return(_)))
                }
                _ => false,
            })
        });
    in_if
        || returns_early
        || cx.semantic().exprs().iter().any(|e| match e {
            Expr::IfExp(ifexp) => test_guards(&ifexp.test),
            _ => false,
        })
}

/// A string literal, a parameter of the enclosing function whose default is one, or a name the
/// code binds to one literal only: a local (`name = "t5-small"`, then `from_pretrained(name)`)
/// or an attribute of its own class (`self.model_name = "org/x"` in `__init__`).
fn literal_or_default(cx: &Checker<'_>, expr: &Expr) -> Option<String> {
    string(expr)
        .or_else(|| param_default(cx, expr).and_then(string))
        .or_else(|| bound_constant(cx, expr))
}

/// The one string literal every assignment in its scope gives a local name (not a parameter)
/// or a `self` attribute: the function for a name, the methods of the enclosing class for
/// `self.x`. A name assigned anything else, or never, has no constant.
fn bound_constant(cx: &Checker<'_>, expr: &Expr) -> Option<String> {
    let stmts = cx.semantic().stmts();
    let (scope, target): (Vec<&Stmt>, &Expr) = match expr {
        Expr::Name(_) if !is_parameter(cx, expr) => {
            let body = stmts.iter().rev().find_map(|s| match s {
                Stmt::FunctionDef(f) => Some(f.body.as_slice()),
                Stmt::AsyncFunctionDef(f) => Some(f.body.as_slice()),
                _ => None,
            })?;
            let mut all = Vec::new();
            crate::analysis::statements(body, &mut all);
            (all, expr)
        }
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") =>
        {
            let class = stmts.iter().rev().find_map(|s| match s {
                Stmt::ClassDef(c) => Some(c),
                _ => None,
            })?;
            let mut all = Vec::new();
            for item in &class.body {
                let body = match item {
                    Stmt::FunctionDef(f) => f.body.as_slice(),
                    Stmt::AsyncFunctionDef(f) => f.body.as_slice(),
                    _ => continue,
                };
                crate::analysis::statements(body, &mut all);
            }
            (all, expr)
        }
        _ => return None,
    };
    let same = |t: &Expr| match (t, target) {
        (Expr::Name(a), Expr::Name(b)) => a.id == b.id,
        (Expr::Attribute(a), Expr::Attribute(b)) => {
            a.attr == b.attr && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
        }
        _ => false,
    };
    let mut value = None;
    for stmt in scope {
        let (targets, bound): (Vec<&Expr>, Option<&Expr>) = match stmt {
            Stmt::Assign(a) => (a.targets.iter().collect(), Some(a.value.as_ref())),
            Stmt::AnnAssign(a) => (vec![a.target.as_ref()], a.value.as_deref()),
            Stmt::AugAssign(a) => (vec![a.target.as_ref()], None),
            Stmt::For(f) => (vec![f.target.as_ref()], None),
            _ => continue,
        };
        let mut flat = Vec::new();
        for t in targets {
            match t {
                Expr::Tuple(t) => flat.extend(t.elts.iter()),
                Expr::List(l) => flat.extend(l.elts.iter()),
                t => flat.push(t),
            }
        }
        for t in flat {
            if !same(t) {
                continue;
            }
            let literal = bound.and_then(string)?;
            if value.as_ref().is_some_and(|v| v != &literal) {
                return None;
            }
            value = Some(literal);
        }
    }
    value
}

/// `expr` names a parameter of the enclosing function.
fn is_parameter(cx: &Checker<'_>, expr: &Expr) -> bool {
    parameter(cx, expr).is_some()
}

/// The default of the enclosing function's parameter that `expr` names.
fn param_default<'a>(cx: &Checker<'a>, expr: &Expr) -> Option<&'a Expr> {
    parameter(cx, expr)?.default.as_deref()
}

/// The parameter of the innermost enclosing function that `expr` names.
fn parameter<'a>(cx: &Checker<'a>, expr: &Expr) -> Option<&'a ast::ArgWithDefault> {
    let Expr::Name(name) = expr else {
        return None;
    };
    let args = cx.semantic().stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(f) => Some(f.args.as_ref()),
        Stmt::AsyncFunctionDef(f) => Some(f.args.as_ref()),
        _ => None,
    })?;
    args.posonlyargs
        .iter()
        .chain(&args.args)
        .chain(&args.kwonlyargs)
        .find(|a| a.def.arg.as_str() == name.id.as_str())
}

fn keyword<'a>(call: &'a ast::ExprCall, name: &str) -> Option<&'a Expr> {
    call.keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
        .map(|k| &k.value)
}

fn has_keyword(call: &ast::ExprCall, name: &str) -> bool {
    keyword(call, name).is_some()
}

fn string(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Constant(c) => match &c.value {
            ast::Constant::Str(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Inside a function that shows or tries something rather than trains (`print_feature_size`,
/// `demo`, `plot_curves`, `visualize`): a user calls it by hand, the training never does.
fn in_demo(cx: &Checker<'_>) -> bool {
    cx.semantic().current_function().is_some_and(|f| {
        let name = f.name.to_ascii_lowercase();
        ["print_", "show_", "test_"]
            .iter()
            .any(|p| name.starts_with(p))
            || ["demo", "example", "plot", "visuali"]
                .iter()
                .any(|w| name.contains(w))
    })
}

/// Tests, docs, packaging, and download scripts and helpers (a user runs them once, by hand).
fn skipped_file(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let dirs: Vec<&str> = lower.split('/').rev().skip(1).collect();
    dirs.iter()
        .any(|d| matches!(*d, "test" | "tests" | "testing" | "docs" | "doc"))
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name == "conftest.py"
        || name == "setup.py"
        || lower.contains("download")
}

/// Download and preparation scripts a user runs once, by name (`download_weights.py`,
/// `data/prepare_dataset.py`, `preprocess/generate.py`). The project hook still reaches a
/// preparation module that other project files import.
fn preparation_file(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    ["prepare", "preprocess"].iter().any(|w| lower.contains(w)) || skipped_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_told_from_local_paths() {
        for id in [
            "openai/clip-vit-base-patch32",
            "bert-base-uncased",
            "gpt2",
            "google/t5-v1_1-base",
        ] {
            assert!(is_hub_id(id), "{id}");
        }
        for id in [
            "",
            "./ckpt",
            "/data/models/llama",
            "~/models/x",
            "checkpoints",
            "runs/exp1/model.pt",
            "a/b/c",
            "https://example.com/x",
            "org/name with space",
        ] {
            assert!(!is_hub_id(id), "{id}");
        }
    }

    #[test]
    fn download_and_preparation_scripts_tests_and_docs_are_skipped() {
        for path in [
            "tests/test_model.py",
            "scripts/download_weights.py",
            "data/prepare_dataset.py",
            "preprocess/generate.py",
            "docs/conf.py",
            "setup.py",
        ] {
            assert!(preparation_file(path), "{path}");
        }
        for path in ["train.py", "models/backbone.py", "scripts/train.py"] {
            assert!(!preparation_file(path), "{path}");
        }
    }

    /// The `P_NET` findings of a project written from `(path, text)` pairs, as `file:line`.
    #[test]
    fn a_name_bound_to_one_hub_id_literal_is_that_hub_id() {
        let main = "import torch\nfrom model.text import Encoder\n\n\
            if __name__ == \"__main__\":\n    Encoder()\n    torch.cuda.set_device(0)\n";
        let text = "from transformers import AutoModel, AutoTokenizer\n\n\
            class Encoder:\n\
            \x20   def __init__(self, path=None):\n\
            \x20       self.name = \"distilbert-base-uncased\"\n\
            \x20       self.tok = AutoTokenizer.from_pretrained(self.name)\n\
            \x20       local = \"t5-small\"\n\
            \x20       self.lm = AutoModel.from_pretrained(local)\n\
            \x20       other = \"t5-small\"\n\
            \x20       if path:\n\
            \x20           other = path\n\
            \x20       self.alt = AutoModel.from_pretrained(other)\n\
            \x20       self.ckpt = AutoModel.from_pretrained(path)\n";
        let found = scan_project(&[("train.py", main), ("model/text.py", text)]);
        // `other` is also bound to the caller's path, `path` has no literal default.
        assert_eq!(found, ["model/text.py:6", "model/text.py:8"]);
    }

    #[test]
    fn efficientnet_from_pretrained_downloads_unless_given_a_weights_path() {
        let main = "import torch\nfrom model.enc import Encoder\n\n\
            if __name__ == \"__main__\":\n    Encoder(None)\n    torch.cuda.set_device(0)\n";
        let enc = "from efficientnet_pytorch import EfficientNet\n\n\
            class Encoder:\n\
            \x20   def __init__(self, cfg):\n\
            \x20       self.a = EfficientNet.from_pretrained(cfg.name)\n\
            \x20       self.b = EfficientNet.from_pretrained(cfg.name, weights_path=cfg.path)\n\
            \x20       self.c = EfficientNet.from_name(cfg.name)\n";
        let found = scan_project(&[("train.py", main), ("model/enc.py", enc)]);
        assert_eq!(found, ["model/enc.py:5"]);
    }

    fn scan_project(files: &[(&str, &str)]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let settings = crate::Settings {
            select: vec!["P_NET".to_owned()],
            threads: 1,
            ..crate::Settings::default()
        };
        let result = crate::scan(dir.path(), &settings).unwrap();
        result
            .issues
            .iter()
            .map(|i| format!("{}:{}", i.file, i.line))
            .collect()
    }

    const ENCODER: &str = "from transformers import AutoModel\n\n\
        def build():\n    return AutoModel.from_pretrained(\"org/encoder\")\n";

    #[test]
    fn a_hydra_entry_reaches_the_modules_its_configs_name() {
        let hydra_main = "import hydra\nimport torch\n\n\
            @hydra.main(config_path=\"conf\", config_name=\"train\")\n\
            def main(cfg):\n    model = hydra.utils.instantiate(cfg.model)\n    torch.save(model, \"m.pt\")\n\n\
            if __name__ == \"__main__\":\n    main()\n";
        let found = scan_project(&[("train.py", hydra_main), ("models/encoder.py", ENCODER)]);
        assert_eq!(found, ["models/encoder.py:4"]);
    }

    #[test]
    fn a_module_no_entry_imports_is_not_reported() {
        let plain_main =
            "import torch\n\nif __name__ == \"__main__\":\n    torch.save({}, \"m.pt\")\n";
        let found = scan_project(&[("train.py", plain_main), ("models/encoder.py", ENCODER)]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn library_model_names_and_dataset_downloads_are_downloads() {
        let model = "import clip\nimport open_clip\nimport prior\nimport torchvision\n\n\
            class Encoder:\n    def __init__(self, arch, root, tag=\"openai\"):\n\
            \x20       self.a = open_clip.create_model_from_pretrained(\"hf-hub:timm/{}\".format(arch))\n\
            \x20       self.b = open_clip.get_tokenizer(f\"hf-hub:timm/{arch}\")\n\
            \x20       self.c = clip.load(\"ViT-B/32\")\n\
            \x20       self.d = open_clip.create_model_and_transforms(arch, pretrained=tag)\n\
            \x20       self.e = torchvision.datasets.MNIST(root, download=True)\n\
            \x20       self.f = prior.load_dataset(\"procthor-10k\")\n\
            \x20       self.g = clip.load(\"/ckpt/clip.pt\")\n\
            \x20       self.h = open_clip.create_model_and_transforms(arch, pretrained=root)\n\
            \x20       self.i = open_clip.create_model(arch, pretrained=\"weights/clip.pt\")\n\
            \x20       self.j = torchvision.datasets.MNIST(root, download=False)\n\
            \x20       self.k = open_clip.create_model(\"local-dir:/models/clip\")\n";
        let main = "import torch\nfrom model.encoder import Encoder\n\n\
            if __name__ == \"__main__\":\n    Encoder(\"ViT-B-16\", \"data\")\n";
        let found = scan_project(&[("main.py", main), ("model/encoder.py", model)]);
        let lines: Vec<&str> = found
            .iter()
            .map(|f| f.rsplit(':').next().unwrap())
            .collect();
        assert_eq!(lines, ["8", "9", "10", "11", "12", "13"], "{found:?}");
    }

    #[test]
    fn a_data_tool_reaching_torch_only_through_helpers_is_preparation() {
        let helpers = "import torch\n\ndef to_device(x):\n    return torch.as_tensor(x)\n";
        let tool = "from datasets import load_dataset\nfrom transformers import AutoTokenizer\n\
            from pkg.helpers import to_device\n\n\
            if __name__ == \"__main__\":\n    load_dataset(\"org/raw-dialogues\")\n";
        let found = scan_project(&[
            ("scripts/data/build_mix.py", tool),
            ("pkg/helpers.py", helpers),
        ]);
        assert!(found.is_empty(), "{found:?}");
        // The same download in a program that imports torch itself runs on the cluster.
        let run = format!("import torch\n{tool}");
        let found = scan_project(&[("scripts/run.py", &run), ("pkg/helpers.py", helpers)]);
        assert_eq!(found, ["scripts/run.py:7"]);
    }

    #[test]
    fn a_download_after_a_local_path_return_is_cache_first() {
        let helper = "import os\nimport torch\nimport huggingface_hub\n\n\
            def ensure(repo):\n    if os.path.exists(repo):\n        return repo\n\
            \x20   return huggingface_hub.snapshot_download(repo)\n\n\
            def fetch(repo):\n    if not repo:\n        return None\n\
            \x20   return huggingface_hub.snapshot_download(repo)\n\n\
            if __name__ == \"__main__\":\n    ensure(\"org/x\")\n";
        let found = scan_project(&[("run.py", helper)]);
        assert_eq!(found, ["run.py:13"]);
    }

    #[test]
    fn a_preparation_module_the_training_imports_is_reached() {
        let main = "import torch\nfrom model.preprocessors import Tokens\n\n\
            if __name__ == \"__main__\":\n    Tokens().get()\n";
        let pre = "from transformers import AutoTokenizer\n\n\
            class Tokens:\n    def get(self):\n        return AutoTokenizer.from_pretrained(\"t5-small\")\n";
        let found = scan_project(&[("main.py", main), ("model/preprocessors.py", pre)]);
        assert_eq!(found, ["model/preprocessors.py:5"]);
        // A preparation script nobody imports runs once, by hand.
        let script = "import torch\nfrom transformers import AutoTokenizer\n\n\
            if __name__ == \"__main__\":\n    AutoTokenizer.from_pretrained(\"t5-small\")\n";
        let found = scan_project(&[("prepare_data.py", script)]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_guard_less_training_script_reaches_its_model() {
        let script = "import torch\nfrom model.net import Net\n\n\
            model = Net()\nopt = torch.optim.Adam(model.parameters())\n\
            for x in range(3):\n    opt.step()\n";
        let net = "import torchvision.models as models\n\n\
            class Net:\n    def __init__(self):\n        self.m = models.resnet50(pretrained=True)\n";
        let found = scan_project(&[("scripts/train.py", script), ("model/net.py", net)]);
        assert_eq!(found, ["model/net.py:5"]);
        // A script that never trains starts no training run.
        let viewer = "import torch\nfrom model.net import Net\n\nmodel = Net()\nprint(model)\n";
        let found = scan_project(&[("scripts/show.py", viewer), ("model/net.py", net)]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_call_asking_for_pretrained_weights_of_a_project_model_is_reported() {
        let zoo = "import torchvision\n\n\
            def backbone(pretrained=False):\n    return torchvision.models.resnet18(pretrained=pretrained)\n";
        let model = "from .zoo import backbone\n\n\
            class Encoder:\n    def __init__(self, pretrained=False):\n        self.net = backbone(pretrained=pretrained)\n";
        let main = "import torch\nfrom pkg.model import Encoder\n\n\
            if __name__ == \"__main__\":\n    enc = Encoder(pretrained=True)\n    torch.save(enc, \"e.pt\")\n";
        let files = [
            ("pkg/__init__.py", ""),
            ("pkg/zoo.py", zoo),
            ("pkg/model.py", model),
            ("train.py", main),
        ];
        assert_eq!(scan_project(&files), ["train.py:5"]);
        // The same call of a model whose code downloads nothing (a local checkpoint).
        let local = "import torch\n\n\
            class Encoder:\n    def __init__(self, pretrained=False):\n        if pretrained:\n            torch.load(\"enc.pt\")\n";
        let files = [
            ("pkg/__init__.py", ""),
            ("pkg/model.py", local),
            ("train.py", main),
        ];
        assert!(scan_project(&files).is_empty());
    }

    #[test]
    fn extensions_are_the_last_components() {
        assert_eq!(extension("https://x.org/a/resnet.pth"), Some("pth"));
        assert_eq!(extension("org/name"), None);
        assert_eq!(extension("v1.5/model"), None);
    }
}
