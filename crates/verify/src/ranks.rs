//! A distributed harness run (`--nproc-per-node N`): torchrun starts one harness per rank, each
//! writing its own results file and log; this module reads them back and compares the ranks.
//!
//! The lowest rank that started gives the run's checks under their usual names; another rank's
//! failed checks are added as `pipeline.rankR.<check>`. The `pipeline.ranks` check says which
//! backend each rank's process group runs, where its parameters and batches live, whether the
//! parameters are equal on every rank after the last step (the gradients were all-reduced), and
//! what each rank printed last when it did not finish.

use crate::harness::Outcome;
use crate::report::{Check, Status};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// What one rank's harness wrote.
#[derive(Debug, Clone)]
pub struct RankOutcome {
    pub rank: u32,
    pub started: bool,
    pub done: bool,
    pub checks: Vec<Check>,
    /// The rank's `rank` fact (backend, devices, parameter digest), if it got that far.
    pub fact: Option<Value>,
    /// The last lines of its log.
    pub tail: String,
}

/// The per-rank file template the harness fills in (`{rank}` is replaced by the rank).
pub(crate) fn rank_file(base: &Path, mode: &str, stem: &str, ext: &str) -> String {
    base.join(format!("{stem}-{mode}.rank{{rank}}.{ext}"))
        .display()
        .to_string()
}

pub(crate) fn rank_path(
    base: &Path,
    mode: &str,
    stem: &str,
    ext: &str,
    rank: u32,
) -> std::path::PathBuf {
    base.join(format!("{stem}-{mode}.rank{rank}.{ext}"))
}

/// Read every rank's results into `outcome` (see the module documentation).
pub(crate) fn collect(base: &Path, count: u32, outcome: &mut Outcome) {
    let mode = outcome.mode.clone();
    let mut ranks = Vec::new();
    let mut first: Option<Outcome> = None;
    for rank in 0..count {
        let mut one = empty(&mode);
        crate::harness::read_results(&rank_path(base, &mode, "results", "jsonl", rank), &mut one);
        let tail = crate::harness::tail(&rank_path(base, &mode, "output", "log", rank), 30, 4000);
        ranks.push(RankOutcome {
            rank,
            started: one.hello.is_some(),
            done: one.done,
            checks: one.checks.clone(),
            fact: one.facts.get("rank").cloned(),
            tail,
        });
        if first.is_none() && one.hello.is_some() {
            first = Some(one);
        }
    }
    let Some(main) = first else {
        outcome.tail = combined_tail(&outcome.tail, &ranks);
        outcome.ranks = ranks;
        return;
    };
    let main_rank = ranks.iter().find(|r| r.started).map_or(0, |r| r.rank);
    outcome.hello = main.hello;
    outcome.done = ranks.iter().all(|r| r.done);
    for (name, value) in main.facts {
        if name != "rank" {
            outcome.facts.insert(name, value);
        }
    }
    outcome.checks = main.checks;
    let prefix = format!("{mode}.");
    for rank in ranks.iter().filter(|r| r.rank != main_rank) {
        for check in rank.checks.iter().filter(|c| c.status == Status::Fail) {
            let same = outcome
                .checks
                .iter()
                .any(|c| c.name == check.name && c.detail == check.detail);
            if same {
                continue;
            }
            let mut check = check.clone();
            let rest = check.name.strip_prefix(&prefix).unwrap_or(&check.name);
            check.name = format!("{mode}.rank{}.{rest}", rank.rank);
            check.detail = format!("rank {}: {}", rank.rank, check.detail);
            outcome.checks.push(check);
        }
    }
    if !outcome.done || outcome.exit_code != Some(0) {
        outcome.tail = combined_tail(&outcome.tail, &ranks);
    }
    outcome.ranks = ranks;
}

fn empty(mode: &str) -> Outcome {
    Outcome {
        mode: mode.to_owned(),
        ..Outcome::default()
    }
}

/// torchrun's own last lines, then each unfinished rank's.
fn combined_tail(launcher: &str, ranks: &[RankOutcome]) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = launcher.lines().collect();
    let kept = &lines[lines.len().saturating_sub(12)..];
    if !kept.is_empty() {
        let _ = writeln!(out, "[torchrun]\n{}", kept.join("\n"));
    }
    for rank in ranks.iter().filter(|r| !r.done) {
        let lines: Vec<&str> = rank.tail.lines().collect();
        let kept = &lines[lines.len().saturating_sub(12)..];
        let _ = writeln!(out, "[rank {}]\n{}", rank.rank, kept.join("\n"));
    }
    out.trim_end().to_owned()
}

fn text<'a>(fact: &'a Value, key: &str) -> Option<&'a str> {
    fact.get(key).and_then(Value::as_str)
}

fn devices(fact: &Value, key: &str) -> Vec<String> {
    fact.get(key)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The `MODE.ranks` check of a distributed run of `expected` processes (one machine).
pub fn ranks_check(
    mode: &str,
    ranks: &[RankOutcome],
    expected: u32,
    nnodes: u32,
    emulated: bool,
) -> Check {
    let name = format!("{mode}.ranks");
    let mut problems = Problems::default();
    let mut remedies: Vec<&str> = Vec::new();
    let mut rows = Vec::new();
    let mut digests: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut by_device: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut backends = BTreeSet::new();
    let mut steps_min: Option<u64> = None;
    for rank in ranks {
        let mut row = json!({"rank": rank.rank, "started": rank.started, "finished": rank.done});
        if !rank.done {
            let (problem, remedy) = unfinished(rank, emulated);
            problems.add(rank.rank, problem);
            remedies.push(remedy);
        }
        let Some(fact) = &rank.fact else {
            if !rank.done {
                row["last_output"] = rank.tail.clone().into();
            }
            rows.push(row);
            continue;
        };
        let backend = text(fact, "backend");
        let requested = text(fact, "requested_backend");
        let params = devices(fact, "params_devices");
        let batches = devices(fact, "batch_devices");
        let steps = fact.get("steps").and_then(Value::as_u64).unwrap_or(0);
        steps_min = Some(steps_min.map_or(steps, |m| m.min(steps)));
        row["backend"] = backend.into();
        row["requested_backend"] = requested.into();
        row["init_site"] = fact
            .pointer("/init_calls/0/site")
            .cloned()
            .unwrap_or(Value::Null);
        row["params_devices"] = params.clone().into();
        row["batch_devices"] = batches.clone().into();
        row["current_device"] = fact.get("current_device").cloned().unwrap_or(Value::Null);
        row["steps"] = steps.into();
        row["params_digest"] = fact.get("params_digest").cloned().unwrap_or(Value::Null);
        if !rank.done {
            row["last_output"] = rank.tail.clone().into();
        }
        match backend {
            Some(b) => {
                backends.insert(b.to_owned());
            }
            None if expected > 1 && requested.is_none_or(|r| !r.contains("nccl")) => {
                let site = fact
                    .pointer("/init_calls/0/site")
                    .and_then(Value::as_str)
                    .map_or_else(
                        || " (init_process_group was never called)".to_owned(),
                        |s| format!(" (init_process_group at {s} did not finish)"),
                    );
                problems.add(rank.rank, format!("ran without a process group{site}"));
                remedies.push(
                    "call torch.distributed.init_process_group(\"hccl\") when WORLD_SIZE > 1 and wrap the model \
                     in DDP or FSDP",
                );
            }
            None => {}
        }
        if let (Some(req), Some(site)) = (
            requested,
            fact.pointer("/init_calls/0/site").and_then(Value::as_str),
        ) && req.contains("nccl")
        {
            problems.add(
                rank.rank,
                format!(
                    "asked init_process_group for {req:?} at {site}: there is no NCCL on Ascend"
                ),
            );
            remedies.push(
                "use the hccl backend (`backend: hccl`), or import torch_npu.contrib.transfer_to_npu at the entry, \
                 which rewrites nccl to hccl (P_ENT, P_CFG)",
            );
        }
        if let Some(b) = backend
            && b != "hccl"
            && params.iter().any(|d| d.starts_with("npu"))
        {
            problems.add(
                rank.rank,
                format!(
                    "the process group runs {b:?} with the parameters on the NPU: collectives of NPU tensors need hccl"
                ),
            );
            remedies.push(
                "init_process_group(\"hccl\") (NPU-FACTS.md: the distributed backend is hccl)",
            );
        }
        for device in &params {
            by_device.entry(device.clone()).or_default().push(rank.rank);
        }
        if let Some(d) = fact.get("params_digest").and_then(Value::as_str) {
            digests.entry(d.to_owned()).or_default().push(rank.rank);
        }
        rows.push(row);
    }
    let shared: Vec<(String, Vec<u32>)> = by_device
        .iter()
        .filter(|(d, r)| r.len() > 1 && d.starts_with("npu") && nnodes == 1)
        .map(|(d, r)| (d.clone(), r.clone()))
        .collect();
    for (device, on) in &shared {
        problems.0.push((
            format!("all keep their parameters on {device}: every rank of this machine uses the same card"),
            on.clone(),
        ));
        remedies.push(
            "select the card from the local rank before building the model: torch.npu.set_device(local_rank) \
             (or device = torch.device(\"npu\", local_rank)); a backend comparison such as \
             `dist.get_backend() == \"nccl\"` is False under hccl and skips it",
        );
    }
    let params_equal = (digests.len() == 1
        && digests
            .values()
            .next()
            .is_some_and(|r| r.len() == ranks.len()))
    .then_some(true)
    .or_else(|| (digests.len() > 1).then_some(false));
    if params_equal == Some(false) {
        let groups: Vec<String> = digests
            .values()
            .map(|r| format!("ranks {}", join(r)))
            .collect();
        problems.0.push((
            format!(
                "the parameters differ between ranks after the last step ({} hold different values): the \
                 gradients were not all-reduced",
                groups.join(" / ")
            ),
            Vec::new(),
        ));
        remedies.push(
            "wrap the model in DistributedDataParallel (or FSDP) after init_process_group, and step the wrapped \
             model's parameters",
        );
    }
    let data = json!({
        "world_size": expected,
        "nnodes": nnodes,
        "ranks": rows,
        "backends": backends.iter().collect::<Vec<_>>(),
        "devices_distinct": shared.is_empty(),
        "params_equal": params_equal,
    });
    if !problems.0.is_empty() {
        let mut seen = BTreeSet::new();
        remedies.retain(|r| seen.insert(*r));
        return Check::fail(&name, problems.text(), remedies.join("; ")).with_data(data);
    }
    let reported = ranks.iter().filter(|r| r.fact.is_some()).count();
    let shard_count = ranks
        .iter()
        .filter_map(|r| r.fact.as_ref()?.get("params_sharded")?.as_u64())
        .max()
        .unwrap_or(0);
    if reported == 0 {
        return Check::skip(&name, "no rank reported (see the run's failure)").with_data(data);
    }
    let mut detail = format!(
        "{} ranks, backend {}",
        ranks.len(),
        if backends.is_empty() {
            "none".to_owned()
        } else {
            backends.iter().cloned().collect::<Vec<_>>().join("/")
        }
    );
    for row in data["ranks"].as_array().into_iter().flatten() {
        let on = row["params_devices"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("+")
            })
            .unwrap_or_default();
        if on.is_empty() {
            let current = row["current_device"]
                .as_u64()
                .map_or_else(String::new, |i| format!(", current device npu:{i}"));
            let _ = write!(detail, "; rank {}: no optimizer step{current}", row["rank"]);
        } else {
            let _ = write!(detail, "; rank {} on {on}", row["rank"]);
        }
    }
    match params_equal {
        Some(true) => {
            let _ = write!(
                detail,
                "; parameters equal on every rank after {} steps (gradients all-reduced)",
                steps_min.unwrap_or(0)
            );
            Check::pass(&name, detail).with_data(data)
        }
        _ if shard_count > 0 && steps_min.is_some_and(|s| s > 0) => {
            let _ = write!(
                detail,
                "; {shard_count} parameters are sharded across the ranks (FSDP): each rank holds its own shard, so \
                 their values were not compared"
            );
            Check::pass(&name, detail).with_data(data)
        }
        _ => {
            detail
                .push_str("; no parameter digest to compare (no rank finished an optimizer step)");
            Check::skip(&name, detail).with_data(data)
        }
    }
}

/// What the C++ runtime prints when a process aborts without a Python exception (an exception
/// escaping a `noexcept` function, `std::terminate`, a failed C++ assertion), and the shell's word.
const ABORT_MARKERS: [&str; 4] = [
    "terminate called",
    "Fatal Python error: Aborted",
    "Aborted (core dumped)",
    "SIGABRT",
];

const UNFINISHED_REMEDY: &str = "a rank that stops ends its peers' collectives too: read the first failing rank's last \
     output (its log is kept beside the report) and fix that error first";
const ABORT_REMEDY: &str = "an abort inside torch, torch_npu or a C++ extension, not a Python error of the \
     program: run that rank's command by hand with TORCH_SHOW_CPP_STACKTRACES=1 to see where it aborts";
const EMULATED_ABORT_REMEDY: &str = "an emulator fault, not an error of the program (the emulated npu reports \
     what it cannot do as EmulatedNPUError or EmulatorLimitation, never by aborting): report it with the rank's \
     log; pre-flight the rest on CPU ranks (without --emulate-npu) or on an NPU";

/// The problem an unfinished rank shows and its remedy: an abort names what the rank was running
/// (the last check it reached and the last line it printed before the abort).
fn unfinished(rank: &RankOutcome, emulated: bool) -> (String, &'static str) {
    let abort = rank
        .tail
        .lines()
        .position(|line| ABORT_MARKERS.iter().any(|m| line.contains(m)));
    let Some(at) = abort else {
        let last = last_line(&rank.tail);
        return (
            format!("did not finish (last output: {last})"),
            UNFINISHED_REMEDY,
        );
    };
    let lines: Vec<&str> = rank.tail.lines().collect();
    let message = lines[at].trim();
    let before = lines[..at]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .map_or_else(|| "nothing".to_owned(), |l| format!("`{l}`"));
    let check = rank
        .checks
        .last()
        .map_or_else(|| "none".to_owned(), |c| format!("`{}`", c.name));
    let who = if emulated { "on the emulated npu " } else { "" };
    (
        format!(
            "aborted {who}(`{message}`) while running the program: last check reached {check}, last output \
             before the abort {before}"
        ),
        if emulated {
            EMULATED_ABORT_REMEDY
        } else {
            ABORT_REMEDY
        },
    )
}

/// The last line a rank printed before the stack dump it writes when it is stopped.
fn last_line(tail: &str) -> &str {
    tail.lines()
        .take_while(|l| !l.starts_with("Current thread 0x") && !l.starts_with("Thread 0x"))
        .filter(|l| !l.trim().is_empty())
        .last()
        .unwrap_or("it printed nothing")
}

/// Problems found, each with the ranks it was found on (none: about the ranks together).
#[derive(Default)]
struct Problems(Vec<(String, Vec<u32>)>);

impl Problems {
    fn add(&mut self, rank: u32, message: String) {
        match self.0.iter_mut().find(|(m, _)| *m == message) {
            Some((_, ranks)) => ranks.push(rank),
            None => self.0.push((message, vec![rank])),
        }
    }

    fn text(&self) -> String {
        self.0
            .iter()
            .map(|(message, ranks)| match ranks.as_slice() {
                [] => message.clone(),
                [one] => format!("rank {one} {message}"),
                many => format!("ranks {} {message}", join(many)),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn join(ranks: &[u32]) -> String {
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: u32, device: &str, digest: &str, backend: Option<&str>) -> RankOutcome {
        RankOutcome {
            rank,
            started: true,
            done: true,
            checks: Vec::new(),
            fact: Some(json!({
                "backend": backend,
                "requested_backend": backend,
                "init_calls": [{"backend": backend, "site": "train.py:3"}],
                "params_devices": {device: 4},
                "batch_devices": {device: 2},
                "steps": 2,
                "params_digest": digest,
            })),
            tail: String::new(),
        }
    }

    #[test]
    fn equal_parameters_on_distinct_devices_pass() {
        let check = ranks_check(
            "pipeline",
            &[
                rank(0, "npu:0", "a", Some("hccl")),
                rank(1, "npu:1", "a", Some("hccl")),
            ],
            2,
            1,
            false,
        );
        assert_eq!(check.status, Status::Pass, "{}", check.detail);
        let data = check.data.unwrap();
        assert_eq!(data["params_equal"], true);
        assert_eq!(data["backends"], json!(["hccl"]));
        assert_eq!(data["ranks"][1]["params_devices"], json!(["npu:1"]));
    }

    #[test]
    fn one_card_for_every_rank_and_unequal_parameters_fail() {
        let check = ranks_check(
            "pipeline",
            &[
                rank(0, "npu:0", "a", Some("hccl")),
                rank(1, "npu:0", "b", Some("hccl")),
            ],
            2,
            1,
            false,
        );
        assert_eq!(check.status, Status::Fail);
        assert!(
            check
                .detail
                .contains("ranks 0, 1 all keep their parameters on npu:0"),
            "{}",
            check.detail
        );
        assert!(check.detail.contains("not all-reduced"), "{}", check.detail);
        assert!(check.remedy.unwrap().contains("set_device(local_rank)"));
    }

    #[test]
    fn sharded_parameters_are_not_compared() {
        let mut ranks = [
            rank(0, "npu:0", "a", Some("hccl")),
            rank(1, "npu:1", "b", Some("hccl")),
        ];
        for r in &mut ranks {
            let fact = r.fact.as_mut().unwrap();
            fact["params_digest"] = Value::Null;
            fact["params_sharded"] = 4.into();
        }
        let check = ranks_check("pipeline", &ranks, 2, 1, false);
        assert_eq!(check.status, Status::Pass, "{}", check.detail);
        assert!(
            check.detail.contains("4 parameters are sharded"),
            "{}",
            check.detail
        );
        assert_eq!(check.data.unwrap()["params_equal"], Value::Null);
    }

    #[test]
    fn nccl_and_a_missing_rank_are_named() {
        let mut lost = rank(1, "npu:1", "a", Some("hccl"));
        lost.fact = None;
        lost.done = false;
        lost.tail = "step 1\nwaiting in all_reduce".to_owned();
        let mut nccl = rank(0, "npu:0", "a", None);
        nccl.fact.as_mut().unwrap()["requested_backend"] = "nccl".into();
        let check = ranks_check("pipeline", &[nccl, lost], 2, 1, false);
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.detail.contains("\"nccl\" at train.py:3"),
            "{}",
            check.detail
        );
        assert!(
            check
                .detail
                .contains("rank 1 did not finish (last output: waiting in all_reduce)"),
            "{}",
            check.detail
        );
        assert_eq!(
            check.data.unwrap()["ranks"][1]["last_output"],
            "step 1\nwaiting in all_reduce"
        );
    }

    #[test]
    fn an_aborted_rank_is_an_emulator_fault_naming_what_ran_never_an_empty_remedy() {
        let mut aborted = [
            rank(0, "npu:0", "a", Some("hccl")),
            rank(1, "npu:1", "a", Some("hccl")),
        ];
        for r in &mut aborted {
            r.done = false;
            r.checks = vec![Check::pass("pipeline.forward", "ok")];
            r.tail = "step 0 loss 0.25\nterminate called without an active exception\n".to_owned();
        }
        let check = ranks_check("pipeline", &aborted, 2, 1, true);
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.detail.contains(
                "ranks 0, 1 aborted on the emulated npu (`terminate called without an active exception`)"
            ),
            "{}",
            check.detail
        );
        assert!(
            check.detail.contains("`pipeline.forward`")
                && check.detail.contains("`step 0 loss 0.25`"),
            "{}",
            check.detail
        );
        let remedy = check.remedy.clone().unwrap();
        assert!(remedy.starts_with("an emulator fault"), "{remedy}");
        // Not emulated: an abort in native code, with a remedy too.
        let check = ranks_check("pipeline", &aborted, 2, 1, false);
        assert!(
            check
                .remedy
                .unwrap()
                .contains("TORCH_SHOW_CPP_STACKTRACES=1")
        );
        // A rank that only stopped (no abort) still gets a remedy.
        aborted[1].tail = "waiting in all_reduce".to_owned();
        aborted[0].done = true;
        let check = ranks_check("pipeline", &aborted, 2, 1, true);
        assert_eq!(check.status, Status::Fail);
        assert!(
            !check.remedy.unwrap_or_default().trim().is_empty(),
            "{}",
            check.detail
        );
    }
}
