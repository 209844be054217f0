#!/usr/bin/env bash
# Training throughput of the PruneX CPU engine beside PyTorch (Debian's
# python3-torch, same oneDNN 2.6), same models, batch 128, 2 threads, random
# 3x32x32 inputs, 10 classes. Runs alternate (ours, torch, ours, torch, ...)
# and the best of ROUNDS runs of each counts. Prints a row per model and ends
# with RESULT resnet20_vs_torch / resnet18_vs_torch (ours/torch images/s,
# higher is better) and the peak-memory ratios (lower is better).
# TORCH_PRECISION=bf16 runs the PyTorch peer under CPU autocast to bfloat16;
# PRECISION=bf16 runs ours with bf16 convolutions (pxtrain --precision bf16,
# f32 master weights; it needs AVX512-BF16 or AMX). Both default to fp32.
#   bench/train/run.sh [BUILD_DIR]  (env: MODELS, ROUNDS, STEPS, THREADS, BATCH, PRECISION,
#                                    TORCH_PRECISION)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
pxtrain=$build/cli/pxtrain
. "$here/../bench_lib.sh"
bench_need "$pxtrain" torch PyTorch
MODELS=${MODELS:-"resnet20 resnet18"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
THREADS=${THREADS:-2}
BATCH=${BATCH:-128}
TORCH_PRECISION=${TORCH_PRECISION:-fp32}
PRECISION=${PRECISION:-fp32}
for v in "TORCH_PRECISION=$TORCH_PRECISION" "PRECISION=$PRECISION"; do
  case ${v#*=} in fp32|bf16) ;; *) echo "run.sh: ${v%%=*} must be fp32 or bf16, not '${v#*=}'" >&2; exit 2 ;; esac
done
export OMP_NUM_THREADS=$THREADS


echo "precision: ours $PRECISION, PyTorch $TORCH_PRECISION"
printf '%-10s %12s %12s %8s %12s %12s %8s\n' model ours_img/s torch_img/s ratio ours_MB torch_MB mem
results=()
for m in $MODELS; do
  ours=(); theirs=(); ours_mem=(); theirs_mem=()
  for r in $(seq "$ROUNDS"); do
    o=$("$pxtrain" --bench --model "$m" --batch "$BATCH" --threads "$THREADS" --steps "$STEPS" \
         --precision "$PRECISION")
    t=$("$PY" "$here/torch_bench.py" --model "$m" --batch "$BATCH" --threads "$THREADS" --steps "$STEPS" \
         --precision "$TORCH_PRECISION")
    ours+=("$(echo "$o" | field images_per_sec)"); theirs+=("$(echo "$t" | field images_per_sec)")
    ours_mem+=("$(echo "$o" | field peak_rss_mb)"); theirs_mem+=("$(echo "$t" | field peak_rss_mb)")
  done
  a=$(best "${ours[@]}"); b=$(best "${theirs[@]}")
  am=$(least "${ours_mem[@]}"); bm=$(least "${theirs_mem[@]}")
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", a/b}')
  mratio=$(awk -v a="$am" -v b="$bm" 'BEGIN{printf "%.3f", a/b}')
  printf '%-10s %12s %12s %8s %12s %12s %8s\n' "$m" "$a" "$b" "$ratio" "$am" "$bm" "$mratio"
  sfx=; [ "$PRECISION" = fp32 ] || sfx=_ours_$PRECISION
  [ "$TORCH_PRECISION" = fp32 ] || sfx=${sfx}_$TORCH_PRECISION
  results+=("RESULT ${m}_vs_torch$sfx $ratio ratio" "RESULT ${m}_mem_vs_torch$sfx $mratio ratio")
done
printf '%s\n' "${results[@]}"
