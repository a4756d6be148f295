//! Device allow-lists: code that validates a device against the names it knows and rejects any
//! other, `npu` among them. Such a check stops the run on the NPU before anything else does, so
//! its finding is *blocking*: it comes first in every listing and in `npu-progress --next`.
//!
//! Recognised: `if device not in ("cuda", "cpu", "mps"): raise …` and `assert device in (…)`
//! (in a helper or a config's `__post_init__`), `if`/`elif` device dispatches that raise for
//! unknown devices ([`super::dispatch`]), argparse `choices=[…]` and `click.Choice([…])` of
//! device names, `Literal["cuda", "cpu"]` (config parsers such as pydantic, draccus, tyro and
//! jsonargparse validate it), and enums whose members are device names. A list counts when it
//! holds at least two device names, `"cuda"` among them, and no `"npu"`; a test or example file
//! ([`crate::support`]) never blocks the run.

use crate::checker::Checker;
use crate::fix;
use crate::semantic::Semantic;
use crate::source::ast::{self, CmpOp, Expr, Ranged, Stmt, UnaryOp};
use crate::source::{TextRange, TextSize};
use issue_model::{Applicability, Fix};

/// Choices that go with device names in a device option and name no device themselves.
const NOT_A_DEVICE: &[&str] = &["auto", "default", "none", ""];

/// The device names of a list/tuple/set literal of strings, when every element is a string
/// naming a device (or `"auto"`, [`NOT_A_DEVICE`]), there are at least two device names,
/// `"cuda"` is one and `"npu"` none; with the `"cuda"` element.
fn device_list(elts: &[Expr]) -> Option<(Vec<&str>, &Expr)> {
    let mut names = Vec::with_capacity(elts.len());
    let mut cuda = None;
    for e in elts {
        let Expr::Constant(c) = e else { return None };
        let ast::Constant::Str(s) = &c.value else {
            return None;
        };
        if NOT_A_DEVICE.contains(&s.to_ascii_lowercase().as_str()) {
            continue;
        }
        let base = s.split(':').next().unwrap_or(s);
        if !super::dispatch::is_device_name(s) || base == "npu" {
            return None;
        }
        if base == "cuda" && cuda.is_none() {
            cuda = Some(e);
        }
        names.push(s.as_str());
    }
    (names.len() >= 2).then_some(())?;
    cuda.map(|c| (names, c))
}

fn elements(expr: &Expr) -> Option<&[Expr]> {
    match expr {
        Expr::List(l) => Some(&l.elts),
        Expr::Tuple(t) => Some(&t.elts),
        Expr::Set(s) => Some(&s.elts),
        _ => None,
    }
}

/// The elements of a list literal, or of the list a module constant of the file holds
/// (`SUPPORTED_DEVICES = ("cuda", "cpu")`, then `device not in SUPPORTED_DEVICES`).
fn list_of<'a>(sem: &Semantic<'a>, expr: &'a Expr) -> Option<&'a [Expr]> {
    match expr {
        Expr::Name(n) => elements(sem.module_constant(n.id.as_str())?),
        _ => elements(expr),
    }
}

/// The file may block the run: not a test or an example.
fn on_training_path(cx: &Checker<'_>) -> bool {
    crate::support::kind(cx.path()).is_none()
}

/// The fix that inserts `"npu"` (in the quotes of `cuda`) after the `cuda` element of a list.
fn admit_after(
    cx: &Checker<'_>,
    cuda: &Expr,
    applicability: Applicability,
    what: &str,
) -> Option<Fix> {
    let src = cx.slice(cuda.range());
    let npu = fix::requote(src, "npu")?;
    Some(fix::edits(
        applicability,
        format!("admit {npu} in {what}"),
        vec![(TextRange::empty(cuda.end()), format!(", {npu}"))],
    ))
}

/// For a reported device comparison `cmp` (the whole expression `whole`): the allow-list it is,
/// as the blocking reason and the fix that adds `"npu"` to the list. The comparison tests an
/// `if` whose taken branch raises (`if device not in (…): raise`, or `if device in (…): … else:
/// raise`), or is an `assert`.
pub(super) fn comparison<'a>(
    cx: &Checker<'a>,
    cmp: &'a ast::ExprCompare,
    whole: &'a Expr,
) -> Option<(String, Option<Fix>)> {
    if !on_training_path(cx) {
        return None;
    }
    let ([op @ (CmpOp::In | CmpOp::NotIn)], [right]) =
        (cmp.ops.as_slice(), cmp.comparators.as_slice())
    else {
        return None;
    };
    if !super::is_device_like(&cmp.left) {
        return None;
    }
    let (names, cuda) = device_list(list_of(cx.semantic(), right)?)?;
    // What the check says when it rejects a device: the assert's message or the raise.
    let (admitted_raises, error) = match cx.semantic().current_stmt()? {
        Stmt::Assert(a) if a.test.range().contains_range(whole.range()) => {
            matches!(op, CmpOp::In).then_some(())?;
            let error = a.msg.as_ref().map_or("", |m| cx.slice(m.range()));
            ("fails the assert", error)
        }
        Stmt::If(s) if s.test.range().contains_range(whole.range()) => {
            let negated =
                matches!(s.test.as_ref(), Expr::UnaryOp(u) if matches!(u.op, UnaryOp::Not));
            let rejects_in_body = matches!(op, CmpOp::NotIn) != negated;
            let branch = if rejects_in_body { &s.body } else { &s.orelse };
            let raise = branch.iter().find(|s| matches!(s, Stmt::Raise(_)))?;
            ("raises", cx.slice(raise.range()))
        }
        _ => return None,
    };
    let reason = format!(
        "this device allow-list admits only {} and {admitted_raises} for any other device, so a run \
         with the device `npu` stops here before it reaches the NPU",
        names.join("/")
    );
    // "requires a CPU or CUDA device" names what the code after the check can run (CUDA IPC, a
    // kernel), not only the devices it knows: admitting the NPU there needs a look.
    let lower = error.to_ascii_lowercase();
    let fix = if ["requir", "need", "must", "only"]
        .iter()
        .any(|w| lower.contains(w))
    {
        admit_after(cx, cuda, Applicability::Unsafe, "the device allow-list").map(|mut f| {
            f.message.push_str(
                "; unsafe: the error says the code requires these devices, so check that what \
                 follows the check runs on the NPU",
            );
            f
        })
    } else {
        admit_after(cx, cuda, Applicability::Safe, "the device allow-list")
    };
    Some((reason, fix))
}

/// `parser.add_argument("--device", choices=["cuda", "cpu"])` and `click.Choice(["cuda", "cpu"])`:
/// a command line that rejects `npu`. Reported at the list, blocking, with a safe fix.
pub(super) fn choices<'a>(cx: &mut Checker<'a>, call: &'a ast::ExprCall) {
    let list = if let Expr::Attribute(a) = call.func.as_ref()
        && a.attr.as_str() == "add_argument"
    {
        call.keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "choices"))
            .map(|k| &k.value)
    } else if cx.semantic().resolves_to(&call.func, "click.Choice") {
        call.args.first()
    } else {
        None
    };
    let Some(list) = list else { return };
    let Some((names, cuda)) = list_of(cx.semantic(), list).and_then(device_list) else {
        return;
    };
    let what = if matches!(call.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "add_argument")
    {
        "argparse"
    } else {
        "click"
    };
    let message = format!(
        "the command line accepts only the devices {} and {what} rejects any other, so `npu` is \
         refused before the run starts; add \"npu\" to the choices (see P_DEV.md)",
        names.join("/")
    );
    let blocking = on_training_path(cx).then(|| {
        format!(
            "{what} rejects the device `npu`: it is not among the choices {}",
            names.join("/")
        )
    });
    let fix = admit_after(cx, cuda, Applicability::Safe, "the device choices");
    let finding = cx.report(list.range(), message);
    finding.fix = fix;
    finding.blocking = blocking;
}

/// `Literal["cuda", "cpu", "mps"]`: a config field (or parameter) that config parsers validate,
/// rejecting `npu`. Reported at the subscript, blocking, with a safe fix.
pub(super) fn literal(cx: &mut Checker<'_>, sub: &ast::ExprSubscript) {
    if !is_literal(cx.semantic(), &sub.value) {
        return;
    }
    let single = std::slice::from_ref(sub.slice.as_ref());
    let elts = match sub.slice.as_ref() {
        Expr::Tuple(t) => &t.elts[..],
        _ => single,
    };
    let Some((names, cuda)) = device_list(elts) else {
        return;
    };
    let message = format!(
        "this `Literal` admits only the devices {}: a config parser that validates it (pydantic, \
         draccus, tyro, jsonargparse) rejects `npu`; add \"npu\" (see P_DEV.md)",
        names.join("/")
    );
    let blocking = on_training_path(cx).then(|| {
        format!(
            "the config type `Literal[{}]` rejects the device `npu` when the config is parsed",
            cx.slice(sub.slice.range())
        )
    });
    let fix = admit_after(cx, cuda, Applicability::Safe, "the device `Literal`");
    let finding = cx.report(sub.range(), message);
    finding.fix = fix;
    finding.blocking = blocking;
}

fn is_literal(sem: &Semantic<'_>, value: &Expr) -> bool {
    ["typing.Literal", "typing_extensions.Literal"]
        .iter()
        .any(|q| sem.resolves_to(value, q))
        || matches!(value, Expr::Name(n) if n.id.as_str() == "Literal")
}

/// `class Device(str, Enum): CUDA = "cuda"; CPU = "cpu"`: `Device("npu")` raises. Reported at
/// the `"cuda"` member, blocking, with an unsafe fix that adds an `NPU = "npu"` member after it
/// (unsafe: code that iterates over the enum or matches every member sees one more).
pub(super) fn device_enum(cx: &mut Checker<'_>, class: &ast::StmtClassDef) {
    let is_enum = class.bases.iter().any(|b| {
        cx.semantic()
            .resolve(b)
            .unwrap_or_else(|| crate::semantic::dotted(b))
            .rsplit('.')
            .next()
            .is_some_and(|n| n.ends_with("Enum"))
    });
    if !is_enum {
        return;
    }
    let mut members: Vec<(&str, &Expr, &Stmt)> = Vec::new();
    for stmt in &class.body {
        if let Stmt::Assign(a) = stmt
            && let [Expr::Name(target)] = a.targets.as_slice()
            && matches!(a.value.as_ref(), Expr::Constant(c) if matches!(c.value, ast::Constant::Str(_)))
        {
            members.push((target.id.as_str(), a.value.as_ref(), stmt));
        }
    }
    let values: Vec<Expr> = members.iter().map(|(_, v, _)| (*v).clone()).collect();
    let Some((names, _)) = device_list(&values) else {
        return;
    };
    let Some(&(cuda_name, cuda_value, cuda_stmt)) = members.iter().find(|(_, v, _)| {
        matches!(v, Expr::Constant(c) if matches!(&c.value, ast::Constant::Str(s) if s == "cuda"))
    }) else {
        return;
    };
    let member = if cuda_name.chars().any(|c| c.is_ascii_lowercase()) {
        "npu"
    } else {
        "NPU"
    };
    let text = cx.file().text;
    let line_start = text[..usize::from(cuda_stmt.start())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let indent = &text[line_start..usize::from(cuda_stmt.start())];
    let fix = fix::requote(cx.slice(cuda_value.range()), "npu")
        .filter(|_| indent.chars().all(|c| c == ' ' || c == '\t'))
        .map(|npu| {
            // At the end of the member's line, after any comment on it.
            let end = usize::from(cuda_stmt.end());
            let mut eol = text[end..].find('\n').map_or(text.len(), |i| end + i);
            if text[..eol].ends_with('\r') {
                eol -= 1;
            }
            let at = TextSize::new(u32::try_from(eol).unwrap_or(cuda_stmt.end().to_u32()));
            fix::edits(
                Applicability::Unsafe,
                format!(
                    "add the member `{member} = {npu}` to `{}`; unsafe: code that iterates over \
                     the enum or handles each member sees one more",
                    class.name.as_str()
                ),
                vec![(TextRange::empty(at), format!("\n{indent}{member} = {npu}"))],
            )
        });
    let message = format!(
        "the enum `{}` knows only the devices {}, so `{}(\"npu\")` raises ValueError; add an npu \
         member (see P_DEV.md)",
        class.name.as_str(),
        names.join("/"),
        class.name.as_str()
    );
    let blocking = on_training_path(cx).then(|| {
        format!(
            "the device enum `{}` has no npu member: converting the device `npu` to it raises",
            class.name.as_str()
        )
    });
    let finding = cx.report(cuda_stmt.range(), message);
    finding.fix = fix;
    finding.blocking = blocking;
}

/// For an unknown-device `raise` after `tests` (the tests of its dispatch): the blocking reason,
/// and the fix that lets `npu` take the `"cuda"` test's branch (`device == "cuda"` becomes
/// `device in ("cuda", "npu")`), unsafe: the NPU then runs the CUDA branch, whose `torch.cuda`
/// calls `transfer_to_npu` remaps.
pub(super) fn dispatch(cx: &Checker<'_>, tests: &[&Expr]) -> (Option<String>, Option<Fix>) {
    if !on_training_path(cx) {
        return (None, None);
    }
    let reason = "this device dispatch raises for any device it does not list, `npu` among them, \
                  so a run with the device `npu` stops here before it reaches the NPU"
        .to_owned();
    let fix = tests.iter().find_map(|t| widen_cuda_test(cx, t));
    (Some(reason), fix)
}

fn widen_cuda_test(cx: &Checker<'_>, test: &Expr) -> Option<Fix> {
    let Expr::Compare(c) = test else { return None };
    let ([CmpOp::Eq], [right]) = (c.ops.as_slice(), c.comparators.as_slice()) else {
        return None;
    };
    let (subject, lit) = if super::cuda_literal(right).is_some() {
        (c.left.as_ref(), right)
    } else if super::cuda_literal(&c.left).is_some() {
        (right, c.left.as_ref())
    } else {
        return None;
    };
    if super::cuda_literal(lit)? != "cuda" {
        return None;
    }
    let src = cx.slice(lit.range());
    let npu = fix::requote(src, "npu")?;
    Some(fix::replacement(
        Applicability::Unsafe,
        format!(
            "let {npu} take the {src} branch of the dispatch; unsafe: the NPU then runs the CUDA \
             branch, whose torch.cuda calls transfer_to_npu remaps: check that branch"
        ),
        test.range(),
        format!("{} in ({src}, {npu})", cx.slice(subject.range())),
    ))
}
