//! `source/vendor/`: every crate of `Cargo.lock`, as `cargo vendor` writes them, then trimmed.
//!
//! Cargo reads the manifest of every package in the lock file, even of those no Linux build
//! compiles (the Windows API crates, the test-only crates), so each must be present. A crate the
//! five binaries need on one of [`LINUX_TARGETS`] (by `cargo tree -e normal,build`) keeps its
//! sources, less its `tests/` and `benches/`; every other crate becomes a stub: its
//! `Cargo.toml` and a `src/lib.rs` that fails with a `compile_error!` naming the crate. Each
//! crate's `.cargo-checksum.json` lists only the files left, so cargo's checks of the vendored
//! files still pass.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The targets the vendored sources build on.
pub const LINUX_TARGETS: [&str; 6] = [
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-unknown-linux-musl",
    "aarch64-unknown-linux-musl",
    "riscv64gc-unknown-linux-gnu",
    "loongarch64-unknown-linux-gnu",
];

/// Top folders of a vendored crate that no dependent build reads (`examples/` stays: crate docs
/// embed examples with `include_str!`, which the build expands).
const DROPPED: [&str; 2] = ["tests", "benches"];

/// What [`vendor`] did.
pub struct Stats {
    pub kept: usize,
    pub stubbed: usize,
}

/// Vendor the lock file of the workspace at `root` into `into` (which must not exist), trimmed
/// for `targets`.
pub fn vendor(root: &Path, into: &Path, targets: &[String]) -> Result<Stats> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = duct::cmd!(&cargo, "vendor", "--locked", "--versioned-dirs", into)
        .dir(root)
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()?;
    if !out.status.success() {
        bail!(
            "`cargo vendor` failed (it downloads the crates of Cargo.lock that are not cached yet, \
             so it needs network once):\n{}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let needed = needed(root, targets)?;
    let mut stats = Stats {
        kept: 0,
        stubbed: 0,
    };
    let mut dirs: Vec<_> = fs::read_dir(into)
        .with_context(|| format!("cannot list {}", into.display()))?
        .collect::<std::io::Result<_>>()?;
    dirs.sort_by_key(fs::DirEntry::file_name);
    for entry in dirs {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if needed.contains(&name) {
            trim(&dir)?;
            stats.kept += 1;
        } else {
            stub(&dir, &name)?;
            stats.stubbed += 1;
        }
    }
    if stats.kept == 0 {
        bail!("no vendored crate matched the build's dependencies: `cargo tree` gave {needed:?}");
    }
    Ok(stats)
}

/// `name-version` of every registry crate the five binaries build with on `targets`, the
/// build scripts' and proc macros' dependencies included.
fn needed(root: &Path, targets: &[String]) -> Result<BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut args: Vec<String> = ["tree", "--locked", "-e", "normal,build", "--prefix", "none"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(["-f".to_owned(), "{p}".to_owned()]);
    for target in targets {
        args.extend(["--target".to_owned(), target.clone()]);
    }
    for (package, _) in super::BINARIES {
        args.extend(["-p".to_owned(), package.to_owned()]);
    }
    let text = duct::cmd(&cargo, &args)
        .dir(root)
        .read()
        .context("`cargo tree` failed")?;
    Ok(parse_tree(&text))
}

/// The `name-version` of each registry package in `cargo tree -f {p}` output (path packages,
/// which name their folder in parentheses, are the workspace's own).
fn parse_tree(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let Some(version) = version.strip_prefix('v') else {
            continue;
        };
        if words.any(|w| w.starts_with("(/") || w.starts_with("(file:")) {
            continue;
        }
        out.insert(format!("{name}-{version}"));
    }
    out
}

/// Drop [`DROPPED`] from a kept crate.
fn trim(dir: &Path) -> Result<()> {
    let mut removed = false;
    for top in DROPPED {
        let path = dir.join(top);
        if path.is_dir() {
            fs::remove_dir_all(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
            removed = true;
        }
    }
    if removed {
        rewrite_checksums(dir, &|file| {
            !DROPPED
                .iter()
                .any(|top| file.split('/').next() == Some(*top))
        })?;
    }
    Ok(())
}

/// Replace a crate no target build compiles with its manifest and a failing `src/lib.rs`.
fn stub(dir: &Path, name: &str) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let file = entry.file_name();
        if file == "Cargo.toml" || file == ".cargo-checksum.json" {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        }
        .with_context(|| format!("cannot remove {}", path.display()))?;
    }
    let src = dir.join("src");
    fs::create_dir_all(&src)?;
    fs::write(
        src.join("lib.rs"),
        format!(
            "compile_error!(\"{name} is a stub in the npu-patcher bundle: no Linux build of its \
             binaries compiles it, so its sources were left out; build on Linux, or from the \
             npu-patcher repository with network\");\n"
        ),
    )?;
    rewrite_checksums(dir, &|_| false)
}

/// Keep in `.cargo-checksum.json` only the files `keep` accepts (cargo checks each listed file).
fn rewrite_checksums(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Result<()> {
    let path = dir.join(".cargo-checksum.json");
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let Some(files) = json
        .get_mut("files")
        .and_then(serde_json::Value::as_object_mut)
    else {
        bail!("{} has no \"files\" object", path.display());
    };
    files.retain(|file, _| keep(file));
    fs::write(&path, serde_json::to_string(&json)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_gives_registry_packages_only() {
        let text = "scan v0.1.0 (/work/crates/scan)\nanyhow v1.0.105\nserde_derive v1.0.229 (proc-macro)\n\
                    anyhow v1.0.105 (*)\n\nsyn v2.0.119\n";
        let got: Vec<String> = parse_tree(text).into_iter().collect();
        assert_eq!(
            got,
            ["anyhow-1.0.105", "serde_derive-1.0.229", "syn-2.0.119"]
        );
    }

    #[test]
    fn a_stub_keeps_its_manifest_and_lists_no_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let krate = dir.path().join("winapi-0.3.9");
        fs::create_dir_all(krate.join("src")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(krate.join("Cargo.toml"), "[package]\nname = \"winapi\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        fs::write(krate.join("src/big.rs"), "// big").unwrap_or_else(|e| panic!("{e}"));
        fs::write(
            krate.join(".cargo-checksum.json"),
            r#"{"files":{"Cargo.toml":"aa","src/big.rs":"bb"},"package":"cc"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        stub(&krate, "winapi-0.3.9").unwrap_or_else(|e| panic!("{e:#}"));
        assert!(!krate.join("src/big.rs").exists());
        assert!(krate.join("Cargo.toml").is_file());
        let lib = fs::read_to_string(krate.join("src/lib.rs")).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            lib.starts_with("compile_error!(\"winapi-0.3.9 is a stub"),
            "{lib}"
        );
        let sums = fs::read_to_string(krate.join(".cargo-checksum.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sums, r#"{"files":{},"package":"cc"}"#);
    }

    #[test]
    fn trimming_drops_the_tests_and_their_checksums() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let krate = dir.path().join("memchr-2.7.4");
        for file in ["src/lib.rs", "tests/t.rs", "benches/b.rs", "testsuite.rs"] {
            let path = krate.join(file);
            fs::create_dir_all(path.parent().unwrap_or(&krate)).unwrap_or_else(|e| panic!("{e}"));
            fs::write(&path, "").unwrap_or_else(|e| panic!("{e}"));
        }
        fs::write(
            krate.join(".cargo-checksum.json"),
            r#"{"files":{"src/lib.rs":"a","tests/t.rs":"b","benches/b.rs":"c","testsuite.rs":"d"},"package":"p"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        trim(&krate).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(!krate.join("tests").exists() && !krate.join("benches").exists());
        assert!(krate.join("testsuite.rs").is_file());
        let sums = fs::read_to_string(krate.join(".cargo-checksum.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            sums,
            r#"{"files":{"src/lib.rs":"a","testsuite.rs":"d"},"package":"p"}"#
        );
    }
}
