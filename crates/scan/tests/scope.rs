//! `npu-scan --scope`: the training path of one launch command in a project of two policies
//! (`tests/projects/multi_policy`: `train.py` builds the policy its config names through a
//! factory's `if`/`elif` chain of lazy imports; a test and an example use the other policy).
//! The scope follows the policy the launch selects, is kept in issues.json across rescans, and
//! takes in the files a recorded verify run executed.

use assert_cmd::Command;
use issue_model::Status;
use std::collections::BTreeMap;
use std::path::Path;

const ACT: &str = "robolearn/policies/act.py";
const DIFFUSION: &str = "robolearn/policies/diffusion.py";
const TEST: &str = "tests/test_diffusion.py";
const EXAMPLE: &str = "examples/sample_diffusion.py";

/// A copy of the multi-policy project in a temp dir.
fn project() -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projects/multi_policy");
    let dir = tempfile::tempdir().unwrap();
    copy(&from, dir.path());
    dir
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `npu-scan . --output . --select P_DEV,P_VEC EXTRA…` in `root`.
fn scan(root: &Path, extra: &[&str]) -> std::process::Output {
    Command::cargo_bin("npu-scan")
        .unwrap()
        .current_dir(root)
        .args([".", "--output", ".", "--select", "P_DEV,P_VEC"])
        .args(extra)
        .output()
        .unwrap()
}

fn load(root: &Path) -> issue_model::IssuesFile {
    issue_model::load(&root.join("issues.json")).unwrap()
}

/// Each finding's file → the statuses and reasons of its issues.
fn by_file(root: &Path) -> BTreeMap<String, Vec<(Status, Option<String>)>> {
    let mut out: BTreeMap<String, Vec<(Status, Option<String>)>> = BTreeMap::new();
    for i in load(root).issues {
        out.entry(i.file).or_default().push((i.status, i.reason));
    }
    out
}

fn statuses(root: &Path, file: &str) -> Vec<Status> {
    by_file(root)[file].iter().map(|(s, _)| *s).collect()
}

#[test]
fn the_policy_a_launch_leaves_policy_b_out_of_scope_never_pending_never_fixed() {
    let dir = project();
    let root = dir.path();
    let launch = "python train.py --config configs/act.yaml";
    let out = scan(root, &["--scope", launch]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let why = format!("out of scope: not reached by `{launch}` (entry train.py)");
    let found = by_file(root);
    assert_eq!(found[ACT], [(Status::Pending, None)]);
    // Policy B (a P_VEC performance finding and a P_DEV one), its test and its example.
    assert_eq!(found[DIFFUSION].len(), 2, "{found:?}");
    for file in [DIFFUSION, TEST, EXAMPLE] {
        for (status, reason) in &found[file] {
            assert_eq!(
                (*status, reason.as_deref()),
                (Status::OutOfScope, Some(why.as_str())),
                "{file}"
            );
        }
    }
    let file = load(root);
    let scope = file.scope.expect("issues.json records the scope");
    assert_eq!(scope.launch, launch);
    assert_eq!(scope.entry, "train.py");
    assert!(scope.files.contains(&ACT.to_owned()), "{scope:?}");
    assert!(!scope.files.contains(&DIFFUSION.to_owned()), "{scope:?}");
    assert!(scope.notes.is_empty(), "{scope:?}");
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(
        summary.contains(&format!("Scope: `{launch}` (entry train.py)")),
        "{summary}"
    );

    // --fix (the same scope, kept in issues.json) leaves policy B, the test and the example as
    // they are, and none of their issues is called fixed.
    let before: Vec<Vec<u8>> = [DIFFUSION, TEST, EXAMPLE]
        .iter()
        .map(|f| std::fs::read(root.join(f)).unwrap())
        .collect();
    let out = scan(root, &["--fix"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for (file, bytes) in [DIFFUSION, TEST, EXAMPLE].iter().zip(&before) {
        assert_eq!(&std::fs::read(root.join(file)).unwrap(), bytes, "{file}");
    }
    assert_eq!(statuses(root, ACT), [Status::Fixed]);
    for file in [DIFFUSION, TEST, EXAMPLE] {
        assert!(
            statuses(root, file)
                .iter()
                .all(|s| *s == Status::OutOfScope),
            "{file}"
        );
    }
}

#[test]
fn the_argparse_default_config_selects_the_policy_and_the_scope_survives_rescans() {
    let dir = project();
    let root = dir.path();
    // No --config: train.py's default, configs/act.yaml, names the policy.
    let out = scan(root, &["--scope", "python train.py"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    assert_eq!(statuses(root, ACT), [Status::Pending]);

    // A rescan without --scope keeps it.
    let out = scan(root, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    assert_eq!(
        load(root).scope.map(|s| s.launch).as_deref(),
        Some("python train.py")
    );

    // Another config selects the other policy: its findings are pending again, A's are out.
    let out = scan(
        root,
        &["--scope", "python train.py --config configs/diffusion.yaml"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    assert_eq!(statuses(root, ACT), [Status::OutOfScope]);
    let history = load(root)
        .issues
        .into_iter()
        .find(|i| i.file == DIFFUSION)
        .unwrap()
        .history;
    assert_eq!(
        history.last().map(|h| h.status),
        Some(issue_model::HistoryStatus::Reopened)
    );

    // `--scope none` drops it: everything is pending, and issues.json records no scope.
    let out = scan(root, &["--scope", "none"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    for file in [ACT, DIFFUSION, TEST, EXAMPLE] {
        assert!(
            statuses(root, file).iter().all(|s| *s == Status::Pending),
            "{file}"
        );
    }
    assert_eq!(load(root).scope, None);
}

#[test]
fn a_choice_the_launch_does_not_make_keeps_every_candidate_and_says_so() {
    let dir = project();
    let root = dir.path();
    write(root, "configs/vq.yaml", "policy:\n  type: vq\n");
    let out = scan(
        root,
        &["--scope", "python train.py --config configs/vq.yaml"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(statuses(root, ACT), [Status::Pending]);
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    let scope = load(root).scope.unwrap();
    assert_eq!(scope.notes.len(), 1, "{scope:?}");
    assert!(
        scope.notes[0]
            .starts_with("robolearn/factory.py:5: the choice among \"act\", \"diffusion\""),
        "{scope:?}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("every candidate is kept"), "{stdout}");
}

#[test]
fn files_a_verify_run_executed_are_in_scope() {
    let dir = project();
    let root = dir.path();
    let launch = "python train.py --config configs/act.yaml";
    // A run of another entry says nothing about this one.
    write(
        root,
        "migrate_to_cloudrobo/executed-files.json",
        "{\"command\": [\"python\", \"examples/sample_diffusion.py\"], \"entry\": \"examples/sample_diffusion.py\", \"files\": [\"robolearn/policies/diffusion.py\"]}\n",
    );
    scan(root, &["--scope", launch]);
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    // Nor does a run of the same entry that takes another path (the other policy's config).
    write(
        root,
        "migrate_to_cloudrobo/executed-files.json",
        "{\"command\": [\"python\", \"train.py\", \"--config\", \"configs/diffusion.yaml\"], \"entry\": \"train.py\", \"files\": [\"robolearn/policies/diffusion.py\", \"train.py\"]}\n",
    );
    scan(root, &[]);
    assert_eq!(statuses(root, DIFFUSION), [Status::OutOfScope; 2]);
    let scope = load(root).scope.unwrap();
    assert!(scope.executed.is_empty(), "{scope:?}");
    assert!(
        scope.notes.iter().any(|n| n.starts_with(
            "the recorded verify run (`python train.py --config configs/diffusion.yaml`) takes another path (robolearn/policies/diffusion.py"
        )),
        "{scope:?}"
    );
    // The run of train.py (with a flag that selects no other file) imported policy B: a
    // plugin the static reach cannot see.
    write(
        root,
        "migrate_to_cloudrobo/executed-files.json",
        "{\"command\": [\"python\", \"train.py\", \"--device\", \"npu\"], \"entry\": \"train.py\", \"files\": [\"robolearn/factory.py\", \"robolearn/policies/diffusion.py\", \"train.py\", \"not/in/the/project.py\"]}\n",
    );
    let out = scan(root, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(statuses(root, DIFFUSION), [Status::Pending; 2]);
    assert_eq!(statuses(root, TEST), [Status::OutOfScope]);
    let scope = load(root).scope.unwrap();
    assert_eq!(
        scope.executed,
        [
            "robolearn/factory.py",
            "robolearn/policies/diffusion.py",
            "train.py"
        ]
    );
}

#[test]
fn registries_dynamic_imports_and_hydra_targets_follow_the_selection() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let loop_ = "import torch\n\n\ndef forward(x):\n    out = []\n    for i in range(x.shape[0]):\n        out.append(x[i] * 2)\n    return torch.stack(out)\n";
    for name in [
        "reg_a",
        "reg_b",
        "dyn_alpha",
        "dyn_beta",
        "hy_a",
        "hy_b",
        "hydra_a",
        "hydra_b",
    ] {
        write(root, &format!("pkg/{name}.py"), loop_);
    }
    write(root, "pkg/__init__.py", "");
    // A dict registry of classes imported for it alone, and one of dotted paths.
    write(
        root,
        "pkg/registry.py",
        "from pkg.reg_a import forward as fa\nfrom pkg.reg_b import forward as fb\n\nPOLICIES = {\"alpha\": fa, \"beta\": fb}\nPATHS = {\"alpha\": \"pkg.hy_a.forward\", \"beta\": \"pkg.hy_b.forward\"}\n",
    );
    write(
        root,
        "pkg/loader.py",
        "import importlib\n\n\ndef load(name):\n    return importlib.import_module(f\"pkg.dyn_{name}\")\n",
    );
    write(
        root,
        "run.py",
        "import argparse\nfrom pkg.registry import POLICIES\nfrom pkg.loader import load\n\nif __name__ == \"__main__\":\n    p = argparse.ArgumentParser()\n    p.add_argument(\"--policy\", default=\"beta\")\n    a = p.parse_args()\n    POLICIES[a.policy]\n    load(a.policy)\n",
    );
    let out = Command::cargo_bin("npu-scan")
        .unwrap()
        .current_dir(root)
        .args([".", "--output", ".", "--select", "P_VEC", "--scope"])
        .arg("python run.py --policy alpha")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let found = by_file(root);
    for (file, status) in [
        ("pkg/reg_a.py", Status::Pending),
        ("pkg/reg_b.py", Status::OutOfScope),
        ("pkg/dyn_alpha.py", Status::Pending),
        ("pkg/dyn_beta.py", Status::OutOfScope),
        ("pkg/hy_a.py", Status::Pending),
        ("pkg/hy_b.py", Status::OutOfScope),
    ] {
        assert_eq!(found[file][0].0, status, "{file}: {found:?}");
    }

    // A hydra entry: the `_target_` of the config group option the defaults list (or an
    // override) picks.
    write(
        root,
        "train_hydra.py",
        "import hydra\nfrom hydra.utils import instantiate\n\n\n@hydra.main(config_path=\"conf\", config_name=\"train\")\ndef main(cfg):\n    instantiate(cfg.policy)\n\n\nif __name__ == \"__main__\":\n    main()\n",
    );
    write(
        root,
        "conf/train.yaml",
        "defaults:\n  - policy: a\n  - _self_\nsteps: 2\n",
    );
    write(
        root,
        "conf/policy/a.yaml",
        "_target_: pkg.hydra_a.forward\n",
    );
    write(
        root,
        "conf/policy/b.yaml",
        "_target_: pkg.hydra_b.forward\n",
    );
    let scope = |launch: &str| {
        let out = Command::cargo_bin("npu-scan")
            .unwrap()
            .current_dir(root)
            .args([".", "--output", ".", "--select", "P_VEC", "--scope", launch])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        load(root).scope.unwrap().files
    };
    let files = scope("python train_hydra.py");
    assert!(files.contains(&"pkg/hydra_a.py".to_owned()), "{files:?}");
    assert!(!files.contains(&"pkg/hydra_b.py".to_owned()), "{files:?}");
    let files = scope("python train_hydra.py policy=b");
    assert!(files.contains(&"pkg/hydra_b.py".to_owned()), "{files:?}");
    assert!(!files.contains(&"pkg/hydra_a.py".to_owned()), "{files:?}");
}

#[test]
fn a_kept_scope_whose_entry_is_gone_says_where_it_comes_from() {
    let dir = project();
    let root = dir.path();
    scan(root, &["--scope", "python train.py"]);
    std::fs::remove_file(root.join("train.py")).unwrap();
    let out = scan(root, &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("is the one ./issues.json keeps")
            && stderr.contains("drop it with --scope none"),
        "{stderr}"
    );
    let out = scan(root, &["--scope", "none"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
