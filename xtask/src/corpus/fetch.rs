//! The corpus manifest and its cache: download each distribution once, check its sha256,
//! extract it to `<cache>/<name>-<version>/`.
//!
//! The cache is `$NPU_PATCHER_CORPUS_DIR`, else `corpus/` in the cache directory the test venv
//! uses (`~/.cache/npu-patcher/corpus` by default). Archives go to `downloads/`. A wheel is
//! unzipped as it is; an sdist loses its single top-level directory. Extraction happens in a
//! temporary directory beside the target and is renamed into place, and a `.complete` marker
//! says the directory is whole, so other processes filling the same cache (another labeller's
//! tools, a parallel run) either reuse it or wait on the same lock.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `corpus/manifest.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[allow(dead_code, reason = "documentation for readers of the manifest")]
    pub about: String,
    pub distributions: Vec<Distribution>,
    /// The GitHub part (`--git`): pinned commits of repositories.
    #[serde(default)]
    pub repositories: Vec<super::git::Repository>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Wheel,
    Sdist,
}

/// One pinned distribution of the corpus.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    /// The `PyPI` name as the corpus spells it (`stable-baselines3`).
    pub name: String,
    pub version: String,
    pub kind: Kind,
    pub filename: String,
    pub url: String,
    pub sha256: String,
    /// Globs (as `npu-scan --exclude`) of paths neither scanned nor labelled.
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl Distribution {
    /// `<name>-<version>`: the directory under the cache and the first component of every
    /// labelled path.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid corpus manifest", path.display()))?;
    let mut names = std::collections::BTreeSet::new();
    for d in &manifest.distributions {
        if !names.insert(d.dir_name()) {
            bail!("{}: {} is listed twice", path.display(), d.dir_name());
        }
        if d.sha256.len() != 64 || !d.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("{}: {} has no valid sha256", path.display(), d.dir_name());
        }
        // The filename becomes a path under the cache: it must stay a plain name.
        if d.filename.contains(['/', '\\']) || d.filename.starts_with('.') {
            bail!(
                "{}: {} has a bad filename {:?}",
                path.display(),
                d.dir_name(),
                d.filename
            );
        }
    }
    for r in &manifest.repositories {
        if let Some(problem) = super::git::problem(r) {
            bail!("{}: repository {}: {problem}", path.display(), r.repo);
        }
        if !names.insert(r.dir_name()) {
            bail!("{}: {} is listed twice", path.display(), r.dir_name());
        }
    }
    Ok(manifest)
}

/// The corpus cache directory.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NPU_PATCHER_CORPUS_DIR") {
        return PathBuf::from(dir);
    }
    crate::venv::cache_dir().join("corpus")
}

/// Make sure `dist` is extracted under `cache`; return its directory.
pub fn ensure(cache: &Path, dist: &Distribution) -> Result<PathBuf> {
    let target = cache.join(dist.dir_name());
    let complete = target.join(".complete");
    if complete.exists() {
        return Ok(target);
    }
    fs::create_dir_all(cache.join("downloads"))
        .with_context(|| format!("cannot create {}", cache.join("downloads").display()))?;
    let lock_path = cache.join(format!(".{}.lock", dist.dir_name()));
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if complete.exists() {
        return Ok(target);
    }
    let archive = download(cache, dist)?;
    let tmp = cache.join(format!(".tmp-{}-{}", dist.dir_name(), std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let extracted = match dist.kind {
        Kind::Wheel => unzip(&archive, &tmp),
        Kind::Sdist => untar_stripped(&archive, &tmp),
    };
    if let Err(e) = extracted {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e.context(format!(
            "cannot extract {} ({})",
            dist.dir_name(),
            dist.filename
        )));
    }
    fs::write(tmp.join(".complete"), format!("{}\n", dist.sha256))?;
    if target.exists() {
        // Another writer that does not take our lock finished first, or an old partial copy.
        if complete.exists() {
            let _ = fs::remove_dir_all(&tmp);
            return Ok(target);
        }
        fs::remove_dir_all(&target)
            .with_context(|| format!("cannot remove the incomplete copy {}", target.display()))?;
    }
    if let Err(e) = fs::rename(&tmp, &target) {
        let _ = fs::remove_dir_all(&tmp);
        if complete.exists() {
            return Ok(target);
        }
        return Err(e)
            .with_context(|| format!("cannot move the extracted {} into place", dist.dir_name()));
    }
    Ok(target)
}

/// The checked archive of `dist` in the download cache, fetched if it is missing or wrong.
pub(crate) fn download(cache: &Path, dist: &Distribution) -> Result<PathBuf> {
    let path = cache.join("downloads").join(&dist.filename);
    if path.exists() && sha256_of(&path)? == dist.sha256 {
        return Ok(path);
    }
    eprintln!("xtask: downloading {}", dist.filename);
    let part = path.with_file_name(format!("{}.part-{}", dist.filename, std::process::id()));
    let out = duct::cmd!(
        "curl",
        "--fail",
        "--silent",
        "--show-error",
        "--location",
        "--retry",
        "3",
        "--connect-timeout",
        "30",
        "--max-time",
        "600",
        "--output",
        &part,
        &dist.url
    )
    .stderr_capture()
    .unchecked()
    .run();
    let failure = match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
        Err(e) => Some(format!("cannot run curl: {e}")),
    };
    if let Some(why) = failure {
        let _ = fs::remove_file(&part);
        bail!(
            "download of {} failed ({}): {why}",
            dist.dir_name(),
            dist.url
        );
    }
    let got = sha256_of(&part)?;
    if got != dist.sha256 {
        let _ = fs::remove_file(&part);
        bail!(
            "{}: sha256 mismatch for {}: expected {}, got {got}",
            dist.dir_name(),
            dist.filename,
            dist.sha256
        );
    }
    fs::rename(&part, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn sha256_of(path: &Path) -> Result<String> {
    let mut file =
        fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(issue_model::ids::hex(&hasher.finalize()))
}

fn unzip(archive: &Path, into: &Path) -> Result<()> {
    let file =
        fs::File::open(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a zip archive", archive.display()))?;
    // `enclosed_name` refuses absolute paths and `..`, so nothing lands outside `into`.
    zip.extract(into)
        .with_context(|| format!("cannot unzip {}", archive.display()))
}

fn untar_stripped(archive: &Path, into: &Path) -> Result<()> {
    let file =
        fs::File::open(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = tar
        .entries()
        .with_context(|| format!("cannot read {}", archive.display()))?;
    for entry in entries {
        let mut entry = entry.with_context(|| format!("cannot read {}", archive.display()))?;
        if !matches!(
            entry.header().entry_type(),
            tar::EntryType::Regular | tar::EntryType::Directory
        ) {
            continue;
        }
        // Strip the single top-level `<name>-<version>/` directory; keep only plain names
        // below it, so nothing lands outside `into`.
        let path = entry.path()?.into_owned();
        let rel: Vec<_> = path.components().skip(1).collect();
        if rel.is_empty() {
            continue;
        }
        if !rel
            .iter()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            bail!("{}: unsafe path {}", archive.display(), path.display());
        }
        let dest = into.join(rel.iter().collect::<PathBuf>());
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        entry
            .unpack(&dest)
            .with_context(|| format!("cannot write {}", dest.display()))?;
    }
    Ok(())
}

/// Write a gzipped tar at `archive` holding `files` (path in the archive, contents), for tests.
#[cfg(test)]
pub(crate) fn write_tar_gz(archive: &Path, files: &[(&str, &[u8])]) {
    let gz = flate2::write::GzEncoder::new(
        fs::File::create(archive).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    for (name, body) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, *body).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_manifest_is_valid() {
        let path = crate::project_root().join("corpus/manifest.json");
        let manifest = read_manifest(&path).expect("manifest parses");
        assert!(!manifest.distributions.is_empty());
        for d in &manifest.distributions {
            assert!(d.url.ends_with(&d.filename), "{}", d.dir_name());
            let suffix = match d.kind {
                Kind::Wheel => "-none-any.whl",
                Kind::Sdist => ".tar.gz",
            };
            // torchrl has neither a pure-Python wheel nor an sdist: its Linux wheel stands in.
            assert!(
                d.filename.ends_with(suffix) || d.name == "torchrl",
                "{}",
                d.dir_name()
            );
        }
        assert!(!manifest.repositories.is_empty());
        for r in &manifest.repositories {
            assert!(
                r.repo.ends_with(&format!("/{}", r.name)),
                "{}",
                r.dir_name()
            );
        }
    }

    fn wheel_bytes() -> Vec<u8> {
        use std::io::Write;
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut buf);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        zip.start_file("pkg/mod.py", options).unwrap();
        zip.write_all(b"import torch\n").unwrap();
        zip.finish().unwrap();
        buf.into_inner()
    }

    fn dist(url: String, sha256: String) -> Distribution {
        Distribution {
            name: "demo-pkg".to_owned(),
            version: "1.0".to_owned(),
            kind: Kind::Wheel,
            filename: "demo_pkg-1.0-py3-none-any.whl".to_owned(),
            url,
            sha256,
            exclude: Vec::new(),
        }
    }

    #[test]
    fn a_checked_wheel_is_extracted_once_and_a_bad_one_names_its_package() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source.whl");
        fs::write(&source, wheel_bytes()).unwrap();
        let url = format!("file://{}", source.display());
        let sha = sha256_of(&source).unwrap();
        let cache = dir.path().join("cache");

        let wrong = dist(url.clone(), "0".repeat(64));
        let err = format!("{:#}", ensure(&cache, &wrong).unwrap_err());
        assert!(
            err.contains("demo-pkg-1.0") && err.contains("sha256 mismatch"),
            "{err}"
        );
        assert!(!cache.join("demo-pkg-1.0").exists());

        let missing = dist(
            format!("file://{}/absent.whl", dir.path().display()),
            sha.clone(),
        );
        let err = format!("{:#}", ensure(&cache, &missing).unwrap_err());
        assert!(err.contains("download of demo-pkg-1.0 failed"), "{err}");

        let good = dist(url, sha);
        let target = ensure(&cache, &good).unwrap();
        assert_eq!(target, cache.join("demo-pkg-1.0"));
        assert_eq!(
            fs::read_to_string(target.join("pkg/mod.py")).unwrap(),
            "import torch\n"
        );
        assert!(target.join(".complete").exists());
        // Cached: no download, even from a URL that no longer works.
        fs::remove_file(&source).unwrap();
        assert_eq!(ensure(&cache, &good).unwrap(), target);
    }

    #[test]
    fn an_sdist_loses_its_top_level_directory() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("demo-1.0.tar.gz");
        write_tar_gz(&archive, &[("demo-1.0/pkg/a.py", b"x = 1\n")]);
        let into = dir.path().join("out");
        fs::create_dir_all(&into).unwrap();
        untar_stripped(&archive, &into).unwrap();
        assert_eq!(
            fs::read_to_string(into.join("pkg/a.py")).unwrap(),
            "x = 1\n"
        );
    }
}
