#!/usr/bin/env bash
# Run the demo DAG again, through `--profile profiles/slurm --profile profiles/slurm-ci` on the one-node localhost
# cluster of up.sh, and require its results to equal those of the local run (`make demo`) that came before.
#
#   bash .ci/slurm/run-demo.sh        # after `make demo`; .ci/run calls it
#
# The local run's results/, logs/, resources/models, resources/(kept-)activations and resources/suites are moved
# to $REFERENCE, so the SLURM run converts the model, collects the activations and scores everything itself; the fetched data
# (resources/data: a checksummed copy, no computation) is kept. Checked: Snakemake succeeds within $TIMEOUT s;
# every job of a GPU rule was submitted with --gpus=1 and SLURM recorded a gpu request for it, and no other job
# asked for one; every checkpoint is one allocation (a group job of profiles/slurm, run by the wneurons-slurm
# executor in one process), at least $SLURM_DEMO_MIN_CONCURRENT of them ran at the same time, and each paid one
# model load (its concurrent job slots: one GPU job at a time), not one per job (perf/model_loads.py);
# `python -m wneurons.report.compare` finds no difference; the activation shards are byte-identical.
# The cluster is stopped (down.sh, by pid) on exit, whatever happened.
#
# Environment (defaults run the demo in the repository; the others let it run on the tiny test project):
#   SLURM_DEMO_DIR        working directory (Snakemake -d) holding the local run     (default: the repository)
#   SLURM_DEMO_CONFIG     config file                                                 (default config/demo.yaml)
#   SLURM_DEMO_TARGETS    targets (other than `all`: results compared with --subset)  (default all)
#   SLURM_DEMO_TIMEOUT    seconds before Snakemake is killed                          (default 3600)
#   SLURM_DEMO_REFERENCE  where the local run is moved             (default $SLURM_DEMO_DIR/.snakemake/ci-local-run)
#   SLURM_DEMO_MIN_CONCURRENT  allocations that must have run at the same time                       (default 2)
#   SLURM_DEMO_OWN_CLUSTER     1: start the cluster (up.sh) and stop it on exit (down.sh); 0: use a running one
#                              and leave it up                                                        (default 1)
#   SLURM_DEMO_SITE_FILE       0: no site file (a --config that replaces profiles/slurm-ci's `config` list, so the
#                              planner plans at its default rates within the limits it reads from SLURM,
#                              site_limits=slurm); 1: profiles/slurm-ci's site.yaml                    (default 1)
#   SLURM_DEMO_MAXTIME         the partition's MaxTime (minutes) during the run             (default: as up.sh set it)
#   SLURM_DEMO_ENFORCE         slurm.conf's EnforcePartLimits during the run (NO: SLURM's default, under which a
#                              request over MaxTime stays PENDING)                         (default: as up.sh set it)
#                              Both are restored on exit (scontrol reconfigure reads slurm.conf's partitions again).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
WORKDIR=$(cd "${SLURM_DEMO_DIR:-$REPO}" && pwd)
CONFIG=$(realpath "${SLURM_DEMO_CONFIG:-config/demo.yaml}")
read -r -a TARGETS <<<"${SLURM_DEMO_TARGETS:-all}"
TIMEOUT=${SLURM_DEMO_TIMEOUT:-3600}
REFERENCE=${SLURM_DEMO_REFERENCE:-$WORKDIR/.snakemake/ci-local-run}
MIN_CONCURRENT=${SLURM_DEMO_MIN_CONCURRENT:-2}
OWN_CLUSTER=${SLURM_DEMO_OWN_CLUSTER:-1}
SITE_ARGS=()
# Last on the command line: --config takes every value after it.
[ "${SLURM_DEMO_SITE_FILE:-1}" = 1 ] || SITE_ARGS=(--config site_limits=slurm)
PYTHON=$REPO/.venv/bin/python
# The CI cluster's GPUs are stand-ins (/dev/null): its GPU jobs run on the CPU on purpose. sbatch --export=ALL carries
# this into every allocation; without it a job given a GPU that cannot use CUDA fails at once (wneurons.lm.models).
export WNEURONS_DEVICE=cpu
# Rules that declare `gpu=1`; every other rule must not ask for a GPU.
mapfile -t GPU_RULES < <("$PYTHON" -m wneurons.experiment.rule_files --root "$REPO" "gpu=1,")

log() { echo "run-demo.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -d "$WORKDIR/results" ] || die "$WORKDIR/results is missing: run the local demo (make demo) first"
[ "${#GPU_RULES[@]}" -gt 0 ] || die "found no rule with gpu=1 in workflow/rules"

# 1. The local run becomes the reference.
rm -rf "$REFERENCE"
mkdir -p "$REFERENCE"
for d in results logs resources/models resources/activations resources/kept-activations resources/suites; do
  if [ -e "$WORKDIR/$d" ]; then
    mkdir -p "$(dirname "$REFERENCE/$d")"
    mv "$WORKDIR/$d" "$REFERENCE/$d"
  fi
done
log "local run moved to $REFERENCE"

# 2. The cluster, stopped on any exit. The squeue poller records SLURM's own view of every job (MinJobAge=600
# keeps finished jobs listed for a while, and it polls every 2 s, so none is missed).
SLURM_LOG=$WORKDIR/.snakemake/ci-slurm-run.log
QUEUE_LOG=$WORKDIR/.snakemake/ci-slurm-squeue.log
POLLER=""
# `if`, not `&&`: under set -e a false test as the trap's last command would become the script's exit status.
# shellcheck source=lib.sh
. "$HERE/lib.sh"
CONF=$BASE/etc/slurm.conf
SAVED_CONF=""
cleanup() {
  if [ -n "$POLLER" ]; then kill "$POLLER" 2>/dev/null || true; fi
  if [ -n "$SAVED_CONF" ]; then
    cp "$SAVED_CONF" "$CONF" && rm -f "$SAVED_CONF" && timeout 60 scontrol reconfigure || log "could not restore $CONF"
  fi
  if [ "$OWN_CLUSTER" = 1 ]; then bash "$HERE/down.sh"; fi
}
trap cleanup EXIT
if [ "$OWN_CLUSTER" = 1 ]; then bash "$HERE/up.sh"; fi
if [ -n "${SLURM_DEMO_MAXTIME:-}${SLURM_DEMO_ENFORCE:-}" ]; then
  SAVED_CONF=$(mktemp)
  cp "$CONF" "$SAVED_CONF"
  if [ -n "${SLURM_DEMO_ENFORCE:-}" ]; then
    sed -i "s/^EnforcePartLimits=.*/EnforcePartLimits=$SLURM_DEMO_ENFORCE/" "$CONF"
  fi
  timeout 60 scontrol reconfigure
  if [ -n "${SLURM_DEMO_MAXTIME:-}" ]; then
    timeout 60 scontrol update "PartitionName=$PARTITION" "MaxTime=$SLURM_DEMO_MAXTIME"
  fi
  log "cluster for this run: $(scontrol show partition "$PARTITION" | grep -o 'MaxTime=[^ ]*'), $(grep '^EnforcePartLimits=' "$CONF")"
fi
: >"$QUEUE_LOG"
# One line per job and poll: poll time, id, name, state, gpu request, comment.
(while sleep 2; do
  now=$(date +%s)
  timeout 10 squeue -h -t all -O JobID:16,Name:40,StateCompact:8,tres-per-job:32,Comment:1000 2>/dev/null |
    sed "s/^/$now /" >>"$QUEUE_LOG" || true
done) &
POLLER=$!

# 3. The run. --verbose makes the plugin print each sbatch call; </dev/null: no prompt can hang CI.
log "snakemake through the SLURM profiles: ${TARGETS[*]} (timeout ${TIMEOUT}s)"
start=$SECONDS
rc=0
timeout -s KILL "$TIMEOUT" "$REPO/.venv/bin/snakemake" -s "$REPO/Snakefile" -d "$WORKDIR" \
  --profile profiles/slurm --profile profiles/slurm-ci --configfile "$CONFIG" \
  --verbose "${TARGETS[@]}" "${SITE_ARGS[@]}" </dev/null >"$SLURM_LOG" 2>&1 || rc=$?
wall=$((SECONDS - start))
grep -E '^(Finished jobid|Error in rule|.*steps \([0-9]+%\) done)' "$SLURM_LOG" | tail -n 5 >&2 || true
[ "$rc" = 0 ] || { tail -n 60 "$SLURM_LOG" >&2; die "snakemake failed (rc $rc after ${wall}s); log: $SLURM_LOG"; }
log "SLURM run finished in ${wall}s"

# 4. GPU requests: Snakemake's sbatch calls, then SLURM's record of what it allocated.
"$PYTHON" - "$SLURM_LOG" "$QUEUE_LOG" "$MIN_CONCURRENT" "${GPU_RULES[@]}" <<'PY'
import re
import sys
from collections import defaultdict

snakemake_log, queue_log, min_concurrent, *gpu_rules = sys.argv[1:]
text = open(snakemake_log).read()
run_id = re.search(r"SLURM run ID: (\S+)", text).group(1)  # the plugin's job name for this run's jobs
calls = [line for line in text.splitlines() if "sbatch call:" in line]
# A job's comment is rule_<rule>[_wildcards_...]; a group job's (profiles/slurm `groups`) is
# rule_gpu-<model>-<rev>-<allocation>_<its members' rules>, a long list shortened to end in "...". An allocation of
# members that run no model (weight rows, statistics parts) asks no GPU.
rule_of = re.compile(r"rule_([A-Za-z0-9_-]+?)(?:_wildcards_|['\" .]|$)")
problems, submitted = [], {}


def wants_gpu(rule):
    return rule in gpu_rules or rule.startswith("gpu-") and any(r in rule for r in gpu_rules)


for call in calls:
    rule = rule_of.search(call).group(1)
    gpu = re.search(r"--gpus[= ]1\b", call) is not None
    submitted.setdefault(rule, []).append(gpu)
    if gpu != wants_gpu(rule):
        problems.append(f"{rule}: sbatch call {'with' if gpu else 'without'} --gpus=1")
allocated, running = {}, defaultdict(set)  # running: poll time -> group jobs running then
for line in open(queue_log):
    now, jobid, name, state, tres, comment = line.split(None, 5)
    if name == run_id:
        allocated[jobid] = (rule_of.search(comment).group(1), "gpu" in tres)
        if state == "R" and allocated[jobid][0].startswith("gpu-"):
            running[now].add(jobid)
for rule, gpu in allocated.values():
    if gpu != wants_gpu(rule):
        problems.append(f"{rule}: SLURM job {'with' if gpu else 'without'} a gpu request")
missing = [r for r in submitted if wants_gpu(r) and not any(submitted[r])]
for rule, flags in sorted(submitted.items()):
    print(f"  {rule}: {len(flags)} sbatch calls, {sum(flags)} with --gpus=1")
print(f"  SLURM listed {len(allocated)} jobs, {sum(g for _, g in allocated.values())} requesting a gpu")
groups = [r for r in submitted if r.startswith("gpu-")]
print(f"  {len(calls)} sbatch calls, {len(groups)} of them group jobs (allocations of a checkpoint, sized to the site)")
most = max(map(len, running.values()), default=0)
print(f"  at most {most} allocations ran at the same time")
if most < int(min_concurrent):
    problems.append(f"at most {most} allocations ran at once, fewer than {min_concurrent}")
if not calls or not any(wants_gpu(r) for r in submitted) or len(allocated) < len(calls) or problems + missing:
    sys.exit("SLURM check failed: " + "; ".join(problems + missing or ["no GPU job seen"]))
PY

# Model loads: each allocation runs its checkpoint's jobs in threads of one process, one GPU job at a time, so it
# pays one load (its concurrent job slots), whatever its number of jobs; its log's closing line says so.
"$PYTHON" "$REPO/perf/model_loads.py" "$WORKDIR/logs" "$WORKDIR/.snakemake/slurm_logs" --max-loads-per-allocation 1 ||
  die "an allocation paid more model loads than its job slots, or no allocation log records its loads"

# 5. Same results as the local run.
# A run of a few targets is compared file by file with the matching part of the full local run.
SUBSET=()
[ "${TARGETS[*]}" = all ] || SUBSET=(--subset)
"$PYTHON" -m wneurons.report.compare "${SUBSET[@]}" "$REFERENCE/results" "$WORKDIR/results"
# Shards are temporary (deleted once their statistics are written); the ones a later job reads are kept as hard
# links under resources/kept-activations. index.json records timings; every array must be byte-identical.
if [ -d "$WORKDIR/resources/kept-activations" ]; then
  for kept in "$WORKDIR"/resources/kept-activations/*/*; do
    rel=${kept#"$WORKDIR"/}
    diff -rq -x index.json "$REFERENCE/$rel" "$kept" || die "kept activation shards $rel differ between the local and the SLURM run"
  done
  log "kept activation shards identical"
fi
log "SLURM demo run: ${wall}s, results identical to the local run"
