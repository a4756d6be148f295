//! `--parity`: compare two runs' records (the harness's `parity` mode writes them) step by step and
//! module by module, and name the first module whose output moved beyond tolerance while its
//! inputs did not.
//!
//! Tolerances (relative: the max's and min's difference over their own size, at least the
//! reference tensor's RMS; the mean's over the RMS; the L2 norm's over the reference norm), by the port's dtype: float32 `1e-3` (msprobe's API-level max absolute
//! error criterion, 0.001) when the port ran on other kernels than the reference (a real NPU, a
//! record from another machine) and from step 2 on, `1e-5` (about 170 float32 units of roundoff)
//! in the first step of a port on the emulated npu, which computes with the CPU's own kernels
//! (its npu-only ops with its own: a correct port differed by at most 2.3e-6 in the tests);
//! float16 `2e-2`, bfloat16 `1e-1` (about 40 and 26 units of roundoff, 2^-11 and 2^-8: under
//! autocast the rounding compounds through the layers; the demo's bf16 port differed by up to 6e-2
//! in its output gradients), float64 `1e-9`; under autocast every tensor of the call gets at least
//! the autocast dtype's tolerance. A module's buffers: four units of roundoff of the port's dtype. Never below [`NOISE_MULTIPLE`] times the reference's own spread
//! (the reference run twice with different thread counts). The loss: msprobe's "investigate a mean
//! loss relative error above 1%".

use crate::report::Check;
use serde_json::{Value, json};
use std::collections::HashMap;

/// How many times the reference's own spread a difference must exceed.
pub const NOISE_MULTIPLE: f64 = 10.0;
/// The mean relative error of the per-step loss above which the runs diverge.
pub const LOSS_TOLERANCE: f64 = 0.01;

/// The tolerance for a tensor of `dtype` in the port; `same_kernels`: the port computed with the
/// reference's kernels (the emulated npu against a CPU reference).
pub fn dtype_tolerance(dtype: &str, same_kernels: bool) -> f64 {
    match dtype {
        "float64" => 1e-9,
        "float16" => 2e-2,
        "bfloat16" => 1e-1,
        _ if same_kernels => 1e-5,
        _ => 1e-3,
    }
}

/// The tolerance for a module's buffer in the port's `dtype`: four units of roundoff, so that a
/// buffer merely rounded to the port's dtype (float64 to float32 by a runtime patch) matches and
/// one computed differently does not.
pub fn buffer_tolerance(dtype: &str) -> f64 {
    match dtype {
        "float64" => 4.0 * f64::EPSILON / 2.0,
        "float16" => 4.0 * 2f64.powi(-11),
        "bfloat16" => 4.0 * 2f64.powi(-8),
        _ => 4.0 * 2f64.powi(-24),
    }
}

/// The first buffer of a module's first call that differs beyond [`buffer_tolerance`].
fn buffers_diverge(reference: &Value, port: &Value) -> Option<String> {
    let (Some(r), Some(p)) = (
        reference["buffers"].as_object(),
        port["buffers"].as_object(),
    ) else {
        return None;
    };
    for (name, rv) in r {
        let (Some(rs), Some(ps)) = (stats(rv), p.get(name).and_then(stats)) else {
            return Some(format!(
                "buffer {name}: the port's module has no such floating buffer"
            ));
        };
        let tolerance = buffer_tolerance(&ps.dtype);
        let diff = difference(&rs, &ps);
        if rs.numel.to_bits() != ps.numel.to_bits() || diff > tolerance {
            return Some(format!(
                "buffer {name} ({} in the reference, {} in the port): relative difference {diff:.3e} >                  {tolerance:.1e} (max/min/mean/L2 {} vs {})",
                rs.dtype,
                ps.dtype,
                short(&rs.figures),
                short(&ps.figures)
            ));
        }
    }
    None
}

/// One tensor's summary: `[dtype, numel, max, min, mean, l2]`.
struct Stats {
    dtype: String,
    numel: f64,
    figures: [f64; 4],
}

fn stats(value: &Value) -> Option<Stats> {
    let items = value.as_array()?;
    let number = |i: usize| -> f64 {
        items.get(i).map_or(f64::NAN, |v| {
            v.as_f64().unwrap_or_else(|| match v.as_str() {
                Some("inf") => f64::INFINITY,
                Some("-inf") => f64::NEG_INFINITY,
                _ => f64::NAN,
            })
        })
    };
    Some(Stats {
        dtype: items.first()?.as_str()?.to_owned(),
        numel: number(1),
        figures: [number(2), number(3), number(4), number(5)],
    })
}

/// The relative difference of two summaries: max and min over their own size (at least the
/// reference's RMS), the mean over the RMS, the L2 norm over the reference's norm; the largest of
/// the four. NaN in one and not the other is infinite.
fn difference(reference: &Stats, port: &Stats) -> f64 {
    let rms = reference.figures[3] / reference.numel.max(1.0).sqrt();
    let mut worst: f64 = 0.0;
    for (index, (r, p)) in reference.figures.iter().zip(&port.figures).enumerate() {
        if r.is_nan() != p.is_nan() || r.is_infinite() != p.is_infinite() {
            return f64::INFINITY;
        }
        if r.is_nan() || r.is_infinite() {
            continue;
        }
        // The extremes against their own size (never less than the RMS), the mean against the
        // RMS, the norm against itself.
        let scale = match index {
            0 | 1 => r.abs().max(rms.abs()),
            3 => r.abs(),
            _ => rms.abs(),
        }
        .max(1e-30);
        worst = worst.max((p - r).abs() / scale);
    }
    worst
}

type Key = (u64, String, String, u64);

fn key(event: &Value) -> Key {
    (
        event["step"].as_u64().unwrap_or(0),
        event["dir"].as_str().unwrap_or("").to_owned(),
        event["module"].as_str().unwrap_or("").to_owned(),
        event["call"].as_u64().unwrap_or(0),
    )
}

fn index(record: &Value) -> HashMap<Key, &Value> {
    record["events"]
        .as_array()
        .map(|events| events.iter().map(|e| (key(e), e)).collect())
        .unwrap_or_default()
}

/// How one side (inputs or outputs) of a port event compares: `None` when within tolerance, else why.
fn side_diverges(
    reference: &Value,
    port: &Value,
    noise: Option<&Value>,
    side: &str,
    same_kernels: bool,
) -> Option<String> {
    let empty = Vec::new();
    let r = reference[side].as_array().unwrap_or(&empty);
    let p = port[side].as_array().unwrap_or(&empty);
    // Under autocast every tensor carries the autocast dtype's rounding, also those it returns in
    // float32 (a sum with a float32 parameter, a loss): its tolerance applies to them all.
    let autocast = port["autocast"].as_str();
    let floor = autocast.map_or(0.0, |dtype| dtype_tolerance(dtype, same_kernels));
    if r.len() != p.len() {
        return Some(format!(
            "{side}: {} floating tensors in the reference, {} in the port",
            r.len(),
            p.len()
        ));
    }
    for (i, (rv, pv)) in r.iter().zip(p).enumerate() {
        let (Some(rs), Some(ps)) = (stats(rv), stats(pv)) else {
            continue;
        };
        if rs.numel.to_bits() != ps.numel.to_bits() {
            return Some(format!(
                "{side}[{i}]: {} elements in the reference, {} in the port",
                rs.numel, ps.numel
            ));
        }
        if rs.dtype != ps.dtype && autocast.is_none() {
            return Some(format!(
                "{side}[{i}]: dtype {} in the reference, {} in the port (outside autocast)",
                rs.dtype, ps.dtype
            ));
        }
        let spread = noise
            .and_then(|n| n[side].as_array())
            .and_then(|n| n.get(i))
            .and_then(stats)
            .map_or(0.0, |ns| difference(&rs, &ns));
        let tolerance = dtype_tolerance(&ps.dtype, same_kernels)
            .max(floor)
            .max(NOISE_MULTIPLE * spread);
        let diff = difference(&rs, &ps);
        if diff > tolerance {
            return Some(format!(
                "{side}[{i}] ({}): relative difference {diff:.3e} > tolerance {tolerance:.1e} (max/min/mean/L2 \
                 {} vs {})",
                ps.dtype,
                short(&rs.figures),
                short(&ps.figures)
            ));
        }
    }
    None
}

fn short(figures: &[f64; 4]) -> String {
    figures
        .iter()
        .map(|f| format!("{f:.6e}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// The first divergence, as the report's `first_divergence`.
fn located(event: &Value, why: &str, note: Option<String>) -> Value {
    let mut out = json!({
        "module": event["module"],
        "class": event["cls"],
        "site": event["site"],
        "called_at": event["called_at"],
        "direction": event["dir"],
        "step": event["step"],
        "call": event["call"],
        "why": why,
    });
    if let Some(note) = note {
        out["note"] = note.into();
    }
    out
}

/// Compare `port` with `reference` (and `noise`, the reference's second run): the checks
/// `parity.loss` and `parity.modules`. `steps`: how many steps were asked for.
pub fn compare(
    reference: &Value,
    port: &Value,
    noise: Option<&Value>,
    same_kernels: bool,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let empty = Vec::new();
    let ref_steps = reference["steps"].as_array().unwrap_or(&empty);
    let port_steps = port["steps"].as_array().unwrap_or(&empty);
    let compared = ref_steps.len().min(port_steps.len());

    // The loss, step by step.
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (r, p) in ref_steps.iter().zip(port_steps) {
        let (rl, pl) = (r["loss"].as_f64(), p["loss"].as_f64());
        let error = match (rl, pl) {
            (Some(rl), Some(pl)) => Some((pl - rl).abs() / rl.abs().max(1e-12)),
            // A loss that became NaN or infinite in the port only.
            (Some(_), None) if p["loss"].is_string() => Some(f64::INFINITY),
            _ => None,
        };
        if let Some(e) = error {
            errors.push(e);
        }
        rows.push(json!({
            "step": r["step"], "reference": rl, "port": pl, "relative_error": error,
            "grad_norm": [r["grad_norm"], p["grad_norm"]],
            "lr": [r["groups"].get(0).map(|g| g["lr"].clone()), p["groups"].get(0).map(|g| g["lr"].clone())],
        }));
    }
    #[allow(clippy::cast_precision_loss, reason = "a handful of steps")]
    let mean = if errors.is_empty() {
        f64::NAN
    } else {
        errors.iter().sum::<f64>() / errors.len() as f64
    };
    let losses = rows
        .iter()
        .zip(port_steps)
        .map(|(r, p)| {
            let shown = |v: &Value| {
                v.as_f64().map_or_else(
                    || v.as_str().unwrap_or("?").to_owned(),
                    |v| format!("{v:.6}"),
                )
            };
            format!(
                "step {}: {} vs {}",
                r["step"],
                shown(&r["reference"]),
                shown(&p["loss"])
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let loss_data =
        json!({"steps": rows, "mean_relative_error": mean, "tolerance": LOSS_TOLERANCE});
    let mut loss_check = if mean.is_nan() {
        Check::fail(
            "parity.loss",
            format!("no loss to compare over {compared} steps"),
            "the program must call backward() on its loss",
        )
    } else if mean > LOSS_TOLERANCE {
        Check::fail(
            "parity.loss",
            format!(
                "mean loss relative error {mean:.2e} over {compared} steps > {LOSS_TOLERANCE} ({losses})"
            ),
            "see parity.modules for where the port first computes differently",
        )
    } else {
        Check::pass(
            "parity.loss",
            format!("mean loss relative error {mean:.2e} over {compared} steps ({losses})"),
        )
    };
    loss_check.data = Some(loss_data);
    checks.push(loss_check);

    // Module by module, in the port's execution order.
    let refs = index(reference);
    let ports = index(port);
    let noises = noise.map(index).unwrap_or_default();
    let mut first: Option<Value> = None;
    let mut events = 0usize;
    let limit = u64::try_from(compared).unwrap_or(0);
    for event in port["events"].as_array().unwrap_or(&empty) {
        let k = key(event);
        if k.0 > limit {
            break;
        }
        events += 1;
        let Some(r) = refs.get(&k) else {
            first = Some(located(
                event,
                "this module call ran in the port only (the reference made no such call)",
                None,
            ));
            break;
        };
        let n = noises.get(&k).copied();
        if let Some(why) = buffers_diverge(r, event) {
            first = Some(located(event, &why, None));
            break;
        }
        // After an optimizer step the parameters carry the update's rounding (Adam divides by the
        // gradients' own size): from step 2 on, the cross-kernel tolerance.
        let same_kernels = same_kernels && k.0 <= 1;
        let Some(out_why) = side_diverges(r, event, n, "outputs", same_kernels) else {
            continue;
        };
        if k.1 == "backward" {
            first = Some(located(
                event,
                &format!("the gradient of its output: {out_why}"),
                Some(
                    "the modules that use this module's output compute a different gradient".into(),
                ),
            ));
            break;
        }
        if side_diverges(r, event, n, "inputs", same_kernels).is_none() {
            first = Some(located(event, &out_why, None));
            break;
        }
        // Its inputs already differ: the innermost enclosing call whose inputs did not made them.
        let mut parent = event["parent"].clone();
        let mut found = None;
        while let Some(p) = parent.as_array() {
            let pk = (
                k.0,
                "forward".to_owned(),
                p.first().and_then(Value::as_str).unwrap_or("").to_owned(),
                p.get(1).and_then(Value::as_u64).unwrap_or(0),
            );
            let (Some(pe), Some(pr)) = (ports.get(&pk), refs.get(&pk)) else {
                break;
            };
            if side_diverges(pr, pe, noises.get(&pk).copied(), "inputs", same_kernels).is_none() {
                found = Some(located(
                    pe,
                    &format!(
                        "its own code, before it calls {}, computes {}'s inputs differently: {}",
                        k.2,
                        k.2,
                        side_diverges(r, event, n, "inputs", same_kernels).unwrap_or_default()
                    ),
                    None,
                ));
                break;
            }
            parent = pe["parent"].clone();
        }
        first = Some(found.unwrap_or_else(|| {
            located(
                event,
                &format!(
                    "its inputs already differ, and no module computed them: code outside the modules, before \
                     {} runs ({})",
                    k.2,
                    side_diverges(r, event, n, "inputs", same_kernels).unwrap_or_default()
                ),
                None,
            )
        }));
        break;
    }

    // Parameters after each step: an optimizer that updates differently shows here first.
    let first_step = first
        .as_ref()
        .and_then(|f| f["step"].as_u64())
        .unwrap_or(u64::MAX);
    // A port trained under autocast updates its parameters from gradients with that dtype's rounding.
    let port_autocast = port["events"]
        .as_array()
        .and_then(|events| events.iter().find_map(|e| e["autocast"].as_str()));
    let empty_steps = Vec::new();
    let noise_steps = noise
        .and_then(|n| n["steps"].as_array())
        .unwrap_or(&empty_steps);
    'steps: for (index, (r, p)) in ref_steps.iter().zip(port_steps).enumerate() {
        let step = r["step"].as_u64().unwrap_or(0);
        if step >= first_step {
            break;
        }
        let (Some(rn), Some(pn)) = (r["param_norms"].as_object(), p["param_norms"].as_object())
        else {
            continue;
        };
        for (name, rv) in rn {
            let (Some(rv), Some(pv)) = (rv.as_f64(), pn.get(name).and_then(Value::as_f64)) else {
                continue;
            };
            let diff = (pv - rv).abs() / rv.abs().max(1e-30);
            // Adam-like updates divide by the gradients' own size, which amplifies rounding: the
            // parameters are held to msprobe's 1e-3 (and the reference's own spread), not to the
            // emulated device's rounding-level tolerance.
            let spread = noise_steps
                .get(index)
                .and_then(|n| n["param_norms"][name.as_str()].as_f64())
                .map_or(0.0, |nv| (nv - rv).abs() / rv.abs().max(1e-30));
            let tolerance = dtype_tolerance("float32", false)
                .max(port_autocast.map_or(0.0, |d| dtype_tolerance(d, false)))
                .max(NOISE_MULTIPLE * spread);
            if diff > tolerance {
                first = Some(json!({
                    "module": name, "class": p["optimizer"], "site": null, "direction": "optimizer",
                    "step": step, "call": 1,
                    "why": format!("the parameter's norm after the step: {rv:.9e} vs {pv:.9e} (relative {diff:.2e} > {tolerance:.0e}), while every module's forward and backward matched"),
                }));
                break 'steps;
            }
        }
    }

    let data = json!({
        "first_divergence": first,
        "events_compared": events,
        "steps_compared": compared,
        "same_kernels": same_kernels,
        "noise_floor": noise.is_some(),
        "noise_multiple": NOISE_MULTIPLE,
    });
    let mut check = match &first {
        Some(f) => Check::fail(
            "parity.modules",
            format!(
                "first divergence: {} ({}) at {}{}, {}, step {}: {}",
                f["module"].as_str().unwrap_or("?"),
                f["class"].as_str().unwrap_or("?"),
                f["site"].as_str().unwrap_or("?"),
                f["called_at"]
                    .as_str()
                    .map(|at| format!(" (called at {at})"))
                    .unwrap_or_default(),
                f["direction"].as_str().unwrap_or("?"),
                f["step"],
                f["why"].as_str().unwrap_or("")
            ),
            "read the port's code of that module (its npu-only branches, dtypes, masks) against the reference's; \
             for an op-level look run msprobe on that module",
        ),
        None => Check::pass(
            "parity.modules",
            format!(
                "{events} module calls over {compared} steps match (forward outputs, output gradients, parameters)"
            ),
        ),
    };
    check.data = Some(data);
    checks.push(check);
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(step: u64, dir: &str, module: &str, inputs: &Value, outputs: &Value) -> Value {
        json!({"step": step, "dir": dir, "module": module, "cls": "Linear", "call": 1, "parent": null,
               "autocast": false, "site": "m.py:1", "inputs": inputs, "outputs": outputs})
    }

    fn record(events: &[Value]) -> Value {
        json!({"steps": [{"step": 1, "loss": 1.0, "param_norms": {"w": 2.0}}], "events": events})
    }

    #[test]
    fn a_module_whose_output_moves_while_its_inputs_do_not_is_named() {
        let same = json!([["float32", 4, 1.0, -1.0, 0.0, 2.0]]);
        let reference = record(&[
            event(1, "forward", "M.a", &same, &same),
            event(1, "forward", "M.b", &same, &same),
        ]);
        let moved = json!([["float32", 4, 1.0, -1.0, 0.01, 2.0]]);
        let port = record(&[
            event(1, "forward", "M.a", &same, &same),
            event(1, "forward", "M.b", &same, &moved),
        ]);
        let checks = compare(&reference, &port, None, true);
        assert_eq!(checks[1].status, crate::report::Status::Fail);
        let first = &checks[1].data.as_ref().unwrap()["first_divergence"];
        assert_eq!(first["module"], "M.b");
        // Matching runs pass.
        let checks = compare(&reference, &reference, None, true);
        assert_eq!(checks[0].status, crate::report::Status::Pass);
        assert_eq!(checks[1].status, crate::report::Status::Pass);
    }

    #[test]
    fn the_reference_spread_raises_the_tolerance_and_dtype_changes_count() {
        let r = json!([["float32", 4, 1.0, -1.0, 0.0, 2.0]]);
        let p = json!([["float32", 4, 1.0, -1.0, 0.0001, 2.0]]);
        let reference = record(&[event(1, "forward", "M", &r, &r)]);
        let port = record(&[event(1, "forward", "M", &r, &p)]);
        assert_eq!(
            compare(&reference, &port, None, true)[1].status,
            crate::report::Status::Fail
        );
        // The reference itself moved by as much: within NOISE_MULTIPLE times its spread.
        let noise = record(&[event(1, "forward", "M", &r, &p)]);
        assert_eq!(
            compare(&reference, &port, Some(&noise), true)[1].status,
            crate::report::Status::Pass
        );
        let half = json!([["float16", 4, 1.0, -1.0, 0.0, 2.0]]);
        let port = record(&[event(1, "forward", "M", &r, &half)]);
        let checks = compare(&reference, &port, None, true);
        assert!(
            checks[1]
                .detail
                .contains("dtype float32 in the reference, float16"),
            "{}",
            checks[1].detail
        );
    }
}
