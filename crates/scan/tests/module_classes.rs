//! A class whose `nn.Module` base is defined in another file of the project is device code:
//! the whole scan and the one-file scan (`scan_alone`, used by re-checks) agree on it.

use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const BASE: &str = "import torch.nn as nn\n\n\
class BaseVLM(nn.Module):\n    def encode(self, x):\n        return x\n";

// No `forward` of its own and no base from torch in this file: only the other file says that
// this is a module.
const LEAF: &str = "import torch\nfrom pkg.base import BaseVLM\n\n\
class Flamingo(BaseVLM):\n    def merge(self, masks: torch.Tensor, ids: torch.Tensor):\n        out = []\n        \
for mask, row in zip(masks, ids):\n            cut = mask.nonzero()[0].item()\n            \
out.append(torch.cat((row[:cut], row[cut:])))\n        return torch.stack(out)\n";

const NOT_A_MODULE: &str = "import torch\n\nclass Helper:\n    def merge(self, masks: torch.Tensor, ids: torch.Tensor):\n        out = []\n        \
for mask, row in zip(masks, ids):\n            cut = mask.nonzero()[0].item()\n            \
out.append(torch.cat((row[:cut], row[cut:])))\n        return torch.stack(out)\n";

fn vec_lines(result: &scan::ScanResult, file: &str) -> Vec<u32> {
    result
        .issues
        .iter()
        .filter(|i| i.pattern == "P_VEC" && i.file == file)
        .map(|i| i.line)
        .collect()
}

#[test]
fn a_base_class_from_another_file_makes_device_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "pkg/__init__.py", "");
    write(root, "pkg/base.py", BASE);
    write(root, "pkg/flamingo.py", LEAF);
    write(root, "pkg/helper.py", NOT_A_MODULE);
    let settings = scan::Settings::default();
    let whole = scan::scan(root, &settings).unwrap();
    assert_eq!(vec_lines(&whole, "pkg/flamingo.py"), [7]);
    assert!(vec_lines(&whole, "pkg/helper.py").is_empty());

    let alone = scan::scan_alone(root, "pkg/flamingo.py", &settings).unwrap();
    assert_eq!(vec_lines(&alone, "pkg/flamingo.py"), [7]);
}

#[test]
fn without_the_base_file_the_class_is_not_device_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "pkg/flamingo.py", LEAF);
    let result = scan::scan(root, &scan::Settings::default()).unwrap();
    assert!(vec_lines(&result, "pkg/flamingo.py").is_empty());
}
