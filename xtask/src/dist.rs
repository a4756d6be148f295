//! `cargo xtask dist`: the release bundle, a drop-in skill directory that can rebuild its own
//! binaries offline.
//!
//! Layout under `target/dist/huawei-cloud-cloudrobo-npu-patcher/`:
//! `SKILL.md`, `build.sh` (builds `bin/` for the machine it runs on, see below),
//! `scripts/{scan,progress,verify}.py` (launchers that check `bin/` fits the machine, through the
//! shared `scripts/bundle_check.py`, then exec the bundled binaries), `scripts/build.py`,
//! `scripts/runtime_patches.py`, `bin/npu-*` and `bin/TARGET.txt` (the target triple they are built
//! for), `references/fix-templates/*.md`, `references/NPU-FACTS.md` (the Ascend facts the texts
//! cite), `templates/{env_npu.sh,train.sh,ADAPTATION_SUMMARY.md}`, `emulator/` (the emulated `npu`
//! device and stand-in `torch_npu`, for machines without an NPU), and `source/`: the workspace
//! files the release build reads ([`source_files`]), every crate of `Cargo.lock` vendored under
//! `source/vendor/` ([`vendor`]) and `source/.cargo/config.toml` pointing cargo there, so
//! `bash build.sh` builds the five binaries with the machine's cargo and no network (an aarch64
//! server gets its `bin/` that way). Then `<name>-<target>.tar.gz` beside the folder and its
//! `.sha256`. Staging is removed and rebuilt every time. [`layout`] lists every skill file (all but
//! `source/`), so tidy can check the shipped texts against it without building.

mod offline;
mod vendor;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The bundle's directory name, which is also the skill's name.
pub const BUNDLE_NAME: &str = "huawei-cloud-cloudrobo-npu-patcher";

/// Binaries in the bundle: (cargo package, binary name).
pub const BINARIES: [(&str, &str); 5] = [
    ("scan", "npu-scan"),
    ("progress", "npu-progress"),
    ("verify", "npu-verify"),
    ("train-wrap", "npu-train"),
    ("patch-assets", "npu-assets"),
];

/// The seed's script names and the binary each one runs.
pub const SHIMS: [(&str, &str); 3] = [
    ("scan.py", "npu-scan"),
    ("progress.py", "npu-progress"),
    ("verify.py", "npu-verify"),
];

/// The templates copied to `templates/`.
pub const TEMPLATES: [&str; 3] = ["env_npu.sh", "train.sh", "ADAPTATION_SUMMARY.md"];

/// The bundle's own source folder (the workspace, vendored).
pub const SOURCE: &str = "source";

/// The check every launcher imports (`scripts/bundle_check.py`).
const BUNDLE_CHECK: &str = include_str!("../bundle/scripts/bundle_check.py");
/// The launcher template; `@BINARY@` is the binary it runs.
const LAUNCHER: &str = include_str!("../bundle/scripts/launcher.py");
/// The build step (`scripts/build.py`); `@BINARIES@` is the list of [`BINARIES`].
const BUILD_PY: &str = include_str!("../bundle/scripts/build.py");
/// `build.sh` at the bundle root: runs `scripts/build.py`.
const BUILD_SH: &str = include_str!("../bundle/build.sh");
/// `source/.cargo/config.toml`: the vendored crates replace crates.io.
const CARGO_CONFIG: &str = "# Every crate comes from vendor/ (`cargo vendor`): the build needs no network.\n\
[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n\
[source.vendored-sources]\ndirectory = \"vendor\"\n\n\
[net]\noffline = true\n";

#[derive(clap::Args, Default)]
pub struct Args {
    /// Bundle debug binaries (quicker; used by `cargo xtask test`).
    #[arg(long)]
    pub debug: bool,
    /// Do not write the .tar.gz and .sha256.
    #[arg(long)]
    pub no_archive: bool,
    /// Build `bin/` for this target triple (e.g. `aarch64-unknown-linux-gnu`; its standard library
    /// comes from `rustup target add TRIPLE`, and a cross linker must be configured). Default: the
    /// host's.
    #[arg(long, value_name = "TRIPLE")]
    pub target: Option<String>,
    /// Then unpack the tarball, remove `bin/`, run `bash build.sh` with an empty `CARGO_HOME` and
    /// no network, and scan the demo with the rebuilt `scripts/scan.py` (a release build from the
    /// vendored sources: minutes).
    #[arg(long)]
    pub check_offline_build: bool,
}

/// A built bundle.
pub struct Bundle {
    /// The staged folder.
    pub dir: PathBuf,
    /// The tarball, unless `--no-archive`.
    pub archive: Option<PathBuf>,
}

/// Build the bundle; return its folder and tarball.
pub fn run(args: &Args) -> Result<Bundle> {
    let root = crate::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let host = host_triple()?;
    let target = args.target.clone().unwrap_or_else(|| host.clone());
    if target != host {
        check_target_installed(&target)?;
    }
    let mut build: Vec<String> = vec!["build".into(), "--locked".into()];
    if !args.debug {
        build.push("--release".into());
    }
    if let Some(triple) = &args.target {
        build.push("--target".into());
        build.push(triple.clone());
    }
    for (package, _) in BINARIES {
        build.push("-p".into());
        build.push(package.into());
    }
    let status = duct::cmd(&cargo, &build).dir(&root).unchecked().run()?;
    if !status.status.success() {
        if target == host {
            bail!("building the binaries failed (cargo's messages are above)");
        }
        let var = target.to_uppercase().replace('-', "_");
        bail!(
            "building the binaries for {target} failed (cargo's messages are above); a cross build \
             also needs a linker for {target} (e.g. CARGO_TARGET_{var}_LINKER=aarch64-linux-gnu-gcc). \
             Without one, build the bundle for the host and run `bash build.sh` from the unpacked \
             tarball on a {target} machine"
        );
    }
    let target_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let profile = if args.debug { "debug" } else { "release" };
    let bin_dir = match &args.target {
        Some(triple) => target_dir.join(triple).join(profile),
        None => target_dir.join(profile),
    };

    let dist = root.join("target").join("dist");
    let stage = dist.join(BUNDLE_NAME);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("cannot clean {}", stage.display()))?;
    }
    for entry in layout(&root)? {
        let to = stage.join(&entry.path);
        match &entry.from {
            From::Asset(from) => copy(from, &to)?,
            From::Text(text) => write(&to, text)?,
            From::Binary(binary) => copy(&bin_dir.join(binary), &to)?,
            From::TargetName => write(&to, &format!("{target}\n"))?,
        }
        if entry.executable {
            make_executable(&to)?;
        }
    }
    let source = stage.join(SOURCE);
    // The workspace's structure (manifests, sources, assets/), plus every workspace file that
    // cargo's dep-info says the build of the binaries read (`include_str!`/`include_bytes!`
    // inputs anywhere in the tree), so that `bash build.sh` finds them offline.
    let inputs = build_inputs(&root, &bin_dir)?;
    let mut shipped = source_files(&root)?;
    shipped.extend(inputs.iter().cloned());
    shipped.sort();
    shipped.dedup();
    for rel in &shipped {
        copy(&root.join(rel), &source.join(rel))?;
    }
    let missing: Vec<&String> = inputs
        .iter()
        .filter(|rel| !source.join(rel).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "source/ lacks files the release build reads: {}",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    eprintln!(
        "xtask: source/ holds all {} workspace files the build of the binaries read (cargo's dep-info)",
        inputs.len()
    );
    write(&source.join(".cargo").join("config.toml"), CARGO_CONFIG)?;
    let mut platforms: Vec<String> = vendor::LINUX_TARGETS
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    if !platforms.contains(&target) {
        platforms.push(target.clone());
    }
    let vendored = vendor::vendor(&root, &source.join("vendor"), &platforms)?;
    eprintln!(
        "xtask: vendored {} crates ({} left as stubs: not built on {})",
        vendored.kept + vendored.stubbed,
        vendored.stubbed,
        platforms.join(", ")
    );

    let mut archive = None;
    if !args.no_archive {
        let name = format!("{BUNDLE_NAME}-{target}.tar.gz");
        let path = dist.join(&name);
        let size = write_archive(&stage, &path)?;
        let digest = issue_model::ids::hex(&Sha256::digest(fs::read(&path)?));
        write(
            &dist.join(format!("{name}.sha256")),
            &format!("{digest}  {name}\n"),
        )?;
        eprintln!(
            "xtask: wrote {} ({}, sha256 {digest})",
            path.display(),
            megabytes(size)
        );
        if !args.debug {
            let vendor = format!("{SOURCE}/vendor");
            let without_vendor = archive_size(&stage, &|rel| rel == vendor)?;
            let without_source = archive_size(&stage, &|rel| rel == SOURCE)?;
            eprintln!(
                "xtask: without source/vendor/ it would be {}, without source/ {}",
                megabytes(without_vendor),
                megabytes(without_source)
            );
        }
        archive = Some(path);
    }
    eprintln!("xtask: bundle at {} (bin/ for {target})", stage.display());
    let bundle = Bundle {
        dir: stage,
        archive,
    };
    if args.check_offline_build {
        let Some(archive) = &bundle.archive else {
            bail!("--check-offline-build starts from the tarball: drop --no-archive");
        };
        if target != host {
            bail!("--check-offline-build builds on this machine: drop --target {target}");
        }
        offline::check(&root, archive, &host)?;
    }
    Ok(bundle)
}

/// Unpack `archive`, remove `bin/`, rebuild it offline with an empty `CARGO_HOME` and scan the
/// demo with it ([`offline`]).
pub fn check_offline_build(archive: &Path) -> Result<()> {
    offline::check(&crate::project_root(), archive, &host_triple()?)
}

fn megabytes(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "a size shown to one decimal")]
    let mb = bytes as f64 / 1e6;
    format!("{mb:.1} MB")
}

/// The host's target triple (`rustc -vV`).
pub fn host_triple() -> Result<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = duct::cmd!(&rustc, "-vV")
        .read()
        .with_context(|| format!("cannot run `{rustc} -vV`"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_owned())
        .with_context(|| format!("`{rustc} -vV` names no host"))
}

/// Fail, naming `rustup target add`, when this toolchain lacks the standard library of `triple`.
fn check_target_installed(triple: &str) -> Result<()> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = duct::cmd!(&rustc, "--print", "target-libdir", "--target", triple)
        .stderr_capture()
        .stdout_capture()
        .unchecked()
        .run()?;
    if !out.status.success() {
        bail!(
            "rustc does not know the target {triple}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let libdir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    match std_missing(triple, &libdir) {
        Some(problem) => bail!("{problem}"),
        None => Ok(()),
    }
}

/// Why `libdir` (rustc's target-libdir for `triple`) cannot build for `triple`, or None.
fn std_missing(triple: &str, libdir: &Path) -> Option<String> {
    let has_std = fs::read_dir(libdir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    });
    (!has_std).then(|| {
        format!(
            "this toolchain has no standard library for {triple} ({} is empty or missing): \
             run `rustup target add {triple}`, or build on the {triple} machine itself from the unpacked \
             tarball with `bash build.sh`",
            libdir.display()
        )
    })
}

/// Where a bundle file comes from.
pub enum From {
    /// A file under `assets/`.
    Asset(PathBuf),
    /// Text the bundle generates (launchers, the build step).
    Text(String),
    /// A built binary.
    Binary(&'static str),
    /// `bin/TARGET.txt`: the target triple of the binaries.
    TargetName,
}

/// One file of the bundle.
pub struct Entry {
    /// `/`-separated, relative to the bundle root.
    pub path: String,
    pub from: From,
    pub executable: bool,
}

/// The launcher of `binary`.
pub fn launcher(binary: &str) -> String {
    LAUNCHER.replace("@BINARY@", binary)
}

/// `scripts/build.py` with the list of binaries filled in.
fn build_py() -> String {
    let list: Vec<String> = BINARIES
        .iter()
        .map(|(package, binary)| format!("(\"{package}\", \"{binary}\")"))
        .collect();
    BUILD_PY.replace("@BINARIES@", &format!("[{}]", list.join(", ")))
}

/// Every file of the bundle but `source/`, in the order they are written.
pub fn layout(root: &Path) -> Result<Vec<Entry>> {
    let assets = root.join("assets");
    let asset = |path: &str, from: PathBuf, executable: bool| Entry {
        path: path.to_owned(),
        from: From::Asset(from),
        executable,
    };
    let text = |path: &str, text: String, executable: bool| Entry {
        path: path.to_owned(),
        from: From::Text(text),
        executable,
    };
    let mut entries = vec![
        asset("SKILL.md", assets.join("SKILL.md"), false),
        text("build.sh", BUILD_SH.to_owned(), true),
        text("scripts/build.py", build_py(), true),
        text("scripts/bundle_check.py", BUNDLE_CHECK.to_owned(), false),
    ];
    for (script, binary) in SHIMS {
        entries.push(text(&format!("scripts/{script}"), launcher(binary), true));
    }
    entries.push(asset(
        "scripts/runtime_patches.py",
        assets.join("runtime_patches.py"),
        false,
    ));
    entries.push(asset(
        "references/NPU-FACTS.md",
        assets.join("references").join("NPU-FACTS.md"),
        false,
    ));
    for (_, binary) in BINARIES {
        entries.push(Entry {
            path: format!("bin/{binary}"),
            from: From::Binary(binary),
            executable: true,
        });
    }
    entries.push(Entry {
        path: "bin/TARGET.txt".to_owned(),
        from: From::TargetName,
        executable: false,
    });
    for template in fix_templates(root)? {
        entries.push(asset(
            &format!("references/fix-templates/{template}"),
            assets.join("fix-templates").join(&template),
            false,
        ));
    }
    for template in TEMPLATES {
        let executable = Path::new(template).extension().is_some_and(|e| e == "sh");
        entries.push(asset(
            &format!("templates/{template}"),
            assets.join("templates").join(template),
            executable,
        ));
    }
    for rel in emulator_files(&assets.join(EMULATOR))? {
        entries.push(asset(
            &format!("{EMULATOR}/{rel}"),
            assets.join(EMULATOR).join(&rel),
            false,
        ));
    }
    Ok(entries)
}

/// The workspace files the release build of the five binaries reads (`/`-separated, relative to
/// `root`), sorted: the root manifest and lock, each member's manifest, `build.rs` and `src/`
/// (`xtask` too: cargo loads every member of the workspace), and `assets/`, which `patch-assets`
/// embeds whole. Tests, fixtures, the corpus and the docs stay out.
pub fn source_files(root: &Path) -> Result<Vec<String>> {
    let mut out = vec!["Cargo.toml".to_owned(), "Cargo.lock".to_owned()];
    let mut members: Vec<String> = Vec::new();
    let crates = root.join("crates");
    for entry in
        fs::read_dir(&crates).with_context(|| format!("cannot list {}", crates.display()))?
    {
        let entry = entry?;
        if entry.path().join("Cargo.toml").is_file() {
            members.push(format!("crates/{}", entry.file_name().to_string_lossy()));
        }
    }
    members.push("xtask".to_owned());
    for member in &members {
        for file in ["Cargo.toml", "build.rs"] {
            if root.join(member).join(file).is_file() {
                out.push(format!("{member}/{file}"));
            }
        }
        for rel in files_under(&root.join(member).join("src"))? {
            out.push(format!("{member}/src/{rel}"));
        }
    }
    for rel in files_under(&root.join("assets"))? {
        out.push(format!("assets/{rel}"));
    }
    out.sort();
    Ok(out)
}

/// The workspace files (`/`-separated, relative to `root`), sorted, that cargo's dep-info
/// records as inputs of the five binaries just built into `bin_dir` (`<binary>.d`: every source
/// file and every `include_str!`/`include_bytes!` input of the binary and its dependencies).
/// Files outside the workspace (the registry's crates, the standard library) are left out.
pub fn build_inputs(root: &Path, bin_dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (_, binary) in BINARIES {
        let path = bin_dir.join(format!("{binary}.d"));
        let text = fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read cargo's dep-info {} (build the binaries first)",
                path.display()
            )
        })?;
        for rel in dep_info_inputs(&text, root) {
            // A folder input (a build script's `rerun-if-changed` of a whole folder): its files.
            let path = root.join(&rel);
            if path.is_dir() {
                out.extend(
                    files_under(&path)?
                        .into_iter()
                        .map(|file| format!("{rel}/{file}")),
                );
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The inputs listed by a Makefile-style dep-info text (`target: input input ...`, spaces in a
/// path escaped as `\ `) that lie under `root`, relative to it, without the build's own outputs.
fn dep_info_inputs(text: &str, root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_, inputs)) = line.split_once(": ") else {
            continue;
        };
        let mut current = String::new();
        let mut words = Vec::new();
        let mut chars = inputs.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    current.push(' ');
                    chars.next();
                }
                ' ' => words.push(std::mem::take(&mut current)),
                _ => current.push(c),
            }
        }
        words.push(current);
        for word in words.into_iter().filter(|w| !w.is_empty()) {
            // `crates/x/../../assets`: resolved by name, as cargo names inputs relative to a crate.
            let mut normal = PathBuf::new();
            for component in Path::new(&word).components() {
                match component {
                    std::path::Component::ParentDir => {
                        normal.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => normal.push(other),
                }
            }
            let Ok(rel) = normal.strip_prefix(root) else {
                continue;
            };
            if rel.starts_with("target") || rel.as_os_str().is_empty() {
                continue;
            }
            out.push(
                rel.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
    }
    out
}

/// The emulator folder, in `assets/` and in the bundle.
pub const EMULATOR: &str = "emulator";

/// The emulator's files (`/`-separated, relative to `dir`), sorted, without byte-code caches.
fn emulator_files(dir: &Path) -> Result<Vec<String>> {
    let out = files_under(dir)?;
    if !out.iter().any(|p| p == "torch_npu/__init__.py") {
        bail!("{} holds no stand-in torch_npu", dir.display());
    }
    Ok(out)
}

/// The files under `dir` (`/`-separated, relative to it), sorted, without byte-code caches.
fn files_under(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in
            fs::read_dir(&current).with_context(|| format!("cannot list {}", current.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let cache = Path::new(&name)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("pyc"));
            if name == "__pycache__" || cache {
                continue;
            }
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir) {
                out.push(
                    rel.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join("/"),
                );
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The fix templates shipped in `assets/fix-templates/`, sorted.
pub fn fix_templates(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("assets").join("fix-templates");
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("P_") && Path::new(&name).extension().is_some_and(|e| e == "md") {
            names.push(name);
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("no fix templates (P_*.md) in {}", dir.display());
    }
    Ok(names)
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = fs::metadata(path)?.permissions();
    perms.set_mode(0o755);
    fs::set_permissions(path, perms)?;
    Ok(())
}

/// Write `stage` as `archive` (gzip, files in sorted order, deterministic headers); its size.
fn write_archive(stage: &Path, archive: &Path) -> Result<u64> {
    let partial = archive.with_extension("gz.partial");
    let file = fs::File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    append_tree(stage, file, &|_| false)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    fs::rename(&partial, archive).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            archive.display()
        )
    })?;
    Ok(fs::metadata(archive)?.len())
}

/// The size of the tarball of `stage` without the paths `skip` names (`/`-separated, relative).
fn archive_size(stage: &Path, skip: &dyn Fn(&str) -> bool) -> Result<u64> {
    let mut counter = Counter(0);
    append_tree(stage, &mut counter, skip)?;
    Ok(counter.0)
}

/// A writer that only counts bytes.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn append_tree<W: std::io::Write>(stage: &Path, out: W, skip: &dyn Fn(&str) -> bool) -> Result<()> {
    let encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut tar = tar::Builder::new(encoder);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let base = PathBuf::from(BUNDLE_NAME);
    tar.append_dir(&base, stage)?;
    let mut stack = vec![(stage.to_owned(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)?.collect::<std::io::Result<_>>()?;
        entries.sort_by_key(fs::DirEntry::file_name);
        // Reversed onto the stack, so folders come out in sorted order.
        for entry in entries.iter().rev() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if skip(&child) {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                tar.append_dir(base.join(&child), &path)?;
                stack.push((path, child));
            } else {
                tar.append_path_with_name(&path, base.join(&child))?;
            }
        }
    }
    tar.into_inner()?.finish()?.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EM_X86_64: u16 = 62;
    const EM_AARCH64: u16 = 183;

    /// A 64-bit little-endian ELF header for `machine`, with a `PT_INTERP` of `interpreter` and a
    /// `.gnu.version_r` needing each of `glibc` (e.g. `GLIBC_2.34`); no code.
    fn fake_elf(machine: u16, interpreter: Option<&str>, glibc: &[&str]) -> Vec<u8> {
        let mut interp = interpreter
            .map(|i| format!("{i}\0").into_bytes())
            .unwrap_or_default();
        let phnum: u16 = u16::from(interpreter.is_some());
        let interp_at = 64 + 56 * usize::from(phnum);
        let mut strings = b"\0libc.so.6\0".to_vec();
        let mut names = Vec::new();
        for version in glibc {
            names.push(u32::try_from(strings.len()).unwrap_or(0));
            strings.extend_from_slice(version.as_bytes());
            strings.push(0);
        }
        let strings_at = interp_at + interp.len();
        let mut verneed = Vec::new();
        let count = u16::try_from(glibc.len()).unwrap_or(0);
        verneed.extend_from_slice(&1u16.to_le_bytes());
        verneed.extend_from_slice(&count.to_le_bytes());
        verneed.extend_from_slice(&1u32.to_le_bytes()); // "libc.so.6"
        verneed.extend_from_slice(&16u32.to_le_bytes());
        verneed.extend_from_slice(&0u32.to_le_bytes());
        for (i, name) in names.iter().enumerate() {
            verneed.extend_from_slice(&0u32.to_le_bytes());
            verneed.extend_from_slice(&0u16.to_le_bytes());
            verneed.extend_from_slice(&0u16.to_le_bytes());
            verneed.extend_from_slice(&name.to_le_bytes());
            let next: u32 = if i + 1 < names.len() { 16 } else { 0 };
            verneed.extend_from_slice(&next.to_le_bytes());
        }
        let verneed_at = strings_at + strings.len();
        let sections_at = verneed_at + verneed.len();
        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&machine.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&64u64.to_le_bytes());
        out.extend_from_slice(&(sections_at as u64).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for half in [64u16, 56, phnum, 64, 3, 0] {
            out.extend_from_slice(&half.to_le_bytes());
        }
        if interpreter.is_some() {
            out.extend_from_slice(&3u32.to_le_bytes());
            out.extend_from_slice(&4u32.to_le_bytes());
            for word in [
                interp_at as u64,
                0,
                0,
                interp.len() as u64,
                interp.len() as u64,
                1,
            ] {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        out.append(&mut interp);
        out.extend_from_slice(&strings);
        out.extend_from_slice(&verneed);
        let section = |kind: u32, offset: usize, size: usize, link: u32| {
            let mut s = Vec::new();
            s.extend_from_slice(&0u32.to_le_bytes());
            s.extend_from_slice(&kind.to_le_bytes());
            for word in [0u64, 0, offset as u64, size as u64] {
                s.extend_from_slice(&word.to_le_bytes());
            }
            s.extend_from_slice(&link.to_le_bytes());
            s.extend_from_slice(&[0u8; 20]);
            s
        };
        out.extend(section(0, 0, 0, 0));
        out.extend(section(3, strings_at, strings.len(), 0));
        out.extend(section(0x6fff_fffe, verneed_at, verneed.len(), 1));
        out
    }

    /// A bundle folder with the scan launcher and the shared check, and `bin/npu-scan` = `binary`.
    fn bundle_with(binary: Option<&[u8]>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        write(&root.join("scripts/scan.py"), &launcher("npu-scan"))
            .unwrap_or_else(|e| panic!("{e:#}"));
        write(&root.join("scripts/bundle_check.py"), BUNDLE_CHECK)
            .unwrap_or_else(|e| panic!("{e:#}"));
        if let Some(bytes) = binary {
            fs::create_dir_all(root.join("bin")).unwrap_or_else(|e| panic!("{e}"));
            fs::write(root.join("bin/npu-scan"), bytes).unwrap_or_else(|e| panic!("{e}"));
            make_executable(&root.join("bin/npu-scan")).unwrap_or_else(|e| panic!("{e:#}"));
        }
        dir
    }

    /// `python scripts/scan.py --version` in `bundle`: (exit code, stdout, stderr).
    fn launch(bundle: &Path) -> (Option<i32>, String, String) {
        launch_with(bundle, &["--version"])
    }

    fn launch_with(bundle: &Path, args: &[&str]) -> (Option<i32>, String, String) {
        let python = std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let out = std::process::Command::new(&python)
            .arg(bundle.join("scripts/scan.py"))
            .args(args)
            .env_remove("NPU_PATCHER_NO_BIN_CHECK")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn host_machine() -> (u16, &'static str) {
        match std::env::consts::ARCH {
            "aarch64" => (EM_AARCH64, "aarch64"),
            _ => (EM_X86_64, "x86_64"),
        }
    }

    #[test]
    fn a_binary_of_another_architecture_is_one_line_naming_the_build_step() {
        let (foreign, name, triple) = if std::env::consts::ARCH == "aarch64" {
            (EM_X86_64, "x86_64", "x86_64-unknown-linux-gnu")
        } else {
            (EM_AARCH64, "aarch64", "aarch64-unknown-linux-gnu")
        };
        let bundle = bundle_with(Some(&fake_elf(
            foreign,
            Some("/lib/ld-linux-aarch64.so.1"),
            &[],
        )));
        write(
            &bundle.path().join("bin/TARGET.txt"),
            &format!("{triple}\n"),
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        let (code, stdout, stderr) = launch(bundle.path());
        let expected = format!(
            "npu-scan: error: bin/npu-scan is built for {name} ({triple}) and this machine is {}; \
             build bin/ for this machine: bash {}\n",
            host_machine().1,
            bundle.path().join("build.sh").display()
        );
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (Some(2), "", expected.as_str())
        );
    }

    #[test]
    fn a_binary_for_a_missing_c_library_names_its_loader() {
        let bundle = bundle_with(None);
        let loader = bundle.path().join("lib/ld-musl-x86_64.so.1");
        let elf = fake_elf(host_machine().0, Some(&loader.display().to_string()), &[]);
        fs::create_dir_all(bundle.path().join("bin")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(bundle.path().join("bin/npu-scan"), elf).unwrap_or_else(|e| panic!("{e}"));
        let (code, _, stderr) = launch(bundle.path());
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        let expected = format!(
            "npu-scan: error: bin/npu-scan is built for {} with musl (it needs the loader {}) and this machine has ",
            host_machine().1,
            loader.display()
        );
        assert!(stderr.starts_with(&expected), "{stderr}");
        assert!(stderr.trim_end().ends_with("/build.sh"), "{stderr}");
    }

    #[test]
    fn a_binary_needing_a_newer_glibc_names_both_versions() {
        let bundle = bundle_with(None);
        // The loader exists (any file of that name): only the glibc version misfits.
        let loader = bundle.path().join("ld-linux-test.so.2");
        fs::write(&loader, "").unwrap_or_else(|e| panic!("{e}"));
        let elf = fake_elf(
            host_machine().0,
            Some(&loader.display().to_string()),
            &["GLIBC_2.2.5", "GLIBC_99.1"],
        );
        fs::create_dir_all(bundle.path().join("bin")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(bundle.path().join("bin/npu-scan"), elf).unwrap_or_else(|e| panic!("{e}"));
        let (code, _, stderr) = launch(bundle.path());
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(
                "npu-scan: error: bin/npu-scan needs glibc 99.1 and this machine has glibc 2."
            ),
            "{stderr}"
        );
    }

    #[test]
    fn a_missing_or_non_elf_binary_names_the_build_step() {
        let bundle = bundle_with(None);
        let (code, _, stderr) = launch(bundle.path());
        assert_eq!(code, Some(2));
        assert!(
            stderr.starts_with(
                "npu-scan: error: bin/npu-scan is missing; build bin/ for this machine: bash "
            ),
            "{stderr}"
        );
        let bundle = bundle_with(Some(b"#!/bin/sh\necho hi\n"));
        let (code, stdout, stderr) = launch(bundle.path());
        assert_eq!((code, stdout.as_str()), (Some(2), ""));
        assert!(
            stderr.starts_with("npu-scan: error: bin/npu-scan is not an ELF file; "),
            "{stderr}"
        );
    }

    #[test]
    fn a_binary_that_fits_runs_with_the_arguments() {
        // A real executable of this machine: the check passes it and the launcher execs it.
        let real = ["/bin/echo", "/usr/bin/echo"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no /bin/echo on this machine"));
        let bytes = fs::read(real).unwrap_or_else(|e| panic!("{e}"));
        let bundle = bundle_with(Some(&bytes));
        let (code, stdout, stderr) = launch_with(bundle.path(), &["fits", "this machine"]);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (Some(0), "fits this machine\n", "")
        );
    }

    #[test]
    fn the_source_tree_holds_what_the_build_reads_and_no_tests() {
        let files = source_files(&crate::project_root()).unwrap_or_else(|e| panic!("{e:#}"));
        for needed in [
            "Cargo.toml",
            "Cargo.lock",
            "crates/scan/Cargo.toml",
            "crates/scan/src/main.rs",
            "crates/scan/src/rules/dev.md",
            "crates/patch-assets/build.rs",
            "xtask/Cargo.toml",
            "assets/SKILL.md",
            "assets/demo/tiny-vla/train.py",
        ] {
            assert!(files.iter().any(|f| f == needed), "source/ lacks {needed}");
        }
        for file in &files {
            assert!(
                !file.contains("/tests/")
                    && !file.starts_with("corpus/")
                    && !file.starts_with("docs/"),
                "source/ should not ship {file}"
            );
        }
    }

    #[test]
    fn dep_info_inputs_are_the_workspace_files_relative_to_the_root() {
        let text = "/w/target/release/npu-assets: /w/crates/a/src/lib.rs /w/torch-npu/wheels.json \
                    /home/u/.cargo/registry/x/src/lib.rs /w/assets/my\\ file.txt /w/target/out.rs /w/crates/a/../../docs/x.md\n\n\
                    /w/crates/a/src/lib.rs:\n";
        assert_eq!(
            dep_info_inputs(text, Path::new("/w")),
            [
                "crates/a/src/lib.rs",
                "torch-npu/wheels.json",
                "assets/my file.txt",
                "docs/x.md"
            ]
        );
    }

    #[test]
    fn a_target_without_its_standard_library_names_rustup_target_add() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let problem = std_missing("aarch64-unknown-linux-gnu", &dir.path().join("lib"))
            .unwrap_or_else(|| panic!("a missing libdir passed"));
        assert!(
            problem.contains("run `rustup target add aarch64-unknown-linux-gnu`"),
            "{problem}"
        );
        fs::write(dir.path().join("libstd-0123abcd.rlib"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std_missing("aarch64-unknown-linux-gnu", dir.path()), None);
    }

    /// `python scripts/build.py` in a bundle with a manifest, a lock and `vendor/`, with `PATH`
    /// limited to the system folders and `CARGO` set to `cargo` (or unset): (exit code, stderr).
    fn build_with(cargo: Option<&str>) -> (Option<i32>, String) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        write(&root.join("scripts/build.py"), &build_py()).unwrap_or_else(|e| panic!("{e:#}"));
        write(&root.join("scripts/bundle_check.py"), BUNDLE_CHECK)
            .unwrap_or_else(|e| panic!("{e:#}"));
        write(
            &root.join("source/Cargo.toml"),
            "[workspace.package]\nrust-version = \"1.95\"\n",
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        write(&root.join("source/Cargo.lock"), "").unwrap_or_else(|e| panic!("{e:#}"));
        fs::create_dir_all(root.join("source/vendor")).unwrap_or_else(|e| panic!("{e}"));
        let python = std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let python = which(&python);
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(root.join("scripts/build.py"))
            .env_clear()
            .env("PATH", "/nonexistent")
            .env("HOME", root);
        if let Some(cargo) = cargo {
            let fake = root.join("fake-cargo");
            write(
                &fake,
                &format!("#!/bin/sh\necho '{cargo} (abc 2024-01-01)'\n"),
            )
            .unwrap_or_else(|e| panic!("{e:#}"));
            make_executable(&fake).unwrap_or_else(|e| panic!("{e:#}"));
            cmd.env("CARGO", &fake).env("RUSTC", &fake);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The interpreter itself (`sys.executable`), not a shim that needs `PATH`.
    fn which(python: &str) -> PathBuf {
        let out = std::process::Command::new(python)
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    #[test]
    fn the_build_step_without_cargo_names_the_rust_version_and_rustup() {
        let (code, stderr) = build_with(None);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.starts_with(
                "build.sh: error: cargo is not installed (the build needs Rust 1.95 or newer); install Rust 1.95 or newer with rustup"
            ),
            "{stderr}"
        );
    }

    #[test]
    fn the_build_step_with_an_old_cargo_names_both_versions() {
        let (code, stderr) = build_with(Some("cargo 1.80.1"));
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains(
                "fake-cargo is version 1.80.1 and the build needs 1.95 or newer; install Rust 1.95"
            ),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }

    #[test]
    fn build_py_names_every_binary() {
        let text = build_py();
        assert!(!text.contains("@BINARIES@"));
        for (package, binary) in BINARIES {
            assert!(
                text.contains(&format!("(\"{package}\", \"{binary}\")")),
                "{binary}"
            );
        }
    }
}
