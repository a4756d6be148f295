//! Tests of the step graph.

use super::*;

fn graph(files: &[(&str, &str)]) -> StepGraph {
    StepGraph::build(files.iter().copied())
}

#[test]
fn calls_from_forward_reach_helpers_in_other_files() {
    let g = graph(&[
        (
            "pkg/model.py",
            "from .rope import apply_rope\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return self._mix(x)\n\n    def _mix(self, x):\n        return apply_rope(x)\n\n    def generate(self, x):\n        return decode(x)\n",
        ),
        (
            "pkg/rope.py",
            "def apply_rope(x):\n    return inner(x)\n\ndef inner(x):\n    return x\n\ndef decode(x):\n    return x\n",
        ),
    ]);
    assert!(g.reaches("pkg.model", "Net.forward"));
    assert!(g.reaches("pkg.model", "Net._mix"));
    assert!(g.reaches("pkg.rope", "apply_rope"));
    assert!(g.reaches("pkg.rope", "inner"));
    // Only inference calls `decode`: no step reaches it.
    assert!(!g.reaches("pkg.model", "Net.generate"));
    assert!(!g.reaches("pkg.rope", "decode"));
}

#[test]
fn a_script_loop_over_a_loader_with_backward_is_a_root() {
    let g = graph(&[(
        "train.py",
        "def main():\n    model = build()\n    for batch in train_loader:\n        loss = metric(batch)\n        loss.backward()\n\ndef metric(b):\n    return b\n\ndef build():\n    return 1\n\ndef evaluate():\n    for batch in val_loader:\n        metric(batch)\n",
    )]);
    assert!(g.runs_training_loop("", "main") || g.runs_training_loop("train", "main"));
    assert!(g.reaches("train", "metric"));
    // A setup function is not step code, and an evaluation loop without backward is no root.
    assert!(!g.reaches("train", "build"));
    assert!(!g.runs_training_loop("train", "evaluate"));
}

#[test]
fn self_calls_follow_project_bases_and_strings_are_not_calls() {
    let g = graph(&[
        (
            "a.py",
            "class Base:\n    def training_step(self, b):\n        \"\"\"calls fake(x)\n        more\"\"\"\n        return self.compute(b)  # other(b)\n",
        ),
        (
            "b.py",
            "class Child(Base):\n    def compute(self, b):\n        return b\n\ndef fake(x):\n    return x\n\ndef other(x):\n    return x\n",
        ),
    ]);
    assert!(g.reaches("b", "Child.compute"));
    assert!(!g.reaches("b", "fake"));
    assert!(!g.reaches("b", "other"));
}

/// A parenthesised import over several lines (as hiveformer's and many training scripts'
/// headers are written) closes its bracket: the definitions after it are still read.
#[test]
fn a_multi_line_import_does_not_hide_the_definitions_after_it() {
    let g = graph(&[(
        "train.py",
        "from data.sets import (\n    Episodes, collate,\n)\nfrom models import (Net,\n    Head)\n\ndef main(cfg):\n    for step, batch in enumerate(data_loader):\n        loss = model(batch)\n        loss.backward()\n",
    )]);
    assert!(g.runs_training_loop("train", "main"));
}

/// `alias.func(...)` of a module imported under an alias (`import pkg.utils.pc as pc_utils`,
/// `from pkg.utils import pc`) reaches that module's function; the same call on an object
/// that is no imported module does not.
#[test]
fn calls_through_a_module_alias_reach_its_functions() {
    let g = graph(&[
        (
            "pkg/agent.py",
            "import pkg.utils.pc as pc_utils\nfrom pkg.utils import grid\n\nclass Agent:\n    def update(self, batch):\n        pc = pc_utils.crop(batch)\n        helper.crop_all(pc)\n        return grid.voxelize(pc)\n",
        ),
        (
            "pkg/utils/pc.py",
            "def crop(x):\n    return x\n\ndef crop_all(x):\n    return x\n",
        ),
        ("pkg/utils/grid.py", "def voxelize(x):\n    return x\n"),
    ]);
    assert!(g.reaches("pkg.utils.pc", "crop"));
    assert!(g.reaches("pkg.utils.grid", "voxelize"));
    assert!(!g.reaches("pkg.utils.pc", "crop_all"));
}

/// `import augmentations` (and `import a, b as c`) binds a module name: a call through it
/// reaches the module's function; a dotted `import pkg.aug` binds only `pkg`.
#[test]
fn a_plain_module_import_resolves_calls_through_the_module_name() {
    let g = graph(&[
        (
            "src/algorithms/agent.py",
            "import torch, augmentations\nimport pkg.noise\n\nclass Agent:\n    def update(self, obs):\n        obs = augmentations.random_conv(obs)\n        return noise.jitter(obs)\n",
        ),
        (
            "src/augmentations.py",
            "def random_conv(x):\n    return x\n\ndef unused(x):\n    return x\n",
        ),
        ("src/pkg/noise.py", "def jitter(x):\n    return x\n"),
    ]);
    assert!(g.reaches("src.augmentations", "random_conv"));
    assert!(!g.reaches("src.augmentations", "unused"));
    assert!(!g.reaches("src.pkg.noise", "jitter"));
}

#[test]
fn a_method_is_a_round_trip_only_when_every_definition_of_its_name_is_one() {
    let g = graph(&[
        (
            "norm.py",
            "class Scale:\n    def restore(self, x):\n        x = torch.from_numpy(x).to(self.device)\n        out = x * self.std\n        out = out.cpu().numpy()\n        return out\n\n    def direct(self, x):\n        return (x.to(self.device) * 2).cpu().numpy()\n\n    def keep(self, x):\n        return x.to(self.device) * 2\n\n    def pull(self, x):\n        return x.cpu().numpy()\n",
        ),
        (
            "other.py",
            "class Other:\n    def direct(self, x):\n        return x * 2\n",
        ),
    ]);
    assert_eq!(g.round_trip("restore"), Some("norm.Scale.restore"));
    // Another `direct` of the project keeps its result: a call by name cannot tell which runs.
    assert_eq!(g.round_trip("direct"), None);
    // A result kept on the device, and a pull without an upload, are no round trips.
    assert_eq!(g.round_trip("keep"), None);
    assert_eq!(g.round_trip("pull"), None);
}
