//! `npu-train`: run a training command with the NPU environment, a log, and signal forwarding.

// The binary's job is its output: the command's output and the dry-run plan on stdout,
// the launcher's own notes on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// Doc comments here are the --help text, where Markdown backticks would show literally.
#![allow(clippy::doc_markdown)]

use clap::Parser;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use train_wrap::{env, launch, log};

const AFTER_HELP: &str = "\
Examples:
  ASCEND_RT_VISIBLE_DEVICES=0,1 npu-train bash examples/finetune.sh
  npu-train python train.py --config configs/train.yaml
  npu-train torchrun --nproc_per_node 8 train.py
  npu-train --dry-run                      print the environment it would set

What it does, like migrate_to_cloudrobo/train.sh:
  sources migrate_to_cloudrobo/env_npu.sh with bash and runs the command in the resulting
  environment; puts migrate_to_cloudrobo/ first on PYTHONPATH; copies stdout and stderr (merged,
  in order) to migrate_to_cloudrobo/logs/train_<YYYYmmdd_HHMMSS>.log while showing them.
  It also forwards Ctrl-C, SIGTERM and SIGHUP to the command's whole process group. The command
  runs in its own process group, so it cannot read from the terminal (no interactive pdb).

Exit status: the command's own; 128+N if signal N ended it; 125 npu-train failed (bad usage,
no migrate_to_cloudrobo/, env_npu.sh failed, log not writable); 126 the command cannot be run;
127 the command was not found.";

#[derive(Parser)]
#[command(
    name = "npu-train",
    version,
    about = "Run a training command on Ascend NPUs: env_npu.sh, PYTHONPATH, a log, signal forwarding",
    after_help = AFTER_HELP
)]
struct Cli {
    /// The model project root (the folder holding migrate_to_cloudrobo/).
    #[arg(long, value_name = "DIR", default_value = ".")]
    project: PathBuf,
    /// Where to write the log [default: PROJECT/migrate_to_cloudrobo/logs]
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// Print the environment it would set (as `export NAME=value` lines) and exit.
    #[arg(long)]
    dry_run: bool,
    /// The launch command and its arguments, passed through unchanged.
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// The launcher's own failures exit 125, like env(1), so they never look like the command's.
const OWN_FAILURE: u8 = 125;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { OWN_FAILURE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(first) = cli.command.first().and_then(|c| c.to_str())
        && first.starts_with('-')
    {
        eprintln!(
            "npu-train: error: unknown option `{first}`; npu-train's options go before the command (see --help)"
        );
        return ExitCode::from(OWN_FAILURE);
    }
    if cli.command.is_empty() && !cli.dry_run {
        eprintln!(
            "npu-train: error: no launch command given\n  usage: npu-train [OPTIONS] <COMMAND>...\n  example: npu-train python train.py --config configs/train.yaml"
        );
        return ExitCode::from(OWN_FAILURE);
    }
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("npu-train: error: {e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                eprintln!("  caused by: {c}");
                cause = c.source();
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cli: &Cli) -> train_wrap::Result<u8> {
    let current: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let plan = env::plan(&cli.project, &current)?;
    for note in &plan.notes {
        eprintln!("npu-train: warning: {note}");
    }
    if let Ok(devices) = std::env::var("ASCEND_RT_VISIBLE_DEVICES")
        && let Some(warning) = env::check_visible_devices(&devices)
    {
        eprintln!("npu-train: warning: {warning}");
    }
    let log_dir = cli
        .log_dir
        .clone()
        .unwrap_or_else(|| plan.migrate_dir.join("logs"));
    if cli.dry_run {
        print!("{}", env::render(&plan));
        if !cli.command.is_empty() {
            println!("# command: {}", log::command_line(&cli.command));
        }
        println!("# log: {}", log::next_name(&log_dir).display());
        return Ok(0);
    }
    let log = log::create(&log_dir, &cli.command)?;
    eprintln!("npu-train: logging to {}", log.path.display());
    let finished = launch::run(&cli.command, &plan, Some(log))?;
    for note in &finished.notes {
        eprintln!("npu-train: warning: {note}");
    }
    Ok(finished.code)
}
