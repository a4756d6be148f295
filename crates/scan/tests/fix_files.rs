//! `--fix` and `--diff` on the files of real projects: the `P_ENT` prerequisite, symbolic and hard
//! links, paths outside the scanned root, every line ending and encoding, and diffs that `git
//! apply` and `patch -p1` turn into exactly what `--fix` writes.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// An entry file with three fixes (`P_ENT`, `P_DEV`, `P_F64`), in `\n` lines.
const ENTRY: &str = "import torch


def run(x):
    if x.device.type == \"cuda\":
        x = x.double()
    return x + 1


if __name__ == \"__main__\":
    run(torch.ones(3).cuda())
";

/// A module with two fixes (`P_DEV`, `P_F64`) and no entry point.
const MODULE: &str = "import torch


def step(x):
    if x.device.type == \"cuda\":
        x = x.double()
    return x
";

fn npu_scan() -> Command {
    Command::cargo_bin("npu-scan").unwrap()
}

/// `npu-scan ROOT ARGS --no-progress --no-write`: (exit code, stdout bytes, stderr).
fn scan(root: &Path, args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = npu_scan()
        .arg(root)
        .args(args)
        .args(["--no-progress", "--no-write"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// What `npu-assets init` puts into a project for the `P_ENT` fix.
fn init_assets(root: &Path) {
    let from = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../assets/runtime_patches.py");
    let to = root.join("migrate_to_cloudrobo/runtime_patches.py");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn without_runtime_patches_no_setup_is_inserted_and_one_line_says_to_init() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    write(&root.join("train.py"), ENTRY);
    write(&root.join("eval.py"), ENTRY);
    let (code, stdout, stderr) = scan(&root, &["--fix", "--unsafe-fixes"]);
    let stdout = text(&stdout);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let needed = root.join("migrate_to_cloudrobo/runtime_patches.py");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("npu-assets init"))
        .collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(
        lines[0].contains(&needed.display().to_string())
            && lines[0].contains(&format!("`npu-assets init {}`", root.display()))
            && lines[0].contains("2 P_ENT fixes (eval.py, train.py)"),
        "{}",
        lines[0]
    );
    // The other fixes were applied; the setup was not.
    for name in ["train.py", "eval.py"] {
        let fixed = text(&read(&root.join(name)));
        assert!(fixed.contains("in (\"cuda\", \"npu\")"), "{fixed}");
        assert!(!fixed.contains("build_vla_patcher"), "{fixed}");
    }
    assert!(
        stdout.contains("Applied 4 fixes in 2 files (P_DEV 2, P_F64 2)."),
        "{stdout}"
    );

    // --diff says the same and shows no setup.
    let (_, diff, stderr) = scan(&root, &["--diff"]);
    assert!(!text(&diff).contains("build_vla_patcher"));
    assert!(stderr.contains("npu-assets init"), "{stderr}");

    // After init, the setup goes in.
    init_assets(&root);
    let (_, stdout, _) = scan(&root, &["--fix"]);
    let stdout = text(&stdout);
    assert!(!stdout.contains("npu-assets init"), "{stdout}");
    assert!(text(&read(&root.join("train.py"))).contains("_NPU_PATCHER.apply()"));
}

#[test]
fn a_single_file_looks_for_the_runtime_patches_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("train.py");
    write(&file, ENTRY);
    let (_, stdout, _) = scan(&file, &["--fix"]);
    assert!(
        text(&stdout).contains(&format!("`npu-assets init {}`", dir.path().display())),
        "{}",
        text(&stdout)
    );
    assert!(!text(&read(&file)).contains("build_vla_patcher"));
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_is_never_replaced_and_nothing_outside_the_root_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    let outside = dir.path().join("outside");
    write(&root.join("real.py"), MODULE);
    std::os::unix::fs::symlink("real.py", root.join("link.py")).unwrap();
    write(&outside.join("shared.py"), MODULE);
    write(&outside.join("linked_file.py"), MODULE);
    std::os::unix::fs::symlink(&outside, root.join("vendor")).unwrap();
    std::os::unix::fs::symlink(outside.join("linked_file.py"), root.join("far.py")).unwrap();

    let (code, stdout, stderr) = scan(&root, &["--fix", "--unsafe-fixes"]);
    let stdout = text(&stdout);
    assert_eq!(code, 1, "{stdout}{stderr}");
    // The regular file is fixed; the links are links still, and what is outside is untouched.
    assert!(text(&read(&root.join("real.py"))).contains("in (\"cuda\", \"npu\")"));
    for link in ["link.py", "far.py", "vendor"] {
        let meta = std::fs::symlink_metadata(root.join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} was replaced");
    }
    assert_eq!(read(&outside.join("shared.py")), MODULE.as_bytes());
    assert_eq!(read(&outside.join("linked_file.py")), MODULE.as_bytes());
    assert!(
        stdout.contains("link.py:5 P_DEV: it is a symbolic link to real.py"),
        "{stdout}"
    );
    assert!(
        stdout.contains("far.py:5 P_DEV: it is a symbolic link"),
        "{stdout}"
    );
    let outside_real = std::fs::canonicalize(&outside).unwrap();
    assert!(
        stdout.contains(&format!(
            "vendor/shared.py:5 P_DEV: it resolves to {}, outside the scanned root",
            outside_real.join("shared.py").display()
        )),
        "{stdout}"
    );
    // --diff shows no change to any of them either.
    let (_, diff, _) = scan(&root, &["--diff", "--unsafe-fixes"]);
    let diff = text(&diff);
    assert!(
        !diff.contains("link.py") && !diff.contains("vendor/") && !diff.contains("far.py"),
        "{diff}"
    );
}

#[cfg(unix)]
#[test]
fn a_hard_linked_file_is_left_with_its_links() {
    use std::os::unix::fs::MetadataExt as _;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    write(&root.join("a.py"), MODULE);
    std::fs::hard_link(root.join("a.py"), dir.path().join("backup.py")).unwrap();
    let (_, stdout, _) = scan(&root, &["--fix", "--unsafe-fixes"]);
    let stdout = text(&stdout);
    assert!(
        stdout.contains("a.py:5 P_DEV: it has 2 hard links"),
        "{stdout}"
    );
    let a = std::fs::metadata(root.join("a.py")).unwrap();
    let b = std::fs::metadata(dir.path().join("backup.py")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(read(&root.join("a.py")), MODULE.as_bytes());
}

/// The entry file in each line ending and encoding: (name, bytes).
fn variants() -> Vec<(&'static str, Vec<u8>)> {
    let lf = ENTRY.as_bytes().to_vec();
    let crlf = ENTRY.replace('\n', "\r\n").into_bytes();
    let cr = ENTRY.replace('\n', "\r").into_bytes();
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend_from_slice(&crlf);
    let mut latin = b"# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me\n".to_vec();
    latin.extend_from_slice(ENTRY.as_bytes());
    let mixed = b"import torch\r\n\n\ndef run(x):\r\n    if x.device.type == \"cuda\":\r        x = x.double()\n    return x + 1\n\n\nif __name__ == \"__main__\":\r    run(torch.ones(3).cuda())\r\n".to_vec();
    let no_final_newline = ENTRY.trim_end().as_bytes().to_vec();
    vec![
        ("lf.py", lf),
        ("crlf.py", crlf),
        ("cr.py", cr),
        ("bom.py", bom),
        ("latin.py", latin),
        ("mixed.py", mixed),
        ("no_final_newline.py", no_final_newline),
    ]
}

/// A project holding every variant, as its own entry file.
fn variant_project(dir: &Path, name: &str) -> PathBuf {
    let root = dir.join(name);
    for (file, bytes) in variants() {
        write(&root.join("sub").join(file), bytes);
    }
    init_assets(&root);
    root
}

fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    variants()
        .into_iter()
        .map(|(file, _)| (file.to_owned(), read(&root.join("sub").join(file))))
        .collect()
}

#[test]
fn line_endings_and_encodings_are_kept_by_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = variant_project(dir.path(), "fixed");
    let (code, stdout, stderr) = scan(&root, &["--fix", "--unsafe-fixes"]);
    assert_eq!(code, 0, "{}{stderr}", text(&stdout));
    for (file, bytes) in tree(&root) {
        let shown = text(&bytes);
        assert!(shown.contains("_NPU_PATCHER.apply()"), "{file}: {shown:?}");
        match file.as_str() {
            "cr.py" => assert!(!bytes.contains(&b'\n'), "{file}: {shown:?}"),
            "crlf.py" | "bom.py" => {
                assert_eq!(
                    shown.matches('\n').count(),
                    shown.matches("\r\n").count(),
                    "{file}: {shown:?}"
                );
                assert_eq!(bytes.starts_with(b"\xef\xbb\xbf"), file == "bom.py");
            }
            "latin.py" => assert!(bytes.windows(2).any(|w| w == b"f\xe9"), "{shown:?}"),
            "mixed.py" => {
                assert!(shown.contains("try:\r\n"), "{shown:?}");
                assert!(
                    shown.contains("\"npu\"):\r        x = x.float()\n"),
                    "{shown:?}"
                );
            }
            _ => assert!(!bytes.contains(&b'\r'), "{file}: {shown:?}"),
        }
    }
}

/// Apply `patch` in a fresh copy of the variants with `tool` and return the files.
fn apply_with(dir: &Path, name: &str, tool: &[&str], patch: &[u8]) -> Vec<(String, Vec<u8>)> {
    let root = variant_project(dir, name);
    let patch_file = dir.join(format!("{name}.patch"));
    std::fs::write(&patch_file, patch).unwrap();
    let out = std::process::Command::new(tool[0])
        .args(&tool[1..])
        .arg(&patch_file)
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    tree(&root)
}

#[test]
fn the_diff_is_bytes_that_git_apply_and_patch_turn_into_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let shown = variant_project(dir.path(), "shown");
    let (code, diff, stderr) = scan(&shown, &["--diff", "--unsafe-fixes"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(tree(&shown), tree(&variant_project(dir.path(), "pristine")));
    assert!(diff.starts_with(b"--- a/sub/"), "{}", text(&diff));
    // Each variant's bytes are in the diff as they are in its file.
    assert!(
        diff.windows(4).any(|w| w == b"caf\xe9"),
        "latin-1 re-encoded"
    );
    assert!(
        diff.windows(4).any(|w| w == b"\xef\xbb\xbfi"),
        "BOM dropped"
    );

    let fixed = variant_project(dir.path(), "fixed");
    let (_, applied_and_shown, _) = scan(&fixed, &["--fix", "--diff", "--unsafe-fixes"]);
    let expected = tree(&fixed);
    assert_eq!(
        applied_and_shown, diff,
        "--fix --diff shows what --diff shows"
    );

    let by_git = apply_with(
        dir.path(),
        "git",
        &["git", "apply", "-p1", "--whitespace=nowarn"],
        &diff,
    );
    assert_eq!(by_git, expected, "git apply differs from --fix");
    let by_patch = apply_with(dir.path(), "patch", &["patch", "-p1", "-s", "-i"], &diff);
    assert_eq!(by_patch, expected, "patch -p1 differs from --fix");
}

#[test]
fn fix_diff_prints_the_diff_on_stdout_and_the_summary_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    write(&root.join("lib.py"), MODULE);
    let out_dir = dir.path().join("out");
    let out = npu_scan()
        .arg(&root)
        .args([
            "--fix",
            "--diff",
            "--unsafe-fixes",
            "--no-progress",
            "--output",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("--- a/lib.py\n+++ b/lib.py\n@@ "),
        "{stdout}"
    );
    assert!(!stdout.contains("Applied"), "{stdout}");
    assert!(stderr.contains("Applied 2 fixes in 1 file"), "{stderr}");
    assert!(text(&read(&root.join("lib.py"))).contains("x.float()"));
    let issues = issue_model::load(&out_dir.join("issues.json")).unwrap();
    assert!(
        issues
            .issues
            .iter()
            .all(|i| i.status == issue_model::Status::Fixed),
        "{:?}",
        issues.issues
    );
}
