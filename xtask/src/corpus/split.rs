//! `--split K`: the labelled trees in a dev part and a test part, so that a rule is changed while
//! looking at the dev part only and judged on the test part it was not tuned on.
//!
//! Each tree goes to one of [`FOLDS`] folds by a hash of its project name (the manifest's
//! `name`, without version or commit), so a tree keeps its fold when trees are added or a pin
//! moves. Split `K` makes fold `K` the test part and the other folds the dev part; rotating
//! `K` over `0..FOLDS` tests every tree once.

use super::labels::Label;
use super::score::{self, Finding};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// How many folds the trees are dealt into.
pub const FOLDS: usize = 3;

/// The fold of a project: FNV-1a (64-bit) of its name, modulo [`FOLDS`]. A fixed function, not
/// the standard library's seeded hasher, so every run and machine deals the same folds.
pub fn fold(project: &str) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in project.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    usize::try_from(hash % FOLDS as u64).unwrap_or(0)
}

/// One loaded tree: its directory name (the first component of labelled paths) and project.
pub struct Tree<'a> {
    pub dir: &'a str,
    pub project: &'a str,
}

/// The report of split `k`: which trees are in each part, the full figures of the test part,
/// and one summary line per part.
pub fn render(
    k: usize,
    trees: &[Tree<'_>],
    findings: &[Finding],
    labels: &[Label],
    rules: &[&str],
    verbose: bool,
) -> String {
    let test: BTreeSet<&str> = trees
        .iter()
        .filter(|t| fold(t.project) == k)
        .map(|t| t.dir)
        .collect();
    let dev: BTreeSet<&str> = trees
        .iter()
        .filter(|t| fold(t.project) != k)
        .map(|t| t.dir)
        .collect();
    let part = |dirs: &BTreeSet<&str>| {
        let ours = |file: &str| dirs.contains(super::tree_of(file));
        let findings: Vec<Finding> = findings.iter().filter(|f| ours(&f.file)).cloned().collect();
        let labels: Vec<Label> = labels.iter().filter(|l| ours(&l.file)).cloned().collect();
        score::compare(&findings, &labels, rules)
    };
    let names = |dirs: &BTreeSet<&str>| dirs.iter().copied().collect::<Vec<_>>().join(", ");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nsplit {k} of {FOLDS} (rotate with --split 0..{}): change rules looking at the dev part; \
         judge them by the test part",
        FOLDS - 1
    );
    let _ = writeln!(out, "test part ({} trees): {}", test.len(), names(&test));
    let _ = writeln!(out, "dev part ({} trees): {}\n", dev.len(), names(&dev));
    let _ = writeln!(out, "test part, by family:");
    let test_report = part(&test);
    out.push_str(&score::render(&test_report, verbose));
    out.push('\n');
    out.push_str(&score::summary("test part", &test_report.total()));
    out.push_str(&score::summary("dev part", &part(&dev).total()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folds are fixed: a change of the hash would silently move trees between parts.
    #[test]
    fn folds_are_stable_and_cover_every_fold() {
        assert_eq!(
            [fold("peract"), fold("torchrl"), fold("diffusers")],
            [0, 1, 2]
        );
        let projects = [
            "torchrl",
            "stable-baselines3",
            "diffusers",
            "RoboVLMs",
            "peract",
            "hiveformer",
            "trl",
            "BAKU",
        ];
        let folds: BTreeSet<usize> = projects.iter().map(|p| fold(p)).collect();
        assert_eq!(folds, (0..FOLDS).collect());
        for p in projects {
            assert_eq!(fold(p), fold(p));
            assert!(fold(p) < FOLDS);
        }
    }
}
