//! `cargo xtask torch-npu`: the Python layer of the pinned torch-npu wheels, as test data.
//!
//! `torch-npu/wheels.json` pins each wheel (url, sha256). Each is downloaded once into
//! `<cache>/torch-npu/downloads/` (the cache directory of the test venv), checked, and only its
//! Python sources (`.py`, `.pyi` and the `.json` files they load) are extracted to
//! `<cache>/torch-npu/<version>/torch_npu/`. Nothing from a wheel is committed or shipped: the
//! tests read these directories (`$NPU_PATCHER_TORCH_NPU_DIR`) and the emulator may load the
//! real `contrib/transfer_to_npu.py` from them. A failed download or a hash mismatch is an
//! error naming the package; no test passes without the wheels.

use crate::corpus::fetch::{Distribution, Kind};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `torch-npu/wheels.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    pub about: String,
    pub wheels: Vec<Wheel>,
}

/// One pinned torch-npu wheel.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Wheel {
    /// The torch-npu version (`2.6.0.post5`).
    pub version: String,
    /// The torch release it pairs with (its base version).
    pub torch: String,
    pub filename: String,
    pub url: String,
    pub sha256: String,
}

#[derive(clap::Args)]
pub struct Args {
    /// Only print the cache directory (`$NPU_PATCHER_TORCH_NPU_DIR` for the tests).
    #[arg(long)]
    dir: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let dir = ensure_all()?;
    if args.dir {
        println!("{}", dir.display());
        return Ok(());
    }
    for wheel in read_manifest(&manifest_path())?.wheels {
        println!("{}\t{}", wheel.version, dir.join(&wheel.version).display());
    }
    Ok(())
}

pub fn manifest_path() -> PathBuf {
    crate::project_root().join("torch-npu/wheels.json")
}

pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid torch-npu wheel manifest", path.display()))?;
    let mut seen = std::collections::BTreeSet::new();
    for w in &manifest.wheels {
        if !seen.insert(w.version.clone()) {
            bail!(
                "{}: torch-npu {} is listed twice",
                path.display(),
                w.version
            );
        }
        if w.sha256.len() != 64 || !w.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "{}: torch-npu {} has no valid sha256",
                path.display(),
                w.version
            );
        }
        if w.filename.contains(['/', '\\'])
            || w.filename.starts_with('.')
            || !w.url.ends_with(&w.filename)
        {
            bail!(
                "{}: torch-npu {} has a bad filename {:?} (it must be the last part of its url)",
                path.display(),
                w.version,
                w.filename
            );
        }
        if !w.version.starts_with(&w.torch) {
            bail!(
                "{}: torch-npu {} does not pair with torch {} (the base versions must match)",
                path.display(),
                w.version,
                w.torch
            );
        }
    }
    Ok(manifest)
}

/// The binary whose strings are read, and the file (next to it in the cache) that keeps the ones
/// about CPU fallback, one a line, sorted.
pub const LIBRARY: &str = "torch_npu/lib/libtorch_npu.so";
pub const FALLBACK_STRINGS: &str = "torch_npu/lib/libtorch_npu.fallback-strings.txt";

/// The cache of extracted wheels.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPU_PATCHER_TORCH_NPU_DIR") {
        return PathBuf::from(dir);
    }
    crate::venv::cache_dir().join("torch-npu")
}

/// Download and extract every pinned wheel (cached); return the cache directory.
pub fn ensure_all() -> Result<PathBuf> {
    let cache = cache_dir();
    for wheel in read_manifest(&manifest_path())?.wheels {
        ensure(&cache, &wheel)?;
        ensure_kernels(&cache, &wheel)?;
    }
    Ok(cache)
}

/// Which part of a wheel an extracted copy holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The Python layer: `.py`, `.pyi`, `.json` (`cache/<version>/`).
    Python,
    /// The kernel lists `csrc/aten/*.yaml` and [`FALLBACK_STRINGS`] (`cache/kernels/<version>/`).
    Kernels,
}

/// Make sure the Python layer of `wheel` is under `cache/<version>/`; return that directory.
pub fn ensure(cache: &Path, wheel: &Wheel) -> Result<PathBuf> {
    ensure_part(cache, wheel, Part::Python)
}

/// Make sure the kernel lists of `wheel` are under `cache/kernels/<version>/`; return that
/// directory (it holds `torch_npu/csrc/aten/*.yaml` and [`FALLBACK_STRINGS`]).
pub fn ensure_kernels(cache: &Path, wheel: &Wheel) -> Result<PathBuf> {
    ensure_part(cache, wheel, Part::Kernels)
}

/// Where the kernel lists of `version` are extracted.
pub fn kernels_dir(cache: &Path, version: &str) -> PathBuf {
    cache.join("kernels").join(version)
}

fn ensure_part(cache: &Path, wheel: &Wheel, part: Part) -> Result<PathBuf> {
    let (target, tag) = match part {
        Part::Python => (cache.join(&wheel.version), ""),
        Part::Kernels => (kernels_dir(cache, &wheel.version), "kernels-"),
    };
    let complete = target.join(".complete");
    if fs::read_to_string(&complete).is_ok_and(|s| s.trim() == wheel.sha256) {
        return Ok(target);
    }
    let downloads = cache.join("downloads");
    fs::create_dir_all(&downloads)
        .with_context(|| format!("cannot create {}", downloads.display()))?;
    let lock_path = cache.join(format!(".{tag}{}.lock", wheel.version));
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if fs::read_to_string(&complete).is_ok_and(|s| s.trim() == wheel.sha256) {
        return Ok(target);
    }
    let dist = Distribution {
        name: "torch-npu".to_owned(),
        version: wheel.version.clone(),
        kind: Kind::Wheel,
        filename: wheel.filename.clone(),
        url: wheel.url.clone(),
        sha256: wheel.sha256.clone(),
        exclude: Vec::new(),
    };
    let archive = crate::corpus::fetch::download(cache, &dist)
        .with_context(|| format!("cannot fetch the torch-npu {} wheel", wheel.version))?;
    let tmp = cache.join(format!(
        ".tmp-{tag}{}-{}",
        wheel.version,
        std::process::id()
    ));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let extracted = match part {
        Part::Python => extract_python(&archive, &tmp),
        Part::Kernels => extract_kernels(&archive, &tmp),
    };
    if let Err(e) = extracted {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e.context(format!("cannot extract torch-npu {}", wheel.version)));
    }
    fs::write(tmp.join(".complete"), format!("{}\n", wheel.sha256))?;
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    if target.exists() {
        fs::remove_dir_all(&target)
            .with_context(|| format!("cannot remove the old copy {}", target.display()))?;
    }
    fs::rename(&tmp, &target)
        .with_context(|| format!("cannot move torch-npu {} into place", wheel.version))?;
    Ok(target)
}

/// Whether a wheel member is part of the Python layer we read.
fn is_python_source(name: &str) -> bool {
    name.starts_with("torch_npu/")
        && [".py", ".pyi", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Whether a wheel member is one of its kernel lists.
fn is_kernel_list(name: &str) -> bool {
    name.starts_with("torch_npu/csrc/aten/")
        && Path::new(name)
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("yaml"))
}

/// The printable ASCII runs of at least 8 bytes in `reader` (as `strings -n 8` finds them) that
/// mention a CPU fallback, sorted and deduplicated.
pub fn fallback_strings(reader: &mut dyn Read) -> Result<Vec<String>> {
    fn keep(run: &[u8], found: &mut std::collections::BTreeSet<String>) {
        if run.len() < 8 {
            return;
        }
        let text = String::from_utf8_lossy(run);
        let lower = text.to_ascii_lowercase();
        if lower.contains("fall back")
            || lower.contains("fallback to run")
            || lower.contains("not currently supported")
        {
            found.insert(text.into_owned());
        }
    }
    let mut found = std::collections::BTreeSet::new();
    let mut run: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            if b == b'\t' || (0x20..0x7f).contains(&b) {
                run.push(b);
            } else {
                keep(&run, &mut found);
                run.clear();
            }
        }
    }
    keep(&run, &mut found);
    Ok(found.into_iter().collect())
}

/// Extract the kernel lists of `archive` and the fallback strings of its library into `into`.
fn extract_kernels(archive: &Path, into: &Path) -> Result<()> {
    let file =
        fs::File::open(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a zip archive", archive.display()))?;
    let mut library = false;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        let name = entry
            .name()
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default();
        if entry.is_file() && name == LIBRARY {
            let lines = fallback_strings(&mut entry)
                .with_context(|| format!("cannot read {name} in {}", archive.display()))?;
            let dest = into.join(FALLBACK_STRINGS);
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            let mut text = lines.join("\n");
            text.push('\n');
            fs::write(&dest, text).with_context(|| format!("cannot write {}", dest.display()))?;
            library = true;
            continue;
        }
        if !entry.is_file() || !is_kernel_list(&name) {
            continue;
        }
        let Some(rel) = entry.enclosed_name() else {
            bail!("{}: unsafe path {name}", archive.display());
        };
        let dest = into.join(rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut body = Vec::new();
        entry
            .read_to_end(&mut body)
            .with_context(|| format!("cannot read {name} in {}", archive.display()))?;
        fs::write(&dest, body).with_context(|| format!("cannot write {}", dest.display()))?;
    }
    if !library {
        bail!("{} has no {LIBRARY}", archive.display());
    }
    Ok(())
}

/// Extract the Python layer of `archive` into `into`.
fn extract_python(archive: &Path, into: &Path) -> Result<()> {
    let file =
        fs::File::open(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a zip archive", archive.display()))?;
    let mut count = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        let name = entry
            .name()
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default();
        if !entry.is_file() || !is_python_source(&name) {
            continue;
        }
        // `enclosed_name` refuses absolute paths and `..`, so nothing lands outside `into`.
        let Some(rel) = entry.enclosed_name() else {
            bail!("{}: unsafe path {name}", archive.display());
        };
        let dest = into.join(rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut body = Vec::new();
        entry
            .read_to_end(&mut body)
            .with_context(|| format!("cannot read {name} in {}", archive.display()))?;
        fs::write(&dest, body).with_context(|| format!("cannot write {}", dest.display()))?;
        count += 1;
    }
    if !into.join("torch_npu/contrib/transfer_to_npu.py").is_file() {
        bail!(
            "{} has no torch_npu/contrib/transfer_to_npu.py ({count} Python files)",
            archive.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_manifest_pins_the_versions_the_tests_read() {
        let manifest = read_manifest(&manifest_path()).expect("manifest parses");
        let versions: Vec<&str> = manifest.wheels.iter().map(|w| w.version.as_str()).collect();
        for wanted in ["2.1.0.post17", "2.14.0"] {
            assert!(versions.contains(&wanted), "{versions:?}");
        }
        for w in &manifest.wheels {
            assert!(
                w.url.starts_with("https://files.pythonhosted.org/"),
                "{}",
                w.url
            );
        }
    }

    fn wheel_bytes() -> Vec<u8> {
        use std::io::Write;
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut buf);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, body) in [
            (
                "torch_npu/contrib/transfer_to_npu.py",
                &b"import torch\n"[..],
            ),
            ("torch_npu/_C.cpython-311-x86_64-linux-gnu.so", b"\x7fELF"),
            (
                "torch_npu/lib/libtorch_npu.so",
                b"\x7fELF\0\0CAUTION: The operator 'aten::x' will fall back to run on the CPU.\0\x01unrelated text\0",
            ),
            ("torch_npu/csrc/aten/npu_native_functions.yaml", b"supported:\n  - x\n"),
        ] {
            zip.start_file(name, options).unwrap();
            zip.write_all(body).unwrap();
        }
        zip.finish().unwrap();
        buf.into_inner()
    }

    #[test]
    fn only_the_python_layer_is_extracted_and_a_bad_hash_names_the_package() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir
            .path()
            .join("torch_npu-9.9.0-cp311-cp311-linux_x86_64.whl");
        fs::write(&source, wheel_bytes()).unwrap();
        let cache = dir.path().join("cache");
        let mut wheel = Wheel {
            version: "9.9.0".to_owned(),
            torch: "9.9.0".to_owned(),
            filename: "torch_npu-9.9.0-cp311-cp311-linux_x86_64.whl".to_owned(),
            url: format!("file://{}", source.display()),
            sha256: "0".repeat(64),
        };
        let err = format!("{:#}", ensure(&cache, &wheel).unwrap_err());
        assert!(
            err.contains("torch-npu 9.9.0") && err.contains("sha256 mismatch"),
            "{err}"
        );
        assert!(!cache.join("9.9.0").exists());

        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        sha2::Digest::update(&mut hasher, fs::read(&source).unwrap());
        wheel.sha256 = issue_model::ids::hex(&sha2::Digest::finalize(hasher));
        let target = ensure(&cache, &wheel).unwrap();
        assert!(
            target
                .join("torch_npu/contrib/transfer_to_npu.py")
                .is_file()
        );
        assert!(!target.join("torch_npu/lib").exists());
        // The kernel lists and, of the binary, only its fallback strings: never the library itself.
        let kernels = ensure_kernels(&cache, &wheel).unwrap();
        assert_eq!(kernels, kernels_dir(&cache, "9.9.0"));
        assert!(!kernels.join(LIBRARY).exists());
        assert_eq!(
            fs::read_to_string(kernels.join(FALLBACK_STRINGS)).unwrap(),
            "CAUTION: The operator 'aten::x' will fall back to run on the CPU.\n"
        );
        assert!(
            kernels
                .join("torch_npu/csrc/aten/npu_native_functions.yaml")
                .is_file()
        );
        assert!(!kernels.join("torch_npu/contrib").exists());
        assert!(
            !target
                .join("torch_npu/_C.cpython-311-x86_64-linux-gnu.so")
                .exists()
        );
        // Cached: no download, even from a URL that no longer works.
        fs::remove_file(&source).unwrap();
        fs::remove_file(cache.join("downloads").join(&wheel.filename)).unwrap();
        assert_eq!(ensure(&cache, &wheel).unwrap(), target);

        let missing = Wheel {
            version: "9.9.1".to_owned(),
            url: format!("file://{}/absent.whl", dir.path().display()),
            filename: "absent.whl".to_owned(),
            ..wheel
        };
        let err = format!("{:#}", ensure(&cache, &missing).unwrap_err());
        assert!(err.contains("torch-npu 9.9.1"), "{err}");
    }
}
