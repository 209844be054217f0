#!/usr/bin/env bash
# GPU training throughput of the PruneX CUDA engine beside PyTorch eager on
# the same GPU: resnet18 and resnet50 (the CIFAR-size models of libpxcore's
# model.c: 3x3 stem, no max-pool, 32x32 inputs), batch 128, fp32 with TF32
# allowed on both sides, random inputs copied from host memory every step,
# SGD with momentum. Runs alternate (ours, torch, ours, torch, ...) and the
# best of ROUNDS runs of each counts. Prints a row per model and ends with
# RESULT resnet18_gpu_vs_torch / resnet50_gpu_vs_torch (ours/torch images/s,
# higher is better). Exits 1 with a message when there is no usable GPU.
#   bench/gpu/run.sh [BUILD_DIR]   (env: MODELS, ROUNDS, STEPS, WARMUP, BATCH, TF32, PY)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
drv=$build/bench/gpu/px_bench_gpu_train
# the interpreter that has a CUDA build of PyTorch (on our GPU machines: python3)
PY=${PY:-python3}
MODELS=${MODELS:-"resnet18 resnet50"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
BATCH=${BATCH:-128}
TF32=${TF32:-1}

[ -x "$drv" ] || { echo "run.sh: $drv not built (make build with the CUDA toolkit installed)" >&2; exit 1; }
if ! gpu=$("$drv" --check 2>&1); then
  echo "run.sh: no usable GPU, nothing to measure: $gpu" >&2
  exit 1
fi
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "run.sh: $PY has no PyTorch with CUDA (set PY to an interpreter that has one)" >&2
  exit 1
fi
echo "GPU: $gpu; batch $BATCH, TF32 $TF32, $STEPS timed steps after $WARMUP, best of $ROUNDS"

field() { awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
best() { printf '%s\n' "$@" | sort -g | tail -n 1; }
least() { printf '%s\n' "$@" | sort -g | head -n 1; }

printf '%-10s %12s %12s %8s %12s %12s\n' model ours_img/s torch_img/s ratio ours_MB torch_MB
results=()
for m in $MODELS; do
  ours=(); theirs=(); ours_mem=(); theirs_mem=()
  for r in $(seq "$ROUNDS"); do
    o=$("$drv" --model "$m" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" --tf32 "$TF32")
    t=$(PYTHONUNBUFFERED=1 "$PY" "$here/torch_gpu_bench.py" --model "$m" --batch "$BATCH" \
          --steps "$STEPS" --warmup "$WARMUP" --tf32 "$TF32")
    ours+=("$(echo "$o" | field images_per_sec)"); theirs+=("$(echo "$t" | field images_per_sec)")
    ours_mem+=("$(echo "$o" | field gpu_peak_mb)"); theirs_mem+=("$(echo "$t" | field gpu_peak_mb)")
  done
  a=$(best "${ours[@]}"); b=$(best "${theirs[@]}")
  am=$(least "${ours_mem[@]}"); bm=$(least "${theirs_mem[@]}")
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}')
  printf '%-10s %12s %12s %8s %12s %12s\n' "$m" "$a" "$b" "$ratio" "$am" "$bm"
  results+=("RESULT ${m}_gpu_vs_torch $ratio ratio")
done
printf '%s\n' "${results[@]}"
