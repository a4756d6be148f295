//! `npu-train`'s command line: the arguments, and running the launch command with them. The
//! binary parses [`Cli`] and calls [`run`]; this module is the tool's output, so it prints: the
//! dry-run plan on stdout, the launcher's own notes and errors on stderr.

use crate::{Error, Result, env, launch, log};
use clap::Parser;
use cli_support::{self, ColorChoice};
use patch_assets::emulator;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Examples:
  ASCEND_RT_VISIBLE_DEVICES=0,1 npu-train bash examples/finetune.sh
  npu-train python train.py --config configs/train.yaml
  npu-train torchrun --nproc_per_node 8 train.py
  npu-train --dry-run                      print the environment it would set
  npu-train --emulate-npu python train.py  no NPU here: run on the emulated npu device (CPU torch)

What it does, like migrate_to_cloudrobo/train.sh:
  sources migrate_to_cloudrobo/env_npu.sh with bash and runs the command in the resulting
  environment; puts migrate_to_cloudrobo/ first on PYTHONPATH and exports it as
  NPU_PATCHER_MIGRATE_DIR (where the NPU setup that npu-scan --fix inserts looks first); copies
  stdout and stderr (merged, in order) to migrate_to_cloudrobo/logs/train_<YYYYmmdd_HHMMSS>.log
  while showing them.
  It also forwards Ctrl-C, SIGTERM and SIGHUP to the command's whole process group. The command
  runs in its own process group, so it cannot read from the terminal (no interactive pdb).

Distributed launches (torchrun, python -m torch.distributed.run, accelerate launch, deepspeed, or
a shell script running one) pass through unchanged too. ASCEND_RT_VISIBLE_DEVICES must list at
least --nproc_per_node cards (else exit 125 before anything starts); a multi-node command without
HCCL_IF_IP or HCCL_SOCKET_IFNAME gets a warning; torchrun gets PET_TEE=3 and PET_LOG_DIR (its
--tee 3 and --log-dir: rank-prefixed lines, one log per rank in logs/train_<stamp>_ranks/) unless
the command or the caller set them. Emulated, each rank gets its own emulated card.

--emulate-npu (or NPU_PATCHER_EMULATE=1, the switch train.sh reads too) also puts the emulated
npu device and a stand-in torch_npu on PYTHONPATH, hides CUDA devices, and says on stderr and in
the log that the run is emulated. The emulator is $NPU_PATCHER_EMULATOR_DIR, else
migrate_to_cloudrobo/emulator/ (npu-assets init --emulator), else the release bundle's emulator/,
else the copy built into npu-train: the same search npu-verify --emulate-npu makes.

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
pub struct Cli {
    /// The model project root (the folder holding migrate_to_cloudrobo/).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub project: PathBuf,
    /// Where to write the log [default: PROJECT/migrate_to_cloudrobo/logs]
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Color in error messages.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
    /// Print the environment it would set (as `export NAME=value` lines) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Run on the emulated npu device on the CPU (no NPU needed); also NPU_PATCHER_EMULATE=1.
    #[arg(long)]
    pub emulate_npu: bool,
    /// The launch command and its arguments, passed through unchanged.
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// The launcher's own failures exit 125, like env(1), so they never look like the command's.
pub const OWN_FAILURE: u8 = 125;

/// Parse the arguments; `Err` is the exit code after clap printed help, the version or a usage
/// error (a usage error is the launcher's own failure, 125).
pub fn parse() -> std::result::Result<Cli, u8> {
    Cli::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() { OWN_FAILURE } else { 0 }
    })
}

/// Run the launch command and return the exit code: the command's own, or the launcher's for
/// its failures (printed on stderr).
pub fn run(cli: &Cli) -> u8 {
    usage(cli).and_then(|()| launch(cli)).unwrap_or_else(|e| {
        cli_support::report_error("npu-train", &e, cli.color);
        e.exit_code()
    })
}

/// A bare `torchrun` when the launch environment's `PATH` has none: the same launcher as
/// `python -m torch.distributed.run` of the Python on that `PATH`, and the line that says so.
fn torchrun_module(
    command: &[OsString],
    plan: &env::Plan,
    current: &BTreeMap<OsString, OsString>,
) -> Option<(Vec<OsString>, String)> {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let path = match plan.changes.get(std::ffi::OsStr::new("PATH")) {
        Some(changed) => changed.clone(),
        None => current.get(std::ffi::OsStr::new("PATH")).cloned(),
    };
    let module = cli_support::launcher::torchrun_fallback(&words, path.as_deref())?;
    let note = format!(
        "no `torchrun` on PATH; running it as `{} -m torch.distributed.run` (torchrun's own module, the same launcher)",
        module[0]
    );
    Some((module.into_iter().map(OsString::from).collect(), note))
}

/// What clap cannot check: an option after the command's start, and a missing command.
fn usage(cli: &Cli) -> Result<()> {
    if let Some(first) = cli.command.first().and_then(|c| c.to_str())
        && first.starts_with('-')
    {
        return Err(Error::Usage(format!(
            "unknown option `{first}`; npu-train's options go before the command (see --help)"
        )));
    }
    if cli.command.is_empty() && !cli.dry_run {
        return Err(Error::Usage(
            "no launch command given\n  usage: npu-train [OPTIONS] <COMMAND>...\n  example: npu-train python train.py --config configs/train.yaml"
                .to_owned(),
        ));
    }
    Ok(())
}

fn launch(cli: &Cli) -> Result<u8> {
    let current: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let switch = std::env::var(emulator::SWITCH).ok();
    let emulate = cli.emulate_npu || emulator::switch_is_on(switch.as_deref());
    // env_npu.sh looks for no CANN on an emulated run.
    let mut sourced_with = current.clone();
    if emulate {
        sourced_with.insert("NPU_PATCHER_EMULATED".into(), "1".into());
    }
    let mut plan = env::plan(&cli.project, &sourced_with)?;
    for note in &plan.notes {
        eprintln!("npu-train: warning: {note}");
    }
    // Held for the whole run: an extracted copy lives as long as this value.
    let emulated = if emulate {
        let found = emulator::locate_here(&cli.project)?;
        env::emulate(&mut plan, &found.dir, &current);
        Some(found)
    } else {
        None
    };
    let banner = emulated.as_ref().map(|e| {
        format!(
            "EMULATED NPU: this run uses the emulated npu device on the CPU ({}, from {}), not an Ascend NPU; it checks control flow, devices and dtypes, not numerics, speed or memory",
            e.dir.display(),
            e.origin
        )
    });
    if let Ok(devices) = std::env::var("ASCEND_RT_VISIBLE_DEVICES")
        && let Some(warning) = env::check_visible_devices(&devices)
    {
        eprintln!("npu-train: warning: {warning}");
    }
    let log_dir = cli
        .log_dir
        .clone()
        .unwrap_or_else(|| plan.migrate_dir.join("logs"));
    if let Some(found) = crate::dist::parse(&cli.command, &cli.project) {
        let lookup = |name: &str| std::env::var(name).ok();
        for note in crate::dist::check(&found, &lookup).map_err(Error::Usage)? {
            eprintln!("npu-train: warning: {note}");
        }
        let log_name = log::next_name(&log_dir);
        let ranks_dir = log_name.with_file_name(format!(
            "{}_ranks",
            log_name.file_stem().unwrap_or_default().to_string_lossy()
        ));
        crate::dist::apply(&found, &mut plan, &ranks_dir, emulated.is_some(), &current);
    }
    if cli.dry_run {
        if let Some(banner) = &banner {
            println!("# {banner}");
        }
        print!("{}", env::render(&plan));
        if !cli.command.is_empty() {
            println!("# command: {}", log::command_line(&cli.command));
        }
        if let Some((_, note)) = torchrun_module(&cli.command, &plan, &current) {
            println!("# {note}");
        }
        println!("# log: {}", log::next_name(&log_dir).display());
        return Ok(0);
    }
    let mut log = log::create(&log_dir, &cli.command)?;
    if let Some(banner) = &banner {
        eprintln!("npu-train: {banner}");
        log::note(&mut log, banner)?;
    }
    let command = match torchrun_module(&cli.command, &plan, &current) {
        Some((command, note)) => {
            eprintln!("npu-train: {note}");
            log::note(&mut log, &note)?;
            command
        }
        None => cli.command.clone(),
    };
    eprintln!("npu-train: logging to {}", log.path.display());
    // Python processes of the run that returned from their program write a file here at exit
    // (`NPU_PATCHER_EXIT_MARKER`, read by the emulator and the runtime patches): an abort after
    // that is the interpreter's exit, not the training.
    let markers = tempfile::Builder::new()
        .prefix("npu-train-exit-")
        .tempdir()
        .ok();
    if let Some(dir) = &markers {
        plan.changes
            .insert(EXIT_MARKER.into(), Some(dir.path().as_os_str().to_owned()));
    }
    let log_path = log.path.clone();
    let finished = launch::run(&command, &plan, Some(log))?;
    for note in &finished.notes {
        eprintln!("npu-train: warning: {note}");
    }
    let finished_programs = markers.as_ref().map_or(0, |dir| {
        std::fs::read_dir(dir.path()).map_or(0, Iterator::count)
    });
    if let Some(note) = abort_at_exit(finished.signal, finished.code, finished_programs) {
        eprintln!("npu-train: {note}");
    } else if finished.code != 0 {
        let tail = std::fs::read(&log_path)
            .map(|bytes| {
                let start = bytes.len().saturating_sub(64 * 1024);
                String::from_utf8_lossy(&bytes[start..]).into_owned()
            })
            .unwrap_or_default();
        if let Some(note) = abort_during_run(&tail, banner.is_some(), &log_path) {
            eprintln!("npu-train: {note}");
        }
    }
    if banner.is_some() {
        eprintln!(
            "npu-train: EMULATED NPU: the run above (exit {}) used the emulated npu device, not an Ascend NPU",
            finished.code
        );
    }
    Ok(finished.code)
}

/// The environment variable naming the folder where Python processes of the run leave a file when
/// they have returned from their program and run their `atexit` handlers.
pub const EXIT_MARKER: &str = "NPU_PATCHER_EXIT_MARKER";

/// What to say when the run ended by SIGABRT (signal 6, or a shell's exit 134) after
/// `finished_programs` Python processes had finished their program: the interpreter aborted at
/// exit. The exit code stays the abort's.
pub fn abort_at_exit(signal: Option<i32>, code: u8, finished_programs: usize) -> Option<String> {
    const SIGABRT: i32 = 6;
    let aborted = signal == Some(SIGABRT) || (signal.is_none() && i32::from(code) == 128 + SIGABRT);
    (aborted && finished_programs > 0).then(|| {
        format!(
            "the interpreter aborted at exit after the program finished: {finished_programs} Python \
             process(es) of the run had returned from the program and run their atexit handlers before \
             the abort (SIGABRT, exit {code}); the training's work is done, and the exit code is kept"
        )
    })
}

/// What a process prints when it aborts without a Python exception (`std::terminate`, a C++
/// assertion), and torchrun's report of a rank that SIGABRT ended.
const ABORT_MARKERS: [&str; 5] = [
    "terminate called",
    "Fatal Python error: Aborted",
    "Aborted (core dumped)",
    "SIGABRT",
    "exitcode  : -6",
];

/// What to say when a failed run's output (`tail`, the end of its log) shows a process that
/// aborted while the program ran: the abort, the last line printed before it (what was running)
/// and, on the emulated npu, that it is an emulator fault.
pub fn abort_during_run(tail: &str, emulated: bool, log: &std::path::Path) -> Option<String> {
    let lines: Vec<&str> = tail.lines().collect();
    let at = lines
        .iter()
        .position(|line| ABORT_MARKERS.iter().any(|m| line.contains(m)))?;
    let message = lines[at].trim();
    let before = lines[..at]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .map_or_else(|| "nothing".to_owned(), |l| format!("`{l}`"));
    let cause = if emulated {
        "an emulator fault of the emulated npu, not an error of the training code (the emulator reports what \
         it cannot do as EmulatedNPUError or EmulatorLimitation, never by aborting); report it with the log, \
         and try the same command on CPU ranks or on an NPU"
    } else {
        "an abort inside torch, torch_npu or a C++ extension, not a Python error of the training code; rerun \
         with TORCH_SHOW_CPP_STACKTRACES=1 to see where"
    };
    Some(format!(
        "a process of the run aborted while the program was running (`{message}`); the last line before it: \
         {before}; {cause} ({})",
        log.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::{abort_at_exit, abort_during_run};
    use std::path::Path;

    #[test]
    fn a_rank_that_aborts_mid_run_is_named_with_what_ran_and_on_the_emulator_an_emulator_fault() {
        let tail = "[default0]:step 0 loss 0.25\n[default0]:terminate called without an active exception\n\
                    exitcode  : -6 (pid: 12)\n";
        let note = abort_during_run(tail, true, Path::new("logs/train_1.log")).unwrap();
        assert!(
            note.contains("`[default0]:terminate called without an active exception`"),
            "{note}"
        );
        assert!(note.contains("`[default0]:step 0 loss 0.25`"), "{note}");
        assert!(
            note.contains("an emulator fault") && note.contains("logs/train_1.log"),
            "{note}"
        );
        let real = abort_during_run(tail, false, Path::new("l.log")).unwrap();
        assert!(
            real.contains("TORCH_SHOW_CPP_STACKTRACES=1") && !real.contains("emulator fault"),
            "{real}"
        );
        // A Python error is not an abort.
        assert_eq!(
            abort_during_run("Traceback\nValueError: x\n", true, Path::new("l.log")),
            None
        );
    }

    #[test]
    fn an_abort_after_finished_programs_is_an_abort_at_exit() {
        let note = abort_at_exit(Some(6), 134, 1).unwrap();
        assert!(note.starts_with("the interpreter aborted at exit after the program finished"));
        // Through a shell wrapper: the shell exits 134 for its child's SIGABRT.
        assert!(abort_at_exit(None, 134, 2).is_some());
    }

    #[test]
    fn an_abort_before_the_program_finished_or_another_end_says_nothing() {
        assert_eq!(abort_at_exit(Some(6), 134, 0), None);
        assert_eq!(abort_at_exit(Some(9), 137, 1), None);
        assert_eq!(abort_at_exit(None, 1, 1), None);
        assert_eq!(abort_at_exit(None, 0, 1), None);
    }
}
