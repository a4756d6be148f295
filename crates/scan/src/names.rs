//! Judgements made from a name alone: the module of a path, and what a function or class name
//! says about where its code runs. The text-level readers ([`crate::classes`],
//! [`crate::callgraph`]) and the semantic model share them; this module depends on nothing else
//! of the crate, so neither of those depends on the other through it.

/// `pkg/models/policy.py` → (`pkg.models.policy`, false); `pkg/__init__.py` → (`pkg`, true).
pub fn module_name(path: &str) -> (String, bool) {
    let stem = path.strip_suffix(".py").unwrap_or(path);
    let mut parts: Vec<&str> = stem.split('/').filter(|p| !p.is_empty()).collect();
    let is_package = parts.last() == Some(&"__init__");
    if is_package {
        parts.pop();
    }
    (parts.join("."), is_package)
}

/// Whether a lower-cased function name names a training step (`train_step`, `fit`,
/// `val_epoch`, `..._step`).
pub fn is_training_step_name(lower: &str) -> bool {
    const EXACT: &[&str] = &["train", "fit", "step", "train_step", "training_step"];
    if EXACT.contains(&lower) {
        return true;
    }
    let words: Vec<&str> = lower.split('_').filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    (has("train") || has("training") || has("validation") || has("val") || has("eval"))
        && (has("step") || has("epoch") || has("loop") || has("batch") || has("iter"))
        || lower.ends_with("_step")
}

/// A constructor, weight initialiser, builder or host-side batch preparation by its name: code
/// that runs once, or before the batch reaches the device.
pub fn is_setup_name(name: &str) -> bool {
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
            "_init",
            "init_",
            "initialize",
            "_build",
            "build_",
            "_setup",
            "setup",
            "_make",
            "_create",
            "create_",
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

/// A test file: under a `test`/`tests`/`testing` directory, `test_*.py`, `*_test.py`,
/// `conftest.py`.
pub fn is_test_path(path: &str) -> bool {
    let mut parts: Vec<&str> = path.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.strip_suffix(".py").unwrap_or(file);
    parts
        .iter()
        .any(|d| matches!(*d, "test" | "tests" | "testing"))
        || stem.starts_with("test_")
        || stem.ends_with("_test")
        || stem == "conftest"
        || stem == "tests"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert_eq!(
            module_name("pkg/models/policy.py"),
            ("pkg.models.policy".into(), false)
        );
        assert_eq!(module_name("pkg/__init__.py"), ("pkg".into(), true));
        assert_eq!(module_name("train.py"), ("train".into(), false));
    }

    #[test]
    fn training_step_names() {
        for yes in [
            "training_step",
            "train_one_epoch",
            "train_loop",
            "val_step",
            "train",
        ] {
            assert!(is_training_step_name(yes), "{yes}");
        }
        for no in ["trainer_config", "build_dataset", "get_train_transforms"] {
            assert!(!is_training_step_name(no), "{no}");
        }
    }
}
