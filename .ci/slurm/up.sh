#!/usr/bin/env bash
# Stand up a one-node SLURM cluster on localhost so that CI can run the workflow through
# `snakemake --profile profiles/slurm --profile profiles/slurm-ci` exactly as on a real cluster.
#
#   bash .ci/slurm/up.sh        # idempotent: a second call only re-checks the running cluster
#
# Debian 12 (slurm 22.05, munge), run as root, no systemd needed. Daemons: munged, slurmctld, slurmd.
# Node: four times this machine's CPUs (so that any two allocations of the demo's slice, 2-3 CPUs each, run side by
# side on a 2-core CI machine: with twice, a 3-CPU and a 2-CPU one could not, and CI's concurrency check passed by luck;
# SlurmdParameters=config_overrides lets the node declare more than it has), memory minus headroom, and two fake
# GPUs (gres/gpu backed by /dev/null and /dev/zero).
# No accounting daemon, so `sacct` cannot work: the CI profile uses `squeue` for job status.
# State, logs and pid files live under $SLURM_CI_DIR; only /etc/slurm/{slurm,gres}.conf are symlinks to it.
#
# Environment:
#   SLURM_CI_DIR        state directory                                  (default /tmp/wneurons-slurm)
#   SLURM_CI_PARTITION  partition name; must match profiles/slurm-ci     (default ci, see lib.sh)
#   SLURM_CI_MEM_MB     node RealMemory in MB                            (default: physical - max(4 GiB, 20 %))
#   SLURM_CI_CPUS       node CPUs                                        (default: 4 x this machine's)
#   SLURM_CI_TIMEOUT    seconds allowed for each wait (install, node idle, smoke job)    (default 120)
#   SLURM_CI_MAXTIME    every partition's MaxTime in minutes; the planner reads it (site_limits=slurm)  (default 15)
#
# Configured like a real site, not an unlimited one: a finite MaxTime with EnforcePartLimits=ALL (a longer request is
# refused at submission), and preemption by partition priority: jobs of the default partition ($PARTITION,
# PreemptMode=REQUEUE) and of $PARTITION-cancel (PreemptMode=CANCEL) are preempted by any job of $PARTITION-urgent
# that needs their CPUs (tests/workflow/test_slurm_faults.py submits one).
set -euo pipefail

HERE=$(dirname "$0")
# shellcheck source=SCRIPTDIR/lib.sh
. "$HERE/lib.sh"
TIMEOUT=${SLURM_CI_TIMEOUT:-120}
MAXTIME=${SLURM_CI_MAXTIME:-15}
HOST=$(hostname -s)

log() { echo "up.sh: $*" >&2; }
die() {
  log "ERROR: $*"
  command -v sinfo >/dev/null && timeout 10 sinfo -N -l >&2
  for f in "$BASE"/log/slurmctld.log "$BASE"/log/slurmd.log; do
    [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
node_state() { timeout 10 sinfo -h -N -n "$HOST" -p "$PARTITION" -o %T 2>/dev/null || true; }  # one line per partition without -p

# Poll `$2` (a shell condition) once a second for at most $TIMEOUT s; `$1` names the wait in errors.
wait_for() {
  local what=$1 cond=$2 deadline=$((SECONDS + TIMEOUT))
  until eval "$cond"; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${TIMEOUT}s waiting for $what"
    sleep 1
  done
}

# True if one CPU job and one GPU job (which must see the fake GPU) run. Both are bounded twice: by SLURM
# (-t 1 minute) and by timeout, so a job stuck PENDING (e.g. on a drained node) fails instead of hanging CI.
smoke_test() {
  timeout "$TIMEOUT" srun -p "$PARTITION" -t 1 --mem 100 hostname >/dev/null || return 1
  # shellcheck disable=SC2016  # expanded inside the job, not here
  timeout "$TIMEOUT" srun -p "$PARTITION" -t 1 --mem 100 --gpus=1 bash -c '[ "$CUDA_VISIBLE_DEVICES" = 0 ]'
}

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, writes /etc/slurm)"
start=$SECONDS

# 1. Packages. `apt-get update` only when something is missing, once.
missing=0
for b in munged mungekey slurmctld slurmd sinfo srun squeue; do command -v "$b" >/dev/null || missing=1; done
if [ "$missing" = 1 ]; then
  log "installing slurm + munge"
  export DEBIAN_FRONTEND=noninteractive
  timeout "$TIMEOUT" apt-get update -qq >/dev/null || die "apt-get update failed"
  timeout "$TIMEOUT" apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null || die "apt-get install failed"
fi

# 2. Idempotency: a running cluster that passes the smoke test is left alone; anything less
# (a daemon gone, node drained, jobs failing) is torn down and started afresh.
running=0
for d in $DAEMONS; do alive "$d" && running=$((running + 1)); done
# A cluster of an older up.sh (other limits) is restarted too.
configured() {
  grep -q "MaxTime=$MAXTIME .*PreemptMode=REQUEUE" "$BASE/etc/slurm.conf" 2>/dev/null &&
    grep -q '^EnforcePartLimits=ALL' "$BASE/etc/slurm.conf" && grep -q '^ProctrackType=proctrack/pgid' "$BASE/etc/slurm.conf"
}
if [ "$running" = 3 ] && configured && [[ "$(node_state)" =~ ^(idle|mixed|allocated)$ ]] && smoke_test; then
  log "cluster already up under $BASE"
  sinfo -p "$PARTITION"
  exit 0
fi
if [ "$running" != 0 ]; then
  log "$running of 3 daemons running but the cluster is not usable; restarting"
  bash "$HERE/down.sh"
fi

# The job-step plugin strips SLURM_* (incl. SLURM_CONF) before its inner srun, so every process must
# find the config at the compiled-in path /etc/slurm/slurm.conf. Never overwrite a real cluster's file.
mkdir -p /etc/slurm
for f in slurm.conf gres.conf; do
  if [ -e "/etc/slurm/$f" ] && [ "$(readlink "/etc/slurm/$f")" != "$BASE/etc/$f" ]; then
    die "/etc/slurm/$f exists and is not ours (-> $BASE/etc/$f); refusing to replace it"
  fi
done

# 3. Fresh state (jobs, logs); the munge key is kept across restarts.
rm -rf "$BASE/spool" "$BASE/log" "$BASE/run"
mkdir -p "$BASE"/{etc,run,log,spool/slurmd,spool/slurmctld,munge}
chmod 755 "$BASE/munge"
if [ ! -s "$BASE/munge/munge.key" ]; then
  mungekey --create --keyfile="$BASE/munge/munge.key"
  chmod 400 "$BASE/munge/munge.key"
fi

# 4. Config. The node line comes from `slurmd -C` (this machine's sockets/cores/threads); RealMemory is
# lowered to leave the controller, snakemake and the OS their share.
NODELINE=$(slurmd -C | head -n 1)
phys_mb=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$NODELINE")
headroom_mb=$((phys_mb / 5 > 4096 ? phys_mb / 5 : 4096))
MEM_MB=${SLURM_CI_MEM_MB:-$((phys_mb - headroom_mb))}
NODELINE=${NODELINE/RealMemory=$phys_mb/RealMemory=$MEM_MB}
# Jobs keep their rules' threads (results depend on torch's thread count), so concurrency on a small machine
# comes from declaring more CPUs than it has; the node line's topology is dropped for a plain CPU count.
CPUS=${SLURM_CI_CPUS:-$((4 * $(nproc)))}
NODELINE="NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB"

cat >"$BASE/etc/slurm.conf" <<EOF
# Generated by .ci/slurm/up.sh: one-node localhost cluster for CI.
ClusterName=wneurons-ci
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket
StateSaveLocation=$BASE/spool/slurmctld
SlurmdSpoolDir=$BASE/spool/slurmd
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
# A job's processes are tracked by process group, as a real site's cgroups track them: when the batch script dies on
# SIGTERM (a time limit, a cancel, a preemption), a child that traps SIGTERM keeps its process group and is killed
# KillWait seconds later, and the job stays COMPLETING until it is gone. proctrack/linuxproc walks the parent chain
# instead: the orphaned child escaped it, the job left squeue at once and the allocation finished a member after
# its retry had started (test_allocation_killed_by_its_time_limit, 2026-12-02).
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/backfill
# Cores AND memory are consumable, as on real clusters: a job's --mem is reserved on the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# srun/sbatch without --mem must not reserve the whole node.
DefMemPerCPU=500
ReturnToService=2
# A request over a partition's limits is refused at submission, as at most sites (the default, NO, leaves it pending
# forever with Reason=PartitionTimeLimit).
EnforcePartLimits=ALL
# A job past its time limit is signalled, then killed 5 s later.
KillWait=5
OverTimeLimit=0
# Preemption by partition priority (a job of a higher PriorityTier takes the CPUs of lower ones); what happens to the
# preempted job is the partition's PreemptMode.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# The node declares more CPUs than it has (SLURM_CI_CPUS): use the configured counts, do not drain the node.
SlurmdParameters=config_overrides
# squeue only sees finished jobs for MinJobAge seconds; the slurm executor plugin needs
# MinJobAge >= 3 * slurm-init-seconds-before-status-checks or it falls back to sacct (unusable here).
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
GresTypes=gpu
$NODELINE NodeAddr=127.0.0.1 Gres=gpu:2 State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=$MAXTIME State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=$PARTITION-cancel Nodes=$HOST MaxTime=$MAXTIME State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=$PARTITION-urgent Nodes=$HOST MaxTime=$MAXTIME State=UP PriorityTier=2 PreemptMode=OFF
EOF
# A gpu GRES without File= is silently dropped and the node drains; /dev/null stands in for a device.
cat >"$BASE/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$HOST Name=gpu File=/dev/null
NodeName=$HOST Name=gpu File=/dev/zero
EOF
ln -sfn "$BASE/etc/slurm.conf" /etc/slurm/slurm.conf
ln -sfn "$BASE/etc/gres.conf" /etc/slurm/gres.conf

# 5. Daemons. Each forks into the background and writes its pid under $BASE/run.
timeout 30 munged --key-file="$BASE/munge/munge.key" --socket="$BASE/munge/munge.socket" \
  --pid-file="$BASE/run/munged.pid" --log-file="$BASE/log/munged.log" \
  --seed-file="$BASE/munge/munged.seed" || die "munged did not start"
timeout 30 slurmctld || die "slurmctld did not start"
timeout 30 slurmd || die "slurmd did not start"
for d in $DAEMONS; do wait_for "$d pid file" "alive $d"; done

# 6. Ready = node idle, and one CPU job plus one GPU job run.
# shellcheck disable=SC2016  # the condition is re-evaluated on every poll
wait_for "node $HOST to become idle" '[ "$(node_state)" = idle ]'
smoke_test || die "smoke jobs failed (srun, then srun --gpus=1 expecting CUDA_VISIBLE_DEVICES=0)"
sinfo -p "$PARTITION"
log "cluster up in $((SECONDS - start))s: partition=$PARTITION (+ -cancel, -urgent) MaxTime=${MAXTIME}min RealMemory=${MEM_MB}MB cpus=$CPUS gres=gpu:2 state=$BASE"
