#!/bin/sh
# bench/elastic/run.sh BUILD_DIR: the time lost to one node failure, on the
# emulated cluster, for an elastic job, a restart from checkpoint and
# torchrun; and an elastic job's link cut and stopped worker.
#
# Four nodes as bench/cluster builds them: a network namespace each, its
# processes in their own IPC and UTS namespaces (UCX then sees separate
# hosts), veth pairs to a bridge shaped with tbf in both directions (RATE),
# and here also a CPU cgroup each (CPU_PER_NODE cores), so that a lost node
# does not hand its CPU to the others as it would on one shared machine.
# pxcoordd (TLS, tokens, heartbeat_timeout_ms 6000: see below) runs in node
# 0's namespace, a pxagent offering one CPU worker on every node. A job is
# H-SADMM, ResNet-20 on a Fashion-MNIST subset (TRAIN images, TEST test
# images), 3 nodes x 1 worker, ITERS rounds of 4 local steps of batch 64,
# recovery {checkpoint_every: CKPT, max_restarts: 1}, comm.timeout_ms 8000
# (an elastic job's lost_ms is half of it). Node 3 is the spare that a
# restarted attempt is placed on.
#
# Scenarios (SCEN, default all, in this order):
#   elastic     the job with elastic: {min_nodes: 2, max_nodes: 3},
#               undisturbed, then with the agent and worker of the node of
#               rank 2 SIGKILLed once iteration KILL_AT was reported
#   restart     the same job without elastic (restart from the newest
#               checkpoint), undisturbed and with the same kill
#   torch       PyTorch DDP under torchrun (torch_elastic.py; c10d rendezvous
#               hosted by node 0, --nnodes 2:3, --max-restarts 1, gloo with
#               an 8 s timeout; rank 0 saves a checkpoint every 4 x CKPT
#               steps to a file all nodes read) on nodes 0-2, 4 x ITERS steps
#               of the same batch, undisturbed and with node 2's torchrun and
#               worker SIGKILLed after step 4 x (KILL_AT + 1), the same point
#               (both then train 2 rounds' steps again)
#   link        the elastic job, the veth of rank 2's node (rank 1's when
#               that is node 0, pxcoordd's) down at KILL_AT for CUT_S
#               seconds, then up
#   stop        the elastic job, rank 2's worker SIGSTOPped at KILL_AT for
#               STOP_S seconds (past the agent's 10 s watchdog), then SIGCONTed
#   stop-short  the same for SHORT_S seconds: past lost_ms, not the watchdog
# Per run: wall time (submit to end), state, restarts, membership epochs,
# nodes at the end, final test accuracy; for a disturbed run the seconds
# lost (its wall minus its undisturbed twin's) and the stall (stall.py: how
# long it stood still at the disturbance beyond one normal round, which the
# machine's load outside that window does not move). RESULT lines, with the
# ratios elastic/restart and elastic/torch of both (a negative figure, load
# noise, counts as 0). Exits 1 naming each run
# that did not end as expected: elastic, link, stop, stop-short SUCCEEDED
# with no restart and 3 nodes (the spare joins at the round boundary after
# the drop); restart SUCCEEDED after one restart; torch FINAL after one
# restart on 2 nodes.
#
# heartbeat_timeout_ms 6000: survivors of a silent node wait comm.timeout_ms
# (8 s) after noticing it (lost_ms, 4 s) for the coordinator's next epoch,
# and the coordinator drops a node whose link is cut only at
# heartbeat_timeout_ms; with the default 15 s that is a race.
#
# Needs root. Not a test (not in ctest): about 15 minutes on 2 cores.
# Environment: RATE (100mbit), ITERS (20), KILL_AT (11), CKPT (5),
#   TRAIN (12000), TEST (2000), CPU_PER_NODE (0.6), CUT_S (20), STOP_S (20),
#   SHORT_S (7), SCEN ("elastic restart torch link stop stop-short"),
#   OUT (a new /tmp/pxelastic-*), KEEP=1 (keep OUT/scratch: agents' work
#   directories, the database).
set -eu

if [ "$(id -u)" != 0 ]; then
  echo "bench/elastic/run.sh: needs root (network namespaces, veth, tc, cgroups)" >&2
  exit 1
fi
if [ $# -ne 1 ] || [ ! -x "$1/cli/pxctl" ]; then
  echo "usage: bench/elastic/run.sh BUILD_DIR   (BUILD_DIR/cli/pxctl must exist)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
rate="${RATE:-100mbit}"
iters="${ITERS:-20}"
kill_at="${KILL_AT:-11}"
ckpt="${CKPT:-5}"
ntrain="${TRAIN:-12000}"
ntest="${TEST:-2000}"
cpu="${CPU_PER_NODE:-0.6}"
cut_s="${CUT_S:-20}"
stop_s="${STOP_S:-20}"
short_s="${SHORT_S:-7}"
scen="${SCEN:-elastic restart torch link stop stop-short}"
out="${OUT:-$(mktemp -d /tmp/pxelastic-XXXXXX)}"
mkdir -p "$out"
py=/usr/bin/python3
torchrun=/usr/bin/torchrun
for t in ip unshare tc openssl $torchrun; do
  command -v "$t" >/dev/null || { echo "run.sh: $t is missing (scripts/bootstrap --bench)" >&2; exit 1; }
done
"$py" -c "import torch" 2>/dev/null || { echo "run.sh: PyTorch missing: scripts/bootstrap --bench" >&2; exit 1; }
cgroot=/sys/fs/cgroup/cpu
[ -w "$cgroot" ] || cgroot=/sys/fs/cgroup
[ -f "$cgroot/cgroup.procs" ] || { echo "run.sh: no CPU cgroup at $cgroot" >&2; exit 1; }

tag=pe$$
br=${tag}br
nodes="0 1 2 3"
pids=""
apid0="" apid1="" apid2="" apid3=""

# every process of a node's namespace, then the namespaces, links, cgroups
cleanup() {
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for i in $nodes; do
    for p in $(ip netns pids "${tag}n$i" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  sleep 0.5
  for i in $nodes; do
    ip netns del "${tag}n$i" 2>/dev/null || true
    ip link del "${tag}v$i" 2>/dev/null || true
    rmdir "$cgroot/$tag/n$i" 2>/dev/null || true
  done
  rmdir "$cgroot/$tag" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$out/scratch"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the cluster ---------------------------------------------------------------
ip link add "$br" type bridge
ip link set "$br" up
quota=$(awk -v c="$cpu" 'BEGIN {printf "%d", c * 100000}')
mkdir -p "$cgroot/$tag"
for i in $nodes; do
  n=${tag}n$i
  ip netns add "$n"
  ip link add "${tag}v$i" type veth peer name eth0 netns "$n"
  ip link set "${tag}v$i" master "$br" up
  ip -n "$n" addr add "10.78.0.$((i + 1))/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" link set lo up
  mkdir -p "$cgroot/$tag/n$i"
  if [ -f "$cgroot/$tag/n$i/cpu.cfs_quota_us" ]; then
    echo 100000 > "$cgroot/$tag/n$i/cpu.cfs_period_us"
    echo "$quota" > "$cgroot/$tag/n$i/cpu.cfs_quota_us"
  else
    echo "$quota 100000" > "$cgroot/$tag/n$i/cpu.max"
  fi
  # tbf on both ends (into and out of the node); burst: 10 ms, >= 128 KiB
  bits=$(echo "$rate" | awk '{v=$1; m=1; if (v ~ /gbit$/) m=1e9; else if (v ~ /mbit$/) m=1e6;
                              else if (v ~ /kbit$/) m=1e3; sub(/[a-z]+$/, "", v); print v*m}')
  burst=$(awk -v b="$bits" 'BEGIN {x = b / 8 / 100; if (x < 131072) x = 131072; printf "%d", x}')
  tc qdisc replace dev "${tag}v$i" root tbf rate "$rate" burst "$burst" latency 200ms
  ip netns exec "$n" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 200ms
done
coord_ip=10.78.0.1

# on NODE HOSTNAME CMD... &: CMD in the node's namespaces and CPU cgroup (it execs:
# run it in the background, $! is then CMD)
on() {
  i=$1
  h=$2
  shift 2
  exec ip netns exec "${tag}n$i" unshare --ipc --uts sh -c \
    "echo \$\$ > $cgroot/$tag/n$i/cgroup.procs; hostname $h; exec \"\$@\"" sh "$@"
}

# ---- data, TLS, tokens, the coordinator and the agents --------------------------
scr="$out/scratch"
mkdir -p "$scr/data"
"$py" - "$ntrain" "$ntest" "$scr/data" <<'EOF' || { echo "run.sh: the data subset failed" >&2; exit 1; }
import gzip, sys
src = "/usr/share/datasets/fashion-mnist"
ntr, nte, dst = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for split, n in (("train", ntr), ("t10k", nte)):
    for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
        name = f"{split}-{kind}-ubyte.gz"
        d = gzip.open(f"{src}/{name}").read()
        hdr = bytearray(d[:8 if item == 1 else 16])
        hdr[4:8] = n.to_bytes(4, "big")
        with gzip.open(f"{dst}/{name}", "wb", compresslevel=1) as f:
            f.write(bytes(hdr) + d[len(hdr):len(hdr) + n * item])
EOF
(cd "$scr" &&
  printf 'subjectAltName=IP:%s\n' "$coord_ip" > ext.cnf &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj /CN=px-elastic-ca 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
    -out server.csr -subj /CN=node0 2>/dev/null &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile ext.cnf 2>/dev/null) || { echo "run.sh: openssl failed" >&2; exit 1; }
secret=$(openssl rand -hex 16)
umask 077
{
  printf '%s-admin bench admin\n' "$secret"
  for i in $nodes; do printf '%s-node%d node%d node\n' "$secret" "$i" "$i"; done
} > "$scr/tokens"
umask 022
export PRUNEX_CA="$scr/ca.pem"
port=7070
ip netns exec "${tag}n0" "$build/coordinatord/pxcoordd" --listen "$coord_ip:$port" \
  --db "$scr/coord.db" --tls-cert "$scr/server.pem" --tls-key "$scr/server.key" \
  --tokens "$scr/tokens" --heartbeat-timeout-ms 6000 --log-level info > "$scr/coordd.out" 2> "$scr/coordd.log" &
pids="$pids $!"
export PRUNEX_COORDINATOR="$coord_ip:$port"

# agent_start NODE: (re)starts node NODE's agent; sets apidNODE
agent_start() {
  on "$1" "node$1" env PRUNEX_TOKEN="$secret-node$1" UCX_NET_DEVICES=eth0 \
    "$build/agent/pxagent" --name "node$1" --cpu-workers 1 --threads-per-worker 1 \
    --work-dir "$scr/agent$1" --data-root "$scr/data" --log-level info \
    >> "$scr/agent$1.log" 2>&1 &
  eval "apid$1=$!"
  pids="$pids $!"
}
for i in $nodes; do agent_start "$i"; done
export PRUNEX_TOKEN="$secret-admin"
ctl() { ip netns exec "${tag}n0" "$build/cli/pxctl" "$@"; }

# wait_ready: all four nodes READY and no worker left on any (a node that
# was cut off or stopped ends its worker when its agent hears of the drop)
wait_ready() {
  k=0
  while :; do
    ready=$(ctl --json nodes 2>/dev/null | grep -o '"NODE_STATE_READY"\|"READY"' | wc -l)
    busy=0
    for i in $nodes; do
      a=$(eval echo "\$apid$i")
      [ -n "$(pgrep -P "$a" 2>/dev/null)" ] && busy=1
    done
    [ "$ready" -ge 4 ] && [ $busy = 0 ] && return 0
    k=$((k + 1))
    if [ $k -gt 400 ]; then
      echo "run.sh: the nodes are not all READY and idle after 120 s; logs:" >&2
      tail -n 5 "$scr/coordd.log" "$scr"/agent?.log >&2
      exit 1
    fi
    sleep 0.3
  done
}
wait_ready

# ---- one PruneX run ----------------------------------------------------------------
now_ms() { date +%s%3N; }

# spec NAME ELASTIC(0|1)
spec() {
  cat <<EOF
name: $1
strategy: hsadmm
model: {name: resnet20}
dataset: {name: fashion-mnist, path: $scr/data}
cluster: {nodes: 3, workers_per_node: 1, device: cpu, threads_per_worker: 1}
train: {epochs: 1, batch_size: 64, lr: 0.05, local_steps: 4, eval_every: 1000}
prune: {channel_keep: 0.5}
admm: {rho1: 0.01, rho2: 0.001, adaptive_rho: false, max_iterations: $iters, freeze_iteration: 8}
comm: {timeout_ms: 8000}
recovery: {checkpoint_every: $ckpt, max_restarts: 1, keep: 2}
EOF
  [ "$2" = 1 ] && echo "elastic: {min_nodes: 2, max_nodes: 3}"
  return 0
}

# descendants PID: PID's children, theirs, ...
descendants() {
  for c in $(pgrep -P "$1" 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}

# victim_node JOB [KIND]: the node index whose agent runs rank 2 of JOB; for
# a link cut, rank 1's when rank 2 is on node 0 (pxcoordd's namespace: its
# link down would cut the coordinator off from every node)
victim_node() {
  for r in 2 1; do
    for i in $nodes; do
      [ -e "$scr/agent$i/jobs/$1/rank-$r.log" ] || continue
      [ "$i" = 0 ] && [ "${2:-}" = link ] && continue
      echo "$i"
      return 0
    done
  done
  return 1
}

# disturb KIND JOB: waits for iteration KILL_AT, then kill | link | stop
disturb() {
  k=0
  until [ "$(ctl --json status "$2" 2>/dev/null | "$py" -c \
      'import json,sys; print(json.load(sys.stdin).get("iteration", -1))' 2>/dev/null || echo -1)" \
      -ge "$kill_at" ]; do
    k=$((k + 1))
    [ $k -gt 1200 ] && { echo "run.sh: $2 never reached iteration $kill_at" >&2; return 1; }
    sleep 0.4
  done
  v=$(victim_node "$2" "$1") || { echo "run.sh: no node holds rank 2 of $2" >&2; return 1; }
  a=$(eval echo "\$apid$v")
  w=$(descendants "$a")
  echo "$(date -u +%T) $1 node$v (agent $a, workers $w) at iteration >= $kill_at" >> "$out/events"
  case $1 in
    kill) kill -KILL "$a" $w 2>/dev/null || true ;;
    link) ip link set "${tag}v$v" down ;;
    stop|stop-short) kill -STOP $w ;;
  esac
  # the last iteration reported before, and when (for stall.py)
  ctl --json metrics "$2" 2>/dev/null | "$py" -c 'import json, sys
r = max(json.load(sys.stdin)["iterations"], key=lambda r: int(r["iteration"]))
print(r["iteration"], r["time_unix_ms"])' > "$f.kill" || true
  case $1 in
    kill) echo "$v" > "$out/$2.killed" ;; # its agent is started again after the run
    link)
      sleep "$cut_s"
      ip link set "${tag}v$v" up
      echo "$(date -u +%T) link of node$v up" >> "$out/events" ;;
    stop|stop-short)
      if [ "$1" = stop ]; then sleep "$stop_s"; else sleep "$short_s"; fi
      kill -CONT $w 2>/dev/null || true
      echo "$(date -u +%T) workers of node$v continued" >> "$out/events" ;;
  esac
}

# run_px NAME ELASTIC DISTURB(none|kill|link|stop): one job, one row
run_px() {
  f="$out/$1"
  spec "$1" "$2" > "$f.yaml"
  t0=$(now_ms)
  job=$(ctl submit "$f.yaml" 2> "$f.submit.err") || {
    echo "run.sh: submit of $1 failed: $(cat "$f.submit.err")" >&2
    exit 1
  }
  dpid=""
  if [ "$3" != none ]; then
    disturb "$3" "$job" > "$f.disturb.log" 2>&1 &
    dpid=$!
  fi
  ctl watch "$job" > "$f.watch" 2>&1 || true
  t1=$(now_ms)
  [ -z "$dpid" ] || wait "$dpid" || echo "run.sh: $1: the disturbance failed: $(cat "$f.disturb.log")" >&2
  if [ -s "$out/$job.killed" ]; then # the node comes back for the next run
    agent_start "$(cat "$out/$job.killed")"
  fi
  ctl --json status "$job" > "$f.status.json" 2>/dev/null || true
  ctl status "$job" > "$f.status" 2>/dev/null || true
  ctl --json metrics "$job" > "$f.metrics.json" 2>/dev/null || true
  stall="- -"
  [ ! -s "$f.kill" ] || stall=$("$py" "$here/stall.py" px "$f.metrics.json" "$f.kill") || stall="- -"
  "$py" - "$f.status.json" "$1" "$t0" "$t1" "$stall" <<'EOF' | tee -a "$out/rows"
import json, sys
path, name, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
stall = sys.argv[5].split()
j = json.load(open(path))
state = str(j.get("state", "?")).replace("JOB_STATE_", "")
acc = (j.get("summary") or {}).get("test_accuracy")
epochs = j.get("memberships") or []
last = epochs[-1] if epochs else {}
print("%s %.1f %s %d %d %d %s %s %s" % (name, (t1 - t0) / 1e3, state, j.get("attempt", 1) - 1,
      len(epochs), len(last.get("node_ids") or []), "%.4f" % acc if acc is not None else "-",
      stall[0], stall[1]))
EOF
  wait_ready
}

# ---- one PyTorch run -----------------------------------------------------------
# run_torch NAME DISTURB(none|kill)
run_torch() {
  f="$out/$1"
  ck="$scr/$1.ckpt.pt"
  rm -f "$ck"
  t0=$(now_ms)
  start=$(awk -v t="$t0" 'BEGIN {printf "%.3f", t / 1000}')
  tp=""
  for i in 0 1 2; do
    host=false
    [ $i = 0 ] && host=true
    # the host name is the node's address: torchrun gives it to the workers
    # as MASTER_ADDR
    on $i "10.78.0.$((i + 1))" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      $torchrun --nnodes 2:3 --nproc_per_node 1 --max_restarts 1 --rdzv_backend c10d \
      --rdzv_endpoint "$coord_ip:29400" --rdzv_id "$1" --rdzv_conf "is_host=$host" \
      --redirects 1 --tee 1 --log_dir "$scr/$1-logs$i" \
      "$here/torch_elastic.py" --data "$scr/data" --steps $((4 * iters)) --ckpt "$ck" \
      --ckpt-every $((4 * ckpt)) --timeout 8 --start "$start" > "$f.node$i.log" 2>&1 &
    eval "tpid$i=$!"
    tp="$tp $!"
  done
  if [ "$2" = kill ]; then
    k=0
    # rank 0 (any node: the rendezvous numbers them) prints the steps
    until cat "$f".node?.log 2>/dev/null | grep -q "STEP $((4 * kill_at + 4)) "; do
      k=$((k + 1))
      [ $k -gt 2400 ] && { echo "run.sh: $1 never reached step $((4 * kill_at + 4))" >&2; break; }
      sleep 0.1
    done
    w=$(descendants "$tpid2")
    echo "$(date -u +%T) kill torchrun node2 ($tpid2, workers $w) at step $((4 * kill_at + 4))" >> "$out/events"
    kill -KILL "$tpid2" $w 2>/dev/null || true
  fi
  for p in $tp; do wait "$p" || true; done
  t1=$(now_ms)
  cat "$f".node?.log > "$f.log"
  stall="- -"
  [ "$2" = none ] || stall=$("$py" "$here/stall.py" torch "$f.log" $((4 * kill_at + 4))) || stall="- -"
  "$py" - "$f.log" "$1" "$t0" "$t1" "$stall" <<'EOF' | tee -a "$out/rows"
import re, sys
path, name, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
stall = sys.argv[5].split()
acc, restarts, world, state = "-", 0, 0, "FAILED"
for line in open(path, errors="replace"):
    m = re.search(r"RESUME (\d+) (\d+) (\d+)", line)
    if m:
        restarts, world = max(restarts, int(m.group(2))), int(m.group(3))
    m = re.search(r"FINAL [0-9.]+ ([0-9.]+) restarts (\d+) world (\d+)", line)
    if m:
        acc, state, world = m.group(1), "SUCCEEDED", int(m.group(3))
        restarts = max(restarts, int(m.group(2)))
print("%s %.1f %s %d %d %d %s %s %s" % (name, (t1 - t0) / 1e3, state, restarts, 0, world, acc,
      stall[0], stall[1]))
EOF
}

# ---- the scenarios -------------------------------------------------------------
echo "bench/elastic: 3 nodes x 1 CPU worker (+ 1 spare), $cpu CPU each, $(nproc) cores," \
  "links $rate, $iters rounds x 4 steps x batch 64, kill at $kill_at, checkpoints every $ckpt"
echo "output in $out; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$out/rows"
for s in $scen; do
  case $s in
    elastic) run_px elastic-undisturbed 1 none; run_px elastic-kill 1 kill ;;
    restart) run_px restart-undisturbed 0 none; run_px restart-kill 0 kill ;;
    torch) run_torch torch-undisturbed none; run_torch torch-kill kill ;;
    link) run_px elastic-link 1 link ;;
    stop) run_px elastic-stop 1 stop ;;
    stop-short) run_px elastic-stop-short 1 stop-short ;;
    *) echo "run.sh: unknown scenario '$s'" >&2; exit 2 ;;
  esac
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the table, the RESULT lines, the checks -------------------------------------
"$py" - "$out/rows" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, wall, state, restarts, epochs, nodes, acc, stall, dt = line.split()
    rows[name] = dict(wall=float(wall), state=state, restarts=int(restarts), epochs=int(epochs),
                      nodes=int(nodes), acc=None if acc == "-" else float(acc),
                      stall=None if stall == "-" else float(stall), dt=dt)
print("%-20s %7s %-10s %8s %6s %5s %8s %7s %7s %7s %6s" % (
    "run", "wall s", "state", "restarts", "epochs", "nodes", "accuracy", "acc pt", "lost s",
    "stall s", "step s"))
# what each run must end as: restarts, nodes at the end (None: any)
want = {"elastic-undisturbed": (0, 3), "restart-undisturbed": (0, 3), "torch-undisturbed": (0, 3),
        "elastic-kill": (0, 3), "elastic-link": (0, 3), "elastic-stop": (0, 3),
        "restart-kill": (1, None), "torch-kill": (1, 2),
        "elastic-stop-short": (0, 3)}
lost, stall, bad = {}, {}, []
for name, r in rows.items():
    base = rows.get(name.split("-")[0] + "-undisturbed")
    d = dacc = None
    if base and base is not r:
        d = lost[name] = r["wall"] - base["wall"]
        if r["acc"] is not None and base["acc"] is not None:
            dacc = 100 * (r["acc"] - base["acc"])
    if r["stall"] is not None:
        stall[name] = r["stall"]
    f = lambda v, fmt: "-" if v is None else fmt % v
    print("%-20s %7.1f %-10s %8d %6d %5d %8s %7s %7s %7s %6s" % (
        name, r["wall"], r["state"], r["restarts"], r["epochs"], r["nodes"],
        f(r["acc"], "%.4f"), f(dacc, "%+.2f"), f(d, "%.1f"), f(r["stall"], "%.1f"), r["dt"]))
    print("RESULT %s_wall_s %.1f" % (name, r["wall"]))
    for key, v in (("lost_s", d), ("stall_s", r["stall"]), ("accuracy_delta_pt", dacc)):
        if v is not None:
            print("RESULT %s_%s %.2f" % (name, key, v))
    n_restarts, n_nodes = want[name]
    if r["state"] != "SUCCEEDED" or r["restarts"] != n_restarts or \
            (n_nodes is not None and r["nodes"] != n_nodes):
        bad.append("%s ended %s with %d restarts on %d nodes (expected SUCCEEDED, %d restarts%s)"
                   % (name, r["state"], r["restarts"], r["nodes"], n_restarts,
                      "" if n_nodes is None else ", %d nodes" % n_nodes))
# the ratios: a negative figure is noise (the load moved more than the
# failure cost) and counts as 0; none where the other's is not above 0
for what, v in (("lost", lost), ("stall", stall)):
    for other in ("restart", "torch"):
        e, o = v.get("elastic-kill"), v.get(other + "-kill")
        if e is not None and o is not None and o > 0:
            print("RESULT %s_elastic_over_%s %.3f ratio" % (what, other, max(e, 0.0) / o))
for b in bad:
    print("run.sh: FAILED: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
