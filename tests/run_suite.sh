#!/usr/bin/env bash
# `make test`: every test, with the slowest listed at the end.
#
# Where the localhost SLURM cluster answers (`bash .ci/slurm/up.sh`), the tests marked `cluster` (tests/conftest.py)
# run in a second pytest process beside the others: they spend most of their time waiting on the scheduler and on
# the delays that hold an allocation open until a fault is injected, while the others keep the cores busy. Their
# output follows the others'; the exit status fails if either failed. Without a cluster, one pytest runs everything
# and the cluster tests are skipped, each saying why.
#
#   bash tests/run_suite.sh [pytest args]   # PYTEST: the pytest command and its options (make test passes the
#                                           # Makefile's; default .venv/bin/pytest -q -rs --durations=25)
set -uo pipefail
cd "$(dirname "$0")/.."
read -r -a PYTEST <<<"${PYTEST:-.venv/bin/pytest -q -rs --durations=25}"
PYTEST+=("$@")

# The same test of a cluster as tests/conftest.py's cluster_up().
if ! { command -v squeue >/dev/null && timeout 20 squeue -h >/dev/null 2>&1; }; then
  exec "${PYTEST[@]}"
fi

log=$(mktemp)
"${PYTEST[@]}" -m cluster >"$log" 2>&1 &
cluster=$!
trap 'kill "$cluster" 2>/dev/null; rm -f "$log"' EXIT
start=$SECONDS
"${PYTEST[@]}" -m "not cluster"
rc=$?
echo "=== tests without the cluster: rc $rc after $((SECONDS - start)) s; waiting for the cluster tests"
wait "$cluster"
cluster_rc=$?
echo "=== the cluster tests (pytest -m cluster, run beside the others): rc $cluster_rc after $((SECONDS - start)) s"
cat "$log"
[ "$rc" = 0 ] && [ "$cluster_rc" = 0 ]
