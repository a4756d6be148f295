//! The step model of one file: which functions run on the device once per optimizer step
//! (module methods, training steps, losses, the update side of trainers), which run at
//! inference or on the host around the step, and the helpers that step code calls.

use super::{Node, find, last_name};
use crate::names::is_host_class;
use crate::semantic::Semantic;
use crate::source::ast::{Expr, Ranged, Stmt};

/// Code that runs on the device once per step: device code (module methods, training
/// steps, losses) other than constructors, builders, weight initialisers, class methods,
/// host-side batch preparation and data transforms.
pub fn in_step_code(sem: &Semantic<'_>) -> bool {
    if !sem.in_device_code() {
        return false;
    }
    // torchvision transforms are `nn.Module`s that run in DataLoader workers.
    let transform = sem.current_class().is_some_and(|c| {
        c.bases
            .iter()
            .any(|b| b.starts_with("torchvision.") || b.ends_with("Transform"))
    });
    !transform
        && !sem.stmts().iter().any(|s| match s {
            Stmt::FunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            Stmt::AsyncFunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            _ => false,
        })
}

/// A constructor, weight initialiser, builder or host-side batch preparation (by its name, see
/// [`crate::names::is_setup_name`], or a `classmethod` decorator): code that runs once, or
/// before the batch reaches the device.
pub fn is_setup_function(name: &str, decorators: &[Expr]) -> bool {
    crate::names::is_setup_name(name)
        || decorators
            .iter()
            .any(|d| matches!(d, Expr::Name(n) if n.id.as_str() == "classmethod"))
}

/// The update side of a trainer, agent or algorithm that is not an `nn.Module` (RL libraries'
/// `update`, `learn`, `train_step`, `_train`, `_update_with_batch`, `compute_*_loss`): it runs on
/// the device once per optimisation step like a module's `forward`. So does the `__call__` of
/// an attention processor. Methods of data, environment, logging and metric classes are not,
/// and neither are setup methods.
pub fn in_update_code(sem: &Semantic<'_>) -> bool {
    let Some(f) = sem.current_function() else {
        return false;
    };
    if !f.is_method || is_inference_name(&f.name) {
        return false;
    }
    let Some(class) = sem.current_class() else {
        return false;
    };
    // An attention processor's `__call__` is the attention of the model's `forward`.
    if f.name == "__call__"
        && (class.name.contains("AttnProcessor") || class.name.contains("AttentionProcessor"))
    {
        return true;
    }
    if is_host_class(&class.name, &class.bases) {
        return false;
    }
    let setup = sem.stmts().iter().any(|s| match s {
        Stmt::FunctionDef(d) => is_setup_function(d.name.as_str(), &d.decorator_list),
        _ => false,
    });
    // Walked last: it reads the whole body.
    let evaluates = || {
        sem.stmts().iter().rev().find_map(|s| match s {
            Stmt::FunctionDef(d) => Some(crate::semantic::evaluates_only(
                d.name.as_str(),
                &d.decorator_list,
                &d.body,
            )),
            _ => None,
        })
    };
    !setup
        && (is_update_name(&f.name.to_ascii_lowercase()) || called_by_update(sem, &f.name))
        && evaluates() != Some(true)
}

/// A private helper (`_one_hot_targets`) that an update method of the same class calls as
/// `self._one_hot_targets(...)`: part of the update step.
fn called_by_update(sem: &Semantic<'_>, name: &str) -> bool {
    if !name.starts_with('_') || name.starts_with("__") {
        return false;
    }
    let Some(class) = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::ClassDef(c) => Some(c),
        _ => None,
    }) else {
        return false;
    };
    class.body.iter().any(|stmt| {
        let Stmt::FunctionDef(d) = stmt else {
            return false;
        };
        d.name.as_str() != name
            && is_update_name(&d.name.as_str().to_ascii_lowercase())
            && !find(&d.body, |e| {
                matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
                    if a.attr.as_str() == name
                        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")))
            })
            .is_empty()
            && !crate::semantic::evaluates_only(d.name.as_str(), &d.decorator_list, &d.body)
    })
}

/// An update, learning or loss method name.
fn is_update_name(lower: &str) -> bool {
    const EXACT: &[&str] = &[
        "update",
        "learn",
        "optimize",
        "_optimize",
        "_train",
        "_update",
    ];
    EXACT.contains(&lower)
        || lower.contains("loss")
        || crate::names::is_training_step_name(lower)
        || [
            "update_", "_update_", "learn_", "_learn_", "train_", "_train_",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
}

/// A rollout: `body` steps or resets an environment (`env.step(action)`, `self.eval_env.reset()`,
/// `envs.step(...)`) and runs no backward pass or optimizer step itself. Whatever it pulls to the
/// host goes to the simulator, which needs it there; when the same body also trains (an RL
/// script's loop), it is step code all the same.
pub fn is_rollout(body: &[Stmt]) -> bool {
    let mut all = Vec::new();
    super::statements(body, &mut all);
    let (mut env, mut trains) = (all.into_iter().any(is_env_step), false);
    crate::walk::try_each_expr(body, |e| {
        if let Expr::Call(call) = e
            && let Expr::Attribute(a) = call.func.as_ref()
        {
            if matches!(a.attr.as_str(), "step" | "reset")
                && last_name(&a.value).to_ascii_lowercase().contains("env")
            {
                env = true;
            }
            trains = is_update_call(a);
        }
        if trains {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    });
    env && !trains
}

/// `obs, reward, done, info = e.step(action)`: a `step` call unpacked into four or more names
/// is a gym-style environment step, whatever the environment is called.
pub fn is_env_step(stmt: &Stmt) -> bool {
    let Stmt::Assign(a) = stmt else { return false };
    let [Expr::Tuple(targets)] = a.targets.as_slice() else {
        return false;
    };
    targets.elts.len() >= 4
        && matches!(a.value.as_ref(), Expr::Call(c)
            if matches!(c.func.as_ref(), Expr::Attribute(m) if m.attr.as_str() == "step"))
}

/// The walk is inside a function (at any depth) that [`is_inference_name`] says runs at
/// inference, in rollouts or around loading and logging.
pub fn in_inference_code(sem: &Semantic<'_>) -> bool {
    in_evaluation_module(sem)
        || sem.scopes().iter().any(|s| {
            matches!(&s.kind, crate::semantic::ScopeKind::Function(f) if is_inference_name(&f.name))
        })
        || only_called_at_inference(sem)
}

/// The current method is a helper of its class that only the class's inference methods call
/// (`forward_cap`, called by `predict_answers` and nothing else, directly or through another
/// such helper): it runs at inference, whatever its own name says. `forward` and `__call__`
/// are the module's entry and run in the step.
fn only_called_at_inference(sem: &Semantic<'_>) -> bool {
    let Some(f) = sem.current_function() else {
        return false;
    };
    if !f.is_method || matches!(f.name.as_str(), "forward" | "__call__") {
        return false;
    }
    let Some(class) = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::ClassDef(c) => Some(c),
        _ => None,
    }) else {
        return false;
    };
    // Most classes have no inference method at all: then no chain of callers can end at one,
    // which the names alone tell without walking a body.
    let has_inference_method = class
        .body
        .iter()
        .any(|s| matches!(s, Stmt::FunctionDef(d) if is_inference_name(d.name.as_str())));
    if !has_inference_method {
        return false;
    }
    let key = (
        sem.module.clone(),
        class.name.to_string(),
        u32::from(class.range.start()),
    );
    CALLERS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.as_ref().is_none_or(|(k, _)| *k != key) {
            *cache = Some((key, SelfCalls::of(&class.body)));
        }
        cache
            .as_ref()
            .is_some_and(|(_, calls)| calls.callers_all_inference(&f.name))
    })
}

thread_local! {
    /// The [`SelfCalls`] of the class last asked about, keyed by module, class name and
    /// where the class starts: the methods of one class are checked one after another.
    static CALLERS: std::cell::RefCell<Option<(ClassKey, SelfCalls)>> =
        const { std::cell::RefCell::new(None) };
}

/// A class by module, name and where it starts.
type ClassKey = (String, String, u32);

/// For each method of a class, the `self.<name>` attributes its body reads: who calls whom.
struct SelfCalls {
    methods: Vec<(String, std::collections::HashSet<String>)>,
}

impl SelfCalls {
    fn of(class_body: &[Stmt]) -> SelfCalls {
        let methods = class_body
            .iter()
            .filter_map(|stmt| {
                let Stmt::FunctionDef(d) = stmt else {
                    return None;
                };
                let mut reads = std::collections::HashSet::new();
                crate::walk::try_each_expr(&d.body, |e| {
                    if let Expr::Attribute(a) = e
                        && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                    {
                        reads.insert(a.attr.to_string());
                    }
                    std::ops::ControlFlow::Continue(())
                });
                Some((d.name.to_string(), reads))
            })
            .collect();
        SelfCalls { methods }
    }

    /// The methods other than `name` that read `self.<name>`.
    fn callers<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.methods
            .iter()
            .filter(move |(m, reads)| m != name && reads.contains(name))
            .map(|(m, _)| m.as_str())
    }

    /// Every method that calls `self.<name>(...)` runs only at inference, and there is at least
    /// one. A caller runs only at inference when no method of the class calls it and its name
    /// says inference (`predict_answers`), or when all its own callers run only at inference: a
    /// `q_sample` that the loss calls is training code, whatever its name says.
    fn callers_all_inference(&self, name: &str) -> bool {
        let mut callers = self.callers(name).peekable();
        callers.peek().is_some() && callers.all(|caller| self.runs_only_at_inference(caller, 1))
    }

    fn runs_only_at_inference(&self, name: &str, depth: u32) -> bool {
        if depth > 3 || matches!(name, "forward" | "__call__") {
            return false;
        }
        let mut callers = self.callers(name).peekable();
        if callers.peek().is_none() {
            is_inference_name(name)
        } else {
            callers.all(|caller| self.runs_only_at_inference(caller, depth + 1))
        }
    }
}

/// The file belongs to evaluation or deployment code by its path (`eval/simpler/model_wrapper.py`,
/// `evaluate/wrapper/…`, `deploy.py`, a `pipelines/` package of inference pipelines): simulator
/// benchmarks, robot servers and sampling pipelines, not the training step.
fn in_evaluation_module(sem: &Semantic<'_>) -> bool {
    sem.module.split('.').any(|part| {
        matches!(
            part,
            "eval"
                | "evals"
                | "evaluate"
                | "evaluation"
                | "deploy"
                | "deployment"
                | "inference"
                | "pipelines"
        ) || part.starts_with("eval_")
    })
}

/// A function that runs at inference or in rollouts, not in the optimisation step: its
/// host-side work (action post-processing, decoding, sampling loops) is expected there.
pub fn is_inference_name(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "generate",
        "predict",
        "infer",
        "inference",
        "sample",
        "sampling",
        "rank",
        "rollout",
        "collect",
        "act",
        "decode",
        "extract",
        "evaluate",
        "eval",
        "test",
        "render",
        "explore",
        "exploration",
        "visualize",
        "plot",
        "export",
        "dumps",
        "save",
        "load",
        "env",
        "summary",
        "summaries",
    ];
    let lower = name.to_ascii_lowercase();
    // A loss is computed for training, whatever else the name says (`compute_act_loss`).
    // A chat model's `chat` / `batch_chat` / `stream_chat` builds prompts for `generate`
    // (not `apply_chat_template`, which a loss may call to build its masks).
    let chat = lower == "chat" || lower.ends_with("_chat");
    !lower.contains("loss") && (chat || lower.split('_').any(|w| WORDS.contains(&w)))
}

/// Some enclosing expression (of the `ancestors` of an [`Occurrence`]) hands the value to a
/// log, a print, a formatted string, a stats list or dict: a value that leaves the step only
/// to be looked at.
pub fn in_log_call(ancestors: &[Node<'_>]) -> bool {
    const LOG: &[&str] = &[
        "append",
        "extend",
        "log",
        "log_dict",
        "add_scalar",
        "add_scalars",
        "add_histogram",
        "print",
        "info",
        "debug",
        "warning",
        "record",
        "record_mean",
        "format",
        "str",
        "set_postfix",
        "Histogram",
    ];
    ancestors.iter().any(|n| match n {
        Node::Expr(Expr::Call(c)) => LOG.contains(&last_name(&c.func)),
        Node::Expr(Expr::JoinedStr(_) | Expr::FormattedValue(_) | Expr::Dict(_)) => true,
        _ => false,
    })
}

/// The walk is at module level (no enclosing function or class).
pub fn is_module_level(sem: &Semantic<'_>) -> bool {
    sem.scopes().len() == 1
}

/// Module-level functions of `body` (a file with the source `text`) that device code of the
/// same file calls by name and that are not device code themselves (those are checked where
/// they are defined).
pub fn device_helpers<'a>(sem: &Semantic<'a>, text: &str, body: &'a [Stmt]) -> Vec<&'a Stmt> {
    let candidates: Vec<&'a str> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::FunctionDef(f) if !is_step_or_loss_name(f.name.as_str()) => Some(f.name.as_str()),
            _ => None,
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let module_classes = module_classes(sem, body);
    let mut called: Vec<&'a str> = Vec::new();
    let mut collect = |def: &Stmt, stmts: &'a [Stmt]| {
        // A call by name spells the name: code that spells no candidate calls none.
        let source = text
            .get(usize::from(def.start())..usize::from(def.end()))
            .unwrap_or(text);
        if !candidates.iter().any(|name| source.contains(name)) {
            return;
        }
        for occ in find(
            stmts,
            |e| matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Name(_))),
        ) {
            if let Expr::Call(c) = occ.expr
                && let Expr::Name(n) = c.func.as_ref()
            {
                called.push(n.id.as_str());
            }
        }
    };
    for stmt in body {
        match stmt {
            Stmt::ClassDef(c) if module_classes.contains(&c.name.as_str()) => {
                for item in &c.body {
                    if let Stmt::FunctionDef(f) = item
                        && !is_setup_function(f.name.as_str(), &f.decorator_list)
                    {
                        collect(item, &f.body);
                    }
                }
            }
            Stmt::FunctionDef(f) if is_step_or_loss_name(f.name.as_str()) => collect(stmt, &f.body),
            _ => {}
        }
    }
    body.iter()
        .filter(|s| match s {
            Stmt::FunctionDef(f) => {
                !is_step_or_loss_name(f.name.as_str()) && called.contains(&f.name.as_str())
            }
            _ => false,
        })
        .collect()
}

/// Classes of `body` that are `nn.Module`s: a `forward` method, a torch/Lightning/
/// transformers base, or a base that is such a class of this file.
fn module_classes<'a>(sem: &Semantic<'a>, body: &'a [Stmt]) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for stmt in body {
        let Stmt::ClassDef(c) = stmt else { continue };
        let has_forward = c
            .body
            .iter()
            .any(|s| matches!(s, Stmt::FunctionDef(f) if f.name.as_str() == "forward"));
        let base_is_module = c.bases.iter().any(|b| {
            let q = sem.resolve(b).unwrap_or_else(|| crate::semantic::dotted(b));
            q.starts_with("torch.nn.")
                || q.starts_with("pytorch_lightning.")
                || q.starts_with("lightning.")
                || q.ends_with("Module")
                || q.ends_with("PreTrainedModel")
                || out.contains(&q.as_str())
        });
        if has_forward || base_is_module {
            out.push(c.name.as_str());
        }
    }
    out
}

/// Training-step and loss function names, as the semantic model judges them.
fn is_step_or_loss_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("loss") || crate::names::is_training_step_name(&lower)
}

/// Step code by the project's per-step model: [`in_step_code`], or a function that a step
/// root of the project reaches through its calls (a free helper of `forward` in another file,
/// a trainer method that the training loop calls), other than setup functions, transforms
/// and methods of host-side classes.
pub fn in_project_step(sem: &Semantic<'_>) -> bool {
    if in_step_code(sem) {
        return true;
    }
    let (Some(modules), Some(symbol)) = (sem.project_modules(), sem.symbol()) else {
        return false;
    };
    // A training script's loop function is step code in its loop only
    // ([`training_loop_body`]).
    if !modules.steps.reaches(&sem.module, &symbol)
        || modules.steps.runs_training_loop(&sem.module, &symbol)
    {
        return false;
    }
    let host = sem.current_class().is_some_and(|c| {
        is_host_class(&c.name, &c.bases)
            || c.bases
                .iter()
                .any(|b| b.starts_with("torchvision.") || b.ends_with("Transform"))
    });
    !host
        && !sem.stmts().iter().any(|s| match s {
            Stmt::FunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            Stmt::AsyncFunctionDef(f) => is_setup_function(f.name.as_str(), &f.decorator_list),
            _ => false,
        })
}

/// When the function `def` being entered runs the project's training loop (a loop over a
/// data loader with a backward pass or an optimizer step), the body of that loop: what runs
/// every step, without the setup before it or the evaluation after it.
pub fn training_loop_body<'a>(sem: &Semantic<'_>, def: &'a Stmt) -> Option<&'a [Stmt]> {
    match def {
        Stmt::If(s) => return update_loop(&s.body),
        Stmt::For(_) | Stmt::While(_) => return update_loop(std::slice::from_ref(def)),
        _ => {}
    }
    let (Some(modules), Some(symbol)) = (sem.project_modules(), sem.symbol()) else {
        return None;
    };
    if !modules.steps.runs_training_loop(&sem.module, &symbol) {
        return None;
    }
    let body = match def {
        Stmt::FunctionDef(f) => &f.body,
        Stmt::AsyncFunctionDef(f) => &f.body,
        _ => return None,
    };
    let mut all = Vec::new();
    super::statements(body, &mut all);
    all.into_iter().find_map(|s| match s {
        Stmt::For(f) if iterates_loader(&f.iter) => Some(f.body.as_slice()),
        _ => None,
    })
}

/// A statement at module level that runs a training script's step loop: the
/// `if __name__ == "__main__":` block, or a loop of a script without one, when it holds a loop
/// that runs a backward pass or an optimizer step ([`training_loop_body`] finds that loop).
/// Single-file trainers run their whole training there, outside any function.
pub fn script_block<'a>(sem: &Semantic<'_>, stmt: &'a Stmt) -> Option<&'a Stmt> {
    if !is_module_level(sem) || !sem.stmts().is_empty() {
        return None;
    }
    let block = match stmt {
        Stmt::If(s) if crate::semantic::is_main_guard_test(&s.test) => &s.body,
        Stmt::For(_) | Stmt::While(_) => std::slice::from_ref(stmt),
        _ => return None,
    };
    update_loop(block).map(|_| stmt)
}

/// The body of the outermost loop of `block` (at any depth outside functions and classes)
/// that runs a backward pass or an optimizer step: what runs once per update, rollout and
/// update alike.
fn update_loop(block: &[Stmt]) -> Option<&[Stmt]> {
    let mut all = Vec::new();
    super::statements(block, &mut all);
    let mut inner: Vec<&Stmt> = Vec::new();
    all.into_iter().find_map(|s| {
        let body = match s {
            Stmt::For(f) => &f.body,
            Stmt::While(w) => &w.body,
            _ => return None,
        };
        // A loop nested in one already rejected updates nothing either.
        if inner
            .iter()
            .any(|outer| outer.range().contains_range(s.range()))
        {
            return None;
        }
        if updates(body) {
            Some(body.as_slice())
        } else {
            inner.push(s);
            None
        }
    })
}

/// `body` runs a backward pass (`loss.backward()`, `accelerator.backward(loss)`) or an
/// optimizer or grad-scaler step.
fn updates(body: &[Stmt]) -> bool {
    crate::walk::try_each_expr(body, |e| match e {
        Expr::Call(call) if matches!(call.func.as_ref(), Expr::Attribute(a) if is_update_call(a)) => {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    })
}

/// The method call `a(...)` is `.backward()` or an optimizer's or grad scaler's `.step()`.
fn is_update_call(a: &crate::source::ast::ExprAttribute) -> bool {
    let attr = a.attr.as_str();
    attr == "backward" || {
        let receiver = last_name(&a.value).to_ascii_lowercase();
        attr == "step" && (receiver.contains("optim") || receiver.contains("scaler"))
    }
}

/// An iterable that walks a data loader (`train_loader`, `enumerate(tqdm(dataloader))`).
fn iterates_loader(iter: &Expr) -> bool {
    super::find_in_expr(iter).iter().any(|e| match e {
        Expr::Name(n) => n.id.as_str().to_ascii_lowercase().contains("loader"),
        Expr::Attribute(a) => a.attr.as_str().to_ascii_lowercase().contains("loader"),
        _ => false,
    })
}

/// The project's step graph reaches the function being walked (whatever its name says): it
/// runs in the training step.
pub fn reached_by_step(sem: &Semantic<'_>) -> bool {
    let (Some(modules), Some(symbol)) = (sem.project_modules(), sem.symbol()) else {
        return false;
    };
    modules.steps.reaches(&sem.module, &symbol)
}

#[cfg(test)]
mod tests {
    use super::is_inference_name;

    #[test]
    fn chat_helpers_are_inference_and_chat_templates_are_not() {
        for name in [
            "chat",
            "batch_chat",
            "stream_chat",
            "generate",
            "sample_actions",
        ] {
            assert!(is_inference_name(name), "{name}");
        }
        for name in [
            "apply_chat_template",
            "forward",
            "compute_sample_loss",
            "training_step",
        ] {
            assert!(!is_inference_name(name), "{name}");
        }
    }
}
