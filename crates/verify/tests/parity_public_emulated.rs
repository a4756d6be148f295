//! `--parity` on ports of public projects (pinned in `tests/parity/public/sources.json`):
//! denoising-diffusion-pytorch's `GaussianDiffusion1D` with a `Unet1D`, and vit-pytorch's `NaViT`,
//! each trained by a small loop of ours (`tests/parity/public/*_train.py`) with dropout and random
//! augmentation. Each test makes the change a port can get wrong in the project's own code and
//! checks that the first divergence is found at the module and step where it happens, and that a
//! port that keeps the numerics matches.
//!
//! Needs `NPU_PATCHER_PYTHON` and `NPU_PATCHER_PARITY_PUBLIC` (both set by `cargo xtask test`;
//! `cargo xtask venv` and `cargo xtask parity-public` print them).

mod common;

use common::{check, copy_tree, git, parity, set_up_migrate};
use std::path::{Path, PathBuf};

/// The extracted distribution `name` (`<name>-<version>` under `NPU_PATCHER_PARITY_PUBLIC`).
fn public(name: &str) -> PathBuf {
    let Some(dir) = std::env::var_os("NPU_PATCHER_PARITY_PUBLIC") else {
        panic!(
            "NPU_PATCHER_PARITY_PUBLIC is not set: run `cargo xtask test`, or export \
             NPU_PATCHER_PARITY_PUBLIC=$(cargo xtask parity-public) before `cargo test -p verify`"
        );
    };
    let dir = PathBuf::from(dir).join(name);
    assert!(
        dir.join(".complete").is_file(),
        "{} is missing or incomplete: run `cargo xtask parity-public`",
        dir.display()
    );
    dir
}

/// A project with the package's `files` (an empty `__init__.py` instead of its own, whose imports
/// need torchvision), einops, our training loop as `train.py` and `migrate_to_cloudrobo/`,
/// committed as "before the port".
fn project(dir: &Path, dist: &str, package: &str, files: &[&str], program: &str) -> PathBuf {
    let root = dir.join(package);
    let source = public(dist).join(package);
    std::fs::create_dir_all(root.join(package)).unwrap();
    for file in files {
        std::fs::copy(source.join(file), root.join(package).join(file)).unwrap();
    }
    std::fs::write(root.join(package).join("__init__.py"), "").unwrap();
    copy_tree(&public("einops-0.8.2").join("einops"), &root.join("einops"));
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/parity/public")
            .join(program),
        root.join("train.py"),
    )
    .unwrap();
    set_up_migrate(&root);
    git(&root, &["init", "-q"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "before the port"]);
    root
}

fn diffusion(dir: &Path) -> PathBuf {
    project(
        dir,
        "denoising-diffusion-pytorch-2.3.4",
        "denoising_diffusion_pytorch",
        &["denoising_diffusion_pytorch_1d.py", "version.py"],
        "ddpm1d_train.py",
    )
}

fn navit(dir: &Path) -> PathBuf {
    project(
        dir,
        "vit-pytorch-1.26.14",
        "vit_pytorch",
        &["na_vit.py"],
        "navit_train.py",
    )
}

const UNET_1D: &str = "denoising_diffusion_pytorch/denoising_diffusion_pytorch_1d.py";
const NA_VIT: &str = "vit_pytorch/na_vit.py";

/// Replace the one occurrence of `old` in the project's `file` (the port's change).
fn edit(root: &Path, file: &str, old: &str, new: &str) {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches(old).count(), 1, "{file}: {old:?}");
    std::fs::write(&path, text.replacen(old, new, 1)).unwrap();
}

/// The first divergence's module, direction and step, and the modules check's detail.
fn located(report: &serde_json::Value) -> (String, String, u64, String) {
    let modules = check(report, "parity.modules");
    let first = &modules["data"]["first_divergence"];
    (
        first["module"].as_str().unwrap_or("").to_owned(),
        first["direction"].as_str().unwrap_or("").to_owned(),
        first["step"].as_u64().unwrap_or(0),
        modules["detail"].as_str().unwrap_or("").to_owned(),
    )
}

fn why(report: &serde_json::Value) -> String {
    check(report, "parity.why")["detail"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// The module keeps its noise schedule in float64 until it registers the float32 buffers; the
/// runtime patch `Float64To32` makes that float64 float32 everywhere, so switched off the port
/// (dropout, random shift and jitter, timesteps and noise drawn on the device) matches.
#[test]
fn the_diffusion_port_with_float64_kept_matches_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let root = diffusion(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[("NPU_PATCHES_DISABLE", "Float64To32")]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.loss")["status"], "pass");
    let modules = check(&report, "parity.modules");
    assert_eq!(modules["status"], "pass", "{modules:#}");
    assert!(
        modules["data"]["events_compared"].as_u64().unwrap() > 1000,
        "{modules:#}"
    );
    assert_eq!(modules["data"]["batches_replayed"], 3, "{modules:#}");
}

/// With the shipped patches on, `Float64To32` computes the cosine schedule in float32: the betas
/// buffer moves by a few float32 ulps, found at the module that owns it, and the patch is named.
#[test]
fn float64to32_on_the_cosine_schedule_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = diffusion(dir.path());
    let (code, report, stderr) = parity(&root, &[], &[]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let (module, direction, step, detail) = located(&report);
    assert_eq!(
        (module.as_str(), direction.as_str(), step),
        ("GaussianDiffusion1D", "forward", 1),
        "{detail}"
    );
    assert!(detail.contains("buffer betas"), "{detail}");
    let why = why(&report);
    assert!(
        why.starts_with("Float64To32 changes GaussianDiffusion1D"),
        "{why}"
    );
}

/// A hand edit of the port (float32 in `cosine_beta_schedule`) against the commit before it:
/// found at the schedule's module, and the hunk is named as the cause.
#[test]
fn a_float32_cosine_schedule_in_the_ports_diff_is_found_and_its_hunk_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = diffusion(dir.path());
    edit(
        &root,
        UNET_1D,
        "x = torch.linspace(0, timesteps, steps, dtype = torch.float64)",
        "x = torch.linspace(0, timesteps, steps, dtype = torch.float32)",
    );
    let (code, report, stderr) = parity(
        &root,
        &["--reference-rev", "HEAD"],
        &[("NPU_PATCHES_DISABLE", "Float64To32")],
    );
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let (module, direction, step, detail) = located(&report);
    assert_eq!(
        (module.as_str(), direction.as_str(), step),
        ("GaussianDiffusion1D", "forward", 1),
        "{detail}"
    );
    assert!(detail.contains("buffer betas"), "{detail}");
    let why = why(&report);
    assert!(
        why.starts_with(&format!("your change at {UNET_1D}:409")),
        "{why}"
    );
}

/// An npu-only branch that runs the middle attention block in float16: found in the Unet, whose
/// own code hands that block half-precision inputs, at the first step.
#[test]
fn the_unets_middle_attention_in_half_precision_on_the_npu_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let root = diffusion(dir.path());
    edit(
        &root,
        UNET_1D,
        "        x = self.mid_attn(x)\n",
        "        if x.device.type == \"npu\":\n            \
         x = self.mid_attn.half()(x.half()).float()\n        \
         else:\n            x = self.mid_attn(x)\n",
    );
    let (code, report, stderr) = parity(&root, &[], &[("NPU_PATCHES_DISABLE", "Float64To32")]);
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let (module, direction, step, detail) = located(&report);
    assert_eq!(
        (module.as_str(), direction.as_str(), step),
        ("GaussianDiffusion1D.model", "forward", 1),
        "{detail}"
    );
    assert!(
        detail.contains("mid_attn") && detail.contains("float16"),
        "{detail}"
    );
}

/// `NaViT`'s attention through `npu_fusion_attention` on the npu, with `mask` as the mask:
/// `~attn_mask` (True = masked out, NPU-FACTS "Attention") matches, SDPA's polarity diverges at
/// the first attention layer.
fn navit_fusion_attention(mask: &str) -> (Option<i32>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = navit(dir.path());
    edit(
        &root,
        NA_VIT,
        "        out = F.scaled_dot_product_attention(\n            q, k, v,\n            \
         attn_mask = attn_mask,\n            \
         dropout_p = self.dropout_p if self.training else 0.,\n            \
         scale = 1.  # RMSNorm already includes sqrt(dim) scaling\n        )\n",
        &format!(
            "        if q.device.type == \"npu\":\n            import torch_npu\n            \
             out = torch_npu.npu_fusion_attention(q, k, v, self.heads, \"BNSD\", \
             atten_mask = {mask}, scale = 1.)[0]\n        else:\n            \
             out = F.scaled_dot_product_attention(q, k, v, attn_mask = attn_mask, \
             dropout_p = self.dropout_p if self.training else 0., scale = 1.)\n"
        ),
    );
    parity(&root, &[], &[])
}

#[test]
fn navit_on_npu_fusion_attention_with_the_npu_mask_polarity_matches() {
    let (code, report, stderr) = navit_fusion_attention("~attn_mask");
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(check(&report, "parity.modules")["status"], "pass");
    assert_eq!(check(&report, "parity.loss")["status"], "pass");
}

#[test]
fn navit_on_npu_fusion_attention_with_sdpas_mask_polarity_is_found_at_the_attention() {
    let (code, report, stderr) = navit_fusion_attention("attn_mask");
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let (module, direction, step, detail) = located(&report);
    assert_eq!(
        (module.as_str(), direction.as_str(), step),
        ("NaViT.transformer.layers.0.0", "forward", 1),
        "{detail}"
    );
    assert!(detail.contains(NA_VIT), "{detail}");
}
