//! `scan::entry_points`: entry points, whether their program uses torch and sets up the NPU,
//! and how they take their config.

use scan::EntryKind;
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn finds_entry_points_and_their_programs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "src/mypkg/__init__.py", "");
    write(
        root,
        "src/mypkg/model.py",
        "import torch\nclass Policy(torch.nn.Module):\n    pass\n",
    );
    write(
        root,
        "src/mypkg/npu_setup.py",
        "import torch_npu\nfrom torch_npu.contrib import transfer_to_npu\n",
    );
    write(
        root,
        "train.py",
        "import hydra\nfrom mypkg.model import Policy\n\n\
         @hydra.main(config_path=\"conf\", config_name=\"train\", version_base=None)\n\
         def main(cfg):\n    Policy()\n\n\
         if __name__ == \"__main__\":\n    main()\n",
    );
    write(
        root,
        "scripts/eval.py",
        "import argparse\nimport mypkg.npu_setup\nimport torch\n\n\
         def run():\n    p = argparse.ArgumentParser()\n    p.add_argument(\"--config\", required=True)\n\n\
         if __name__ == '__main__':\n    run()\n",
    );
    write(
        root,
        "tools/export.py",
        "import fire\nimport numpy as np\n\ndef main(path):\n    return np.load(path)\n\nfire.Fire(main)\n",
    );
    write(
        root,
        "deploy.py",
        "import torch\nfrom migrate_to_cloudrobo.runtime_patches import build_vla_patcher\n\n\
         if __name__ == \"__main__\":\n    patcher = build_vla_patcher()\n    patcher.apply()\n",
    );
    let entries = scan::entry_points(root).unwrap();
    let files: Vec<&str> = entries.iter().map(|e| e.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "deploy.py",
            "scripts/eval.py",
            "tools/export.py",
            "train.py"
        ]
    );

    let deploy = &entries[0];
    assert_eq!(deploy.kind, EntryKind::MainGuard);
    assert!(deploy.uses_torch && deploy.sets_up_npu && deploy.sets_up_npu_here);

    let eval = &entries[1];
    assert_eq!((eval.line, eval.column), (9, 1));
    assert_eq!(eval.function.as_deref(), Some("run"));
    assert!(eval.uses_torch);
    assert!(eval.sets_up_npu, "through mypkg.npu_setup");
    assert!(!eval.sets_up_npu_here);
    assert_eq!(eval.config.flags, ["--config"]);

    let export = &entries[2];
    assert_eq!(export.kind, EntryKind::Fire);
    assert_eq!(export.function.as_deref(), Some("main"));
    assert!(!export.uses_torch);

    let train = &entries[3];
    assert_eq!(train.kind, EntryKind::Hydra);
    assert_eq!(train.kinds, [EntryKind::MainGuard, EntryKind::Hydra]);
    assert_eq!(train.line, 8, "anchored at the main guard");
    assert_eq!(train.function.as_deref(), Some("main"));
    assert!(train.uses_torch, "through src/mypkg/model.py");
    assert!(!train.sets_up_npu);
    assert_eq!(train.config.hydra_config_path.as_deref(), Some("conf"));
    assert_eq!(train.config.hydra_config_name.as_deref(), Some("train"));
}
