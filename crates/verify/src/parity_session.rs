//! `--parity` in a verify session: the reference and the port run aligned, compared, and, when
//! the port diverges, run again with one candidate cause undone at a time to say why
//! ([`crate::parity_why`]); when none explains it, an msprobe configuration for an op-level look.

use crate::cli::ReferenceDevice;
use crate::hunks;
use crate::parity_why::{self, Effect, Kind, Place};
use crate::report::{Check, Status};
use crate::session::{PairedRun, Session};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

impl Session<'_> {
    /// One `parity` harness run of `role`: its record, or None (the report says why and is
    /// marked incomplete: the runs cannot be aligned).
    pub(crate) fn parity_run(
        &mut self,
        role: &str,
        request: serde_json::Value,
        shell: Option<&[String]>,
        emulated: bool,
    ) -> Option<serde_json::Value> {
        let record_path = request["parity"]["record"].as_str().map(PathBuf::from)?;
        let saved_env = self.parity_env.take();
        self.parity_env = Some(emulated);
        let outcome = self.harness("parity", request, shell, None);
        self.parity_env = saved_env;
        self.parity_record(role, &record_path, outcome)
    }

    /// The record of the parity run of `role` that ended as `outcome`, or None (the report says
    /// why and is marked incomplete).
    fn parity_record(
        &mut self,
        role: &str,
        record_path: &Path,
        outcome: Option<crate::harness::Outcome>,
    ) -> Option<serde_json::Value> {
        let outcome = outcome?;
        let ran = outcome
            .checks
            .iter()
            .find(|c| c.name == format!("parity.{role}"))
            .cloned();
        let Some(ran) = ran else {
            self.report.checks.push(Check::fail(
                "parity.align",
                format!("the {role} run recorded nothing (the harness did not finish)"),
                "see parity.harness and the run's log",
            ));
            self.report.incomplete = true;
            return None;
        };
        if ran.status == Status::Fail {
            self.report.incomplete = true;
            return None;
        }
        let record = std::fs::read(record_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
        if record.is_none() {
            self.report.checks.push(Check::fail(
                "parity.align",
                format!(
                    "the {role} run's record {} cannot be read",
                    record_path.display()
                ),
                "check $TMPDIR",
            ));
            self.report.incomplete = true;
        }
        record
    }

    /// `--parity`: the reference (CPU, no runtime patches, no emulator; twice, with different
    /// thread counts, for its noise floor) and the port, aligned, then compared; or, with
    /// `--record`/`--compare`, the port alone.
    pub(crate) fn parity(
        &mut self,
        launch: &serde_json::Value,
        shell: Option<&[String]>,
        trains: Option<bool>,
    ) {
        let dir = self.workspace.path().to_owned();
        let Some(mut base) = self.base_request() else {
            return;
        };
        base["launch"] = launch.clone();
        base["entry_trains"] = trains.into();
        base["profile"] = false.into();
        base["entry_named"] = (self.args.entry.is_some() || !self.args.launch.is_empty()).into();
        let batches = |record: &std::path::Path| {
            let mut name = record.as_os_str().to_owned();
            name.push(".batches.pt");
            PathBuf::from(name)
        };
        let emulated = self.args.emulate_npu;
        let mut port_request = base.clone();
        port_request["apply_patcher"] = self.harness_applies.into();

        if let Some(file) = &self.args.record {
            port_request["parity"] = serde_json::json!({
                "role": "record", "record": file.display().to_string(),
                "batches_out": batches(file).display().to_string(),
            });
            if let Some(record) = self.parity_run("record", port_request, shell, emulated) {
                let steps = record["steps"].as_array().map_or(0, Vec::len);
                let events = record["events"].as_array().map_or(0, Vec::len);
                self.report.checks.push(Check::pass(
                    "parity.record",
                    format!(
                        "{steps} steps, {events} module events recorded in {} (batches: {})",
                        file.display(),
                        batches(file).display()
                    ),
                ));
            }
            return;
        }

        let (reference, noise, same_kernels, port) = if let Some(file) = &self.args.compare {
            let Some(reference) = std::fs::read(file)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            else {
                self.report.checks.push(Check::fail(
                    "parity.align",
                    format!("{} is not a parity record", file.display()),
                    "make one with `npu-verify PROJECT --parity --record FILE`",
                ));
                self.report.incomplete = true;
                return;
            };
            let saved = batches(file);
            port_request["parity"] = serde_json::json!({
                "role": "port", "record": dir.join("parity-port.json").display().to_string(),
                "batches_in": saved.is_file().then(|| saved.display().to_string()),
            });
            let same = reference["device"] == "cpu" && emulated;
            let Some(port) = self.parity_run("port", port_request.clone(), shell, emulated) else {
                return;
            };
            (reference, None, same, port)
        } else {
            let cuda = self.args.reference_device == ReferenceDevice::Cuda;
            if cuda && !self.cuda_present() {
                return;
            }
            let checkout = match &self.args.reference_rev {
                Some(rev) => match self.reference_checkout(rev) {
                    Some(dir) => Some(dir),
                    None => return,
                },
                None => None,
            };
            let mut reference_request = base.clone();
            reference_request["emulate"] = false.into();
            reference_request["emulator_dir"] = serde_json::Value::Null;
            reference_request["patches_file"] = serde_json::Value::Null;
            reference_request["apply_patcher"] = false.into();
            let batches_file = dir.join("parity-batches.pt");
            reference_request["parity"] = serde_json::json!({
                "role": "reference", "record": dir.join("parity-reference.json").display().to_string(),
                "batches_out": batches_file.display().to_string(), "no_patches": true,
            });
            // --reference-rev: both reference runs in the checkout of that revision.
            let port_root = self.root.clone();
            if let Some(checkout) = &checkout {
                rebase(&mut reference_request, &port_root, checkout);
                self.root.clone_from(checkout);
            }
            let reference = self.parity_run("reference", reference_request.clone(), shell, false);
            let reference_root = std::mem::replace(&mut self.root, port_root);
            let Some(reference) = reference else {
                return;
            };
            // The reference's own noise floor (the same run with another thread count) and the
            // port both replay the reference's batches: they run at once.
            let threads = reference["threads"].as_u64().unwrap_or(1);
            let noise_path = dir.join("parity-noise.json");
            reference_request["parity"] = serde_json::json!({
                "role": "reference-noise", "record": noise_path.display().to_string(),
                "batches_in": batches_file.display().to_string(), "no_patches": true,
                "threads": if threads > 1 { 1 } else { 2 },
            });
            let port_path = dir.join("parity-port.json");
            port_request["parity"] = serde_json::json!({
                "role": "port", "record": port_path.display().to_string(),
                "batches_in": batches_file.is_file().then(|| batches_file.display().to_string()),
            });
            let [noise, port] = self.harness_pair(
                "parity",
                [
                    PairedRun {
                        files: "parity-noise",
                        request: reference_request,
                        cwd: reference_root,
                        emulated: false,
                    },
                    PairedRun {
                        files: "parity-port",
                        request: port_request.clone(),
                        cwd: self.root.clone(),
                        emulated,
                    },
                ],
                shell,
            );
            let noise = self.parity_record("reference-noise", &noise_path, noise);
            let Some(port) = self.parity_record("port", &port_path, port) else {
                return;
            };
            (reference, noise, emulated && !cuda, port)
        };
        let replayed = port["batches_replayed"].as_u64().unwrap_or(0);
        let drawn = reference["batches_drawn"].as_u64().unwrap_or(0);
        let mut checks = crate::parity::compare(&reference, &port, noise.as_ref(), same_kernels);
        if let Some(modules) = checks.iter_mut().find(|c| c.name == "parity.modules")
            && let Some(data) = modules.data.as_mut()
        {
            data["batches_replayed"] = replayed.into();
            data["reference_batches"] = drawn.into();
        }
        for check in &mut checks {
            check.emulated = emulated;
        }
        let first = checks
            .iter()
            .find(|c| c.name == "parity.modules")
            .and_then(|c| c.data.as_ref())
            .map(|d| d["first_divergence"].clone())
            .filter(|f| !f.is_null());
        self.report.checks.extend(checks);
        if let Some(first) = first {
            let aligned = Aligned {
                reference: &reference,
                noise: noise.as_ref(),
                same_kernels,
                port: &port,
                request: &port_request,
                shell,
            };
            let restored = self.explain(&aligned, &first);
            if !restored {
                self.msprobe_config(&first);
            }
        }
    }

    /// Run the port again with each candidate cause of the divergence at `first` undone, closest
    /// first, at most `--why-runs` times, until one brings it back within tolerance: the check
    /// `parity.why`. Whether one did.
    fn explain(&mut self, aligned: &Aligned<'_>, first: &Value) -> bool {
        let place = Place::of(first, aligned.port);
        let source = place
            .file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(self.root.join(f)).ok());
        let mut candidates = parity_why::patch_candidates(aligned.port, &place, source.as_deref());
        let mut base = None;
        let mut notes = Vec::new();
        let found_base = match &self.args.reference_rev {
            Some(rev) => hunks::reference_base(&self.root, rev),
            None => hunks::base(&self.root),
        };
        match found_base {
            Ok((commit, why)) => {
                let mut files: Vec<String> = place.file.iter().cloned().collect();
                if let Some((file, _)) = &place.called_at
                    && !files.contains(file)
                {
                    files.push(file.clone());
                }
                for file in files {
                    match hunks::hunks(&self.root, &commit, &file) {
                        Ok(found) => candidates.extend(parity_why::hunk_candidates(found, &place)),
                        Err(e) => notes.push(format!("no diff of {file}: {e}")),
                    }
                }
                base = Some((commit, why));
            }
            Err(why) => notes.push(format!("your own changes were not tried: {why}")),
        }
        let candidates = parity_why::ranked(candidates);
        let budget = usize::try_from(self.args.why_runs).unwrap_or(usize::MAX);
        let short_base = base
            .as_ref()
            .map(|(c, _)| c.chars().take(12).collect::<String>());
        let mut tried = Vec::new();
        let mut restored = None;
        for (index, candidate) in candidates.iter().take(budget).enumerate() {
            crate::output::progress(
                self.args.quiet,
                &format!(
                    "parity: why, run {} of at most {}: the port with {} undone",
                    index + 1,
                    budget.min(candidates.len()),
                    candidate.label()
                ),
            );
            let started = std::time::Instant::now();
            let outcome = self.rerun(aligned, candidate, index);
            let effect = match outcome {
                Ok(record) => {
                    let checks = crate::parity::compare(
                        aligned.reference,
                        &record,
                        aligned.noise,
                        aligned.same_kernels,
                    );
                    parity_why::effect(&checks, &place)
                }
                Err(why) => Effect::Failed(why),
            };
            let mut entry = candidate.to_json();
            entry["effect"] = effect.as_str().into();
            entry["wall_s"] = started.elapsed().as_secs_f64().into();
            match &effect {
                Effect::Moves(now) => entry["now"] = now.clone().into(),
                Effect::Failed(why) => entry["why"] = why.clone().into(),
                _ => {}
            }
            tried.push(entry);
            if effect == Effect::Restores {
                restored = Some(candidate.clone());
                break;
            }
        }
        let untried: Vec<Value> = candidates
            .iter()
            .skip(tried.len())
            .map(parity_why::Candidate::to_json)
            .collect();
        let stopped_by_budget = restored.is_none() && candidates.len() > budget;
        let mut data = json!({
            "module": place.module, "step": place.step, "direction": place.direction,
            "tried": tried, "not_tried": untried, "budget": self.args.why_runs,
            "stopped_by_budget": stopped_by_budget,
            "base": base.as_ref().map(|(c, why)| json!({"commit": c, "why": why})),
            "notes": notes,
        });
        let check = if let Some(candidate) = &restored {
            let (cause, remedy) = parity_why::cause(candidate, &place, short_base.as_deref());
            data["cause"] = candidate.to_json();
            data["cause"]["explanation"] = cause.clone().into();
            Check::fail("parity.why", cause, remedy)
        } else {
            let mut detail = if candidates.is_empty() {
                format!(
                    "no runtime patch acted in or around {} before step {}, and no change of yours touches its file",
                    place.module, place.step
                )
            } else {
                let moved: Vec<String> = tried
                    .iter()
                    .filter(|t| t["effect"] == "moves")
                    .map(|t| {
                        format!(
                            "{} moves it ({})",
                            t["at"].as_str().or(t["patch"].as_str()).unwrap_or("?"),
                            t["now"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                format!(
                    "none of the {} tried brings {} back within tolerance{}",
                    tried.len(),
                    place.module,
                    if moved.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", moved.join("; "))
                    }
                )
            };
            if stopped_by_budget {
                let _ = write!(
                    detail,
                    "; --why-runs {} stopped it, {} more not tried (closest next: {})",
                    self.args.why_runs,
                    candidates.len() - tried.len(),
                    candidates[tried.len()].label()
                );
            }
            for note in &notes {
                let _ = write!(detail, "; {note}");
            }
            Check::warn(
                "parity.why",
                detail,
                "look inside the module at op level (parity.msprobe), or raise --why-runs",
            )
        };
        let mut check = check.with_data(data);
        check.emulated = self.args.emulate_npu;
        self.report.checks.push(check);
        restored.is_some()
    }

    /// The port run again with `candidate` undone: its record, or why it did not finish. The
    /// run's own checks and harness entry stay out of the report.
    fn rerun(
        &mut self,
        aligned: &Aligned<'_>,
        candidate: &parity_why::Candidate,
        index: usize,
    ) -> Result<Value, String> {
        let dir = self.workspace.path().to_owned();
        let mut request = aligned.request.clone();
        request["parity"]["record"] = dir
            .join(format!("parity-why-{index}.json"))
            .display()
            .to_string()
            .into();
        let saved_env = self.extra_env.clone();
        let saved_root = self.root.clone();
        match &candidate.kind {
            Kind::Patch(name) => {
                let off = match std::env::var("NPU_PATCHES_DISABLE") {
                    Ok(old) if !old.trim().is_empty() => format!("{old},{name}"),
                    _ => name.clone(),
                };
                self.extra_env
                    .push(("NPU_PATCHES_DISABLE".into(), off.into()));
            }
            Kind::Hunk(hunk) => {
                let text = std::fs::read_to_string(self.root.join(&hunk.file))
                    .map_err(|e| format!("cannot read {}: {e}", hunk.file))?;
                let copy = dir.join(format!("project-why-{index}"));
                hunks::project_copy(&self.root, &copy, &hunk.file, &hunks::revert(&text, hunk))?;
                rebase(&mut request, &self.root, &copy);
                self.root = copy;
            }
        }
        let checks = self.report.checks.len();
        let runs = self.report.harness_runs.len();
        let incomplete = self.report.incomplete;
        let emulated = self.args.emulate_npu;
        let record = self.parity_run("port", request, aligned.shell, emulated);
        let why = self.report.checks[checks..]
            .iter()
            .find(|c| c.status == Status::Fail)
            .map(|c| c.detail.lines().next().unwrap_or("").to_owned());
        self.report.checks.truncate(checks);
        self.report.harness_runs.truncate(runs);
        self.report.incomplete = incomplete;
        self.extra_env = saved_env;
        self.root = saved_root;
        record.ok_or_else(|| why.unwrap_or_else(|| "the run recorded nothing".to_owned()))
    }

    /// `--reference-device cuda`: whether the interpreter's torch sees a CUDA GPU; when not, the
    /// runs cannot be aligned (`parity.align`, exit 2).
    fn cuda_present(&mut self) -> bool {
        let out = std::process::Command::new(&self.interpreter.program)
            .args(&self.interpreter.args)
            .args([
                "-c",
                "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)",
            ])
            .current_dir(&self.root)
            .output();
        let why = match out {
            Ok(out) if out.status.success() => return true,
            Ok(out) if out.status.code() == Some(3) => {
                "torch sees no CUDA GPU on this machine".to_owned()
            }
            Ok(out) => format!(
                "the interpreter cannot import torch: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
            ),
            Err(e) => format!("the interpreter cannot start: {e}"),
        };
        self.report.checks.push(Check::fail(
            "parity.align",
            format!("--reference-device cuda: {why}"),
            "run it where a CUDA GPU and a CUDA build of torch are (or make a record there with \
             `--parity --record FILE` and use `--compare FILE` here), or drop --reference-device for a CPU reference",
        ));
        self.report.incomplete = true;
        false
    }

    /// `--reference-rev REV`: the project at REV, extracted into the workspace; None when it
    /// cannot be (`parity.align`, exit 2).
    fn reference_checkout(&mut self, rev: &str) -> Option<PathBuf> {
        let dest = self.workspace.path().join("reference-rev");
        match hunks::checkout(&self.root, rev, &dest) {
            Ok(commit) => {
                self.report.checks.push(Check::pass(
                    "parity.reference_rev",
                    format!(
                        "the reference is {rev} (commit {}), extracted from git into a temporary folder and run \
                         on the {}",
                        commit.chars().take(12).collect::<String>(),
                        if self.args.reference_device == ReferenceDevice::Cuda { "CUDA GPU" } else { "CPU" }
                    ),
                ));
                Some(dest)
            }
            Err(why) => {
                self.report.checks.push(Check::fail(
                    "parity.align",
                    format!("--reference-rev {rev}: {why}"),
                    "name a commit, branch or tag of the project's repository (`git log --oneline`)",
                ));
                self.report.incomplete = true;
                None
            }
        }
    }

    /// `parity.msprobe`: msprobe configurations scoped to the diverging module, and how to use them.
    fn msprobe_config(&mut self, first: &Value) {
        let dir = self.root.join(crate::statics::MIGRATE_DIR).join("msprobe");
        let check = match crate::msprobe::write(&dir, first) {
            Ok((files, how)) => Check::warn(
                "parity.msprobe",
                how,
                "dump both sides with msprobe and compare them op by op",
            )
            .with_data(json!({
                "files": files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                "scope": crate::msprobe::scope_name(first),
            })),
            Err(why) => Check::warn(
                "parity.msprobe",
                format!("no msprobe configuration written: {why}"),
                "check that migrate_to_cloudrobo/ is writable",
            ),
        };
        self.report.checks.push(check);
    }
}

/// What the port was compared with, for the re-runs.
pub(crate) struct Aligned<'a> {
    pub reference: &'a Value,
    pub noise: Option<&'a Value>,
    pub same_kernels: bool,
    pub port: &'a Value,
    pub request: &'a Value,
    pub shell: Option<&'a [String]>,
}

/// Every string of `value` under `from` moved under `to` (a request for a copy of the project).
fn rebase(value: &mut Value, from: &Path, to: &Path) {
    match value {
        Value::String(text) => {
            if let Ok(rest) = Path::new(text.as_str()).strip_prefix(from) {
                *text = to.join(rest).display().to_string();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rebase(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| rebase(v, from, to)),
        _ => {}
    }
}
