//! The shell templates, run for real: shellcheck, `env_npu.sh` under bash, `train.sh` end to end.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn template(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/templates")
        .join(name)
}

/// A sandbox: an empty HOME, no CANN anywhere unless a test installs a fake one.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("home")).unwrap();
        Sandbox { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// bash with a clean environment, the search confined to the sandbox.
    fn bash(&self, script: &str, envs: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script).env_clear();
        cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.env("HOME", self.path().join("home"));
        cmd.env("NPU_ASCEND_ROOTS", self.path().join("roots"));
        cmd.env("NPU_CANN_INSTALL_INFO", self.path().join("install.info"));
        cmd.env("ENV_NPU", template("env_npu.sh"));
        cmd.current_dir(self.path());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// A fake CANN `set_env.sh` at `root/<layout>/set_env.sh` that counts how often it runs and,
    /// like the real one, reads possibly-unset variables.
    fn fake_cann(&self, root: &Path, layout: &str) -> PathBuf {
        let dir = root.join(layout);
        fs::create_dir_all(&dir).unwrap();
        let script = dir.join("set_env.sh");
        fs::write(
            &script,
            format!(
                "export ASCEND_HOME_PATH={home}/latest\n\
                 export ASCEND_OPP_PATH=$ASCEND_HOME_PATH/opp\n\
                 export LD_LIBRARY_PATH=$ASCEND_HOME_PATH/lib64:$LD_LIBRARY_PATH\n\
                 export PATH=$ASCEND_HOME_PATH/bin:$PATH\n\
                 echo sourced >> {count}\n",
                home = dir.display(),
                count = self.path().join("count").display()
            ),
        )
        .unwrap();
        script
    }

    fn times_sourced(&self) -> usize {
        fs::read_to_string(self.path().join("count")).map_or(0, |s| s.lines().count())
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn shell_templates_pass_shellcheck() {
    let status = Command::new("shellcheck").arg("--version").output();
    assert!(
        status.is_ok(),
        "shellcheck is required for this test and was not found on PATH; install it (apt-get install -y shellcheck)"
    );
    let dir = template("");
    let out = Command::new("shellcheck")
        .args(["-x", "--severity=style", "env_npu.sh", "train.sh"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck found problems:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn env_finds_the_toolkit_layout_and_is_idempotent_under_set_u() {
    let sb = Sandbox::new();
    let set_env = sb.fake_cann(&sb.path().join("roots"), "ascend-toolkit");
    let out = sb.bash(
        r#"set -euo pipefail
        . "$ENV_NPU"; first="$(env | sort)"
        . "$ENV_NPU"; second="$(env | sort)"
        [ "$first" = "$second" ] && echo same
        echo "home=$ASCEND_HOME_PATH"
        echo "sourced=$NPU_ENV_CANN_SOURCED"
        echo "tq=$TASK_QUEUE_ENABLE alloc=$PYTORCH_NPU_ALLOC_CONF""#,
        &[],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("same\n"),
        "environment changed on the second source:\n{text}"
    );
    assert!(
        text.contains(&format!("sourced={}", set_env.display())),
        "{text}"
    );
    assert!(
        text.contains("tq=2 alloc=expandable_segments:True"),
        "{text}"
    );
    assert_eq!(sb.times_sourced(), 1, "set_env.sh must run once");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn env_reads_install_path_from_the_install_record_for_the_cann_layout() {
    let sb = Sandbox::new();
    let root = sb.path().join("opt/my ascend");
    let set_env = sb.fake_cann(&root, "cann");
    fs::write(
        sb.path().join("install.info"),
        format!("Install_Path={}\nOther=1", root.display()),
    )
    .unwrap();
    let out = sb.bash(r#"set -u; . "$ENV_NPU"; echo "$NPU_ENV_CANN_SOURCED""#, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), set_env.display().to_string());
}

#[test]
fn env_explicit_set_env_wins_and_preloaded_cann_is_not_sourced_again() {
    let sb = Sandbox::new();
    let other = sb.fake_cann(&sb.path().join("elsewhere"), "x");
    sb.fake_cann(&sb.path().join("roots"), "ascend-toolkit");
    let explicit = other.display().to_string();
    let out = sb.bash(
        r#"set -u; . "$ENV_NPU"; echo "$NPU_ENV_CANN_SOURCED""#,
        &[("NPU_CANN_SET_ENV", &explicit)],
    );
    assert_eq!(stdout(&out).trim(), explicit);
    let sb = Sandbox::new();
    sb.fake_cann(&sb.path().join("roots"), "ascend-toolkit");
    let out = sb.bash(
        r#"set -u; . "$ENV_NPU"; echo "$NPU_ENV_CANN_SOURCED""#,
        &[
            ("ASCEND_HOME_PATH", "/pre"),
            ("ASCEND_OPP_PATH", "/pre/opp"),
        ],
    );
    assert_eq!(stdout(&out).trim(), "preloaded:/pre");
    assert_eq!(sb.times_sourced(), 0);
}

#[test]
fn env_warns_clearly_without_cann_and_still_sets_the_performance_defaults() {
    let sb = Sandbox::new();
    let out = sb.bash(
        r#"set -euo pipefail; . "$ENV_NPU"; echo "tq=$TASK_QUEUE_ENABLE hccl=$HCCL_CONNECT_TIMEOUT""#,
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tq=2 hccl=1200"));
    let err = stderr(&out);
    assert!(err.contains("CANN set_env.sh not found"), "{err}");
    assert!(err.contains("NPU_CANN_SET_ENV"), "{err}");
}

#[test]
fn env_looks_for_no_cann_on_an_emulated_run() {
    let sb = Sandbox::new();
    let script = r#"set -euo pipefail; . "$ENV_NPU"; echo "tq=$TASK_QUEUE_ENABLE""#;
    for marks in [
        [("NPU_PATCHER_EMULATED", "1")],
        [("NPU_PATCHER_EMULATE", "True")],
    ] {
        let out = sb.bash(script, &marks);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("tq=2"), "{marks:?}");
        assert_eq!(stderr(&out), "", "{marks:?}");
    }
    // Switched off is not emulated.
    let out = sb.bash(script, &[("NPU_PATCHER_EMULATE", "0")]);
    assert!(stderr(&out).contains("CANN set_env.sh not found"));
}

#[test]
fn env_every_default_can_be_overridden_by_the_caller() {
    let text = fs::read_to_string(template("env_npu.sh")).unwrap();
    let defaults: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(": \"${"))
        .filter_map(|l| l.split_once(":="))
        .map(|(k, v)| (k.to_owned(), v.trim_end_matches("}\"").to_owned()))
        .filter(|(k, _)| !k.starts_with("NPU_"))
        .collect();
    assert!(defaults.len() >= 12, "{defaults:?}");
    let sb = Sandbox::new();
    let mut script = String::from(". \"$ENV_NPU\" 2>/dev/null\n");
    let mut envs = Vec::new();
    for (k, _) in &defaults {
        let _ = writeln!(script, "echo \"{k}=${{{k}}}\"");
        envs.push((k.as_str(), "caller-value"));
    }
    let out = sb.bash(&script, &envs);
    for (k, _) in &defaults {
        assert!(
            stdout(&out).contains(&format!("{k}=caller-value\n")),
            "{k} did not keep the caller's value:\n{}",
            stdout(&out)
        );
    }
    // And without the caller's values, each default reaches the environment of child processes.
    let mut script = String::from(". \"$ENV_NPU\" 2>/dev/null\nenv\n");
    script.push_str("true\n");
    let out = sb.bash(&script, &[]);
    for (k, v) in &defaults {
        assert!(
            stdout(&out).contains(&format!("\n{k}={v}\n")),
            "{k}={v} is not exported:\n{}",
            stdout(&out)
        );
    }
}

#[test]
fn env_gives_every_performance_variable_a_reason() {
    let text = fs::read_to_string(template("env_npu.sh")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with(": \"${") && !line.contains("${NPU_") {
            assert!(
                i > 0 && lines[i - 1].starts_with("# "),
                "line {}: `{line}` has no one-line reason above it",
                i + 1
            );
        }
    }
    // Every variable of the NPU-FACTS performance table is either set or named as left alone.
    for var in [
        "TASK_QUEUE_ENABLE",
        "CPU_AFFINITY_CONF",
        "PYTORCH_NPU_ALLOC_CONF",
        "COMBINED_ENABLE",
        "MULTI_STREAM_MEMORY_REUSE",
        "HCCL_OP_BASE_FFTS_MODE_ENABLE",
        "HCCL_WHITELIST_DISABLE",
        "HCCL_CONNECT_TIMEOUT",
        "HCCL_EXEC_TIMEOUT",
        "HCCL_BUFFSIZE",
        "INF_NAN_MODE_ENABLE",
        "ASCEND_LAUNCH_BLOCKING",
        "ACLNN_CACHE_LIMIT",
        "ASCEND_GLOBAL_LOG_LEVEL",
        "ASCEND_SLOG_PRINT_TO_STDOUT",
        "TORCH_NPU_FALLBACK_CPU_DISABLE",
    ] {
        assert!(text.contains(var), "env_npu.sh does not mention {var}");
    }
    assert!(text.contains("NPU-FACTS.md"));
}

/// A project with `migrate_to_cloudrobo/{env_npu.sh,train.sh}` copied from the templates.
fn project(sb: &Sandbox) -> PathBuf {
    let mig = sb.path().join("proj/migrate_to_cloudrobo");
    fs::create_dir_all(&mig).unwrap();
    for name in ["env_npu.sh", "train.sh"] {
        fs::copy(template(name), mig.join(name)).unwrap();
    }
    sb.path().join("proj")
}

fn train(sb: &Sandbox, project: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg("migrate_to_cloudrobo/train.sh")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", sb.path().join("home"))
        .env("NPU_ASCEND_ROOTS", sb.path().join("roots"))
        .env("NPU_CANN_INSTALL_INFO", sb.path().join("install.info"))
        .current_dir(project);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn logs(project: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(project.join("migrate_to_cloudrobo/logs"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    logs.sort();
    logs
}

#[test]
fn train_forwards_arguments_unchanged_logs_and_keeps_the_exit_code() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let out = train(
        &sb,
        &proj,
        &[
            "sh",
            "-c",
            r#"printf '[%s]' "$@"; echo; echo to-stderr >&2; exit 7"#,
            "argv0",
            "a b",
            "",
            "c\"d'e",
            "$HOME",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("[a b][][c\"d'e][$HOME]\n"),
        "{}",
        stdout(&out)
    );
    // stderr is merged into the shown output, as with 2>&1 | tee.
    assert!(stdout(&out).contains("to-stderr"));
    let logs = logs(&proj);
    assert_eq!(logs.len(), 1);
    let name = logs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("train_") && Path::new(&name).extension().is_some_and(|e| e == "log"),
        "{name}"
    );
    let log = fs::read_to_string(&logs[0]).unwrap();
    assert!(log.starts_with("# command: sh -c"), "{log}");
    assert!(log.contains("[a b][][c\"d'e][$HOME]\nto-stderr\n"), "{log}");
    assert!(log.ends_with("# exit code: 7\n"), "{log}");
    assert!(stderr(&out).contains("train.sh: logging to"));
}

#[test]
fn train_sets_pythonpath_and_the_environment() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let out = train(
        &sb,
        &proj,
        &[
            "sh",
            "-c",
            "echo \"pp=$PYTHONPATH\"; echo \"tq=$TASK_QUEUE_ENABLE\"; echo \"unbuf=$PYTHONUNBUFFERED\"; echo \"mig=$NPU_PATCHER_MIGRATE_DIR\"",
        ],
        &[
            ("PYTHONPATH", "/existing"),
            ("TASK_QUEUE_ENABLE", "1"),
            (
                "NPU_PATCHER_MIGRATE_DIR",
                "/another/project/migrate_to_cloudrobo",
            ),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mig = fs::canonicalize(proj.join("migrate_to_cloudrobo")).unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!("pp={}:/existing\n", mig.display())),
        "{text}"
    );
    assert!(text.contains("tq=1\n"), "{text}");
    assert!(text.contains("unbuf=1\n"), "{text}");
    // Where the inserted NPU setup finds runtime_patches.py: this project's, whatever was set.
    assert!(text.contains(&format!("mig={}\n", mig.display())), "{text}");
}

#[test]
fn env_exports_its_folder_when_it_holds_the_runtime_patcher() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let mig = fs::canonicalize(proj.join("migrate_to_cloudrobo")).unwrap();
    let script =
        "set -u; . migrate_to_cloudrobo/env_npu.sh; echo \"mig=${NPU_PATCHER_MIGRATE_DIR-unset}\"";
    let run = || {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", sb.path().join("home"))
            .env("NPU_ASCEND_ROOTS", sb.path().join("roots"))
            .env("NPU_CANN_INSTALL_INFO", sb.path().join("install.info"))
            .current_dir(&proj)
            .output()
            .unwrap()
    };
    // Without runtime_patches.py beside it (a copy elsewhere) it sets nothing.
    assert_eq!(stdout(&run()), "mig=unset\n");
    fs::write(mig.join("runtime_patches.py"), "").unwrap();
    assert_eq!(stdout(&run()), format!("mig={}\n", mig.display()));
}

#[test]
fn train_reports_a_missing_command_with_127_and_no_command_with_usage() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let out = train(&sb, &proj, &["no-such-command-npu-test"], &[]);
    assert_eq!(out.status.code(), Some(127));
    let log = fs::read_to_string(&logs(&proj)[0]).unwrap();
    assert!(log.contains("not found"), "{log}");
    let out = train(&sb, &proj, &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("usage: bash migrate_to_cloudrobo/train.sh"));
}

#[test]
fn train_log_footer_stays_on_its_own_line() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let out = train(&sb, &proj, &["printf", "no-newline"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = fs::read_to_string(&logs(&proj)[0]).unwrap();
    assert!(log.ends_with("\nno-newline\n# exit code: 0\n"), "{log}");
}

#[test]
fn train_emulated_puts_the_emulator_on_the_path_and_says_so() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let show = [
        "sh",
        "-c",
        "echo \"pp=$PYTHONPATH\"; echo \"cuda=[$CUDA_VISIBLE_DEVICES]\"; echo \"emulated=$NPU_PATCHER_EMULATED\"",
    ];
    // Switched on without an emulator: the launcher's own failure, with both ways to fix it.
    let out = train(&sb, &proj, &show, &[("NPU_PATCHER_EMULATE", "1")]);
    assert_eq!(out.status.code(), Some(125), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("npu-assets init . --emulator"), "{err}");
    assert!(
        err.contains("NPU_PATCHER_EMULATOR_DIR=<skill dir>/emulator"),
        "{err}"
    );
    assert!(logs(&proj).is_empty(), "nothing ran, so nothing is logged");

    // The shipped emulator, named by the variable.
    let emulator = fs::canonicalize(template("../emulator")).unwrap();
    let emulator_var = emulator.display().to_string();
    let out = train(
        &sb,
        &proj,
        &show,
        &[
            ("NPU_PATCHER_EMULATE", "yes"),
            ("NPU_PATCHER_EMULATOR_DIR", &emulator_var),
            ("PYTHONPATH", "/existing"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mig = fs::canonicalize(proj.join("migrate_to_cloudrobo")).unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "pp={}:{}:/existing\n",
            mig.display(),
            emulator.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("cuda=[]\n") && text.contains("emulated=1\n"),
        "{text}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("train.sh: EMULATED NPU: this run uses the emulated npu device"),
        "{err}"
    );
    assert!(
        err.contains("the run above (exit 0) used the emulated npu device"),
        "{err}"
    );
    let log = fs::read_to_string(&logs(&proj)[0]).unwrap();
    assert!(log.contains("\n# EMULATED NPU: "), "{log}");

    // The project's copy is found without the variable; off means off.
    fs::create_dir_all(mig.join("emulator")).unwrap();
    for package in ["npu_emulator", "torch_npu"] {
        fs::create_dir_all(mig.join("emulator").join(package)).unwrap();
        fs::write(mig.join("emulator").join(package).join("__init__.py"), "").unwrap();
    }
    let out = train(&sb, &proj, &show, &[("NPU_PATCHER_EMULATE", "1")]);
    assert!(
        stdout(&out).contains(&format!(
            "pp={}:{}/emulator\n",
            mig.display(),
            mig.display()
        )),
        "{}",
        stdout(&out)
    );
    let out = train(&sb, &proj, &show, &[("NPU_PATCHER_EMULATE", "0")]);
    assert!(stdout(&out).contains("emulated=\n"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("EMULATED"), "{}", stderr(&out));
}

/// A `torchrun` on PATH that prints what a distributed launch would see, instead of launching.
fn fake_torchrun(sb: &Sandbox) -> String {
    let bin = sb.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    let script = bin.join("torchrun");
    fs::write(
        &script,
        "#!/bin/sh\necho \"args=$* tee=${PET_TEE-} logdir=${PET_LOG_DIR-} cards=${NPU_EMULATOR_DEVICE_COUNT-}\"\n",
    )
    .unwrap();
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn train_checks_the_card_list_against_the_process_count() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let path = fake_torchrun(&sb);
    let args = ["torchrun", "--nproc_per_node", "4", "train.py"];
    let out = train(
        &sb,
        &proj,
        &args,
        &[("PATH", &path), ("ASCEND_RT_VISIBLE_DEVICES", "0,1")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("makes 2 card(s) visible, but the torchrun command starts 4 processes"),
        "{}",
        stderr(&out)
    );
    assert!(logs(&proj).is_empty());

    // Enough cards: the command runs unchanged, torchrun keeps the ranks apart.
    let out = train(
        &sb,
        &proj,
        &args,
        &[("PATH", &path), ("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("args=--nproc_per_node 4 train.py tee=3 logdir="),
        "{text}"
    );
    assert!(text.contains("_ranks"), "{text}");

    // A script that runs torchrun is read too; the caller's own --tee wins.
    fs::write(
        proj.join("ddp.sh"),
        "#!/bin/bash\ntorchrun --nproc_per_node=8 --tee 1 train.py\n",
    )
    .unwrap();
    let out = train(
        &sb,
        &proj,
        &["bash", "ddp.sh"],
        &[("PATH", &path), ("ASCEND_RT_VISIBLE_DEVICES", "0")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let out = train(
        &sb,
        &proj,
        &["bash", "ddp.sh"],
        &[
            ("PATH", &path),
            ("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tee= logdir="), "{}", stdout(&out));
}

#[test]
fn train_warns_about_a_multi_node_launch_without_an_hccl_interface() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let path = fake_torchrun(&sb);
    let args = [
        "torchrun",
        "--nnodes",
        "2",
        "--node_rank",
        "0",
        "--nproc_per_node",
        "2",
        "train.py",
    ];
    let out = train(&sb, &proj, &args, &[("PATH", &path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is set"),
        "{}",
        stderr(&out)
    );
    let out = train(
        &sb,
        &proj,
        &args,
        &[("PATH", &path), ("HCCL_SOCKET_IFNAME", "eth0")],
    );
    assert!(
        !stderr(&out).contains("HCCL_SOCKET_IFNAME is set"),
        "{}",
        stderr(&out)
    );
}
