//! A ready msprobe (`MindStudio` Probe) dump configuration scoped to the first diverging module, for
//! an op-level look when the module-level comparison cannot say why.
//!
//! The fields are those of msprobe's own `config.json` (`task`, `dump_path`, `rank`, `step`,
//! `level`, `async_dump`, and `statistics` with `scope`, `list`, `data_mode`, `summary_mode`: the
//! file shipped in `MindStudio-Probe`, `python/msprobe/config.json`) with the meanings its `PyTorch`
//! guides give (the `MSProbe` debugging guides of sglang, docs.sglang.io, and of vllm-ascend):
//! `level` `mix` dumps modules (L0) and the torch APIs they call (L1); `scope` takes two names in
//! msprobe's naming (`Module.<name>.<Class>.forward.<n>`) and dumps only what runs between them;
//! `step` lists the iterations to dump (an empty list: all); `rank` `[]` for one card.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// msprobe's name of the call: `Module.<attribute path>.<Class>.<forward|backward>.<n>`, the path
/// relative to the model given to `debugger.start(model)` (ours starts with the model's class) and
/// `n` counted from 0.
pub fn scope_name(first: &Value) -> String {
    let module = first["module"].as_str().unwrap_or("");
    let path = module.split_once('.').map_or(module, |(_, rest)| rest);
    let class = first["class"].as_str().unwrap_or("Module");
    let direction = if first["direction"] == "backward" {
        "backward"
    } else {
        "forward"
    };
    let n = first["call"].as_u64().unwrap_or(1).saturating_sub(1);
    if path == module {
        // The model itself: msprobe names the root by its class.
        format!("Module.{class}.{direction}.{n}")
    } else {
        format!("Module.{path}.{class}.{direction}.{n}")
    }
}

/// The configuration for one side's dump into `dump_path`.
pub fn config(first: &Value, dump_path: &str) -> Value {
    let name = scope_name(first);
    // Our steps count from 1 (the first optimizer step), msprobe's from 0.
    let step = first["step"].as_u64().unwrap_or(1).saturating_sub(1);
    json!({
        "task": "statistics",
        "dump_path": dump_path,
        "rank": [],
        "step": [step],
        "level": "mix",
        "async_dump": false,
        "statistics": {
            "scope": [name, name],
            "list": [],
            "data_mode": ["all"],
            "summary_mode": "statistics",
        },
    })
}

/// Write `config.json` (the port's dump) and `config.bench.json` (the reference's) under
/// `dir`; the files written and the lines that say how to use them.
pub fn write(dir: &Path, first: &Value) -> Result<(Vec<PathBuf>, String), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (file, dump) in [
        ("config.json", "./msprobe_dump/npu"),
        ("config.bench.json", "./msprobe_dump/bench"),
    ] {
        let path = dir.join(file);
        let mut text = serde_json::to_string_pretty(&config(first, dump)).unwrap_or_default();
        text.push('\n');
        write_atomic(&path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    let name = scope_name(first);
    let how = format!(
        "msprobe config scoped to {name} (level mix: the module and the torch APIs it calls; step {}) in {}; \
         to use it: `pip install mindstudio-probe`, then in the training loop \
         `from msprobe.pytorch import PrecisionDebugger; debugger = PrecisionDebugger(config_path=\"{}\")`, \
         `debugger.start(model)` before the forward, `debugger.stop(); debugger.step()` after the optimizer step; \
         run it on the NPU with config.json and where the reference runs with config.bench.json, then compare the \
         two dumps with msprobe's compare (`msprobe -f pytorch compare -i compare.json -o ./compare_out`, \
         compare.json naming both dumps: check that command and its fields against your msprobe version's compare \
         guide). The scope name follows msprobe's documented naming; if the dump has no such entry, take the \
         module's name from the construct.json of an unscoped L0 dump",
        first["step"].as_u64().unwrap_or(1).saturating_sub(1),
        dir.display(),
        written[0].display()
    );
    Ok((written, how))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_names_the_module_call_in_msprobes_naming() {
        let first = json!({"module": "Policy.attn", "class": "Attention", "direction": "forward",
                           "step": 2, "call": 1});
        assert_eq!(scope_name(&first), "Module.attn.Attention.forward.0");
        let config = config(&first, "./d");
        assert_eq!(config["step"], json!([1]));
        assert_eq!(
            config["statistics"]["scope"],
            json!([
                "Module.attn.Attention.forward.0",
                "Module.attn.Attention.forward.0"
            ])
        );
        let root =
            json!({"module": "Policy", "class": "Policy", "direction": "backward", "call": 2});
        assert_eq!(scope_name(&root), "Module.Policy.backward.1");
    }
}
