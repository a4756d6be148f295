//! `cargo xtask support-table [--check]`: the torch support tables of `docs/runtime-patches.md`
//! and `assets/emulator/README.md`, rendered from the matrix results that `cargo xtask test` wrote
//! (`tests/torch-matrix/results/torch-<version>.json`), between the markers
//! `<!-- torch-matrix:begin -->` and `<!-- torch-matrix:end -->`. `--check` fails when a file is
//! not what the results render (run by `cargo xtask test`). The tables show test outcomes, so a
//! check is only meaningful against the results of a run whose matrix tests all passed: when the
//! results record a failure (a failed test, self-test or demo verify, each already a failed step
//! of its own), `--check` reports that it did not compare instead of failing a second time.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {
    /// Fail if a table is not what the results render, instead of writing it.
    #[arg(long)]
    pub check: bool,
}

const BEGIN: &str = "<!-- torch-matrix:begin -->";
const END: &str = "<!-- torch-matrix:end -->";
const PATCHES_DOC: &str = "docs/runtime-patches.md";
const EMULATOR_DOC: &str = "assets/emulator/README.md";

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    let results = load(&root)?;
    if args.check {
        let failures = failures(&results);
        if !failures.is_empty() {
            eprintln!(
                "xtask: support-table: not compared: the results in {} record failures ({}), \
                 each reported by its own step; the tables are checked against a green run",
                crate::matrix::RESULTS_DIR,
                failures.join("; ")
            );
            return Ok(());
        }
    }
    let mut stale = Vec::new();
    for (doc, body) in [
        (PATCHES_DOC, patches_table(&results)),
        (EMULATOR_DOC, emulator_table(&results)),
    ] {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {doc}"))?;
        let updated =
            splice(&text, &body).with_context(|| format!("{doc}: cannot place the table"))?;
        if updated == text {
            continue;
        }
        if args.check {
            stale.push(doc);
        } else {
            std::fs::write(&path, updated).with_context(|| format!("cannot write {doc}"))?;
            eprintln!("xtask: support-table: wrote {doc}");
        }
    }
    if !stale.is_empty() {
        bail!(
            "{} stale against {}: run `cargo xtask support-table`",
            stale.join(" and "),
            crate::matrix::RESULTS_DIR
        );
    }
    Ok(())
}

/// The results files, oldest torch first.
fn load(root: &Path) -> Result<Vec<Value>> {
    let dir = root.join(crate::matrix::RESULTS_DIR);
    let mut found = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            let value: Value = serde_json::from_slice(&text).with_context(|| {
                format!("{} is not JSON: rerun `cargo xtask test`", path.display())
            })?;
            found.push(value);
        }
    }
    found.sort_by_key(|v| version_key(v["torch"].as_str().unwrap_or("")));
    Ok(found)
}

/// What the results record as failing, per torch version: failed tests of any suite, failing
/// self-tests, a demo verify that did not pass. Empty for the results of a green run.
fn failures(results: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for r in results {
        let torch = str_of(&r["torch"]);
        let mut what = Vec::new();
        if let Some(suites) = r["suites"].as_object() {
            for (name, suite) in suites {
                let failed = suite["failed"].as_array().map_or(0, Vec::len);
                if failed > 0 {
                    what.push(format!("{failed} failed in {name}"));
                }
            }
        }
        if let Some(tests) = r["self_test"].as_object() {
            let failing = tests.values().filter(|v| *v != "passes").count();
            if failing > 0 {
                what.push(format!("{failing} self-tests failing"));
            }
        }
        let demo = &r["demo_verify"];
        if demo.is_string() && demo != "passes" {
            what.push("demo verify did not pass".to_owned());
        }
        if !what.is_empty() {
            out.push(format!("torch {torch}: {}", what.join(", ")));
        }
    }
    out
}

fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

fn splice(text: &str, body: &str) -> Result<String> {
    let (Some(start), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        bail!("the markers {BEGIN} and {END} are missing");
    };
    if end < start {
        bail!("{END} comes before {BEGIN}");
    }
    Ok(format!("{}{BEGIN}\n{body}{}", &text[..start], &text[end..]))
}

fn suite_cell(result: &Value, names: &[&str]) -> String {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut ran = false;
    for name in names {
        let suite = &result["suites"][*name];
        if suite.is_null() {
            continue;
        }
        ran = true;
        passed += suite["passed"].as_u64().unwrap_or(0);
        failed += suite["failed"].as_array().map_or(0, Vec::len);
        skipped += suite["skipped"].as_array().map_or(0, Vec::len);
    }
    if ran {
        format!("{passed} passed, {failed} failed, {skipped} skipped")
    } else {
        "not run".to_owned()
    }
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

fn patches_table(results: &[Value]) -> String {
    let mut out = String::from(
        "| torch | numpy | patches applied | skipped (reason) | originals restored after `remove()` | \
         self-tests on the emulated npu | runtime-patch suite | demo `npu-verify --runtime --pipeline --emulate-npu` |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let patches = r["patches"].as_object();
        let total = patches.map_or(0, serde_json::Map::len);
        let applied = patches.map_or(0, |m| {
            m.values().filter(|p| p["state"] == "applied").count()
        });
        let skipped: Vec<String> = patches
            .map(|m| {
                m.iter()
                    .filter(|(_, p)| p["state"] != "applied")
                    .map(|(name, p)| {
                        format!("{name} ({}: {})", str_of(&p["state"]), str_of(&p["reason"]))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let restored = match r["not_restored"].as_array() {
            Some(list) if list.is_empty() => "yes".to_owned(),
            Some(list) => format!(
                "no: {}",
                list.iter().map(str_of).collect::<Vec<_>>().join(", ")
            ),
            None => "?".to_owned(),
        };
        let tests = r["self_test"].as_object();
        let passing = tests.map_or(0, |m| m.values().filter(|v| *v == "passes").count());
        let self_tests = match tests {
            Some(m) if passing == m.len() => format!("{passing} of {} pass", m.len()),
            Some(m) => {
                let failing: Vec<&str> = m
                    .iter()
                    .filter(|(_, v)| *v != "passes")
                    .map(|(k, _)| k.as_str())
                    .collect();
                format!(
                    "{passing} of {} pass; failing: {}",
                    m.len(),
                    failing.join(", ")
                )
            }
            None => "not run (no emulator)".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {applied} of {total} | {} | {restored} | {self_tests} | {} | {} |",
            str_of(&r["torch"]),
            str_of(&r["numpy"]),
            if skipped.is_empty() {
                "none".to_owned()
            } else {
                skipped.join("; ")
            },
            suite_cell(r, &["patches"]),
            str_of(&r["demo_verify"]),
        );
    }
    out.push_str(&skip_list(results, &["patches"]));
    out
}

fn emulator_table(results: &[Value]) -> String {
    let mut out = String::from(
        "| torch | `npu` device registered by | restriction groups that hold | emulator and harness suites |\n\
         |---|---|---|---|\n",
    );
    for r in results {
        let emulator = &r["emulator"];
        let (backend, groups) = if emulator["installed"] == true {
            let restrictions = emulator["restrictions"].as_object();
            let holding = restrictions.map_or(0, |m| m.values().filter(|v| *v == "holds").count());
            let total = restrictions.map_or(0, serde_json::Map::len);
            let mut cell = format!("{holding} of {total}");
            if let Some(m) = restrictions {
                let other: Vec<String> = m
                    .iter()
                    .filter(|(_, v)| *v != "holds")
                    .map(|(k, v)| format!("{k}: {}", str_of(v)))
                    .collect();
                if !other.is_empty() {
                    let _ = write!(cell, " (not: {})", other.join("; "));
                }
            }
            let backend = match str_of(&emulator["backend"]) {
                "python" => "torch's Python PrivateUse1 backend".to_owned(),
                "c++ extension" => {
                    "the C++ extension `npu_device.cpp` (built on first use)".to_owned()
                }
                other => other.to_owned(),
            };
            (backend, cell)
        } else {
            (
                format!("cannot install: {}", str_of(&emulator["reason"])),
                "-".to_owned(),
            )
        };
        let _ = writeln!(
            out,
            "| {} | {backend} | {groups} | {} |",
            str_of(&r["torch"]),
            suite_cell(r, &["emulator", "harness"]),
        );
    }
    out.push_str(&skip_list(results, &["emulator", "harness"]));
    out
}

/// Every test skipped on a version, with its reason (one line per reason, tests counted).
fn skip_list(results: &[Value], suites: &[&str]) -> String {
    let mut out = String::new();
    for r in results {
        let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for suite in suites {
            for skip in r["suites"][*suite]["skipped"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let test = str_of(&skip[0])
                    .rsplit("::")
                    .next()
                    .unwrap_or("?")
                    .to_owned();
                reasons
                    .entry(str_of(&skip[1]).to_owned())
                    .or_default()
                    .push(test);
            }
        }
        if reasons.is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str("\nSkipped tests, each with the feature check's reason:\n\n");
        }
        for (reason, tests) in reasons {
            let _ = writeln!(
                out,
                "- torch {}: {reason} (`{}`)",
                str_of(&r["torch"]),
                tests.join("`, `")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_between_the_markers() {
        let text = format!("before\n{BEGIN}\nold\n{END}\nafter\n");
        let out = splice(&text, "new\n").unwrap();
        assert_eq!(out, format!("before\n{BEGIN}\nnew\n{END}\nafter\n"));
        assert!(splice("no markers", "x").is_err());
    }

    fn result(failed: &[&str], demo: &str) -> Value {
        serde_json::json!({
            "torch": "2.6.0",
            "self_test": {"Float64To32": "passes"},
            "demo_verify": demo,
            "suites": {"emulator": {"passed": 3, "failed": failed, "skipped": []}},
        })
    }

    #[test]
    fn results_of_a_green_run_record_no_failures() {
        assert!(failures(&[result(&[], "passes")]).is_empty());
    }

    #[test]
    fn a_flaky_test_or_demo_in_the_results_is_named_instead_of_staling_the_tables() {
        let found = failures(&[result(&["tests/x.py::test_a"], "passes")]);
        assert_eq!(found, ["torch 2.6.0: 1 failed in emulator"]);
        let found = failures(&[result(&[], "fails")]);
        assert_eq!(found, ["torch 2.6.0: demo verify did not pass"]);
    }
}
