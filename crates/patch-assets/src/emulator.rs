//! Which copy of the emulated `npu` device (`npu_emulator` and the stand-in `torch_npu`) a run
//! uses. `npu-verify --emulate-npu`, `npu-train --emulate-npu` and `train.sh` with
//! `NPU_PATCHER_EMULATE=1` all take it from the same places, in the same order:
//!
//! 1. `$NPU_PATCHER_EMULATOR_DIR`, when set (an error when it does not hold the emulator);
//! 2. `PROJECT/migrate_to_cloudrobo/emulator/`, the copy `npu-assets init --emulator` writes;
//! 3. `emulator/` of the release bundle the binary runs from (`<bundle>/bin/<machine>/npu-*`);
//! 4. the copy embedded in the binary, extracted to a temporary folder for the run.
//!
//! `train.sh` knows no bundle and no embedded copy: it uses 1 and 2 only.

use crate::MIGRATE_DIR;
use crate::error::{Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};

/// The one switch that makes `train.sh` and `npu-train` run the launch command emulated.
pub const SWITCH: &str = "NPU_PATCHER_EMULATE";
/// Names the emulator folder to use, overriding every other place.
pub const DIR_VAR: &str = "NPU_PATCHER_EMULATOR_DIR";
/// The emulator folder inside `migrate_to_cloudrobo/`, and inside the release bundle.
pub const FOLDER: &str = "emulator";
/// Environment an emulated run gets: no CUDA device (a machine with an NPU has none), and no
/// backend autoloading (torch >= 2.5 would load a real `torch_npu`, which needs the npu name).
pub const RUN_ENV: [(&str, &str); 3] = [
    ("CUDA_VISIBLE_DEVICES", ""),
    ("TORCH_DEVICE_BACKEND_AUTOLOAD", "0"),
    ("NPU_PATCHER_EMULATED", "1"),
];

/// Where the emulator folder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `$NPU_PATCHER_EMULATOR_DIR`.
    EnvVar,
    /// `PROJECT/migrate_to_cloudrobo/emulator/`.
    Project,
    /// The release bundle's `emulator/`.
    Bundle,
    /// Extracted from this binary.
    Embedded,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::EnvVar => DIR_VAR,
            Origin::Project => "the project's migrate_to_cloudrobo/emulator",
            Origin::Bundle => "the release bundle",
            Origin::Embedded => "the copy built into this binary",
        })
    }
}

/// An emulator folder: put it on `PYTHONPATH` and `import torch_npu` gets the emulated device.
#[derive(Debug)]
pub struct Emulator {
    pub dir: PathBuf,
    pub origin: Origin,
    /// Keeps an extracted copy alive for the run.
    _extracted: Option<tempfile::TempDir>,
}

/// The switch's value turns emulation on (`1`, `true`, `yes`, `on`, any case).
pub fn switch_is_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The folder holds both packages of the emulator.
pub fn is_emulator_dir(dir: &Path) -> bool {
    dir.join("npu_emulator").join("__init__.py").is_file()
        && dir.join("torch_npu").join("__init__.py").is_file()
}

/// Find the emulator for `project`, in the order of this module's documentation. `env_dir` is
/// the value of [`DIR_VAR`] and `exe` the running binary (both passed in so tests can vary them).
pub fn locate(project: &Path, env_dir: Option<&Path>, exe: Option<&Path>) -> Result<Emulator> {
    let found = |dir: PathBuf, origin| Emulator {
        dir: std::path::absolute(&dir).unwrap_or(dir),
        origin,
        _extracted: None,
    };
    if let Some(dir) = env_dir.filter(|d| !d.as_os_str().is_empty()) {
        if is_emulator_dir(dir) {
            return Ok(found(dir.to_owned(), Origin::EnvVar));
        }
        return Err(Error::NotAnEmulator {
            path: dir.to_owned(),
        });
    }
    let in_project = project.join(MIGRATE_DIR).join(FOLDER);
    if is_emulator_dir(&in_project) {
        return Ok(found(in_project, Origin::Project));
    }
    if let Some(bundle) = exe.and_then(bundle_emulator) {
        return Ok(found(bundle, Origin::Bundle));
    }
    extract_embedded()
}

/// [`locate`] with this process's environment and executable.
pub fn locate_here(project: &Path) -> Result<Emulator> {
    let env_dir = std::env::var_os(DIR_VAR).map(PathBuf::from);
    let exe = std::env::current_exe().ok();
    locate(project, env_dir.as_deref(), exe.as_deref())
}

/// `<bundle>/emulator` for a binary at `<bundle>/bin/<machine>/<name>` (the release bundle's
/// layout: one folder per architecture) or `<bundle>/bin/<name>`.
fn bundle_emulator(exe: &Path) -> Option<PathBuf> {
    let exe = exe.canonicalize().unwrap_or_else(|_| exe.to_owned());
    let mut bin = exe.parent()?;
    if bin.file_name()? != "bin" {
        bin = bin.parent()?;
        if bin.file_name()? != "bin" {
            return None;
        }
    }
    let dir = bin.parent()?.join(FOLDER);
    is_emulator_dir(&dir).then_some(dir)
}

fn extract_embedded() -> Result<Emulator> {
    let tmp = tempfile::Builder::new()
        .prefix("npu-emulator-")
        .tempdir()
        .map_err(|source| Error::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    let dir = tmp.path().join(FOLDER);
    let files = embedded_files();
    if files.is_empty() {
        return Err(Error::MissingAsset {
            path: format!("{FOLDER}/"),
        });
    }
    for (rel, bytes) in files {
        let target = rel.split('/').fold(dir.clone(), |p, part| p.join(part));
        crate::write::atomic(&target, bytes, 0o644)?;
    }
    Ok(Emulator {
        dir,
        origin: Origin::Embedded,
        _extracted: Some(tmp),
    })
}

/// A byte-code cache left by a Python run, not part of the emulator.
pub fn is_cache(path: &str) -> bool {
    path.contains("__pycache__")
        || Path::new(path)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pyc"))
}

/// The embedded emulator's files: (path inside `emulator/`, bytes), without byte-code caches.
pub fn embedded_files() -> Vec<(String, &'static [u8])> {
    let prefix = format!("{FOLDER}/");
    let mut files: Vec<(String, &'static [u8])> = crate::catalog::embedded_files()
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&prefix)?.to_owned();
            if is_cache(&rel) {
                return None;
            }
            crate::get(&path).map(|bytes| (rel, bytes))
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_emulator(dir: &Path) {
        for package in ["npu_emulator", "torch_npu"] {
            std::fs::create_dir_all(dir.join(package)).unwrap();
            std::fs::write(dir.join(package).join("__init__.py"), "").unwrap();
        }
    }

    #[test]
    fn the_switch_takes_the_usual_spellings_of_yes() {
        for on in ["1", "true", "YES", " on "] {
            assert!(switch_is_on(Some(on)), "{on}");
        }
        for off in ["", "0", "false", "no", "npu"] {
            assert!(!switch_is_on(Some(off)), "{off}");
        }
        assert!(!switch_is_on(None));
    }

    #[test]
    fn a_binary_in_a_machine_folder_of_the_bundle_finds_its_emulator() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        let bundle = tmp.path().join("bundle");
        std::fs::create_dir_all(&project).unwrap();
        fake_emulator(&bundle.join(FOLDER));
        for machine in ["x86_64", "aarch64"] {
            let exe = bundle.join("bin").join(machine).join("npu-train");
            std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
            std::fs::write(&exe, "").unwrap();
            let found = locate(&project, None, Some(&exe)).unwrap();
            assert_eq!(found.origin, Origin::Bundle, "{machine}");
        }
        // Two folders below bin/ is not the bundle's layout.
        let deeper = bundle.join("bin/aarch64/old/npu-train");
        std::fs::create_dir_all(deeper.parent().unwrap()).unwrap();
        std::fs::write(&deeper, "").unwrap();
        assert_eq!(
            locate(&project, None, Some(&deeper)).unwrap().origin,
            Origin::Embedded
        );
    }

    #[test]
    fn the_order_is_env_var_project_bundle_embedded() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        let bundle = tmp.path().join("bundle");
        let exe = bundle.join("bin").join("npu-train");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        std::fs::write(&exe, "").unwrap();
        std::fs::create_dir_all(&project).unwrap();

        // Nothing on disk: the embedded copy, with both packages.
        let embedded = locate(&project, None, Some(&exe)).unwrap();
        assert_eq!(embedded.origin, Origin::Embedded);
        assert!(is_emulator_dir(&embedded.dir), "{}", embedded.dir.display());

        fake_emulator(&bundle.join(FOLDER));
        assert_eq!(
            locate(&project, None, Some(&exe)).unwrap().origin,
            Origin::Bundle
        );
        // A binary outside a bin/ folder is not in a bundle.
        let loose = tmp.path().join("npu-train");
        std::fs::write(&loose, "").unwrap();
        assert_eq!(
            locate(&project, None, Some(&loose)).unwrap().origin,
            Origin::Embedded
        );

        fake_emulator(&project.join(MIGRATE_DIR).join(FOLDER));
        let in_project = locate(&project, None, Some(&exe)).unwrap();
        assert_eq!(in_project.origin, Origin::Project);
        assert!(in_project.dir.ends_with("migrate_to_cloudrobo/emulator"));

        let elsewhere = tmp.path().join("elsewhere");
        fake_emulator(&elsewhere);
        let chosen = locate(&project, Some(&elsewhere), Some(&exe)).unwrap();
        assert_eq!(chosen.origin, Origin::EnvVar);
        // An empty variable is unset.
        assert_eq!(
            locate(&project, Some(Path::new("")), Some(&exe))
                .unwrap()
                .origin,
            Origin::Project
        );
    }

    #[test]
    fn a_variable_naming_no_emulator_is_an_error_that_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let err = locate(tmp.path(), Some(&tmp.path().join("nope")), None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(DIR_VAR) && text.contains("nope"), "{text}");
    }

    #[test]
    fn the_embedded_copy_holds_the_stand_in_and_no_caches() {
        let files = embedded_files();
        let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert!(names.contains(&"npu_emulator/__init__.py"), "{names:?}");
        assert!(names.contains(&"torch_npu/__init__.py"), "{names:?}");
        assert!(
            names.contains(&"torch_npu/contrib/transfer_to_npu.py"),
            "{names:?}"
        );
        assert!(names.iter().all(|n| !is_cache(n)), "{names:?}");
    }
}
