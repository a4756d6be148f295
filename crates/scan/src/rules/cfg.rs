//! `P_CFG`: config files (YAML, JSON, TOML) whose values select CUDA.
//!
//! Files are read line by line: a `key: value` (YAML), `"key": value` (JSON) or `key = value`
//! (TOML) pair is judged by the key's own name and the value, which keeps exact positions
//! without a format-specific parser.

use super::{ConfigChecker, Rule, RuleInfo};
use crate::fix;
use issue_model::{Applicability, Category, Severity};
use regex::Regex;
use std::sync::LazyLock;

pub struct ConfigPinsCuda;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_CFG",
    name: "config-pins-cuda",
    category: Category::Structure,
    severity: Severity::Warning,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_CFG.md",
    summary: "Config values that select CUDA: `device: cuda`, `accelerator: gpu`, `gpus: N`, `backend: nccl`.",
    doc: include_str!("cfg.md"),
    check: &ConfigPinsCuda,
};

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| unreachable!("a valid built-in pattern: {e}"))
}

/// `key: value` on a YAML line (also as a list item).
static YAML: LazyLock<Regex> =
    LazyLock::new(|| regex(r#"^\s*(?:-\s+)?["']?([A-Za-z_][\w.-]*)["']?\s*:\s+(\S.*?)\s*$"#));
/// `"key": value` anywhere in a JSON line.
static JSON: LazyLock<Regex> = LazyLock::new(|| {
    regex(
        r#""([A-Za-z_][\w.-]*)"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null|\[[^\]]*\])"#,
    )
});
/// `key = value` on a TOML line.
static TOML: LazyLock<Regex> =
    LazyLock::new(|| regex(r#"^\s*["']?([A-Za-z_][\w.-]*)["']?\s*=\s*(\S.*?)\s*$"#));

impl Rule for ConfigPinsCuda {
    fn config(&self, cx: &mut ConfigChecker<'_>) {
        report_pairs(cx, judge);
    }
}

/// Report every `key: value` pair of the config file that `judge` finds, with its unsafe fix.
/// Shared with `P_FLA`, which judges the pairs that select a CUDA-only kernel.
pub(crate) fn report_pairs(cx: &mut ConfigChecker<'_>, judge: fn(&str, &str) -> Option<Judged>) {
    let ext = cx.extension();
    let mut hits = Vec::new();
    for (line, text) in cx.lines() {
        match ext.as_str() {
            "json" => {
                for caps in JSON.captures_iter(text) {
                    if let (Some(k), Some(v)) = (caps.get(1), caps.get(2)) {
                        hits.extend(
                            judge(k.as_str(), v.as_str())
                                .map(|j| (line, v.start(), v.end(), j, v.as_str())),
                        );
                    }
                }
            }
            "yaml" | "yml" | "toml" => {
                let code = strip_comment(text);
                let re = if ext == "toml" { &*TOML } else { &*YAML };
                if let Some(caps) = re.captures(code)
                    && let (Some(k), Some(v)) = (caps.get(1), caps.get(2))
                {
                    hits.extend(
                        judge(k.as_str(), v.as_str())
                            .map(|j| (line, v.start(), v.end(), j, v.as_str())),
                    );
                }
            }
            _ => {}
        }
    }
    for (line, start, end, judged, raw) in hits {
        let range = cx.line_range(line, start, end);
        let finding = cx.report(range, judged.message);
        if let Some(new) = judged.replacement {
            let content = requote(raw, &new);
            let message = format!(
                "set `{}` instead of `{}`; unsafe: {}",
                unquote(&content),
                unquote(raw),
                judged.cuda_cost
            );
            // The config is read by the CUDA runs too, so no rewrite keeps them as they
            // were: every one of these fixes is unsafe (P_CFG.md, "Fix safety").
            finding.fix = Some(fix::replacement(
                Applicability::Unsafe,
                message,
                range,
                content,
            ));
        }
    }
}

/// The line without a trailing `# comment` (a `#` outside quotes, at the start or after
/// whitespace).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev_space = true;
    for (i, ch) in line.char_indices() {
        match quote {
            Some(q) if ch == q => quote = None,
            None if ch == '"' || ch == '\'' => quote = Some(ch),
            None if ch == '#' && prev_space => return &line[..i],
            Some(_) | None => {}
        }
        prev_space = ch.is_whitespace();
    }
    line
}

/// `new` in the quotes of `raw` (none, `"` or `'`).
fn requote(raw: &str, new: &str) -> String {
    fix::requote(raw.trim(), new).unwrap_or_else(|| new.to_owned())
}

fn unquote(value: &str) -> &str {
    let v = value.trim();
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(v)
}

fn is_cuda_device(value: &str) -> bool {
    value == "cuda"
        || value
            .strip_prefix("cuda:")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A CUDA-pinning pair: the message, and the value `--fix --unsafe-fixes` sets, where one
/// value is right on the NPU whatever the project, with what it costs the CUDA runs.
pub(crate) struct Judged {
    message: String,
    replacement: Option<String>,
    /// What the replacement does to a run of the same config on CUDA.
    cuda_cost: &'static str,
}

/// The finding for a CUDA-pinning pair, if it is one.
fn judge(key: &str, raw_value: &str) -> Option<Judged> {
    let message = message(key, raw_value)?;
    let key = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let value = unquote(raw_value).to_ascii_lowercase();
    // `accelerator: gpu` and `gpus: N` need a choice of Lightning setup (P_CFG.md): no fix.
    let (replacement, cuda_cost) = if key == "device" || key.ends_with("_device") {
        (
            value
                .strip_prefix("cuda")
                .map(|index| format!("npu{index}")),
            "a CUDA run of this config then fails, torch has no `npu` device without torch_npu",
        )
    } else if key == "backend" || key.ends_with("_backend") {
        (
            Some("hccl".to_owned()),
            "a CUDA run of this config then fails, torch.distributed has no `hccl` backend without torch_npu",
        )
    } else {
        (None, "")
    };
    Some(Judged {
        message,
        replacement,
        cuda_cost,
    })
}

/// The message for a CUDA-pinning pair, if it is one.
fn message(key: &str, raw_value: &str) -> Option<String> {
    if raw_value.contains("${") {
        return None;
    }
    let key = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let value = unquote(raw_value).to_ascii_lowercase();
    if (key == "device" || key.ends_with("_device")) && is_cuda_device(&value) {
        return Some(format!(
            "`{key}: {value}` pins CUDA; it works on the NPU only when transfer_to_npu remaps it at the \
             entry point, so set it to `npu` (see P_CFG.md)"
        ));
    }
    if key == "accelerator" && matches!(value.as_str(), "gpu" | "cuda") {
        return Some(format!(
            "`accelerator: {value}` makes Lightning look for CUDA, so training does not start on the NPU; \
             use `auto` (see P_CFG.md)"
        ));
    }
    if key == "gpus" && pins_gpus(&value) {
        return Some(
            "`gpus:` was removed from Lightning 2 and asks for CUDA devices, which the NPU is not; \
             use `devices:` with `accelerator: auto` (see P_CFG.md)"
                .to_owned(),
        );
    }
    if (key == "backend" || key.ends_with("_backend")) && value == "nccl" {
        return Some(format!(
            "`{key}: nccl` selects a backend the NPU does not have (it uses hccl); set `hccl` \
             (see P_CFG.md)"
        ));
    }
    None
}

/// The finding for a pair that selects a CUDA-only kernel (`P_FLA`): flash-attn, Liger's
/// Triton kernels, a bitsandbytes optimizer or quantized loading.
pub(crate) fn judge_kernel(key: &str, raw_value: &str) -> Option<Judged> {
    if raw_value.contains("${") {
        return None;
    }
    let key = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    let value = unquote(raw_value).to_ascii_lowercase();
    let sdpa = "a CUDA run of this config then uses torch's SDPA kernels instead of flash-attn";
    let judged = |message: String, replacement: Option<String>, cuda_cost: &'static str| {
        Some(Judged {
            message,
            replacement,
            cuda_cost,
        })
    };
    if matches!(key.as_str(), "attn_implementation" | "_attn_implementation")
        && value == "flash_attention_2"
    {
        return judged(
            "`attn_implementation: flash_attention_2` needs the CUDA-only flash_attn package, so the \
             model fails to load on the NPU; use `sdpa` (see P_FLA.md); check first that \
             the code reads this key: a value it ignores or overrides is harmless"
                .to_owned(),
            Some("sdpa".to_owned()),
            sdpa,
        );
    }
    let on = value == "true";
    if key == "use_flash_attention_2" && on {
        let capital = unquote(raw_value).starts_with('T');
        return judged(
            "`use_flash_attention_2: true` needs the CUDA-only flash_attn package, so the model fails \
             to load on the NPU; set it to false and use sdpa (see P_FLA.md); check first that \
             the code reads this key: a value it ignores or overrides is harmless"
                .to_owned(),
            Some(if capital { "False" } else { "false" }.to_owned()),
            sdpa,
        );
    }
    // transformers' `TrainingArguments.use_liger_kernel` patches the model with Liger's Triton
    // kernels; TRL's configs inherit the field.
    if matches!(key.as_str(), "use_liger_kernel" | "use_liger") && on {
        return judged(
            format!(
                "`{key}: true` patches the model with Liger's Triton kernels, which are CUDA-only, so \
                 training fails on the NPU; set it to false (see P_FLA.md); check first that \
             the code reads this key: a value it ignores or overrides is harmless"
            ),
            None,
            "",
        );
    }
    // `TrainingArguments.optim`: the 8-bit and paged AdamW/Lion variants are bitsandbytes
    // optimizers (`adamw_bnb_8bit`, `paged_adamw_8bit`, `paged_adamw_32bit`, `lion_8bit`).
    if key == "optim"
        && (value.contains("bnb") || value.contains("8bit") || value.starts_with("paged_"))
    {
        return judged(
            format!(
                "`optim: {value}` is a bitsandbytes optimizer, whose CUDA kernels the NPU does not have, \
                 so the optimizer fails to build; use `adamw_torch` (see P_FLA.md); check first that \
             the code reads this key: a value it ignores or overrides is harmless"
            ),
            None,
            "",
        );
    }
    if matches!(key.as_str(), "load_in_4bit" | "load_in_8bit") && on {
        return judged(
            format!(
                "`{key}: true` quantizes the model with bitsandbytes, whose CUDA kernels the NPU does not \
                 have, so loading fails; load it unquantized (see P_FLA.md); check first that \
             the code reads this key: a value it ignores or overrides is harmless"
            ),
            None,
            "",
        );
    }
    None
}

/// A `gpus` value that asks for at least one GPU.
fn pins_gpus(value: &str) -> bool {
    match value {
        "" | "0" | "null" | "~" | "none" | "[]" | "false" => false,
        v if v.starts_with('[') => v.trim_matches(|c| c == '[' || c == ']').trim() != "",
        v => !matches!(v.parse::<i64>(), Ok(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_pairs() {
        assert!(judge("device", "cuda").is_some());
        assert!(judge("policy_device", "\"cuda:1\"").is_some());
        assert!(judge("device", "npu:0").is_none());
        assert!(judge("device", "${oc.env:DEVICE,cuda}").is_none());
        assert!(judge("gpus", "0").is_none());
        assert!(judge("gpus", "8").is_some());
        assert!(judge("gpus", "[0, 1]").is_some());
        assert!(judge("gpus", "-1").is_some());
        assert!(judge("dist_backend", "nccl").is_some());
        assert!(judge("amp_backend", "apex").is_none());
        assert!(judge("accelerator", "auto").is_none());
        assert!(judge("attn_implementation", "'flash_attention_2'").is_none());
        assert!(judge_kernel("attn_implementation", "'flash_attention_2'").is_some());
        assert!(judge_kernel("attn_implementation", "sdpa").is_none());
        assert!(judge_kernel("use_liger_kernel", "true").is_some());
        assert!(judge_kernel("use_liger_kernel", "false").is_none());
        assert!(judge_kernel("optim", "paged_adamw_8bit").is_some());
        assert!(judge_kernel("optim", "adamw_torch").is_none());
        assert!(judge_kernel("load_in_4bit", "True").is_some());
        assert!(judge("description", "cuda").is_none());
    }

    #[test]
    fn fixes_only_values_with_one_right_npu_value() {
        let fix = |k: &str, v: &str| judge(k, v).and_then(|j| j.replacement);
        assert_eq!(fix("device", "cuda").as_deref(), Some("npu"));
        assert_eq!(fix("policy_device", "\"cuda:1\"").as_deref(), Some("npu:1"));
        assert_eq!(fix("dist_backend", "nccl").as_deref(), Some("hccl"));
        let kernel_fix = |k: &str, v: &str| judge_kernel(k, v).and_then(|j| j.replacement);
        assert_eq!(
            kernel_fix("attn_implementation", "'flash_attention_2'").as_deref(),
            Some("sdpa")
        );
        assert_eq!(
            kernel_fix("use_flash_attention_2", "True").as_deref(),
            Some("False")
        );
        assert_eq!(kernel_fix("optim", "paged_adamw_8bit"), None);
        assert_eq!(fix("accelerator", "gpu"), None);
        assert_eq!(fix("accelerator", "cuda"), None);
        assert_eq!(fix("gpus", "8"), None);
        assert_eq!(requote("\"cuda:1\"", "npu:1"), "\"npu:1\"");
        assert_eq!(requote("cuda", "npu"), "npu");
    }

    /// A config is read by the CUDA runs too: `npu:0` or `hccl` there fails, so no rewrite of a
    /// config value is safe, and each fix says what it costs the CUDA runs.
    #[test]
    fn every_config_rewrite_says_what_it_costs_cuda() {
        for (k, v) in [
            ("device", "\"cuda:0\""),
            ("dist_backend", "nccl"),
            ("attn_implementation", "flash_attention_2"),
            ("use_flash_attention_2", "true"),
        ] {
            let judged = judge(k, v).or_else(|| judge_kernel(k, v)).unwrap();
            assert!(judged.replacement.is_some(), "{k}");
            assert!(judged.cuda_cost.starts_with("a CUDA run"), "{k}");
        }
    }

    #[test]
    fn strips_comments_outside_quotes() {
        assert_eq!(strip_comment("device: cuda  # note"), "device: cuda  ");
        assert_eq!(strip_comment("tag: \"a # b\""), "tag: \"a # b\"");
        assert_eq!(strip_comment("# device: cuda"), "");
        assert_eq!(strip_comment("url: http://x#frag"), "url: http://x#frag");
    }
}
