#!/usr/bin/env bash
# Stop the localhost SLURM cluster started by .ci/slurm/up.sh: cancel its jobs, then stop the daemons by
# the pids in $SLURM_CI_DIR/run (TERM, then KILL after a grace period). Safe to call when nothing runs.
set -uo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "$0")/lib.sh"
GRACE=${SLURM_CI_GRACE:-15}   # seconds a daemon gets to exit after TERM

log() { echo "down.sh: $*" >&2; }

# Jobs first: their slurmstepd processes outlive slurmd, so cancel them while the controller still answers.
if alive slurmctld; then
  for p in "$PARTITION" "$PARTITION-cancel" "$PARTITION-urgent"; do timeout 10 scancel -p "$p" 2>/dev/null || true; done
  for _ in $(seq 1 10); do
    [ -z "$(timeout 5 squeue -h -p "$PARTITION,$PARTITION-cancel,$PARTITION-urgent" -t RUNNING,COMPLETING 2>/dev/null)" ] && break
    sleep 1
  done
fi

for d in $(echo "$DAEMONS" | tr ' ' '\n' | tac); do   # reverse start order
  f="$BASE/run/$d.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if pid_alive "$pid"; then
    kill "$pid"
    # slurmd ignores TERM while it cannot reach slurmctld, hence the KILL fallback.
    for _ in $(seq 1 $((GRACE * 2))); do pid_alive "$pid" || break; sleep 0.5; done
    if pid_alive "$pid"; then
      log "$d ($pid) ignored TERM for ${GRACE}s, sending KILL"
      kill -9 "$pid"
    fi
  fi
  rm -f "$f"
done

# Remove our config links so nothing later mistakes this machine for a cluster member.
for f in slurm.conf gres.conf; do
  [ "$(readlink "/etc/slurm/$f" 2>/dev/null)" = "$BASE/etc/$f" ] && rm -f "/etc/slurm/$f"
done
log "stopped (state kept under $BASE)"
