//! `cargo xtask accuracy --corpus`: the scanner on real code.
//!
//! Downloads the pinned distributions of `corpus/manifest.json` (cached, sha256-checked),
//! extracts them, scans each with the default settings, and compares the findings with the
//! hand labels of `corpus/labels/*.tsv` (precision and recall per family and per rule id,
//! the misses, the false positives) and with `corpus/baseline.tsv` (new and vanished
//! findings). A failed download, a hash mismatch or a scan error is an error; so is a
//! malformed label row with `--strict-labels`. The figures themselves never fail the command.
//! See `corpus/README.md`.

mod baseline;
pub(crate) mod fetch;
mod labels;
mod score;

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// What `cargo xtask accuracy --corpus` was asked to do.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// Fail when a label row is malformed (unknown id, line not in the file, missing columns).
    pub strict_labels: bool,
    /// Rewrite `corpus/baseline.tsv` from today's findings.
    pub update_baseline: bool,
    /// Also list every finding no label judges.
    pub verbose: bool,
}

pub fn run(opts: &Options) -> Result<()> {
    let root = crate::project_root();
    let corpus = root.join("corpus");
    let manifest = fetch::read_manifest(&corpus.join("manifest.json"))?;
    let cache = fetch::cache_dir();
    let started = Instant::now();
    let dirs = ensure_all(&cache, &manifest.distributions)?;
    eprintln!(
        "xtask: corpus: {} distributions ready under {} ({:.1}s)",
        dirs.len(),
        cache.display(),
        started.elapsed().as_secs_f64()
    );

    let mut trees = BTreeMap::new();
    for dist in &manifest.distributions {
        let name = dist.dir_name();
        let exclude = scan::files::exclude_set(&dist.exclude)
            .with_context(|| format!("{name}: a bad exclude glob in corpus/manifest.json"))?;
        trees.insert(
            name.clone(),
            labels::Tree {
                root: dirs[&name].clone(),
                exclude,
            },
        );
    }
    let loaded = labels::load(&corpus.join("labels"), &trees)?;
    for problem in &loaded.problems {
        eprintln!("xtask: corpus: malformed label: {problem}");
    }
    if opts.strict_labels && !loaded.problems.is_empty() {
        bail!(
            "{} malformed label row(s) in corpus/labels (listed above)",
            loaded.problems.len()
        );
    }

    let started = Instant::now();
    let mut findings = Vec::new();
    let (mut files, mut lines, mut unparsed) = (0, 0, 0);
    for dist in &manifest.distributions {
        let name = dist.dir_name();
        let dir = &dirs[&name];
        let settings = scan::Settings {
            exclude: dist.exclude.clone(),
            ..scan::Settings::default()
        };
        let result = scan::scan(dir, &settings).with_context(|| format!("cannot scan {name}"))?;
        files += result.stats.files;
        lines += result.stats.lines;
        unparsed += result.unparsed.len();
        for u in &result.unparsed {
            eprintln!("xtask: corpus: unparsed {name}/{}: {}", u.file, u.reason);
        }
        for issue in result.issues {
            findings.push(score::Finding {
                file: format!("{name}/{}", issue.file),
                line: issue.line,
                pattern: issue.pattern,
                message: issue.message,
                related: issue
                    .related
                    .into_iter()
                    .map(|r| (format!("{name}/{}", r.file), r.line))
                    .collect(),
            });
        }
    }
    findings.sort();
    eprintln!(
        "xtask: corpus: scanned {files} Python files ({lines} lines, {unparsed} unparsed): {} findings ({:.1}s)",
        findings.len(),
        started.elapsed().as_secs_f64()
    );

    let rules: Vec<&str> = scan::rules::registry().iter().map(|r| r.id).collect();
    let report = score::compare(&findings, &loaded.labels, &rules);
    println!(
        "{} labels from corpus/labels/*.tsv, {} findings on {} distributions",
        loaded.labels.len(),
        findings.len(),
        dirs.len()
    );
    println!(
        "pos/found/recall: unambiguous positive labels; finds/tp/fp/amb/unlab/precision: findings \
         (amb: at ambiguous labels only, unlab: at no label); neg/hit: unambiguous NOT_ labels; \
         amb+/amb-: ambiguous positives matched, negatives hit\n"
    );
    print!("{}", score::render(&report, opts.verbose));

    let baseline_path = corpus.join("baseline.tsv");
    if opts.update_baseline {
        std::fs::write(&baseline_path, baseline::render(&findings))
            .with_context(|| format!("cannot write {}", baseline_path.display()))?;
        eprintln!(
            "xtask: corpus: wrote corpus/baseline.tsv ({} findings)",
            findings.len()
        );
    } else {
        match baseline::read(&baseline_path)? {
            None => println!(
                "\nno corpus/baseline.tsv yet: write it with `cargo xtask accuracy --corpus --update-baseline`"
            ),
            Some(rows) => {
                let (added, vanished, text) = baseline::diff(&rows, &findings);
                println!("\nagainst corpus/baseline.tsv: {added} new, {vanished} vanished");
                print!("{text}");
            }
        }
    }
    Ok(())
}

/// Fetch and extract every distribution (a few at a time); every failure is reported, each
/// naming its package.
fn ensure_all(
    cache: &std::path::Path,
    dists: &[fetch::Distribution],
) -> Result<BTreeMap<String, PathBuf>> {
    const PARALLEL: usize = 4;
    let mut results: Vec<(String, Result<PathBuf>)> = Vec::new();
    for chunk in dists.chunks(PARALLEL) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|d| (d.dir_name(), s.spawn(|| fetch::ensure(cache, d))))
                .collect();
            for (name, h) in handles {
                let result = h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the fetch of {name} panicked")));
                results.push((name, result));
            }
        });
    }
    let mut dirs = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, result) in results {
        match result {
            Ok(dir) => {
                dirs.insert(name, dir);
            }
            Err(e) => errors.push(format!("{name}: {e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("the corpus is incomplete:\n  {}", errors.join("\n  "));
    }
    Ok(dirs)
}
