#!/usr/bin/env bash
# The GPU check of docs/performance.md: one prepared run of at most 7.5 minutes on one H200, every result under
# $OUT (default perf/out/gpu_check): the log, nvidia-smi, and one JSON per step.
#  1. collection (perf/bench_collection.py): activation shards of every layer of a Pythia-1.4B-shaped model (bf16,
#     random weights) with the one-sync-per-batch path, tokens/s and peak GPU memory, beside the revision before it
#     (7099757: a sync per layer, pageable copies) where git has it, and whether both write the same bytes;
#  2. perf/gpu_check.py: statistics pass, all of BLiMP, one ablation condition, each beside its FLOP lower bound;
#     then fp32 / tf32 / bf16 compared: scoring and collection throughput, peak GPU memory, minimal-pair decisions
#     that move, WD change and top-1% WD cohort members that leave (random weights, random token ids);
#  3. where the converted models and the data are on the machine (resources/models, ../shared/data): the same
#     comparison on SmolLM2-135M and Gemma-3-270M with real BLiMP / TSE items (perf/precision_check.py measure).
# Steps 1-2 need only the repository and its environment (no download, no data). A step that fails or runs out of
# its time is reported and the next one runs; the exit status says whether all passed.
#   bash perf/gpu_check.sh [more perf/gpu_check.py options]
#   WNEURONS_DEVICE=cpu GPU_CHECK_SIZE=tiny bash perf/gpu_check.sh   # the same steps on a CPU at a tiny size
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
OUT=${OUT:-perf/out/gpu_check}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONPATH=src
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 && head -n 12 "$OUT/nvidia-smi.txt" || echo "gpu_check: no nvidia-smi"

if [ "${GPU_CHECK_SIZE:-full}" = tiny ]; then
    COLLECTION=(--shape tiny --precision fp32 --tokens 4096 --window 256 --repeats 1)
    CHECK=(--shape tiny --scale 0.005 --batch-size 64 --precision-sentences 200 --precision-tokens 2048)
    MEASURE=(--blimp-pairs 10 --tse-items 10 --wd-tokens 2048 --window 1024 --batch-size 16)
    MODELS=(smollm2=resources/models/smollm2-135m)
    LIMITS=(300 600 900)  # a shared CPU: minutes, not seconds
else
    COLLECTION=(--shape pythia-1.4b --precision bf16 --tokens 16384 --window 2048 --repeats 2)
    CHECK=(--precision-sentences 20000 --precision-tokens 8192 --collect-tokens 16384)
    MEASURE=(--blimp-pairs 1000 --tse-items 1000 --wd-tokens 16384 --window 2048 --batch-size 64)
    MODELS=(smollm2=resources/models/smollm2-135m gemma3=resources/models/gemma3-270m)
    LIMITS=(60 300 90)
fi
BEFORE=none
git cat-file -e 7099757:src/wneurons/lm/activations.py 2> /dev/null && BEFORE=7099757

failed=0
step() {  # step NAME SECONDS COMMAND...: run it within SECONDS, report how it ended
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "=== $name (at most $limit s)"
    timeout "$limit" "$@"
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed=1
}

step collection "${LIMITS[0]}" "$PYTHON" perf/bench_collection.py "${COLLECTION[@]}" --before "$BEFORE" \
    --out "$OUT/bench_collection.json"
step gpu_check "${LIMITS[1]}" "$PYTHON" perf/gpu_check.py "${CHECK[@]}" --out-json "$OUT/gpu_check.json" "$@"
present=()
for model in "${MODELS[@]}"; do [ -f "${model#*=}/config.json" ] && present+=(--model "$model"); done
if [ ${#present[@]} -gt 0 ] && [ -d ../shared/data/blimp ] && [ -d ../shared/data/tse ]; then
    step precision_check "${LIMITS[2]}" "$PYTHON" perf/precision_check.py measure "${present[@]}" "${MEASURE[@]}" \
        --precisions tf32,bf16 --out "$OUT/precision_check.json"
else
    echo "=== precision_check: skipped (no converted models in resources/models or no ../shared/data)"
fi
exit $failed
