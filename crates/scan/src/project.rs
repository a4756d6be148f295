//! Facts across files: what each file imports, which files are entry points, which project
//! files an entry point reaches through imports, and whether that program sets up the NPU.
//!
//! Each file's checker fills a [`FileFacts`] ([`crate::facts`]); after every file is checked they
//! are gathered in a [`Project`], which resolves imports to project files (relative to the importing file's
//! directory first, as a script's directory is on `sys.path`, then by the longest dotted
//! suffix of a project module name, which covers `src/` layouts).

pub use crate::facts::{
    ConfigArgument, ConfigStyle, EntryKind, EntryMarker, FileFacts, ImportFact, PatcherCall, Site,
};
use foldhash::{HashMap, HashMapExt as _};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// An entry point of the project: a file that starts a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of one file, one field each"
)]
pub struct EntryPoint {
    /// Relative `/` path.
    pub file: String,
    /// Where it starts (the main guard, else the decorator or call).
    pub line: u32,
    pub column: u32,
    /// The most specific kind seen in the file (hydra over a plain main guard).
    pub kind: EntryKind,
    /// Every kind seen in the file.
    pub kinds: Vec<EntryKind>,
    /// The function it runs, when visible.
    pub function: Option<String>,
    /// The program (this file or a project file it imports, transitively) uses torch.
    pub uses_torch: bool,
    /// The program sets up the NPU (`import torch_npu`, `transfer_to_npu`, the runtime
    /// patcher) in this file or a project file it imports.
    pub sets_up_npu: bool,
    /// The entry file itself sets up the NPU.
    pub sets_up_npu_here: bool,
    /// The program (this file or a project file it imports, transitively) builds an optimizer
    /// and steps it ([`FileFacts::trains`]; one file may build it and another step it).
    pub trains: bool,
    /// The entry file itself builds an optimizer and steps it.
    pub trains_here: bool,
    /// How it takes its configuration, when visible.
    pub config: ConfigStyle,
    /// The source line of the entry point.
    pub snippet: String,
    /// Enclosing symbol of the marker (for a decorated function, the function).
    pub symbol: Option<String>,
}

/// Facts of every file of one scan.
#[derive(Debug, Default)]
pub struct Project {
    files: BTreeMap<String, FileFacts>,
    /// Dotted module name → files with that name (full path and every suffix).
    modules: HashMap<String, Vec<String>>,
    /// File paths in order; the indices of `imports` and `importers`.
    paths: Vec<String>,
    index: HashMap<String, usize>,
    /// Project files each file imports directly (sorted, without itself), resolved once.
    imports: Vec<Vec<usize>>,
    /// Project files that import each file directly (sorted).
    importers: Vec<Vec<usize>>,
    /// `.cu` / `.cuh` sources in the tree.
    pub cuda_sources: Vec<String>,
    /// Config files in the tree.
    pub config_files: Vec<String>,
    /// The project's configured line length ([`crate::line_length`]), for inserted code.
    pub line_length: usize,
}

impl Project {
    /// Gather per-file facts (any order).
    pub fn new(
        facts: impl IntoIterator<Item = FileFacts>,
        cuda_sources: Vec<String>,
        config_files: Vec<String>,
    ) -> Project {
        let mut files = BTreeMap::new();
        let mut modules: HashMap<String, Vec<String>> = HashMap::new();
        for f in facts {
            let (module, _) = crate::names::module_name(&f.path);
            let parts: Vec<&str> = module.split('.').collect();
            for i in 0..parts.len() {
                let name = parts[i..].join(".");
                if !name.is_empty() {
                    modules.entry(name).or_default().push(f.path.clone());
                }
            }
            files.insert(f.path.clone(), f);
        }
        for paths in modules.values_mut() {
            // Prefer the shallowest file for an ambiguous suffix.
            paths.sort_by_key(|p| (p.matches('/').count(), p.clone()));
        }
        let mut project = Project {
            files,
            modules,
            paths: Vec::new(),
            index: HashMap::new(),
            imports: Vec::new(),
            importers: Vec::new(),
            cuda_sources,
            config_files,
            line_length: crate::line_length::DEFAULT,
        };
        project.link();
        project
    }

    /// Resolve every import once into the `imports` / `importers` graph.
    fn link(&mut self) {
        self.paths = self.files.keys().cloned().collect();
        self.index = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i))
            .collect();
        let mut imports = vec![Vec::new(); self.paths.len()];
        let mut importers = vec![Vec::new(); self.paths.len()];
        for (i, path) in self.paths.iter().enumerate() {
            let Some(facts) = self.files.get(path) else {
                continue;
            };
            let mut targets: Vec<usize> = facts
                .imports
                .iter()
                .filter_map(|imp| self.resolve_import(path, imp))
                .filter_map(|p| self.index.get(p).copied())
                .filter(|&j| j != i)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            for &j in &targets {
                importers[j].push(i);
            }
            imports[i] = targets;
        }
        self.imports = imports;
        self.importers = importers;
    }

    /// Facts of every Python file, by path.
    pub fn files(&self) -> &BTreeMap<String, FileFacts> {
        &self.files
    }

    /// Facts of one file.
    pub fn file(&self, path: &str) -> Option<&FileFacts> {
        self.files.get(path)
    }

    /// The project file an import in `from_file` refers to, if it is one of ours.
    pub fn resolve_import(&self, from_file: &str, import: &ImportFact) -> Option<&str> {
        let dir = from_file.rsplit_once('/').map_or("", |(d, _)| d);
        let mut path = String::new();
        for candidate in &import.candidates {
            // The importing script's directory is on sys.path.
            path.clear();
            if !dir.is_empty() {
                path.push_str(dir);
                path.push('/');
            }
            path.extend(candidate.chars().map(|c| if c == '.' { '/' } else { c }));
            let stem = path.len();
            for suffix in [".py", "/__init__.py"] {
                path.truncate(stem);
                path.push_str(suffix);
                if let Some((key, _)) = self.files.get_key_value(path.as_str()) {
                    return Some(key);
                }
            }
            // Then any project module whose dotted name ends with the candidate: the one
            // nearest the importing file (a repository holding several programs, each with
            // its own `model/` package, imports its own).
            if let Some(nearest) = self.modules.get(candidate).and_then(|paths| {
                paths
                    .iter()
                    .min_by_key(|p| std::cmp::Reverse(shared_dirs(dir, p)))
            }) {
                return Some(nearest);
            }
        }
        None
    }

    /// `file` sits in a package (its directory has an `__init__.py`): a module, not a script.
    pub fn in_package(&self, file: &str) -> bool {
        file.rsplit_once('/')
            .is_some_and(|(dir, _)| self.files.contains_key(&format!("{dir}/__init__.py")))
    }

    /// The project files `file` imports directly, sorted.
    pub fn imports_of(&self, file: &str) -> Vec<&str> {
        self.index.get(file).map_or_else(Vec::new, |&i| {
            self.imports[i]
                .iter()
                .map(|&j| self.paths[j].as_str())
                .collect()
        })
    }

    /// The project files that import `file` directly, sorted.
    pub fn importers_of(&self, file: &str) -> Vec<&str> {
        self.index.get(file).map_or_else(Vec::new, |&i| {
            self.importers[i]
                .iter()
                .map(|&j| self.paths[j].as_str())
                .collect()
        })
    }

    /// `file` and every project file it reaches through imports, transitively; sorted, `file`
    /// first.
    pub fn reachable(&self, file: &str) -> Vec<&str> {
        let Some(&start) = self.index.get(file) else {
            return Vec::new();
        };
        let seen = self.reached(start);
        let mut out = vec![self.paths[start].as_str()];
        out.extend(
            seen.iter()
                .enumerate()
                .filter(|&(i, &s)| s && i != start)
                .map(|(i, _)| self.paths[i].as_str()),
        );
        out
    }

    /// Which files (by index) file `start` reaches through imports, itself included.
    fn reached(&self, start: usize) -> Vec<bool> {
        let mut seen = vec![false; self.paths.len()];
        seen[start] = true;
        let mut queue = VecDeque::from([start]);
        while let Some(f) = queue.pop_front() {
            for &next in &self.imports[f] {
                if !seen[next] {
                    seen[next] = true;
                    queue.push_back(next);
                }
            }
        }
        seen
    }

    /// The program that running `file` starts trains: a file it reaches trains, or one builds
    /// an optimizer and another steps it.
    pub fn trains(&self, file: &str) -> bool {
        self.index.get(file).is_some_and(|&i| {
            let reach = self.reached(i);
            program_trains(
                self.files
                    .values()
                    .zip(&reach)
                    .filter_map(|(f, &r)| r.then_some(f)),
            )
        })
    }

    /// Every entry point, sorted by file.
    pub fn entry_points(&self) -> Vec<EntryPoint> {
        let mut out = Vec::new();
        // `paths` lists the files in the order of `files`, so index `i` is the `i`-th file.
        for (i, (path, facts)) in self.files.iter().enumerate() {
            if facts.entry_markers.is_empty() {
                continue;
            }
            let mut kinds: Vec<EntryKind> = facts.entry_markers.iter().map(|m| m.kind).collect();
            kinds.sort_unstable();
            kinds.dedup();
            // Anchor at the main guard when there is one: it is where setup code goes.
            let anchor = facts
                .entry_markers
                .iter()
                .find(|m| m.kind == EntryKind::MainGuard)
                .unwrap_or(&facts.entry_markers[0]);
            let function = facts.entry_markers.iter().find_map(|m| m.function.clone());
            out.push(self.entry_point(i, path, facts, kinds, function, &anchor.site));
        }
        out
    }

    /// A guard-less script `file` as an entry point of kind [`EntryKind::Script`], anchored at
    /// `site` (its first module-level device line).
    pub fn script_entry(&self, file: &str, site: &Site) -> Option<EntryPoint> {
        let &i = self.index.get(file)?;
        let (path, facts) = self.files.get_key_value(file)?;
        Some(self.entry_point(i, path, facts, vec![EntryKind::Script], None, site))
    }

    /// The entry point of `path`, the `i`-th file, of `kinds` (sorted, deduplicated), anchored
    /// at `anchor`: what the program it starts (the file and every file it reaches) does.
    fn entry_point(
        &self,
        i: usize,
        path: &str,
        facts: &FileFacts,
        kinds: Vec<EntryKind>,
        function: Option<String>,
        anchor: &Site,
    ) -> EntryPoint {
        let kind = kinds
            .iter()
            .copied()
            .find(|k| *k != EntryKind::MainGuard)
            .unwrap_or(EntryKind::MainGuard);
        let reach = self.reached(i);
        let reached = || {
            self.files
                .values()
                .zip(&reach)
                .filter_map(|(f, &r)| r.then_some(f))
        };
        let uses_torch = reached().any(|f| f.uses_torch);
        let sets_up_npu = reached().any(|f| f.sets_up_npu);
        let trains = program_trains(reached());
        EntryPoint {
            file: path.to_owned(),
            line: anchor.line,
            column: anchor.column,
            kind,
            kinds,
            function,
            uses_torch,
            sets_up_npu,
            sets_up_npu_here: facts.sets_up_npu,
            trains,
            trains_here: facts.trains,
            config: facts.config.clone(),
            snippet: anchor.snippet.clone(),
            symbol: anchor.symbol.clone(),
        }
    }

    /// Every call of the runtime patcher's builder, by file (sorted) then line.
    pub fn patcher_calls(&self) -> Vec<(&str, &PatcherCall)> {
        self.files
            .iter()
            .flat_map(|(path, f)| f.patcher_calls.iter().map(move |c| (path.as_str(), c)))
            .collect()
    }

    /// Every site noted under `key` in `file`.
    pub fn notes(&self, file: &str, key: &str) -> &[Site] {
        self.files
            .get(file)
            .and_then(|f| f.notes.get(key))
            .map_or(&[], Vec::as_slice)
    }
}

/// Whether the files of a program train: one file trains, or one builds the optimizer and
/// another steps it (a trainer module).
fn program_trains<'f>(files: impl Iterator<Item = &'f FileFacts> + Clone) -> bool {
    let mut files = files;
    files.clone().any(|f| f.trains)
        || (files.clone().any(|f| f.builds_optimizer) && files.any(|f| f.steps))
}

/// How many leading directories `dir` and the directory of `path` share.
fn shared_dirs(dir: &str, path: &str) -> usize {
    let path_dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    dir.split('/')
        .zip(path_dir.split('/'))
        .take_while(|(a, b)| !a.is_empty() && a == b)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(path: &str, imports: &[&[&str]]) -> FileFacts {
        FileFacts {
            path: path.to_owned(),
            imports: imports
                .iter()
                .map(|c| ImportFact {
                    candidates: c.iter().map(|s| (*s).to_owned()).collect(),
                    line: 1,
                })
                .collect(),
            ..FileFacts::default()
        }
    }

    #[test]
    fn resolves_script_dir_src_layout_and_transitive_imports() {
        let p = Project::new(
            [
                facts(
                    "scripts/train.py",
                    &[&["utils"], &["mypkg.models.Policy", "mypkg.models"]],
                ),
                facts("scripts/utils.py", &[]),
                facts("src/mypkg/__init__.py", &[]),
                facts("src/mypkg/models.py", &[&["mypkg.heads"]]),
                facts("src/mypkg/heads.py", &[&["torch"]]),
            ],
            vec![],
            vec![],
        );
        assert_eq!(
            p.reachable("scripts/train.py"),
            vec![
                "scripts/train.py",
                "scripts/utils.py",
                "src/mypkg/heads.py",
                "src/mypkg/models.py"
            ]
        );
    }

    #[test]
    fn a_module_name_several_programs_define_resolves_to_the_nearest() {
        let p = Project::new(
            [
                facts("RealCar/scripts/train.py", &[&["model.net"]]),
                facts("RealCar/model/net.py", &[]),
                facts("Sim/scripts/train.py", &[&["model.net"]]),
                facts("Sim/model/net.py", &[]),
                facts("tools/train.py", &[&["model.net"]]),
            ],
            vec![],
            vec![],
        );
        let resolved = |file: &str| p.imports_of(file);
        assert_eq!(
            resolved("RealCar/scripts/train.py"),
            ["RealCar/model/net.py"]
        );
        assert_eq!(resolved("Sim/scripts/train.py"), ["Sim/model/net.py"]);
        // Neither is nearer: the first in path order, as before.
        assert_eq!(resolved("tools/train.py"), ["RealCar/model/net.py"]);
    }
}
