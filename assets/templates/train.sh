#!/usr/bin/env bash
# Pass-through training launcher for Ascend NPUs.
#
# Usage (from the model project root):
#     ASCEND_RT_VISIBLE_DEVICES=0,1 bash migrate_to_cloudrobo/train.sh <launch command...>
# e.g.
#     bash migrate_to_cloudrobo/train.sh bash examples/finetune.sh
#     bash migrate_to_cloudrobo/train.sh python train.py --config configs/train.yaml
#
# It runs the launch command exactly as given ("$@", unchanged) after it
#   1. sources env_npu.sh (CANN + performance variables) from this directory,
#   2. puts this directory first on PYTHONPATH (so `import runtime_patches` works),
#   3. copies the output (stdout and stderr, merged as with 2>&1) to
#      migrate_to_cloudrobo/logs/train_<YYYYmmdd_HHMMSS>.log while still showing it,
# and exits with the launch command's exit code.
#
# Overridable from the caller's environment: NPU_TRAIN_LOG_DIR (where logs go),
# PYTHONUNBUFFERED (default 1, so Python output reaches the log as it is printed), and every
# variable of env_npu.sh. `npu-train <launch command...>` does the same and also forwards
# Ctrl-C/SIGTERM to the whole process tree.
#
# No NPU on this machine? NPU_PATCHER_EMULATE=1 runs the same command on the emulated npu device
# (CPU torch): the emulator's folder goes on PYTHONPATH after this directory, so `import torch_npu`
# loads its stand-in. The folder is $NPU_PATCHER_EMULATOR_DIR, else ./emulator beside this script
# (`npu-assets init . --emulator` copies it there). An emulated run checks control flow, devices
# and dtypes; it says nothing about Ascend numerics, speed or memory.
set -uo pipefail

if [ "$#" -eq 0 ]; then
    printf '%s\n' "usage: bash migrate_to_cloudrobo/train.sh <launch command...>" \
        "example: ASCEND_RT_VISIBLE_DEVICES=0,1 bash migrate_to_cloudrobo/train.sh python train.py" >&2
    exit 2
fi

NPU_MIGRATE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)" || {
    printf 'train.sh: error: cannot locate the directory of %s\n' "${BASH_SOURCE[0]}" >&2
    exit 125
}

if [ -f "$NPU_MIGRATE_DIR/env_npu.sh" ]; then
    # shellcheck source=env_npu.sh
    . "$NPU_MIGRATE_DIR/env_npu.sh"
else
    printf 'train.sh: warning: %s/env_npu.sh is missing; run 'npu-assets init .' to restore it\n' \
        "$NPU_MIGRATE_DIR" >&2
fi

npu_emulated=""
case "$(printf '%s' "${NPU_PATCHER_EMULATE:-}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')" in
    1 | true | yes | on)
        npu_emulated="${NPU_PATCHER_EMULATOR_DIR:-$NPU_MIGRATE_DIR/emulator}"
        if [ ! -f "$npu_emulated/npu_emulator/__init__.py" ] || [ ! -f "$npu_emulated/torch_npu/__init__.py" ]; then
            printf '%s\n' "train.sh: error: NPU_PATCHER_EMULATE is set but $npu_emulated holds no emulator (npu_emulator/, torch_npu/)" \
                "  copy it into the project: <skill dir>/bin/npu-assets init . --emulator" \
                "  or point at the bundle's copy: NPU_PATCHER_EMULATOR_DIR=<skill dir>/emulator" >&2
            exit 125
        fi
        case ":${PYTHONPATH:-}:" in
            *":$npu_emulated:"*) ;;
            *) PYTHONPATH="$npu_emulated${PYTHONPATH:+:$PYTHONPATH}" ;;
        esac
        # A machine with an NPU has no CUDA device; a real torch_npu must not autoload (torch >= 2.5).
        export CUDA_VISIBLE_DEVICES="" TORCH_DEVICE_BACKEND_AUTOLOAD=0 NPU_PATCHER_EMULATED=1
        ;;
esac

case ":${PYTHONPATH:-}:" in
    *":$NPU_MIGRATE_DIR:"*) ;;
    *) PYTHONPATH="$NPU_MIGRATE_DIR${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
export PYTHONPATH
: "${PYTHONUNBUFFERED:=1}"
export PYTHONUNBUFFERED

: "${NPU_TRAIN_LOG_DIR:=$NPU_MIGRATE_DIR/logs}"
if ! mkdir -p -- "$NPU_TRAIN_LOG_DIR"; then
    printf 'train.sh: error: cannot create the log directory %s\n' "$NPU_TRAIN_LOG_DIR" >&2
    exit 125
fi
npu_log="$NPU_TRAIN_LOG_DIR/train_$(date +%Y%m%d_%H%M%S).log"
if [ -e "$npu_log" ]; then
    npu_log="${npu_log%.log}_$$.log"
fi

npu_banner="EMULATED NPU: this run uses the emulated npu device on the CPU ($npu_emulated), not an Ascend NPU; it checks control flow, devices and dtypes, not numerics, speed or memory"
if [ -n "$npu_emulated" ]; then
    printf 'train.sh: %s\n' "$npu_banner" >&2
fi
printf 'train.sh: logging to %s\n' "$npu_log" >&2
{
    printf '# command:'
    printf ' %q' "$@"
    printf '\n# started: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S%z')"
    if [ -n "$npu_emulated" ]; then
        printf '# %s\n' "$npu_banner"
    fi
} >"$npu_log"

# tee -i: on Ctrl-C keep logging what the command prints while it shuts down.
"$@" 2>&1 | tee -i -a -- "$npu_log"
npu_status=("${PIPESTATUS[@]}")
status="${npu_status[0]}"
if [ "${npu_status[1]}" -ne 0 ]; then
    printf 'train.sh: warning: writing the log failed (tee exit %s); the log may be incomplete\n' \
        "${npu_status[1]}" >&2
fi

# The command's last line may lack a newline: keep the footer on a line of its own.
if [ -n "$(tail -c 1 -- "$npu_log")" ]; then
    printf '\n' >>"$npu_log"
fi
printf '# exit code: %s\n' "$status" >>"$npu_log"
if [ -n "$npu_emulated" ]; then
    printf 'train.sh: EMULATED NPU: the run above (exit %s) used the emulated npu device, not an Ascend NPU\n' "$status" >&2
fi
exit "$status"
