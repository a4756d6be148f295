//! `cargo xtask tidy`: repository consistency checks, also run as a test.
//!
//! - `assets/SKILL.md` names every fix template and every template the bundle ships;
//! - `.ci/run` runs exactly the README's test command.

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
    let mut problems = Vec::new();
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
