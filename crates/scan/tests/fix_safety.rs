//! Which fixes each rule offers and how safe they are: a fix is safe only when the code keeps
//! its behaviour on CPU and CUDA and the fixed program runs on an NPU stack. Each test scans a
//! small project and reads the applicability of the fixes attached to its issues.

use issue_model::Applicability;
use std::path::Path;

/// One issue as these tests read it.
#[derive(Debug)]
struct Found {
    file: String,
    line: u32,
    /// The applicability of its fix; `None`: no fix.
    fix: Option<Applicability>,
    fix_message: String,
    message: String,
}

/// Every issue of `rule` in the project made of `files`.
fn fixes(rule: &str, files: &[(&str, &str)]) -> Vec<Found> {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    scan_fixes(dir.path(), rule)
}

fn scan_fixes(root: &Path, rule: &str) -> Vec<Found> {
    let settings = scan::Settings {
        select: vec![rule.to_owned()],
        threads: 1,
        ..scan::Settings::default()
    };
    let result = scan::scan(root, &settings).unwrap();
    result
        .issues
        .iter()
        .map(|i| Found {
            file: i.file.clone(),
            line: i.line,
            fix: i.fix.as_ref().map(|f| f.applicability),
            fix_message: i
                .fix
                .as_ref()
                .map(|f| f.message.clone())
                .unwrap_or_default(),
            message: i.message.clone(),
        })
        .collect()
}

/// The issue on `line`.
fn on_line(found: &[Found], line: u32) -> &Found {
    found
        .iter()
        .find(|f| f.line == line)
        .unwrap_or_else(|| panic!("no issue on line {line}: {found:#?}"))
}

#[test]
fn config_rewrites_are_unsafe_because_cuda_runs_read_the_same_config() {
    let config = [(
        "conf/train.yaml",
        "device: \"cuda:0\"\npolicy_device: cuda\ndist_backend: nccl\nattn_implementation: flash_attention_2\n",
    )];
    let mut found = fixes("P_CFG", &config);
    assert_eq!(found.len(), 3, "{found:?}");
    // The flash-attention value is P_FLA's, with the same unsafe rewrite.
    found.extend(fixes("P_FLA", &config));
    assert_eq!(found.len(), 4, "{found:?}");
    for f in &found {
        assert_eq!(f.fix, Some(Applicability::Unsafe), "{f:?}");
        assert!(
            f.fix_message.contains("a CUDA run of this config then"),
            "{f:?}"
        );
    }
    let device = on_line(&found, 1);
    assert!(
        device
            .fix_message
            .starts_with("set `npu:0` instead of `cuda:0`"),
        "{device:?}"
    );
}

/// Device comparisons whose CUDA branch uses what `transfer_to_npu` does not map get no fix;
/// look-alikes whose branch only calls mapped torch APIs keep their safe fix.
#[test]
fn comparisons_selecting_unmapped_cuda_code_get_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "runner.py",
            r#"import os

import gymnasium
import pynvml
import torch


class Runner:
    def __init__(self, device):
        self.track_memory = device == "cuda"
        self.pin = device == "cuda"

    def capture(self, x):
        if x.device.type != "cuda":
            return self.model(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = self.model(x)
        return y

    def step(self, x):
        if x.device.type != "cuda":
            return self.model(x)
        torch.cuda.synchronize()
        return self.model(x)

    def log(self):
        if self.track_memory:
            pynvml.nvmlInit()

    def load(self, batch):
        if self.pin:
            batch = batch.pin_memory()
        return batch


def setup_render(device):
    if device.type == "cuda":
        os.environ["MUJOCO_EGL_DEVICE_ID"] = str(device.index)


def setup_device(device):
    if device.type == "cuda":
        torch.cuda.set_device(device.index)


def trace(x, device):
    label = torch.cuda.jiterator._create_jit_fn("f") if device == "cuda" else None
    amp = torch.cuda.amp.autocast() if device == "cuda" else None
    return label, amp


def render_setup(device):
    render_gpu = device.index if device.type == "cuda" else 0
    return gymnasium.make("Reach-v0", render_gpu_device_id=render_gpu)


def bind_device(device):
    index = device.index if device.type == "cuda" else 0
    torch.cuda.set_device(index)
"#,
        )],
    );
    for (line, why) in [
        (10, "`pynvml.nvmlInit`, a CUDA-only library"),
        (
            48,
            "`torch.cuda.jiterator._create_jit_fn`, which transfer_to_npu does not map",
        ),
    ] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains("no automatic fix"), "{f:?}");
        assert!(f.message.contains(why), "{f:?}");
    }
    // Checks that only pick the renderer's GPU (an EGL device id, a `render_gpu` index) are not
    // torch device checks: not reported.
    for line in [38, 54] {
        assert!(found.iter().all(|f| f.line != line), "{found:#?}");
    }
    // transfer_to_npu swaps the CUDA graph for torch.npu.NPUGraph: the fix leaves the working
    // eager path on the NPU for a capture path, so it is unsafe and says why.
    let graph = on_line(&found, 14);
    assert_eq!(graph.fix, Some(Applicability::Unsafe), "{graph:?}");
    assert!(
        graph.fix_message.contains(
            "`torch.cuda.CUDAGraph`, which transfer_to_npu replaces with `torch.npu.NPUGraph`"
        ),
        "{graph:?}"
    );
    for line in [11, 22, 43, 49, 59] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, Some(Applicability::Safe), "{f:?}");
        assert!(!f.message.contains("no automatic fix"), "{f:?}");
    }
}

/// float64 meant as float64 keeps its finding but gets no fix: in tests, in reference
/// implementations that code is checked against, and passed to the project's own dtype helper.
/// The same cast in model code keeps its unsafe fix.
#[test]
fn float64_in_tests_references_and_dtype_helpers_gets_no_fix() {
    let model = r#"import torch

from pkg.dtypes import pick_dtype


def local_dtype(dtype):
    return dtype


def attention_ref(q, k):
    return (q.to(torch.float64) @ k.to(torch.float64).T).float()


class NaiveMixer:
    def __call__(self, x):
        return x.to(torch.float64).sum()


def mix_cumulative(x):
    """Float64 cumulative mix: the parity tests hold the fused kernel to it."""
    return x.to(torch.float64).cumsum(0)


def fused_mix(x):
    return x.to(torch.float64).cumsum(0)


def check(x):
    assert torch.allclose(fused_mix(x), expected_mix(x))


def expected_mix(x):
    return x.to(torch.float64).cumsum(0)


def forward(x):
    y = x.to(pick_dtype(torch.float64))
    z = x.to(local_dtype(torch.float64))
    return y + z + x.to(torch.float64)


class Policy(torch.nn.Module):
    def test_step(self, batch):
        return batch.to(torch.float64)
"#;
    let test = "import torch\n\n\ndef helper(x):\n    return x.to(torch.float64)\n";
    let found = fixes(
        "P_F64",
        &[
            ("pkg/model.py", model),
            ("pkg/__init__.py", ""),
            ("tests/test_model.py", test),
            ("pkg/train_test.py", test),
        ],
    );
    let no_fix = [
        (
            11,
            "`attention_ref` is a reference implementation (its name says `ref`)",
        ),
        (
            16,
            "`NaiveMixer` is a reference implementation (its name says `naive`)",
        ),
        (
            25,
            "`fused_mix` is a reference implementation (this file asserts",
        ),
        (
            33,
            "`expected_mix` is a reference implementation (this file asserts",
        ),
        (37, "the project's own `pick_dtype`"),
        (38, "the project's own `local_dtype`"),
    ];
    let model_found: Vec<&Found> = found.iter().filter(|f| f.file == "pkg/model.py").collect();
    for (line, why) in no_fix {
        let f = model_found
            .iter()
            .find(|f| f.line == line)
            .unwrap_or_else(|| panic!("no issue on line {line}: {model_found:#?}"));
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains(why), "{why}: {f:?}");
    }
    let documented = model_found.iter().find(|f| f.line == 21).unwrap();
    assert_eq!(documented.fix, None, "{documented:?}");
    assert!(
        documented.message.contains(
            "`mix_cumulative` is a reference implementation (its docstring says \"parity\")"
        ),
        "{documented:?}"
    );
    // Model code: the unsafe float32 fix stays.
    let model_code = model_found.iter().find(|f| f.line == 39).unwrap();
    assert_eq!(
        model_code.fix,
        Some(Applicability::Unsafe),
        "{model_code:?}"
    );
    // A module's `test_step` is the model's own evaluation, not a test.
    let test_step = model_found
        .iter()
        .find(|f| f.line == 44)
        .unwrap_or_else(|| panic!("no issue in test_step: {model_found:#?}"));
    assert_eq!(test_step.fix, Some(Applicability::Unsafe), "{test_step:?}");
    for file in ["tests/test_model.py", "pkg/train_test.py"] {
        let f = found.iter().find(|f| f.file == file).unwrap();
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains("this is test code"), "{f:?}");
    }
}

/// A flash-attn import that is already guarded keeps its own error path: no fix. An unguarded
/// one keeps its unsafe SDPA fallback.
#[test]
fn guarded_flash_attn_imports_get_no_fix() {
    let found = fixes(
        "P_FLA",
        &[
            (
                "reraise.py",
                "try:\n    from flash_attn import flash_attn_func\nexcept ImportError as e:\n    raise ImportError(\"pip install flash-attn\") from e\n",
            ),
            (
                "flag.py",
                "try:\n    from flash_attn import flash_attn_func\n    FLASH = True\nexcept ImportError:\n    FLASH = True\n",
            ),
            (
                "checked.py",
                "from transformers.utils import is_flash_attn_2_available\n\nif is_flash_attn_2_available():\n    from flash_attn import flash_attn_func\nelse:\n    raise RuntimeError(\"flash-attn is required\")\n",
            ),
            ("plain.py", "from flash_attn import flash_attn_func\n"),
        ],
    );
    for file in ["reraise.py", "flag.py", "checked.py"] {
        let f = found
            .iter()
            .find(|f| f.file == file)
            .unwrap_or_else(|| panic!("{file}: no issue: {found:#?}"));
        assert_eq!(f.fix, None, "{f:?}");
    }
    let plain = found.iter().find(|f| f.file == "plain.py").unwrap();
    assert_eq!(plain.fix, Some(Applicability::Unsafe), "{plain:?}");
}

/// The python to run fixed programs with: `NPU_PATCHER_PYTHON` (set by `cargo xtask test`) or
/// `python3`.
fn python() -> std::process::Command {
    std::process::Command::new(
        std::env::var_os("NPU_PATCHER_PYTHON").unwrap_or_else(|| "python3".into()),
    )
}

/// An entry point that another entry imports gets the setup only where it starts the program,
/// so running the importing program sets up the NPU once: a patcher that refuses a second
/// `apply()` in one process (as the runtime patcher did) lets both programs start.
#[test]
fn an_entry_imported_by_another_sets_up_only_as_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    let files = [
        (
            "train.py",
            "import torch\n\nfrom evaluate import run_eval\n\n\ndef main():\n    model = torch.nn.Linear(2, 2).cuda()\n    run_eval(model)\n\n\nif __name__ == \"__main__\":\n    main()\n",
        ),
        (
            "evaluate.py",
            "import torch\n\n\ndef run_eval(model):\n    return model(torch.zeros(2, device=\"cuda\"))\n\n\nif __name__ == \"__main__\":\n    run_eval(torch.nn.Linear(2, 2).cuda())\n",
        ),
        (
            "migrate_to_cloudrobo/runtime_patches.py",
            "import os\n\nAPPLIED = []\n\n\nclass _Patcher:\n    def apply(self):\n        if APPLIED:\n            raise RuntimeError(\"another runtime patcher is already applied in this process\")\n        APPLIED.append(1)\n        print(\"npu setup\")\n\n\ndef build_vla_patcher():\n    return _Patcher()\n",
        ),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let settings = scan::Settings {
        select: vec!["P_ENT".to_owned()],
        threads: 1,
        ..scan::Settings::default()
    };
    let write = scan::FixSettings {
        write: true,
        ..scan::FixSettings::default()
    };
    scan::fix_project(&root, &settings, &write).unwrap();
    let train = std::fs::read_to_string(root.join("train.py")).unwrap();
    let evaluate = std::fs::read_to_string(root.join("evaluate.py")).unwrap();
    assert!(train.starts_with("try:\n    import torch_npu"), "{train}");
    assert!(
        evaluate.starts_with("if __name__ == \"__main__\":  # run as a program"),
        "{evaluate}"
    );
    assert_eq!(evaluate.matches("_NPU_PATCHER.apply()").count(), 1);

    // Run both programs against stand-ins for torch and torch_npu.
    let stubs = dir.path().join("stubs");
    for (path, text) in [
        (
            "torch/__init__.py",
            "class _Linear:\n    def __init__(self, *a):\n        pass\n\n    def cuda(self):\n        return self\n\n    def __call__(self, x):\n        return x\n\n\nclass nn:\n    Linear = _Linear\n\n\ndef zeros(*a, **k):\n    return 0\n",
        ),
        ("torch_npu/__init__.py", ""),
        ("torch_npu/contrib/__init__.py", ""),
        ("torch_npu/contrib/transfer_to_npu.py", ""),
    ] {
        let path = stubs.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    for program in ["train.py", "evaluate.py"] {
        let out = python()
            .arg(program)
            .current_dir(&root)
            .env("PYTHONPATH", &stubs)
            .output()
            .unwrap();
        assert!(out.status.success(), "{program}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "npu setup\n",
            "{program}"
        );
    }
}

// The cases below come from reading the fixes `--fix` and `--fix --unsafe-fixes` applied to
// public projects (tests/fix-check/review.tsv): each was wrong before its rule changed.

/// float64 that the code already chooses under a condition (its own precision option, or a
/// device it knows lacks float64) gets no fix: float32 in both arms makes the choice dead.
#[test]
fn f64_chosen_by_a_condition_gets_no_fix() {
    let found = fixes(
        "P_F64",
        &[(
            "pkg/rope.py",
            r"import torch


class Rope(torch.nn.Module):
    def __init__(self, double_precision=True):
        super().__init__()
        self.double_precision = double_precision

    def forward(self, x):
        freqs_dtype = torch.float64 if self.double_precision else torch.float32
        sigmas_dtype = torch.float32 if torch.backends.mps.is_available() else torch.float64
        freqs = torch.arange(4, dtype=freqs_dtype, device=x.device)
        sigmas = torch.arange(4, dtype=sigmas_dtype, device=x.device)
        return freqs, sigmas, x.to(torch.float64)
",
        )],
    );
    for line in [10, 11] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains("no automatic fix"), "{f:?}");
        assert!(f.message.contains("condition"), "{f:?}");
    }
    assert_eq!(on_line(&found, 14).fix, Some(Applicability::Unsafe));
}

/// float64 in a function that probes float64 support gets no fix: with float32 the probe
/// always succeeds.
#[test]
fn f64_in_a_float64_probe_gets_no_fix() {
    let found = fixes(
        "P_F64",
        &[(
            "pkg/utils.py",
            r"import torch


def _is_torch_fp64_available(device):
    try:
        x = torch.zeros((2, 2), dtype=torch.float64).to(device)
        _ = torch.mul(x, x)
        return True
    except Exception:
        return False


def model_state(device):
    return torch.zeros((2, 2), dtype=torch.float64).to(device)
",
        )],
    );
    let probe = on_line(&found, 6);
    assert_eq!(probe.fix, None, "{probe:?}");
    assert!(
        probe.message.contains("`_is_torch_fp64_available`"),
        "{probe:?}"
    );
    assert_eq!(on_line(&found, 14).fix, Some(Applicability::Unsafe));
}

/// A float64 cast that goes straight to the CPU (`.to(torch.float64).cpu()`) does its float64
/// math on the CPU: float32 there only loses precision, so no fix; the message says to cast
/// after `.cpu()`.
#[test]
fn f64_cast_then_cpu_gets_no_fix() {
    let found = fixes(
        "P_F64",
        &[(
            "pkg/layer.py",
            r"import torch


class Layer(torch.nn.Module):
    def init_weights(self, W):
        w = W.detach().to(torch.float64).cpu()
        q, r = torch.linalg.qr(w)
        return q

    def forward(self, W):
        return W.to(torch.float64).sum()
",
        )],
    );
    let cast = on_line(&found, 6);
    assert_eq!(cast.fix, None, "{cast:?}");
    assert!(cast.message.contains("after `.cpu()`"), "{cast:?}");
    assert_eq!(on_line(&found, 11).fix, Some(Applicability::Unsafe));
}

/// A comparison that decides whether tests are skipped gets no fix: the tests it gates were
/// not read, and the skip reason says they need CUDA.
#[test]
fn dev_skip_condition_gets_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "pkg/testing_utils.py",
            r#"import unittest

import pytest
import torch

torch_device = "cuda" if torch.cuda.is_available() else "cpu"


def require_torch_gpu(test_case):
    return unittest.skipUnless(torch_device == "cuda", "test requires PyTorch+CUDA")(test_case)


skip_without_cuda = pytest.mark.skipif(torch_device != "cuda", reason="needs CUDA")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
"#,
        )],
    );
    for line in [10, 13] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains("skip"), "{f:?}");
    }
    assert_eq!(on_line(&found, 17).fix, Some(Applicability::Safe));
}

/// A branch that calls a torch overload with no NPU kernel (`torch.mm(..., out_dtype=)`, the
/// `aten::mm.dtype` overload, has CUDA and Meta kernels only) gets no fix.
#[test]
fn dev_branch_with_cuda_only_overload_gets_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "pkg/kernels.py",
            r#"import torch


def project(tile, h, w, dtype):
    if tile.device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        torch.mm(h, w, out_dtype=torch.float32, out=tile)
    else:
        torch.mm(h.float(), w.float(), out=tile)


def accumulate(acc, a, b):
    if acc.device.type == "cuda":
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc.addmm_(a.float(), b.float())


def plain(a, b):
    if a.device.type == "cuda":
        torch.cuda.synchronize()
    return torch.mm(a, b)
"#,
        )],
    );
    for (line, why) in [(5, "aten::mm.dtype"), (12, "aten::addmm.dtype")] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains(why), "{f:?}");
    }
    assert_eq!(on_line(&found, 19).fix, Some(Applicability::Safe));
}

/// A flag whose branch asks a library for its Triton backend by name gets no fix.
#[test]
fn dev_flag_selecting_triton_backend_gets_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "bench.py",
            r#"import torch
from torchrl.modules import GRUModule


def make(device):
    triton_supported = device.type == "cuda"
    mod = None
    if triton_supported:
        mod = GRUModule(input_size=4, hidden_size=4, recurrent_backend="triton", device=device)
    return mod
"#,
        )],
    );
    let f = on_line(&found, 6);
    assert_eq!(f.fix, None, "{f:?}");
    assert!(f.message.contains("recurrent_backend=\"triton\""), "{f:?}");
}

/// A GPU count chosen by a comparison and handed to code outside torch (a scheduler such as
/// Ray counts CUDA GPUs only) gets no fix.
#[test]
fn dev_gpu_count_for_outside_code_gets_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "bench.py",
            r#"import torch
from ray import tune


def run(device):
    num_gpus = 0.5 if device == "cuda" else 0
    batch = 64 if device == "cuda" else 8
    tune.run("PPO", config={"num_gpus": num_gpus, "batch": batch})
    return torch.zeros(batch)
"#,
        )],
    );
    let f = on_line(&found, 6);
    assert_eq!(f.fix, None, "{f:?}");
    assert!(f.message.contains("`num_gpus`"), "{f:?}");
    assert_eq!(on_line(&found, 7).fix, Some(Applicability::Safe));
}

/// A flag that also turns on CUDA graphs makes the fix unsafe: the NPU would capture graphs.
#[test]
fn dev_flag_turning_on_cuda_graphs_is_unsafe() {
    let found = fixes(
        "P_DEV",
        &[(
            "trainer.py",
            r#"import torch


class Trainer:
    def settings(self, device):
        is_cuda = device.type == "cuda"
        compile_step = is_cuda if self.compile_step is None else self.compile_step
        cudagraph = is_cuda if self.cudagraph is None else self.cudagraph
        return compile_step, cudagraph
"#,
        )],
    );
    let f = on_line(&found, 6);
    assert_eq!(f.fix, Some(Applicability::Unsafe), "{f:?}");
    assert!(f.fix_message.contains("`cudagraph`"), "{f:?}");
}

/// In a class that builds a CUDA-only object outside torch (a CUDA extension's class), no
/// comparison gets a fix: they must agree with the one that keeps the NPU off that object, or
/// the NPU takes half of the CUDA path.
#[test]
fn dev_class_with_unfixable_comparison_gives_the_others_no_fix() {
    let found = fixes(
        "P_DEV",
        &[(
            "pkg/sampler.py",
            r#"import torch

from pkg._ext import CudaSumTree, SumTree


class Sampler:
    def tree_device(self, device):
        if device.type == "cuda":
            return device
        return None

    def init(self):
        if self.device.type == "cuda":
            self.tree = CudaSumTree(self.device)
        else:
            self.tree = SumTree()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
"#,
        )],
    );
    let f = on_line(&found, 8);
    assert_eq!(f.fix, None, "{f:?}");
    assert!(f.message.contains("`pkg._ext.CudaSumTree`"), "{f:?}");
    assert_eq!(on_line(&found, 13).fix, None);
    assert_eq!(on_line(&found, 20).fix, Some(Applicability::Safe));
}
