//! Test and example files: code beside the training path that a training run does not execute.
//! `--fix` leaves them alone unless asked (`--fix-tests-examples`), and a finding there never
//! blocks the run.
//!
//! A path (relative to the scanned root, `/`-separated) is a test file when a directory on it is
//! `test`, `tests` or `testing`, or its name is `test_*.py`, `*_test.py` or `conftest.py`; it is
//! an example when a directory on it is `example`, `examples`, `tutorial`, `tutorials`, `doc` or
//! `docs`. Names are compared without regard to case.

/// What kind of support file a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Support {
    Test,
    Example,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Test => "test",
            Support::Example => "example",
        }
    }
}

/// The kind of support file `rel` is, or `None` for the project's own code.
pub fn kind(rel: &str) -> Option<Support> {
    let lower = rel.to_ascii_lowercase();
    let mut parts: Vec<&str> = lower.split('/').filter(|p| !p.is_empty()).collect();
    let name = parts.pop().unwrap_or_default();
    let stem = name.strip_suffix(".py").unwrap_or(name);
    if parts
        .iter()
        .any(|d| matches!(*d, "test" | "tests" | "testing"))
        || (std::path::Path::new(name)
            .extension()
            .is_some_and(|e| e == "py")
            && (stem.starts_with("test_") || stem.ends_with("_test") || stem == "conftest"))
    {
        return Some(Support::Test);
    }
    parts
        .iter()
        .any(|d| {
            matches!(
                *d,
                "example" | "examples" | "tutorial" | "tutorials" | "doc" | "docs"
            )
        })
        .then_some(Support::Example)
}

/// The launch command `launch` (`python examples/train_act.py …`, `python -m examples.train`)
/// runs the file `rel`: a support file that a port's launch runs is on its training path.
pub fn launched_by(launch: &str, rel: &str) -> bool {
    let words: Vec<&str> = launch
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
        .collect();
    let module = rel
        .strip_suffix("/__main__.py")
        .or_else(|| rel.strip_suffix(".py"))
        .map(|m| m.replace('/', "."));
    words.iter().enumerate().any(|(n, w)| {
        let w = w.trim_start_matches("./");
        w == rel
            || w.strip_suffix(rel).is_some_and(|head| head.ends_with('/'))
            || (n > 0 && words[n - 1] == "-m" && module.as_deref() == Some(w))
    })
}

#[cfg(test)]
mod tests {
    use super::{Support, kind, launched_by};

    #[test]
    fn a_launch_command_names_the_file_it_runs() {
        assert!(launched_by(
            "python examples/train_act.py --steps 3",
            "examples/train_act.py"
        ));
        assert!(launched_by(
            "torchrun --nproc_per_node 2 ./examples/t.py",
            "examples/t.py"
        ));
        assert!(launched_by("python proj/examples/t.py", "examples/t.py"));
        assert!(launched_by("python -m examples.train", "examples/train.py"));
        assert!(launched_by(
            "python -m examples.train",
            "examples/train/__main__.py"
        ));
        assert!(!launched_by("python train.py", "examples/train.py"));
        assert!(!launched_by("python myexamples/t.py", "examples/t.py"));
    }

    #[test]
    fn tests_and_examples_are_told_from_project_code() {
        for (path, want) in [
            ("tests/test_act.py", Some(Support::Test)),
            ("tests/helpers.py", Some(Support::Test)),
            ("pkg/testing/utils.py", Some(Support::Test)),
            ("test_train.py", Some(Support::Test)),
            ("pkg/model_test.py", Some(Support::Test)),
            ("conftest.py", Some(Support::Test)),
            ("Tests/data.py", Some(Support::Test)),
            ("examples/run.py", Some(Support::Example)),
            ("docs/source/conf.py", Some(Support::Example)),
            ("pkg/tutorials/intro.py", Some(Support::Example)),
            ("train.py", None),
            ("pkg/testbed.py", None),
            ("pkg/latest_model.py", None),
            ("pkg/policies/act.py", None),
            ("pkg/contest.py", None),
            ("examples.py", None),
        ] {
            assert_eq!(kind(path), want, "{path}");
        }
    }
}
