//! Tidy checks on the text the tools ship: every file a shipped text cites is in the bundle, and
//! every text gives the same patcher import line and the same report call.
//!
//! Shipped texts are the bundle's text files ([`crate::dist::layout`]); the import and report
//! checks also read what the binaries print or embed (`crates/*/src`, the rule docs, the verify
//! harness) and the docs, so a hint and a template cannot drift apart.

use anyhow::{Context, Result};
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::LazyLock;

/// Top folders of the bundle: a citation starting with one must name a file (or folder) in it.
const BUNDLE_DIRS: [&str; 5] = ["references/", "templates/", "scripts/", "bin/", "emulator/"];
/// Folders of the source checkout, which the bundle does not have.
const CHECKOUT_DIRS: [&str; 6] = ["assets/", "crates/", "docs/", "tests/", "xtask/", "corpus/"];

static IMPORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)(?:from\s+((?:[A-Za-z_]\w*\.)*runtime_patches)\s+import\s+build_(?:vla|npu)_patcher|^\s*import\s+((?:[A-Za-z_]\w*\.)*runtime_patches)\b)")
        .unwrap_or_else(|e| unreachable!("a constant pattern: {e}"))
});
static REPORT_CALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b\w*patcher\w*\.((?:print_)?report)\(\)")
        .unwrap_or_else(|e| unreachable!("a constant pattern: {e}"))
});

/// A text and the name problems cite it by.
pub struct Text {
    pub name: String,
    pub body: String,
}

/// Every problem with the shipped texts of the checkout at `root`, one line each.
pub fn check(root: &Path) -> Result<Vec<String>> {
    let layout = crate::dist::layout(root)?;
    let bundle: Vec<String> = layout.iter().map(|e| e.path.clone()).collect();
    let mut shipped = Vec::new();
    for entry in &layout {
        if let crate::dist::From::Asset(from) = &entry.from
            && is_text(&entry.path)
        {
            shipped.push(Text {
                name: entry.path.clone(),
                body: read(from)?,
            });
        }
    }
    let mut problems = check_citations(&shipped, &bundle);
    let mut all = shipped;
    for dir in ["crates", "assets/harness", "docs"] {
        collect(root, &root.join(dir), &mut all)?;
    }
    problems.extend(check_consistency(&all));
    Ok(problems)
}

fn is_text(path: &str) -> bool {
    ["md", "sh", "py", "txt"]
        .iter()
        .any(|ext| has_ext(path, ext))
}

fn has_ext(path: &str, ext: &str) -> bool {
    Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<Text>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        // The scanner's fixtures and tests spell every form on purpose; they are not shipped.
        if ["target", "__pycache__", "tests"].contains(&name.as_str()) || name.starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else if is_text(&name) || has_ext(&name, "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(Text {
                name: rel.to_string_lossy().replace('\\', "/"),
                body: read(&path)?,
            });
        }
    }
    Ok(())
}

/// Files cited by `texts` that `bundle` (its file paths) does not contain.
pub fn check_citations(texts: &[Text], bundle: &[String]) -> Vec<String> {
    let names: BTreeSet<&str> = bundle
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let is_in_bundle = |cited: &str| {
        let cited = cited.trim_end_matches('/');
        bundle
            .iter()
            .any(|p| p == cited || p.starts_with(&format!("{cited}/")))
    };
    let mut problems = BTreeSet::new();
    for text in texts {
        let body = text.body.replace("<skill dir>/", "");
        for (n, line) in body.lines().enumerate() {
            for token in line.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c))) {
                let token = token.trim_end_matches(['.', ',']);
                // `<pattern_id>.md` and other placeholders split into a bare suffix.
                if token.starts_with('.') {
                    continue;
                }
                let problem = if CHECKOUT_DIRS.iter().any(|d| token.starts_with(d)) {
                    Some("a path of the source checkout, which the bundle does not contain")
                } else if BUNDLE_DIRS.iter().any(|d| token.starts_with(d)) && !is_in_bundle(token) {
                    Some("not in the bundle")
                } else if has_ext(token, "md") && !token.contains('/') && !names.contains(token) {
                    Some("no file of that name is in the bundle")
                } else {
                    None
                };
                if let Some(why) = problem {
                    problems.insert(format!("{}:{}: cites `{token}`: {why}", text.name, n + 1));
                }
            }
        }
    }
    problems.into_iter().collect()
}

/// Texts that disagree on the patcher's import line or on the call that prints its report.
pub fn check_consistency(texts: &[Text]) -> Vec<String> {
    let mut imports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut reports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for text in texts {
        for m in IMPORT.captures_iter(&text.body) {
            if let Some(module) = m.get(1).or_else(|| m.get(2)) {
                imports
                    .entry(module.as_str().to_owned())
                    .or_default()
                    .push(text.name.clone());
            }
        }
        // A report call a reader is told to type: prose and templates, not the patcher's code.
        if !has_ext(&text.name, "py") && !has_ext(&text.name, "rs") {
            for m in REPORT_CALL.captures_iter(&text.body) {
                reports
                    .entry(m[1].to_owned())
                    .or_default()
                    .push(text.name.clone());
            }
        }
    }
    let mut problems = Vec::new();
    for (what, found) in [
        ("patcher import module", &imports),
        ("patcher report call", &reports),
    ] {
        if found.len() > 1 {
            let listed: Vec<String> = found
                .iter()
                .map(|(spelling, files)| {
                    let mut files = files.clone();
                    files.sort();
                    files.dedup();
                    format!("`{spelling}` in {}", files.join(", "))
                })
                .collect();
            problems.push(format!(
                "shipped texts give {} spellings of the {what}: {}",
                found.len(),
                listed.join("; ")
            ));
        }
    }
    problems
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, body: &str) -> Text {
        Text {
            name: name.to_owned(),
            body: body.to_owned(),
        }
    }

    fn bundle() -> Vec<String> {
        [
            "SKILL.md",
            "references/fix-templates/P_RND.md",
            "references/NPU-FACTS.md",
            "templates/train.sh",
            "emulator/README.md",
            "bin/npu-assets",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    #[test]
    fn citations_of_shipped_files_pass() {
        let ok = text(
            "SKILL.md",
            "Read `<skill dir>/references/fix-templates/P_RND.md` and NPU-FACTS.md, \"dtypes\".\n\
             Run `<skill dir>/bin/npu-assets init .`; see emulator/README.md, the `emulator/` folder,\n\
             `templates/train.sh`, and migrate_to_cloudrobo/emulator/ in the project.\n",
        );
        assert_eq!(check_citations(&[ok], &bundle()), Vec::<String>::new());
    }

    #[test]
    fn a_broken_citation_is_reported_with_its_file_and_line() {
        let broken = text(
            "references/fix-templates/P_RND.md",
            "fine line\nsee references/fix-templates/P_NOPE.md (SKILL-seed.md)\nrun assets/emulator/bench.py\n",
        );
        let problems = check_citations(&[broken], &bundle());
        assert_eq!(
            problems,
            [
                "references/fix-templates/P_RND.md:2: cites `SKILL-seed.md`: no file of that name is in the bundle",
                "references/fix-templates/P_RND.md:2: cites `references/fix-templates/P_NOPE.md`: not in the bundle",
                "references/fix-templates/P_RND.md:3: cites `assets/emulator/bench.py`: a path of the source checkout, which the bundle does not contain",
            ]
        );
    }

    #[test]
    fn two_import_lines_or_two_report_calls_are_reported() {
        let texts = [
            text(
                "P_ENT.md",
                "from migrate_to_cloudrobo.runtime_patches import build_vla_patcher\npatcher.report()\n",
            ),
            text(
                "statics.rs",
                "\"`from runtime_patches import build_vla_patcher` then\"",
            ),
            text("SKILL.md", "`_NPU_PATCHER.print_report()` shows"),
        ];
        let problems = check_consistency(&texts);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("`migrate_to_cloudrobo.runtime_patches` in P_ENT.md")
                && problems[0].contains("`runtime_patches` in statics.rs"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("`print_report` in SKILL.md")
                && problems[1].contains("`report` in P_ENT.md"),
            "{problems:?}"
        );
        let agreeing = [
            text("a.md", "from runtime_patches import build_vla_patcher\n"),
            text("b.py", "    import runtime_patches\npatcher.report()\n"),
            text("c.md", "patcher.print_report()"),
        ];
        assert_eq!(check_consistency(&agreeing), Vec::<String>::new());
    }
}
