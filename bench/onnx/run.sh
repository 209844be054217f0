#!/usr/bin/env bash
# Training throughput of an imported model against the same network built in:
# examples/export_onnx.py writes a ResNet-20 from PyTorch (3x32x32 inputs, the
# built-in resnet20's exact structure) and pxtrain --bench trains it
# (--model-onnx) and the built-in resnet20 (--model) on the CPU engine, same
# batch, threads and random inputs, and PyTorch (bench/train/torch_bench.py)
# the same network as the peer. Runs alternate (built-in, imported, torch, ...)
# and the best of ROUNDS runs of each counts. Ends with
# RESULT onnx_resnet20_vs_builtin (imported/built-in images/s, higher is
# better; the aim is >= 0.95) and RESULT onnx_resnet20_vs_torch.
#   bench/onnx/run.sh [BUILD_DIR]     (env: ROUNDS, STEPS, THREADS, BATCH)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
pxtrain=$build/cli/pxtrain
. "$here/../bench_lib.sh"
bench_need "$pxtrain" torch PyTorch
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
THREADS=${THREADS:-2}
BATCH=${BATCH:-128}
export OMP_NUM_THREADS=$THREADS
bench_scratch
"$PY" "$here/../../examples/export_onnx.py" "$dir/resnet20.onnx" --channels 3 >/dev/null

builtin=(); imported=(); torch=()
for r in $(seq "$ROUNDS"); do
  o=$("$pxtrain" --bench --model resnet20 --batch "$BATCH" --threads "$THREADS" --steps "$STEPS")
  builtin+=("$(echo "$o" | field images_per_sec)")
  o=$("$pxtrain" --bench --model-onnx "$dir/resnet20.onnx" --batch "$BATCH" --threads "$THREADS" --steps "$STEPS")
  imported+=("$(echo "$o" | field images_per_sec)")
  o=$("$PY" "$here/../train/torch_bench.py" --model resnet20 --batch "$BATCH" --threads "$THREADS" --steps "$STEPS")
  torch+=("$(echo "$o" | field images_per_sec)")
done
a=$(best "${builtin[@]}"); b=$(best "${imported[@]}"); t=$(best "${torch[@]}")
printf '%-28s %10s img/s   (runs: %s)\n' "built-in resnet20" "$a" "${builtin[*]}"
printf '%-28s %10s img/s   (runs: %s)\n' "imported resnet20 (ONNX)" "$b" "${imported[*]}"
printf '%-28s %10s img/s   (runs: %s)\n' "PyTorch resnet20" "$t" "${torch[*]}"
echo "RESULT onnx_resnet20_vs_builtin $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b/a}') ratio"
echo "RESULT onnx_resnet20_vs_torch $(awk -v t="$t" -v b="$b" 'BEGIN{printf "%.3f", b/t}') ratio"
