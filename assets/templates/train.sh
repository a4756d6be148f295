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

printf 'train.sh: logging to %s\n' "$npu_log" >&2
{
    printf '# command:'
    printf ' %q' "$@"
    printf '\n# started: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S%z')"
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
exit "$status"
