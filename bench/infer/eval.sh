#!/usr/bin/env bash
# The evaluation of an H-SADMM consensus model, dense (the training engine, as
# px_strategy_config_t.eval_dense asks) vs compact (the inference engine), on
# the quickstart's final model: px_bench_eval over the 10,000 Fashion-MNIST
# test images at THREADS threads (BN calibration on 20 batches of 64, then the
# test set; disagreements between the two predictions), then, as the peer,
# PyTorch CPU on the same dense and compact files (torch_infer.py: eval-mode
# images/s at batch 128, Debian's python3-torch).
#   bench/infer/eval.sh [BUILD_DIR] [MODEL_DIR]   (env: THREADS, REPEATS, PREC: auto, f32, bf16, raw)
# MODEL_DIR holds model.safetensors and model.compact.safetensors (pxctl
# run's output directory); without it the quickstart runs first
# (`pxctl run examples/quickstart.yaml`, some 5 to 20 minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
model_dir=${2:-}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-3}
PY=${PY:-/usr/bin/python3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
bin=$build/bench/infer/px_bench_eval
[ -x "$bin" ] || { echo "eval.sh: $bin not built" >&2; exit 1; }
if [ -z "$model_dir" ]; then
  out=$("$build/cli/pxctl" run "$here/../../examples/quickstart.yaml" --json)
  model_dir=$(dirname "$(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["model_path"])')")
  echo "quickstart: $(echo "$out" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); print("iterations", j["iterations"], "accuracy", j["test_accuracy"], "density", j["density"], "inter bytes", j["inter_bytes"])')"
fi
[ -f "$model_dir/model.safetensors" ] || { echo "eval.sh: no $model_dir/model.safetensors" >&2; exit 1; }
export OMP_NUM_THREADS=$THREADS
"$bin" "$model_dir/model.safetensors" "$DATA" "$THREADS" "$REPEATS" 0 "${PREC:-auto}"
if "$PY" -c "import torch" 2>/dev/null && [ -f "$model_dir/model.compact.safetensors" ]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  cp "$model_dir/model.safetensors" "$dir/resnet20.safetensors"
  cp "$model_dir/model.compact.safetensors" "$dir/resnet20.compact.safetensors"
  "$PY" "$here/torch_infer.py" resnet20 "$dir" 1 "${ITERS:-5}"
else
  echo "eval.sh: PyTorch or the compact file missing: no peer row" >&2
fi
