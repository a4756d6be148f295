//! `npu-assets`' command line: list, show and install the files npu-patcher ships, and draft the
//! summary. The binary parses [`Cli`] and calls [`run`]; this module is the tool's output, so it
//! prints: stdout carries the product, stderr notes and errors.

use crate::Error;
use crate::catalog::{self, Source};
use crate::install::{self, Action, Outcome};
use crate::summary::{self, Written};
use crate::torch_npu_layer;
use clap::{Parser, Subcommand, ValueEnum};
use cli_support::{self, ColorChoice};
use std::io::Write;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Examples:
  npu-assets init .                          create migrate_to_cloudrobo/ with env_npu.sh, train.sh, runtime_patches.py
  npu-assets list                            every shipped file
  npu-assets show templates/train.sh         print one (a unique file name is enough: `show train.sh`)
  npu-assets show env_npu.sh | diff - migrate_to_cloudrobo/env_npu.sh
  npu-assets extract /tmp/npu-assets         write every shipped file under a folder
  npu-assets summary .                       draft migrate_to_cloudrobo/ADAPTATION_SUMMARY.md

Exit status: 0 ok; 1 the summary was edited by hand and kept (use --force); 2 usage or tool error.";

/// The templates, runtime patches and fix templates of npu-patcher, embedded in one binary
#[derive(Parser)]
#[command(name = "npu-assets", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Color in error messages.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
}

#[derive(Subcommand)]
pub enum Command {
    /// List every shipped file, one path per line.
    #[command(after_help = "Example:\n  npu-assets list --format json")]
    List {
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Print one shipped file to stdout.
    #[command(
        after_help = "Examples:\n  npu-assets show templates/env_npu.sh\n  npu-assets show P_RND.md\n  npu-assets show train.sh | diff - migrate_to_cloudrobo/train.sh"
    )]
    Show {
        /// Path under assets/ (as `list` prints it), or a file name that matches one asset.
        name: String,
    },
    /// Write every shipped file under DIR (files that differ are kept unless --force).
    #[command(after_help = "Example:\n  npu-assets extract ./npu-assets-copy")]
    Extract {
        dir: PathBuf,
        /// Replace files that differ from the shipped ones.
        #[arg(long)]
        force: bool,
    },
    /// Create PROJECT/migrate_to_cloudrobo/ with env_npu.sh, train.sh and runtime_patches.py.
    ///
    /// Run it again to update the files: a file you changed is never overwritten (it is
    /// reported as `kept`, with the command to compare it) unless you add --force.
    #[command(
        after_help = "Examples:\n  npu-assets init .\n  npu-assets init ~/src/openvla --force\n  npu-assets init . --emulator       no NPU here: also copy the emulated npu device\n\nThen:\n  ASCEND_RT_VISIBLE_DEVICES=0,1 bash migrate_to_cloudrobo/train.sh python train.py\n  NPU_PATCHER_EMULATE=1 bash migrate_to_cloudrobo/train.sh python train.py   (emulated, after --emulator)"
    )]
    Init {
        /// The model project root.
        project: PathBuf,
        /// Replace files that differ from the shipped ones, even if you changed them.
        #[arg(long)]
        force: bool,
        /// Also copy the emulated npu device to migrate_to_cloudrobo/emulator/, for
        /// `NPU_PATCHER_EMULATE=1 bash migrate_to_cloudrobo/train.sh ...` on a machine without an NPU,
        /// and fetch the real transfer_to_npu of the torch-npu release that pairs with the
        /// project's torch (see `fetch-torch-npu`; offline, the emulator's stand-in is used).
        #[arg(long)]
        emulator: bool,
        /// The project's Python, whose torch picks the torch-npu release (with --emulator)
        /// [default: python3 on PATH].
        #[arg(long, value_name = "PATH", requires = "emulator")]
        python: Option<PathBuf>,
    },
    /// Fetch the Python layer of the torch-npu release that pairs with a torch, for emulated runs.
    ///
    /// Emulated runs (`npu-verify --emulate-npu`, `NPU_PATCHER_EMULATE=1 train.sh`) import the
    /// real torch_npu/contrib/transfer_to_npu.py of that release over the emulated device. It
    /// is downloaded once with the interpreter's pip (`--no-deps`; your index and proxy settings
    /// apply), checked against the pinned sha256, and only its .py/.pyi/.json/.yaml files are
    /// kept, in ~/.cache/npu-patcher/torch-npu/<version>/ ($NPU_PATCHER_TORCH_NPU_DIR overrides).
    #[command(
        name = "fetch-torch-npu",
        after_help = "Examples:\n  npu-assets fetch-torch-npu                       for the torch of python3 on PATH\n  npu-assets fetch-torch-npu --python .venv/bin/python\n  npu-assets fetch-torch-npu --torch 2.6.0 --wheel torch_npu-2.6.0.post5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl   offline: a wheel copied here\n  npu-assets fetch-torch-npu --list                the pinned releases"
    )]
    FetchTorchNpu {
        /// The Python whose torch picks the release [default: python3 on PATH].
        #[arg(long, value_name = "PATH")]
        python: Option<PathBuf>,
        /// The torch version to pair with, instead of asking the interpreter.
        #[arg(long, value_name = "X.Y.Z")]
        torch: Option<String>,
        /// Use this wheel file (checked against the pinned sha256) instead of downloading.
        #[arg(long, value_name = "FILE")]
        wheel: Option<PathBuf>,
        /// Print the pinned releases and exit.
        #[arg(long)]
        list: bool,
    },
    /// Draft PROJECT/migrate_to_cloudrobo/ADAPTATION_SUMMARY.md from the tools' records.
    ///
    /// Reads issues.json (status and time per issue), `git diff` since the port started
    /// (the last commit before it, or --base), the last verify report and the training logs.
    /// The summary says which base it chose and how. A summary you edited is never
    /// overwritten without --force.
    #[command(
        after_help = "Examples:\n  npu-assets summary .\n  npu-assets summary . --issues ../issues.json --base v1.0\n  npu-assets summary . --stdout | diff - migrate_to_cloudrobo/ADAPTATION_SUMMARY.md"
    )]
    Summary {
        /// The model project root.
        project: PathBuf,
        /// issues.json [default: PROJECT/issues.json, then ./issues.json]
        #[arg(long, value_name = "PATH")]
        issues: Option<PathBuf>,
        /// Commit, branch or tag the port started from [default: the last commit before the
        /// port began: the parent of the first commit that touched migrate_to_cloudrobo/ or
        /// issues.json or added the NPU setup (`_NPU_PATCHER`), committed or not; HEAD while
        /// no commit did]
        #[arg(long, value_name = "REV")]
        base: Option<String>,
        /// npu-verify's JSON report [default: PROJECT/migrate_to_cloudrobo/verify-report.json]
        #[arg(long, value_name = "PATH")]
        verify_report: Option<PathBuf>,
        /// Print the draft to stdout instead of writing the file.
        #[arg(long)]
        stdout: bool,
        /// Replace a summary that was edited since it was generated.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Why a command did not complete.
#[derive(Debug)]
pub enum Failure {
    Tool(Error),
    /// Writing the output failed.
    Io(std::io::Error),
}

impl Failure {
    /// Print the failure on stderr (nothing for a closed pipe) and return the exit code: 0 for
    /// a closed pipe, 1 for a summary kept because it was edited by hand, else 2.
    pub fn report(&self, color: ColorChoice) -> u8 {
        match self {
            Failure::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
            Failure::Io(e) => {
                let e = WriteOutput(e);
                cli_support::report_error("npu-assets", &e, color);
                2
            }
            Failure::Tool(e @ Error::EditedSummary { .. }) => {
                eprintln!("npu-assets: {e}");
                1
            }
            Failure::Tool(e) => {
                cli_support::report_error("npu-assets", e, color);
                2
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write output: {0}")]
struct WriteOutput<'e>(&'e std::io::Error);

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Tool(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Io(e)
    }
}

/// Run the subcommand; `Ok` carries the exit code.
pub fn run(command: Command) -> Result<u8, Failure> {
    let source = Source::Embedded;
    let mut out = std::io::stdout().lock();
    match command {
        Command::List { format } => {
            let paths = source.list()?;
            match format {
                Format::Text => {
                    for p in paths {
                        writeln!(out, "{p}")?;
                    }
                }
                Format::Json => {
                    let rows: Vec<serde_json::Value> = paths
                        .iter()
                        .map(|p| {
                            let size = crate::get(p).map_or(0, <[u8]>::len);
                            serde_json::json!({ "path": p, "size": size })
                        })
                        .collect();
                    writeln!(out, "{}", serde_json::Value::Array(rows))?;
                }
            }
        }
        Command::Show { name } => {
            let path = catalog::resolve(&source, &name)?;
            let bytes = source.read(&path)?.ok_or(Error::MissingAsset { path })?;
            out.write_all(&bytes)?;
        }
        Command::Extract { dir, force } => {
            let outcomes = install::extract(&dir, force, &source)?;
            let again = format!("npu-assets extract {} --force", dir.display());
            report(&mut out, &outcomes, &again)?;
        }
        Command::Init {
            project,
            force,
            emulator,
            python,
        } => {
            let mut outcomes = install::init(&project, force, &source)?;
            if emulator {
                outcomes.extend(install::init_emulator(&project, force, &source)?);
            }
            let again = format!("npu-assets init {} --force", project.display());
            report(&mut out, &outcomes, &again)?;
            if emulator {
                // Offline is no failure: emulated runs then use the stand-in, and say so.
                match fetch_layer(python.as_deref(), None, None) {
                    Ok(line) => writeln!(out, "{line}")?,
                    Err(e) => eprintln!(
                        "npu-assets: warning: the emulated runs will use the emulator's stand-in \
                         transfer_to_npu, not the real one of the torch-npu release that pairs with the \
                         project's torch: {e}; to fetch it later: `{}`",
                        torch_npu_layer::FETCH_COMMAND
                    ),
                }
            }
            if let Some(missing) = outcomes.iter().find(|o| o.action == Action::Missing) {
                return Err(Error::MissingAsset {
                    path: missing.asset.clone(),
                }
                .into());
            }
        }
        Command::FetchTorchNpu {
            python,
            torch,
            wheel,
            list,
        } => {
            if list {
                for r in torch_npu_layer::releases() {
                    writeln!(out, "{}  torch {}  {}", r.version, r.torch, r.filename)?;
                }
                return Ok(0);
            }
            match fetch_layer(python.as_deref(), torch.as_deref(), wheel.as_deref()) {
                Ok(line) => writeln!(out, "{line}")?,
                Err(e) => return Err(Error::TorchNpuLayer(e).into()),
            }
        }
        Command::Summary {
            project,
            issues,
            base,
            verify_report,
            stdout,
            force,
        } => {
            let inputs = summary::gather(&summary::Options {
                project: project.clone(),
                issues,
                base,
                verify_report,
            })?;
            let draft = summary::draft(&inputs, &source)?;
            for note in &draft.notes {
                eprintln!("npu-assets: note: {note}");
            }
            if stdout {
                out.write_all(draft.text.as_bytes())?;
            } else {
                let path = summary::path_in(&project);
                let written = summary::write(&path, &draft.text, force)?;
                let verb = match written {
                    Written::Created => "created",
                    Written::Updated => "updated",
                    Written::Replaced => "replaced",
                };
                writeln!(out, "{verb:<9} {}", path.display())?;
                eprintln!(
                    "npu-assets: complete the sections marked \"(write this)\" in {}",
                    path.display()
                );
            }
        }
    }
    out.flush()?;
    Ok(0)
}

/// One line per file on stdout (`ACTION  PATH`); for kept files, how to compare and replace on stderr.
fn report(out: &mut impl Write, outcomes: &[Outcome], again: &str) -> std::io::Result<()> {
    for o in outcomes {
        writeln!(out, "{:<9} {}", o.action.as_str(), o.target.display())?;
    }
    for o in outcomes.iter().filter(|o| o.action == Action::Kept) {
        eprintln!(
            "npu-assets: kept {}: it differs from the shipped {} (changed by you?)\n  compare: npu-assets show {} | diff - {}\n  replace: {again}",
            o.target.display(),
            o.asset,
            o.asset,
            o.target.display()
        );
    }
    Ok(())
}

/// Make the torch-npu layer for `python`'s torch (or `torch`) ready; the line that says where.
fn fetch_layer(
    python: Option<&std::path::Path>,
    torch: Option<&str>,
    wheel: Option<&std::path::Path>,
) -> std::result::Result<String, torch_npu_layer::LayerError> {
    let python: Vec<std::ffi::OsString> =
        vec![python.map_or_else(|| "python3".into(), |p| p.as_os_str().to_owned())];
    let torch = match torch {
        Some(v) => v.to_owned(),
        None => torch_npu_layer::torch_version(&python)?,
    };
    let release = torch_npu_layer::release_for(&torch)?;
    let layer = torch_npu_layer::ensure(&torch_npu_layer::cache_dir(), &release, &python, wheel)?;
    Ok(format!(
        "{}  torch-npu {} (pairs with torch {torch}): transfer_to_npu for emulated runs in {}",
        if layer.fetched {
            "fetched "
        } else {
            "cached  "
        },
        layer.version,
        layer.dir.display()
    ))
}
