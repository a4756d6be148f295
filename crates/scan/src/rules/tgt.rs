//! `P_TGT`: per-step values (training targets, masks, metrics) computed on the host in device
//! code and turned back into tensors: numpy work or a `.cpu().numpy()` / `.tolist()` round trip.

mod interface;
mod moves;

use super::{Checker, Rule, RuleInfo};
use crate::analysis::{self, Function};
use crate::source::TextRange;
use crate::source::ast::{Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct HostTargets;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_TGT",
    name: "host-side-targets",
    category: Category::Semantic,
    severity: Severity::Warning,
    performance: true,
    project_level: false,
    fix_template: "references/fix-templates/P_TGT.md",
    summary: "A tensor built from numpy or a `.cpu().numpy()`/`.tolist()` round trip in device code, every step.",
    doc: include_str!("tgt.md"),
    check: &HostTargets,
};

/// The end of a pull's message in a return or advantage computation.
const RETURNS: &str = "computes returns or advantages from it on the host (check that it runs in \
     training: in an evaluation rollout whose values go to the environment it costs no step)";

/// Calls that turn host data into a tensor.
const TO_TENSOR: &[&str] = &[
    "torch.from_numpy",
    "torch.tensor",
    "torch.as_tensor",
    "torch.Tensor",
    "torch.FloatTensor",
    "torch.LongTensor",
    "torch.IntTensor",
    "torch.BoolTensor",
    "torch.DoubleTensor",
    "torch.HalfTensor",
    "torch.ByteTensor",
];

impl Rule for HostTargets {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        let Some(def) = analysis::function_entry(cx.semantic(), stmt)
            .or_else(|| analysis::script_block(cx.semantic(), stmt))
        else {
            return;
        };
        let Some(mut func) = Function::in_class(cx.semantic(), def) else {
            return;
        };
        let sem = cx.semantic();
        let host_class = sem
            .current_class()
            .is_some_and(|c| crate::names::is_host_class(&c.name, &c.bases));
        let direct = analysis::in_step_code(sem) || analysis::in_update_code(sem);
        let mut step = !host_class && (direct || analysis::in_project_step(sem));
        // A free helper that the step reaches across files: a round trip it returns to its
        // caller is one finding with its uploads as related sites.
        let reached_helper =
            step && !direct && !sem.current_function().is_some_and(|f| f.is_method);
        // A training script's loop over its data loader: its body runs every step.
        let mut script_loop = false;
        if !step && let Some(body) = analysis::training_loop_body(sem, def) {
            func.body = body;
            step = true;
            script_loop = true;
        }
        // Inference and rollouts hand their results to the robot or the environment anyway.
        // A function defined inside a rollout (a helper that stacks the environments'
        // observations) runs in that rollout.
        let is_rollout = |range: crate::source::TextRange, body: &[Stmt]| {
            // The text test spares the walk in the many functions that touch no environment.
            let text = cx.slice(range);
            (text.contains(".step(") || text.contains(".reset("))
                && text.contains("env")
                && analysis::is_rollout(body)
        };
        let training = !in_data_code(sem)
            && !analysis::in_inference_code(sem)
            && !is_rollout(def.range(), func.body)
            && !sem.stmts().iter().any(|s| match s {
                Stmt::FunctionDef(f)
                    if f.range != def.range() && f.range.contains_range(def.range()) =>
                {
                    is_rollout(f.range, &f.body)
                }
                _ => false,
            });
        // A method handed a data loader runs the evaluation loop itself, not one step of it.
        let loops_data = sem
            .current_function()
            .is_some_and(|f| f.params.iter().any(|p| p.contains("loader")));
        let tokenize = training && !host_class && !loops_data && (step || per_call_method(sem));
        let returns = training && computes_returns(sem, host_class);
        let stores = training && !host_class && sem.current_class().is_some();
        if tokenize {
            tokenizers(cx, &func);
        }
        if stores {
            moves::batch_stores(cx, def, &func);
        }
        if !step {
            let helper = training && !host_class && round_trip_helper(cx, def, &func);
            if !helper && returns {
                host_returns(cx, def, &func);
            }
            return;
        }
        if !training || (reached_helper && round_trip_helper(cx, def, &func)) {
            return;
        }
        let mark = cx.mark();
        moves::cpu_round_trip(cx, def, &func);
        let uploads = host_uploads(cx, def, &func);
        if !uploads.is_empty() {
            let why = "sends what it computes from it back as a tensor";
            let from = cx.mark();
            pulls(cx, def, &func, &uploads, why);
            // A script's loop is long: a pull there is a round trip only when its value
            // comes back.
            if script_loop {
                let unreturned = interface::unreturned_pulls(cx, func.body, &uploads);
                cx.retain_since(from, |f| interface::outside(&unreturned, f));
            }
        } else if returns {
            host_returns(cx, def, &func);
        }
        if script_loop {
            host_metrics(cx, &func, &uploads);
            // A loop that also steps environments sends them actions and uploads what they
            // return: that traffic is the simulator's interface, not a round trip.
            let interface = interface::simulator_lines(cx, def);
            cx.retain_since(mark, |f| interface::outside(&interface, f));
        }
    }
}

/// A return or advantage computation: its pulls of device tensors, and the round-trip methods
/// its loops call.
fn host_returns<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) {
    pulls(cx, def, func, &[], RETURNS);
    moves::round_trip_calls(cx, func);
}

/// In a training script's loop: a tensor pulled with `.cpu()` straight into a comparison or
/// arithmetic (`(logits[..., -1].cpu() > 0.5) == target`), a metric computed on the host
/// every step. Values that only go to a log are left alone.
fn host_metrics<'a>(cx: &mut Checker<'a>, func: &Function<'a>, uploads: &[TextRange]) {
    let found = analysis::find(func.body, |e| {
        matches!(e, Expr::Call(c) if c.args.is_empty()
            && matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.as_str() == "cpu"))
    });
    for occ in found {
        let computes = matches!(
            occ.ancestors.last(),
            Some(analysis::Node::Expr(Expr::Compare(_) | Expr::BinOp(_)))
        );
        let range = occ.expr.range();
        if !computes
            || analysis::in_log_call(&occ.ancestors)
            || uploads.iter().any(|u| u.contains_range(range))
        {
            continue;
        }
        cx.report(
            pull_site(occ.expr),
            "the training loop pulls a device tensor to the host and computes a metric from it there, \
             a host-device sync and a copy per step on the NPU; compute it with torch ops on the device \
             (see P_TGT.md); check first that this runs in the training step: an inference or \
             chat helper, or the batch's own labels uploaded once, is not a per-step round trip",
        );
    }
}

/// Report every tensor the step builds from host data; their ranges.
fn host_uploads<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) -> Vec<TextRange> {
    let sem = cx.semantic();
    // Every such call names `from_numpy`, `*tensor`, `*Tensor` or `to_torch*`, or a name bound
    // to one of them: a function that does neither needs no walk.
    let text = cx.slice(def.range());
    if !text.contains("tensor")
        && !text.contains("Tensor")
        && !text.contains("from_numpy")
        && !text.contains("to_torch")
        && !sem.binds_any(|q| TO_TENSOR.contains(&q))
    {
        return Vec::new();
    }
    let calls = analysis::find(func.body, |e| is_to_tensor(sem, e));
    let hits: Vec<_> = calls
        .iter()
        .filter_map(|occ| {
            let Expr::Call(call) = occ.expr else {
                return None;
            };
            let arg = call.args.first()?;
            let constant = occ.ancestors.iter().any(|n| {
                matches!(n, analysis::Node::Expr(Expr::Call(c))
                    if matches!(c.func.as_ref(), Expr::Attribute(a)
                        if matches!(a.attr.as_str(), "register_buffer" | "register_parameter")))
            });
            let upload = analysis::derives_from_host(sem, func, arg, 0)
                && (derives_from_pull(func, arg, 0)
                    || goes_to_device(call, &occ.ancestors)
                    || is_device_helper(call))
                && !constant
                && !is_metadata(arg)
                && !assigned_metadata(occ);
            upload.then(|| occ.expr.range())
        })
        .collect();
    for range in hits.iter().copied() {
        cx.report(
            range,
            "this tensor is built from host (numpy or `.cpu().numpy()`/`.tolist()`) data every step, \
             a host-device sync and copy per step on the NPU; compute it on the device or in the dataset \
             (see P_TGT.md); check first that this runs in the training step: an inference or \
             chat helper, or the batch's own labels uploaded once, is not a per-step round trip",
        );
    }
    hits
}

/// A value pulled from a tensor (`.numpy()`, `.tolist()`, `to_numpy(...)`, `.cpu()`), directly
/// or through local names: a round trip, wherever the new tensor goes. Data born on the host
/// (numpy draws, env arrays) counts only when it is sent to the device.
fn derives_from_pull(func: &Function<'_>, expr: &Expr, depth: u32) -> bool {
    if depth > 4 {
        return false;
    }
    let mut names = Vec::new();
    for e in analysis::find_in_expr(expr) {
        match e {
            Expr::Call(c) => {
                let last = analysis::last_name_of(c.func.as_ref());
                if matches!(last, "numpy" | "tolist" | "to_numpy" | "cpu") {
                    return true;
                }
            }
            Expr::Name(n) => names.push(n.id.as_str()),
            _ => {}
        }
    }
    names.iter().any(|n| {
        func.assigned(n)
            .iter()
            .any(|(_, v)| !std::ptr::eq(*v, expr) && derives_from_pull(func, v, depth + 1))
    })
}

/// `to_torch_as(x, y)` moves `x` to the device of `y`; `to_torch(x, device=...)` names one.
fn is_device_helper(call: &crate::source::ast::ExprCall) -> bool {
    let last = analysis::last_name_of(call.func.as_ref());
    last == "to_torch_as"
}

/// Words of names that hold input metadata (positions, lengths, counts, masks), not targets.
const METADATA: &[&str] = &[
    "index", "idx", "pos", "len", "count", "shape", "size", "grid", "offset", "seq", "mask",
];

fn says_metadata(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    METADATA.iter().any(|w| lower.contains(w))
}

/// The uploaded value is named as metadata (`torch.tensor(seq_lens, device=d)`).
fn is_metadata(arg: &Expr) -> bool {
    match arg {
        Expr::Name(n) => says_metadata(n.id.as_str()),
        Expr::Attribute(a) => says_metadata(a.attr.as_str()),
        _ => false,
    }
}

/// The upload is assigned to a name that says metadata (`seq_lens = torch.tensor(...)`).
fn assigned_metadata(occ: &analysis::Occurrence<'_>) -> bool {
    matches!(occ.ancestors.last(), Some(analysis::Node::Stmt(Stmt::Assign(a)))
        if matches!(a.targets.as_slice(), [Expr::Name(n)] if says_metadata(n.id.as_str())))
}

/// A trainer method that runs once per training call although the semantic model files it
/// under setup (`_build_*_inputs`, `prepare_*`): any method of a `*Trainer` class other than
/// constructors, dunder methods and static methods (a `tokenize_row` helper has no trainer
/// state: it is mapped over the dataset).
fn per_call_method(sem: &crate::semantic::Semantic<'_>) -> bool {
    let Some(f) = sem.current_function() else {
        return false;
    };
    let Some(class) = sem.current_class() else {
        return false;
    };
    let static_method = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(d) => Some(
            d.decorator_list
                .iter()
                .any(|e| matches!(analysis::last_name_of(e), "staticmethod")),
        ),
        _ => None,
    });
    f.is_method
        && static_method != Some(true)
        && !f.name.starts_with("__")
        && !f.name.contains("init")
        && class.name.ends_with("Trainer")
        && !crate::names::is_host_class(&class.name, &class.bases)
}

/// A method named after the returns, advantages or targets it computes (of a rollout buffer
/// too, when it computes returns or advantages: they are built from the critic's values).
fn computes_returns(sem: &crate::semantic::Semantic<'_>, host_class: bool) -> bool {
    sem.current_function().is_some_and(|f| {
        let lower = f.name.to_ascii_lowercase();
        let returns = ["return", "advantage", "gae"]
            .iter()
            .any(|w| lower.contains(w));
        f.is_method && (returns || (!host_class && lower.contains("target")))
    })
}

/// Report each pull of a device tensor to the host (`.cpu().numpy()`, `to_numpy(x)`, `.cpu()`
/// handed to a scipy or scikit-learn call) that is not only logged and not inside an upload
/// already reported (`torch.tensor(x.cpu().numpy())` is one finding). `why` ends the message.
fn pulls<'a>(
    cx: &mut Checker<'a>,
    def: &Stmt,
    func: &Function<'a>,
    uploads: &[TextRange],
    why: &str,
) {
    let text = cx.slice(def.range());
    if !text.contains("numpy") && !text.contains(".cpu()") {
        return;
    }
    let sem = cx.semantic();
    let found: Vec<_> = analysis::find(func.body, |e| is_pull(sem, e))
        .into_iter()
        .filter(|occ| !analysis::in_log_call(&occ.ancestors))
        .map(|occ| (occ.expr.range(), pull_site(occ.expr)))
        .collect();
    // One finding per pull chain: `x.cpu().numpy()` holds `x.cpu()`.
    let mut kept: Vec<(TextRange, TextRange)> = Vec::new();
    for (range, site) in found {
        if kept
            .iter()
            .map(|k| &k.0)
            .chain(uploads)
            .any(|k| k.contains_range(range))
        {
            continue;
        }
        kept.push((range, site));
    }
    for (_, site) in kept {
        cx.report(
            site,
            format!(
                "the step pulls a device tensor to the host and {why}, a host-device sync and two copies \
                 per step on the NPU; compute it with torch ops on the device (see P_TGT.md); check first \
                 that this runs in the training step: an inference or \
                 chat helper, or the batch's own labels uploaded once, is not a per-step round trip"
            ),
        );
    }
}

/// A pull of a tensor to the host for computing: `x.cpu().numpy()` (any chain through
/// `.cpu()`), `to_numpy(x)` of a value that is not host data, or `f(x.cpu())` where `f` is a
/// scipy, scikit-learn or numba function.
fn is_pull(sem: &crate::semantic::Semantic<'_>, expr: &Expr) -> bool {
    let Expr::Call(call) = expr else {
        return false;
    };
    if pulled_base(expr).is_some() {
        return true;
    }
    let last = analysis::last_name_of(call.func.as_ref());
    if last == "to_numpy" {
        // A tensor computed from the model (a call) rather than a field of the host batch.
        return call
            .args
            .first()
            .is_some_and(|a| !matches!(a, Expr::Name(_) | Expr::Attribute(_)) || is_computed(a));
    }
    ["scipy.", "sklearn."]
        .iter()
        .any(|p| sem.resolves_with_prefix(&call.func, p))
        && call.args.iter().any(|a| {
            matches!(a, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(m) if m.attr.as_str() == "cpu"))
        })
}

/// A name or attribute that is not a field of a batch (`batch.obs`): a local result.
fn is_computed(expr: &Expr) -> bool {
    match expr {
        Expr::Name(n) => !n.id.as_str().contains("batch"),
        _ => false,
    }
}

/// Runs a tokenizer on host strings: `self.tokenizer(texts, ...)`, `self.t5_tokenizer(...)`,
/// `tokenizer.encode(...)`, `tokenizer.apply_chat_template(...)`. Each call
/// is one finding: the step re-tokenizes its text inputs or targets every call.
fn tokenizers<'a>(cx: &mut Checker<'a>, func: &Function<'a>) {
    let sem = cx.semantic();
    // A `Tokenizer` submodule of the model (a patch embedding) works on tensors.
    let submodule = |e: &Expr| {
        matches!(e, Expr::Call(c) if matches!(c.func.as_ref(), Expr::Attribute(a)
            if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                && func.self_tensors(sem).contains(&a.attr.as_str())))
    };
    let method = sem.current_function().is_some_and(|f| f.is_method);
    let found: Vec<_> = analysis::find(func.body, |e| {
        (is_tokenizer_call(e) || (method && hands_tokenizer(e))) && !submodule(e)
    })
    .into_iter()
    .map(|occ| occ.expr.range())
    .collect();
    for range in found {
        cx.report(
            range,
            "the step runs a tokenizer on host strings every call (a CPU pass and an upload per step, \
             while the NPU waits); tokenize once in the dataset or the collator and pass ids and \
             labels in the batch (see P_TGT.md); check first \
             that this runs in the training step: an inference or \
             chat helper, or the batch's own labels uploaded once, is not a per-step round trip",
        );
    }
}

/// A helper handed a tokenizer and text (`build_inputs_from_texts(self.tokenizer, prompt_texts)`)
/// tokenizes inside, and so does a chat template rendered with one
/// (`history.apply_chat_template(tokenizer=self.tokenizer)`). Constructors (capitalised callees)
/// and inference calls (`generate(..., tokenizer=tok)`) are not helpers of the step, and a
/// helper handed ids (`parse_response(tokenizer, ids)`) decodes.
fn hands_tokenizer(expr: &Expr) -> bool {
    let Expr::Call(call) = expr else {
        return false;
    };
    let callee = analysis::last_name_of(call.func.as_ref());
    if callee.starts_with(|c: char| c.is_ascii_uppercase()) || analysis::is_inference_name(callee) {
        return false;
    }
    let mut args = call
        .args
        .iter()
        .chain(call.keywords.iter().map(|k| &k.value));
    let named = |e: &Expr, words: &[&str]| {
        matches!(e, Expr::Name(_) | Expr::Attribute(_)) && {
            let lower = analysis::last_name_of(e).to_ascii_lowercase();
            words.iter().any(|w| lower.contains(w))
        }
    };
    if !args.clone().any(|e| named(e, &["tokenizer"])) {
        return false;
    }
    callee == "apply_chat_template"
        || args.any(|e| named(e, &["text", "prompt", "caption", "instruction", "sentence"]))
}

fn is_tokenizer_call(expr: &Expr) -> bool {
    let Expr::Call(call) = expr else {
        return false;
    };
    let is_tok = |e: &Expr| {
        let name = analysis::last_name_of(e);
        // `InstructionTokenizer(...)` constructs one; an instance is called by a lowercase name.
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            return false;
        }
        let lower = name.to_ascii_lowercase();
        // Processors are left alone: in model code `self.processor(...)` is an attention
        // processor, and image processors run on host images anyway.
        lower.ends_with("tokenizer")
    };
    if call.args.is_empty() && call.keywords.is_empty() {
        return false;
    }
    match call.func.as_ref() {
        Expr::Attribute(a)
            if matches!(
                a.attr.as_str(),
                "encode" | "encode_plus" | "batch_encode_plus" | "apply_chat_template"
            ) =>
        {
            is_tok(&a.value)
        }
        callee => is_tok(callee),
    }
}

/// A helper outside the step code proper (a target builder the loss or training step calls)
/// that takes a device tensor, pulls it to the host with `.cpu().numpy()`, and sends what it
/// computes from it back to a device: one issue at each pull (of its inputs, and of the tensors
/// it computes from them), with the tensors sent back in `related[]`. Data-loading code
/// (datasets, collate functions) and setup code are left alone.
fn round_trip_helper<'a>(cx: &mut Checker<'a>, def: &Stmt, func: &Function<'a>) -> bool {
    let sem = cx.semantic();
    if in_data_code(sem) || sem.in_device_code() {
        return false;
    }
    // A constructor or builder (normalisation statistics computed once from the dataset) runs
    // once, not every step.
    if let Stmt::FunctionDef(f) = def
        && analysis::is_setup_function(f.name.as_str(), &f.decorator_list)
    {
        return false;
    }
    // A pull ends in `.numpy()`: most functions never spell it, which is cheaper to see than
    // to walk their bodies.
    if !cx.slice(def.range()).contains("numpy") {
        return false;
    }
    // Every pull, and whether it pulls one of the helper's inputs: a helper is a round trip only
    // when it pulls an input.
    let pulls: Vec<_> = analysis::find(func.body, |e| pulled_base(e).is_some())
        .into_iter()
        .map(|occ| {
            let of_param = pulled_param(occ.expr).is_some_and(|n| func.is_param(n));
            (occ, of_param)
        })
        .collect();
    if !pulls.iter().any(|(_, of_param)| *of_param) || pins_cpu(func) {
        return false;
    }
    let back: Vec<_> = analysis::find(func.body, |e| is_to_tensor(sem, e))
        .into_iter()
        .filter(|occ| {
            let Expr::Call(call) = occ.expr else {
                return false;
            };
            call.args
                .first()
                .is_some_and(|arg| analysis::derives_from_host(sem, func, arg, 0))
                && goes_to_device(call, &occ.ancestors)
        })
        .map(|occ| occ.expr.range())
        .collect();
    if back.is_empty() {
        return false;
    }
    let related: Vec<_> = back
        .iter()
        .map(|range| cx.related(*range, "the host result goes back to the device here"))
        .collect();
    // Once the helper is a round trip, its other pulls (of tensors it computed from its
    // inputs on the device, returned to the caller as numpy) are syncs of the same call.
    for (occ, of_param) in pulls {
        let message = if of_param {
            "this helper pulls a device tensor to the host with `.cpu().numpy()`, computes on it and sends \
             the result back to the device, a host-device sync and two copies per call on the NPU; compute \
             it with torch ops on the device (see P_TGT.md); check first \
             that this runs in the training step: an inference or \
             chat helper, or the batch's own labels uploaded once, is not a per-step round trip"
        } else {
            "this helper, which already sends host results back to the device, pulls another tensor it \
             computed to the host here, one more sync per call on the NPU (a caller that turns it back into \
             a tensor pays a second upload); return the tensor and keep the work on the device (see P_TGT.md); check first \
             that this runs in the training step: an inference or \
             chat helper, or the batch's own labels uploaded once, is not a per-step round trip"
        };
        let finding = cx.report(pull_site(occ.expr), message);
        finding.related.clone_from(&related);
    }
    true
}

/// A method of a class whose every `self.device = …` is the literal `"cpu"` (a robot agent
/// that runs its policy on the host): what it sends "back" stays on the CPU.
fn pins_cpu(func: &Function<'_>) -> bool {
    let Some(body) = func.class_body() else {
        return false;
    };
    let values = analysis::self_attr_values(body, "device");
    !values.is_empty() && values.iter().all(|(v, _)| moves::is_cpu_str(v))
}

/// A call that turns host data into a tensor (also through a `to_torch`/`to_torch_as` helper).
fn is_to_tensor(sem: &crate::semantic::Semantic<'_>, expr: &Expr) -> bool {
    let Expr::Call(c) = expr else {
        return false;
    };
    let helper = analysis::last_name_of(c.func.as_ref());
    matches!(helper, "to_torch" | "to_torch_as") || sem.matches(&c.func, TO_TENSOR)
}

/// Datasets, collate functions and other code that runs in `DataLoader` workers.
fn in_data_code(sem: &crate::semantic::Semantic<'_>) -> bool {
    let dataset = sem.current_class().is_some_and(|c| {
        c.bases
            .iter()
            .any(|b| b.ends_with("Dataset") || b.ends_with("DataLoader") || b.ends_with("Sampler"))
    });
    let data_fn = sem.current_function().is_some_and(|f| {
        let name = f.name.to_ascii_lowercase();
        name.contains("collate") || name == "__getitem__" || name == "__iter__"
    });
    // A `data`/`datasets` package: datasets, buffers, collators and the processors that
    // prepare samples (chat templates, tokenization) before the batch reaches the step.
    let data_package = sem
        .module
        .split('.')
        .any(|part| matches!(part, "data" | "datasets"));
    dataset || data_fn || data_package
}

/// For `p.cpu().numpy()` (any chain between `p` and `.numpy()` that goes through `.cpu()`,
/// e.g. `p.detach().cpu().numpy()`), the name `p`.
fn pulled_param(expr: &Expr) -> Option<&str> {
    match pulled_base(expr)? {
        Expr::Name(n) => Some(n.id.as_str()),
        _ => None,
    }
}

/// For `x.cpu().numpy()` (any chain between `x` and `.numpy()` that goes through `.cpu()`),
/// the expression the chain starts from: a name, or the call or attribute below the chain
/// (`self.critic(obs).cpu().numpy()` starts from `self.critic(obs)`).
fn pulled_base(expr: &Expr) -> Option<&Expr> {
    let Expr::Call(call) = expr else {
        return None;
    };
    let Expr::Attribute(numpy) = call.func.as_ref() else {
        return None;
    };
    if numpy.attr.as_str() != "numpy" {
        return None;
    }
    let mut through_cpu = false;
    let mut cur = numpy.value.as_ref();
    loop {
        let next = match cur {
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a) => {
                    through_cpu |= a.attr.as_str() == "cpu";
                    a.value.as_ref()
                }
                _ => return through_cpu.then_some(cur),
            },
            Expr::Attribute(a) => {
                through_cpu |= a.attr.as_str() == "cpu";
                a.value.as_ref()
            }
            Expr::Subscript(s) => s.value.as_ref(),
            _ => return through_cpu.then_some(cur),
        };
        cur = next;
    }
}

/// Where a pull is spelled: from the `.cpu()` of a chain split over lines on (`key = (x\n
/// .detach()\n.cpu()\n.numpy())` is at `.cpu()`), else the whole call.
fn pull_site(expr: &Expr) -> TextRange {
    let mut cur = expr;
    loop {
        cur = match cur {
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a) if a.attr.as_str() == "cpu" => {
                    return TextRange::new(moves::call_site(cur).start(), expr.range().end());
                }
                Expr::Attribute(a) => a.value.as_ref(),
                _ => return expr.range(),
            },
            Expr::Attribute(a) => a.value.as_ref(),
            Expr::Subscript(s) => s.value.as_ref(),
            _ => return expr.range(),
        };
    }
}

/// The new tensor is created with a `device=` other than the CPU, or moved with an
/// immediate `.to(...)` / `.cuda()` that does not name the CPU.
fn goes_to_device(call: &crate::source::ast::ExprCall, ancestors: &[analysis::Node<'_>]) -> bool {
    let not_cpu = |e: &Expr| {
        !matches!(e, Expr::Constant(c)
            if matches!(&c.value, crate::source::ast::Constant::Str(s) if s == "cpu")
                || matches!(c.value, crate::source::ast::Constant::None))
    };
    if call
        .keywords
        .iter()
        .any(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == "device") && not_cpu(&k.value))
    {
        return true;
    }
    // The creation, then `.float()`-style conversions, then `.to(device)` / `.cuda()`.
    let mut chain = ancestors.iter().rev();
    while let Some(analysis::Node::Expr(Expr::Attribute(a))) = chain.next() {
        let Some(analysis::Node::Expr(Expr::Call(outer))) = chain.next() else {
            return false;
        };
        match a.attr.as_str() {
            "cuda" | "npu" => return true,
            "to" => return outer.args.first().is_some_and(not_cpu),
            "float" | "half" | "bfloat16" | "long" | "int" | "bool" | "contiguous" | "reshape"
            | "view" => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host round trip through a name that never spells `tensor`, `Tensor` or `from_numpy`
    /// in the step function is found.
    #[test]
    fn round_trip_through_alias() {
        let text = "import torch\n\
            from torch import as_tensor as to_t\n\
            class Policy(torch.nn.Module):\n    \
                def forward(self, x):\n        \
                    return x + to_t(x.cpu().numpy())\n";
        assert_eq!(crate::visit::reported_lines(&RULE, "m.py", text), [5]);
    }
}
