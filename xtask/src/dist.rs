//! `cargo xtask dist`: the release bundle, a drop-in skill directory with binaries for `x86_64`
//! and `aarch64` Linux that can also rebuild its own binaries offline.
//!
//! Layout under `target/dist/huawei-cloud-cloudrobo-npu-patcher/`:
//! `SKILL.md`, `build.sh` (builds `bin/<machine>/` for the machine it runs on, see below),
//! `scripts/{scan,progress,verify}.py` (launchers that pick `bin/<machine>/` by
//! `platform.machine()` and check it fits the machine, through the shared
//! `scripts/bundle_check.py`, then exec the binary), `scripts/build.py`,
//! `scripts/runtime_patches.py`, `bin/npu-*` (shell scripts that run `bin/<machine>/npu-*` by
//! `uname -m`), `bin/<machine>/npu-*` and `bin/<machine>/TARGET.txt` for each target of
//! `--targets` ([`targets`]: `bin/x86_64/` for the host, `bin/aarch64/` static musl),
//! `references/fix-templates/*.md`, `references/NPU-FACTS.md` (the Ascend facts the texts
//! cite), `templates/{env_npu.sh,train.sh,ADAPTATION_SUMMARY.md}`, `emulator/` (the emulated `npu`
//! device and stand-in `torch_npu`, for machines without an NPU), and `source/`: the workspace
//! files the release build reads ([`source_files`] and [`build_inputs`]), every crate of
//! `Cargo.lock` vendored under `source/vendor/` ([`vendor`]) and `source/.cargo/config.toml`
//! pointing cargo there, so `bash build.sh` builds the five binaries with the machine's cargo and
//! no network (any other Linux machine gets its `bin/<machine>/` that way). Then
//! `<name>-linux-<machines>.tar.gz` beside the folder and its `.sha256`. Staging is removed and
//! rebuilt every time. [`layout`] lists every skill file (all but `source/` and the binaries), so
//! tidy can check the shipped texts against it without building.

mod offline;
pub mod targets;
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
/// `bin/<binary>`: runs the binary of the machine's architecture; `@BINARY@` is the binary.
const DISPATCHER: &str = include_str!("../bundle/bin/dispatch.sh");
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
    /// The binaries to ship, each in `bin/<machine>/`: `auto` (the host's, and the static
    /// `aarch64-unknown-linux-musl` ones when this machine can build them; when it cannot, says
    /// why and leaves them out), `host`, `all` (the host's and aarch64's; an error when one cannot
    /// be built: use it for a release), or target triples separated by commas. A cross build needs
    /// `rustup target add TRIPLE`, and for aarch64 a C compiler such as `aarch64-linux-gnu-gcc`
    /// (see docs/release.md).
    #[arg(long, default_value = "auto", value_name = "auto|host|all|TRIPLE,...")]
    pub targets: targets::Choice,
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
    let targets = targets::plan(&args.targets, &host)?;
    let target_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let profile = if args.debug { "debug" } else { "release" };
    let mut bin_dirs = Vec::new();
    for target in &targets {
        build(&cargo, &root, target, args.debug)?;
        bin_dirs.push(if target.host {
            target_dir.join(profile)
        } else {
            target_dir.join(&target.triple).join(profile)
        });
    }

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
        }
        if entry.executable {
            make_executable(&to)?;
        }
    }
    for (target, bin_dir) in targets.iter().zip(&bin_dirs) {
        let folder = stage.join("bin").join(target.machine());
        for (_, binary) in BINARIES {
            copy(&bin_dir.join(binary), &folder.join(binary))?;
            make_executable(&folder.join(binary))?;
        }
        write(&folder.join("TARGET.txt"), &format!("{}\n", target.triple))?;
    }
    let source = stage.join(SOURCE);
    // The workspace's structure (manifests, sources, assets/), plus every workspace file that
    // cargo's dep-info says the build of the binaries read (`include_str!`/`include_bytes!`
    // inputs anywhere in the tree), so that `bash build.sh` finds them offline.
    let mut inputs = Vec::new();
    for bin_dir in &bin_dirs {
        inputs.extend(build_inputs(&root, bin_dir)?);
    }
    inputs.sort();
    inputs.dedup();
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
    for target in &targets {
        if !platforms.contains(&target.triple) {
            platforms.push(target.triple.clone());
        }
    }
    let vendored = vendor::vendor(&root, &source.join("vendor"), &platforms)?;
    eprintln!(
        "xtask: vendored {} crates ({} left as stubs: not built on {})",
        vendored.kept + vendored.stubbed,
        vendored.stubbed,
        platforms.join(", ")
    );

    let machines: Vec<String> = targets.iter().map(|t| t.machine().to_owned()).collect();
    let mut archive = None;
    if !args.no_archive {
        let name = archive_name(&machines);
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
            for machine in &machines {
                let only = format!("bin/{machine}");
                let without = archive_size(&stage, &|rel| rel == only)?;
                eprintln!(
                    "xtask: without bin/{machine}/ it would be {}",
                    megabytes(without)
                );
            }
        }
        archive = Some(path);
    }
    eprintln!(
        "xtask: bundle at {} ({})",
        stage.display(),
        targets
            .iter()
            .map(|t| format!("bin/{}/ for {}", t.machine(), t.triple))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let bundle = Bundle {
        dir: stage,
        archive,
    };
    if args.check_offline_build {
        let Some(archive) = &bundle.archive else {
            bail!("--check-offline-build starts from the tarball: drop --no-archive");
        };
        if !targets.iter().any(|t| t.host) {
            bail!(
                "--check-offline-build builds on this machine: add its target {host} to --targets"
            );
        }
        offline::check(&root, archive, &host)?;
    }
    Ok(bundle)
}

/// The tarball's name: `<bundle>-linux-<machine>[-<machine>...].tar.gz`.
pub fn archive_name(machines: &[String]) -> String {
    format!("{BUNDLE_NAME}-linux-{}.tar.gz", machines.join("-"))
}

/// `cargo build` of the five binaries for `target`.
fn build(cargo: &str, root: &Path, target: &targets::Target, debug: bool) -> Result<()> {
    let mut argv: Vec<String> = vec!["build".into(), "--locked".into()];
    if !debug {
        argv.push("--release".into());
    }
    if !target.host {
        argv.push("--target".into());
        argv.push(target.triple.clone());
    }
    for (package, _) in BINARIES {
        argv.push("-p".into());
        argv.push(package.into());
    }
    let mut cmd = duct::cmd(cargo, &argv).dir(root).unchecked();
    for (key, value) in &target.env {
        eprintln!("xtask: {key}={value}");
        cmd = cmd.env(key, value);
    }
    let status = cmd.run()?;
    if status.status.success() {
        return Ok(());
    }
    let triple = &target.triple;
    if target.host {
        bail!("building the binaries failed (cargo's messages are above)");
    }
    let var = triple.to_uppercase().replace('-', "_");
    bail!(
        "building the binaries for {triple} failed (cargo's messages are above); a cross build \
         needs a linker and a C compiler for {triple} (CARGO_TARGET_{var}_LINKER, CC_{}; see \
         docs/release.md). Without them, build the bundle with `--targets host` and run \
         `bash build.sh` from the unpacked tarball on a {triple} machine",
        triple.replace('-', "_")
    );
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
pub(crate) fn check_target_installed(triple: &str) -> Result<()> {
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

/// `bin/<binary>`: runs `bin/<machine>/<binary>` for the machine it runs on (`uname -m`).
pub fn dispatcher(binary: &str) -> String {
    DISPATCHER.replace("@BINARY@", binary)
}

/// `scripts/build.py` with the list of binaries filled in.
fn build_py() -> String {
    let list: Vec<String> = BINARIES
        .iter()
        .map(|(package, binary)| format!("(\"{package}\", \"{binary}\")"))
        .collect();
    // A JSON string is a Python string literal too.
    let dispatcher = serde_json::to_string(DISPATCHER).unwrap_or_default();
    BUILD_PY
        .replace("@BINARIES@", &format!("[{}]", list.join(", ")))
        .replace("@DISPATCHER@", &dispatcher)
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
    // bin/<binary>: runs bin/<machine>/<binary> (copied in by `run`) for the machine it runs on.
    for (_, binary) in BINARIES {
        entries.push(text(&format!("bin/{binary}"), dispatcher(binary), true));
    }
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
mod tests;
