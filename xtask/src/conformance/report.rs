//! The conformance report: per project and in total, as a text table or JSON.

use serde::Serialize;
use std::fmt::Write as _;

use super::classify::Class;
use super::suite::Outcome;

#[derive(Serialize, Debug)]
pub struct Report {
    pub goal_percent: f64,
    /// Only each project's `subset` tests ran.
    pub subset: bool,
    /// The emulator's restriction groups were on (`--no-restrictions`: off).
    pub restrictions: bool,
    pub tests: usize,
    pub same: usize,
    /// Of `same`: skipped on the CPU (no accelerator), passed on the npu.
    pub npu_only: usize,
    pub different: usize,
    pub unclassified: usize,
    pub same_percent: f64,
    pub projects: Vec<ProjectReport>,
}

#[derive(Serialize, Debug)]
pub struct ProjectReport {
    pub name: String,
    pub version: String,
    pub what: String,
    pub torch: String,
    /// Which `transfer_to_npu` ran on the npu (`torch-npu 2.14.0 contrib/transfer_to_npu.py`).
    pub transfer_to_npu: Option<String>,
    pub tests: usize,
    pub same: usize,
    /// Of `same`: skipped on the CPU (no accelerator), passed on the npu.
    pub npu_only: usize,
    pub different: usize,
    pub unclassified: usize,
    pub secs_cpu: f64,
    pub secs_npu: f64,
    /// Runs that ended before pytest's own finish.
    pub incomplete: Vec<String>,
    pub differences: Vec<Difference>,
}

#[derive(Serialize, Debug)]
pub struct Difference {
    pub test: String,
    pub cpu: Outcome,
    pub npu: Outcome,
    /// `None`: not classified.
    pub classification: Option<Classification>,
    /// The fixed emulator bug (and its regression test) this difference shows again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regressed: Option<String>,
}

#[derive(Serialize, Debug)]
pub struct Classification {
    pub class: Class,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cite: Option<String>,
    pub reason: String,
}

impl Report {
    pub fn new(goal_percent: f64, subset: bool) -> Self {
        Report {
            goal_percent,
            subset,
            restrictions: true,
            tests: 0,
            same: 0,
            npu_only: 0,
            different: 0,
            unclassified: 0,
            same_percent: 100.0,
            projects: Vec::new(),
        }
    }

    pub fn add(&mut self, p: ProjectReport) {
        self.tests += p.tests;
        self.same += p.same;
        self.npu_only += p.npu_only;
        self.different += p.different;
        self.unclassified += p.unclassified;
        self.same_percent = percent(self.same, self.tests);
        self.projects.push(p);
    }

    /// At least one test ran, every difference is classified and the share of same outcomes
    /// reaches the goal.
    pub fn goal_met(&self) -> bool {
        self.tests > 0 && self.unclassified == 0 && self.same_percent >= self.goal_percent
    }
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        return 100.0;
    }
    #[allow(clippy::cast_precision_loss, reason = "test counts are far below 2^52")]
    let p = part as f64 * 100.0 / whole as f64;
    (p * 10.0).floor() / 10.0
}

fn class_name(c: Class) -> &'static str {
    match c {
        Class::NpuRestriction => "npu-restriction",
        Class::EmulatorLimitation => "emulator-limitation",
        Class::Nondeterministic => "nondeterministic",
    }
}

/// The text report: the table, then every difference with its classification.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<9} {:<7} {:>6} {:>6} {:>8} {:>6} {:>7} {:>7}",
        "project", "version", "torch", "tests", "same", "npu-only", "diff", "same%", "unclass"
    );
    for p in &r.projects {
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<7} {:>6} {:>6} {:>8} {:>6} {:>7.1} {:>7}",
            p.name,
            p.version,
            p.torch,
            p.tests,
            p.same,
            p.npu_only,
            p.different,
            percent(p.same, p.tests),
            p.unclassified
        );
    }
    let _ = writeln!(
        out,
        "{:<20} {:<9} {:<7} {:>6} {:>6} {:>8} {:>6} {:>7.1} {:>7}",
        "total", "", "", r.tests, r.same, r.npu_only, r.different, r.same_percent, r.unclassified
    );
    let _ = writeln!(
        out,
        "(same: the same outcome on the CPU and on the npu; npu-only: of those, skipped on the \
         CPU for want of an accelerator and passed on the npu)"
    );
    for p in &r.projects {
        for why in &p.incomplete {
            let _ = writeln!(
                out,
                "\n{} (torch {}): incomplete run: {why}",
                p.name, p.torch
            );
        }
        if p.differences.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n{} {} (torch {}; {}):",
            p.name,
            p.version,
            p.torch,
            p.transfer_to_npu.as_deref().unwrap_or("no transfer_to_npu")
        );
        for d in &p.differences {
            let verdict = match (&d.classification, &d.regressed) {
                (Some(c), _) => format!(
                    "{}{}",
                    class_name(c.class),
                    c.cite
                        .as_ref()
                        .map(|cite| format!(" ({cite})"))
                        .unwrap_or_default()
                ),
                (None, Some(bug)) => format!("REGRESSED: {bug}"),
                (None, None) => "UNCLASSIFIED".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {}: cpu {} / npu {}: {verdict}",
                d.test, d.cpu.outcome, d.npu.outcome
            );
            if d.classification.is_none() {
                let message = d.npu.message.as_deref().or(d.cpu.message.as_deref());
                if let Some(m) = message {
                    let _ = writeln!(out, "      {}", m.lines().next().unwrap_or_default());
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "\n{}: {:.1}% same outcome (goal {:.1}%), {} of {} differences unclassified{}",
        if r.goal_met() {
            "goal met"
        } else {
            "goal NOT met"
        },
        r.same_percent,
        r.goal_percent,
        r.unclassified,
        r.different,
        match (r.subset, r.restrictions) {
            (false, true) => "",
            (true, true) => " (subset)",
            (false, false) => " (restrictions off)",
            (true, false) => " (subset, restrictions off)",
        }
    );
    let mut by_class = std::collections::BTreeMap::new();
    for d in r.projects.iter().flat_map(|p| &p.differences) {
        if let Some(c) = &d.classification {
            *by_class.entry(class_name(c.class)).or_insert(0) += 1;
        }
    }
    if !by_class.is_empty() {
        let parts: Vec<String> = by_class.iter().map(|(c, n)| format!("{n} {c}")).collect();
        let _ = writeln!(out, "classified differences: {}", parts.join(", "));
        let documented = by_class.get("npu-restriction").copied().unwrap_or(0)
            + by_class.get("nondeterministic").copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:.1}% same outcome or a documented NPU behaviour (npu-restriction) or a nondeterministic test",
            percent(r.same + documented, r.tests)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_needs_the_share_and_no_unclassified_difference() {
        let project = |same, unclassified| ProjectReport {
            name: "p".into(),
            version: "1".into(),
            what: String::new(),
            torch: "2.14.0".into(),
            transfer_to_npu: None,
            tests: 1000,
            same,
            npu_only: 0,
            different: 1000 - same,
            unclassified,
            secs_cpu: 0.0,
            secs_npu: 0.0,
            incomplete: Vec::new(),
            differences: Vec::new(),
        };
        let mut r = Report::new(99.0, false);
        assert!(!r.goal_met(), "nothing ran");
        r.add(project(990, 0));
        assert!(r.goal_met());
        let mut r = Report::new(99.0, false);
        r.add(project(989, 0));
        assert!(!r.goal_met(), "98.9%");
        let mut r = Report::new(99.0, false);
        r.add(project(999, 1));
        assert!(!r.goal_met(), "one unclassified");
        assert!(render(&r).contains("goal NOT met"));
    }
}
