//! `cargo xtask static-measured`: for the public projects whose training step the pre-flight
//! runs, which hand-labelled problems `npu-scan` finds, which `npu-verify --pipeline
//! --record-issues` measures, and which neither finds.
//!
//! Each program is one of the `--parity` tests' ports of a pinned public distribution
//! (`crates/verify/tests/parity/public/`), set up as `cargo xtask bench parity` sets it up. The
//! scan and the measurement write one `issues.json`: a measured finding in the code of a scanned
//! issue of the same pattern is folded into it (`issue_model::fold`), so one problem keeps one id.
//! The labels are the corpus's (`corpus/labels/*.tsv`) on the distribution's files.
//!
//! A label is found by the scan when a scanned issue matches it as `cargo xtask accuracy
//! --corpus` matches (same family, within 2 lines). It is found by the measurement when a
//! measured issue, or the measurement folded into a scanned issue, lies in the labelled code (its
//! line, or the block a labelled loop heads) and the label's family is one the step profile
//! measures (`P_VEC`, `P_TGT`: host syncs and per-sample lines; `P_CPU`: CPU fallbacks). Nothing is
//! asserted: the command prints what it saw.

use crate::bench_parity::{PublicProgram, public_project};
use crate::corpus::labels::{self, Label, Tree};
use crate::corpus::score::{self, Finding};
use anyhow::{Context, Result, bail};
use issue_model::{Issue, IssuesFile};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(clap::Args, Default)]
#[command(after_help = "Examples:\n  cargo xtask static-measured\n  \
                        cargo xtask static-measured --json > static-measured.json")]
pub struct Args {
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// The programs: the public training steps the `--parity` tests run.
const PROGRAMS: [PublicProgram; 2] = [
    PublicProgram {
        dist: "denoising-diffusion-pytorch-2.3.4",
        package: "denoising_diffusion_pytorch",
        files: &["denoising_diffusion_pytorch_1d.py", "version.py"],
        program: "ddpm1d_train.py",
    },
    PublicProgram {
        dist: "vit-pytorch-1.26.14",
        package: "vit_pytorch",
        files: &["na_vit.py"],
        program: "navit_train.py",
    },
];

/// The label families the step profile measures.
const MEASURED_FAMILIES: [&str; 3] = ["P_VEC", "P_TGT", "P_CPU"];

/// Who found one labelled problem.
#[derive(serde::Serialize)]
struct Row {
    file: String,
    line: u32,
    label: String,
    ambiguous: bool,
    reason: String,
    /// Ids of the scanned issues that match it.
    scan: Vec<String>,
    /// Ids of the issues whose measurement lies in its code.
    measured: Vec<String>,
}

#[derive(serde::Serialize)]
struct Report {
    program: String,
    /// `npu-verify`'s exit code.
    verify_exit: Option<i32>,
    /// Positive labels in the files the program runs.
    labelled: Vec<Row>,
    /// `NOT_` labels a scanned issue sits on.
    negatives_hit: Vec<Row>,
    /// Issues no positive label covers, in the distribution's files and the training loop
    /// (einops, a dependency copied in, is left out): `id pattern file:line how`.
    unlabelled: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    let python = crate::venv::ensure(&crate::venv::default_requirements())?;
    let scan = crate::bench_scan::scan_binary()?;
    let verify = crate::bench_shapes::verify_binary(false)?;
    let public = crate::parity_public::ensure_all()?;
    let all = corpus_labels(&public)?;
    let dir = tempfile::tempdir()?;
    let assets = crate::project_root().join("assets");
    let mut reports = Vec::new();
    for program in &PROGRAMS {
        eprintln!(
            "xtask: {}: npu-scan, then npu-verify --pipeline --record-issues",
            program.dist
        );
        let root = public_project(&assets, dir.path(), program)?;
        duct::cmd!(&scan, &root, "--output", &root, "--quiet")
            .stdout_null()
            .unchecked()
            .run()
            .with_context(|| format!("cannot run {}", scan.display()))?;
        let verify_exit = duct::cmd(
            &verify,
            [
                root.as_os_str(),
                "--quiet".as_ref(),
                "--python".as_ref(),
                python.as_os_str(),
                "--emulate-npu".as_ref(),
                "--pipeline".as_ref(),
                "--steps".as_ref(),
                "3".as_ref(),
                "--record-issues".as_ref(),
                "--timeout".as_ref(),
                "600".as_ref(),
                "--".as_ref(),
                "python".as_ref(),
                "train.py".as_ref(),
            ],
        )
        .env_remove("ASCEND_RT_VISIBLE_DEVICES")
        .stdout_null()
        .stderr_null()
        .unchecked()
        .run()
        .with_context(|| format!("cannot run {}", verify.display()))?
        .status
        .code();
        let path = root.join("issues.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: no issues.json after the scan", program.dist))?;
        let file: IssuesFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a valid issues file", path.display()))?;
        if !file
            .issues
            .iter()
            .any(|i| i.measured.is_some() || i.measurement.is_some())
            && verify_exit != Some(0)
            && verify_exit != Some(1)
        {
            bail!(
                "{}: npu-verify exited with {verify_exit:?} and measured nothing; run it by hand: \
                 npu-verify {} --pipeline --emulate-npu --steps 3 --record-issues -- python train.py",
                program.dist,
                root.display()
            );
        }
        reports.push(compare(program, &root, &file, &all, verify_exit));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", render(&reports));
    }
    Ok(())
}

/// The corpus labels of the programs' distributions.
fn corpus_labels(public: &Path) -> Result<Vec<Label>> {
    let mut trees = BTreeMap::new();
    for program in &PROGRAMS {
        trees.insert(
            program.dist.to_owned(),
            Tree {
                root: public.join(program.dist),
                exclude: globset::GlobSet::empty(),
            },
        );
    }
    let dir = crate::project_root().join("corpus/labels");
    // The other trees' rows are reported as problems by `load`: they are not this command's.
    let loaded = labels::load(&dir, &trees, &BTreeSet::new())?;
    Ok(loaded
        .labels
        .into_iter()
        .filter(|l| trees.keys().any(|t| l.file.starts_with(&format!("{t}/"))))
        .collect())
}

/// The project path (`<package>/<file>`) of a label's file, when the program copies that file.
fn project_path(program: &PublicProgram, label: &Label) -> Option<String> {
    let rest = label.file.strip_prefix(program.dist)?.strip_prefix('/')?;
    let name = rest.strip_prefix(program.package)?.strip_prefix('/')?;
    program.files.contains(&name).then(|| rest.to_owned())
}

fn compare(
    program: &PublicProgram,
    root: &Path,
    file: &IssuesFile,
    all: &[Label],
    verify_exit: Option<i32>,
) -> Report {
    let mut texts: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    let mut lines_of = |path: &str| {
        texts
            .entry(path.to_owned())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(path))
                    .ok()
                    .map(|t| t.lines().map(str::to_owned).collect())
            })
            .clone()
    };
    let scanned: Vec<&Issue> = file
        .issues
        .iter()
        .filter(|i| i.measured.is_none())
        .collect();
    // Where the step profile measured something: measured issues, and the measurements folded
    // into scanned issues (at the scanned issue's code).
    let measured: Vec<(&Issue, (u32, u32))> = file
        .issues
        .iter()
        .filter(|i| i.measured.is_some() || i.measurement.is_some())
        .map(|i| {
            let span = if i.measured.is_some() {
                (i.line, i.end_line.max(i.line))
            } else {
                let lines = lines_of(&i.file);
                issue_model::fold::code_span(i.line, i.end_line, lines.as_deref())
            };
            (i, span)
        })
        .collect();
    let mut labelled = Vec::new();
    let mut negatives_hit = Vec::new();
    let mut covered = BTreeSet::new();
    for label in all {
        let Some(path) = project_path(program, label) else {
            continue;
        };
        let local = Label {
            file: path.clone(),
            ..label.clone()
        };
        let scan: Vec<String> = scanned
            .iter()
            .filter(|i| score::matches(&finding(i), &local))
            .map(|i| i.id.clone())
            .collect();
        let lines = lines_of(&path);
        let (first, last) = issue_model::fold::code_span(label.line, label.line, lines.as_deref());
        let in_code = |line: u32| {
            (first..=last).contains(&line) || line.abs_diff(label.line) <= score::TOLERANCE
        };
        let measured: Vec<String> =
            if label.positive && MEASURED_FAMILIES.contains(&label.rule.as_str()) {
                measured
                    .iter()
                    .filter(|(i, (a, b))| i.file == path && (*a..=*b).any(in_code))
                    .map(|(i, _)| i.id.clone())
                    .collect()
            } else {
                Vec::new()
            };
        let row = Row {
            file: path,
            line: label.line,
            label: if label.positive {
                label.rule.clone()
            } else {
                format!("NOT_{}", label.rule)
            },
            ambiguous: label.ambiguous,
            reason: label.reason.clone(),
            scan,
            measured,
        };
        if label.positive {
            covered.extend(row.scan.iter().cloned());
            covered.extend(row.measured.iter().cloned());
            labelled.push(row);
        } else if !row.scan.is_empty() {
            negatives_hit.push(row);
        }
    }
    let unlabelled = file
        .issues
        .iter()
        .filter(|i| !covered.contains(&i.id) && !i.file.starts_with("einops/"))
        .map(|i| {
            let how = match (&i.measured, &i.measurement) {
                (Some(m), _) => format!("measured ({}: {})", m.check, m.evidence),
                (None, Some(m)) => format!("scanned, measured too ({}: {})", m.check, m.evidence),
                (None, None) => "scanned".to_owned(),
            };
            format!("{} {} {}:{} {how}", i.id, i.pattern, i.file, i.line)
        })
        .collect();
    Report {
        program: format!("{} ({})", program.dist, program.program),
        verify_exit,
        labelled,
        negatives_hit,
        unlabelled,
    }
}

fn finding(issue: &Issue) -> Finding {
    Finding {
        file: issue.file.clone(),
        line: issue.line,
        pattern: issue.pattern.clone(),
        message: issue.message.clone(),
        related: issue
            .related
            .iter()
            .map(|r| (r.file.clone(), r.line))
            .collect(),
    }
}

fn render(reports: &[Report]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let (mut both, mut scan_only, mut measured_only, mut neither) = (0, 0, 0, 0);
    for report in reports {
        let _ = writeln!(
            out,
            "{}: npu-verify exit {}",
            report.program,
            report
                .verify_exit
                .map_or_else(|| "none (killed)".to_owned(), |c| c.to_string())
        );
        let _ = writeln!(out, "  labelled problems (positive labels):");
        if report.labelled.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        for row in &report.labelled {
            let who = match (row.scan.is_empty(), row.measured.is_empty()) {
                (false, false) => {
                    both += 1;
                    "scan + measured"
                }
                (false, true) => {
                    scan_only += 1;
                    "scan only"
                }
                (true, false) => {
                    measured_only += 1;
                    "measured only"
                }
                (true, true) => {
                    neither += 1;
                    "neither"
                }
            };
            let ids: Vec<&str> = row
                .scan
                .iter()
                .chain(&row.measured)
                .map(String::as_str)
                .collect();
            let _ = writeln!(
                out,
                "    {}:{} {}{}  {who}{}  ({})",
                row.file,
                row.line,
                row.label,
                if row.ambiguous { " (ambiguous)" } else { "" },
                if ids.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", ids.join(", "))
                },
                row.reason
            );
        }
        for row in &report.negatives_hit {
            let _ = writeln!(
                out,
                "    {}:{} {} hit by the scan [{}]",
                row.file,
                row.line,
                row.label,
                row.scan.join(", ")
            );
        }
        let _ = writeln!(out, "  issues no label covers:");
        if report.unlabelled.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        for line in &report.unlabelled {
            let _ = writeln!(out, "    {line}");
        }
    }
    let _ = writeln!(
        out,
        "labelled problems: {} in all; scan + measured {both}, scan only {scan_only}, measured only \
         {measured_only}, neither {neither}",
        both + scan_only + measured_only + neither
    );
    out
}
