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
#   2. puts this directory first on PYTHONPATH (so `import runtime_patches` works) and exports
#      it as NPU_PATCHER_MIGRATE_DIR (where the NPU setup that `npu-scan --fix` inserts looks
#      first, so an entry point installed as a package finds it too),
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
NPU_PATCHER_MIGRATE_DIR="$NPU_MIGRATE_DIR"
export NPU_PATCHER_MIGRATE_DIR
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

# Distributed launch commands (torchrun, python -m torch.distributed.run, accelerate launch,
# deepspeed, or a .sh script running one) pass through unchanged; around them, as npu-train does:
# ASCEND_RT_VISIBLE_DEVICES must list at least one card per process of this node, a multi-node
# command without HCCL_IF_IP/HCCL_SOCKET_IFNAME gets a warning, torchrun keeps the ranks apart
# (PET_TEE=3 and PET_LOG_DIR: its --tee 3 and --log-dir) unless the command or the caller chose,
# and emulated ranks get an emulated card each.
npu_launcher="" npu_nproc="" npu_multi_node="" npu_tee_chosen=""
npu_dist_scan() {
    local base="${1##*/}" prev="" word value
    npu_launcher="" npu_nproc="" npu_multi_node="" npu_tee_chosen=""
    case "$base" in
        torchrun) npu_launcher=torchrun ;;
        python*)
            if [ "${2:-}" = "-m" ]; then
                case "${3:-}" in torch.distributed.run | torch.distributed.launch) npu_launcher=torchrun ;; esac
            fi
            ;;
        accelerate) [ "${2:-}" = "launch" ] && npu_launcher=accelerate ;;
        deepspeed) npu_launcher=deepspeed ;;
    esac
    [ -n "$npu_launcher" ] || return 1
    for word in "$@"; do
        value=""
        case "$prev" in
            --nproc_per_node | --nproc-per-node | --num_processes | --num-processes | --num_gpus | --num-gpus) npu_nproc="$word" ;;
            --nnodes | --num_machines | --num-machines) value="$word" ;;
        esac
        case "$word" in
            --nproc_per_node=* | --nproc-per-node=* | --num_processes=* | --num-processes=* | --num_gpus=* | --num-gpus=*) npu_nproc="${word#*=}" ;;
            --nnodes=* | --num_machines=* | --num-machines=*) value="${word#*=}" ;;
            --master_addr* | --master-addr* | --rdzv_endpoint* | --rdzv-endpoint* | --node_rank* | --node-rank* | --hostfile*) npu_multi_node=1 ;;
            --tee* | --redirects* | --log-dir* | --log_dir* | -r | -t) npu_tee_chosen=1 ;;
        esac
        if [ -n "$value" ] && [ "$value" != 1 ] && [ "$value" != 1:1 ]; then
            npu_multi_node=1
        fi
        prev="$word"
    done
    case "$npu_nproc" in '' | *[!0-9]* | 0) npu_nproc="" ;; esac
    return 0
}
if ! npu_dist_scan "$@"; then
    for npu_script in "${1:-}" "${2:-}"; do
        case "$npu_script" in *.sh) ;; *) continue ;; esac
        [ -f "$npu_script" ] || continue
        while IFS= read -r npu_line || [ -n "$npu_line" ]; do
            read -ra npu_words <<<"${npu_line%%#*}"
            for ((npu_i = 0; npu_i < ${#npu_words[@]}; npu_i++)); do
                if npu_dist_scan "${npu_words[@]:npu_i}"; then
                    break 3
                fi
            done
        done <"$npu_script"
    done
fi
if [ -n "$npu_launcher" ]; then
    if [ -n "$npu_nproc" ] && [ -n "${ASCEND_RT_VISIBLE_DEVICES+x}" ]; then
        # The runtime reads ascending ids up to the first space or bad id (NPU-FACTS.md).
        npu_cards=0 npu_last=-1
        IFS=, read -ra npu_ids <<<"$ASCEND_RT_VISIBLE_DEVICES"
        for npu_id in "${npu_ids[@]}"; do
            case "$npu_id" in '' | *[!0-9]*) break ;; esac
            [ "$((10#$npu_id))" -gt "$npu_last" ] || break
            npu_last=$((10#$npu_id)) npu_cards=$((npu_cards + 1))
        done
        if [ "$npu_cards" -lt "$npu_nproc" ]; then
            printf 'train.sh: error: ASCEND_RT_VISIBLE_DEVICES="%s" makes %s card(s) visible, but the %s command starts %s processes on this node, one per card; list %s cards (e.g. ASCEND_RT_VISIBLE_DEVICES=%s) or start %s processes (--nproc_per_node %s)\n' \
                "$ASCEND_RT_VISIBLE_DEVICES" "$npu_cards" "$npu_launcher" "$npu_nproc" "$npu_nproc" \
                "$(seq -s, 0 $((npu_nproc - 1)))" "$npu_cards" "$npu_cards" >&2
            exit 125
        fi
    fi
    if [ -n "$npu_multi_node" ] && [ -z "${HCCL_IF_IP:-}" ] && [ -z "${HCCL_SOCKET_IFNAME:-}" ]; then
        printf '%s\n' "train.sh: warning: a multi-node launch and neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is set: set HCCL_SOCKET_IFNAME to the network interface the nodes reach each other on (or HCCL_IF_IP to this node's address) on every node" >&2
    fi
    if [ "$npu_launcher" = torchrun ] && [ -z "$npu_tee_chosen" ] && [ -z "${PET_TEE+x}" ] && [ -z "${PET_LOG_DIR+x}" ]; then
        export PET_TEE=3 PET_LOG_DIR="${npu_log%.log}_ranks"
    fi
    if [ -n "$npu_emulated" ]; then
        if [ -n "$npu_nproc" ] && [ -z "${NPU_EMULATOR_DEVICE_COUNT+x}" ]; then
            export NPU_EMULATOR_DEVICE_COUNT="$npu_nproc"
        fi
        if [ -z "$npu_multi_node" ] && [ -z "${GLOO_SOCKET_IFNAME+x}" ]; then
            export GLOO_SOCKET_IFNAME=lo
        fi
    fi
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
