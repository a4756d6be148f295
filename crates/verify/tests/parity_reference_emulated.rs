//! `--parity` with another reference: the project at a git revision (`--reference-rev`), or the
//! CUDA GPU (`--reference-device cuda`, which cannot be aligned on a machine without one).
//!
//! Needs `NPU_PATCHER_PYTHON` (set by `cargo xtask test`; `cargo xtask venv` prints the path).

mod common;

use common::{check, git, parity, set_up_migrate};
use std::path::{Path, PathBuf};

fn project(dir: &Path) -> PathBuf {
    let root = dir.join("policy");
    std::fs::create_dir_all(&root).unwrap();
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity/train.py");
    std::fs::copy(program, root.join("train.py")).unwrap();
    set_up_migrate(&root);
    root
}

#[test]
fn the_reference_can_be_the_program_before_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "before the port"]);
    // A change on every device: the working tree against itself matches, against the commit
    // before it does not.
    let text = std::fs::read_to_string(root.join("train.py")).unwrap();
    let edited = text.replace(
        "        return self.net(h)\n",
        "        return self.net(h) * 1.5\n",
    );
    assert_ne!(edited, text);
    std::fs::write(root.join("train.py"), &edited).unwrap();

    let (code, report, stderr) = parity(&root, &["--why-runs", "0"], &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");

    let (code, report, stderr) =
        parity(&root, &["--reference-rev", "HEAD", "--why-runs", "1"], &[]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.reference_rev")["status"], "pass");
    assert_eq!(
        check(&report, "parity.modules")["data"]["first_divergence"]["module"],
        "Policy.head",
        "{report:#}"
    );
    // Reverting the change is what brings the port back to the revision.
    let why = check(&report, "parity.why");
    assert_eq!(why["data"]["cause"]["kind"], "hunk", "{why:#}");

    let (code, report, stderr) = parity(&root, &["--reference-rev", "no-such-rev"], &[]);
    assert_eq!(code, Some(2), "{report:#}\n{stderr}");
    assert!(
        check(&report, "parity.align")["detail"]
            .as_str()
            .unwrap()
            .contains("`no-such-rev` is not a commit"),
        "{report:#}"
    );
}

#[test]
fn a_cuda_reference_without_a_cuda_gpu_cannot_be_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let root = project(dir.path());
    let (code, report, stderr) = parity(&root, &["--reference-device", "cuda"], &[]);
    assert_eq!(code, Some(2), "{report:#}\n{stderr}");
    let align = check(&report, "parity.align");
    assert!(
        align["detail"]
            .as_str()
            .unwrap()
            .contains("--reference-device cuda: torch sees no CUDA GPU"),
        "{align:#}"
    );
    assert!(report["incomplete"].as_bool().unwrap());
}
