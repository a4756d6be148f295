//! The launch environment: what sourcing `env_npu.sh` changes, plus `PYTHONPATH`.
//!
//! `env_npu.sh` is sourced by `bash --noprofile --norc` with this process's environment; the
//! environment bash exports afterwards is compared with ours and the differences become the
//! [`Plan`]. Its output goes to our stderr, so CANN's messages and the script's warnings show.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The project folder that holds the port's files.
pub const MIGRATE_DIR: &str = patch_assets::install::MIGRATE_DIR;

/// Variables bash itself sets or bumps in every shell; they are not the script's doing.
const SHELL_OWN: [&str; 4] = ["_", "SHLVL", "PWD", "OLDPWD"];

/// Source the file named by `$1` (its stdout to stderr), then print the exported environment.
const SOURCE_AND_DUMP: &str =
    r#". "$1" >&2; npu_train_status=$?; env -0; exit "$npu_train_status""#;

/// The variable that tells the inserted NPU setup where `migrate_to_cloudrobo/` is (the
/// absolute folder); `train.sh` and `env_npu.sh` export it too.
pub const MIGRATE_DIR_VAR: &str = "NPU_PATCHER_MIGRATE_DIR";

/// What the launcher will change in the command's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Variable → new value, or `None` to remove it. Sorted by name.
    pub changes: BTreeMap<OsString, Option<OsString>>,
    /// The absolute `migrate_to_cloudrobo/` folder.
    pub migrate_dir: PathBuf,
    /// Things the user should know (a missing env file, a script that returned an error).
    pub notes: Vec<String>,
}

/// Build the plan for `project`, starting from `current` (normally this process's environment).
pub fn plan(project: &Path, current: &BTreeMap<OsString, OsString>) -> Result<Plan> {
    let dir = project.join(MIGRATE_DIR);
    if !dir.is_dir() {
        return Err(Error::NoMigrateDir {
            path: dir,
            project: project.to_owned(),
        });
    }
    let migrate_dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut notes = Vec::new();
    let script = migrate_dir.join("env_npu.sh");
    // Keeps the built-in copy alive while bash reads it.
    let mut _builtin = None;
    let env_file = if script.is_file() {
        script
    } else {
        notes.push(format!(
            "{} is missing; using the built-in env_npu.sh (restore the file with `npu-assets init {}`)",
            script.display(),
            project.display()
        ));
        let tmp = builtin_env_file()?;
        let path = tmp.path().to_owned();
        _builtin = Some(tmp);
        path
    };
    let sourced = source(&env_file, current, &mut notes)?;
    let mut changes = diff(current, &sourced);
    let after = |name: &str| -> Option<OsString> {
        match changes.get(OsStr::new(name)) {
            Some(change) => change.clone(),
            None => current.get(OsStr::new(name)).cloned(),
        }
    };
    let python_path = prepend_path(&migrate_dir, after("PYTHONPATH").as_deref());
    let unbuffered = after("PYTHONUNBUFFERED");
    if current.get(OsStr::new("PYTHONPATH")) == Some(&python_path) {
        changes.remove(OsStr::new("PYTHONPATH"));
    } else {
        changes.insert("PYTHONPATH".into(), Some(python_path));
    }
    if unbuffered.is_none() {
        // Python block-buffers a pipe: without this, the log would lag the training by kilobytes.
        changes.insert("PYTHONUNBUFFERED".into(), Some("1".into()));
    }
    // Where the NPU setup `npu-scan --fix` inserts finds runtime_patches.py, also when the entry
    // is not in a source checkout (an installed package).
    let migrate_var = OsString::from(MIGRATE_DIR_VAR);
    if current.get(&migrate_var) == Some(&migrate_dir.clone().into_os_string()) {
        changes.remove(&migrate_var);
    } else {
        changes.insert(migrate_var, Some(migrate_dir.clone().into_os_string()));
    }
    Ok(Plan {
        changes,
        migrate_dir,
        notes,
    })
}

/// Run emulated: `emulator` goes on `PYTHONPATH` right after `migrate_to_cloudrobo/` (so
/// `import torch_npu` loads the stand-in), plus the environment of an emulated run
/// ([`patch_assets::emulator::RUN_ENV`]).
pub fn emulate(plan: &mut Plan, emulator: &Path, current: &BTreeMap<OsString, OsString>) {
    let key = OsString::from("PYTHONPATH");
    let now = match plan.changes.get(&key) {
        Some(change) => change.clone(),
        None => current.get(&key).cloned(),
    };
    // The list without migrate_to_cloudrobo/, then both in front, in that order.
    let rest: Vec<&[u8]> = now
        .as_deref()
        .map(|list| {
            list.as_bytes()
                .split(|&b| b == b':')
                .filter(|p| !p.is_empty() && *p != plan.migrate_dir.as_os_str().as_bytes())
                .collect()
        })
        .unwrap_or_default();
    let with_emulator = prepend_path(emulator, Some(OsStr::from_bytes(&rest.join(&b':'))));
    let python_path = prepend_path(&plan.migrate_dir, Some(&with_emulator));
    plan.changes.insert(key, Some(python_path));
    for (name, value) in patch_assets::emulator::RUN_ENV {
        plan.changes.insert(name.into(), Some(value.into()));
    }
}

fn builtin_env_file() -> Result<tempfile::NamedTempFile> {
    let bytes = patch_assets::get("templates/env_npu.sh").unwrap_or_default();
    let write_err = |source| Error::Write {
        path: std::env::temp_dir().join("npu-train-env_npu.sh"),
        source,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix("npu-train-env_npu.")
        .suffix(".sh")
        .tempfile()
        .map_err(write_err)?;
    tmp.write_all(bytes).map_err(write_err)?;
    tmp.flush().map_err(write_err)?;
    Ok(tmp)
}

fn source(
    env_file: &Path,
    current: &BTreeMap<OsString, OsString>,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<OsString, OsString>> {
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", SOURCE_AND_DUMP, "npu-train"])
        .arg(env_file)
        .env_clear()
        .envs(current)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| Error::Bash {
            path: env_file.to_owned(),
            source,
        })?;
    if out.stdout.is_empty() {
        return Err(Error::EnvScript {
            path: env_file.to_owned(),
            status: out.status.to_string(),
        });
    }
    if !out.status.success() {
        notes.push(format!(
            "sourcing {} returned {}; continuing with the environment it set",
            env_file.display(),
            out.status
        ));
    }
    Ok(parse_env0(&out.stdout))
}

/// `env -0` output: `NAME=VALUE` records separated by NUL.
fn parse_env0(bytes: &[u8]) -> BTreeMap<OsString, OsString> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|record| {
            let eq = record.iter().position(|&b| b == b'=')?;
            let (name, value) = (&record[..eq], &record[eq + 1..]);
            (!name.is_empty()).then(|| {
                (
                    OsString::from_vec(name.to_vec()),
                    OsString::from_vec(value.to_vec()),
                )
            })
        })
        .collect()
}

fn diff(
    before: &BTreeMap<OsString, OsString>,
    after: &BTreeMap<OsString, OsString>,
) -> BTreeMap<OsString, Option<OsString>> {
    let own = |k: &OsString| SHELL_OWN.iter().any(|s| OsStr::new(s) == k);
    let mut changes = BTreeMap::new();
    for (k, v) in after {
        if !own(k) && before.get(k) != Some(v) {
            changes.insert(k.clone(), Some(v.clone()));
        }
    }
    for k in before.keys() {
        if !own(k) && !after.contains_key(k) {
            changes.insert(k.clone(), None);
        }
    }
    changes
}

/// `dir` first on a `:`-separated path list, unless it is already on it.
fn prepend_path(dir: &Path, existing: Option<&OsStr>) -> OsString {
    let dir = dir.as_os_str();
    match existing {
        Some(list) if !list.is_empty() => {
            if list
                .as_bytes()
                .split(|&b| b == b':')
                .any(|p| p == dir.as_bytes())
            {
                return list.to_owned();
            }
            let mut out = dir.to_owned();
            out.push(":");
            out.push(list);
            out
        }
        _ => dir.to_owned(),
    }
}

/// The plan as a script that sets the same environment: `export NAME='value'` / `unset NAME`.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    for (name, value) in &plan.changes {
        let name = name.to_string_lossy();
        let _ = match value {
            Some(v) => writeln!(out, "export {name}={}", shell_quote(&v.to_string_lossy())),
            None => writeln!(out, "unset {name}"),
        };
    }
    out
}

/// Quote for POSIX shells: plain words stay as they are, anything else goes in single quotes.
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,=+@%".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<OsString, OsString> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn emulate_puts_the_emulator_right_after_the_migrate_dir() {
        let mut plan = Plan {
            migrate_dir: PathBuf::from("/p/migrate_to_cloudrobo"),
            ..Plan::default()
        };
        plan.changes.insert(
            "PYTHONPATH".into(),
            Some("/p/migrate_to_cloudrobo:/user/lib".into()),
        );
        emulate(&mut plan, Path::new("/skill/emulator"), &map(&[]));
        assert_eq!(
            plan.changes[OsStr::new("PYTHONPATH")].as_deref(),
            Some(OsStr::new(
                "/p/migrate_to_cloudrobo:/skill/emulator:/user/lib"
            ))
        );
        assert_eq!(
            plan.changes[OsStr::new("CUDA_VISIBLE_DEVICES")].as_deref(),
            Some(OsStr::new(""))
        );
        assert_eq!(
            plan.changes[OsStr::new("NPU_PATCHER_EMULATED")].as_deref(),
            Some(OsStr::new("1"))
        );

        // Unchanged PYTHONPATH (already right in the caller's environment) is read from there.
        let mut plan = Plan {
            migrate_dir: PathBuf::from("/p/migrate_to_cloudrobo"),
            ..Plan::default()
        };
        let current = map(&[("PYTHONPATH", "/p/migrate_to_cloudrobo")]);
        emulate(&mut plan, Path::new("/e"), &current);
        assert_eq!(
            plan.changes[OsStr::new("PYTHONPATH")].as_deref(),
            Some(OsStr::new("/p/migrate_to_cloudrobo:/e"))
        );
    }

    #[test]
    fn env0_parses_values_with_equals_and_newlines() {
        let parsed = parse_env0(b"A=1\0B=x=y\nz\0=bad\0C=\0");
        assert_eq!(parsed, map(&[("A", "1"), ("B", "x=y\nz"), ("C", "")]));
    }

    #[test]
    fn diff_ignores_the_shell_own_variables() {
        let before = map(&[
            ("KEEP", "1"),
            ("GONE", "x"),
            ("SHLVL", "1"),
            ("CHANGED", "a"),
        ]);
        let after = map(&[
            ("KEEP", "1"),
            ("SHLVL", "2"),
            ("_", "/usr/bin/env"),
            ("CHANGED", "b"),
            ("NEW", "n"),
        ]);
        let changes = diff(&before, &after);
        let expect: BTreeMap<OsString, Option<OsString>> =
            [("CHANGED", Some("b")), ("GONE", None), ("NEW", Some("n"))]
                .into_iter()
                .map(|(k, v)| (OsString::from(k), v.map(OsString::from)))
                .collect();
        assert_eq!(changes, expect);
    }

    #[test]
    fn pythonpath_gets_the_folder_once() {
        let dir = Path::new("/p/migrate_to_cloudrobo");
        assert_eq!(prepend_path(dir, None), "/p/migrate_to_cloudrobo");
        assert_eq!(
            prepend_path(dir, Some(OsStr::new(""))),
            "/p/migrate_to_cloudrobo"
        );
        assert_eq!(
            prepend_path(dir, Some(OsStr::new("/a:/b"))),
            "/p/migrate_to_cloudrobo:/a:/b"
        );
        assert_eq!(
            prepend_path(dir, Some(OsStr::new("/a:/p/migrate_to_cloudrobo"))),
            "/a:/p/migrate_to_cloudrobo"
        );
    }

    #[test]
    fn quoting_round_trips_through_a_shell() {
        assert_eq!(
            shell_quote("expandable_segments:True"),
            "expandable_segments:True"
        );
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}

/// A warning when `ASCEND_RT_VISIBLE_DEVICES` would not select what it seems to. Per
/// NPU-FACTS.md the runtime wants ascending ids and stops parsing at the first space or bad id
/// (`"1, 2,3"` selects only device 1), silently.
pub fn check_visible_devices(value: &str) -> Option<String> {
    let mut previous: Option<u32> = None;
    for (i, token) in value.split(',').enumerate() {
        let problem = match token.parse::<u32>() {
            _ if token.trim() != token || token.is_empty() => "a space or an empty id",
            Err(_) => "an id that is not a number",
            Ok(id) if previous.is_some_and(|p| id <= p) => "ids not in ascending order",
            Ok(id) => {
                previous = Some(id);
                continue;
            }
        };
        let used = value.split(',').take(i).collect::<Vec<_>>().join(",");
        let used = if used.is_empty() {
            "no device".to_owned()
        } else {
            format!("only `{used}`")
        };
        return Some(format!(
            "ASCEND_RT_VISIBLE_DEVICES=`{value}` has {problem}; the runtime stops reading there and uses {used} (write ascending ids with commas only, e.g. `0,1,2,3`)"
        ));
    }
    None
}

#[cfg(test)]
mod visible_devices_tests {
    use super::check_visible_devices;

    #[test]
    fn well_formed_lists_pass() {
        assert_eq!(check_visible_devices("0"), None);
        assert_eq!(check_visible_devices("0,1,2,3"), None);
        assert_eq!(check_visible_devices("1,4,7"), None);
    }

    #[test]
    fn the_runtime_traps_are_explained() {
        let w = check_visible_devices("1, 2,3").unwrap();
        assert!(w.contains("a space") && w.contains("only `1`"), "{w}");
        let w = check_visible_devices("2,1").unwrap();
        assert!(w.contains("ascending") && w.contains("only `2`"), "{w}");
        let w = check_visible_devices("npu0").unwrap();
        assert!(w.contains("not a number") && w.contains("no device"), "{w}");
        assert!(check_visible_devices("0,,1").unwrap().contains("empty id"));
    }
}
