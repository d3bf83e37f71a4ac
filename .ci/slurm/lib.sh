# Shared by up.sh and down.sh (sourced, not run): where the cluster lives and how to tell a daemon is alive.
# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this file
BASE=${SLURM_CI_DIR:-/tmp/wneurons-slurm}
PARTITION=${SLURM_CI_PARTITION:-ci}   # must match slurm_partition in profiles/slurm-ci
DAEMONS="munged slurmctld slurmd"     # start order; down.sh stops them in reverse

# True while pid $1 runs. A daemon that just exited can linger as a zombie until it is reaped, and
# `kill -0` still succeeds on a zombie, so the process state is checked instead.
pid_alive() { [[ "$(ps -o stat= -p "$1" 2>/dev/null)" =~ ^[^Z] ]]; }

# True while daemon $1 (munged, slurmctld, slurmd) runs, according to its pid file under $BASE/run.
alive() { [ -f "$BASE/run/$1.pid" ] && pid_alive "$(cat "$BASE/run/$1.pid")"; }
