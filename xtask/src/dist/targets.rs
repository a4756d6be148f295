//! Which targets `cargo xtask dist` builds binaries for (`--targets`), and how a target other
//! than the host is cross-built.
//!
//! The host's binaries are always built the ordinary way. The one cross target the release
//! ships, [`CROSS`] (`aarch64-unknown-linux-musl`: static, so it runs on any aarch64 Linux,
//! whatever its C library), needs three things on the building machine: the target's standard
//! library (`rustup target add aarch64-unknown-linux-musl`), a linker (`rust-lld`, which every
//! rustup toolchain ships, with musl's self-contained start files) and a C compiler for
//! mimalloc's C sources (`aarch64-linux-musl-gcc`, or `aarch64-linux-gnu-gcc`: mimalloc calls only
//! C functions whose ABI glibc and musl share on aarch64, see docs/release.md). `--targets auto`
//! (the default) skips a cross target that lacks one of them and prints why; `--targets all` or a
//! named target fails instead.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The cross targets of a release bundle, besides the host's.
pub const CROSS: [&str; 1] = ["aarch64-unknown-linux-musl"];

/// `--targets`: which binaries the bundle ships.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// The host's, and each of [`CROSS`] this machine can build (the others skipped, with why).
    #[default]
    Auto,
    /// The host's only.
    Host,
    /// The host's and every one of [`CROSS`]; an error when one cannot be built.
    All,
    /// Exactly these target triples (the host's among them or not); an error when one cannot be
    /// built.
    List(Vec<String>),
}

impl FromStr for Choice {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "host" => Ok(Self::Host),
            "all" => Ok(Self::All),
            _ => {
                let list: Vec<String> = text
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect();
                if list.is_empty() || list.iter().any(|t| t.split('-').count() < 3) {
                    return Err(format!(
                        "expected auto, host, all or target triples separated by commas \
                         (e.g. x86_64-unknown-linux-gnu,aarch64-unknown-linux-musl), got {text:?}"
                    ));
                }
                Ok(Self::List(list))
            }
        }
    }
}

/// One target to build.
#[derive(Debug)]
pub struct Target {
    pub triple: String,
    /// The host's target: built without `--target`.
    pub host: bool,
    /// Environment the cross build needs (linker, C compiler).
    pub env: Vec<(String, String)>,
}

impl Target {
    /// The folder under `bin/`: the architecture as Python's `platform.machine()` and `uname -m`
    /// name it on Linux (`x86_64`, `aarch64`, `riscv64`, ...).
    pub fn machine(&self) -> &str {
        machine(&self.triple)
    }
}

/// The `bin/` folder name of `triple` (its architecture, `riscv64gc` read as `riscv64`).
pub fn machine(triple: &str) -> &str {
    let arch = triple.split('-').next().unwrap_or(triple);
    if arch.starts_with("riscv64") {
        "riscv64"
    } else {
        arch
    }
}

/// The targets `choice` names, the host's first; a cross target `Auto` cannot build is left out
/// with a printed reason.
pub fn plan(choice: &Choice, host: &str) -> Result<Vec<Target>> {
    let host_target = || Target {
        triple: host.to_owned(),
        host: true,
        env: Vec::new(),
    };
    let cross: Vec<&str> = CROSS
        .iter()
        .copied()
        .filter(|t| machine(t) != machine(host))
        .collect();
    let mut out = Vec::new();
    match choice {
        Choice::Host => out.push(host_target()),
        Choice::Auto => {
            out.push(host_target());
            for triple in cross {
                match prepare(triple, host) {
                    Ok(target) => out.push(target),
                    Err(why) => eprintln!(
                        "xtask: no bin/{}/ in this bundle: {why:#} (`--targets all` makes this an error)",
                        machine(triple)
                    ),
                }
            }
        }
        Choice::All => {
            out.push(host_target());
            for triple in cross {
                out.push(prepare(triple, host).with_context(|| {
                    format!("--targets all: cannot build the binaries for {triple}")
                })?);
            }
        }
        Choice::List(list) => {
            for triple in list {
                if triple == host {
                    out.push(host_target());
                } else {
                    out.push(
                        prepare(triple, host)
                            .with_context(|| format!("cannot build the binaries for {triple}"))?,
                    );
                }
            }
        }
    }
    for (i, target) in out.iter().enumerate() {
        if let Some(other) = out[..i].iter().find(|o| o.machine() == target.machine()) {
            bail!(
                "--targets names two targets for bin/{}/: {} and {}",
                target.machine(),
                other.triple,
                target.triple
            );
        }
    }
    Ok(out)
}

/// Check that this machine can cross-build `triple`; the environment cargo needs for it.
fn prepare(triple: &str, host: &str) -> Result<Target> {
    super::check_target_installed(triple)?;
    let upper = triple.to_uppercase().replace('-', "_");
    let lower = triple.replace('-', "_");
    let mut env = Vec::new();
    let linker_var = format!("CARGO_TARGET_{upper}_LINKER");
    if std::env::var_os(&linker_var).is_none() {
        if !triple.ends_with("-musl") {
            bail!(
                "a cross build for {triple} needs a linker: set {linker_var} (e.g. {}-linux-gnu-gcc)",
                machine(triple)
            );
        }
        let lld = rust_lld(host)?;
        if !lld.is_file() {
            bail!(
                "the toolchain has no rust-lld ({} is missing), which links the static musl binaries; \
                 or set {linker_var}",
                lld.display()
            );
        }
        env.push((linker_var, "rust-lld".to_owned()));
    }
    let cc_set = [
        format!("CC_{lower}"),
        format!("CC_{triple}"),
        "TARGET_CC".into(),
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if !cc_set {
        let arch = machine(triple);
        let candidates = if triple.ends_with("-musl") {
            vec![
                format!("{arch}-linux-musl-gcc"),
                format!("{arch}-linux-gnu-gcc"),
            ]
        } else {
            vec![format!("{arch}-linux-gnu-gcc")]
        };
        let Some(cc) = candidates.iter().find_map(|c| on_path(c)) else {
            bail!(
                "no C compiler for {triple} on PATH (mimalloc, the scanner's allocator, has C \
                 sources): install one of {} (Debian or Ubuntu: `apt-get install gcc-{arch}-linux-gnu`), \
                 or set CC_{lower}",
                candidates.join(", ")
            );
        };
        env.push((format!("CC_{lower}"), cc.display().to_string()));
    }
    Ok(Target {
        triple: triple.to_owned(),
        host: false,
        env,
    })
}

/// `rust-lld` of the active toolchain (`<sysroot>/lib/rustlib/<host>/bin/rust-lld`).
fn rust_lld(host: &str) -> Result<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let sysroot = duct::cmd!(&rustc, "--print", "sysroot")
        .read()
        .with_context(|| format!("cannot run `{rustc} --print sysroot`"))?;
    Ok(Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/rust-lld"))
}

/// `name` found in a folder of `PATH`, executable.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_a_bad_one_says_what_is_expected() {
        assert_eq!("auto".parse::<Choice>(), Ok(Choice::Auto));
        assert_eq!("all".parse::<Choice>(), Ok(Choice::All));
        assert_eq!(
            "x86_64-unknown-linux-gnu, aarch64-unknown-linux-musl".parse::<Choice>(),
            Ok(Choice::List(vec![
                "x86_64-unknown-linux-gnu".into(),
                "aarch64-unknown-linux-musl".into()
            ]))
        );
        let err = "aarch64".parse::<Choice>().unwrap_err();
        assert!(err.contains("auto, host, all or target triples"), "{err}");
    }

    #[test]
    fn machines_are_the_names_platform_machine_gives() {
        assert_eq!(machine("x86_64-unknown-linux-gnu"), "x86_64");
        assert_eq!(machine("aarch64-unknown-linux-musl"), "aarch64");
        assert_eq!(machine("riscv64gc-unknown-linux-gnu"), "riscv64");
    }

    #[test]
    fn host_only_builds_no_cross_target_and_two_targets_of_one_machine_fail() {
        let host = "x86_64-unknown-linux-gnu";
        let plan_ = plan(&Choice::Host, host).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(plan_.len(), 1);
        assert!(plan_[0].host);
        let list = Choice::List(vec![host.into(), host.into()]);
        let err = plan(&list, host).expect_err("two x86_64 targets passed");
        assert!(
            format!("{err:#}").contains("two targets for bin/x86_64/"),
            "{err:#}"
        );
    }

    #[test]
    fn an_uninstalled_target_named_explicitly_fails_naming_rustup() {
        // No toolchain has the standard library of a target that does not exist.
        let list = Choice::List(vec!["aarch64-unknown-none-nostd".into()]);
        let err = plan(&list, "x86_64-unknown-linux-gnu").expect_err("an unknown target passed");
        let text = format!("{err:#}");
        assert!(
            text.contains("cannot build the binaries for aarch64-unknown-none-nostd"),
            "{text}"
        );
    }
}
