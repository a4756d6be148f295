//! The Python layer of the torch-npu release that pairs with the user's torch, for emulated runs.
//!
//! An emulated run imports the real `torch_npu/contrib/transfer_to_npu.py` of that release over
//! the emulated device (the emulator's `torch_npu` stand-in finds it in the cache), so that what
//! the pre-flight checks is what `torch_npu` does. `torch_npu` cannot be installed without CANN,
//! so only its Python sources are used: the wheel is fetched with the interpreter's own pip
//! (`pip download --no-deps`, which honours the user's index and proxy settings), checked against
//! the sha256 of the pinned release list (`torch-npu/wheels.json`), and only its `.py`, `.pyi`,
//! `.json` and `.yaml` files under `torch_npu/` are extracted into
//! `~/.cache/npu-patcher/torch-npu/<version>/` (`$NPU_PATCHER_TORCH_NPU_DIR` overrides). Nothing
//! from a wheel is part of this binary.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned releases: version, the torch each pairs with, the wheel's file name and sha256.
const RELEASES: &str = include_str!("../../../torch-npu/wheels.json");

/// The file that marks a complete extraction; it holds the wheel's sha256.
const COMPLETE: &str = ".complete";
/// The module an emulated run needs from the layer.
const TRANSFER: &str = "torch_npu/contrib/transfer_to_npu.py";
/// The command that fills the cache, for messages.
pub const FETCH_COMMAND: &str = "npu-assets fetch-torch-npu --python <the project's python>";

/// One pinned torch-npu release.
#[derive(Debug, Clone, Deserialize)]
pub struct Release {
    pub version: String,
    /// The torch release it pairs with (its base version).
    pub torch: String,
    pub filename: String,
    pub sha256: String,
}

#[derive(Deserialize)]
struct Releases {
    wheels: Vec<Release>,
}

/// Every pinned release, oldest first.
pub fn releases() -> Vec<Release> {
    serde_json::from_str::<Releases>(RELEASES)
        .map(|r| r.wheels)
        .unwrap_or_default()
}

/// `2.6.0` of `2.6.0+cpu`, `2.6.0.post5` or `2.6.0a0`.
fn base(version: &str) -> &str {
    let version = version.split('+').next().unwrap_or(version);
    let version = version.split(".post").next().unwrap_or(version);
    let end = version
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(version.len());
    version[..end].trim_end_matches('.')
}

/// The pinned release that pairs with torch `torch_version` (`torch_npu`'s own rule: the same base
/// version), the newest post release when several do.
pub fn pairing(torch_version: &str) -> Option<Release> {
    let torch = base(torch_version);
    releases()
        .into_iter()
        .rev()
        .find(|r| base(&r.torch) == torch)
}

/// Where extracted layers live (the emulator's stand-in reads the same place).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPU_PATCHER_TORCH_NPU_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("NPU_PATCHER_VENV_DIR") {
        return PathBuf::from(dir).join("torch-npu");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
        || {
            std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
                .join(".cache")
        },
        PathBuf::from,
    );
    cache.join("npu-patcher").join("torch-npu")
}

/// Why the layer could not be made ready; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("cannot read the torch version of `{python}`: {message}")]
    NoTorch { python: String, message: String },
    #[error(
        "no pinned torch-npu release pairs with torch {torch} (pinned: {pinned}); the emulator's stand-in transfer_to_npu runs instead"
    )]
    Unpaired { torch: String, pinned: String },
    #[error(
        "pip could not download torch-npu {version} ({reason}); offline? copy the wheel {filename} here and run `npu-assets fetch-torch-npu --wheel FILE`, or run `{FETCH_COMMAND}` when online"
    )]
    Download {
        version: String,
        filename: String,
        reason: String,
    },
    #[error(
        "{} has sha256 {actual}, but torch-npu {version} is pinned at {expected}; the file is not that release (a changed mirror?); remove it and fetch again",
        path.display()
    )]
    Hash {
        path: PathBuf,
        version: String,
        expected: String,
        actual: String,
    },
    #[error("cannot extract {}: {message}", path.display())]
    Extract { path: PathBuf, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A layer ready in the cache.
#[derive(Debug, Clone)]
pub struct Layer {
    pub version: String,
    pub dir: PathBuf,
    /// It was downloaded now (not found in the cache).
    pub fetched: bool,
}

/// Whether the layer of `release` is already extracted under `cache`.
pub fn cached(cache: &Path, release: &Release) -> Option<PathBuf> {
    let dir = cache.join(&release.version);
    let complete = fs::read_to_string(dir.join(COMPLETE)).ok()?;
    (complete.trim() == release.sha256 && dir.join(TRANSFER).is_file()).then_some(dir)
}

/// The torch version `python` (a command: the interpreter, or `conda run -n ENV python`) has,
/// read from its package metadata without importing torch.
pub fn torch_version(python: &[OsString]) -> Result<String, LayerError> {
    let shown = python
        .iter()
        .map(|w| w.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let (program, args) = python.split_first().ok_or_else(|| LayerError::NoTorch {
        python: shown.clone(),
        message: "no interpreter".to_owned(),
    })?;
    let out = Command::new(program)
        .args(args)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('torch'))",
        ])
        .output()
        .map_err(|e| LayerError::NoTorch {
            python: shown.clone(),
            message: e.to_string(),
        })?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || version.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(LayerError::NoTorch {
            python: shown,
            message: err
                .lines()
                .last()
                .unwrap_or("torch is not installed")
                .to_owned(),
        });
    }
    Ok(version)
}

/// The release that pairs with `torch`, or why there is none.
pub fn release_for(torch: &str) -> Result<Release, LayerError> {
    pairing(torch).ok_or_else(|| LayerError::Unpaired {
        torch: torch.to_owned(),
        pinned: releases()
            .iter()
            .map(|r| format!("{} for torch {}", r.version, r.torch))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Make the layer of `release` ready under `cache`: from the cache, else from `wheel` (a file the
/// user has), else downloaded with `python -m pip download`.
pub fn ensure(
    cache: &Path,
    release: &Release,
    python: &[OsString],
    wheel: Option<&Path>,
) -> Result<Layer, LayerError> {
    if wheel.is_none()
        && let Some(dir) = cached(cache, release)
    {
        return Ok(Layer {
            version: release.version.clone(),
            dir,
            fetched: false,
        });
    }
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| LayerError::Write { path, source }
    };
    fs::create_dir_all(cache).map_err(write_err(cache))?;
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(cache)
        .map_err(write_err(cache))?;
    let archive = match wheel {
        Some(path) => path.to_owned(),
        None => download(release, python, work.path())?,
    };
    let actual = sha256_file(&archive).map_err(|e| LayerError::Extract {
        path: archive.clone(),
        message: e.to_string(),
    })?;
    if actual != release.sha256 {
        return Err(LayerError::Hash {
            path: archive,
            version: release.version.clone(),
            expected: release.sha256.clone(),
            actual,
        });
    }
    let staged = work.path().join("layer");
    extract(&archive, &staged)?;
    fs::write(staged.join(COMPLETE), format!("{}\n", release.sha256))
        .map_err(write_err(&staged))?;
    let target = cache.join(&release.version);
    // Another run may have finished first; its copy is as good as ours.
    if cached(cache, release).is_none() {
        if target.exists() {
            fs::remove_dir_all(&target).map_err(write_err(&target))?;
        }
        fs::rename(&staged, &target).map_err(write_err(&target))?;
    }
    Ok(Layer {
        version: release.version.clone(),
        dir: target,
        fetched: true,
    })
}

/// `pip download` of the pinned wheel into `into`; its path.
fn download(release: &Release, python: &[OsString], into: &Path) -> Result<PathBuf, LayerError> {
    let fail = |reason: String| LayerError::Download {
        version: release.version.clone(),
        filename: release.filename.clone(),
        reason,
    };
    let (program, args) = python
        .split_first()
        .ok_or_else(|| fail("no interpreter".to_owned()))?;
    // Only the wheel's Python sources are used, so the pinned file (one CPython x86_64 build)
    // serves every host: ask pip for exactly its tags.
    let (python_tag, abi, platforms) = wheel_tags(&release.filename)
        .ok_or_else(|| fail("a pinned file name without wheel tags".to_owned()))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]);
    for platform in platforms {
        command.args(["--platform", platform]);
    }
    let out = command
        .args(["--python-version", &python_version(python_tag)])
        .args(["--implementation", "cp", "--abi", abi])
        .args(["--timeout", "15", "--retries", "1", "--quiet", "--dest"])
        .arg(into)
        .arg(format!("torch-npu=={}", release.version))
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .map_err(|e| fail(e.to_string()))?;
    let path = into.join(&release.filename);
    if !out.status.success() || !path.is_file() {
        let err = String::from_utf8_lossy(&out.stderr);
        let reason = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("pip found no matching file")
            .trim()
            .to_owned();
        return Err(fail(reason));
    }
    Ok(path)
}

/// `(python tag, abi tag, platform tags)` of a wheel file name
/// (`name-version-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl`).
fn wheel_tags(filename: &str) -> Option<(&str, &str, Vec<&str>)> {
    let stem = filename.strip_suffix(".whl")?;
    let mut parts = stem.rsplitn(4, '-');
    let platform = parts.next()?;
    let abi = parts.next()?;
    let python = parts.next()?;
    parts.next()?;
    Some((python, abi, platform.split('.').collect()))
}

/// `3.11` of `cp311`.
fn python_version(tag: &str) -> String {
    let digits = tag.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    match digits.split_at_checked(1) {
        Some((major, minor)) if !minor.is_empty() => format!("{major}.{minor}"),
        _ => digits.to_owned(),
    }
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    let mut hex = String::with_capacity(64);
    for byte in hasher.finalize() {
        use std::fmt::Write as _;
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(hex)
}

/// Whether a wheel member belongs to the Python layer.
fn is_layer_file(name: &str) -> bool {
    name.starts_with("torch_npu/")
        && [".py", ".pyi", ".json", ".yaml"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Extract the Python layer of the wheel `archive` into `into`.
fn extract(archive: &Path, into: &Path) -> Result<(), LayerError> {
    let fail = |message: String| LayerError::Extract {
        path: archive.to_owned(),
        message,
    };
    let file = fs::File::open(archive).map_err(|e| fail(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| fail(format!("not a wheel: {e}")))?;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| fail(e.to_string()))?;
        let name = entry
            .name()
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default();
        if !entry.is_file() || !is_layer_file(&name) {
            continue;
        }
        // `enclosed_name` refuses absolute paths and `..`: nothing lands outside `into`.
        let rel = entry
            .enclosed_name()
            .ok_or_else(|| fail(format!("unsafe member path {name}")))?;
        let dest = into.join(rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| fail(e.to_string()))?;
        }
        let mut body = Vec::new();
        entry
            .read_to_end(&mut body)
            .map_err(|e| fail(format!("{name}: {e}")))?;
        fs::write(&dest, body).map_err(|e| fail(format!("{}: {e}", dest.display())))?;
    }
    if !into.join(TRANSFER).is_file() {
        return Err(fail(format!("the wheel has no {TRANSFER}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn every_pinned_torch_pairs_with_its_newest_release() {
        let all = releases();
        assert!(all.len() >= 2, "{all:?}");
        for r in &all {
            assert_eq!(
                base(&pairing(&r.torch).unwrap().torch),
                base(&r.torch),
                "{r:?}"
            );
        }
        assert_eq!(base("2.6.0+cpu"), "2.6.0");
        assert_eq!(base("2.1.0.post17"), "2.1.0");
        assert_eq!(base("2.5.0a0+git123"), "2.5.0");
        assert!(pairing("1.11.0").is_none());
        assert!(matches!(
            release_for("1.11.0"),
            Err(LayerError::Unpaired { .. })
        ));
    }

    fn wheel(dir: &Path, members: &[(&str, &str)]) -> PathBuf {
        let path = dir.join("t.whl");
        let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, body) in members {
            zip.start_file(*name, options).unwrap();
            zip.write_all(body.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    fn release_of(path: &Path) -> Release {
        Release {
            version: "9.9.9".to_owned(),
            torch: "9.9.9".to_owned(),
            filename: "t.whl".to_owned(),
            sha256: sha256_file(path).unwrap(),
        }
    }

    #[test]
    fn a_given_wheel_is_checked_and_only_its_python_layer_extracted() {
        let dir = tempfile::tempdir().unwrap();
        let path = wheel(
            dir.path(),
            &[
                (TRANSFER, "x = 1\n"),
                ("torch_npu/csrc/aten/npu_native_functions.yaml", "a: 1\n"),
                ("torch_npu/lib/libtorch_npu.so", "ELF"),
                ("torch_npu-9.9.9.dist-info/METADATA", "m"),
            ],
        );
        let cache = dir.path().join("cache");
        let release = release_of(&path);
        let layer = ensure(&cache, &release, &[], Some(&path)).unwrap();
        assert!(layer.fetched);
        assert!(layer.dir.join(TRANSFER).is_file());
        assert!(
            layer
                .dir
                .join("torch_npu/csrc/aten/npu_native_functions.yaml")
                .is_file()
        );
        assert!(!layer.dir.join("torch_npu/lib/libtorch_npu.so").exists());
        // Next time it comes from the cache, without an interpreter.
        let again = ensure(&cache, &release, &[], None).unwrap();
        assert!(!again.fetched);
        // A file that is not the pinned release is refused and nothing is installed.
        let other = tempfile::tempdir().unwrap();
        let bad = wheel(other.path(), &[(TRANSFER, "y = 2\n")]);
        let err = ensure(&other.path().join("c"), &release, &[], Some(&bad)).unwrap_err();
        assert!(matches!(err, LayerError::Hash { .. }), "{err}");
        assert!(cached(&other.path().join("c"), &release).is_none());
    }

    #[test]
    fn pip_is_asked_for_the_pinned_files_tags() {
        let (python, abi, platforms) = wheel_tags(
            "torch_npu-2.1.0.post17-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        )
        .unwrap();
        assert_eq!((python, abi), ("cp311", "cp311"));
        assert_eq!(platforms, ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]);
        assert_eq!(python_version("cp311"), "3.11");
        for r in releases() {
            assert!(wheel_tags(&r.filename).is_some(), "{}", r.filename);
        }
    }

    #[test]
    fn a_failed_download_says_how_to_get_the_wheel_offline() {
        let dir = tempfile::tempdir().unwrap();
        let release = release_of(&wheel(dir.path(), &[(TRANSFER, "")]));
        let python = [OsString::from("/nonexistent/python3")];
        let err = ensure(&dir.path().join("c"), &release, &python, None).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LayerError::Download { .. }), "{text}");
        assert!(
            text.contains("npu-assets fetch-torch-npu --wheel FILE") && text.contains("t.whl"),
            "{text}"
        );
    }
}
