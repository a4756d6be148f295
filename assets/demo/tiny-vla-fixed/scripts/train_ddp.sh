#!/usr/bin/env bash
# Data-parallel training on the 8 NPUs of one node, one process per card (DDP over HCCL):
#     bash scripts/train_ddp.sh [train.py options, e.g. --max-steps 100]
# migrate_to_cloudrobo/train.sh sets the CANN and HCCL environment, checks ASCEND_RT_VISIBLE_DEVICES
# (default: every card) against --nproc_per_node and keeps one log per rank.
set -euo pipefail
cd "$(dirname "$0")/.."

export OMP_NUM_THREADS=8

bash migrate_to_cloudrobo/train.sh torchrun --standalone --nproc_per_node 8 train.py --config configs/train.yaml "$@"
