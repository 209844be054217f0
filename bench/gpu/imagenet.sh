#!/usr/bin/env bash
# GPU training throughput and peak memory at ImageNet size: torchvision's
# ResNet-50 (NET) at 3x224x224 (SIZE), 1000 classes (CLASSES), imported from
# ONNX into the PruneX CUDA engine (px_bench_gpu_train --model-onnx) beside
# PyTorch training torchvision's own module (torch_gpu_bench.py
# --torchvision) on the same GPU, SGD with momentum, a few pre-made random
# batches copied from host memory every step on both sides, the loss read
# back every step on both sides. Configurations, per batch of BATCHES:
#   ours fp32     channels-last f32 activations, TF32 tensor cores
#   ours bf16     bf16 activations (f32 master weights)
#   torch best    fp32, channels_last + cudnn.benchmark, TF32
#   torch bf16    bf16 autocast, channels_last + cudnn.benchmark
#   torch bf16 compile MODE
#                 the same under torch.compile, for each MODE of COMPILE
#                 (default none: compiling ResNet-50 takes minutes; e.g.
#                 COMPILE="default max-autotune")
# The model FLOPs utilisation counts 3 x 2 x the forward's multiply-
# accumulates per image (px_model_macs of the import, ResNet-50 at 224:
# about 4.1 G, so 24.5 GFLOP) against the GPU's dense peak
# (PEAK_BF16_TFLOPS, default 989, an H100/H200 SXM's bf16 by the vendor's
# datasheet). The best of ROUNDS runs of each counts (the least peak memory).
# RESULT lines: <net><size>_b<batch>_<conf>_ips and _peak_mb, _mfu_pct, and
# the ratios <net><size>_b<batch>_bf16_vs_torch_bf16 (images/s, ours / torch,
# higher is better), _bf16_vs_torch_fastest (against the fastest torch bf16
# configuration run), _fp32_vs_torch_best, _bf16_mem_vs_torch_bf16 (peak,
# ours / torch, lower is better). Exits 1 without a usable GPU.
#   bench/gpu/imagenet.sh [BUILD_DIR]  (env: NET, SIZE, CLASSES, BATCHES, STEPS,
#       WARMUP, ROUNDS, COMPILE, ONNX (a file exported already; else exported
#       here with PY), PEAK_BF16_TFLOPS, RUN_TIMEOUT (s per run, 300), PY)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
drv=$build/bench/gpu/px_bench_gpu_train
PY=${PY:-python3}
NET=${NET:-resnet50}
SIZE=${SIZE:-224}
CLASSES=${CLASSES:-1000}
BATCHES=${BATCHES:-"128 256"}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-1}
COMPILE=${COMPILE:-}
PEAK=${PEAK_BF16_TFLOPS:-989}

[ -x "$drv" ] || { echo "imagenet.sh: $drv not built (make build with the CUDA toolkit installed)" >&2; exit 1; }
if ! gpu=$("$drv" --check 2>&1); then
  echo "imagenet.sh: no usable GPU, nothing to measure: $gpu" >&2
  exit 1
fi
"$PY" -c "import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
  { echo "imagenet.sh: $PY has no PyTorch with CUDA and torchvision (set PY)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/px_imagenet.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
onnx=${ONNX:-}
if [ -z "$onnx" ]; then
  onnx=$tmp/$NET-$SIZE.onnx
  "$PY" "$here/../../tests/onnx_zoo.py" export "$NET" 13 "$onnx" "$SIZE" "$CLASSES" ||
    { echo "imagenet.sh: exporting $NET at $SIZE failed" >&2; exit 1; }
fi
echo "GPU: $gpu; $NET at ${SIZE}x$SIZE, $CLASSES classes, batches $BATCHES, $STEPS timed steps" \
     "after $WARMUP, best of $ROUNDS"

field() { awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "nan"; else printf "%.3f", a/b }'; }

confs=(ours_fp32 ours_bf16 torch_best torch_bf16)
for m in $COMPILE; do confs+=("torch_bf16_compile_$m"); done
T=(timeout "${RUN_TIMEOUT:-300}") # a hung run is named and the bench goes on
run_conf() { # batch conf -> the run's output
  local b=$1 c=$2 t=(--torchvision "$NET" --image-size "$SIZE" --classes "$CLASSES" --batch "$b"
                     --steps "$STEPS" --warmup "$WARMUP" --tf32 1 --cudnn-benchmark 1
                     --channels-last 1)
  case "$c" in
    ours_fp32) "${T[@]}" "$drv" --model-onnx "$onnx" --batch "$b" --steps "$STEPS" --warmup "$WARMUP" --tf32 1 ;;
    ours_bf16) "${T[@]}" "$drv" --model-onnx "$onnx" --batch "$b" --steps "$STEPS" --warmup "$WARMUP" --tf32 1 \
                 --precision bf16 ;;
    torch_best) PYTHONUNBUFFERED=1 "${T[@]}" "$PY" "$here/torch_gpu_bench.py" "${t[@]}" ;;
    torch_bf16) PYTHONUNBUFFERED=1 "${T[@]}" "$PY" "$here/torch_gpu_bench.py" "${t[@]}" --bf16 1 ;;
    torch_bf16_compile_*) PYTHONUNBUFFERED=1 "${T[@]}" "$PY" "$here/torch_gpu_bench.py" "${t[@]}" --bf16 1 \
                            --compile "${c#torch_bf16_compile_}" ;;
  esac
}

macs=""
for b in $BATCHES; do
  declare -A ips=() peak=()
  for r in $(seq "$ROUNDS"); do
    for c in "${confs[@]}"; do
      if ! out=$(run_conf "$b" "$c" 2>&1); then
        echo "imagenet.sh: $c at batch $b failed:" >&2
        echo "$out" | tail -n 15 >&2
        continue
      fi
      echo "$out" | grep -v '^RESULT' | sed "s/^/  [$c b$b r$r] /"
      local_ips=$(echo "$out" | field images_per_sec)
      local_peak=$(echo "$out" | field gpu_peak_mb)
      [ -z "$macs" ] && macs=$(echo "$out" | field macs_per_image)
      if [ -z "${ips[$c]:-}" ] || awk -v a="$local_ips" -v b="${ips[$c]}" 'BEGIN{exit !(a > b)}'; then
        ips[$c]=$local_ips
      fi
      if [ -z "${peak[$c]:-}" ] || awk -v a="$local_peak" -v b="${peak[$c]}" 'BEGIN{exit !(a < b)}'; then
        peak[$c]=$local_peak
      fi
    done
  done
  key=$NET${SIZE}_b$b
  printf '%-28s %12s %12s %8s\n' "batch $b" "images/s" "peak MB" "MFU %"
  fastest=""
  for c in "${confs[@]}"; do
    [ -n "${ips[$c]:-}" ] || { printf '%-28s %12s\n' "$c" "failed"; continue; }
    mfu=nan
    [ -n "$macs" ] && mfu=$(awk -v i="${ips[$c]}" -v m="$macs" -v p="$PEAK" \
                             'BEGIN{printf "%.1f", 100 * i * 6 * m / (p * 1e12)}')
    printf '%-28s %12s %12s %8s\n' "$c" "${ips[$c]}" "${peak[$c]}" "$mfu"
    echo "RESULT ${key}_${c}_ips ${ips[$c]}"
    echo "RESULT ${key}_${c}_peak_mb ${peak[$c]}"
    echo "RESULT ${key}_${c}_mfu_pct $mfu"
    case "$c" in
      torch_bf16*) if [ -z "$fastest" ] || awk -v a="${ips[$c]}" -v b="${ips[$fastest]}" 'BEGIN{exit !(a > b)}'
                   then fastest=$c; fi ;;
    esac
  done
  echo "RESULT ${key}_bf16_vs_torch_bf16 $(ratio "${ips[ours_bf16]:-}" "${ips[torch_bf16]:-}")"
  echo "RESULT ${key}_bf16_vs_torch_fastest $(ratio "${ips[ours_bf16]:-}" "${ips[${fastest:-none}]:-}")" \
       "(${fastest:-none})"
  echo "RESULT ${key}_fp32_vs_torch_best $(ratio "${ips[ours_fp32]:-}" "${ips[torch_best]:-}")"
  echo "RESULT ${key}_bf16_mem_vs_torch_bf16 $(ratio "${peak[ours_bf16]:-}" "${peak[torch_bf16]:-}")"
  echo "RESULT ${key}_fp32_mem_vs_torch_best $(ratio "${peak[ours_fp32]:-}" "${peak[torch_best]:-}")"
  unset ips peak
done
[ -n "$macs" ] && echo "RESULT ${NET}${SIZE}_macs_per_image $macs"
exit 0
