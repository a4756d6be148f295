//! Why the port diverges: the runtime patches that acted in or around the first diverging module,
//! and the port's own diff hunks in its source file, ranked by how close they are to the module;
//! the port is run again with each one undone (a patch switched off with `NPU_PATCHES_DISABLE`,
//! a hunk reverted in a copy of the project) until one brings it back within tolerance.

use crate::hunks::Hunk;
use crate::report::{Check, Status};
use serde_json::{Value, json};

/// How many candidates are tried when `--why-runs` is not given.
pub const DEFAULT_RUNS: u32 = 4;

/// Where the first divergence is: what the candidates are ranked against.
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub module: String,
    pub direction: String,
    pub step: u64,
    /// The module class's file (relative to the project) and its `forward` line.
    pub file: Option<String>,
    pub line: Option<u64>,
    /// The class's first and last line.
    pub span: Option<(u64, u64)>,
    /// The project line that called it.
    pub called_at: Option<(String, u64)>,
}

fn file_line(text: &str) -> Option<(String, u64)> {
    let (file, line) = text.rsplit_once(':')?;
    Some((file.to_owned(), line.parse().ok()?))
}

impl Place {
    /// The place of `first` (a `first_divergence`), with the class span from the port's record.
    pub fn of(first: &Value, port: &Value) -> Place {
        let site = first["site"].as_str().unwrap_or("");
        let (file, line) = file_line(site).map_or((None, None), |(f, l)| (Some(f), Some(l)));
        let span = port["spans"][site].as_array().and_then(|s| {
            Some((
                s.first().and_then(Value::as_u64)?,
                s.get(1).and_then(Value::as_u64)?,
            ))
        });
        Place {
            module: first["module"].as_str().unwrap_or("").to_owned(),
            direction: first["direction"].as_str().unwrap_or("").to_owned(),
            step: first["step"].as_u64().unwrap_or(1),
            // A file outside the project (a library's module) has no hunks of the port's.
            file: file.filter(|f| !f.starts_with('/')),
            line,
            span,
            called_at: first["called_at"].as_str().and_then(file_line),
        }
    }

    fn within(&self, module: &str) -> bool {
        module == self.module || module.starts_with(&format!("{}.", self.module))
    }

    fn encloses(&self, module: &str) -> bool {
        self.module.starts_with(&format!("{module}."))
    }

    /// Lines between `line` and the class's span (0 inside it); `None` in another file.
    fn distance(&self, file: &str, first: u64, last: u64) -> Option<u64> {
        if self.file.as_deref() != Some(file) {
            return None;
        }
        let (start, end) = self
            .span
            .or(self.line.map(|l| (l, l)))
            .unwrap_or((first, last));
        Some(if last < start {
            start - last
        } else {
            first.saturating_sub(end)
        })
    }
}

#[derive(Debug, Clone)]
pub enum Kind {
    Patch(String),
    Hunk(Hunk),
}

/// One thing the port does that the reference does not, to undo in a re-run.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub kind: Kind,
    /// `file:line` where it acts, when known.
    pub at: Option<String>,
    /// 0 in the module (its call, its class), 1 in the module's file, 2 around it (an enclosing
    /// call, the line that called it), 3 elsewhere before the divergence, 4 applied and silent.
    pub rank: u8,
    pub distance: u64,
    pub evidence: String,
}

impl Candidate {
    pub fn label(&self) -> String {
        match &self.kind {
            Kind::Patch(name) => match &self.at {
                Some(at) => format!("runtime patch {name} at {at}"),
                None => format!("runtime patch {name}"),
            },
            Kind::Hunk(hunk) => format!("your change at {}", hunk.at()),
        }
    }

    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Patch(name) => json!({
                "kind": "patch", "patch": name, "at": self.at, "rank": self.rank,
                "evidence": self.evidence,
            }),
            Kind::Hunk(hunk) => json!({
                "kind": "hunk", "file": hunk.file, "at": hunk.at(), "lines": [hunk.lines().0, hunk.lines().1],
                "base_lines": hunk.old_lines, "port_lines": hunk.new_lines, "rank": self.rank,
                "evidence": self.evidence,
            }),
        }
    }
}

/// The first code line of the module's class (`span`) in `source` that names torch's float64
/// (`torch.float64`, `torch.double`, `.double(`); comments and docstrings do not count.
pub fn float64_line(source: &str, span: (u64, u64)) -> Option<u64> {
    let mut in_string = false;
    for (index, line) in source.lines().enumerate() {
        let number = u64::try_from(index).unwrap_or(u64::MAX) + 1;
        let quotes = line.matches("\"\"\"").count() + line.matches("'''").count();
        let was_in_string = in_string;
        if quotes % 2 == 1 {
            in_string = !in_string;
        }
        if number < span.0 || number > span.1 || was_in_string || quotes > 0 {
            continue;
        }
        let code = line.split('#').next().unwrap_or("");
        // numpy's float64 stays float64 under the patch: torch's names only.
        if code.contains("torch.float64")
            || code.contains("torch.double")
            || code.contains(".double(")
        {
            return Some(number);
        }
    }
    None
}

/// The runtime patches that acted at or before the divergence's step (from the port's record), and
/// `Float64To32` while applied (it remaps `torch.float64` silently, the CPU's too); `source`: the
/// text of the module's file.
pub fn patch_candidates(port: &Value, place: &Place, source: Option<&str>) -> Vec<Candidate> {
    let empty = Vec::new();
    let mut out: Vec<Candidate> = Vec::new();
    let mut consider =
        |name: &str, rank: u8, distance: u64, at: Option<String>, evidence: String| match out
            .iter_mut()
            .find(|c| matches!(&c.kind, Kind::Patch(n) if n == name))
        {
            Some(c) if (rank, distance) < (c.rank, c.distance) => {
                *c = Candidate {
                    kind: Kind::Patch(name.to_owned()),
                    at,
                    rank,
                    distance,
                    evidence,
                };
            }
            Some(_) => {}
            None => out.push(Candidate {
                kind: Kind::Patch(name.to_owned()),
                at,
                rank,
                distance,
                evidence,
            }),
        };
    for fire in port["patch_fires"].as_array().unwrap_or(&empty) {
        let Some(name) = fire["patch"].as_str() else {
            continue;
        };
        if fire["step"].as_u64().is_some_and(|s| s > place.step) {
            continue;
        }
        let count = fire["count"].as_u64().unwrap_or(1);
        let site = fire["site"].as_str().map(str::to_owned);
        let module = fire["module"].as_str();
        let (file, line) = site
            .as_deref()
            .and_then(file_line)
            .map_or((None, 0), |(f, l)| (Some(f), l));
        let distance = file.as_deref().and_then(|f| place.distance(f, line, line));
        let inside = module.map_or("outside any module call".to_owned(), |m| format!("in {m}"));
        let evidence = format!(
            "fired {count}x {inside}{}, step {}",
            site.as_deref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default(),
            fire["step"]
        );
        let (rank, distance) = match (module, distance) {
            (Some(m), _) if place.within(m) => (0, 0),
            (_, Some(0)) => (0, 0),
            (_, Some(d)) => (1, d),
            (Some(m), None) if place.encloses(m) => (2, 0),
            _ => (3, 0),
        };
        consider(name, rank, distance, site, evidence);
    }
    let applied = port["patches"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .any(|p| {
            p["name"] == "Float64To32" && matches!(p["state"].as_str(), Some("applied" | "removed"))
        });
    if applied {
        let token = match (source, place.span, &place.file) {
            (Some(text), Some(span), Some(file)) => {
                float64_line(text, span).map(|line| format!("{file}:{line}"))
            }
            _ => None,
        };
        match token {
            Some(at) => consider(
                "Float64To32",
                0,
                0,
                Some(at.clone()),
                format!(
                    "applied, it makes torch.float64 float32 in all code, the CPU's too; {}'s class names float64 \
                     at {at}",
                    place.module
                ),
            ),
            None => consider(
                "Float64To32",
                4,
                0,
                None,
                "applied, it makes torch.float64 float32 in all code, the CPU's too".to_owned(),
            ),
        }
    }
    out
}

/// The port's hunks in the module's file (ranked by distance to its class) and in the file of the
/// line that called it.
pub fn hunk_candidates(hunks: Vec<Hunk>, place: &Place) -> Vec<Candidate> {
    hunks
        .into_iter()
        .map(|hunk| {
            let (first, last) = hunk.lines();
            let (rank, distance, evidence) = match place.distance(&hunk.file, first, last) {
                Some(0) => (
                    0,
                    place.line.map_or(0, |l| l.abs_diff(first)),
                    format!("in {}'s class", place.module),
                ),
                Some(d) => (1, d, format!("{d} lines from {}'s class", place.module)),
                None => {
                    let d = place
                        .called_at
                        .as_ref()
                        .filter(|(f, _)| *f == hunk.file)
                        .map_or(u64::MAX, |(_, l)| l.abs_diff(first).min(l.abs_diff(last)));
                    (2, d, format!("in the file that calls {}", place.module))
                }
            };
            Candidate {
                kind: Kind::Hunk(hunk),
                at: None,
                rank,
                distance,
                evidence,
            }
        })
        .collect()
}

/// All candidates, closest first.
pub fn ranked(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    candidates.sort_by_key(|c| (c.rank, c.distance, matches!(c.kind, Kind::Hunk(_))));
    candidates
}

/// What undoing a candidate did to the comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The port then matches the reference (loss and modules).
    Restores,
    /// The divergence at the place is gone; the first divergence is now elsewhere (or only the loss
    /// still differs).
    Moves(String),
    /// The first divergence is where it was.
    Same,
    /// The re-run did not finish.
    Failed(String),
}

impl Effect {
    pub fn as_str(&self) -> &'static str {
        match self {
            Effect::Restores => "restores",
            Effect::Moves(_) => "moves",
            Effect::Same => "no effect",
            Effect::Failed(_) => "failed",
        }
    }
}

/// The effect of a re-run whose comparison with the reference gave `checks`.
pub fn effect(checks: &[Check], place: &Place) -> Effect {
    let passed = |name: &str| {
        checks
            .iter()
            .any(|c| c.name == name && c.status == Status::Pass)
    };
    if passed("parity.loss") && passed("parity.modules") {
        return Effect::Restores;
    }
    let first = checks
        .iter()
        .find(|c| c.name == "parity.modules")
        .and_then(|c| c.data.as_ref())
        .map_or(Value::Null, |d| d["first_divergence"].clone());
    if first.is_null() {
        return Effect::Moves("every module matches; only the loss still differs".to_owned());
    }
    if first["module"] == place.module.as_str()
        && first["direction"] == place.direction.as_str()
        && first["step"].as_u64() == Some(place.step)
    {
        return Effect::Same;
    }
    Effect::Moves(format!(
        "the first divergence is then {} ({}), {}, step {}",
        first["module"].as_str().unwrap_or("?"),
        first["site"].as_str().unwrap_or("?"),
        first["direction"].as_str().unwrap_or("?"),
        first["step"]
    ))
}

/// The sentence that names the cause and what to do, for a candidate that restores the run.
pub fn cause(candidate: &Candidate, place: &Place, base: Option<&str>) -> (String, String) {
    match &candidate.kind {
        Kind::Patch(name) if name == "Float64To32" => (
            format!(
                "Float64To32{} changes {}: with the patch off the port matches the reference ({})",
                candidate.at.as_deref().map(|a| format!(" at {a}")).unwrap_or_default(),
                place.module,
                candidate.evidence
            ),
            "keep float64 on the CPU for it: compute the values with numpy float64 (or before the patcher applies) and \
             move the float32 result to the device; `NPU_PATCHES_DISABLE=Float64To32` only where no float64 reaches \
             the NPU (NPU-FACTS.md, dtypes)"
                .to_owned(),
        ),
        Kind::Patch(name) => (
            format!(
                "{name}{} changes {}: with the patch off the port matches the reference ({})",
                candidate.at.as_deref().map(|a| format!(" at {a}")).unwrap_or_default(),
                place.module,
                candidate.evidence
            ),
            format!(
                "rewrite that line so that the patch is not needed there (see the patch's doc in runtime_patches.py), \
                 or turn it off for this program: `build_vla_patcher({name}=False)` / `NPU_PATCHES_DISABLE={name}`"
            ),
        ),
        Kind::Hunk(hunk) => (
            format!(
                "your change at {} ({}) makes {} compute differently: with it reverted the port matches the reference",
                hunk.at(),
                candidate.evidence,
                place.module
            ),
            format!(
                "compare it with the original (`git diff {} -- {}`): the base had {}",
                base.unwrap_or("HEAD"),
                hunk.file,
                if hunk.old_lines.is_empty() {
                    "no such lines".to_owned()
                } else {
                    format!("`{}`", hunk.old_lines.join(" ⏎ ").trim())
                }
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        Place {
            module: "Policy.schedule".into(),
            direction: "forward".into(),
            step: 1,
            file: Some("train.py".into()),
            line: Some(50),
            span: Some((40, 55)),
            called_at: Some(("train.py".into(), 110)),
        }
    }

    #[test]
    fn patches_rank_by_where_they_fired_and_float64_in_the_class_counts() {
        let port = json!({
            "patches": [{"name": "Float64To32", "state": "applied", "fires": 0},
                        {"name": "SdpaMaskBroadcast", "state": "applied", "fires": 3}],
            "patch_fires": [
                {"patch": "SdpaMaskBroadcast", "site": "train.py:80", "module": "Policy.attn", "step": 1, "count": 3},
                {"patch": "TensorIndexDevice", "site": "train.py:52", "module": "Policy.schedule", "step": 1, "count": 1},
                {"patch": "PowFloatSafe", "site": "train.py:52", "module": "Policy.schedule", "step": 2, "count": 1},
            ],
        });
        let mut source = String::new();
        for n in 1..=60 {
            source.push_str(if n == 41 {
                "    \"\"\"A schedule computed in torch.float64.\"\"\"\n"
            } else if n == 42 {
                "    table = np.zeros(9, dtype=np.float64)\n"
            } else if n == 44 {
                "    t = torch.linspace(0, 1, 9, dtype=torch.float64)\n"
            } else {
                "x\n"
            });
        }
        let ranked = ranked(patch_candidates(&port, &place(), Some(&source)));
        let names: Vec<String> = ranked.iter().map(Candidate::label).collect();
        assert_eq!(
            names,
            [
                "runtime patch TensorIndexDevice at train.py:52",
                "runtime patch Float64To32 at train.py:44",
                "runtime patch SdpaMaskBroadcast at train.py:80",
            ]
        );
        // A later step's fire cannot have caused the divergence; without float64 in the class the
        // applied Float64To32 comes last.
        let ranked = super::ranked(patch_candidates(&port, &place(), Some("x\n")));
        assert_eq!(ranked.last().unwrap().label(), "runtime patch Float64To32");
        assert_eq!(ranked.last().unwrap().rank, 4);
    }

    #[test]
    fn hunks_in_the_class_come_first_and_the_effect_is_judged_at_the_place() {
        let hunk = |start| Hunk {
            file: "train.py".into(),
            old_start: start,
            old_lines: vec!["a".into()],
            new_start: start,
            new_count: 1,
            new_lines: vec!["b".into()],
        };
        let ranked = ranked(hunk_candidates(
            vec![hunk(5), hunk(111), hunk(45)],
            &place(),
        ));
        let at: Vec<String> = ranked.iter().map(Candidate::label).collect();
        assert_eq!(
            at,
            [
                "your change at train.py:45",
                "your change at train.py:5",
                "your change at train.py:111"
            ]
        );

        let same = Check::fail("parity.modules", "x", "y").with_data(json!({"first_divergence": {
            "module": "Policy.schedule", "direction": "forward", "step": 1}}));
        assert_eq!(effect(&[same], &place()), Effect::Same);
        let moved = Check::fail("parity.modules", "x", "y").with_data(json!({"first_divergence": {
            "module": "Policy.head", "direction": "forward", "step": 1}}));
        assert!(matches!(effect(&[moved], &place()), Effect::Moves(_)));
        let ok = [
            Check::pass("parity.loss", ""),
            Check::pass("parity.modules", ""),
        ];
        assert_eq!(effect(&ok, &place()), Effect::Restores);
    }
}
