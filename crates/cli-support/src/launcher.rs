//! Distributed launch commands as `npu-train` and `npu-verify` read them: `torchrun`,
//! `python -m torch.distributed.run` (or `.launch`), `accelerate launch` and `deepspeed`, typed
//! directly or on a line of a shell script. One reading for both tools: which launcher, its own
//! options, and the Python program it starts. Words are split as the shell would leave them
//! (no expansion: `$NGPUS` stays a word, and a count that is not a number is no count).

use std::path::Path;

/// The distributed launcher that starts the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `torchrun`, `python -m torch.distributed.run`, `python -m torch.distributed.launch`.
    Torchrun,
    /// `accelerate launch`.
    Accelerate,
    /// `deepspeed`.
    Deepspeed,
}

impl Launcher {
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Accelerate => "accelerate",
            Launcher::Deepspeed => "deepspeed",
        }
    }

    /// The launcher's options that take no value (every other option takes the next word unless
    /// it is written `--flag=value` or the next word is the `.py` program).
    fn switches(self) -> &'static [&'static str] {
        match self {
            Launcher::Torchrun => &[
                "--standalone",
                "--no-python",
                "--no_python",
                "--run-path",
                "--run_path",
                "--module",
                "-m",
            ],
            Launcher::Accelerate => &[
                "--cpu",
                "--multi_gpu",
                "--multi-gpu",
                "--tpu",
                "--use_deepspeed",
                "--use_fsdp",
                "--use_megatron_lm",
                "--use_xpu",
                "--same_network",
                "--module",
                "-m",
                "--no_python",
                "--no-python",
                "--debug",
                "--quiet",
                "-q",
                "--dynamo_use_fullgraph",
                "--dynamo_use_dynamic",
            ],
            Launcher::Deepspeed => &[
                "--no_python",
                "--no-python",
                "--module",
                "--no_local_rank",
                "--force_multi",
                "--bind_cores_to_rank",
                "--no_ssh_check",
                "--no_ssh",
                "--save_pid",
                "--elastic_training",
            ],
        }
    }
}

/// A distributed launch command, split into the launcher's options and the program it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchCommand {
    pub launcher: Launcher,
    /// The launcher's own option words, in order (`--nproc_per_node`, `8`, `--standalone`).
    pub options: Vec<String>,
    /// The program and its arguments (`train.py --config c.yaml`), or with [`Self::module`] the
    /// module and its arguments; empty when the command names none.
    pub program: Vec<String>,
    /// The program is a module (`-m` / `--module`).
    pub module: bool,
}

/// Options that give the number of processes on this node.
const NPROC: &[&str] = &[
    "--nproc_per_node",
    "--nproc-per-node",
    "--num_processes",
    "--num-processes",
    "--num_gpus",
    "--num-gpus",
];

/// Options that make the run span several machines, whatever their value.
const MULTI_NODE: &[&str] = &[
    "--master_addr",
    "--master-addr",
    "--rdzv_endpoint",
    "--rdzv-endpoint",
    "--node_rank",
    "--node-rank",
    "--hostfile",
];

impl LaunchCommand {
    /// The value of the first of `flags` among the launcher's options (`--flag VALUE` or
    /// `--flag=VALUE`).
    pub fn option(&self, flags: &[&str]) -> Option<&str> {
        option_value(&self.options, flags)
    }

    /// Whether one of `flags` is among the launcher's options, with or without a value.
    pub fn has_option(&self, flags: &[&str]) -> bool {
        self.options.iter().any(|w| {
            let flag = w.split_once('=').map_or(w.as_str(), |(f, _)| f);
            flags.contains(&flag)
        })
    }

    /// Processes per node, when the command sets a number (not `auto`, `gpu` or `$VAR`).
    pub fn processes(&self) -> Option<u32> {
        self.option(NPROC)
            .and_then(|v| v.trim_matches(['"', '\'']).parse().ok())
            .filter(|n| *n >= 1)
    }

    /// The command spans several machines (`--nnodes` other than 1, a master address, a
    /// rendezvous endpoint, a node rank, accelerate's `--num_machines`, deepspeed's `--hostfile`).
    pub fn multi_node(&self) -> bool {
        let nodes = self.option(&["--nnodes", "--num_machines", "--num-machines"]);
        nodes.is_some_and(|n| n != "1" && n != "1:1") || self.has_option(MULTI_NODE)
    }

    /// Every word of the command, launcher first.
    pub fn words(&self) -> Vec<String> {
        let mut words = match self.launcher {
            Launcher::Torchrun => vec!["torchrun".to_owned()],
            Launcher::Accelerate => vec!["accelerate".to_owned(), "launch".to_owned()],
            Launcher::Deepspeed => vec!["deepspeed".to_owned()],
        };
        words.extend(self.options.iter().cloned());
        words.extend(self.program.iter().cloned());
        words
    }
}

/// The launcher command `words` start with, if they start with one.
pub fn parse(words: &[String]) -> Option<LaunchCommand> {
    let first = words.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    let (launcher, rest) = if base == "torchrun" {
        (Launcher::Torchrun, &words[1..])
    } else if base.starts_with("python")
        && words.get(1).is_some_and(|w| w == "-m")
        && words
            .get(2)
            .is_some_and(|m| m == "torch.distributed.run" || m == "torch.distributed.launch")
    {
        (Launcher::Torchrun, &words[3..])
    } else if base == "accelerate" && words.get(1).is_some_and(|w| w == "launch") {
        (Launcher::Accelerate, &words[2..])
    } else if base == "deepspeed" {
        (Launcher::Deepspeed, &words[1..])
    } else {
        return None;
    };
    let switches = launcher.switches();
    let mut module = false;
    let mut i = 0;
    while let Some(word) = rest.get(i) {
        if word == "--" {
            i += 1;
            break;
        }
        if !word.starts_with('-') || word == "-" {
            break;
        }
        if matches!(word.as_str(), "-m" | "--module") {
            module = true;
        }
        let takes_value = !switches.contains(&word.as_str())
            && !word.contains('=')
            && rest
                .get(i + 1)
                .is_some_and(|next| Path::new(next).extension().is_none_or(|e| e != "py"));
        i += if takes_value { 2 } else { 1 };
    }
    let split = i.min(rest.len());
    Some(LaunchCommand {
        launcher,
        options: rest[..split]
            .iter()
            .filter(|w| *w != "--")
            .cloned()
            .collect(),
        program: rest[split..].to_vec(),
        module,
    })
}

/// The launcher command inside `words`, which may be preceded by a wrapper (`exec`, `env X=1`,
/// `bash migrate_to_cloudrobo/train.sh`, `npu-train`).
pub fn find(words: &[String]) -> Option<LaunchCommand> {
    (0..words.len()).find_map(|start| parse(&words[start..]))
}

/// The first launcher line of a shell script: the launcher may follow `exec`, environment
/// settings, `bash migrate_to_cloudrobo/train.sh` and the like; comments are ignored.
pub fn parse_script(text: &str) -> Option<LaunchCommand> {
    script_lines(text).next()
}

/// Every launcher line of a shell script, in order (see [`parse_script`]).
pub fn script_lines(text: &str) -> impl Iterator<Item = LaunchCommand> + '_ {
    text.lines().filter_map(|line| {
        let code = line.split('#').next().unwrap_or("");
        find(
            &code
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>(),
        )
    })
}

/// The shell script a command runs (`bash run.sh`, `./run.sh`, `run.sh`): a `.sh` word among
/// its first two.
pub fn script_of(words: &[String]) -> Option<&str> {
    words
        .iter()
        .take(2)
        .find(|w| Path::new(w).extension().is_some_and(|e| e == "sh"))
        .map(String::as_str)
}

/// The value of the first of `flags` in `words` (`--flag VALUE` or `--flag=VALUE`).
fn option_value<'a>(words: &'a [String], flags: &[&str]) -> Option<&'a str> {
    let mut iter = words.iter();
    while let Some(word) = iter.next() {
        match word.split_once('=') {
            Some((flag, value)) if flags.contains(&flag) => return Some(value),
            None if flags.contains(&word.as_str()) => return iter.next().map(String::as_str),
            _ => {}
        }
    }
    None
}

/// The executable `name` on the search path `path` (a `PATH` value), first match.
pub fn on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// How to run a command that starts with a bare `torchrun` when `path` has no `torchrun` (torch
/// is installed but its console scripts are not on `PATH`, as in some conda and `--user`
/// installs): the Python on `path` (`python3`, else `python`) whose `-m torch.distributed.run` is
/// torchrun itself. `None` when the command does not start with a bare `torchrun`, when `path`
/// has one, or when it has no Python either (the command then fails as typed).
pub fn torchrun_fallback(words: &[String], path: Option<&std::ffi::OsStr>) -> Option<Vec<String>> {
    let (first, rest) = words.split_first()?;
    if first != "torchrun" || on_path("torchrun", path).is_some() {
        return None;
    }
    let python = on_path("python3", path).or_else(|| on_path("python", path))?;
    let mut command = vec![
        python.display().to_string(),
        "-m".to_owned(),
        "torch.distributed.run".to_owned(),
    ];
    command.extend(rest.iter().cloned());
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn torchrun_options_and_program_are_split() {
        let c = parse(&words(
            "torchrun --nproc_per_node 8 --standalone --max-restarts=2 train.py --config c.yaml",
        ))
        .unwrap();
        assert_eq!(c.launcher, Launcher::Torchrun);
        assert_eq!(c.processes(), Some(8));
        assert!(!c.multi_node());
        assert_eq!(c.program, words("train.py --config c.yaml"));
        let c = parse(&words(
            "python -m torch.distributed.run --nproc-per-node=2 --nnodes 2 --node_rank 0 train.py",
        ))
        .unwrap();
        assert_eq!((c.processes(), c.multi_node()), (Some(2), true));
        assert_eq!(c.program, ["train.py"]);
        let c = parse(&words("torchrun --standalone -m pkg.train --lr 1")).unwrap();
        assert!(c.module);
        assert_eq!(c.program, words("pkg.train --lr 1"));
    }

    #[test]
    fn an_unknown_option_before_the_script_takes_no_value() {
        let c = parse(&words("torchrun --some-new-switch train.py --x")).unwrap();
        assert_eq!(c.program, words("train.py --x"));
        let c = parse(&words("torchrun --rdzv_backend c10d train.py")).unwrap();
        assert_eq!(c.option(&["--rdzv_backend"]), Some("c10d"));
        assert_eq!(c.program, ["train.py"]);
    }

    #[test]
    fn accelerate_and_deepspeed_are_read_the_same_way() {
        let c = parse(&words(
            "accelerate launch --multi_gpu --num_processes 4 --mixed_precision bf16 train.py",
        ))
        .unwrap();
        assert_eq!((c.launcher, c.processes()), (Launcher::Accelerate, Some(4)));
        assert_eq!(c.program, ["train.py"]);
        let c = parse(&words(
            "deepspeed --num_gpus 2 --hostfile hosts train.py --deepspeed ds.json",
        ))
        .unwrap();
        assert_eq!((c.processes(), c.multi_node()), (Some(2), true));
        assert_eq!(c.program, words("train.py --deepspeed ds.json"));
        assert!(parse(&words("python train.py")).is_none());
        assert!(parse(&words("accelerate config")).is_none());
    }

    #[test]
    fn counts_that_are_not_numbers_are_no_count() {
        let c = parse(&words("torchrun --nproc_per_node $NGPUS train.py")).unwrap();
        assert_eq!(c.processes(), None);
        let c = parse(&words("torchrun --nproc_per_node auto train.py")).unwrap();
        assert_eq!(c.processes(), None);
        assert!(
            !parse(&words("torchrun --nnodes=1:1 t.py"))
                .unwrap()
                .multi_node()
        );
    }

    #[test]
    fn script_lines_skip_comments_and_prefixes() {
        let text = "#!/bin/bash\n# torchrun --nproc_per_node 16 old.py\nexport X=1\n\
                    exec bash migrate_to_cloudrobo/train.sh torchrun --standalone --nproc_per_node 4 train.py\n";
        let c = parse_script(text).unwrap();
        assert_eq!(
            (c.processes(), c.program.clone()),
            (Some(4), words("train.py"))
        );
        assert_eq!(script_of(&words("bash run.sh --x")), Some("run.sh"));
        assert_eq!(script_of(&words("python run.py")), None);
    }

    #[test]
    fn torchrun_runs_as_the_python_module_only_when_path_has_no_torchrun() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let make = |name: &str| {
            let path = bin.join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let words: Vec<String> = ["torchrun", "--nproc_per_node", "2", "train.py"]
            .map(String::from)
            .to_vec();
        let path = std::ffi::OsString::from(&bin);
        // No Python either: the command stays as typed.
        assert_eq!(torchrun_fallback(&words, Some(&path)), None);
        // A file that is not executable is not a program.
        std::fs::write(bin.join("python3"), "").unwrap();
        assert_eq!(torchrun_fallback(&words, Some(&path)), None);
        make("python3");
        let python = bin.join("python3").display().to_string();
        assert_eq!(
            torchrun_fallback(&words, Some(&path)).unwrap(),
            [
                &python,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                "2",
                "train.py"
            ]
        );
        // Another command, or a torchrun given by path, is left alone.
        let python_words: Vec<String> = ["python", "train.py"].map(String::from).to_vec();
        assert_eq!(torchrun_fallback(&python_words, Some(&path)), None);
        let by_path: Vec<String> = ["/opt/bin/torchrun", "train.py"].map(String::from).to_vec();
        assert_eq!(torchrun_fallback(&by_path, Some(&path)), None);
        make("torchrun");
        assert_eq!(torchrun_fallback(&words, Some(&path)), None);
    }
}
