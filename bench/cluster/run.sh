#!/bin/sh
# bench/cluster/run.sh BUILD_DIR: the emulated 2-node cluster.
#
# Each node is a network namespace (ip netns) whose processes also run in
# their own IPC and UTS namespaces (unshare --ipc --uts, with a host name of
# their own): without them UCX sees one host and moves the inter-node traffic
# through shared memory, and the link carries nothing. The nodes' veth pairs
# meet at a bridge in the root namespace; every link is shaped with
# `tc qdisc ... tbf` in both directions (this kernel has no netem). pxcoordd
# runs on node 0 (TLS and tokens: it serves no non-loopback address without
# them), a real pxagent on every node offers 2 CPU devices, and the jobs go
# through `pxctl submit` and `pxctl watch`. PyTorch DDP (gloo, 2 ranks per
# node, the recipe of examples/ddp.yaml, bench/cluster/torch_ddp.py) runs on
# the same links.
#
# Per run it prints the wall time (submit to end), the time to TARGET test
# accuracy (from submit; the test set is evaluated about 12 times per run:
# see SPEC OVERRIDES), the final accuracy and the bytes that crossed the links
# as the wire saw them: the tbf qdiscs' "Sent" counters on the nodes' side of
# every veth (every byte that left a node, control plane included), not our
# own counters. Then `RESULT tta_vs_torch_<rate>` (time to TARGET of each run
# over PyTorch DDP's, lower is better) and plots of accuracy against time and
# against link bytes (gnuplot) in OUT.
#
# Needs root. Not a test (not in CI, not a ctest): minutes per run.
#
# Environment:
#   RATES   link rates, tc syntax (default "25mbit 100mbit 1gbit")
#   RUNS    of hsadmm hsadmm-f32 hsadmm-q8 hsadmm-q4 hsadmm-ovl hsadmm-ll hsadmm-flat
#           ddp topk torch-ddp (hsadmm: the quickstart as it is, its exchange
#           in 8 bits; the others set comm.quantize, the quickstart's
#           replaced: -f32 none, -q8 8, -q4 4; hsadmm-ovl none with
#           comm.overlap: true; hsadmm-ll none with comm.compress: lossless)
#           (default "hsadmm hsadmm-flat ddp topk torch-ddp")
#   EPOCHS  train.epochs of every run (default 2, the examples' budget)
#   TARGET  accuracy for the time-to-accuracy figure (default 0.85)
#   OUT     where logs, tables and plots go (default a fresh /tmp/pxcluster-*)
#   KEEP=1  keep OUT's scratch (agents' work directories, the database)
#   COMPACT=1  the hsadmm runs with prune.compact_training: true (the local
#           phases after the freeze train the compact model)
#
# SPEC OVERRIDES (the recipes are examples/*.yaml; only the evaluation
# cadence and the epochs change): hsadmm and hsadmm-flat evaluate every 40
# local steps (10 outer iterations of the examples' 4 steps, which test
# every 40; a test changes nothing trained), ddp and topk report an iteration
# every 39 steps (an epoch is 234 steps) and evaluate each one; torch-ddp
# evaluates every 39 steps too.
set -eu

if [ "$(id -u)" != 0 ]; then
  echo "bench/cluster/run.sh: needs root (network namespaces, veth, tc); run it with sudo" >&2
  exit 1
fi
if [ $# -ne 1 ] || [ ! -x "$1/cli/pxctl" ]; then
  echo "usage: bench/cluster/run.sh BUILD_DIR   (BUILD_DIR/cli/pxctl must exist)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
rates="${RATES:-25mbit 100mbit 1gbit}"
runs="${RUNS:-hsadmm hsadmm-flat ddp topk torch-ddp}"
epochs="${EPOCHS:-2}"
target="${TARGET:-0.85}"
out="${OUT:-$(mktemp -d /tmp/pxcluster-XXXXXX)}"
mkdir -p "$out"
py=/usr/bin/python3
for t in ip unshare tc openssl gnuplot; do
  command -v $t >/dev/null || { echo "run.sh: $t is missing (scripts/bootstrap)" >&2; exit 1; }
done

tag=px$$
br=${tag}br
ns0=${tag}n0
ns1=${tag}n1
pids=""

cleanup() {
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  for n in $ns0 $ns1; do
    # whatever still runs in the namespace (workers of a cancelled job)
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$n" 2>/dev/null || true
  done
  ip link del "${tag}v0" 2>/dev/null || true
  ip link del "${tag}v1" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$out/scratch"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the cluster -------------------------------------------------------------
ip link add "$br" type bridge
ip link set "$br" up
for i in 0 1; do
  n=${tag}n$i
  ip netns add "$n"
  ip link add "${tag}v$i" type veth peer name eth0 netns "$n"
  ip link set "${tag}v$i" master "$br" up
  ip -n "$n" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" link set lo up
done
coord_ip=10.77.0.1

# shape RATE: tbf on both ends of both veths (into and out of every node);
# a burst of 10 ms of traffic but at least 128 KiB (veth hands tbf 64 KiB
# GSO packets)
shape() {
  rate=$1
  bits=$(echo "$rate" | awk '{v=$1; m=1; if (v ~ /gbit$/) m=1e9; else if (v ~ /mbit$/) m=1e6;
                                else if (v ~ /kbit$/) m=1e3; sub(/[a-z]+$/, "", v); print v*m}')
  burst=$(awk -v b="$bits" 'BEGIN {x = b / 8 / 100; if (x < 131072) x = 131072; printf "%d", x}')
  for i in 0 1; do
    tc qdisc replace dev "${tag}v$i" root tbf rate "$rate" burst "$burst" latency 200ms
    ip netns exec "${tag}n$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" \
      latency 200ms
  done
}

# bytes that left the nodes so far (tbf "Sent" on the nodes' side)
wire_bytes() {
  s=0
  for i in 0 1; do
    b=$(ip netns exec "${tag}n$i" tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}')
    s=$((s + b))
  done
  echo $s
}

# on NODE: run a command in the node's namespaces, with its host name
on() {
  i=$1
  shift
  ip netns exec "${tag}n$i" unshare --ipc --uts sh -c "hostname node$i; exec \"\$@\"" sh "$@"
}

# ---- TLS and tokens (pxcoordd serves non-loopback addresses only with both) ----
scr="$out/scratch"
mkdir -p "$scr"
(cd "$scr" &&
  printf 'subjectAltName=IP:%s\n' "$coord_ip" > ext.cnf &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj /CN=px-cluster-ca 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
    -out server.csr -subj /CN=node0 2>/dev/null &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile ext.cnf 2>/dev/null) || { echo "run.sh: openssl failed" >&2; exit 1; }
secret=$(openssl rand -hex 16)
umask 077
printf '%s-admin bench admin\n%s-node0 node0 node\n%s-node1 node1 node\n' \
  "$secret" "$secret" "$secret" > "$scr/tokens"
umask 022
export PRUNEX_CA="$scr/ca.pem"

port=7070
on 0 "$build/coordinatord/pxcoordd" --listen "$coord_ip:$port" --db "$scr/coord.db" \
  --tls-cert "$scr/server.pem" --tls-key "$scr/server.key" --tokens "$scr/tokens" \
  --log-level warn > "$scr/coordd.out" 2> "$scr/coordd.log" &
pids="$pids $!"
export PRUNEX_COORDINATOR="$coord_ip:$port"
for i in 0 1; do
  # UCX: TCP only through the node's veth (shared memory within the node)
  on $i env PRUNEX_TOKEN="$secret-node$i" UCX_NET_DEVICES=eth0 \
    "$build/agent/pxagent" --name "node$i" --cpu-workers 2 --threads-per-worker 1 \
    --work-dir "$scr/agent$i" --log-level warn > "$scr/agent$i.log" 2>&1 &
  pids="$pids $!"
done
export PRUNEX_TOKEN="$secret-admin"
ctl() { ip netns exec "$ns0" "$build/cli/pxctl" "$@"; }
i=0
until [ "$(ctl --json nodes 2>/dev/null | grep -o '"READY"' | wc -l)" -ge 2 ]; do
  i=$((i + 1))
  if [ $i -gt 100 ]; then
    echo "run.sh: the agents did not register; logs:" >&2
    tail -n 5 "$scr/coordd.log" "$scr/agent0.log" "$scr/agent1.log" >&2
    exit 1
  fi
  sleep 0.3
done

# ---- one run -------------------------------------------------------------------
now_ms() { date +%s%3N; }

# spec RUN: the example with the bench's overrides, on stdout
spec() {
  case $1 in
    hsadmm) ex=quickstart; extra="" ;;
    hsadmm-f32) ex=quickstart; extra="f32" ;;
    hsadmm-q8) ex=quickstart; extra="q8" ;;
    hsadmm-q4) ex=quickstart; extra="q4" ;;
    hsadmm-ovl) ex=quickstart; extra="overlap" ;;
    hsadmm-ll) ex=quickstart; extra="lossless" ;;
    hsadmm-flat) ex=hsadmm-flat; extra="" ;;
    ddp) ex=ddp; extra="" ;;
    topk) ex=topk; extra="" ;;
  esac
  "$py" - "$src/examples/$ex.yaml" "$1" "$epochs" "$extra" "${COMPACT:-0}" <<'EOF'
import sys, re
path, run, epochs, extra, compact = sys.argv[1:6]
text = open(path).read()
# the recipe's sections, with name, epochs and the evaluation cadence set
text = re.sub(r"(?m)^name: .*$", "name: bench-" + run, text)
text = re.sub(r"(?m)^(  epochs:) *\d+", r"\g<1> " + epochs, text)
hs = re.search(r"(?m)^strategy: hsadmm", text) is not None
text = re.sub(r"(?m)^  eval_every:.*\n", "", text)
ls = re.search(r"(?m)^  local_steps: *(\d+)", text)
every = max(1, 40 // int(ls.group(1))) if hs and ls and int(ls.group(1)) > 0 else (10 if hs else 1)
text = re.sub(r"(?m)^train:\n", "train:\n  eval_every: %d\n" % every, text)
if not hs:
    text = re.sub(r"(?m)^train:\n", "train:\n  local_steps: 39\n", text)
if hs and compact == "1":
    text = re.sub(r"(?m)^prune:\n", "prune:\n  compact_training: true\n", text)
if extra:  # the exchange, in place of the recipe's comm.quantize
    lines = {"f32": ["quantize: none"],
             "overlap": ["quantize: none", "overlap: true"],
             "lossless": ["quantize: none", "compress: lossless"]}.get(
                 extra, ["quantize: %s" % extra[1:]])
    text = re.sub(r"(?m)^  quantize:.*\n(?:^ {20,}#.*\n)*", "", text)
    body = "".join("  %s\n" % l for l in lines)
    if re.search(r"(?m)^comm:", text):
        text = re.sub(r"(?m)^comm:\n", "comm:\n" + body, text)
    else:
        text += "comm:\n" + body
print(text)
EOF
}

# run_px RUN RATE: submit, wait, collect; prints the table row
run_px() {
  r=$1
  rate=$2
  f="$out/$r-$rate"
  spec "$r" > "$f.yaml"
  w0=$(wire_bytes)
  t0=$(now_ms)
  job=$(ctl submit "$f.yaml" 2> "$f.submit.err") || {
    echo "run.sh: submit of $r failed: $(cat "$f.submit.err")" >&2
    return 1
  }
  ctl watch "$job" > "$f.watch" 2>&1 || true
  t1=$(now_ms)
  w1=$(wire_bytes)
  ctl --json status "$job" > "$f.status.json" 2>/dev/null || true
  ctl --json metrics "$job" > "$f.metrics.json" 2>/dev/null || true
  # per evaluation: seconds since submit, accuracy, link bytes at that time
  # (the link bytes are interpolated linearly in time: the counters are read
  # before and after)
  "$py" - "$f.metrics.json" "$t0" "$t1" "$w0" "$w1" > "$f.curve" <<'EOF'
import json, sys
path, t0, t1, w0, w1 = sys.argv[1], *map(float, sys.argv[2:6])
try:
    doc = json.load(open(path))
except Exception:
    sys.exit(0)
its = doc if isinstance(doc, list) else doc.get("iterations", doc.get("reports", []))
for it in its:
    acc, ms = it.get("test_accuracy"), float(it.get("time_unix_ms") or 0)
    if acc is None or acc < 0 or ms <= 0:
        continue
    s = (ms - t0) / 1e3
    frac = min(1.0, max(0.0, (ms - t0) / max(1.0, t1 - t0)))
    print("%.2f %.4f %d" % (s, acc, (w1 - w0) * frac))
EOF
  row "$r" "$rate" "$t0" "$t1" "$w0" "$w1" "$f.curve" "$(sed -n 's/.*"state": *"\([A-Z_]*\)".*/\1/p' "$f.status.json" | head -n 1)"
}

# run_torch RATE
run_torch() {
  rate=$1
  f="$out/torch-ddp-$rate"
  w0=$(wire_bytes)
  t0=$(now_ms)
  start=$(awk -v t="$t0" 'BEGIN {printf "%.3f", t / 1000}')
  tp=""
  for rk in 0 1 2 3; do
    node=$((rk / 2))
    on $node env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 "$py" "$src/bench/cluster/torch_ddp.py" \
      --rank $rk --world 4 --master "$coord_ip:29512" --start "$start" --epochs "$epochs" \
      > "$f.rank$rk.log" 2>&1 &
    tp="$tp $!"
  done
  pids="$pids $tp"
  st=SUCCEEDED
  for p in $tp; do wait "$p" || st=FAILED; done
  t1=$(now_ms)
  w1=$(wire_bytes)
  awk -v w0="$w0" -v w1="$w1" -v t0="$t0" -v t1="$t1" '/^EVAL / {
      frac = $2 * 1000 / (t1 - t0); if (frac > 1) frac = 1
      printf "%.2f %.4f %d\n", $2, $3, (w1 - w0) * frac }' "$f.rank0.log" > "$f.curve"
  row torch-ddp "$rate" "$t0" "$t1" "$w0" "$w1" "$f.curve" "$st"
}

# row RUN RATE T0 T1 W0 W1 CURVE STATE: one line of the table, and the
# figures kept for the ratios
row() {
  wall=$(awk -v a="$3" -v b="$4" 'BEGIN {printf "%.1f", (b - a) / 1000}')
  bytes=$(($6 - $5))
  tta=$(awk -v t="$target" '$2 >= t {print $1; exit}' "$7")
  final=$(tail -n 1 "$7" | awk '{print $2}')
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  printf '%-12s %-8s %9s s %10s s %8s %14s  %-10s %s\n' "$1" "$2" "$wall" "${tta:--}" \
    "${final:--}" "$bytes" "$8" "$load" | tee -a "$out/table"
  echo "$1 $2 ${tta:--}" >> "$out/tta"
}

echo "bench/cluster: 2 nodes x 2 CPU workers, $(nproc) cores, links $rates, runs $runs, epochs $epochs"
echo "output in $out"
printf '%-12s %-8s %11s %12s %8s %14s  %-10s %s\n' run link wall "to $target" final \
  "link bytes" state "load (1/5/15 min)" | tee "$out/table"
for rate in $rates; do
  shape "$rate"
  for r in $runs; do
    case $r in
      torch-ddp) run_torch "$rate" ;;
      hsadmm|hsadmm-f32|hsadmm-q8|hsadmm-q4|hsadmm-ovl|hsadmm-ll|hsadmm-flat|ddp|topk) run_px "$r" "$rate" || true ;;
      *) echo "run.sh: unknown run '$r'" >&2 ;;
    esac
  done
done

# ---- ratios and plots ----------------------------------------------------------
for rate in $rates; do
  tt=$(awk -v r="$rate" '$1 == "torch-ddp" && $2 == r {print $3}' "$out/tta")
  for r in $runs; do
    [ "$r" = torch-ddp ] && continue
    v=$(awk -v n="$r" -v ra="$rate" '$1 == n && $2 == ra {print $3}' "$out/tta")
    case "$v$tt" in *-*|"") continue ;; esac
    [ -n "$tt" ] || continue
    echo "RESULT tta_vs_torch_${rate}_$r $(awk -v a="$v" -v b="$tt" 'BEGIN {printf "%.3f", a / b}') ratio"
  done
  # the headline: hsadmm's time to target over PyTorch DDP's
  v=$(awk -v ra="$rate" '$1 == "hsadmm" && $2 == ra {print $3}' "$out/tta")
  case "$v$tt" in *-*|"") ;; *)
    [ -n "$tt" ] && [ -n "$v" ] &&
      echo "RESULT tta_vs_torch_$rate $(awk -v a="$v" -v b="$tt" 'BEGIN {printf "%.3f", a / b}') ratio" ;;
  esac
done
for rate in $rates; do
  plots=""
  plotb=""
  for r in $runs; do
    c="$out/$r-$rate.curve"
    [ -s "$c" ] || continue
    plots="$plots${plots:+, }'$c' using 1:(100*\$2) with linespoints title '$r'"
    plotb="$plotb${plotb:+, }'$c' using (\$3/1e6):(100*\$2) with linespoints title '$r'"
  done
  [ -n "$plots" ] || continue
  gnuplot <<EOF || true
set terminal pngcairo size 900,600 noenhanced
set grid
set key bottom right
set ylabel 'test accuracy (%)'
set output '$out/acc-vs-time-$rate.png'
set title 'accuracy vs time, 2 nodes x 2 CPU workers, links $rate'
set xlabel 'seconds since submit'
plot $plots
set output '$out/acc-vs-bytes-$rate.png'
set title 'accuracy vs link bytes, links $rate'
set xlabel 'MB that crossed the links (tc counters)'
plot $plotb
EOF
done
echo "plots: $(ls "$out"/*.png 2>/dev/null | tr '\n' ' ')"
