//! What a launch command selects: the values its arguments give (`--policy act`,
//! `--policy.type=act`, a hydra override `policy=act`), the argparse defaults of the entry's
//! options it does not give, and the values of the config files it names or the entry's hydra
//! config composes (the primary config and the group options its `defaults` list picks, the
//! launch's overrides winning). Config files also give `_target_` paths: classes a config-driven
//! factory (`hydra.utils.instantiate`) builds, whose modules are in reach.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The values a launch command selects with, and the `_target_` paths of its configs.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    values: BTreeSet<String>,
    /// `_target_` values, dotted.
    pub targets: Vec<String>,
    /// Config files read (relative to the project root when under it).
    pub configs: Vec<String>,
}

impl Selection {
    /// Whether `key` is among the selected values (compared ignoring ASCII case).
    pub fn has(&self, key: &str) -> bool {
        self.values.contains(&key.to_ascii_lowercase())
    }

    fn add(&mut self, value: &str) {
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        if value.is_empty() || value.len() > 200 {
            return;
        }
        self.values.insert(value.to_ascii_lowercase());
        // A list (`a,b`) or a path (`configs/policy/act.yaml`) selects its parts too.
        for part in value.split([',', '/']) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let stem = part.rsplit_once('.').map_or(part, |(s, ext)| {
                if is_config(ext) || ext == "py" {
                    s
                } else {
                    part
                }
            });
            self.values.insert(part.to_ascii_lowercase());
            self.values.insert(stem.to_ascii_lowercase());
        }
    }

    /// The selection of `words` (the launch command's arguments after its entry) for the project
    /// at `root`; `defaults` are the entry's argparse options with a string default (its flags,
    /// the default), `hydra` its hydra config directory and name (relative to `root`).
    pub fn of(
        root: &Path,
        words: &[String],
        defaults: &[(Vec<String>, String)],
        hydra: Option<(String, String)>,
    ) -> Selection {
        let mut out = Selection::default();
        let mut overrides: Vec<(String, String)> = Vec::new();
        let mut given: BTreeSet<&str> = BTreeSet::new();
        for word in words {
            let (flag, value) = match word.split_once('=') {
                Some((k, v)) => (Some(k), v),
                None if word.starts_with('-') => (Some(word.as_str()), ""),
                None => (None, word.as_str()),
            };
            if let Some(flag) = flag {
                given.insert(flag);
                let key = flag.trim_start_matches(['-', '+', '~']);
                if !flag.starts_with('-') && !value.is_empty() {
                    overrides.push((key.to_owned(), value.to_owned()));
                }
            }
            if value.is_empty() {
                continue;
            }
            out.add(value);
            if let Some(path) = config_file(root, value) {
                out.read_config(root, &path);
            }
        }
        for (flags, default) in defaults {
            if !flags.iter().any(|f| given.contains(f.as_str())) {
                out.add(default);
                if let Some(path) = config_file(root, default) {
                    out.read_config(root, &path);
                }
            }
        }
        if let Some((dir, name)) = hydra {
            out.compose(root, &dir, &name, &overrides);
        }
        out
    }

    /// Read a hydra config: the primary file, then each `defaults` entry `group: option` (the
    /// launch's `group=option` override wins) from `<dir>/<group>/<option>.yaml`.
    fn compose(&mut self, root: &Path, dir: &str, name: &str, overrides: &[(String, String)]) {
        let dir = root.join(dir);
        let name = name.trim_end_matches(".yaml").trim_end_matches(".yml");
        let primary = dir.join(format!("{name}.yaml"));
        let Ok(text) = std::fs::read_to_string(&primary) else {
            return;
        };
        self.read_config(root, &primary);
        let mut groups: Vec<(String, String)> = defaults_list(&text);
        for (key, value) in overrides {
            match groups.iter_mut().find(|(g, _)| g == key) {
                Some(entry) => entry.1.clone_from(value),
                None => {
                    if dir.join(key).is_dir() {
                        groups.push((key.clone(), value.clone()));
                    }
                }
            }
        }
        for (group, option) in groups {
            self.add(&option);
            let file = dir.join(&group).join(format!("{option}.yaml"));
            if file.is_file() {
                self.read_config(root, &file);
            }
        }
    }

    /// Every scalar value of a config file (YAML or TOML read line by line, JSON parsed), and its
    /// `_target_` paths.
    fn read_config(&mut self, root: &Path, path: &Path) {
        let shown = path
            .strip_prefix(root)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        if self.configs.contains(&shown) || self.configs.len() > 64 {
            return;
        }
        self.configs.push(shown);
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                self.json(&value, None);
            }
            return;
        }
        // A hydra `defaults:` list names every group's default option; the ones chosen are
        // read by [`Selection::compose`], after the launch's overrides.
        let mut in_defaults = false;
        for line in text.lines() {
            if !line.starts_with([' ', '-', '#']) && !line.trim().is_empty() {
                in_defaults = line.trim_end() == "defaults:";
            }
            if in_defaults {
                continue;
            }
            let line = line.split(" #").next().unwrap_or(line).trim();
            let line = line.trim_start_matches("- ").trim();
            let Some((key, value)) = line.split_once(':').or_else(|| line.split_once('=')) else {
                continue;
            };
            let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
            if value.is_empty() || value.starts_with(['{', '[', '|', '>']) {
                continue;
            }
            if key.trim() == "_target_" {
                self.targets.push(value.to_owned());
            }
            self.add(value);
        }
    }

    fn json(&mut self, value: &serde_json::Value, key: Option<&str>) {
        match value {
            serde_json::Value::String(s) => {
                if key == Some("_target_") {
                    self.targets.push(s.clone());
                }
                self.add(s);
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| self.json(v, None)),
            serde_json::Value::Object(map) => {
                map.iter().for_each(|(k, v)| self.json(v, Some(k)));
            }
            _ => {}
        }
    }
}

fn is_config(ext: &str) -> bool {
    ["yaml", "yml", "json", "toml"]
        .iter()
        .any(|e| ext.eq_ignore_ascii_case(e))
}

/// The config file a launch argument names, looked for under the project root, then as given.
fn config_file(root: &Path, value: &str) -> Option<PathBuf> {
    let ext = Path::new(value).extension()?.to_str()?;
    if !is_config(ext) {
        return None;
    }
    [root.join(value), PathBuf::from(value)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The `group: option` entries of a hydra `defaults:` list (`- policy: act`,
/// `- override policy: act`, `- policy@model: act`), in order.
fn defaults_list(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with([' ', '-']) {
            inside = line.trim_end() == "defaults:";
            continue;
        }
        if !inside {
            continue;
        }
        let Some(entry) = line.trim().strip_prefix("- ") else {
            continue;
        };
        let Some((group, option)) = entry.split_once(':') else {
            continue;
        };
        let group = group.trim().trim_start_matches("override ").trim();
        let group = group.split('@').next().unwrap_or(group).trim();
        let option = option.trim().trim_matches(|c| c == '"' || c == '\'');
        if !group.is_empty() && !option.is_empty() && option != "null" && option != "???" {
            out.push((group.to_owned(), option.to_owned()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_words_select_values() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let words: Vec<String> = ["--policy.type=act", "--steps", "10", "env=aloha"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let s = Selection::of(dir.path(), &words, &[], None);
        assert!(s.has("act") && s.has("aloha") && s.has("10"));
        assert!(!s.has("diffusion"));
        let defaults = vec![(vec!["--policy".to_owned()], "diffusion".to_owned())];
        assert!(Selection::of(dir.path(), &[], &defaults, None).has("diffusion"));
        let given = vec!["--policy".to_owned(), "act".to_owned()];
        assert!(!Selection::of(dir.path(), &given, &defaults, None).has("diffusion"));
    }

    #[test]
    fn hydra_defaults_and_overrides() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("conf");
        std::fs::create_dir_all(conf.join("policy")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            conf.join("train.yaml"),
            "defaults:\n  - policy: act\n  - _self_\nlr: 0.1\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            conf.join("policy/act.yaml"),
            "_target_: pkg.policies.act.ActPolicy\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            conf.join("policy/vq.yaml"),
            "_target_: pkg.policies.vq.VqPolicy\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let hydra = Some(("conf".to_owned(), "train".to_owned()));
        let s = Selection::of(dir.path(), &[], &[], hydra.clone());
        assert_eq!(s.targets, ["pkg.policies.act.ActPolicy"]);
        let s = Selection::of(dir.path(), &["policy=vq".to_owned()], &[], hydra);
        assert_eq!(s.targets, ["pkg.policies.vq.VqPolicy"]);
        assert!(s.has("vq") && !s.has("act"));
    }
}
