# shellcheck shell=bash
# Ascend NPU environment for training: CANN's set_env.sh plus the performance variables.
#
# Usage (from the model project root):
#     source migrate_to_cloudrobo/env_npu.sh
# train.sh and npu-train source this file for you.
#
# Every value below is a default: set a variable before sourcing to override it, e.g.
#     TASK_QUEUE_ENABLE=1 source migrate_to_cloudrobo/env_npu.sh
# Edit the defaults here when the whole project needs another value.
#
# The file is safe under `set -u` and `set -e`, and sourcing it twice changes nothing: CANN's
# set_env.sh prepends to PATH-like variables, so it is sourced only once per environment.
# Variable meanings and recommended values: NPU-FACTS.md, "Performance environment (training)",
# from Huawei's Ascend PyTorch performance tuning guide and CANN environment variable reference.

# ---------------------------------------------------------------------------------------------
# 1. CANN (set_env.sh)
# ---------------------------------------------------------------------------------------------
# Where to look. NPU_CANN_SET_ENV names the script directly and wins over the search.
# The install record (root: /etc/Ascend/..., non-root: $HOME/Ascend/...) holds `Install_Path=`.
: "${NPU_CANN_SET_ENV:=}"
: "${NPU_CANN_INSTALL_INFO:=/etc/Ascend/ascend_cann_install.info ${HOME:-/root}/Ascend/ascend_cann_install.info}"
: "${NPU_ASCEND_ROOTS:=/usr/local/Ascend ${HOME:-/root}/Ascend}"

_npu_env_find_set_env() {
    local info line root candidate
    if [ -n "$NPU_CANN_SET_ENV" ]; then
        if [ -f "$NPU_CANN_SET_ENV" ]; then
            printf '%s\n' "$NPU_CANN_SET_ENV"
            return 0
        fi
        printf 'env_npu.sh: warning: NPU_CANN_SET_ENV=%s does not exist; searching the usual places\n' \
            "$NPU_CANN_SET_ENV" >&2
    fi
    local roots=()
    for info in $NPU_CANN_INSTALL_INFO; do
        [ -r "$info" ] || continue
        while IFS= read -r line || [ -n "$line" ]; do
            case "$line" in
                Install_Path=*)
                    root="${line#Install_Path=}"
                    root="${root%\"}"
                    root="${root#\"}"
                    [ -n "$root" ] && roots+=("$root")
                    ;;
            esac
        done <"$info"
    done
    for root in $NPU_ASCEND_ROOTS; do
        roots+=("$root")
    done
    # ascend-toolkit/ is the classic layout; cann/ the newer one (CANN 8.5+); nnae/ the runtime-only
    # package; a bare set_env.sh covers an Install_Path that already points at the toolkit.
    for root in "${roots[@]}"; do
        for candidate in "$root/ascend-toolkit/set_env.sh" "$root/cann/set_env.sh" \
            "$root/nnae/set_env.sh" "$root/set_env.sh"; do
            if [ -f "$candidate" ]; then
                printf '%s\n' "$candidate"
                return 0
            fi
        done
    done
    return 1
}

case "$(printf '%s' "${NPU_PATCHER_EMULATED:-}${NPU_PATCHER_EMULATE:+:$NPU_PATCHER_EMULATE}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')" in
    1 | 1:* | :1 | :true | :yes | :on) _npu_env_emulated=1 ;;
    *) _npu_env_emulated= ;;
esac

if [ -n "$_npu_env_emulated" ]; then
    : # An emulated run (--emulate-npu, NPU_PATCHER_EMULATE=1) uses the CPU: it needs no CANN.
elif [ -n "${NPU_ENV_CANN_SOURCED:-}" ]; then
    : # Already sourced in this environment (by an earlier run of this file).
elif [ -n "${ASCEND_HOME_PATH:-}" ] && [ -n "${ASCEND_OPP_PATH:-}" ]; then
    # The caller loaded CANN already; sourcing it again would only duplicate PATH entries.
    NPU_ENV_CANN_SOURCED="preloaded:$ASCEND_HOME_PATH"
    export NPU_ENV_CANN_SOURCED
elif _npu_env_set_env="$(_npu_env_find_set_env)"; then
    # CANN's scripts are not written for `set -u`: relax it while they run.
    case $- in
        *u*) _npu_env_nounset=1 ;;
        *) _npu_env_nounset= ;;
    esac
    set +u
    # shellcheck source=/dev/null
    if . "$_npu_env_set_env"; then
        NPU_ENV_CANN_SOURCED="$_npu_env_set_env"
        export NPU_ENV_CANN_SOURCED
    else
        printf 'env_npu.sh: warning: %s returned an error; the CANN environment may be incomplete\n' \
            "$_npu_env_set_env" >&2
    fi
    if [ -n "$_npu_env_nounset" ]; then set -u; fi
    unset _npu_env_nounset
else
    printf '%s\n' \
        "env_npu.sh: warning: CANN set_env.sh not found (looked in: $NPU_ASCEND_ROOTS and Install_Path= of $NPU_CANN_INSTALL_INFO)." \
        "env_npu.sh: torch_npu needs ASCEND_HOME_PATH and ASCEND_OPP_PATH; install the CANN toolkit or set" \
        "env_npu.sh: NPU_CANN_SET_ENV=/path/to/set_env.sh before sourcing this file." >&2
fi
unset _npu_env_set_env _npu_env_emulated
unset -f _npu_env_find_set_env

# ---------------------------------------------------------------------------------------------
# 2. Where this folder is
# ---------------------------------------------------------------------------------------------
# The NPU setup that `npu-scan --fix` inserts at entry points imports runtime_patches.py from
# $NPU_PATCHER_MIGRATE_DIR when set (else from migrate_to_cloudrobo/ of the project root, found
# from the entry file: a source checkout only). Set here to this file's folder, so that an entry
# point installed as a package finds it too; train.sh and npu-train set it to their project's.
if [ -n "${BASH_SOURCE[0]:-}" ] && [ -f "$(dirname -- "${BASH_SOURCE[0]}")/runtime_patches.py" ]; then
    NPU_PATCHER_MIGRATE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
    export NPU_PATCHER_MIGRATE_DIR
fi

# ---------------------------------------------------------------------------------------------
# 3. Performance (NPU-FACTS.md, "Performance environment (training)")
# ---------------------------------------------------------------------------------------------
# Operator dispatch pipeline level 2 overlaps host dispatch with device work; use 1 if memory is tight.
: "${TASK_QUEUE_ENABLE:=2}"
export TASK_QUEUE_ENABLE
# Bind each process to the CPU cores near its NPU (1 coarse; 2 fine, with ranges from `npu-smi info -t topo`).
: "${CPU_AFFINITY_CONF:=1}"
export CPU_AFFINITY_CONF
# Expandable segments reduce fragmentation in the caching allocator (fewer out-of-memory errors).
: "${PYTORCH_NPU_ALLOC_CONF:=expandable_segments:True}"
export PYTORCH_NPU_ALLOC_CONF
# Combine non-contiguous operator sequences into fewer device copies.
: "${COMBINED_ENABLE:=1}"
export COMBINED_ENABLE
# Let communication streams reuse memory freed by compute streams.
: "${MULTI_STREAM_MEMORY_REUSE:=1}"
export MULTI_STREAM_MEMORY_REUSE
# Use FFTS mode for single-operator HCCL collectives.
: "${HCCL_OP_BASE_FFTS_MODE_ENABLE:=TRUE}"
export HCCL_OP_BASE_FFTS_MODE_ENABLE
# Skip the HCCL communication whitelist check (no whitelist file is configured in training jobs).
: "${HCCL_WHITELIST_DISABLE:=1}"
export HCCL_WHITELIST_DISABLE
# Link setup timeout in seconds, range [120, 7200]; the 120 s default is too short on large clusters.
: "${HCCL_CONNECT_TIMEOUT:=1200}"
export HCCL_CONNECT_TIMEOUT
# IEEE inf/nan semantics (the A2/A3 default), so overflow checks in mixed precision behave as on GPU.
: "${INF_NAN_MODE_ENABLE:=1}"
export INF_NAN_MODE_ENABLE
# Asynchronous launches; 1 gives exact stack traces for debugging but disables the task queue.
: "${ASCEND_LAUNCH_BLOCKING:=0}"
export ASCEND_LAUNCH_BLOCKING
# CANN log level 3 (errors only): logging at lower levels costs time on every operator.
: "${ASCEND_GLOBAL_LOG_LEVEL:=3}"
export ASCEND_GLOBAL_LOG_LEVEL
# Keep CANN's logs in its log files instead of interleaving them with the training output.
: "${ASCEND_SLOG_PRINT_TO_STDOUT:=0}"
export ASCEND_SLOG_PRINT_TO_STDOUT

# Left at CANN's defaults on purpose (set them in the caller's environment if needed):
# HCCL_EXEC_TIMEOUT      collective wait timeout in seconds; default 1836 suits training.
# HCCL_BUFFSIZE          per-communicator buffer in MB (allocated twice); default 200.
# ACLNN_CACHE_LIMIT      per-thread operator cache entries; default 10000.
# TORCH_NPU_FALLBACK_CPU_DISABLE=1   turns silent CPU fallbacks into errors (newer torch_npu);
#                        useful while verifying, not for a long training run.
