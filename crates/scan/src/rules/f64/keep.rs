//! Where float64 is meant: tests, reference implementations that tests compare against, and a
//! project's own dtype helpers. The finding stands (the value still reaches the device), but no
//! automatic fix is offered: float32 there changes what a test asserts, the precision a parity
//! test measures against, or a decision the helper makes per device.

use crate::checker::Checker;
use crate::semantic::Semantic;
use crate::source::ast::{self, Expr, Ranged, Stmt};

/// Why float64 at `expr` is meant and gets no fix, if it is.
pub(super) fn reason(cx: &Checker<'_>, expr: &Expr) -> Option<String> {
    let sem = cx.semantic();
    if crate::names::is_test_path(cx.path()) {
        return Some(
            "this is test code, where float64 is what the test asserts or measures".into(),
        );
    }
    let defs = enclosing_defs(sem);
    // `test_step` of a LightningModule is the model's own evaluation, not a test.
    let test_def = defs
        .iter()
        .map(|d| d.0)
        .find(|n| is_test_name(n))
        .filter(|_| !sem.in_module_method());
    if let Some(name) = test_def {
        return Some(format!(
            "`{name}` is a test, where float64 is what the test asserts or measures"
        ));
    }
    let text = cx.file().text;
    if let Some((name, evidence)) = defs
        .iter()
        .find_map(|(name, doc)| reference_evidence(text, name, *doc).map(|e| (*name, e)))
    {
        return Some(format!(
            "`{name}` is a reference implementation ({evidence}), whose float64 is the precision \
             other code is checked against"
        ));
    }
    if let Some(other) = chosen_by_condition(cx, sem, expr) {
        return Some(format!(
            "the code already chooses float64 here under a condition (the other choice is \
             `{other}`), so float32 in both would make that choice dead; make the condition pick \
             `{other}` on the NPU (turn the precision option off, or add the NPU to the devices \
             it tests)"
        ));
    }
    if let Some(name) = defs
        .iter()
        .map(|d| d.0)
        .find(|n| words(n).any(|w| matches!(w.as_str(), "fp64" | "float64" | "f64")))
    {
        return Some(format!(
            "`{name}` probes or decides float64 support, and float32 there changes its answer"
        ));
    }
    if cast_then_cpu(sem, expr) {
        return Some(
            "the float64 math runs on the CPU (`.cpu()` follows the cast), so float32 would only \
             lose precision there; cast after `.cpu()` instead (`x.cpu().to(torch.float64)`), \
             which keeps float64 off the device"
                .into(),
        );
    }
    helper_receiving(cx, sem, expr).map(|helper| {
        format!("the dtype goes to the project's own `{helper}`, which decides what to do with it")
    })
}

/// A test function or test class: `test_*`, `Test*`, `*Test`, `*Tests`.
fn is_test_name(name: &str) -> bool {
    name.starts_with("test")
        || name.starts_with("Test")
        || name.ends_with("Test")
        || name.ends_with("Tests")
}

/// The enclosing functions and classes, innermost first, with their docstrings.
fn enclosing_defs<'a>(sem: &Semantic<'a>) -> Vec<(&'a str, Option<&'a str>)> {
    sem.stmts()
        .iter()
        .rev()
        .filter_map(|s| match s {
            Stmt::FunctionDef(f) => Some((f.name.as_str(), docstring(&f.body))),
            Stmt::AsyncFunctionDef(f) => Some((f.name.as_str(), docstring(&f.body))),
            Stmt::ClassDef(c) => Some((c.name.as_str(), docstring(&c.body))),
            _ => None,
        })
        .collect()
}

fn docstring(body: &[Stmt]) -> Option<&str> {
    let Some(Stmt::Expr(e)) = body.first() else {
        return None;
    };
    match e.value.as_ref() {
        Expr::Constant(c) => match &c.value {
            ast::Constant::Str(s) => Some(s.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// Words that name an implementation kept to check another against.
const REFERENCE_WORDS: &[&str] = &[
    "ref",
    "reference",
    "naive",
    "baseline",
    "golden",
    "oracle",
    "groundtruth",
    "unfused",
];

/// Phrases of a docstring that say so.
const REFERENCE_PHRASES: &[&str] = &[
    "reference implementation",
    "naive implementation",
    "baseline implementation",
    "ground truth",
    "ground-truth",
    "for testing",
    "for tests",
    "parity",
    "used in tests",
    "to check against",
    "to compare against",
];

/// Why `name` (a function or class, with its docstring) is a reference implementation: its
/// name or docstring says so, or this file asserts its result against another value.
fn reference_evidence(text: &str, name: &str, doc: Option<&str>) -> Option<String> {
    if let Some(word) = words(name).find(|w| REFERENCE_WORDS.contains(&w.as_str())) {
        return Some(format!("its name says `{word}`"));
    }
    if let Some(phrase) = doc.and_then(|d| {
        let lower = d.to_ascii_lowercase();
        REFERENCE_PHRASES
            .iter()
            .find(|p| lower.contains(*p))
            .copied()
    }) {
        return Some(format!("its docstring says \"{phrase}\""));
    }
    let call = format!("{name}(");
    let calls_it = |code: &str| {
        code.match_indices(&call).any(|(at, _)| {
            !code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    text.lines()
        .any(|line| {
            let code = line.split('#').next().unwrap_or(line);
            calls_it(code)
                && !code.trim_start().starts_with("def ")
                && !code.trim_start().starts_with("class ")
                && [
                    "assert",
                    "allclose",
                    "isclose",
                    "assertEqual",
                    "assertAlmostEqual",
                ]
                .iter()
                .any(|a| code.contains(a))
        })
        .then(|| "this file asserts other results against it".to_owned())
}

/// The lower-case words of an identifier: `attention_ref` → `attention`, `ref`;
/// `NaiveAttention` → `naive`, `attention`.
fn words(ident: &str) -> impl Iterator<Item = String> + '_ {
    let mut out = Vec::new();
    for part in ident.split('_').filter(|p| !p.is_empty()) {
        let mut word = String::new();
        let mut prev_lower = false;
        for ch in part.chars() {
            if ch.is_ascii_uppercase() && prev_lower && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = ch.is_ascii_lowercase() || ch.is_ascii_digit();
            word.push(ch.to_ascii_lowercase());
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out.into_iter()
}

/// The project function that receives the float64 dtype as an argument, if any: a function
/// defined in this file, or imported from this file's own package.
fn helper_receiving(cx: &Checker<'_>, sem: &Semantic<'_>, dtype: &Expr) -> Option<String> {
    // The dtype is the argument itself (`helper(torch.float64)`, `helper(dtype=torch.float64)`).
    let Some(Expr::Call(call)) = sem.parent_expr() else {
        return None;
    };
    if !call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value))
        .any(|a| std::ptr::eq(a, dtype))
    {
        return None;
    }
    let own_root = own_package_root(cx.path());
    match call.func.as_ref() {
        Expr::Name(n) => {
            let name = n.id.as_str();
            match sem.lookup(name) {
                None => cx
                    .file()
                    .text
                    .contains(&format!("def {name}("))
                    .then(|| name.to_owned()),
                Some(q) => is_own(q, own_root.as_deref()).then(|| name.to_owned()),
            }
        }
        func @ Expr::Attribute(_) => {
            let q = sem.resolve(func)?;
            is_own(&q, own_root.as_deref()).then_some(q)
        }
        _ => None,
    }
}

/// The top package of a file inside one (`pkg/models/policy.py` → `pkg`).
fn own_package_root(path: &str) -> Option<String> {
    let (module, is_package) = crate::names::module_name(path);
    let mut parts = module.split('.');
    let root = parts.next()?;
    (is_package || parts.next().is_some()).then(|| root.to_owned())
}

fn is_own(q: &str, root: Option<&str>) -> bool {
    root.is_some_and(|r| q.split('.').next() == Some(r))
}

/// `torch.float64 if option else torch.float32`: the other arm of the conditional that holds
/// the float64 dtype directly, when it is another torch dtype.
fn chosen_by_condition(cx: &Checker<'_>, sem: &Semantic<'_>, expr: &Expr) -> Option<String> {
    let Some(Expr::IfExp(e)) = sem.parent_expr() else {
        return None;
    };
    let other = if e.body.range() == expr.range() {
        &e.orelse
    } else if e.orelse.range() == expr.range() {
        &e.body
    } else {
        return None;
    };
    let q = sem.resolve(other)?;
    (q.starts_with("torch.") && super::is_dtype_name(&q) && !super::is_float64_name(&q))
        .then(|| cx.slice(other.range()).to_owned())
}

/// The float64 cast at `expr` (`x.double()`, or the dtype of `x.to(torch.float64)`) is moved
/// to the CPU at once: `x.to(torch.float64).cpu()`.
fn cast_then_cpu(sem: &Semantic<'_>, expr: &Expr) -> bool {
    let ancestors = sem.exprs();
    let mut up = ancestors.iter().rev().copied();
    let cast = match expr {
        Expr::Call(_) => expr,
        _ => match up.next() {
            Some(call @ Expr::Call(c)) if matches!(c.func.as_ref(), Expr::Attribute(a) if matches!(a.attr.as_str(), "to" | "type")) => {
                call
            }
            _ => return false,
        },
    };
    matches!(
        (up.next(), up.next()),
        (Some(Expr::Attribute(a)), Some(Expr::Call(_)))
            if a.attr.as_str() == "cpu" && a.value.range() == cast.range()
    )
}
