//! Which fixes each rule offers and how safe they are: a fix is safe only when the code keeps
//! its behaviour on CPU and CUDA and the fixed program runs on an NPU stack. Each test scans a
//! small project and reads the applicability of the fixes attached to its issues.

use issue_model::Applicability;
use std::path::Path;

/// One issue as these tests read it.
#[derive(Debug)]
struct Found {
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
    let found = fixes(
        "P_CFG",
        &[(
            "conf/train.yaml",
            "device: \"cuda:0\"\npolicy_device: cuda\ndist_backend: nccl\nattn_implementation: flash_attention_2\n",
        )],
    );
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
"#,
        )],
    );
    for (line, why) in [
        (9, "`pynvml.nvmlInit`, a CUDA-only library"),
        (37, "`MUJOCO_EGL_DEVICE_ID` set from a device index"),
        (
            47,
            "`torch.cuda.jiterator._create_jit_fn`, which transfer_to_npu does not map",
        ),
    ] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, None, "{f:?}");
        assert!(f.message.contains("no automatic fix"), "{f:?}");
        assert!(f.message.contains(why), "{f:?}");
    }
    // transfer_to_npu swaps the CUDA graph for torch.npu.NPUGraph: the fix leaves the working
    // eager path on the NPU for a capture path, so it is unsafe and says why.
    let graph = on_line(&found, 13);
    assert_eq!(graph.fix, Some(Applicability::Unsafe), "{graph:?}");
    assert!(
        graph.fix_message.contains(
            "`torch.cuda.CUDAGraph`, which transfer_to_npu replaces with `torch.npu.NPUGraph`"
        ),
        "{graph:?}"
    );
    for line in [10, 21, 42, 48] {
        let f = on_line(&found, line);
        assert_eq!(f.fix, Some(Applicability::Safe), "{f:?}");
        assert!(!f.message.contains("no automatic fix"), "{f:?}");
    }
}
