#!/usr/bin/env bash
# The GPU check of docs/performance.md: statistics pass, all of BLiMP and one ablation condition on a
# Pythia-1.4B-shaped model with random weights, each time beside its FLOP lower bound, then fp32 / tf32 / bf16
# compared: throughput, peak GPU memory, minimal-pair decisions that move from fp32 (perf/gpu_check.py).
# Needs only the repository and its environment (no download, no data); stops after 8 minutes whatever happens.
#   bash perf/gpu_check.sh [--peak-tflops 989] [--batch-size 512] [--precision bf16] [--precisions fp32,tf32,bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "gpu_check: no nvidia-smi"
PYTHONPATH=src timeout 480 "$PYTHON" perf/gpu_check.py "$@"
