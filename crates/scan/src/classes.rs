//! Which class names of a project are `nn.Module`s, seen across its files.
//!
//! Model classes often derive from a base defined in another file of the project
//! (`class Policy(BasePolicy)`, with `class BasePolicy(nn.Module)` elsewhere). The semantic
//! model of one file cannot see that base, so before the files are checked their class
//! headers are read as text (no parse: a fraction of the cost of parsing) and module classes
//! are found by following bases by name until nothing changes. Names are matched without
//! their module (`pkg.base.BasePolicy` is `BasePolicy`).
//!
//! The same read notes which attributes a class only ever assigns a float64 numpy array
//! (`self.y_bounds = np.zeros((2, n))`) and which `self` attributes hold an instance of which
//! class (`self.scaler = Scaler(...)`), so a rule can follow `self.scaler.y_bounds` into a
//! class of another file.

use crate::files::{FileEntry, FileKind};
use std::collections::{HashMap, HashSet};

/// The names of the classes of a project that are `nn.Module` subclasses.
#[derive(Debug, Default)]
pub struct ModuleClasses {
    names: HashSet<String>,
    /// Per class name, the attributes every `self.<attr> = …` of the class sets to a float64
    /// numpy array.
    float64_attrs: HashMap<String, HashSet<String>>,
    /// Per `self` attribute name, the classes the project constructs into it.
    holders: HashMap<String, HashSet<String>>,
    /// The project's per-step call graph, read from the same texts.
    pub steps: crate::callgraph::StepGraph,
}

/// One `class` header: its name, the last segment of each base, and whether its body
/// defines `forward`.
#[derive(Debug, Default)]
struct Header {
    name: String,
    bases: Vec<String>,
    forward: bool,
    /// Each `self.<attr> = <value>` in the class, and whether the value is a float64 numpy
    /// array.
    assigned: Vec<(String, bool)>,
    /// Each `self.<attr> = <Class>(…)` in the class.
    holds: Vec<(String, String)>,
}

/// What [`ModuleClasses::collect`] reads of one file: its class headers and what the step
/// graph needs.
type Read = (Vec<Header>, crate::callgraph::FileRead);

impl ModuleClasses {
    /// Read the class headers and the step graph of every Python file in `entries` on
    /// `threads` threads (files that cannot be read are left out; the check of that file
    /// reports them). Fails only when a thread cannot be started.
    pub fn collect(
        entries: &[FileEntry],
        max_file_size: u64,
        threads: usize,
    ) -> std::io::Result<ModuleClasses> {
        let python: Vec<&FileEntry> = entries
            .iter()
            .filter(|e| e.kind == FileKind::Python)
            .collect();
        let read = |entry: &FileEntry| -> Option<Read> {
            if std::fs::metadata(&entry.path).map_or(true, |m| m.len() > max_file_size) {
                return None;
            }
            let bytes = std::fs::read(&entry.path).ok()?;
            let text = String::from_utf8_lossy(&bytes);
            Some((
                class_headers(&text),
                crate::callgraph::StepGraph::read(&entry.rel, &text),
            ))
        };
        let reads =
            crate::parallel::map_ordered(&python, threads, std::thread::Builder::new, |e| read(e))?;
        if let Some(panic) = reads.panic {
            std::panic::resume_unwind(panic);
        }
        let mut headers = Vec::new();
        let mut files = Vec::with_capacity(python.len());
        for (h, file) in reads.results.into_iter().flatten().flatten() {
            headers.extend(h);
            files.push(file);
        }
        let mut classes = ModuleClasses::from_headers(&headers);
        classes.steps = crate::callgraph::StepGraph::from_reads(files);
        Ok(classes)
    }

    /// The module classes of some source texts (tests, one-file scans).
    pub fn from_sources<'s>(sources: impl IntoIterator<Item = &'s str>) -> ModuleClasses {
        let headers: Vec<Header> = sources.into_iter().flat_map(class_headers).collect();
        ModuleClasses::from_headers(&headers)
    }

    fn from_headers(headers: &[Header]) -> ModuleClasses {
        let mut names: HashSet<String> = headers
            .iter()
            .filter(|h| h.forward || h.bases.iter().any(|b| is_module_base(b)))
            .map(|h| h.name.clone())
            .collect();
        let mut bases: HashMap<&str, Vec<&str>> = HashMap::new();
        for h in headers {
            bases
                .entry(h.name.as_str())
                .or_default()
                .extend(h.bases.iter().map(|b| last_segment(b)));
        }
        loop {
            let found: Vec<String> = bases
                .iter()
                .filter(|(name, of)| {
                    !names.contains(**name) && of.iter().any(|b| names.contains(*b))
                })
                .map(|(name, _)| (*name).to_owned())
                .collect();
            if found.is_empty() {
                break;
            }
            names.extend(found);
        }
        let mut float64: HashMap<String, (bool, HashSet<String>)> = HashMap::new();
        let mut assigned: HashMap<(&str, &str), bool> = HashMap::new();
        let mut holders: HashMap<String, HashSet<String>> = HashMap::new();
        for h in headers {
            for (attr, f64) in &h.assigned {
                *assigned.entry((&h.name, attr)).or_insert(true) &= *f64;
            }
            for (attr, class) in &h.holds {
                holders
                    .entry(attr.clone())
                    .or_default()
                    .insert(class.clone());
            }
        }
        for ((class, attr), all_f64) in assigned {
            let entry = float64.entry(class.to_owned()).or_default();
            if all_f64 {
                entry.1.insert(attr.to_owned());
            }
        }
        ModuleClasses {
            names,
            float64_attrs: float64.into_iter().map(|(k, (_, v))| (k, v)).collect(),
            holders,
            steps: crate::callgraph::StepGraph::default(),
        }
    }

    /// `self.<holder>.<attr>` is a float64 numpy array: every class the project constructs
    /// into `self.<holder>` assigns `attr` only float64 arrays.
    pub fn holder_attr_is_float64(&self, holder: &str, attr: &str) -> bool {
        self.holders.get(holder).is_some_and(|classes| {
            !classes.is_empty()
                && classes.iter().all(|c| {
                    self.float64_attrs
                        .get(c)
                        .is_some_and(|attrs| attrs.contains(attr))
                })
        })
    }

    /// Is a class of this name (a base as written or resolved: `BasePolicy`,
    /// `pkg.models.BasePolicy`) an `nn.Module` somewhere in the project?
    pub fn contains(&self, base: &str) -> bool {
        self.names.contains(last_segment(base))
    }
}

fn last_segment(dotted: &str) -> &str {
    dotted.rsplit('.').next().unwrap_or(dotted)
}

/// A base that makes a class a module by itself: `nn.Module`, any `torch.nn` class,
/// Lightning's and transformers' model bases.
fn is_module_base(base: &str) -> bool {
    let last = last_segment(base);
    base.starts_with("nn.")
        || base.starts_with("torch.nn.")
        || last == "Module"
        || last == "LightningModule"
        || last.ends_with("PreTrainedModel")
}

/// The `class` headers of a source text, read line by line.
fn class_headers(text: &str) -> Vec<Header> {
    let mut headers: Vec<Header> = Vec::new();
    // Classes whose body the current line may be in: (indent, index in `headers`).
    let mut open: Vec<(usize, usize)> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = line.len() - body.len();
        while open.last().is_some_and(|&(at, _)| at >= indent) {
            open.pop();
        }
        if let Some(rest) = body.strip_prefix("class ") {
            let name_end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..name_end];
            if name.is_empty() {
                continue;
            }
            let mut header = Header {
                name: name.to_owned(),
                ..Header::default()
            };
            let after = rest[name_end..].trim_start();
            if let Some(args) = after.strip_prefix('(') {
                header.bases = bases(args, &mut lines);
            }
            open.push((indent, headers.len()));
            headers.push(header);
        } else if (body.starts_with("def forward(") || body.starts_with("async def forward("))
            && let Some(&(_, i)) = open.last()
        {
            headers[i].forward = true;
        } else if let Some(&(_, i)) = open.last()
            && let Some((attr, value)) = self_assignment(body)
        {
            // Only a numpy constructor needs its whole text (a `dtype=` on a later line).
            let float64 = (value.starts_with("np.") || value.starts_with("numpy."))
                && is_float64_array(&call_text(value, &mut lines));
            headers[i].assigned.push((attr.to_owned(), float64));
            let callee_end = value
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(value.len());
            let callee = last_segment(&value[..callee_end]);
            if value[callee_end..].starts_with('(')
                && callee.starts_with(|c: char| c.is_ascii_uppercase())
            {
                headers[i].holds.push((attr.to_owned(), callee.to_owned()));
            }
        }
    }
    headers
}

/// `self.<attr> = <value>` (one target, not a subscript or an augmented assignment): the
/// attribute and the value's text.
fn self_assignment(body: &str) -> Option<(&str, &str)> {
    let rest = body.strip_prefix("self.")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (attr, after) = rest.split_at(end);
    let after = after.trim_start();
    let value = match after.strip_prefix(':') {
        Some(annotated) => annotated.split_once('=')?.1,
        None => after.strip_prefix('=')?,
    };
    if attr.is_empty() || value.starts_with('=') {
        return None;
    }
    Some((attr, value.trim()))
}

/// The text of a value read on while its parentheses are open (at most 20 lines), so a
/// `dtype=` on a continuation line is seen.
fn call_text<'t>(first: &'t str, lines: &mut std::str::Lines<'t>) -> String {
    let mut text = first.to_owned();
    let depth = |t: &str| {
        t.chars().fold(0i32, |d, c| match c {
            '(' | '[' | '{' => d + 1,
            ')' | ']' | '}' => d - 1,
            _ => d,
        })
    };
    for _ in 0..20 {
        if depth(&text) <= 0 {
            break;
        }
        match lines.next() {
            Some(next) => {
                text.push(' ');
                text.push_str(next.trim());
            }
            None => break,
        }
    }
    text
}

/// A numpy constructor whose default dtype is float64, called without a `dtype` other than a
/// float64 one: `np.zeros((2, n))`, `np.random.randn(n)`.
fn is_float64_array(value: &str) -> bool {
    const DEFAULT_FLOAT: &[&str] = &[
        "zeros(",
        "ones(",
        "empty(",
        "eye(",
        "identity(",
        "linspace(",
        "random.rand(",
        "random.randn(",
        "random.random(",
        "random.uniform(",
        "random.normal(",
    ];
    let Some(call) = value
        .strip_prefix("np.")
        .or_else(|| value.strip_prefix("numpy."))
    else {
        return false;
    };
    if !DEFAULT_FLOAT.iter().any(|f| call.starts_with(f)) {
        return false;
    }
    match call.find("dtype") {
        None => true,
        Some(at) => {
            let dtype = &call[at..];
            dtype.contains("float64") || dtype.contains("double")
        }
    }
}

/// The bases of a header whose text after `(` is `first`, reading on while the parentheses
/// are open (at most 20 lines): the dotted name of each positional argument, without
/// subscripts (`Generic[T]` is `Generic`).
fn bases<'t>(first: &'t str, lines: &mut std::str::Lines<'t>) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut keyword = false;
    let mut text = first;
    for _ in 0..20 {
        for c in text.chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth > 0 => depth -= 1,
                ')' => {
                    push_base(&mut out, &current, keyword);
                    return out;
                }
                ',' if depth == 0 => {
                    push_base(&mut out, &current, keyword);
                    current.clear();
                    keyword = false;
                }
                '=' if depth == 0 => keyword = true,
                '#' => break,
                _ if depth == 0 => current.push(c),
                _ => {}
            }
        }
        match lines.next() {
            Some(next) => text = next,
            None => break,
        }
    }
    push_base(&mut out, &current, keyword);
    out
}

fn push_base(out: &mut Vec<String>, text: &str, keyword: bool) {
    let base = text.trim();
    let dotted = !base.is_empty()
        && base
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if !keyword && dotted {
        out.push(base.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_defined_in_other_files_make_modules() {
        let base = "import torch.nn as nn\n\nclass BasePolicy(nn.Module):\n    def act(self):\n        pass\n";
        let mid = "from pkg.base import BasePolicy\n\nclass Chunked(\n    BasePolicy,  # the shared head\n    metaclass=Meta,\n):\n    pass\n";
        let leaf = "from pkg import mid\n\nclass Flow(mid.Chunked, Generic[T]):\n    pass\n\nclass Config:\n    pass\n";
        let classes = ModuleClasses::from_sources([leaf, mid, base]);
        assert!(classes.contains("BasePolicy"));
        assert!(classes.contains("pkg.mid.Chunked"));
        assert!(classes.contains("Flow"));
        assert!(!classes.contains("Config"));
        assert!(!classes.contains("Meta"));
    }

    #[test]
    fn a_forward_method_makes_a_module_and_nesting_is_followed() {
        let text = "class Outer:\n    class Inner:\n        def forward(self, x):\n            return x\n    def run(self):\n        pass\nclass Next(Outer.Inner):\n    pass\n";
        let classes = ModuleClasses::from_sources([text]);
        assert!(classes.contains("Inner"));
        assert!(!classes.contains("Outer"));
        assert!(classes.contains("Next"));
    }

    #[test]
    fn float64_attributes_are_followed_through_the_attribute_holding_them() {
        let scaler = "import numpy as np\n\nclass Scaler:\n    def __init__(self, y):\n\
            \x20       self.y_bounds = np.zeros((2, y.shape[-1]))\n\
            \x20       self.y_bounds[0, :] = y.min(0)\n\
            \x20       self.x_mean = np.zeros(\n            3,\n            dtype=np.float32,\n        )\n\
            \x20       self.x_std = np.ones(3)\n\
            \x20       self.x_std = y.std(0)\n";
        let agent = "class Agent:\n    def __init__(self, y):\n        self.scaler = Scaler(y)\n\
            \x20       self.name: str = \"bc\"\n";
        let classes = ModuleClasses::from_sources([scaler, agent]);
        assert!(classes.holder_attr_is_float64("scaler", "y_bounds"));
        // A float32 dtype on a continuation line, and an attribute also assigned something else.
        assert!(!classes.holder_attr_is_float64("scaler", "x_mean"));
        assert!(!classes.holder_attr_is_float64("scaler", "x_std"));
        assert!(!classes.holder_attr_is_float64("name", "y_bounds"));
        assert!(!classes.holder_attr_is_float64("model", "y_bounds"));
    }

    #[test]
    fn broken_headers_are_left_alone() {
        let classes = ModuleClasses::from_sources(["class (x):\nclass A(\n", "class"]);
        assert!(!classes.contains("A"));
    }
}
