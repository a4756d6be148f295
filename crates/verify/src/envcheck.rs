//! Environment checks computed on this side: `ASCEND_RT_VISIBLE_DEVICES` and the performance
//! variables against `env_npu.sh`'s recommendations (`NPU-FACTS.md`, "`torch_npu` basics" and
//! "Performance environment (training)").

use crate::report::Check;
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// What `torch_npu` makes of `ASCEND_RT_VISIBLE_DEVICES`.
#[derive(Debug, PartialEq, Eq)]
pub struct DeviceList {
    /// The ids as written are ascending, comma-separated digits with no spaces.
    pub well_formed: bool,
    /// The ids `torch_npu` actually uses: parsing stops at the first space or bad id.
    pub effective: Vec<u32>,
    pub problem: Option<String>,
}

pub fn parse_visible_devices(value: &str) -> DeviceList {
    let mut effective = Vec::new();
    let mut problem = None;
    for token in value.split(',') {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            let why = if token.contains(char::is_whitespace) {
                format!("a space in `{token}`")
            } else if token.is_empty() {
                "an empty id".to_owned()
            } else {
                format!("the id `{token}` is not a number")
            };
            // A leading space ends the list before the id; trailing garbage after digits keeps the digits.
            let digits: String = token.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(id) = digits.parse::<u32>() {
                effective.push(id);
            }
            problem = Some(why);
            break;
        }
        let Ok(id) = token.parse::<u32>() else {
            problem = Some(format!("the id `{token}` is out of range"));
            break;
        };
        if effective.last().is_some_and(|last| *last >= id) {
            problem = Some(format!(
                "`{id}` does not ascend (ids must be in increasing order)"
            ));
            break;
        }
        effective.push(id);
    }
    DeviceList {
        well_formed: problem.is_none(),
        effective,
        problem,
    }
}

/// `ASCEND_RT_VISIBLE_DEVICES` well formed and matching the device count `torch_npu` reports.
pub fn visible_devices(value: Option<&str>, device_count: Option<u64>, emulated: bool) -> Check {
    const NAME: &str = "runtime.visible_devices";
    let malformed = value.is_some_and(|v| !parse_visible_devices(v).well_formed);
    if device_count == Some(0) && !malformed {
        return Check::skip(
            NAME,
            format!(
                "ASCEND_RT_VISIBLE_DEVICES={}: no device is visible to compare with",
                value.map_or_else(|| "(unset)".to_owned(), |v| format!("`{v}`"))
            ),
        );
    }
    let count_text = device_count.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
    let Some(value) = value else {
        return Check {
            emulated,
            ..Check::pass(
                NAME,
                format!("ASCEND_RT_VISIBLE_DEVICES is unset: all {count_text} devices are visible"),
            )
        };
    };
    let list = parse_visible_devices(value);
    if let Some(problem) = &list.problem {
        let seen: Vec<String> = list.effective.iter().map(u32::to_string).collect();
        return Check::fail(
            NAME,
            format!(
                "ASCEND_RT_VISIBLE_DEVICES=`{value}` is malformed ({problem}); torch_npu reads it as `{}`",
                seen.join(",")
            ),
            "write ascending ids separated by commas, without spaces, e.g. ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 \
             (NPU-FACTS.md: parsing stops at the first space or bad id)",
        );
    }
    let listed = list.effective.len();
    match device_count {
        _ if emulated => {
            let mut check = Check::pass(
                NAME,
                format!(
                    "ASCEND_RT_VISIBLE_DEVICES=`{value}` is well formed ({listed} devices); the count is not compared on the emulated device"
                ),
            );
            check.emulated = true;
            check
        }
        Some(count) if count == listed as u64 => Check::pass(
            NAME,
            format!("ASCEND_RT_VISIBLE_DEVICES=`{value}`: {listed} devices, as torch_npu sees"),
        ),
        Some(count) => Check::fail(
            NAME,
            format!(
                "ASCEND_RT_VISIBLE_DEVICES=`{value}` lists {listed} devices but torch_npu sees {count}"
            ),
            "list only devices this machine has (`npu-smi info`); ids are physical ids, renumbered from 0 in the process",
        ),
        None => Check::pass(
            NAME,
            format!("ASCEND_RT_VISIBLE_DEVICES=`{value}` is well formed ({listed} devices)"),
        ),
    }
}

static DEFAULT_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"^\s*:\s*"\$\{([A-Z_][A-Z0-9_]*):=([^}]*)\}""#).unwrap());

/// One variable `env_npu.sh` sets: its default and the comment above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recommended {
    pub value: String,
    pub reason: String,
}

/// The exported `: "${VAR:=VALUE}"` defaults of an `env_npu.sh`, each with its own comment: the
/// comment lines just above it, back to the nearest blank `#` line or `# ----` rule, so a section
/// header above the first variable of a section is not part of that variable's reason.
pub fn env_defaults(text: &str) -> BTreeMap<String, Recommended> {
    let mut out = BTreeMap::new();
    let mut comment: Vec<String> = Vec::new();
    let mut last_reason = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(c) = trimmed.strip_prefix('#') {
            let c = c.trim();
            if c.is_empty()
                || c.chars()
                    .all(|ch| matches!(ch, '-' | '=' | '#' | '*' | '~'))
            {
                // A paragraph break or a rule: what was above belongs to something else.
                comment.clear();
            } else {
                comment.push(c.to_owned());
            }
        } else if let Some(c) = DEFAULT_LINE.captures(line) {
            // Consecutive defaults share the comment above the first.
            if !comment.is_empty() {
                last_reason = comment.join(" ");
            }
            comment.clear();
            out.insert(
                c[1].to_owned(),
                Recommended {
                    value: c[2].trim_matches('"').to_owned(),
                    reason: last_reason.clone(),
                },
            );
        } else if !trimmed.starts_with("export ") {
            comment.clear();
            last_reason.clear();
        }
    }
    // Only exported variables reach the training process; the rest configure env_npu.sh itself.
    out.retain(|name, _| {
        text.lines().any(|l| {
            l.trim()
                .strip_prefix("export ")
                .is_some_and(|rest| rest.split_whitespace().any(|w| w == name))
        })
    });
    out
}

/// Whether `value` is as good as the recommendation for `name` (`NPU-FACTS.md`'s table).
fn acceptable(name: &str, value: &str, recommended: &str) -> bool {
    match name {
        "TASK_QUEUE_ENABLE" => matches!(value, "1" | "2"),
        "CPU_AFFINITY_CONF" => value.starts_with('1') || value.starts_with('2'),
        "HCCL_CONNECT_TIMEOUT" => value
            .parse::<u32>()
            .is_ok_and(|v| (120..=7200).contains(&v)),
        "ASCEND_GLOBAL_LOG_LEVEL" => value.parse::<u32>().is_ok_and(|v| v >= 3),
        _ => value.eq_ignore_ascii_case(recommended),
    }
}

/// Effective performance variables (this environment, else the project's `env_npu.sh` defaults,
/// which `train.sh` applies) against the shipped `env_npu.sh`.
pub fn perf_env(
    shipped: &str,
    project: Option<&str>,
    environ: &dyn Fn(&str) -> Option<String>,
) -> Check {
    const NAME: &str = "runtime.perf_env";
    let recommended = env_defaults(shipped);
    let project_defaults = project.map(env_defaults).unwrap_or_default();
    let mut off = Vec::new();
    let mut data = serde_json::Map::new();
    for (name, rec) in &recommended {
        let (value, from) = match environ(name) {
            Some(v) => (Some(v), "this environment"),
            None => match project_defaults.get(name) {
                Some(d) => (Some(d.value.clone()), "env_npu.sh"),
                None => (None, "unset"),
            },
        };
        data.insert(
            name.clone(),
            serde_json::json!({"value": value, "from": from, "recommended": rec.value}),
        );
        match &value {
            Some(v) if acceptable(name, v, &rec.value) => {}
            Some(v) => off.push(format!(
                "{name}={v} ({from}; recommended {}: {})",
                rec.value, rec.reason
            )),
            None => off.push(format!(
                "{name} unset (recommended {}: {})",
                rec.value, rec.reason
            )),
        }
    }
    if recommended.is_empty() {
        return Check::skip(
            NAME,
            "the shipped env_npu.sh has no recommendations to compare with",
        );
    }
    let data = serde_json::Value::Object(data);
    if off.is_empty() {
        Check::pass(
            NAME,
            format!(
                "{} performance variables match env_npu.sh's recommendations",
                recommended.len()
            ),
        )
        .with_data(data)
    } else {
        Check::warn(
            NAME,
            format!("{} of {} performance variables differ: {}", off.len(), recommended.len(), off.join("; ")),
            "launch through `bash migrate_to_cloudrobo/train.sh …` (it sources env_npu.sh), or restore the shipped \
             defaults in migrate_to_cloudrobo/env_npu.sh",
        )
        .with_data(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Status;

    #[test]
    fn well_formed_lists() {
        let list = parse_visible_devices("0,1,3");
        assert!(list.well_formed);
        assert_eq!(list.effective, vec![0, 1, 3]);
    }

    #[test]
    fn spaces_and_order_are_problems() {
        let list = parse_visible_devices("1, 2,3");
        assert!(!list.well_formed);
        assert_eq!(
            list.effective,
            vec![1],
            "NPU-FACTS: `1, 2,3` gives only device 1"
        );
        let list = parse_visible_devices("2,1");
        assert!(!list.well_formed);
        assert_eq!(list.effective, vec![2]);
        assert!(!parse_visible_devices("0,0").well_formed);
        assert!(!parse_visible_devices("").well_formed);
        assert!(!parse_visible_devices("a").well_formed);
    }

    #[test]
    fn count_must_match() {
        assert_eq!(
            visible_devices(Some("0,1"), Some(2), false).status,
            Status::Pass
        );
        assert_eq!(
            visible_devices(Some("0,1"), Some(1), false).status,
            Status::Fail
        );
        assert_eq!(
            visible_devices(Some("0, 1"), Some(2), false).status,
            Status::Fail
        );
        assert_eq!(visible_devices(None, Some(8), false).status, Status::Pass);
        assert_eq!(visible_devices(None, Some(0), false).status, Status::Skip);
        assert_eq!(
            visible_devices(Some("0, 1"), Some(0), false).status,
            Status::Fail
        );
        let emulated = visible_devices(Some("0,1"), Some(1), true);
        assert_eq!(emulated.status, Status::Pass);
        assert!(emulated.emulated);
    }

    const SHIPPED: &str = "# Dispatch pipeline level 2.\n: \"${TASK_QUEUE_ENABLE:=2}\"\nexport TASK_QUEUE_ENABLE\n\
# Expandable segments.\n: \"${PYTORCH_NPU_ALLOC_CONF:=expandable_segments:True}\"\nexport PYTORCH_NPU_ALLOC_CONF\n\
# Sync launches are slow.\n: \"${ASCEND_LAUNCH_BLOCKING:=0}\"\nexport ASCEND_LAUNCH_BLOCKING\n";

    #[test]
    fn defaults_and_reasons_are_read() {
        let d = env_defaults(SHIPPED);
        assert_eq!(d["TASK_QUEUE_ENABLE"].value, "2");
        assert_eq!(d["TASK_QUEUE_ENABLE"].reason, "Dispatch pipeline level 2.");
        assert_eq!(
            d["PYTORCH_NPU_ALLOC_CONF"].value,
            "expandable_segments:True"
        );
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn reasons_of_the_shipped_env_npu_are_each_variables_own_comment() {
        let shipped = patch_assets::get("templates/env_npu.sh").expect("env_npu.sh is embedded");
        let d = env_defaults(&String::from_utf8_lossy(shipped));
        assert_eq!(
            d["TASK_QUEUE_ENABLE"].reason,
            "Operator dispatch pipeline level 2 overlaps host dispatch with device work; use 1 if memory is tight."
        );
        for (name, r) in &d {
            assert!(
                !r.reason.contains("---") && !r.reason.contains("Performance ("),
                "{name}: {}",
                r.reason
            );
            assert!(!r.reason.is_empty(), "{name} has no reason");
        }
    }

    #[test]
    fn perf_env_compares_effective_values() {
        let none = |_: &str| None;
        assert_eq!(perf_env(SHIPPED, Some(SHIPPED), &none).status, Status::Pass);
        assert_eq!(perf_env(SHIPPED, None, &none).status, Status::Warn);
        let blocking = |n: &str| (n == "ASCEND_LAUNCH_BLOCKING").then(|| "1".to_owned());
        let check = perf_env(SHIPPED, Some(SHIPPED), &blocking);
        assert_eq!(check.status, Status::Warn);
        assert!(
            check.detail.contains("ASCEND_LAUNCH_BLOCKING=1"),
            "{}",
            check.detail
        );
        let queue_one = |n: &str| (n == "TASK_QUEUE_ENABLE").then(|| "1".to_owned());
        assert_eq!(
            perf_env(SHIPPED, Some(SHIPPED), &queue_one).status,
            Status::Pass
        );
    }
}
