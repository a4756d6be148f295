//! `conformance/classified.json`: why a test's outcome on the npu differs from the CPU's.
//!
//! Each `differences` entry matches tests of one project by node id (`*` matches any run of
//! characters), optionally by the two outcomes and by a fragment of the npu run's message, and
//! gives a class: `npu-restriction` (a documented NPU behaviour: `cite` names the passage of
//! `assets/references/NPU-FACTS.md`, the row of the emulator README's restriction table or the
//! file of the torch-npu wheel that documents it), `emulator-limitation` (a known difference of
//! the emulated device that cannot be removed, documented in `assets/emulator/README.md`) or
//! `nondeterministic` (the test draws unseeded random numbers; its outcome varies from run to run
//! on the CPU too). `fixed` entries record emulator bugs that made a difference and were fixed,
//! each with its regression test under `tests/python/emulator`; such a difference seen again is a
//! regression, never classified.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

use super::report::{Difference, ProjectReport};
use super::suite::Outcome;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code, reason = "documentation for readers of the file")]
    about: String,
    differences: Vec<Entry>,
    #[serde(default)]
    fixed: Vec<Fixed>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Class {
    NpuRestriction,
    EmulatorLimitation,
    Nondeterministic,
}

/// One classified difference (or family of differences).
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    pub project: String,
    /// The node id (`*`: any run of characters).
    pub test: String,
    /// The CPU run's outcome (`*` as in `test`).
    #[serde(default)]
    pub cpu: Option<String>,
    /// The npu run's outcome.
    #[serde(default)]
    pub npu: Option<String>,
    /// A fragment of the npu run's message (or of the CPU run's, when the npu run has none).
    #[serde(default)]
    pub message: Option<String>,
    pub class: Class,
    #[serde(default)]
    pub cite: Option<String>,
    pub reason: String,
}

/// An emulator bug that made a difference, fixed.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fixed {
    pub project: String,
    pub test: String,
    pub bug: String,
    /// `tests/python/emulator/<file>.py::<test function>`.
    pub regression_test: String,
}

pub(crate) struct Classified {
    pub entries: Vec<Entry>,
    pub fixed: Vec<Fixed>,
}

/// Read and check the file: every citation and regression test must exist.
pub(crate) fn read(path: &Path, root: &Path) -> Result<Classified> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: File = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid classification file", path.display()))?;
    for (i, e) in file.differences.iter().enumerate() {
        let at = format!(
            "{}: differences[{i}] ({} {})",
            path.display(),
            e.project,
            e.test
        );
        if e.reason.trim().is_empty() {
            bail!("{at}: no reason");
        }
        match (e.class, &e.cite) {
            (Class::NpuRestriction, None) => {
                bail!(
                    "{at}: an npu-restriction needs a cite (NPU-FACTS.md \"<words>\", a row of emulator/README.md's restriction table or torch_npu <version> <path>)"
                )
            }
            (Class::NpuRestriction, Some(cite)) => {
                if let Some(problem) = cite_problem(cite, root) {
                    bail!("{at}: {problem}");
                }
            }
            (Class::EmulatorLimitation, cite) => {
                let Some(cite) = cite
                    .as_deref()
                    .filter(|c| c.starts_with("emulator/README.md"))
                else {
                    bail!(
                        "{at}: an emulator-limitation cites the passage of emulator/README.md that documents it"
                    );
                };
                if let Some(problem) = cite_problem(cite, root) {
                    bail!("{at}: {problem}");
                }
            }
            (Class::Nondeterministic, _) => {}
        }
    }
    for (i, f) in file.fixed.iter().enumerate() {
        let at = format!("{}: fixed[{i}] ({} {})", path.display(), f.project, f.test);
        if let Some(problem) = regression_test_problem(&f.regression_test, root) {
            bail!("{at}: {problem}");
        }
    }
    Ok(Classified {
        entries: file.differences,
        fixed: file.fixed,
    })
}

/// Why `cite` does not name a real line (`<file>:<line>`) or passage (`<file> "<words>"`) of the
/// facts file or the emulator's README, or a file of a torch-npu wheel.
fn cite_problem(cite: &str, root: &Path) -> Option<String> {
    let documents = [
        ("NPU-FACTS.md", "assets/references/NPU-FACTS.md"),
        ("emulator/README.md", "assets/emulator/README.md"),
    ];
    if let Some((rest, file)) = documents
        .iter()
        .find_map(|(name, file)| cite.strip_prefix(name).map(|rest| (rest, file)))
    {
        let path = root.join(file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Some(format!("cite {cite:?}: cannot read {}", path.display()));
        };
        if let Some(line) = rest.strip_prefix(':') {
            let lines = text.lines().count();
            return match line
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .map(str::parse::<usize>)
            {
                Some(Ok(n)) if (1..=lines).contains(&n) => None,
                _ => Some(format!(
                    "cite {cite:?}: {} has no such line ({lines} lines)",
                    path.display()
                )),
            };
        }
        if let Some(words) = rest.strip_prefix(" \"").and_then(|r| r.strip_suffix('"')) {
            return if text.contains(words) {
                None
            } else {
                Some(format!(
                    "cite {cite:?}: {} does not say {words:?}",
                    path.display()
                ))
            };
        }
    }
    if let Some(rest) = cite.strip_prefix("torch_npu ") {
        // `torch_npu <version> <path inside the wheel>[:line]`
        let mut parts = rest.splitn(2, ' ');
        let (Some(version), Some(file)) = (parts.next(), parts.next()) else {
            return Some(format!(
                "cite {cite:?}: expected `torch_npu <version> <path>`"
            ));
        };
        let file = file.split(':').next().unwrap_or(file);
        let path = crate::torch_npu::cache_dir().join(version).join(file);
        return if path.is_file() {
            None
        } else {
            Some(format!(
                "cite {cite:?}: {} does not exist (run `cargo xtask torch-npu`)",
                path.display()
            ))
        };
    }
    Some(format!(
        "cite {cite:?}: expected `NPU-FACTS.md:<line>`, `emulator/README.md \"<words>\"` or \
         `torch_npu <version> <path>`"
    ))
}

fn regression_test_problem(test: &str, root: &Path) -> Option<String> {
    let Some((file, function)) = test.split_once("::") else {
        return Some(format!(
            "regression_test {test:?}: expected <file>::<test function>"
        ));
    };
    if !file.starts_with("tests/python/emulator/") {
        return Some(format!(
            "regression_test {test:?}: must be under tests/python/emulator/"
        ));
    }
    let source = std::fs::read_to_string(root.join(file)).unwrap_or_default();
    if source.contains(&format!("def {function}(")) {
        None
    } else {
        Some(format!(
            "regression_test {test:?}: no `def {function}(` in {file}"
        ))
    }
}

/// `*` matches any run of characters; everything else is literal.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn entry_matches(e: &Entry, project: &str, test: &str, cpu: &Outcome, npu: &Outcome) -> bool {
    if e.project != project || !matches(&e.test, test) {
        return false;
    }
    if e.cpu.as_deref().is_some_and(|o| !matches(o, &cpu.outcome)) {
        return false;
    }
    if e.npu.as_deref().is_some_and(|o| !matches(o, &npu.outcome)) {
        return false;
    }
    if let Some(fragment) = &e.message {
        let message = npu.message.as_deref().or(cpu.message.as_deref());
        if !message.is_some_and(|m| m.contains(fragment.as_str())) {
            return false;
        }
    }
    true
}

/// Compare the two runs of one project and classify each difference.
pub(crate) fn judge(m: super::Measured, classified: &Classified) -> ProjectReport {
    let absent = Outcome {
        outcome: "absent".to_owned(),
        message: None,
    };
    let ids: BTreeSet<&String> = m.cpu.tests.keys().chain(m.npu.tests.keys()).collect();
    let mut differences = Vec::new();
    let mut same = 0;
    let mut npu_only = 0;
    for id in &ids {
        let cpu = m.cpu.tests.get(*id).unwrap_or(&absent);
        let npu = m.npu.tests.get(*id).unwrap_or(&absent);
        if cpu.outcome == npu.outcome {
            same += 1;
            continue;
        }
        // Skipped for want of an accelerator on the CPU, run and passed on the npu: no
        // difference in behaviour, one more test covered.
        if cpu.outcome == "skipped" && npu.outcome == "passed" {
            same += 1;
            npu_only += 1;
            continue;
        }
        let regressed = classified
            .fixed
            .iter()
            .find(|f| f.project == m.project.name && matches(&f.test, id));
        let classification = if regressed.is_some() {
            None
        } else {
            classified
                .entries
                .iter()
                .find(|e| entry_matches(e, &m.project.name, id, cpu, npu))
                .map(|e| super::report::Classification {
                    class: e.class,
                    cite: e.cite.clone(),
                    reason: e.reason.clone(),
                })
        };
        differences.push(Difference {
            test: (*id).clone(),
            cpu: cpu.clone(),
            npu: npu.clone(),
            classification,
            regressed: regressed.map(|f| format!("{} ({})", f.bug, f.regression_test)),
        });
    }
    ProjectReport {
        name: m.project.name,
        version: m.project.version,
        what: m.project.what,
        torch: m.torch,
        transfer_to_npu: m.transfer_to_npu,
        tests: ids.len(),
        same,
        npu_only,
        different: differences.len(),
        unclassified: differences
            .iter()
            .filter(|d| d.classification.is_none())
            .count(),
        secs_cpu: m.secs[0].round(),
        secs_npu: m.secs[1].round(),
        incomplete: m.incomplete,
        differences,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_patterns_match_node_ids_with_brackets_literally() {
        assert!(matches("t.py::a[*]", "t.py::a[True]"));
        assert!(matches("t.py::*float64*", "t.py::test_float64_bmm"));
        assert!(matches("t.py::x", "t.py::x"));
        assert!(!matches("t.py::x", "t.py::xy"));
        assert!(!matches("t.py::a[*]", "t.py::b[True]"));
        assert!(matches("*", ""));
        assert!(!matches("a*a", "a"));
    }

    #[test]
    fn the_committed_classification_file_is_valid() {
        let root = crate::project_root();
        read(&root.join("conformance/classified.json"), &root).expect("classified.json checks");
    }

    #[test]
    fn a_restriction_needs_a_citation_that_exists() {
        let root = crate::project_root();
        assert!(cite_problem("NPU-FACTS.md:40", &root).is_none());
        assert!(cite_problem("NPU-FACTS.md:999999", &root).is_some());
        assert!(cite_problem("a blog post", &root).is_some());
        assert!(cite_problem("emulator/README.md \"type(t) is torch.Tensor\"", &root).is_none());
        assert!(cite_problem("emulator/README.md \"no such passage here\"", &root).is_some());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"about": "", "differences": [{"project": "p", "test": "t", "class": "npu-restriction", "reason": "r"}]}"#,
        )
        .unwrap();
        let err = format!("{:#}", read(&path, &root).err().unwrap());
        assert!(
            err.contains("c.json") && err.contains("needs a cite"),
            "{err}"
        );
    }

    fn measured(cpu: &[(&str, &str)], npu: &[(&str, &str, &str)]) -> super::super::Measured {
        let mut m = super::super::Measured {
            project: super::super::Project {
                name: "p".into(),
                version: "1".into(),
                what: String::new(),
                filename: String::new(),
                url: String::new(),
                sha256: String::new(),
                remove: Vec::new(),
                create: Vec::new(),
                pythonpath: Vec::new(),
                deps: Vec::new(),
                env: std::collections::BTreeMap::new(),
                default_device: true,
                tests: Vec::new(),
                subset: Vec::new(),
                test_timeout_s: 1,
                run_timeout_s: 1,
            },
            torch: "2.14.0".into(),
            transfer_to_npu: None,
            cpu: super::super::suite::Outcomes::default(),
            npu: super::super::suite::Outcomes::default(),
            secs: [0.0; 2],
            incomplete: Vec::new(),
        };
        for (id, o) in cpu {
            m.cpu.tests.insert(
                (*id).into(),
                Outcome {
                    outcome: (*o).into(),
                    message: None,
                },
            );
        }
        for (id, o, msg) in npu {
            m.npu.tests.insert(
                (*id).into(),
                Outcome {
                    outcome: (*o).into(),
                    message: Some((*msg).into()),
                },
            );
        }
        m
    }

    #[test]
    fn differences_are_classified_by_message_and_a_fixed_bug_seen_again_is_not() {
        let classified = Classified {
            entries: vec![Entry {
                project: "p".into(),
                test: "t.py::*".into(),
                cpu: Some("passed".into()),
                npu: Some("failed".into()),
                message: Some("Double".into()),
                class: Class::NpuRestriction,
                cite: Some("NPU-FACTS.md:40".into()),
                reason: "float64".into(),
            }],
            fixed: vec![Fixed {
                project: "p".into(),
                test: "t.py::fixed".into(),
                bug: "b".into(),
                regression_test: "tests/python/emulator/x.py::test_b".into(),
            }],
        };
        let m = measured(
            &[
                ("t.py::a", "passed"),
                ("t.py::b", "passed"),
                ("t.py::c", "passed"),
                ("t.py::fixed", "passed"),
                ("t.py::gpu", "skipped"),
            ],
            &[
                ("t.py::a", "passed", ""),
                ("t.py::b", "failed", "Unsupport data type: Double"),
                ("t.py::c", "failed", "something else"),
                ("t.py::fixed", "failed", "Double"),
                ("t.py::gpu", "passed", ""),
            ],
        );
        let r = judge(m, &classified);
        assert_eq!((r.tests, r.same, r.different, r.unclassified), (5, 2, 3, 2));
        assert_eq!(r.npu_only, 1);
        let by_id = |id: &str| r.differences.iter().find(|d| d.test == id).unwrap();
        assert!(by_id("t.py::b").classification.is_some());
        assert!(by_id("t.py::c").classification.is_none());
        assert!(by_id("t.py::fixed").regressed.is_some());
    }

    #[test]
    fn a_test_missing_from_one_run_is_a_difference() {
        let classified = Classified {
            entries: Vec::new(),
            fixed: Vec::new(),
        };
        let r = judge(measured(&[("t.py::a", "passed")], &[]), &classified);
        assert_eq!(r.differences[0].npu.outcome, "absent");
        assert_eq!(r.unclassified, 1);
    }
}
