//! `cargo xtask tidy`: repository consistency checks, also run as a test.
//!
//! - every rule in the registry has its fixture, snapshot and fix template file, and every fix
//!   template belongs to a rule (the registry's own unit tests check each doc's sections and
//!   the `fix_template` path);
//! - `docs/rules.md` is what the registry generates;
//! - `assets/SKILL.md` names every fix template and every template the bundle ships;
//! - `.ci/run` runs exactly the README's test command;
//! - shipped texts cite only files the bundle has, and agree on the patcher's import line and
//!   report call ([`crate::shipped`]).

use anyhow::{Context, Result, bail};
use std::fs;
use std::path::Path;

pub fn run() -> Result<()> {
    let root = crate::project_root();
    let problems = check(&root)?;
    if problems.is_empty() {
        eprintln!("xtask: tidy: ok");
        return Ok(());
    }
    for problem in &problems {
        eprintln!("xtask: tidy: {problem}");
    }
    bail!("{} tidy problem(s)", problems.len())
}

/// Every problem found, as one line each.
pub fn check(root: &Path) -> Result<Vec<String>> {
    let mut problems = check_rules(root)?;
    problems.extend(crate::accuracy::check_rules_doc(root));
    let skill = read(&root.join("assets/SKILL.md"))?;
    for template in crate::dist::fix_templates(root)? {
        let reference = format!("references/fix-templates/{template}");
        if !skill.contains(&reference) {
            problems.push(format!("assets/SKILL.md does not list `{reference}`"));
        }
    }
    for template in crate::dist::TEMPLATES {
        let reference = format!("templates/{template}");
        if !skill.contains(&reference) {
            problems.push(format!("assets/SKILL.md does not list `{reference}`"));
        }
        if !root.join("assets/templates").join(template).is_file() {
            problems.push(format!("assets/templates/{template} is missing"));
        }
    }

    problems.extend(crate::shipped::check(root)?);

    let readme = read(&root.join("README.md"))?;
    let ci = read(&root.join(".ci/run"))?;
    let test_command = "cargo xtask test";
    if !readme.contains(test_command) {
        problems.push(format!(
            "README.md does not show the test command `{test_command}`"
        ));
    }
    let ci_commands: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with('#') && !l.starts_with("set ") && !l.starts_with("cd ")
        })
        .collect();
    if ci_commands != [test_command] {
        problems.push(format!(
            ".ci/run must run exactly `{test_command}` (the README's test command), found {ci_commands:?}"
        ));
    }
    Ok(problems)
}

/// The files a rule needs beside its registry row: fixture, snapshot, fix template.
fn check_rules(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let registry = scan::rules::registry();
    for rule in registry {
        let id = rule.id;
        let fixtures = root.join("crates/scan/tests/fixtures").join(id);
        let has_fixture = fs::read_dir(&fixtures).is_ok_and(|mut d| d.next().is_some());
        if !has_fixture {
            problems.push(format!("{id}: no fixture in {}", fixtures.display()));
        }
        let snapshot = root.join(format!("crates/scan/tests/snapshots/fixtures__{id}.snap"));
        if !snapshot.is_file() {
            problems.push(format!("{id}: no snapshot {}", snapshot.display()));
        }
        if !root
            .join("assets/fix-templates")
            .join(format!("{id}.md"))
            .is_file()
        {
            problems.push(format!("{id}: assets/fix-templates/{id}.md is missing"));
        }
    }
    for template in crate::dist::fix_templates(root)? {
        let id = template.trim_end_matches(".md");
        let measured = issue_model::MEASURED_PATTERNS.iter().any(|(p, _)| *p == id);
        if !registry.iter().any(|r| r.id == id) && !measured {
            problems.push(format!(
                "assets/fix-templates/{template} belongs to no rule"
            ));
        }
    }
    Ok(problems)
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn repository_is_tidy() {
        let problems = super::check(&crate::project_root()).expect("tidy check runs");
        assert!(
            problems.is_empty(),
            "tidy problems:\n{}",
            problems.join("\n")
        );
    }
}
