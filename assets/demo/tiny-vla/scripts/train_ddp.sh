#!/usr/bin/env bash
# Data-parallel training on the 8 GPUs of one node, one process per GPU (DDP over NCCL):
#     bash scripts/train_ddp.sh [train.py options, e.g. --max-steps 100]
set -euo pipefail
cd "$(dirname "$0")/.."

export NCCL_DEBUG=WARN
export OMP_NUM_THREADS=8

torchrun --standalone --nproc_per_node 8 train.py --config configs/train.yaml "$@"
