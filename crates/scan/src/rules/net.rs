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
        if skipped_file(cx.path()) || has_keyword(call, "local_files_only") {
            return;
        }
        let Some(what) = download(cx, call) else {
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
            .filter(|e| e.uses_torch && !skipped_file(&e.file))
            .collect();
        let mut reached: BTreeSet<&str> = entries
            .iter()
            .flat_map(|e| project.reachable(&e.file))
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
        for file in reached {
            for site in cx.notes(file, DOWNLOAD) {
                let message = format!(
                    "{} from the network at run time, and an offline NPU cluster cannot reach \
                     it, so the run fails here first; fetch it once into a local cache or \
                     directory and load it from there (HF_HUB_OFFLINE=1, TORCH_HOME, a local \
                     path; see P_NET.md)",
                    site.note
                );
                cx.report(file, site, message);
            }
        }
    }
}

/// What the call downloads, if it is a download.
fn download(cx: &Checker<'_>, call: &ast::ExprCall) -> Option<String> {
    let qualified = cx.semantic().resolve(&call.func).unwrap_or_default();
    if WEIGHT_ZOOS.iter().any(|zoo| qualified.starts_with(zoo)) {
        return pretrained_weights(cx, call)
            .then(|| format!("`{qualified}` downloads its weights"));
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
    // A torchvision weights enum member fetching its file: `weights.get_state_dict(progress=…)`.
    if let Expr::Attribute(attr) = call.func.as_ref()
        && attr.attr.as_str() == "get_state_dict"
        && (has_keyword(call, "progress") || has_keyword(call, "check_hash"))
    {
        return Some(
            "`get_state_dict` of a torchvision weights enum downloads its weights".to_owned(),
        );
    }
    if FETCHERS.contains(&qualified.as_str()) {
        if qualified == "torch.hub.load"
            && keyword(call, "source").and_then(string).as_deref() == Some("local")
        {
            return None;
        }
        return Some(format!("`{qualified}` downloads a file"));
    }
    if URL_READERS.contains(&qualified.as_str()) && fetches_a_file(cx, call) {
        return Some(format!("`{qualified}` downloads a file"));
    }
    None
}

/// `pretrained=True` (also through a parameter defaulting to `True`, or as the first positional
/// argument), or `weights=` an enum member or a weights name.
fn pretrained_weights(cx: &Checker<'_>, call: &ast::ExprCall) -> bool {
    let is_true =
        |e: &Expr| matches!(e, Expr::Constant(c) if matches!(c.value, ast::Constant::Bool(true)));
    if let Some(value) = keyword(call, "pretrained") {
        return is_true(value) || param_default(cx, value).is_some_and(is_true);
    }
    if let Some(value) = keyword(call, "weights") {
        let value = param_default(cx, value).unwrap_or(value);
        return match value {
            Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if !s.is_empty()),
            Expr::Attribute(_) => crate::semantic::dotted(value).contains("_Weights"),
            _ => false,
        };
    }
    call.args.first().is_some_and(is_true)
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
    let well_formed = parts.iter().all(|p| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    });
    match parts.len() {
        2 => well_formed,
        // A canonical model name has a version digit or a dash (`gpt2`, `t5-small`); a bare
        // word is more likely a local directory.
        1 => well_formed && id.contains(|c: char| c == '-' || c.is_ascii_digit()),
        _ => false,
    }
}

/// The extension of a path or URL's last component.
fn extension(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    let (_, ext) = last.rsplit_once('.')?;
    Some(ext).filter(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Under an `if` (or a conditional expression) whose test checks a local path or an offline
/// flag: the download runs only when the local copy is missing, or only when asked for.
fn guarded(cx: &Checker<'_>) -> bool {
    let test_guards = |test: &Expr| {
        let text = cx.slice(test.range()).to_ascii_lowercase();
        GUARD_WORDS.iter().any(|w| text.contains(w))
    };
    let in_if = cx.semantic().stmts().iter().any(|s| match s {
        Stmt::If(stmt) => test_guards(&stmt.test),
        _ => false,
    });
    in_if
        || cx.semantic().exprs().iter().any(|e| match e {
            Expr::IfExp(ifexp) => test_guards(&ifexp.test),
            _ => false,
        })
}

/// A string literal, or a parameter of the enclosing function whose default is one.
fn literal_or_default(cx: &Checker<'_>, expr: &Expr) -> Option<String> {
    string(expr).or_else(|| param_default(cx, expr).and_then(string))
}

/// The default of the enclosing function's parameter that `expr` names.
fn param_default<'a>(cx: &Checker<'a>, expr: &Expr) -> Option<&'a Expr> {
    let Expr::Name(name) = expr else {
        return None;
    };
    let function = cx.semantic().stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(f) => Some(&f.args),
        Stmt::AsyncFunctionDef(f) => Some(&f.args),
        _ => None,
    })?;
    function
        .posonlyargs
        .iter()
        .chain(&function.args)
        .chain(&function.kwonlyargs)
        .find(|a| a.def.arg.as_str() == name.id.as_str())
        .and_then(|a| a.default.as_deref())
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

/// Tests, docs, packaging, and the download or preparation scripts a user runs once.
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
        || ["download", "prepare", "preprocess"]
            .iter()
            .any(|w| name.contains(w) || dirs.iter().any(|d| d.contains(w)))
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
            assert!(skipped_file(path), "{path}");
        }
        for path in ["train.py", "models/backbone.py", "scripts/train.py"] {
            assert!(!skipped_file(path), "{path}");
        }
    }

    /// The `P_NET` findings of a project written from `(path, text)` pairs, as `file:line`.
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
    fn extensions_are_the_last_components() {
        assert_eq!(extension("https://x.org/a/resnet.pth"), Some("pth"));
        assert_eq!(extension("org/name"), None);
        assert_eq!(extension("v1.5/model"), None);
    }
}
