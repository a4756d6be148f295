//! `cargo xtask codegen [--check]`: files generated from the repository's data files.
//!
//! The first two come from `torch-npu/transfer_to_npu.json` (what `transfer_to_npu` does, per torch-npu
//! version; that file is checked against each wheel's source by `tests/python/wheels/`):
//! `crates/scan/src/remap/table.rs`, the scanner's copy, and
//! `assets/emulator/torch_npu/contrib/transfer_table.json`, the effects the emulator's stand-in
//! `transfer_to_npu` replays when the wheel itself is not at hand. The kernel tables
//! `assets/emulator/npu_emulator/npu_kernels/torch_npu-<version>.json` come from each pinned wheel
//! (`torch-npu/wheels.json`, extracted by [`crate::torch_npu::ensure_kernels`]): the aten ops its
//! `csrc/aten/npu_native_functions*.yaml` give an NPU kernel, and the ops whose CPU fallback
//! `lib/libtorch_npu.so` names in a warning. `--check` fails when a committed file differs from
//! what the data generates, and runs as a test.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {
    /// Fail if a generated file is not what the data generates, instead of writing it.
    #[arg(long)]
    check: bool,
}

pub const TABLE_JSON: &str = "torch-npu/transfer_to_npu.json";
pub const TABLE_RS: &str = "crates/scan/src/remap/table.rs";
pub const EMULATOR_TABLE: &str = "assets/emulator/torch_npu/contrib/transfer_table.json";

/// The folder of the kernel tables, one `torch_npu-<version>.json` per pinned wheel.
pub const KERNEL_TABLES: &str = "assets/emulator/npu_emulator/npu_kernels";

/// Every generated file: (path, what the data generates).
pub fn outputs(root: &Path) -> Result<Vec<(String, String)>> {
    let mut out = vec![
        (TABLE_RS.to_owned(), generate(root)?),
        (EMULATOR_TABLE.to_owned(), generate_emulator_table(root)?),
    ];
    let cache = crate::torch_npu::cache_dir();
    let manifest = crate::torch_npu::read_manifest(&root.join("torch-npu/wheels.json"))?;
    for wheel in &manifest.wheels {
        let dir = crate::torch_npu::ensure_kernels(&cache, wheel)?;
        out.push((
            format!("{KERNEL_TABLES}/torch_npu-{}.json", wheel.version),
            generate_kernel_table(&dir, wheel)?,
        ));
    }
    Ok(out)
}

/// The kernel lists of a wheel, relative to its extracted copy.
const KERNEL_LISTS: [&str; 2] = [
    "torch_npu/csrc/aten/npu_native_functions.yaml",
    "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml",
];

/// The sections of a kernel list whose entries are aten ops with an NPU kernel: `supported`
/// (the NPU dispatch key), `autograd` (its autograd key) and `symint` (the `SymInt` forms of
/// supported ops). `custom` declares `torch_npu`'s own `npu_*` operators (not aten), `quant` the
/// quantized-tensor key.
const KERNEL_SECTIONS: [&str; 3] = ["supported", "autograd", "symint"];

/// The kernel table of one wheel (extracted under `dir`), as pretty JSON.
pub fn generate_kernel_table(dir: &Path, wheel: &crate::torch_npu::Wheel) -> Result<String> {
    let mut kernels = std::collections::BTreeSet::new();
    let mut read = Vec::new();
    for rel in KERNEL_LISTS {
        let path = dir.join(rel);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        read.push(rel);
        let doc: serde_norway::Value = serde_norway::from_str(&text).with_context(|| {
            format!(
                "{} (torch-npu {}) is not YAML",
                path.display(),
                wheel.version
            )
        })?;
        for section in KERNEL_SECTIONS {
            let Some(entries) = doc.get(section) else {
                continue;
            };
            if entries.is_null() {
                continue;
            }
            let entries = entries
                .as_sequence()
                .with_context(|| format!("{}: `{section}` is not a list", path.display()))?;
            for entry in entries {
                let func = entry
                    .as_str()
                    .or_else(|| entry.get("func").and_then(serde_norway::Value::as_str))
                    .with_context(|| {
                        format!(
                            "{}: an entry of `{section}` names no op: {entry:?}",
                            path.display()
                        )
                    })?;
                let name = func.split('(').next().unwrap_or(func).trim();
                if name.is_empty() {
                    bail!("{}: an entry of `{section}` names no op", path.display());
                }
                kernels.insert(name.to_owned());
            }
        }
    }
    if read.is_empty() {
        bail!(
            "{} has neither {} nor {}: run `cargo xtask torch-npu` to extract torch-npu {}",
            dir.display(),
            KERNEL_LISTS[0],
            KERNEL_LISTS[1],
            wheel.version
        );
    }
    let strings_path = dir.join(crate::torch_npu::FALLBACK_STRINGS);
    let strings = std::fs::read_to_string(&strings_path).with_context(|| {
        format!(
            "cannot read {}: run `cargo xtask torch-npu` to extract torch-npu {}",
            strings_path.display(),
            wheel.version
        )
    })?;
    let conditional = fallback_messages(&strings);
    let out = serde_json::json!({
        "about": format!(
            "Generated by `cargo xtask codegen` from the torch-npu {} wheel; do not edit. `kernels`: the aten \
             ops (name.overload) with an NPU kernel, the sections {} of {}. `fallback_warnings`: the ops whose \
             CPU fallback {} names in a warning (a kernel that runs on the CPU always or under the conditions \
             the message gives), with the messages. Any other aten op that reaches the NPU backend without a \
             kernel there runs torch_npu's CPU fallback.",
            wheel.version,
            KERNEL_SECTIONS.join("/"),
            read.join(" and "),
            crate::torch_npu::LIBRARY,
        ),
        "torch_npu": wheel.version,
        "torch": wheel.torch,
        "kernels": kernels,
        "fallback_warnings": conditional,
    });
    Ok(serde_json::to_string_pretty(&out)? + "\n")
}

/// Op (`name.overload`, without `aten::`) -> the binary's messages that name its CPU fallback.
fn fallback_messages(strings: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in strings.lines() {
        let lower = line.to_ascii_lowercase();
        if !(lower.contains("fall back") || lower.contains("fallback to run"))
            || !lower.contains("cpu")
        {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("aten::") {
            rest = &rest[at + "aten::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            let name = name.trim_end_matches('.');
            if name.is_empty() {
                continue;
            }
            let messages = out.entry(name.to_owned()).or_default();
            if !messages.iter().any(|m| m == line) {
                messages.push(line.to_owned());
            }
        }
    }
    out
}

pub fn run(args: &Args) -> Result<()> {
    let root = crate::project_root();
    for (rel, generated) in outputs(&root)? {
        let path = root.join(&rel);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == generated {
            eprintln!("xtask: codegen: {rel} is current");
            continue;
        }
        if args.check {
            bail!(
                "{rel} is stale: run `cargo xtask codegen` after editing {TABLE_JSON} or torch-npu/wheels.json"
            );
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &generated)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("xtask: codegen: wrote {rel}");
    }
    Ok(())
}

/// The fields of each version that the stand-in replays, as pretty JSON.
pub fn generate_emulator_table(root: &Path) -> Result<String> {
    const FIELDS: [&str; 8] = [
        "torch",
        "module_patches",
        "npu_all",
        "device_arguments",
        "device_keywords",
        "int_device_functions",
        "assignments",
        "deletions",
    ];
    let path = root.join(TABLE_JSON);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let table: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let mut versions = serde_json::Map::new();
    for (version, entry) in table["versions"]
        .as_object()
        .with_context(|| format!("{} has no `versions` object", path.display()))?
    {
        let mut kept = serde_json::Map::new();
        for field in FIELDS {
            let value = entry.get(field).with_context(|| {
                format!("{}: version {version} has no `{field}`", path.display())
            })?;
            kept.insert(field.to_owned(), value.clone());
        }
        versions.insert(version.clone(), serde_json::Value::Object(kept));
    }
    let out = serde_json::json!({
        "about": format!(
            "Generated by `cargo xtask codegen` from {TABLE_JSON}; do not edit. What each torch-npu release's \
             contrib/transfer_to_npu.py does, replayed by the emulator's stand-in (_table_transfer.py)."
        ),
        "versions": versions,
    });
    Ok(serde_json::to_string_pretty(&out)? + "\n")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[allow(dead_code, reason = "documentation for readers of the table")]
    about: String,
    versions: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    torch: String,
    device_arguments: BTreeMap<String, Vec<String>>,
    device_keywords: Vec<String>,
    int_device_functions: Vec<String>,
    module_patches: BTreeMap<String, String>,
    assignments: BTreeMap<String, String>,
    deletions: Vec<String>,
    npu_all: BTreeMap<String, Vec<String>>,
    cuda_check_kept: BTreeMap<String, String>,
}

/// The text of `crates/scan/src/remap/table.rs` for the data under `root`.
pub fn generate(root: &Path) -> Result<String> {
    let path = root.join(TABLE_JSON);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let table: Table = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid transfer_to_npu table", path.display()))?;
    let mut versions: Vec<(&String, &Entry)> = table.versions.iter().collect();
    versions.sort_by_key(|(v, _)| version_key(v));
    let mut out = String::new();
    out.push_str(
        "//! What `transfer_to_npu` remaps, per torch-npu version, oldest first.\n//!\n\
         //! Generated by `cargo xtask codegen` from `torch-npu/transfer_to_npu.json`: do not edit.\n\n\
         use super::Version;\n\n\
         #[rustfmt::skip]\n\
         pub(super) const VERSIONS: &[Version] = &[\n",
    );
    for (version, e) in versions {
        let _ = writeln!(out, "    Version {{");
        let _ = writeln!(out, "        torch_npu: {version:?},");
        let _ = writeln!(out, "        torch: {:?},", e.torch);
        let _ = writeln!(
            out,
            "        device_arguments: {},",
            named_slices(&e.device_arguments)
        );
        let _ = writeln!(
            out,
            "        device_keywords: {},",
            str_slice(&e.device_keywords)
        );
        let _ = writeln!(
            out,
            "        int_device_functions: {},",
            str_slice(&e.int_device_functions)
        );
        let _ = writeln!(out, "        module_patches: {},", pairs(&e.module_patches));
        let _ = writeln!(out, "        assignments: {},", pairs(&e.assignments));
        let _ = writeln!(out, "        deletions: {},", str_slice(&e.deletions));
        let _ = writeln!(out, "        npu_all: {},", named_slices(&e.npu_all));
        let _ = writeln!(
            out,
            "        cuda_check_kept: {},",
            pairs(&e.cuda_check_kept)
        );
        let _ = writeln!(out, "    }},");
    }
    out.push_str("];\n");
    Ok(out)
}

/// `2.14.0` after `2.8.0.post5`: numeric parts compared as numbers.
fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', 'p', 'o', 's', 't'])
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// `&[("name", &[...]), ...]` for a map of names to lists.
fn named_slices(map: &BTreeMap<String, Vec<String>>) -> String {
    let items: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("({k:?}, {})", str_slice(v)))
        .collect();
    format!("&[{}]", items.join(", "))
}

fn str_slice(items: &[String]) -> String {
    let mut sorted: Vec<&String> = items.iter().collect();
    sorted.sort();
    sorted.dedup();
    format!(
        "&[{}]",
        sorted
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn pairs(map: &BTreeMap<String, String>) -> String {
    format!(
        "&[{}]",
        map.iter()
            .map(|(k, v)| format!("({k:?}, {v:?})"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_files_are_current() {
        let root = crate::project_root();
        for (rel, generated) in outputs(&root).expect("the table generates") {
            let committed = std::fs::read_to_string(root.join(&rel)).unwrap_or_default();
            assert!(
                committed == generated,
                "{rel} is stale: run `cargo xtask codegen` after editing {TABLE_JSON} or torch-npu/wheels.json"
            );
        }
    }

    fn wheel(version: &str) -> crate::torch_npu::Wheel {
        crate::torch_npu::Wheel {
            version: version.to_owned(),
            torch: "9.9.0".to_owned(),
            filename: "w.whl".to_owned(),
            url: "file:///w.whl".to_owned(),
            sha256: "0".repeat(64),
        }
    }

    #[test]
    fn a_kernel_table_lists_the_kernel_sections_and_the_named_fallbacks() {
        let dir = tempfile::tempdir().unwrap();
        let aten = dir.path().join("torch_npu/csrc/aten");
        std::fs::create_dir_all(&aten).unwrap();
        std::fs::create_dir_all(dir.path().join("torch_npu/lib")).unwrap();
        std::fs::write(
            aten.join("npu_native_functions_by_codegen.yaml"),
            "backend: NPU\nsupported:\n- abs\n- func: add.Tensor\n  op_api: true\n\
             - func: bitwise_left_shift.Scalar_Tensor(Scalar self, Tensor other) -> Tensor\n\
             autograd: []\nsymint:\n- as_strided_\ncustom:\n- func: npu_gelu(Tensor self) -> Tensor\n\
             quant:\n- func: int_repr(Tensor self) -> Tensor\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(crate::torch_npu::FALLBACK_STRINGS),
            "CAUTION: The operator aten::logit, aten::logit_ and aten::logit.out is currently not supported on \
             the NPU backend. Now this operator will fallback to run on the CPU and may have performance implications.\n\
             on the NPU backend and will fall back to run on the CPU.\n\
             Sub comm derivation failed, fallback to rootinfo.\n",
        )
        .unwrap();
        let text = generate_kernel_table(dir.path(), &wheel("9.9.0")).unwrap();
        let table: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            table["kernels"],
            serde_json::json!([
                "abs",
                "add.Tensor",
                "as_strided_",
                "bitwise_left_shift.Scalar_Tensor"
            ])
        );
        let warned: Vec<&String> = table["fallback_warnings"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(warned, ["logit", "logit.out", "logit_"]);
        assert_eq!(table["torch_npu"], "9.9.0");
    }

    #[test]
    fn a_wheel_without_kernel_lists_or_with_bad_yaml_names_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let err = format!(
            "{:#}",
            generate_kernel_table(dir.path(), &wheel("9.9.1")).unwrap_err()
        );
        assert!(
            err.contains("cargo xtask torch-npu") && err.contains("9.9.1"),
            "{err}"
        );
        let aten = dir.path().join("torch_npu/csrc/aten");
        std::fs::create_dir_all(&aten).unwrap();
        std::fs::write(aten.join("npu_native_functions.yaml"), "supported: [abs\n").unwrap();
        let err = format!(
            "{:#}",
            generate_kernel_table(dir.path(), &wheel("9.9.1")).unwrap_err()
        );
        assert!(
            err.contains("npu_native_functions.yaml") && err.contains("not YAML"),
            "{err}"
        );
        std::fs::write(
            aten.join("npu_native_functions.yaml"),
            "supported:\n- {op_api: true}\n",
        )
        .unwrap();
        let err = format!(
            "{:#}",
            generate_kernel_table(dir.path(), &wheel("9.9.1")).unwrap_err()
        );
        assert!(err.contains("names no op"), "{err}");
    }

    #[test]
    fn versions_sort_numerically() {
        let mut v = vec!["2.14.0", "2.8.0.post5", "2.1.0.post17", "2.6.0.post5"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, ["2.1.0.post17", "2.6.0.post5", "2.8.0.post5", "2.14.0"]);
    }

    #[test]
    fn a_table_that_does_not_parse_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("torch-npu")).unwrap();
        std::fs::write(
            dir.path().join(TABLE_JSON),
            r#"{"about": "", "versions": {"1.0": {"torch": "1.0"}}}"#,
        )
        .unwrap();
        let err = format!("{:#}", generate(dir.path()).unwrap_err());
        assert!(err.contains("transfer_to_npu.json"), "{err}");
    }
}
