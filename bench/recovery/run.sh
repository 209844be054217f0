#!/usr/bin/env bash
# What checkpoints and restarts cost, through the real processes
# (pxctl run: a private pxcoordd and one pxagent per node, 2 nodes x 2 CPU
# workers, H-SADMM):
#   1. checkpoint cost per iteration for resnet20 (Fashion-MNIST) and
#      resnet18 (the synthetic 3x32x32 data set): the same job with
#      recovery.checkpoint_every 1 and without checkpoints; prints the
#      iteration time of each, the time a checkpoint holds training (the
#      snapshot copy, from rank 0's log), the time its background write takes
#      and the size per rank; beside it, the peer: PyTorch's torch.save + fsync
#      of a state of the same size, which a PyTorch loop would do inline;
#   2. time from kill -9 of a worker to the restarted job's next iteration
#      (checkpoint_every 5, max_restarts 1), and the final accuracy beside
#      the same job uninterrupted;
#   3. the same kill after node 1's checkpoints were removed: the cost in
#      accuracy of resuming a node from the shared state alone.
#   bench/recovery/run.sh [BUILD_DIR]      (env: ITERS, ITERS18, KEEP_DIR)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
pxctl=$build/cli/pxctl
PY=${PY:-/usr/bin/python3}
ITERS=${ITERS:-20}           # resnet20 iterations (the kill run: twice that)
ITERS18=${ITERS18:-6}        # resnet18 iterations (about 10 s each on 2 cores)
[ -x "$pxctl" ] || { echo "run.sh: $pxctl not built (make build)" >&2; exit 1; }
"$PY" -c "import torch" 2>/dev/null || { echo "run.sh: PyTorch missing: scripts/bootstrap --bench" >&2; exit 1; }
work=$(mktemp -d /tmp/px-bench-recovery-XXXXXX)
cleanup() {
  pkill -f "pxctl run $work" 2>/dev/null || true
  [ -n "${KEEP_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# spec MODEL DATASET ITERATIONS CHECKPOINT_EVERY MAX_RESTARTS
spec() {
  local f=$work/$1-$4-$5-$3.yaml
  cat > "$f" <<EOF
name: bench-$1-$4
strategy: hsadmm
model: {name: $1}
dataset: {name: $2}
cluster: {nodes: 2, workers_per_node: 2, device: cpu, threads_per_worker: 1}
train: {epochs: 2, batch_size: 64, lr: 0.05, local_steps: 4, eval_every: 1000}
prune: {channel_keep: 0.5}
admm: {rho1: 0.01, rho2: 0.001, adaptive_rho: false, max_iterations: $3, freeze_iteration: 8}
recovery: {checkpoint_every: $4, max_restarts: $5, keep: 2}
EOF
  echo "$f"
}

json() { "$PY" -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d$1)"; }

# rank 0's log of the run under $work/$1
rank0_log() { find "$work/$1" -name rank-0.log 2>/dev/null | head -n 1; }

printf '%-9s %10s %10s %9s %9s %9s %10s %12s\n' model it_ms ckpt_it_ms held_ms write_ms MB/rank overhead torch_save_ms
for m in resnet20:fashion-mnist resnet18:synthetic; do
  model=${m%%:*}
  data=${m#*:}
  n=$ITERS
  [ "$model" = resnet18 ] && n=$ITERS18
  for every in 0 1; do
    d=$work/$model-$every
    mkdir -p "$d"
    "$pxctl" run "$(spec "$model" "$data" "$n" "$every" 0)" --json --keep --work-dir "$d" > /dev/null 2>&1
    read -r it held write mb < <("$PY" "$here/logstats.py" "$(rank0_log "$model-$every")")
    eval "it_$every=$it"
  done
  over=$(awk -v a="$it_0" -v b="$it_1" 'BEGIN { printf "%.1f%%", 100 * (b - a) / a }')
  torch_ms=$("$PY" "$here/torch_save.py" "$mb" "$work/torch")
  printf '%-9s %10s %10s %9s %9s %9s %10s %12s\n' "$model" "$it_0" "$it_1" "$held" "$write" "$mb" "$over" "$torch_ms"
  echo "RESULT ${model}_checkpoint_held_ms $held"
  echo "RESULT ${model}_checkpoint_held_pct_of_iteration $(awk -v h="$held" -v i="$it_0" 'BEGIN { printf "%.2f", 100 * h / i }')"
  echo "RESULT ${model}_torch_save_ms $torch_ms"
done

# ---- 2. kill -9 of a worker to the next iteration of the restarted job ----
iters=$((ITERS * 2))
ref=$("$pxctl" run "$(spec resnet20 fashion-mnist "$iters" 5 1)" --json --work-dir "$work" 2>/dev/null)
acc_ref=$(echo "$ref" | json "['test_accuracy']")
# start_until NAME: the restartable job (checkpoints every 5, one restart) in
# the background under $work/NAME, output in $work/NAME.json; returns once
# rank 0 logged iteration ITERS/2 + 2. Sets d, run_pid, log, victim (rank 3).
start_until() {
  d=$work/$1
  mkdir -p "$d"
  "$pxctl" run "$(spec resnet20 fashion-mnist "$iters" 5 1)" --json --keep --work-dir "$d" \
    > "$work/$1.json" 2>/dev/null &
  run_pid=$!
  log=""
  for _ in $(seq 600); do log=$(rank0_log "$1"); [ -n "$log" ] && break; sleep 0.5; done
  until grep -q "rank 0: iteration $((ITERS / 2 + 2)) " "$log" 2>/dev/null; do sleep 0.05; done
  victim=$(pgrep -f "pxworker .*--rank 3 " | head -n 1)
}
start_until kill
t0=$(date +%s.%N)
kill -9 "$victim"
# the next iteration of attempt 2: the first iteration line after the marker
next=""
while [ -z "$next" ]; do
  next=$(awk '/attempt 2 of job/ { on = 1 } on && /rank 0: iteration/ { print; exit }' "$log")
  [ -n "$next" ] || sleep 0.05
done
t1=$(date +%s.%N)
resumed=$(grep -o 'resuming from the checkpoint of iteration [0-9]*' "$log" | tail -n 1 | awk '{print $NF}')
wait "$run_pid" || true
acc=$(json "['test_accuracy']" < "$work/kill.json")
state=$(json "['state']" < "$work/kill.json")
kill_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
echo "kill -9 of rank 3 after iteration $((ITERS / 2 + 2)): resumed after iteration $resumed, next iteration $kill_s s after the kill"
echo "final: $state, test accuracy $acc (uninterrupted $acc_ref)"
echo "RESULT kill_to_next_iteration_s $kill_s"
echo "RESULT restart_accuracy_delta_pt $(awk -v a="$acc" -v b="$acc_ref" 'BEGIN { printf "%.2f", 100 * (a - b) }')"

# ---- 3. a node without its checkpoints (a new node in a lost one's place) ----
# The same kill, after node 1's checkpoints are removed: at the restart its
# ranks hold nothing, take the shared state (z, masks, penalties, position)
# from node 0 and restart their own duals and momentum (docs/architecture.md).
# Its cost: the final accuracy beside the uninterrupted job's.
start_until fresh
mate=$(pgrep -f "pxworker .*--rank 2 " | head -n 1)
node1=$(dirname "$(find "$d" -name rank-3.log | head -n 1)")
kill -STOP "$victim" "$mate"
sleep 1 # a background checkpoint write in flight lands first
rm -f "$node1"/checkpoints/ckpt-*
kill -9 "$victim"
kill -CONT "$mate"
wait "$run_pid" || true
acc=$(json "['test_accuracy']" < "$work/fresh.json")
state=$(json "['state']" < "$work/fresh.json")
echo "node 1 without checkpoints at the restart: $state, test accuracy $acc (uninterrupted $acc_ref)"
echo "RESULT fresh_node_accuracy_delta_pt $(awk -v a="$acc" -v b="$acc_ref" 'BEGIN { printf "%.2f", 100 * (a - b) }')"
