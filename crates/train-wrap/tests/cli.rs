//! `npu-train` with real child processes: exit codes, environment, log, signals, heavy output.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    /// A model project with `migrate_to_cloudrobo/env_npu.sh` from the template.
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let mig = dir.path().join("proj/migrate_to_cloudrobo");
        fs::create_dir_all(&mig).unwrap();
        fs::create_dir_all(dir.path().join("home")).unwrap();
        let template =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/templates/env_npu.sh");
        fs::copy(template, mig.join("env_npu.sh")).unwrap();
        Project { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("proj")
    }

    fn mig(&self) -> PathBuf {
        self.root().join("migrate_to_cloudrobo")
    }

    /// npu-train in the project root with a clean environment and no CANN to find.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_npu-train"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path().join("home"))
            .env("NPU_ASCEND_ROOTS", self.dir.path().join("roots"))
            .env(
                "NPU_CANN_INSTALL_INFO",
                self.dir.path().join("install.info"),
            )
            .current_dir(self.root());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = fs::read_dir(self.mig().join("logs"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        logs.sort();
        logs
    }

    fn only_log(&self) -> String {
        let logs = self.logs();
        assert_eq!(logs.len(), 1, "{logs:?}");
        fs::read_to_string(&logs[0]).unwrap()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn exit_codes_pass_through() {
    let p = Project::new();
    for code in [0, 1, 7, 255] {
        let out = p.run(&["sh", "-c", &format!("exit {code}")]);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    }
    let logs = p.logs();
    assert_eq!(logs.len(), 4, "one log per run, never reused");
    let last = fs::read_to_string(
        logs.iter()
            .find(|l| fs::read_to_string(l).unwrap().contains("exit 255"))
            .unwrap(),
    )
    .unwrap();
    assert!(last.ends_with("# exit code: 255\n"), "{last}");
}

#[test]
fn arguments_are_forwarded_unchanged_and_options_stop_at_the_command() {
    let p = Project::new();
    let out = p.run(&[
        "sh",
        "-c",
        r#"printf '[%s]' "$@""#,
        "argv0",
        "a b",
        "",
        "--dry-run",
        "c\"d'e",
        "$HOME",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "[a b][][--dry-run][c\"d'e][$HOME]");
    let log = p.only_log();
    assert!(log.starts_with("# command: sh -c "), "{log}");
    assert!(log.contains("\n# started: "), "{log}");
    assert!(
        // Output without a final newline still leaves the footer on a line of its own.
        log.ends_with("\n[a b][][--dry-run][c\"d'e][$HOME]\n# exit code: 0\n"),
        "{log}"
    );
    // `--` also works as the separator.
    let out = p.run(&["--", "sh", "-c", "echo sep"]);
    assert_eq!(stdout(&out), "sep\n");
}

#[test]
fn environment_comes_from_the_project_env_file_and_the_caller_wins() {
    let p = Project::new();
    let env_file = p.mig().join("env_npu.sh");
    let mut text = fs::read_to_string(&env_file).unwrap();
    text.push_str("export PROJECT_ONLY=from-env-file\n");
    fs::write(&env_file, text).unwrap();
    let out = p
        .command(&[
            "sh",
            "-c",
            "echo \"pp=$PYTHONPATH\"; echo \"tq=$TASK_QUEUE_ENABLE\"; echo \"alloc=$PYTORCH_NPU_ALLOC_CONF\"; echo \"po=$PROJECT_ONLY\"; echo \"unbuf=$PYTHONUNBUFFERED\"",
        ])
        .env("PYTHONPATH", "/existing")
        .env("TASK_QUEUE_ENABLE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mig = p.mig();
    assert!(
        text.contains(&format!("pp={}:/existing\n", mig.display())),
        "{text}"
    );
    assert!(text.contains("tq=1\n"), "{text}");
    assert!(text.contains("alloc=expandable_segments:True\n"), "{text}");
    assert!(text.contains("po=from-env-file\n"), "{text}");
    assert!(text.contains("unbuf=1\n"), "{text}");
    // The script's own warning (no CANN here) reaches the user.
    assert!(
        stderr(&out).contains("CANN set_env.sh not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn dry_run_prints_the_environment_and_runs_nothing() {
    let p = Project::new();
    let out = p.run(&["--dry-run", "touch", "ran"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("export TASK_QUEUE_ENABLE=2\n"), "{text}");
    assert!(
        text.contains("export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("export PYTHONPATH={}\n", p.mig().display())),
        "{text}"
    );
    assert!(text.contains("export PYTHONUNBUFFERED=1\n"), "{text}");
    // The inserted NPU setup finds runtime_patches.py there, also from an installed package.
    assert!(
        text.contains(&format!(
            "export NPU_PATCHER_MIGRATE_DIR={}\n",
            p.mig().display()
        )),
        "{text}"
    );
    assert!(text.contains("# command: touch ran\n"), "{text}");
    assert!(text.contains("# log: "), "{text}");
    assert!(!text.contains("SHLVL"), "{text}");
    assert!(!p.root().join("ran").exists());
    assert!(p.logs().is_empty());
    // The printed lines are a valid script that sets the same values.
    let check = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{text}\necho \"$TASK_QUEUE_ENABLE $PYTHONUNBUFFERED\""
        ))
        .output()
        .unwrap();
    assert_eq!(stdout(&check), "2 1\n");
}

#[test]
fn own_failures_use_125_126_127() {
    let p = Project::new();
    let out = p.run(&["no-such-command-for-npu-train"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("npu-train: error: no-such-command-for-npu-train: command not found")
    );
    assert!(p.only_log().ends_with("# exit code: 127\n"));

    let script = p.root().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let out = p.run(&["./not-executable.sh"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot run it"), "{}", stderr(&out));

    let out = p.run(&[]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("no launch command given"));
    let out = p.run(&["--bogus", "python"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("unknown option `--bogus`"),
        "{}",
        stderr(&out)
    );
    let out = p.run(&["--log-dir"]);
    assert_eq!(out.status.code(), Some(125));

    let elsewhere = tempfile::tempdir().unwrap();
    let out = p
        .command(&["true"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains(
            "migrate_to_cloudrobo does not exist; create it first with `npu-assets init .`"
        ),
        "{}",
        stderr(&out)
    );

    fs::write(p.mig().join("env_npu.sh"), "echo broken >&2\nexit 3\n").unwrap();
    let out = p.run(&["true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("broken"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("env_npu.sh failed"),
        "{}",
        stderr(&out)
    );

    let help = p.run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Examples:"));
}

#[test]
fn a_missing_env_file_falls_back_to_the_built_in_one() {
    let p = Project::new();
    fs::remove_file(p.mig().join("env_npu.sh")).unwrap();
    let out = p.run(&["sh", "-c", "echo tq=$TASK_QUEUE_ENABLE"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "tq=2\n");
    assert!(
        stderr(&out).contains("using the built-in env_npu.sh"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn heavy_output_arrives_complete_and_in_order_in_both_copies() {
    let p = Project::new();
    let out = p.run(&["seq", "1", "200000"]);
    assert!(out.status.success());
    let expected: Vec<String> = (1..=200_000).map(|i| i.to_string()).collect();
    let shown = stdout(&out);
    assert!(shown.ends_with('\n'));
    assert_eq!(shown.lines().collect::<Vec<_>>(), expected);
    let log = p.only_log();
    let body: Vec<&str> = log.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(body, expected);
    assert!(log.ends_with("# exit code: 0\n"));
}

#[test]
fn stdout_and_stderr_keep_their_order_in_the_log() {
    let p = Project::new();
    let out = p.run(&[
        "sh",
        "-c",
        "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo out$i; echo err$i >&2; done",
    ]);
    assert!(out.status.success());
    let log = p.only_log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with('#')).collect();
    let expected: Vec<String> = (1..=2000)
        .flat_map(|i| [format!("out{i}"), format!("err{i}")])
        .collect();
    assert_eq!(lines, expected);
}

/// Start npu-train and wait for the child to print `ready`.
fn start(p: &Project, script: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = p
        .command(&["sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, reader)
}

fn gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie nobody reaped yet is gone too.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn sigterm_reaches_the_whole_process_group_and_gives_143() {
    let p = Project::new();
    let (mut child, _out) = start(&p, "sleep 60 & echo $! > grandchild.pid; echo ready; wait");
    let grandchild: i32 = fs::read_to_string(p.root().join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill(
        Pid::from_raw(i32::try_from(child.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(grandchild) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        gone(grandchild),
        "the background sleep {grandchild} survived"
    );
    assert!(p.only_log().ends_with("# exit code: 143\n"));
}

#[test]
fn sigint_is_forwarded_and_the_command_shutdown_output_is_logged() {
    let p = Project::new();
    let (mut child, mut out) = start(
        &p,
        "trap 'echo saving checkpoint; exit 5' INT; echo ready; while :; do sleep 0.05; done",
    );
    kill(
        Pid::from_raw(i32::try_from(child.id()).unwrap()),
        Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(status.code(), Some(5));
    assert_eq!(rest, "saving checkpoint\n");
    let log = p.only_log();
    assert!(
        log.contains("ready\nsaving checkpoint\n# exit code: 5\n"),
        "{log}"
    );
}

#[test]
fn a_closed_stdout_does_not_stop_the_command_or_the_log() {
    let p = Project::new();
    let mut child = p
        .command(&["seq", "1", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert_eq!(first, "1\n");
    drop(reader);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("stdout was closed"),
        "{}",
        stderr(&out)
    );
    let log = p.only_log();
    assert!(
        log.ends_with("\n99999\n100000\n# exit code: 0\n"),
        "{}",
        &log[log.len() - 60..]
    );
}

#[test]
fn a_malformed_device_list_is_warned_about_and_passed_on_unchanged() {
    let p = Project::new();
    let out = p
        .command(&["sh", "-c", "echo \"[$ASCEND_RT_VISIBLE_DEVICES]\""])
        .env("ASCEND_RT_VISIBLE_DEVICES", "1, 2,3")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(stdout(&out), "[1, 2,3]\n");
    assert!(
        stderr(&out).contains("npu-train: warning: ASCEND_RT_VISIBLE_DEVICES=`1, 2,3` has a space"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn emulate_npu_runs_with_the_emulator_on_the_path_and_says_so() {
    let p = Project::new();
    let show = [
        "sh",
        "-c",
        "echo \"pp=$PYTHONPATH\"; echo \"cuda=[$CUDA_VISIBLE_DEVICES]\"; test -f \"${PYTHONPATH#*:}/torch_npu/__init__.py\"",
    ];
    // No copy in the project and not in a bundle: the copy built into npu-train, extracted.
    let mut args = vec!["--emulate-npu"];
    args.extend(show);
    let out = p.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("npu-train: EMULATED NPU: this run uses the emulated npu device")
            && err.contains("from the copy built into this binary"),
        "{err}"
    );
    assert!(
        err.contains("the run above (exit 0) used the emulated npu device"),
        "{err}"
    );
    let mig = fs::canonicalize(p.mig()).unwrap();
    let text = stdout(&out);
    assert!(text.contains(&format!("pp={}:", mig.display())), "{text}");
    assert!(text.contains("cuda=[]\n"), "{text}");
    assert!(p.only_log().contains("\n# EMULATED NPU: "));

    // The one switch does the same, and a copy in the project wins over the built-in one.
    for package in ["npu_emulator", "torch_npu"] {
        let dir = p.mig().join("emulator").join(package);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("__init__.py"), "").unwrap();
    }
    let out = p
        .command(&["--dry-run"])
        .env("NPU_PATCHER_EMULATE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "export PYTHONPATH={}:{}/emulator\n",
            mig.display(),
            mig.display()
        )),
        "{text}"
    );
    assert!(text.starts_with("# EMULATED NPU: "), "{text}");
    assert!(
        text.contains("from the project's migrate_to_cloudrobo/emulator"),
        "{text}"
    );

    // A variable that names no emulator is the launcher's failure, naming the variable.
    let out = p
        .command(&["--emulate-npu", "true"])
        .env("NPU_PATCHER_EMULATOR_DIR", "/no/such/dir")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("NPU_PATCHER_EMULATOR_DIR=/no/such/dir does not hold the emulator"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_card_list_shorter_than_the_process_count_stops_before_the_launch() {
    let p = Project::new();
    let out = p
        .command(&["torchrun", "--nproc_per_node", "4", "train.py"])
        .env("ASCEND_RT_VISIBLE_DEVICES", "0,1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("makes 2 cards visible, but the torchrun command starts 4 processes"),
        "{}",
        stderr(&out)
    );
    assert!(p.logs().is_empty(), "nothing ran, so no log");
}

#[test]
fn torchrun_gets_per_rank_logs_and_the_command_is_unchanged() {
    let p = Project::new();
    let out = p
        .command(&[
            "--dry-run",
            "torchrun",
            "--nproc_per_node",
            "2",
            "--nnodes",
            "2",
            "train.py",
        ])
        .env("ASCEND_RT_VISIBLE_DEVICES", "0,1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = stdout(&out);
    assert!(plan.contains("export PET_TEE=3"), "{plan}");
    assert!(
        plan.contains("PET_LOG_DIR=") && plan.contains("_ranks"),
        "{plan}"
    );
    assert!(
        plan.contains("# command: torchrun --nproc_per_node 2 --nnodes 2 train.py"),
        "{plan}"
    );
    assert!(
        stderr(&out).contains("HCCL_SOCKET_IFNAME"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn torchrun_without_its_console_script_runs_as_the_module_of_the_python_on_path() {
    // torch is installed but its console scripts are not on PATH: `python -m
    // torch.distributed.run` is the same launcher, and npu-train says it ran that.
    let p = Project::new();
    let bin = p.dir.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python3");
    fs::write(&python, "#!/bin/sh\necho \"python3 got: $*\"\n").unwrap();
    fs::set_permissions(&python, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = p
        .command(&["torchrun", "--nproc_per_node", "1", "train.py", "--lr", "1"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .contains("python3 got: -m torch.distributed.run --nproc_per_node 1 train.py --lr 1"),
        "{}",
        stdout(&out)
    );
    let note = format!(
        "no `torchrun` on PATH; running it as `{} -m torch.distributed.run`",
        python.display()
    );
    assert!(stderr(&out).contains(&note), "{}", stderr(&out));
    let log = p.only_log();
    assert!(
        log.contains("# command: torchrun --nproc_per_node 1 train.py --lr 1"),
        "{log}"
    );
    assert!(log.contains(&note), "{log}");

    // A torchrun on PATH runs as typed.
    let torchrun = bin.join("torchrun");
    fs::write(&torchrun, "#!/bin/sh\necho \"torchrun got: $*\"\n").unwrap();
    fs::set_permissions(&torchrun, fs::Permissions::from_mode(0o755)).unwrap();
    let out = p
        .command(&["torchrun", "train.py"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("torchrun got: train.py"),
        "{}",
        stdout(&out)
    );
    assert!(
        !stderr(&out).contains("no `torchrun` on PATH"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_abort_after_the_program_finished_is_named_and_keeps_its_exit_code() {
    let p = Project::new();
    // The process reports the end of its program as the emulator and runtime_patches.py do, then aborts.
    let out = p.run(&[
        "sh",
        "-c",
        r#"echo trained; touch "$NPU_PATCHER_EXIT_MARKER/$$"; kill -ABRT $$"#,
    ]);
    assert_eq!(out.status.code(), Some(134), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the interpreter aborted at exit after the program finished"),
        "{}",
        stderr(&out)
    );
    // An abort before the program finished is only the abort.
    let out = p.run(&["sh", "-c", "kill -ABRT $$"]);
    assert_eq!(out.status.code(), Some(134));
    assert!(
        !stderr(&out).contains("aborted at exit"),
        "{}",
        stderr(&out)
    );
}
