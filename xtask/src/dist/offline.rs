//! `cargo xtask dist --check-offline-build`: the tarball builds its own `bin/` on a machine with
//! cargo and nothing else.
//!
//! Unpacks the tarball into `target/dist/offline-check/`, removes `bin/`, runs `bash build.sh`
//! with an empty `CARGO_HOME`, `CARGO_NET_OFFLINE=true`, a clean environment (the toolchain's own
//! `bin/` and the system folders on `PATH`, no rustup proxy, no cargo variables) and, where
//! `unshare -rn` works, in a network namespace of its own; then runs the rebuilt
//! `scripts/scan.py` on the demo project, which must report its findings (exit 1, a summary and
//! `issues.json`), and `bin/npu-scan --version`. Prints the build time.

use anyhow::{Context, Result, bail};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub fn check(root: &Path, archive: &Path, host: &str) -> Result<()> {
    let work = root.join("target").join("dist").join("offline-check");
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("cannot clean {}", work.display()))?;
    }
    fs::create_dir_all(&work)?;
    let file =
        fs::File::open(archive).with_context(|| format!("cannot open {}", archive.display()))?;
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(&work)
        .with_context(|| format!("cannot unpack {}", archive.display()))?;
    let bundle = work.join(super::BUNDLE_NAME);
    fs::remove_dir_all(bundle.join("bin")).context("the tarball has no bin/")?;
    let cargo_home = work.join("cargo-home");
    let home = work.join("home");
    fs::create_dir_all(&cargo_home)?;
    fs::create_dir_all(&home)?;

    let toolchain = toolchain_bin()?;
    let mut path = vec![toolchain.clone()];
    path.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
    let path = std::env::join_paths(path)?;
    let env = |cmd: duct::Expression| {
        cmd.full_env([
            ("PATH", path.as_os_str()),
            ("HOME", home.as_os_str()),
            ("CARGO_HOME", cargo_home.as_os_str()),
            ("CARGO_NET_OFFLINE", "true".as_ref()),
            ("LANG", "C.UTF-8".as_ref()),
            ("PYTHONDONTWRITEBYTECODE", "1".as_ref()),
        ])
    };
    let isolated = duct::cmd!("unshare", "-rn", "true")
        .stdout_null()
        .stderr_null()
        .unchecked()
        .run()
        .is_ok_and(|o| o.status.success());
    let mut argv: Vec<String> = Vec::new();
    if isolated {
        argv.extend(["unshare".into(), "-rn".into()]);
    }
    argv.extend(["bash".into(), bundle.join("build.sh").display().to_string()]);
    eprintln!(
        "xtask: offline build in {} ({})",
        bundle.display(),
        if isolated {
            "no network: unshare -rn"
        } else {
            "unshare -rn is not available here: offline flags only"
        }
    );
    let started = Instant::now();
    let cpu_before = children_cpu_secs()?;
    let built = env(duct::cmd(&argv[0], &argv[1..]))
        .dir(&bundle)
        .unchecked()
        .run()?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = children_cpu_secs()? - cpu_before;
    if !built.status.success() {
        bail!("`bash build.sh` in the unpacked tarball failed after {secs:.0}s (messages above)");
    }
    let downloaded: Vec<_> = fs::read_dir(&cargo_home)?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    if downloaded
        .iter()
        .any(|name| name == "registry" || name == "git")
    {
        bail!(
            "the build wrote {}/{downloaded:?}: it fetched crates instead of using source/vendor/",
            cargo_home.display()
        );
    }
    let machine = super::targets::machine(host);
    let folder = bundle.join("bin").join(machine);
    for (_, binary) in super::BINARIES {
        for path in [folder.join(binary), bundle.join("bin").join(binary)] {
            if !path.is_file() {
                bail!("build.sh succeeded but did not write {}", path.display());
            }
        }
    }
    let named = fs::read_to_string(folder.join("TARGET.txt")).unwrap_or_default();
    if named.trim() != host {
        bail!(
            "the rebuilt bin/{machine}/TARGET.txt names {:?}, not this host {host}",
            named.trim()
        );
    }

    let demo = work.join("tiny-vla");
    copy_tree(
        &bundle.join(super::SOURCE).join("assets/demo/tiny-vla"),
        &demo,
    )?;
    let out = work.join("scan-out");
    let python = std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let scan = env(duct::cmd!(
        &python,
        bundle.join("scripts/scan.py"),
        &demo,
        "--output",
        &out
    ))
    .dir(&work)
    .stdout_capture()
    .stderr_capture()
    .unchecked()
    .run()?;
    let stdout = String::from_utf8_lossy(&scan.stdout);
    let stderr = String::from_utf8_lossy(&scan.stderr);
    if scan.status.code() != Some(1)
        || !stdout.contains("total")
        || !out.join("issues.json").is_file()
    {
        bail!(
            "the rebuilt scripts/scan.py on the demo: expected exit 1, a summary and issues.json, \
             got {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            scan.status.code()
        );
    }
    let version = env(duct::cmd!(bundle.join("bin/npu-scan"), "--version"))
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()?;
    if !version.status.success() || !String::from_utf8_lossy(&version.stdout).contains("npu-scan") {
        bail!(
            "the rebuilt bin/npu-scan --version: exit {:?}\n{}",
            version.status.code(),
            String::from_utf8_lossy(&version.stderr)
        );
    }
    eprintln!(
        "xtask: offline build from the tarball: ok (bin/ built in {secs:.0}s wall, {cpu:.0}s CPU; \
         the rebuilt scripts/scan.py reports the demo's findings)"
    );
    fs::remove_dir_all(&work).with_context(|| format!("cannot remove {}", work.display()))?;
    Ok(())
}

/// CPU time (user + system) of the children waited for so far, in seconds.
fn children_cpu_secs() -> Result<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    // Seconds of CPU time are far below 2^52: the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(secs(usage.user_time()) + secs(usage.system_time()))
}

/// The `bin/` of the active toolchain (its real cargo and rustc, not rustup's proxies).
fn toolchain_bin() -> Result<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let sysroot = duct::cmd!(&rustc, "--print", "sysroot")
        .read()
        .with_context(|| format!("cannot run `{rustc} --print sysroot`"))?;
    let bin = PathBuf::from(sysroot.trim()).join("bin");
    for tool in ["cargo", "rustc"] {
        if !bin.join(tool).is_file() {
            bail!("the toolchain at {} has no {tool}", bin.display());
        }
    }
    Ok(bin)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}
