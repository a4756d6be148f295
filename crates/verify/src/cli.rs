//! Command-line arguments of `npu-verify`.

pub use cli_support::ColorChoice;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  npu-verify /path/to/model --runtime --pipeline --config configs/train.yaml
  npu-verify /path/to/model --data --config configs/train.yaml
  npu-verify . --pipeline --emulate-npu --steps 2          # pre-flight on a machine without an NPU
  npu-verify . --pipeline --emulate-npu --steps 3 --record-issues  # measured findings into issues.json
  npu-verify . --pipeline --nproc-per-node 2 --emulate-npu # two ranks under torchrun, hccl as gloo
  npu-verify . --pipeline --emulate-npu --shapes-only --hbm-gb 64  # a 7B step without its memory: fits?
  npu-verify . --runtime --conda-env torch_npu_env --format json
  npu-verify . --parity --steps 3 --emulate-npu             # the port computes what the CPU computes?
  npu-verify . --parity --emulate-npu --reference-rev v1.0  # ... what the project computed before the port?
  npu-verify . --pipeline -- python -m mypkg.train --config-name base
  npu-verify . --pipeline -- bash migrate_to_cloudrobo/train.sh bash examples/finetune.sh

Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 verify could not run.
The JSON report is also written to PROJECT/migrate_to_cloudrobo/verify-report.json.";

/// Where the `--parity` reference runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReferenceDevice {
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Prove that a ported project runs on the NPU: static checks, the runtime, one short training
/// run of the project's own entry point, and its real data.
#[derive(Debug, clap::Parser)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per command-line switch"
)]
#[command(name = "npu-verify", version, after_help = EXAMPLES)]
pub struct Args {
    /// The model project's root.
    pub path: PathBuf,

    /// Check the interpreter: Python, the torch and NPU plugin imports and versions, CANN environment,
    /// visible devices, a matmul + backward on each device, bf16, the runtime patches' self-tests,
    /// and the performance environment.
    #[arg(long)]
    pub runtime: bool,

    /// Run the project's training entry for --steps optimizer steps under observation.
    #[arg(long)]
    pub pipeline: bool,

    /// Run the program twice, aligned: the reference on the CPU without runtime patches or the
    /// emulator, and the port (with --emulate-npu on the emulated npu, else on the NPU) with its
    /// patches; the same seeds and batches; compare per-step loss and per-module statistics and
    /// name the first module that diverges. Exit 0 match, 1 diverge, 2 the runs cannot be aligned.
    #[arg(long)]
    pub parity: bool,

    /// With --parity: run the port only and write its record to FILE (its batches next to it,
    /// FILE.batches.pt), to compare elsewhere with --compare.
    #[arg(
        long,
        value_name = "FILE",
        requires = "parity",
        conflicts_with = "compare"
    )]
    pub record: Option<PathBuf>,

    /// With --parity: run the port only, fed the batches of the record FILE (FILE.batches.pt),
    /// and compare it with FILE as the reference.
    #[arg(long, value_name = "FILE", requires = "parity")]
    pub compare: Option<PathBuf>,

    /// With --parity: when the port diverges, run it again at most N times to say why, each time
    /// with one thing undone, closest to the diverging module first: a runtime patch that acted in
    /// or around it switched off (`NPU_PATCHES_DISABLE`), or one of your diff hunks in its source
    /// file (against the start of the port, as `npu-assets summary` finds it) reverted in a copy of
    /// the project. 0: do not re-run.
    #[arg(long, value_name = "N", default_value_t = crate::parity_why::DEFAULT_RUNS)]
    pub why_runs: u32,

    /// With --parity: the reference is the program as it was at git revision REV of the project
    /// (e.g. the commit before the port), checked out in a temporary worktree and run on the CPU
    /// (or --reference-device); the port is the working tree.
    #[arg(long, value_name = "REV", requires = "parity", conflicts_with_all = ["record", "compare"])]
    pub reference_rev: Option<String>,

    /// With --parity: where the reference runs: `cpu` (default) or `cuda` (needs a CUDA GPU; exit 2
    /// when there is none).
    #[arg(long, value_enum, value_name = "DEVICE", default_value_t = ReferenceDevice::Cpu)]
    pub reference_device: ReferenceDevice,

    /// Pull --batches batches from the project's data loader through the training entry.
    #[arg(long)]
    pub data: bool,

    /// The config the entry takes (`--config` for argparse entries; a YAML path or a config name
    /// for hydra entries). Auto-detected when omitted.
    #[arg(long, value_name = "CFG")]
    pub config: Option<String>,

    /// The training entry script (default: found among the project's entry points).
    #[arg(long, value_name = "FILE")]
    pub entry: Option<PathBuf>,

    /// Optimizer steps to run with --pipeline.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: u32,

    /// Do not profile the --pipeline steps (aten ops launched on the device, host syncs, CPU-fallback
    /// ops and per-sample loops, per source line, after a warm-up step).
    #[arg(long)]
    pub no_profile: bool,

    /// Merge what the --pipeline step profile measured into issues.json (--issues, else the one the
    /// static check finds, else ./issues.json) as measured issues: per-sample loops (`P_VEC`), host
    /// syncs (`P_TGT`) and CPU-fallback ops (`P_CPU`), with the figures as evidence. `npu-progress
    /// --fixed` measures them again with the same command.
    #[arg(long)]
    pub record_issues: bool,

    /// Batches to pull with --data.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub batches: u32,

    /// The Python interpreter (default: the active conda env's, else python3 on PATH).
    #[arg(long, value_name = "PY", conflicts_with = "conda_env")]
    pub python: Option<PathBuf>,

    /// Run Python in this conda env (`conda run -n NAME python`).
    #[arg(long, value_name = "NAME")]
    pub conda_env: Option<String>,

    /// Run on an emulated npu device on the CPU (no NPU, CANN or NPU plugin needed).
    #[arg(long)]
    pub emulate_npu: bool,

    /// With --emulate-npu: in the --pipeline run the emulated npu keeps shape, dtype and device, no
    /// data (meta storage), so a training step of a model larger than this machine's memory is
    /// pre-flighted; every op is still checked. Values read back to the host get a stand-in (0, and the report lists them).
    /// With --nproc-per-node N, one process runs and the memory report divides it over N cards.
    #[arg(long, requires = "emulate_npu")]
    pub shapes_only: bool,

    /// The HBM of one card in GB (2^30 bytes): the --pipeline memory report says whether the peak
    /// device memory of a training step fits (an emulated run measures it).
    #[arg(long, value_name = "GB", value_parser = positive_gb)]
    pub hbm_gb: Option<f64>,

    /// Run --pipeline under torchrun with N processes on this machine (one per card; with
    /// --emulate-npu each rank gets the emulated card of its local rank, and hccl runs as
    /// gloo). Default: the process count of a torchrun launch command after `--` (or of the
    /// script it runs), else one process without torchrun.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub nproc_per_node: Option<u32>,

    /// Machines of the distributed run; verify runs one machine (`--nnodes 1`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nnodes: u32,

    /// Stop a harness run (runtime, pipeline or data) after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,

    /// The issues file to check (default: ./issues.json, else PROJECT/issues.json).
    #[arg(long, value_name = "PATH")]
    pub issues: Option<PathBuf>,

    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// No progress messages on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// Color in error messages.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,

    /// The project's own launch command, run instead of the detected entry
    /// (`-- python train.py --config X`, `-- torchrun --nproc_per_node 8 train.py …`,
    /// `-- bash scripts/finetune.sh`: the first Python program a script starts runs under the harness).
    #[arg(last = true, value_name = "LAUNCH")]
    pub launch: Vec<String>,
}

fn positive_gb(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(gb) if gb.is_finite() && gb > 0.0 => Ok(gb),
        _ => Err(format!("{text:?} is not a positive number of GB")),
    }
}
