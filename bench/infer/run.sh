#!/usr/bin/env bash
# Inference of the dense (masked) and the compact model, on our CPU engine
# (px_bench_infer) and on PyTorch CPU (torch_infer.py, Debian's python3-torch),
# for the quickstart's resnet20 (Fashion-MNIST: 1 channel) and resnet18 and
# resnet50 (3 channels), each projected at channel keep KEEP with coupled
# filters as H-SADMM does. 32x32 inputs. Prints a row per model and engine
# and ends with RESULT compact_speedup_<model> (ours: compact/dense images/s
# at batch 128, higher is better), compact_speedup_<model>_torch and
# compact_latency_ratio_<model> (batch 1, lower is better).
#   bench/infer/run.sh [BUILD_DIR]    (env: MODELS, KEEP, ITERS, THREADS)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bench/infer/px_bench_infer
. "$here/../bench_lib.sh"
bench_need "$bin" torch PyTorch
MODELS=${MODELS:-"resnet20:1 resnet18:3 resnet50:3"}
KEEP=${KEEP:-0.5}
ITERS=${ITERS:-5}
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS
bench_scratch
results=()
for mc in $MODELS; do
  m=${mc%%:*}; c=${mc##*:}
  ours=$("$bin" "$m" "$c" "$KEEP" "$dir" "$ITERS")
  echo "$ours" | grep -v '^RESULT'
  results+=("$(echo "$ours" | grep '^RESULT')")
  theirs=$("$PY" "$here/torch_infer.py" "$m" "$dir" "$c" "$ITERS")
  echo "$theirs" | grep -v '^RESULT'
  results+=("$(echo "$theirs" | grep '^RESULT')")
done
printf '%s\n' "${results[@]}"
