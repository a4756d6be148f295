//! `P_LTM`: `PyTorch` Lightning code that assumes CUDA or uses APIs that Lightning 2.x removed.
//!
//! Finds `pytorch_lightning.metrics` (removed; now torchmetrics), `Trainer(gpus=…)`,
//! `accelerator="gpu"`/`"cuda"`, `amp_backend="apex"`, other removed `Trainer` arguments and
//! classmethods, removed modules and classes, and removed `LightningModule` hooks.

use super::{Checker, Rule, RuleInfo};
use crate::source::ast::{self, Expr, Ranged, Stmt};
use issue_model::{Category, Severity};

pub struct Lightning;

pub const RULE: RuleInfo = RuleInfo {
    id: "P_LTM",
    name: "lightning-gpu-assumptions",
    category: Category::Framework,
    severity: Severity::Error,
    performance: false,
    project_level: false,
    fix_template: "references/fix-templates/P_LTM.md",
    summary: "PyTorch Lightning code that assumes CUDA GPUs or uses APIs removed in Lightning 2.x.",
    doc: include_str!("ltm.md"),
    check: &Lightning,
};

/// Module roots of Lightning's `PyTorch` package.
const ROOTS: &[&str] = &["pytorch_lightning", "lightning.pytorch", "lightning"];

/// Trainer (and Fabric) constructors.
fn is_trainer(q: &str) -> bool {
    ROOTS.iter().any(|root| {
        q.strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| {
                matches!(
                    rest,
                    "Trainer" | "trainer.Trainer" | "trainer.trainer.Trainer" | "Fabric"
                )
            })
    }) || matches!(q, "lightning_fabric.Fabric" | "lightning.fabric.Fabric")
}

/// `Trainer` arguments removed in Lightning 2.0, with what replaces them.
const REMOVED_TRAINER_ARGS: &[(&str, &str)] = &[
    ("auto_select_gpus", "pick devices with `devices=`"),
    ("amp_level", "use `precision=` (native AMP)"),
    ("tpu_cores", "use `accelerator=` and `devices=`"),
    ("ipus", "use `accelerator=` and `devices=`"),
    ("num_processes", "use `devices=`"),
    ("log_gpu_memory", "use the `DeviceStatsMonitor` callback"),
    ("distributed_backend", "use `strategy=`"),
    (
        "resume_from_checkpoint",
        "pass `ckpt_path=` to `trainer.fit`",
    ),
    ("replace_sampler_ddp", "use `use_distributed_sampler=`"),
    (
        "track_grad_norm",
        "log `grad_norm` yourself in `on_before_optimizer_step`",
    ),
    (
        "auto_lr_find",
        "use the `LearningRateFinder` callback or `Tuner`",
    ),
    (
        "auto_scale_batch_size",
        "use the `BatchSizeFinder` callback or `Tuner`",
    ),
    ("move_metrics_to_cpu", "remove it"),
    ("multiple_trainloader_mode", "use `CombinedLoader`"),
    ("weights_summary", "use the `ModelSummary` callback"),
    (
        "progress_bar_refresh_rate",
        "configure the `TQDMProgressBar` callback",
    ),
    ("checkpoint_callback", "use `enable_checkpointing=`"),
    ("flush_logs_every_n_steps", "configure the logger"),
    (
        "stochastic_weight_avg",
        "use the `StochasticWeightAveraging` callback",
    ),
    (
        "terminate_on_nan",
        "use `detect_anomaly=` or check the loss yourself",
    ),
    (
        "process_position",
        "configure the `TQDMProgressBar` callback",
    ),
    (
        "prepare_data_per_node",
        "set `prepare_data_per_node` on the DataModule",
    ),
];

/// Modules and classes removed from Lightning 1.x, with their replacement.
const REMOVED_IMPORTS: &[(&str, &str)] = &[
    ("pytorch_lightning.metrics", "the `torchmetrics` package"),
    (
        "pytorch_lightning.core.lightning",
        "`pytorch_lightning.core.module`",
    ),
    (
        "pytorch_lightning.accelerators.GPUAccelerator",
        "`CUDAAccelerator` (CUDA-only; see the fix template for the NPU)",
    ),
    (
        "pytorch_lightning.plugins.DDPPlugin",
        "`pytorch_lightning.strategies.DDPStrategy`",
    ),
    (
        "pytorch_lightning.plugins.DDPSpawnPlugin",
        "`pytorch_lightning.strategies.DDPSpawnStrategy`",
    ),
    (
        "pytorch_lightning.plugins.DeepSpeedPlugin",
        "`pytorch_lightning.strategies.DeepSpeedStrategy`",
    ),
    (
        "pytorch_lightning.callbacks.GPUStatsMonitor",
        "the `DeviceStatsMonitor` callback",
    ),
    (
        "pytorch_lightning.loggers.TestTubeLogger",
        "another logger (TensorBoardLogger, CSVLogger)",
    ),
    (
        "pytorch_lightning.trainer.supporters",
        "`pytorch_lightning.utilities.combined_loader` (`CombinedLoader`)",
    ),
    (
        "pytorch_lightning.loggers.LightningLoggerBase",
        "`pytorch_lightning.loggers.Logger`",
    ),
    (
        "pytorch_lightning.loggers.base",
        "`pytorch_lightning.loggers.logger`",
    ),
    (
        "pytorch_lightning.utilities.apply_func",
        "`lightning_utilities.core.apply_func`",
    ),
    (
        "pytorch_lightning.utilities.argparse",
        "explicit arguments or LightningCLI",
    ),
    (
        "pytorch_lightning.plugins.DDP2Plugin",
        "`DDPStrategy` (the DDP2 mode is gone)",
    ),
    (
        "pytorch_lightning.plugins.DataParallelPlugin",
        "`DDPStrategy` (DataParallel is gone)",
    ),
    (
        "pytorch_lightning.plugins.DDPShardedPlugin",
        "`FSDPStrategy` or DeepSpeed ZeRO",
    ),
    (
        "pytorch_lightning.plugins.training_type",
        "`pytorch_lightning.strategies`",
    ),
    ("pytorch_lightning.lite", "`lightning_fabric.Fabric`"),
    (
        "lightning_lite",
        "`lightning_fabric` (the package was renamed)",
    ),
];

/// `Trainer` and `LightningModule` attributes removed by Lightning 2.0, with what replaces
/// them.
const REMOVED_TRAINER_ATTRS: &[(&str, &str)] = &[
    ("training_type_plugin", "`trainer.strategy`"),
    (
        "accelerator_connector",
        "`trainer.strategy` and `trainer.accelerator`",
    ),
    ("accelerator_backend", "`trainer.accelerator`"),
    ("on_gpu", "`self.device.type` (which is `npu` on the NPU)"),
    ("root_gpu", "`trainer.strategy.root_device`"),
    ("data_parallel_device_ids", "`trainer.device_ids`"),
];

/// Lightning's CUDA device counting (`lightning_lite.accelerators.cuda.num_cuda_devices`):
/// under any of Lightning's package names, `accelerators.cuda` and what it holds.
fn is_cuda_counting(q: &str) -> bool {
    let Some((root, rest)) = q.split_once(".accelerators.cuda") else {
        return false;
    };
    matches!(
        root,
        "lightning_lite"
            | "lightning_fabric"
            | "pytorch_lightning"
            | "lightning.fabric"
            | "lightning.pytorch"
    ) && (rest.is_empty() || rest.starts_with('.'))
}

const CUDA_COUNTING: &str = "Lightning's `accelerators.cuda` helpers (`num_cuda_devices`, \
     `is_cuda_available`) count CUDA devices only, so they report 0 on the NPU; count with \
     `torch.npu.device_count()` (see the fix template)";

/// `LightningModule` hooks removed in Lightning 2.0.
const REMOVED_HOOKS: &[(&str, &str)] = &[
    (
        "training_epoch_end",
        "`on_train_epoch_end` (collect step outputs yourself)",
    ),
    (
        "validation_epoch_end",
        "`on_validation_epoch_end` (collect step outputs yourself)",
    ),
    (
        "test_epoch_end",
        "`on_test_epoch_end` (collect step outputs yourself)",
    ),
    (
        "on_epoch_start",
        "`on_train_epoch_start` / `on_validation_epoch_start`",
    ),
    (
        "on_epoch_end",
        "`on_train_epoch_end` / `on_validation_epoch_end`",
    ),
];

fn removed_import(module: &str) -> Option<(&'static str, &'static str)> {
    // `lightning.pytorch` is `pytorch_lightning` under the unified package name.
    let module = module.strip_prefix("lightning.pytorch").map_or_else(
        || module.to_owned(),
        |rest| format!("pytorch_lightning{rest}"),
    );
    let module = module.as_str();
    REMOVED_IMPORTS.iter().copied().find(|(removed, _)| {
        module == *removed
            || module
                .strip_prefix(removed)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

fn string_value(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Constant(c) => match &c.value {
            ast::Constant::Str(s) => Some(s.as_str()),
            _ => None,
        },
        _ => None,
    }
}

impl Lightning {
    fn check_import(cx: &mut Checker<'_>, stmt: &Stmt) {
        let modules: Vec<String> = match stmt {
            Stmt::Import(import) => import
                .names
                .iter()
                .map(|a| a.name.as_str().to_owned())
                .collect(),
            Stmt::ImportFrom(from) => {
                let level = from.level.as_ref().map_or(0, ast::Int::to_u32);
                if level > 0 {
                    return;
                }
                let Some(module) = &from.module else { return };
                // `from pytorch_lightning.metrics import X` names the module; `from
                // pytorch_lightning import metrics` names it through the alias.
                std::iter::once(module.as_str().to_owned())
                    .chain(
                        from.names
                            .iter()
                            .map(|a| format!("{}.{}", module.as_str(), a.name.as_str())),
                    )
                    .collect()
            }
            _ => return,
        };
        if modules.iter().any(|m| is_cuda_counting(m)) {
            cx.report(stmt.range(), CUDA_COUNTING);
            return;
        }
        if let Some((removed, instead)) = modules.iter().find_map(|m| removed_import(m)) {
            cx.report(
                stmt.range(),
                format!("`{removed}` was removed from PyTorch Lightning; use {instead}"),
            );
        }
    }

    fn check_trainer_call(cx: &mut Checker<'_>, call: &ast::ExprCall) {
        for keyword in &call.keywords {
            match (&keyword.arg, &keyword.value) {
                (Some(arg), value) => {
                    if let Some(message) = trainer_arg_message(arg.as_str(), string_value(value)) {
                        cx.report(keyword.range(), message);
                    } else if let Some((default, source)) =
                        configured_default(cx.semantic(), cx.file().text, arg.as_str(), value)
                        && let Some(message) = trainer_arg_message(arg.as_str(), Some(default))
                    {
                        cx.report(
                            keyword.range(),
                            format!(
                                "{message} (the value comes from `{}`, whose {source} in this \
                                 file is \"{default}\"; check that the configuration used to \
                                 train does not override it)",
                                cx.slice(value.range())
                            ),
                        );
                    }
                }
                // `Trainer(**trainer_kwargs)`: the arguments are the entries of a dict built in
                // the same function.
                (None, Expr::Name(name)) => {
                    let entries = dict_entries(cx.semantic(), name.id.as_str());
                    for (key, value, range) in entries {
                        if let Some(message) = trainer_arg_message(key, string_value(value)) {
                            cx.report(
                                range,
                                format!(
                                    "{message} (passed to the Trainer through `**{}`)",
                                    name.id.as_str()
                                ),
                            );
                        }
                    }
                }
                (None, _) => {}
            }
        }
    }
}

/// Trainer arguments whose CUDA value may come from a configuration default.
const CONFIGURED_ARGS: &[&str] = &["accelerator", "amp_backend"];

/// For a Trainer argument passed from configuration (`accelerator=args.accelerator`,
/// `accelerator=cfg.accelerator`, `accelerator=accelerator`), the CUDA-only default the file
/// gives that setting, and where: an argparse option (`add_argument("--accelerator",
/// default="gpu")`), a dataclass or config-class field (`accelerator: str = "gpu"`), a
/// parameter default or an assignment of the same name.
fn configured_default<'t>(
    sem: &crate::semantic::Semantic<'t>,
    text: &'t str,
    arg: &str,
    value: &Expr,
) -> Option<(&'t str, &'static str)> {
    if !CONFIGURED_ARGS.contains(&arg) {
        return None;
    }
    let setting = match value {
        Expr::Attribute(a) => a.attr.as_str(),
        // A local name: the enclosing function's parameter default or assignments decide.
        Expr::Name(n) => return local_default(sem, n.id.as_str()),
        _ => return None,
    };
    if !text.contains(setting) {
        return None;
    }
    let escaped = regex::escape(setting);
    let dashed = regex::escape(&setting.replace('_', "-"));
    let values = "gpu|cuda|apex";
    let option = regex::Regex::new(&format!(
        r#"(?s)add_argument\(\s*["'](?:--)?(?:{escaped}|{dashed})["'][^)]*?default\s*=\s*["']({values})["']"#
    ))
    .ok()?;
    if let Some(c) = option.captures(text) {
        return c.get(1).map(|m| (m.as_str(), "argparse default"));
    }
    let field = regex::Regex::new(&format!(
        r#"\b{escaped}\s*(?::\s*[\w\[\]., ]+)?=\s*["']({values})["']"#
    ))
    .ok()?;
    field
        .captures(text)
        .and_then(|c| c.get(1))
        .map(|m| (m.as_str(), "default"))
}

/// The CUDA-only string that the enclosing function gives the local `name`: its parameter
/// default (`def train(accelerator="gpu")`) or a string assigned to it.
fn local_default<'t>(
    sem: &crate::semantic::Semantic<'t>,
    name: &str,
) -> Option<(&'t str, &'static str)> {
    let def = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(f) => Some(f),
        _ => None,
    })?;
    let cuda = |e: &'t Expr| string_value(e).filter(|v| matches!(*v, "gpu" | "cuda" | "apex"));
    let param = def
        .args
        .posonlyargs
        .iter()
        .chain(&def.args.args)
        .chain(&def.args.kwonlyargs)
        .find(|a| a.def.arg.as_str() == name)
        .and_then(|a| a.default.as_deref())
        .and_then(cuda)
        .map(|v| (v, "parameter default"));
    param.or_else(|| {
        let func = crate::analysis::Function::new(
            sem.stmts()
                .iter()
                .rev()
                .find(|s| matches!(s, Stmt::FunctionDef(f) if std::ptr::eq(f, def)))?,
        )?;
        func.assigned(name)
            .iter()
            .find_map(|(_, v)| cuda(v))
            .map(|v| (v, "assigned value"))
    })
}

/// What is wrong with the `Trainer` argument `arg` (given the string `value`, when it is one).
fn trainer_arg_message(arg: &str, value: Option<&str>) -> Option<String> {
    let message = match (arg, value) {
        ("gpus", _) => "`gpus=` assumes CUDA GPUs and was removed in Lightning 2.0; \
            set `devices=` and an accelerator that runs on the NPU"
            .to_owned(),
        ("accelerator", Some(v @ ("gpu" | "cuda"))) => format!(
            "`accelerator=\"{v}\"` selects Lightning's CUDA accelerator, which does not \
            drive Ascend NPUs; use an NPU accelerator (see the fix template)"
        ),
        ("accelerator", Some(v @ ("ddp" | "ddp_spawn" | "dp" | "ddp2"))) => format!(
            "`accelerator=\"{v}\"` is a Lightning 1.x distributed mode; use \
            `strategy=\"{v}\"` with an accelerator that runs on the NPU"
        ),
        ("amp_backend", Some("apex")) => "`amp_backend=\"apex\"` needs NVIDIA apex, \
            which is CUDA-only, and was removed in Lightning 2.0; use `precision=\"bf16-mixed\"` \
            or `\"16-mixed\"` (native AMP)"
            .to_owned(),
        ("amp_backend", _) => "`amp_backend=` was removed in Lightning 2.0; native AMP \
            is chosen with `precision=`"
            .to_owned(),
        (name, _) => {
            let (_, instead) = REMOVED_TRAINER_ARGS
                .iter()
                .find(|(removed, _)| *removed == name)?;
            format!("`Trainer({name}=...)` was removed in Lightning 2.0; {instead}")
        }
    };
    Some(message)
}

/// The string-keyed entries of every dict assigned to `name` in the enclosing function
/// (`kw = dict(accelerator="gpu")`, `kw = {"gpus": 1}`), or later set on it
/// (`kw["gpus"] = 1`, `kw.update(gpus=1)`): key, value and where the entry is.
fn dict_entries<'a>(
    sem: &crate::semantic::Semantic<'a>,
    name: &str,
) -> Vec<(&'a str, &'a Expr, ast::text_size::TextRange)> {
    let Some(body) = sem.stmts().iter().rev().find_map(|s| match s {
        Stmt::FunctionDef(f) => Some(&f.body[..]),
        Stmt::AsyncFunctionDef(f) => Some(&f.body[..]),
        _ => None,
    }) else {
        return Vec::new();
    };
    let is_name = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == name);
    let keywords = |call: &'a ast::ExprCall| {
        call.keywords
            .iter()
            .filter_map(|k| Some((k.arg.as_ref()?.as_str(), &k.value, k.range())))
            .collect::<Vec<_>>()
    };
    let mut all = Vec::new();
    crate::analysis::statements(body, &mut all);
    let mut out = Vec::new();
    for stmt in all {
        match stmt {
            Stmt::Assign(a) if a.targets.len() == 1 && is_name(&a.targets[0]) => {
                match a.value.as_ref() {
                    Expr::Dict(d) => {
                        for (key, value) in d.keys.iter().zip(&d.values) {
                            if let Some(k) = key.as_ref().and_then(string_value) {
                                out.push((
                                    k,
                                    value,
                                    ast::text_size::TextRange::new(
                                        key.as_ref().map_or(value.start(), Ranged::start),
                                        value.end(),
                                    ),
                                ));
                            }
                        }
                    }
                    Expr::Call(call) if matches!(call.func.as_ref(), Expr::Name(f) if f.id.as_str() == "dict") =>
                    {
                        out.extend(keywords(call));
                    }
                    _ => {}
                }
            }
            Stmt::Assign(a) if a.targets.len() == 1 => {
                if let Expr::Subscript(sub) = &a.targets[0]
                    && is_name(&sub.value)
                    && let Some(k) = string_value(&sub.slice)
                {
                    out.push((k, a.value.as_ref(), stmt.range()));
                }
            }
            Stmt::Expr(e) => {
                if let Expr::Call(call) = e.value.as_ref()
                    && let Expr::Attribute(attr) = call.func.as_ref()
                    && attr.attr.as_str() == "update"
                    && is_name(&attr.value)
                {
                    out.extend(keywords(call));
                }
            }
            _ => {}
        }
    }
    out
}

/// The file imports Lightning (under any of its package names).
fn is_lightning_file(cx: &Checker<'_>) -> bool {
    cx.semantic().binds_any(|q| {
        q.starts_with("pytorch_lightning")
            || q.starts_with("lightning")
            || q.starts_with("pl_bolts")
    })
}

/// `X.from_argparse_args(...)` / `X.add_argparse_args(...)` in a Lightning file that does not
/// define these methods itself: the Trainer's and every `LightningDataModule`'s.
fn is_argparse_call(cx: &Checker<'_>, call: &ast::ExprCall) -> bool {
    let Expr::Attribute(a) = call.func.as_ref() else {
        return false;
    };
    let name = a.attr.as_str();
    if name != "from_argparse_args" && name != "add_argparse_args" {
        return false;
    }
    is_lightning_file(cx) && !cx.file().text.contains(&format!("def {name}"))
}

/// The outermost attribute of a chain that resolves into Lightning's `accelerators.cuda`.
fn is_cuda_counting_attr(cx: &Checker<'_>, expr: &Expr) -> bool {
    let sem = cx.semantic();
    if let Some(Expr::Attribute(outer)) = sem.parent_expr()
        && std::ptr::eq(outer.value.as_ref(), expr)
    {
        return false;
    }
    (sem.resolves_with_prefix(expr, "lightning")
        || sem.resolves_with_prefix(expr, "pytorch_lightning"))
        && sem.resolve(expr).is_some_and(|q| is_cuda_counting(&q))
}

impl Rule for Lightning {
    fn stmt<'a>(&self, cx: &mut Checker<'a>, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(_) | Stmt::ImportFrom(_) => Self::check_import(cx, stmt),
            Stmt::FunctionDef(f) => {
                let Some(crate::semantic::ScopeKind::Class(class)) =
                    cx.semantic().scopes().last().map(|s| &s.kind)
                else {
                    return;
                };
                let Some((hook, instead)) =
                    REMOVED_HOOKS.iter().find(|(h, _)| *h == f.name.as_str())
                else {
                    return;
                };
                // A subclass of a project base (`class Policy(BaseModule)`) defining the 1.x
                // hook's signature `(self, outputs)`: the names are Lightning's own.
                let inherited_hook = hook.ends_with("_epoch_end")
                    && hook != &"on_epoch_end"
                    && !class.bases.is_empty()
                    && f.args.args.len() == 2;
                if class.is_lightning || inherited_hook {
                    cx.report(
                        ast::text_size::TextRange::empty(f.range.start()),
                        format!(
                            "the `{hook}` hook was removed in Lightning 2.0 and is never called; \
                            move its code to {instead}"
                        ),
                    );
                }
            }
            _ => {}
        }
    }

    fn expr<'a>(&self, cx: &mut Checker<'a>, expr: &'a Expr) {
        match expr {
            Expr::Call(call) if is_argparse_call(cx, call) => {
                cx.report(
                    expr.range(),
                    "`from_argparse_args`/`add_argparse_args` (of the Trainer and of \
                    LightningDataModules) were removed in Lightning 2.0; build the object from \
                    explicit arguments or use LightningCLI",
                );
            }
            Expr::Attribute(_) if is_cuda_counting_attr(cx, expr) => {
                cx.report(expr.range(), CUDA_COUNTING);
            }
            Expr::Attribute(attr)
                if REMOVED_TRAINER_ATTRS
                    .iter()
                    .any(|(a, _)| *a == attr.attr.as_str())
                    && is_lightning_file(cx) =>
            {
                let name = attr.attr.as_str();
                let instead = REMOVED_TRAINER_ATTRS
                    .iter()
                    .find(|(a, _)| *a == name)
                    .map_or("", |(_, i)| *i);
                cx.report(
                    expr.range(),
                    format!("`.{name}` was removed in Lightning 2.0; use {instead}"),
                );
            }
            Expr::Call(call) => {
                // Every name below is under `lightning` or `pytorch_lightning`: most calls are
                // not, and say so cheaply.
                let sem = cx.semantic();
                if !sem.resolves_with_prefix(&call.func, "lightning")
                    && !sem.resolves_with_prefix(&call.func, "pytorch_lightning")
                {
                    return;
                }
                let Some(q) = sem.resolve(&call.func) else {
                    return;
                };
                if is_trainer(&q) {
                    Self::check_trainer_call(cx, call);
                }
            }
            // `pl.metrics.Accuracy()` where `pl` is `pytorch_lightning`.
            Expr::Attribute(attr)
                if attr.attr.as_str() == "metrics"
                    && cx.semantic().resolves_to(&attr.value, "pytorch_lightning") =>
            {
                cx.report(
                    expr.range(),
                    "`pytorch_lightning.metrics` was removed from PyTorch Lightning; use the \
                    `torchmetrics` package",
                );
            }
            _ => {}
        }
    }
}
