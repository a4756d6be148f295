//! Tests of the bundle: the launchers' check, the `bin/<binary>` scripts, the build step, the
//! source list.

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
    write(&root.join("scripts/scan.py"), &launcher("npu-scan")).unwrap_or_else(|e| panic!("{e:#}"));
    write(&root.join("scripts/bundle_check.py"), BUNDLE_CHECK).unwrap_or_else(|e| panic!("{e:#}"));
    if let Some(bytes) = binary {
        put_binary(root, host_machine().1, bytes);
    }
    dir
}

/// Write `bytes` as `bin/<machine>/npu-scan` of the bundle at `root`, executable.
fn put_binary(root: &Path, machine: &str, bytes: &[u8]) {
    let path = root.join("bin").join(machine).join("npu-scan");
    fs::create_dir_all(path.parent().unwrap_or(root)).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
    make_executable(&path).unwrap_or_else(|e| panic!("{e:#}"));
}

/// The bytes of a real executable of this machine that prints its arguments.
fn echo_binary() -> Vec<u8> {
    let real = ["/bin/echo", "/usr/bin/echo"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no /bin/echo on this machine"));
    fs::read(real).unwrap_or_else(|e| panic!("{e}"))
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
    let here = host_machine().1;
    write(
        &bundle.path().join("bin").join(here).join("TARGET.txt"),
        &format!("{triple}\n"),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let (code, stdout, stderr) = launch(bundle.path());
    let expected = format!(
        "npu-scan: error: bin/{here}/npu-scan is built for {name} ({triple}) and this machine is {here}; \
         build bin/{here}/ for this machine: bash {}\n",
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
    let here = host_machine().1;
    put_binary(bundle.path(), here, &elf);
    let (code, _, stderr) = launch(bundle.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let expected = format!(
        "npu-scan: error: bin/{here}/npu-scan is built for {here} with musl (it needs the loader {}) and this machine has ",
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
    let here = host_machine().1;
    put_binary(bundle.path(), here, &elf);
    let (code, _, stderr) = launch(bundle.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let expected = format!(
        "npu-scan: error: bin/{here}/npu-scan needs glibc 99.1 and this machine has glibc 2."
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
}

#[test]
fn a_missing_or_non_elf_binary_names_the_build_step() {
    let here = host_machine().1;
    let bundle = bundle_with(None);
    let (code, _, stderr) = launch(bundle.path());
    assert_eq!(code, Some(2));
    let machine = std::process::Command::new("uname")
        .arg("-m")
        .output()
        .map_or_else(
            |e| panic!("{e}"),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        );
    let expected = format!(
        "npu-scan: error: this bundle has no npu-scan for this machine ({machine}: \
         bin/{here}/npu-scan is missing; it has none); build bin/{here}/ for this machine: bash "
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    let bundle = bundle_with(Some(b"#!/bin/sh\necho hi\n"));
    let (code, stdout, stderr) = launch(bundle.path());
    assert_eq!((code, stdout.as_str()), (Some(2), ""));
    let expected = format!("npu-scan: error: bin/{here}/npu-scan is not an ELF file; ");
    assert!(stderr.starts_with(&expected), "{stderr}");
    // NPU_PATCHER_NO_BIN_CHECK=1 skips the ELF checks, never the one for a missing binary.
    let bundle = bundle_with(None);
    let python = std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = std::process::Command::new(&python)
        .arg(bundle.path().join("scripts/scan.py"))
        .env("NPU_PATCHER_NO_BIN_CHECK", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("this bundle has no npu-scan for this machine"),
        "{stderr}"
    );
}

#[test]
fn a_binary_that_fits_runs_with_the_arguments() {
    // A real executable of this machine: the check passes it and the launcher execs it.
    let bundle = bundle_with(Some(&echo_binary()));
    let (code, stdout, stderr) = launch_with(bundle.path(), &["fits", "this machine"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "fits this machine\n", "")
    );
}

#[test]
fn the_launcher_runs_the_binary_of_this_machine_among_several() {
    let (here, foreign, foreign_machine) = if std::env::consts::ARCH == "aarch64" {
        ("aarch64", "x86_64", EM_X86_64)
    } else {
        ("x86_64", "aarch64", EM_AARCH64)
    };
    let bundle = bundle_with(None);
    put_binary(
        bundle.path(),
        foreign,
        &fake_elf(foreign_machine, None, &[]),
    );
    // Only the other machine's binary: one line naming what the bundle has and the fix.
    let (code, _, stderr) = launch(bundle.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "bin/{here}/npu-scan is missing; it has bin/{foreign}/); build bin/{here}/ for this machine: bash "
        )),
        "{stderr}"
    );
    put_binary(bundle.path(), here, &echo_binary());
    let (code, stdout, stderr) = launch_with(bundle.path(), &["picked"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "picked\n", "")
    );
}

/// `sh <bundle>/bin/npu-scan ARGS` (through `link` instead when given): (exit code, stdout, stderr).
fn dispatch(bundle: &Path, link: Option<&Path>, args: &[&str]) -> (Option<i32>, String, String) {
    let script = bundle.join("bin/npu-scan");
    write(&script, &dispatcher("npu-scan")).unwrap_or_else(|e| panic!("{e:#}"));
    make_executable(&script).unwrap_or_else(|e| panic!("{e:#}"));
    let out = std::process::Command::new(link.unwrap_or(&script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bin_scripts_run_the_binary_of_this_machine_or_name_the_build_step() {
    let here = host_machine().1;
    let foreign = if here == "aarch64" {
        "x86_64"
    } else {
        "aarch64"
    };
    let bundle = bundle_with(None);
    put_binary(bundle.path(), foreign, b"not for this machine");
    let (code, stdout, stderr) = dispatch(bundle.path(), None, &["--version"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    let expected = format!(
        "npu-scan: error: this bundle has no npu-scan for this machine ({here}: bin/{here}/npu-scan \
         is missing; it has {foreign}); build bin/{here}/ for this machine: bash {}\n",
        bundle.path().join("build.sh").display()
    );
    assert_eq!(stderr, expected);

    put_binary(bundle.path(), here, &echo_binary());
    let (code, stdout, stderr) = dispatch(bundle.path(), None, &["a b", "c"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "a b c\n", "")
    );
    // Through a symbolic link elsewhere (e.g. in /usr/local/bin): the bundle is still found.
    let elsewhere = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let link = elsewhere.path().join("npu-scan");
    std::os::unix::fs::symlink(bundle.path().join("bin/npu-scan"), &link)
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, stdout, _) = dispatch(bundle.path(), Some(&link), &["linked"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "linked\n"));
}

#[test]
fn the_layout_has_a_bin_script_per_binary_and_no_binary() {
    let layout = layout(&crate::project_root()).unwrap_or_else(|e| panic!("{e:#}"));
    for (_, binary) in BINARIES {
        let entry = layout
            .iter()
            .find(|e| e.path == format!("bin/{binary}"))
            .unwrap_or_else(|| panic!("no bin/{binary}"));
        assert!(entry.executable);
        let From::Text(text) = &entry.from else {
            panic!("bin/{binary} is not the script")
        };
        assert!(text.starts_with("#!/bin/sh\n") && text.contains(&format!("/{binary}\"")));
    }
    assert!(
        !layout
            .iter()
            .any(|e| e.path.matches('/').count() > 1 && e.path.starts_with("bin/"))
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
            !file.contains("/tests/") && !file.starts_with("corpus/") && !file.starts_with("docs/"),
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
    write(&root.join("scripts/bundle_check.py"), BUNDLE_CHECK).unwrap_or_else(|e| panic!("{e:#}"));
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

#[test]
fn the_build_step_installs_into_the_machine_folder_and_writes_the_bin_scripts() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path();
    write(&root.join("scripts/build.py"), &build_py()).unwrap_or_else(|e| panic!("{e:#}"));
    write(&root.join("scripts/bundle_check.py"), BUNDLE_CHECK).unwrap_or_else(|e| panic!("{e:#}"));
    write(
        &root.join("source/Cargo.toml"),
        "[workspace.package]\nrust-version = \"1.95\"\n",
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    write(&root.join("source/Cargo.lock"), "").unwrap_or_else(|e| panic!("{e:#}"));
    fs::create_dir_all(root.join("source/vendor")).unwrap_or_else(|e| panic!("{e}"));
    let echo = root.join("echo");
    fs::write(&echo, echo_binary()).unwrap_or_else(|e| panic!("{e}"));
    make_executable(&echo).unwrap_or_else(|e| panic!("{e:#}"));
    let host = host_triple().unwrap_or_else(|e| panic!("{e:#}"));
    let names: Vec<&str> = BINARIES.iter().map(|(_, b)| *b).collect();
    // A cargo (and rustc) that "builds" each binary as a copy of echo into --target-dir.
    let fake = root.join("fake-cargo");
    write(
        &fake,
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n  --version) echo 'cargo 1.95.0 (abc 2026-01-01)'; exit 0 ;;\n  \
             -vV) echo 'rustc 1.95.0'; echo 'host: {host}'; exit 0 ;;\nesac\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --target-dir ] && dir=$2; shift; done\n\
             mkdir -p \"$dir/release\"\nfor b in {}; do cp {} \"$dir/release/$b\"; done\n",
            names.join(" "),
            echo.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    make_executable(&fake).unwrap_or_else(|e| panic!("{e:#}"));
    let foreign = if host_machine().1 == "aarch64" {
        "x86_64"
    } else {
        "aarch64"
    };
    put_binary(root, foreign, b"shipped for the other machine");
    let python =
        which(&std::env::var("NPU_PATCHER_PYTHON").unwrap_or_else(|_| "python3".to_owned()));
    let out = std::process::Command::new(&python)
        .arg(root.join("scripts/build.py"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", root)
        .env("CARGO", &fake)
        .env("RUSTC", &fake)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let here = root.join("bin").join(host_machine().1);
    for name in &names {
        assert!(
            here.join(name).is_file(),
            "no bin/{}/{name}",
            host_machine().1
        );
        let script = fs::read_to_string(root.join("bin").join(name)).unwrap_or_default();
        assert_eq!(script, dispatcher(name), "bin/{name}");
    }
    assert_eq!(
        fs::read_to_string(here.join("TARGET.txt")).unwrap_or_default(),
        format!("{host}\n")
    );
    assert_eq!(
        fs::read(root.join("bin").join(foreign).join("npu-scan")).unwrap_or_default(),
        b"shipped for the other machine"
    );
    let run = std::process::Command::new(root.join("bin/npu-scan"))
        .arg("rebuilt")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&run.stdout), "rebuilt\n");
}
