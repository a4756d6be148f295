//! One verify run's harness work: the runtime checks, then the pipeline and data runs of the
//! chosen entry, each in its own harness process, their results added to the report.

use crate::cli::Args;
use crate::launch::Launch;
use crate::plan::Plan;
use crate::report::{Check, Configuration, Report, Status};
use crate::{envcheck, harness, interpreter, output, statics};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) struct Session<'a> {
    pub args: &'a Args,
    pub root: PathBuf,
    pub interpreter: interpreter::Interpreter,
    pub workspace: harness::Workspace,
    pub report: Report,
    /// No project file applies the patcher: the harness applies one for the run.
    pub harness_applies: bool,
    /// The torch-npu layer for the emulated runs was looked for ([`Session::transfer_layer`]).
    pub transfer_checked: bool,
    /// A `--parity` run in progress: whether it runs on the emulated npu (the reference does not).
    pub parity_env: Option<bool>,
    /// Variables set for the harness runs on top of [`Session::env`]'s (a re-run with a runtime
    /// patch switched off).
    pub extra_env: Vec<(String, OsString)>,
}

impl Session<'_> {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.args.timeout)
    }

    fn env(&self, ranks: Option<u32>) -> Vec<(String, OsString)> {
        let mut env: Vec<(String, OsString)> = vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("HYDRA_FULL_ERROR".into(), "1".into()),
        ];
        // As train.sh does: migrate_to_cloudrobo/ first on PYTHONPATH, and exported as
        // NPU_PATCHER_MIGRATE_DIR for the NPU setup `npu-scan --fix` inserts.
        let migrate = self.root.join(statics::MIGRATE_DIR);
        if migrate.is_dir() {
            let absolute = std::path::absolute(&migrate).unwrap_or_else(|_| migrate.clone());
            env.push(("NPU_PATCHER_MIGRATE_DIR".into(), absolute.into_os_string()));
            let mut paths = vec![migrate];
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                paths.extend(std::env::split_paths(&old));
            }
            if let Ok(joined) = std::env::join_paths(paths) {
                env.push(("PYTHONPATH".into(), joined));
            }
        }
        let emulate = self.parity_env.unwrap_or(self.args.emulate_npu);
        if self.parity_env == Some(false) {
            // The reference: the CPU (with --reference-device cuda the CUDA GPU), no NPU backend loaded.
            if self.args.reference_device == crate::cli::ReferenceDevice::Cpu {
                env.push(("CUDA_VISIBLE_DEVICES".into(), "".into()));
            }
            env.push(("TORCH_DEVICE_BACKEND_AUTOLOAD".into(), "0".into()));
        }
        if self.parity_env == Some(true) {
            // The port's random draws on the emulated npu follow the CPU stream, as the reference's do.
            env.push(("NPU_EMULATOR_RNG".into(), "cpu".into()));
        }
        if emulate {
            // No CUDA device (a machine with an NPU has none: code that still asks for CUDA must
            // fail here too), no backend autoloading (the emulator needs the npu name for itself),
            // and the mark of an emulated run (env_npu.sh then looks for no CANN).
            for (name, value) in patch_assets::emulator::RUN_ENV {
                env.push((name.into(), value.into()));
            }
        }
        if let Some(count) = ranks
            && self.args.emulate_npu
        {
            // One emulated card per rank of this machine; hccl's gloo talks over loopback.
            env.push(("NPU_EMULATOR_DEVICE_COUNT".into(), count.to_string().into()));
            if std::env::var_os("GLOO_SOCKET_IFNAME").is_none() {
                env.push(("GLOO_SOCKET_IFNAME".into(), "lo".into()));
            }
            // A rank waiting for a peer fails with gloo's timeout before verify's own.
            let collective = (self.args.timeout / 3).max(5);
            env.push((
                "NPU_EMULATOR_COLLECTIVE_TIMEOUT".into(),
                collective.to_string().into(),
            ));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// How many processes `--pipeline` runs under torchrun: `--nproc-per-node`, else the count
    /// the launch command after `--` (or the script it runs) sets when it is more than one.
    fn processes(&self) -> Option<u32> {
        if self.args.shapes_only {
            return None; // one process; the memory report divides its step over the cards
        }
        self.args.nproc_per_node.or_else(|| {
            crate::launch::launch_processes(&self.args.launch, &self.root).filter(|n| *n > 1)
        })
    }

    pub(crate) fn base_request(&mut self) -> Option<serde_json::Value> {
        let emulator = if self.args.emulate_npu {
            let first = !self.workspace.has_emulator();
            match self.workspace.emulator(&self.root) {
                Ok(found) => {
                    if first {
                        output::progress(
                            self.args.quiet,
                            &format!(
                                "emulated npu device from {} ({})",
                                found.origin,
                                found.dir.display()
                            ),
                        );
                    }
                    Some(found.dir.display().to_string())
                }
                Err(e) => {
                    self.report.checks.push(Check::fail(
                        "emulator",
                        e.to_string(),
                        "point NPU_PATCHER_EMULATOR_DIR at <skill dir>/emulator, or unset it",
                    ));
                    self.report.incomplete = true;
                    return None;
                }
            }
        } else {
            None
        };
        if emulator.is_some() && !self.transfer_checked {
            self.transfer_checked = true;
            self.transfer_layer();
        }
        let own = self
            .root
            .join(statics::MIGRATE_DIR)
            .join("runtime_patches.py");
        let patches = if own.is_file() {
            Some(own.display().to_string())
        } else {
            self.workspace
                .shipped_patches()
                .ok()
                .flatten()
                .map(|p| p.display().to_string())
        };
        Some(serde_json::json!({
            "project_root": self.root.display().to_string(),
            "emulate": self.args.emulate_npu,
            "emulator_dir": emulator,
            "patches_file": patches,
            "device_type": "npu",
            "steps": self.args.steps,
            "profile": !self.args.no_profile,
            "batches": self.args.batches,
            "shapes_only": self.args.shapes_only,
            "hbm_gb": self.args.hbm_gb,
            "shard_over": self.args.nproc_per_node.or_else(|| {
                crate::launch::launch_processes(&self.args.launch, &self.root).filter(|n| *n > 1)
            }),
        }))
    }

    /// Make the real `transfer_to_npu` of the torch-npu release that pairs with the interpreter's
    /// torch ready for the emulated runs (fetched once, cached); when it cannot be, the runs use
    /// the emulator's stand-in, and the report and stderr say why in one line.
    fn transfer_layer(&mut self) {
        use patch_assets::torch_npu_layer as layer;
        let forced = std::env::var("NPU_EMULATOR_TRANSFER")
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("standin"));
        if forced {
            return;
        }
        let mut python = vec![self.interpreter.program.as_os_str().to_owned()];
        python.extend(self.interpreter.args.iter().cloned());
        let ready = layer::torch_version(&python).and_then(|torch| {
            let release = layer::release_for(&torch)?;
            if layer::cached(&layer::cache_dir(), &release).is_none() {
                output::progress(
                    self.args.quiet,
                    &format!(
                        "fetching the Python layer of torch-npu {} (pairs with torch {torch}) for the real transfer_to_npu",
                        release.version
                    ),
                );
            }
            layer::ensure(&layer::cache_dir(), &release, &python, None)
        });
        if let Err(e) = ready {
            let line = format!(
                "the emulator's stand-in transfer_to_npu runs instead of the real one: {e}"
            );
            output::progress(self.args.quiet, &format!("warning: {line}"));
            self.report.checks.push(Check::warn(
                "emulator.transfer_to_npu",
                line,
                format!("fetch it: `{}`", layer::FETCH_COMMAND),
            ));
        }
    }

    pub(crate) fn harness(
        &mut self,
        mode: &str,
        request: serde_json::Value,
        shell: Option<&[String]>,
        ranks: Option<u32>,
    ) -> Option<harness::Outcome> {
        self.announce(mode);
        let env = self.env(ranks);
        let job = harness::Job {
            mode,
            files: None,
            request,
            cwd: &self.root,
            env: &env,
            timeout: self.timeout(),
            shell,
            ranks,
        };
        let ran = harness::run(&self.workspace, &self.interpreter, job);
        self.finish(mode, ran, ranks)
    }

    /// Two runs of `mode` at once, neither distributed, each with the environment of a parity run
    /// ([`PairedRun::emulated`]); then reported in order, as [`Self::harness`] reports one.
    pub(crate) fn harness_pair(
        &mut self,
        mode: &str,
        runs: [PairedRun; 2],
        shell: Option<&[String]>,
    ) -> [Option<harness::Outcome>; 2] {
        let saved = (self.parity_env, self.root.clone());
        let envs = runs.each_ref().map(|run| {
            self.announce(mode);
            self.parity_env = Some(run.emulated);
            self.root.clone_from(&run.cwd);
            self.env(None)
        });
        (self.parity_env, self.root) = saved;
        let timeout = self.timeout();
        let (workspace, interpreter) = (&self.workspace, &self.interpreter);
        let job = |run: PairedRun, env: &[(String, OsString)]| {
            harness::run(
                workspace,
                interpreter,
                harness::Job {
                    mode,
                    files: Some(run.files),
                    request: run.request,
                    cwd: &run.cwd,
                    env,
                    timeout,
                    shell,
                    ranks: None,
                },
            )
        };
        let [first, second] = runs;
        let [first_env, second_env] = &envs;
        let ran = std::thread::scope(|scope| {
            let other = scope.spawn(|| job(second, second_env));
            let here = job(first, first_env);
            let there = other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            [here, there]
        });
        ran.map(|ran| self.finish(mode, ran, None))
    }

    fn announce(&self, mode: &str) {
        output::progress(
            self.args.quiet,
            &format!(
                "{mode}: running the harness with {}",
                self.interpreter.info().command.join(" ")
            ),
        );
    }

    /// Report one harness run: its checks, its log, its configuration; the outcome, or None when
    /// it could not start.
    fn finish(
        &mut self,
        mode: &str,
        ran: Result<harness::Outcome, harness::Error>,
        ranks: Option<u32>,
    ) -> Option<harness::Outcome> {
        let first_check = self.report.checks.len();
        let mut outcome = match ran {
            Ok(o) => o,
            Err(e) => {
                self.report.checks.push(Check::fail(
                    &format!("{mode}.harness"),
                    e.to_string(),
                    "check $TMPDIR",
                ));
                self.report.incomplete = true;
                return None;
            }
        };
        output::progress(
            self.args.quiet,
            &format!("{mode}: done in {:.1} s", outcome.wall.as_secs_f64()),
        );
        if let (Some(hello), Some(info)) = (&outcome.hello, self.report.interpreter.as_mut()) {
            info.version = hello
                .get("python")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
        }
        let command = match (mode, &self.report.entry) {
            ("pipeline" | "data", Some(entry)) => entry.command.join(" "),
            _ => self.interpreter.info().command.join(" "),
        };
        if let Err(why) = harness::keep_logs(&self.root, &command, &mut outcome) {
            output::progress(
                false,
                &format!("warning: the {mode} run's log was not kept: {why}"),
            );
        }
        let run_failed = self.report_output(&outcome);
        if mode == "pipeline"
            && let Some(executed) = outcome.facts.get("executed")
        {
            self.report.executed = Some(executed.clone());
        }
        if let Some(log) = &outcome.kept_log {
            output::progress(
                self.args.quiet,
                &format!("{mode}: the program's output is in {log}"),
            );
        }
        // The emulator's own limit stopped the run: no verdict on the user's code, in either direction.
        if outcome.checks.iter().any(|c| {
            c.data
                .as_ref()
                .and_then(|d| d.get("reason"))
                .is_some_and(|r| r == "emulator-limitation")
        }) {
            self.report.incomplete = true;
        }
        if let Some(count) = ranks {
            let mut check = crate::ranks::ranks_check(
                mode,
                &outcome.ranks,
                count,
                self.args.nnodes,
                self.args.emulate_npu,
            );
            check.emulated = self.args.emulate_npu;
            self.report.checks.push(check);
        }
        if let Some(check) = outcome.failure_check(&self.interpreter, self.timeout()) {
            self.report.checks.push(check);
        }
        if outcome.never_started() || outcome.spawn_error.is_some() || outcome.interrupted {
            self.report.incomplete = true;
        }
        let configuration = self.configuration(&outcome, ranks);
        for check in &mut self.report.checks[first_check..] {
            check.configuration = Some(configuration.clone());
        }
        let mut info = outcome.info();
        if run_failed && info.output_tail.is_none() {
            info.output_tail = Some(outcome.tail.clone());
        }
        self.report.harness_runs.push(info);
        Some(outcome)
    }

    /// The configuration `outcome` ran in: its processes, emulated or not, and the versions the
    /// harness reported.
    fn configuration(&self, outcome: &harness::Outcome, ranks: Option<u32>) -> Configuration {
        let version = |name: &str| {
            outcome
                .facts
                .get("versions")
                .and_then(|v| v.get(name))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        Configuration::new(
            ranks.unwrap_or(1),
            self.args.emulate_npu,
            version("torch"),
            version("torch_npu"),
        )
    }

    /// Add the run's checks to the report; a failed `<mode>.run` check (the program ended before
    /// its steps or batches, erred, or exited having trained nothing) quotes the program's last
    /// output and names the kept log. Whether such a check failed.
    fn report_output(&mut self, outcome: &harness::Outcome) -> bool {
        let run = format!("{}.run", outcome.mode);
        let mut failed = false;
        for check in &outcome.checks {
            let mut check = check.clone();
            if check.name == run && check.status == Status::Fail {
                failed = true;
                let output = outcome.program_output();
                if output.trim().is_empty() {
                    check.detail.push_str("; the program printed nothing");
                } else {
                    let _ = write!(check.detail, "; its last output:\n{output}");
                }
                if let Some(log) = &outcome.kept_log {
                    let _ = write!(check.detail, "\n(all of it: {log})");
                }
                let data = check.data.get_or_insert_with(|| serde_json::json!({}));
                if let Some(data) = data.as_object_mut() {
                    data.insert("output_tail".into(), output.into());
                    if let Some(log) = &outcome.kept_log {
                        data.insert("log".into(), log.clone().into());
                    }
                }
            }
            self.report.checks.push(check);
        }
        failed
    }

    pub(crate) fn run_all(&mut self, plan: Result<Plan, String>) {
        if self.args.runtime {
            self.runtime();
            if self.report.incomplete {
                return;
            }
        }
        if !(self.args.pipeline || self.args.data || self.args.parity) {
            return;
        }
        let plan = match plan {
            Ok(plan) => plan,
            Err(why) => {
                self.report.checks.push(Check::fail(
                    "entry",
                    why,
                    "name the training entry with --entry FILE (and --config), or give its launch command after `--`",
                ));
                self.report.incomplete = true;
                return;
            }
        };
        let mut detail = format!(
            "`{}`; chosen: {}",
            plan.info.command.join(" "),
            plan.info.chosen_by
        );
        if let Some(source) = &plan.info.config_source {
            let _ = write!(detail, "; config: {source}");
        }
        let ranks = if self.args.pipeline {
            self.processes()
        } else {
            None
        };
        if self.args.nnodes != 1 {
            self.report.checks.push(Check::fail(
                "entry",
                format!(
                    "--nnodes {}: verify starts the ranks of this machine only",
                    self.args.nnodes
                ),
                "pre-flight one node with --nnodes 1 --nproc-per-node N; for a multi-node run set the rendezvous \
                 and HCCL_IF_IP / HCCL_SOCKET_IFNAME on each node (see the guide's two-node section)",
            ));
            self.report.incomplete = true;
            return;
        }
        match (ranks, &plan.entry_file) {
            (Some(n), _) => {
                let _ = write!(
                    detail,
                    "; {n} processes under torchrun (one per card; run as `python -m torch.distributed.run` of \
                     the interpreter, so no torchrun on PATH is needed)"
                );
            }
            (None, Some(entry)) if self.args.pipeline => {
                let launchers = crate::launch::project_launchers(&self.root, entry);
                if let Some((script, n)) = launchers.iter().find(|(_, n)| *n > 1) {
                    let _ = write!(
                        detail,
                        "; {script} runs it with {n} processes: add --nproc-per-node 2 (or more) to pre-flight \
                         the distributed path"
                    );
                }
            }
            _ => {}
        }
        self.report.checks.push(Check::pass("entry", detail));
        let launch = plan.launch.to_json(&self.root);
        let trains = plan.info.trains;
        let shell_words = match &plan.launch {
            Launch::Shell { words } => Some(words.clone()),
            _ => None,
        };
        self.report.entry = Some(plan.info);
        // Both runs in one call: what the pipeline run creates must not change the data run.
        let before = (self.args.pipeline && self.args.data)
            .then(|| crate::isolate::snapshot(&self.root))
            .flatten();
        for (on, mode) in [(self.args.pipeline, "pipeline"), (self.args.data, "data")] {
            if !on {
                continue;
            }
            if mode == "data"
                && let Some(before) = &before
            {
                self.set_aside_pipeline_outputs(before);
            }
            let Some(mut request) = self.base_request() else {
                return;
            };
            request["launch"] = launch.clone();
            request["apply_patcher"] = self.harness_applies.into();
            request["entry_trains"] = trains.into();
            // The user chose the entry: remedies must not tell them to choose one.
            request["entry_named"] =
                (self.args.entry.is_some() || !self.args.launch.is_empty()).into();
            let shell = shell_words.as_deref();
            let mode_ranks = if mode == "pipeline" { ranks } else { None };
            if let Some(count) = mode_ranks {
                request["distributed"] = serde_json::json!({
                    "nproc_per_node": count,
                    "nnodes": self.args.nnodes,
                });
            }
            let Some(outcome) = self.harness(mode, request, shell, mode_ranks) else {
                return;
            };
            if outcome.never_started() || outcome.interrupted {
                return;
            }
            self.scan_output_for_fallbacks(&outcome);
        }
        if self.args.parity {
            self.parity(&launch, shell_words.as_deref(), trains);
        }
    }

    /// Move what the pipeline run created in the project aside (`isolate`), and say so.
    fn set_aside_pipeline_outputs(&mut self, before: &std::collections::BTreeSet<PathBuf>) {
        let Some(after) = crate::isolate::snapshot(&self.root) else {
            return;
        };
        let created = crate::isolate::created(before, &after);
        if created.is_empty() {
            return;
        }
        let stamp = jiff::Timestamp::now().strftime("%Y%m%d_%H%M%S").to_string();
        let listed = created
            .iter()
            .take(5)
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match crate::isolate::set_aside(
            &self.root,
            &created,
            &format!("verify_{stamp}_pipeline_outputs"),
        ) {
            Ok(folder) => {
                output::progress(
                    self.args.quiet,
                    &format!(
                        "data: the pipeline run created {} path(s) in the project ({listed}); moved to {folder} so \
                         the data run starts from the project as the pipeline run found it",
                        created.len()
                    ),
                );
                if let Some(run) = self
                    .report
                    .harness_runs
                    .iter_mut()
                    .rev()
                    .find(|r| r.mode == "pipeline")
                {
                    run.set_aside = created
                        .iter()
                        .map(|p| format!("{folder}/{}", p.display()))
                        .collect();
                }
            }
            Err(why) => output::progress(
                false,
                &format!("warning: the data run may see what the pipeline run created: {why}"),
            ),
        }
    }

    fn runtime(&mut self) {
        let Some(request) = self.base_request() else {
            return;
        };
        let Some(outcome) = self.harness("runtime", request, None, None) else {
            return;
        };
        if outcome.never_started() {
            return;
        }
        let first_check = self.report.checks.len();
        self.runtime_environment(&outcome);
        let configuration = self.configuration(&outcome, None);
        for check in &mut self.report.checks[first_check..] {
            check.configuration = Some(configuration.clone());
        }
    }

    /// The runtime checks verify makes itself from what the harness found: the visible devices
    /// and the performance environment.
    fn runtime_environment(&mut self, outcome: &harness::Outcome) {
        let count = outcome
            .facts
            .get("device_count")
            .and_then(serde_json::Value::as_u64);
        let visible = std::env::var("ASCEND_RT_VISIBLE_DEVICES").ok();
        if count.is_some() || visible.is_some() {
            self.report.checks.push(envcheck::visible_devices(
                visible.as_deref(),
                count,
                self.args.emulate_npu,
            ));
        }
        let shipped = patch_assets::get("templates/env_npu.sh").map(String::from_utf8_lossy);
        let project =
            std::fs::read_to_string(self.root.join(statics::MIGRATE_DIR).join("env_npu.sh")).ok();
        match shipped {
            Some(shipped) => {
                self.report.checks.push(envcheck::perf_env(
                    &shipped,
                    project.as_deref(),
                    &|name| std::env::var(name).ok(),
                ));
            }
            None => self.report.checks.push(Check::skip(
                "runtime.perf_env",
                "this npu-verify build carries no env_npu.sh to compare with",
            )),
        }
    }

    /// CPU fallbacks printed by C++ (not as Python warnings) only show in the output.
    fn scan_output_for_fallbacks(&mut self, outcome: &harness::Outcome) {
        let name = format!("{}.cpu_fallback", outcome.mode);
        let printed = outcome
            .tail
            .lines()
            .filter(|l| l.contains("fall back to run on the CPU"))
            .count();
        if printed == 0 {
            return;
        }
        if let Some(check) = self
            .report
            .checks
            .iter_mut()
            .find(|c| c.name == name && c.status == Status::Pass)
        {
            check.status = Status::Warn;
            check.detail = format!("{printed} CPU-fallback messages in the program's output");
            check.remedy = Some(
                "each fallback copies tensors to the host and back; set TORCH_NPU_FALLBACK_CPU_DISABLE=1 to find \
                 the call (NPU-FACTS.md)"
                    .to_owned(),
            );
        }
    }
}

/// One of the two runs of [`Session::harness_pair`].
pub(crate) struct PairedRun {
    /// The stem of its files in the workspace (two runs of one mode at once need their own).
    pub files: &'static str,
    pub request: serde_json::Value,
    /// Where it runs; also the project whose `migrate_to_cloudrobo/` its environment names.
    pub cwd: PathBuf,
    /// The port's environment on the emulated npu (true) or the CPU reference's (false), as for
    /// [`Session::parity_run`].
    pub emulated: bool,
}
