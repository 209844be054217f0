#!/bin/bash
# slurm_job: deploy/slurm/prunex.sbatch on a real Slurm. Starts munged,
# slurmctld and slurmd on this machine with a throwaway configuration in a
# temporary directory (one node, proctrack/pgid, task/none, no cgroups, no
# accounting, SlurmUser root, munge on its own socket and key), then:
#   1. sbatch runs a tiny job spec (synthetic data, 3 iterations) that asks
#      for 2 nodes on a 1-node allocation: the script starts a pxcoordd on
#      the batch host and one pxagent per node with srun, submits with the
#      allocation's node count, follows the job, and the Slurm job ends
#      COMPLETED with exit code 0 after the PruneX job SUCCEEDED;
#   2. a long job is scancel'ed while it trains: the script cancels it and
#      every process it started (coordinator, agent, workers) is gone.
# Everything is torn down on exit; the whole test is bounded (ctest TIMEOUT
# and per-step deadlines). Needs root (slurmd) and Debian's slurm-wlm and
# munge; without them it prints "SKIP: <why>" (ctest reports it skipped).
set -u
build=$1
src=$2
skip() { echo "SKIP: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "slurmd needs root"
for p in munged slurmctld slurmd sbatch scontrol sinfo srun scancel; do
  command -v $p >/dev/null || skip "$p not found (Debian packages slurm-wlm, munge)"
done

tmp=$(mktemp -d /tmp/pxslurm.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  # anything our jobs left behind (there should be nothing: checked below)
  pkill -KILL -f "$tmp/run" 2>/dev/null
  [ -n "${PX_TEST_KEEP-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*"
  for f in "$tmp"/log/*.log "$tmp"/*.out "$tmp"/run*/*.log; do
    [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }
  done
  exit 1
}

free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    ss -ltn 2>/dev/null | grep -q ":$p " || { echo $p; return; }
  done
  echo 0
}

# ---- munge
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$tmp/munge/munge.key"
munged -F --socket="$tmp/munge/sock" --key-file="$tmp/munge/munge.key" \
  --log-file="$tmp/log/munged.log" --pid-file="$tmp/munge/pid" \
  --seed-file="$tmp/munge/seed" --force 2>"$tmp/log/munged.err" &
pids+=($!)
for _ in $(seq 1 50); do [ -S "$tmp/munge/sock" ] && break; sleep 0.1; done
[ -S "$tmp/munge/sock" ] || fail "munged did not start"

# ---- slurm
host=$(hostname)
ctld_port=$(free_port)
d_port=$(free_port)
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=pxtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/sock
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=pxtest Nodes=ALL Default=YES MaxTime=10 State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N "$host" -f "$SLURM_CONF" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 1 100); do
  state=$(sinfo -h -o %T 2>/dev/null | head -n 1)
  [ "$state" = idle ] && break
  sleep 0.3
done
[ "$state" = idle ] || fail "the Slurm node is not idle (state '$state')"
echo "slurm: slurmctld on port $ctld_port, slurmd on $d_port, node $host idle"

# ---- the programs, as an installation would have them on PATH
mkdir -p "$tmp/bin"
ln -s "$build/cli/pxctl" "$tmp/bin/pxctl"
ln -s "$build/coordinatord/pxcoordd" "$tmp/bin/pxcoordd"
ln -s "$build/agent/pxagent" "$tmp/bin/pxagent"
export PRUNEX_BIN_DIR=$tmp/bin
unset PRUNEX_COORDINATOR PX_LOG_LEVEL
spec() { # NAME ITERATIONS: a tiny job that asks for 2 nodes
  cat >"$tmp/$1.yaml" <<SPEC
name: $1
strategy: hsadmm
model: {name: resnet20}
dataset: {name: synthetic, augment: false}
cluster: {nodes: 2, workers_per_node: 1, device: cpu, threads_per_worker: 1}
train: {epochs: 1, batch_size: 8, lr: 0.05, local_steps: 1, lr_schedule: constant}
prune: {filter_keep: 0.5}
admm: {max_iterations: $2}
SPEC
}
wait_slurm_job() { # ID SECONDS: the final JobState
  local s=""
  for _ in $(seq 1 $(($2 * 4))); do
    s=$(scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return ;; esac
    sleep 0.25
  done
  echo "${s:-UNKNOWN}"
}

# ---- 1. a job to the end
spec tiny 3
id=$(sbatch --parsable -N 1 -o "$tmp/tiny.out" -D "$tmp" --export=ALL,PRUNEX_SLURM_DIR="$tmp/run1" \
       "$src/deploy/slurm/prunex.sbatch" "$tmp/tiny.yaml") || fail "sbatch refused the script"
t0=$SECONDS
st=$(wait_slurm_job "$id" 120)
exitcode=$(scontrol show job "$id" | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p')
echo "slurm job $id: $st, exit code $exitcode, $((SECONDS - t0)) s"
cat "$tmp/tiny.out"
[ "$st" = COMPLETED ] || fail "the Slurm job ended $st"
[ "$exitcode" = 0:0 ] || fail "exit code $exitcode"
grep -q "started pxcoordd on" "$tmp/tiny.out" || fail "no private coordinator was started"
grep -q "1 agent(s) ready" "$tmp/tiny.out" || fail "the agent did not register"
grep -q "(1 node(s))" "$tmp/tiny.out" || fail "not submitted with the allocation's node count"
grep -q "SUCCEEDED" "$tmp/tiny.out" || fail "the PruneX job did not succeed"
grep -q "ended, exit status 0" "$tmp/tiny.out" || fail "the script did not report success"
grep -q "rank 0: iteration 2" "$tmp"/run1/job-*.log || fail "the rank log did not come through the coordinator"
pgrep -f "$tmp/run1" >/dev/null && fail "processes of the finished job are still running"

# ---- 2. scancel while it trains
spec long 100000
id=$(sbatch --parsable -N 1 -o "$tmp/long.out" -D "$tmp" --export=ALL,PRUNEX_SLURM_DIR="$tmp/run2" \
       "$src/deploy/slurm/prunex.sbatch" "$tmp/long.yaml") || fail "sbatch refused the script"
for _ in $(seq 1 240); do
  grep -q "submitted" "$tmp/long.out" 2>/dev/null && pgrep -f "$tmp/run2" -a | grep -q pxworker && break
  sleep 0.25
done
pgrep -af "$tmp/run2" | grep -q pxworker || fail "the long job's worker never started"
echo "long job running: $(pgrep -f "$tmp/run2" | wc -l) processes under $tmp/run2; scancel $id"
scancel "$id"
st=$(wait_slurm_job "$id" 60)
echo "slurm job $id: $st"
gone=0
for _ in $(seq 1 80); do
  pgrep -f "$tmp/run2" >/dev/null || { gone=1; break; }
  sleep 0.25
done
cat "$tmp/long.out"
[ "$st" = CANCELLED ] || fail "the Slurm job ended $st after scancel"
[ $gone -eq 1 ] || { pgrep -af "$tmp/run2"; fail "processes outlived scancel"; }
grep -q "cancelling job" "$tmp/long.out" || fail "the script did not cancel the PruneX job"
echo "slurm: both jobs behaved"
