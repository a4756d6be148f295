//! `cargo xtask accuracy --corpus`: the scanner on real code.
//!
//! Downloads the pinned distributions of `corpus/manifest.json` (cached, sha256-checked),
//! extracts them, scans each with the default settings, and compares the findings with the
//! hand labels of `corpus/labels/*.tsv` (precision and recall per family and per rule id,
//! the misses, the false positives) and with `corpus/baseline.tsv` (new and vanished
//! findings). A failed download, a hash mismatch or a scan error is an error; so is a
//! malformed label row with `--strict-labels`. The figures themselves never fail the command.
//!
//! With `--git` the GitHub part joins in: the manifest's repositories, extracted from local git
//! mirrors (see [`git`]) and scored with the same labels, plus one line of figures per part.
//! Without it, the labels and baseline rows of the repositories are left alone. See
//! `corpus/README.md`.

mod baseline;
pub(crate) mod fetch;
mod git;
pub(crate) mod labels;
pub(crate) mod score;
mod split;

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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
    /// Also the GitHub part: the manifest's repositories, from local git mirrors.
    pub git: Option<GitPart>,
    /// Report the figures of this split's test part (see [`split`]).
    pub split: Option<usize>,
}

/// How to load the GitHub part.
#[derive(Debug, Default, Clone)]
pub struct GitPart {
    /// Where the git mirrors are (else `$NPU_PATCHER_CORPUS_GIT_MIRRORS`).
    pub mirrors: Option<PathBuf>,
}

/// The parts of the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// The distributions of `PyPI`.
    Pypi,
    /// The repositories of GitHub (`--git`).
    Github,
}

impl Part {
    fn title(self) -> &'static str {
        match self {
            Part::Pypi => "PyPI part",
            Part::Github => "GitHub part",
        }
    }
}

/// One extracted tree of the corpus: a distribution or a repository.
struct Source {
    /// `<name>-<version>` or `<name>-<commit12>`: the first component of its labelled paths.
    name: String,
    /// The manifest's `name`: the project, whatever its pin.
    project: String,
    part: Part,
    root: PathBuf,
    exclude: Vec<String>,
}

/// The tree a corpus path (`<tree>/<path>`) belongs to.
fn tree_of(file: &str) -> &str {
    file.split_once('/').map_or(file, |(tree, _)| tree)
}

pub fn run(opts: &Options) -> Result<()> {
    let root = crate::project_root();
    let corpus = root.join("corpus");
    let manifest = fetch::read_manifest(&corpus.join("manifest.json"))?;
    let cache = fetch::cache_dir();
    let mut sources = pypi_sources(&cache, &manifest.distributions)?;
    if let Some(git) = &opts.git {
        sources.extend(git_sources(&cache, &manifest.repositories, git)?);
    }
    // The labels and baseline rows of a part not loaded are left alone, neither judged nor
    // dropped.
    let unloaded: BTreeSet<String> = if opts.git.is_some() {
        BTreeSet::new()
    } else {
        manifest
            .repositories
            .iter()
            .map(git::Repository::dir_name)
            .collect()
    };

    let loaded = labels::load(&corpus.join("labels"), &label_trees(&sources)?, &unloaded)?;
    for problem in &loaded.problems {
        eprintln!("xtask: corpus: malformed label: {problem}");
    }
    if opts.strict_labels && !loaded.problems.is_empty() {
        bail!(
            "{} malformed label row(s) in corpus/labels (listed above)",
            loaded.problems.len()
        );
    }

    let findings = scan_all(&sources)?;
    let rules: Vec<&str> = scan::rules::registry().iter().map(|r| r.id).collect();
    let report = score::compare(&findings, &loaded.labels, &rules);
    println!(
        "{} labels from corpus/labels/*.tsv, {} findings on {}",
        loaded.labels.len(),
        findings.len(),
        counted(&sources)
    );
    println!(
        "pos/found/recall: unambiguous positive labels; finds/tp/fp/amb/unlab/precision: findings \
         (amb: at ambiguous labels only, unlab: at no label); neg/hit: unambiguous NOT_ labels; \
         amb+/amb-: ambiguous positives matched, negatives hit\n"
    );
    print!("{}", score::render(&report, opts.verbose));
    if opts.git.is_some() {
        print!("{}", by_part(&sources, &findings, &loaded.labels, &rules));
    }
    if let Some(k) = opts.split {
        let trees: Vec<split::Tree> = sources
            .iter()
            .map(|s| split::Tree {
                dir: &s.name,
                project: &s.project,
            })
            .collect();
        print!(
            "{}",
            split::render(k, &trees, &findings, &loaded.labels, &rules, opts.verbose)
        );
    }
    compare_baseline(&corpus.join("baseline.tsv"), &findings, &unloaded, opts)
}

/// `17 distributions`, or `17 distributions and 7 repositories` with the GitHub part.
fn counted(sources: &[Source]) -> String {
    let count = |part| sources.iter().filter(|s| s.part == part).count();
    match count(Part::Github) {
        0 => format!("{} distributions", count(Part::Pypi)),
        n => format!("{} distributions and {n} repositories", count(Part::Pypi)),
    }
}

fn pypi_sources(cache: &Path, dists: &[fetch::Distribution]) -> Result<Vec<Source>> {
    let started = Instant::now();
    let dirs = ensure_all(cache, dists)?;
    eprintln!(
        "xtask: corpus: {} distributions ready under {} ({:.1}s)",
        dirs.len(),
        cache.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(dists
        .iter()
        .map(|d| Source {
            name: d.dir_name(),
            project: d.name.clone(),
            part: Part::Pypi,
            root: dirs[&d.dir_name()].clone(),
            exclude: d.exclude.clone(),
        })
        .collect())
}

/// Extract every repository (one at a time: each is a few `git` processes); every failure is
/// reported, each naming its repository.
fn git_sources(cache: &Path, repos: &[git::Repository], part: &GitPart) -> Result<Vec<Source>> {
    let started = Instant::now();
    let mirrors = git::mirrors_dir(part.mirrors.as_deref());
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for repo in repos {
        match git::ensure(cache, repo, mirrors.as_deref()) {
            Ok(root) => sources.push(Source {
                name: repo.dir_name(),
                project: repo.name.clone(),
                part: Part::Github,
                root,
                exclude: repo.exclude.clone(),
            }),
            // The error starts with the repository's directory name.
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!(
            "the GitHub part of the corpus is incomplete:\n  {}",
            errors.join("\n  ")
        );
    }
    eprintln!(
        "xtask: corpus: {} repositories ready under {} ({:.1}s)",
        sources.len(),
        cache.join("git").display(),
        started.elapsed().as_secs_f64()
    );
    Ok(sources)
}

fn label_trees(sources: &[Source]) -> Result<BTreeMap<String, labels::Tree>> {
    let mut trees = BTreeMap::new();
    for source in sources {
        let exclude = scan::files::exclude_set(&source.exclude).with_context(|| {
            format!(
                "{}: a bad exclude glob in corpus/manifest.json",
                source.name
            )
        })?;
        trees.insert(
            source.name.clone(),
            labels::Tree {
                root: source.root.clone(),
                exclude,
            },
        );
    }
    Ok(trees)
}

/// Scan every tree with the default settings and its excludes; the findings, sorted, with
/// their paths prefixed by the tree's name.
fn scan_all(sources: &[Source]) -> Result<Vec<score::Finding>> {
    let started = Instant::now();
    let mut findings = Vec::new();
    let (mut files, mut lines, mut unparsed) = (0, 0, 0);
    for source in sources {
        let name = &source.name;
        let settings = scan::Settings {
            exclude: source.exclude.clone(),
            ..scan::Settings::default()
        };
        let result =
            scan::scan(&source.root, &settings).with_context(|| format!("cannot scan {name}"))?;
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
    Ok(findings)
}

/// One line of overall figures per part, each scored on its own findings and labels.
fn by_part(
    sources: &[Source],
    findings: &[score::Finding],
    labels: &[labels::Label],
    rules: &[&str],
) -> String {
    let mut out = String::from("\nper part:\n");
    for part in [Part::Pypi, Part::Github] {
        let trees: BTreeSet<&str> = sources
            .iter()
            .filter(|s| s.part == part)
            .map(|s| s.name.as_str())
            .collect();
        let ours = |file: &str| trees.contains(tree_of(file));
        let findings: Vec<score::Finding> =
            findings.iter().filter(|f| ours(&f.file)).cloned().collect();
        let labels: Vec<labels::Label> = labels.iter().filter(|l| ours(&l.file)).cloned().collect();
        let total = score::compare(&findings, &labels, rules).total();
        out.push_str(&score::summary(part.title(), &total));
    }
    out
}

/// Diff the findings with the baseline, or rewrite it; either way the rows of the trees in
/// `unloaded` are kept as they are.
fn compare_baseline(
    path: &Path,
    findings: &[score::Finding],
    unloaded: &BTreeSet<String>,
    opts: &Options,
) -> Result<()> {
    let rows = baseline::read(path)?;
    if opts.update_baseline {
        let (kept, _) = baseline::split(rows.unwrap_or_default(), unloaded);
        std::fs::write(path, baseline::render(findings, &kept))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "xtask: corpus: wrote corpus/baseline.tsv ({} findings, {} rows of parts not loaded kept)",
            findings.len(),
            kept.len()
        );
        return Ok(());
    }
    match rows {
        None => println!(
            "\nno corpus/baseline.tsv yet: write it with `cargo xtask accuracy --corpus --update-baseline`"
        ),
        Some(rows) => {
            let (_, compared) = baseline::split(rows, unloaded);
            let (added, vanished, text) = baseline::diff(&compared, findings);
            println!("\nagainst corpus/baseline.tsv: {added} new, {vanished} vanished");
            print!("{text}");
        }
    }
    Ok(())
}

/// Fetch and extract every distribution (a few at a time); every failure is reported, each
/// naming its package.
fn ensure_all(cache: &Path, dists: &[fetch::Distribution]) -> Result<BTreeMap<String, PathBuf>> {
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
