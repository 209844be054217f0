#!/usr/bin/env bash
# torchvision's zoo, its training throughput: per network, CPU training
# throughput of `pxtrain --bench --model-onnx` (the network exported by
# tests/onnx_zoo.py at opset 13, random weights, 10 classes, at its own
# input size: 64 a side, vgg11_bn 224) beside PyTorch training
# torchvision's own module on the same machine (tests/onnx_zoo.py bench:
# same batch, threads, SGD, random inputs), then bench/traffic's H-SADMM
# inter-node bytes at channel keep 0.5 against dense for each.
# Runs alternate (PruneX, PyTorch) and the best of ROUNDS runs counts.
# A network the import refuses is reported as such and skipped.
#   bench/zoo/run.sh [BUILD_DIR]   (env: NETS, ROUNDS, STEPS, WARMUP, THREADS, BATCH, TRAFFIC=0)
# Ends with, per network, RESULT zoo_NET_pxtrain / zoo_NET_torch (img/s),
# RESULT zoo_NET_vs_torch (PruneX/PyTorch, higher is better; the aim is
# >= 1) and bench/traffic's RESULT NET_inter_reduction.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
pxtrain=$build/cli/pxtrain
traffic=$build/bench/traffic/px_bench_traffic
zoo=$here/../../tests/onnx_zoo.py
. "$here/../bench_lib.sh"
bench_need "$pxtrain" torchvision "python3-torchvision"
ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2}
BATCH=${BATCH:-32}
NETS=${NETS:-$("$PY" "$zoo" list | awk '$2 <= 64 {print $1}')}
export OMP_NUM_THREADS=$THREADS
bench_scratch

printf '%-20s %5s %12s %12s %7s\n' network size "PruneX img/s" "torch img/s" ratio
results=(); files=()
for net in $NETS; do
  size=$("$PY" "$zoo" list | awk -v n="$net" '$1 == n {print $2}')
  f=$build/zoo/$net-op13/model.onnx # the zoo test's export, when there is one
  [ -f "$f" ] || { f=$dir/$net.onnx; "$PY" "$zoo" export "$net" 13 "$f" >/dev/null 2>&1; }
  if ! err=$("$pxtrain" --model-onnx "$f" --help 2>&1 >/dev/null); then # the import's check alone
    printf '%-20s %5s refused: %s\n' "$net" "$size" "$(echo "$err" | tail -n 1 | cut -c1-160)"
    continue
  fi
  files+=("$f")
  px=(); th=()
  for r in $(seq "$ROUNDS"); do
    o=$("$pxtrain" --bench --model-onnx "$f" --batch "$BATCH" --threads "$THREADS" \
        --steps "$STEPS" --warmup "$WARMUP")
    px+=("$(echo "$o" | field images_per_sec)")
    o=$("$PY" "$zoo" bench "$net" "$BATCH" "$THREADS" "$STEPS" "$WARMUP")
    th+=("$(echo "$o" | field images_per_sec)")
  done
  a=$(best "${px[@]}"); t=$(best "${th[@]}")
  ratio=$(awk -v a="$a" -v t="$t" 'BEGIN{printf "%.3f", a/t}')
  printf '%-20s %5s %12s %12s %7s   (runs: %s | %s)\n' "$net" "$size" "$a" "$t" "$ratio" \
    "${px[*]}" "${th[*]}"
  results+=("RESULT zoo_${net}_pxtrain $a img/s" "RESULT zoo_${net}_torch $t img/s"
            "RESULT zoo_${net}_vs_torch $ratio ratio")
done
if [ "${TRAFFIC:-1}" != 0 ] && [ -x "$traffic" ] && [ ${#files[@]} -gt 0 ]; then
  # the file names say the network: copies named NET.onnx
  mkdir -p "$dir/traffic"
  named=()
  for f in "${files[@]}"; do
    n=$(basename "$(dirname "$f")"); n=${n%-op13}
    [ "$n" = "$(basename "$dir")" ] && n=$(basename "$f" .onnx)
    ln -sf "$f" "$dir/traffic/$n.onnx"; named+=("$dir/traffic/$n.onnx")
  done
  o=$("$traffic" --keep 0.5 "${named[@]}") || echo "bench/traffic: a network failed" >&2
  echo "$o" | grep -v '^RESULT' || true
  while read -r l; do results+=("$l"); done < <(echo "$o" | grep '^RESULT' || true)
fi
printf '%s\n' "${results[@]}"
