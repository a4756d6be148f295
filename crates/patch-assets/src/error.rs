//! Errors: each names the file or command and says how to fix it.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no asset named `{name}`{hint}; run `npu-assets list` to see them all")]
    UnknownAsset { name: String, hint: String },
    #[error(
        "this build of npu-assets does not contain `{path}` (it was missing from assets/ when the binary was built); rebuild or use a release bundle"
    )]
    MissingAsset { path: String },
    #[error("{} is not a directory; pass the model project root (the folder that will hold migrate_to_cloudrobo/)", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Issues(#[from] issue_model::Error),
    #[error(
        "{} was edited after `npu-assets summary` wrote it, so it was left as it is; compare: `npu-assets summary <project> --stdout | diff - {}`; replace it: add --force",
        path.display(),
        path.display()
    )]
    EditedSummary { path: PathBuf },
    #[error(
        "NPU_PATCHER_EMULATOR_DIR={} does not hold the emulator (npu_emulator/ and torch_npu/); point it at <skill dir>/emulator, or unset it to use the project's or the bundle's copy",
        path.display()
    )]
    NotAnEmulator { path: PathBuf },
    #[error(transparent)]
    TorchNpuLayer(#[from] crate::torch_npu_layer::LayerError),
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
}
