#!/usr/bin/env bash
# GPU training throughput and peak memory of the PruneX CUDA engine beside
# PyTorch on the same GPU, as users run it: resnet18 and resnet50 (the
# CIFAR-size models of libpxcore's model.c: 3x3 stem, no max-pool, 32x32
# inputs), batch 128, SGD with momentum, random inputs copied from host
# memory every step. Configurations:
#   ours fp32     the engine's default: NHWC activations, TF32 tensor cores,
#                 convolutions on cuDNN's graph API (heuristics' engines,
#                 chosen by timing)
#   ours bf16     the same with bf16 activations (--precision bf16); its
#                 memory plan recomputes the BN outputs in the backward
#                 (PX_MEM_PLAN=recompute, the default in bf16 on CUDA)
#   ours bf16 shared
#                 bf16 with the shared plan and no recomputation
#                 (PX_MEM_PLAN=shared), for what recomputing saves and costs
#                 (it replaces the row of the earlier separate plan,
#                 PX_MEM_PLAN=separate, whose peak the third GPU run measured
#                 at 1.4x-1.6x the shared plan's: the bench's run time stays)
#   ours fp32 legacy / ours bf16 legacy
#                 the same with the convolutions on cuDNN's legacy API
#                 (PX_CUDNN_API=legacy: its algorithm enum, chosen by timing),
#                 the default before 2026-11-27
#   ours nchw     fp32 in the former NCHW layout (PX_CUDA_LAYOUT=nchw), for
#                 what channels-last gains
#   torch eager   fp32 NCHW, cuDNN heuristics (PyTorch's defaults)
#   torch best    fp32 with channels_last and cudnn.benchmark (the best fp32
#                 configuration users tune to)
#   torch bf16    bf16 autocast with channels_last and cudnn.benchmark
# TF32 allowed on both sides. Runs alternate (ours, torch, ...) and the best
# of ROUNDS runs of each counts (the least peak memory). Prints a table and
# ends with RESULT lines: <model>_gpu_vs_torch (ours fp32 / eager),
# <model>_gpu_vs_torch_best (ours fp32 / torch best), <model>_gpu_bf16_vs_torch_bf16,
# and the peak-memory ratios <model>_gpu_mem_vs_torch_best and
# <model>_gpu_bf16_mem_vs_torch_bf16 (ours / torch, lower is better),
# <model>_gpu_bf16_mem_recompute_vs_shared and
# <model>_gpu_bf16_recompute_vs_shared (peak and images/s, recomputing or not),
# <model>_gpu_fp32_graph_vs_legacy and <model>_gpu_bf16_graph_vs_legacy
# (ours on the graph API / on the legacy API); images/s
# ratios are ours / torch, higher is better. Exits 1 with a message when
# there is no usable GPU.
#   bench/gpu/run.sh [BUILD_DIR]   (env: MODELS, ROUNDS, STEPS, WARMUP, BATCH, TF32, PY)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
drv=$build/bench/gpu/px_bench_gpu_train
# the interpreter that has a CUDA build of PyTorch (on our GPU machines: python3)
PY=${PY:-python3}
MODELS=${MODELS:-"resnet18 resnet50"}
ROUNDS=${ROUNDS:-2}
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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "nan"; else printf "%.3f", a/b }'; }

ours() { "$drv" --model "$1" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" --tf32 "$TF32" "${@:2}"; }
torch() {
  PYTHONUNBUFFERED=1 "$PY" "$here/torch_gpu_bench.py" --model "$1" --batch "$BATCH" \
    --steps "$STEPS" --warmup "$WARMUP" --tf32 "$TF32" "${@:2}"
}

confs=(ours_fp32 ours_bf16 ours_bf16_shared ours_fp32_legacy ours_bf16_legacy ours_nchw torch_eager
       torch_best torch_bf16)
run_conf() {
  case "$2" in
    ours_fp32) ours "$1" ;;
    ours_bf16) ours "$1" --precision bf16 ;;
    ours_bf16_shared) PX_MEM_PLAN=shared ours "$1" --precision bf16 ;;
    ours_fp32_legacy) PX_CUDNN_API=legacy ours "$1" ;;
    ours_bf16_legacy) PX_CUDNN_API=legacy ours "$1" --precision bf16 ;;
    ours_nchw) PX_CUDA_LAYOUT=nchw ours "$1" ;;
    torch_eager) torch "$1" ;;
    torch_best) torch "$1" --cudnn-benchmark 1 --channels-last 1 ;;
    torch_bf16) torch "$1" --cudnn-benchmark 1 --channels-last 1 --bf16 1 ;;
  esac
}

printf '%-9s %-14s %12s %10s\n' model config img/s peak_MB
results=() peaks=()
for m in $MODELS; do
  declare -A ips=() mem=()
  for c in "${confs[@]}"; do ips[$c]=""; mem[$c]=""; done
  for r in $(seq "$ROUNDS"); do
    for c in "${confs[@]}"; do
      if out=$(run_conf "$m" "$c" 2>&1); then
        v=$(echo "$out" | field images_per_sec); p=$(echo "$out" | field gpu_peak_mb)
        ips[$c]="${ips[$c]} $v"; mem[$c]="${mem[$c]} $p"
        [ "$r" = 1 ] && [[ $c == ours_* ]] &&
          peaks+=("$m $c: $(echo "$out" | grep -E '^(working memory|gpu peak by name)' | tr '\n' ' ' || true)")
      else
        echo "run.sh: $m $c failed:" >&2; echo "$out" | tail -n 5 >&2
      fi
    done
  done
  declare -A bi=() bm=()
  for c in "${confs[@]}"; do
    # shellcheck disable=SC2086
    if [ -n "${ips[$c]// /}" ]; then bi[$c]=$(best ${ips[$c]}); bm[$c]=$(least ${mem[$c]}); else bi[$c]=""; bm[$c]=""; fi
    printf '%-9s %-14s %12s %10s\n' "$m" "$c" "${bi[$c]:-failed}" "${bm[$c]:-}"
  done
  results+=("RESULT ${m}_gpu_vs_torch $(ratio "${bi[ours_fp32]}" "${bi[torch_eager]}") ratio")
  results+=("RESULT ${m}_gpu_vs_torch_best $(ratio "${bi[ours_fp32]}" "${bi[torch_best]}") ratio")
  results+=("RESULT ${m}_gpu_bf16_vs_torch_bf16 $(ratio "${bi[ours_bf16]}" "${bi[torch_bf16]}") ratio")
  results+=("RESULT ${m}_gpu_mem_vs_torch_best $(ratio "${bm[ours_fp32]}" "${bm[torch_best]}") ratio")
  results+=("RESULT ${m}_gpu_bf16_mem_vs_torch_bf16 $(ratio "${bm[ours_bf16]}" "${bm[torch_bf16]}") ratio")
  results+=("RESULT ${m}_gpu_bf16_mem_recompute_vs_shared $(ratio "${bm[ours_bf16]}" "${bm[ours_bf16_shared]}") ratio")
  results+=("RESULT ${m}_gpu_bf16_recompute_vs_shared $(ratio "${bi[ours_bf16]}" "${bi[ours_bf16_shared]}") ratio")
  results+=("RESULT ${m}_gpu_fp32_graph_vs_legacy $(ratio "${bi[ours_fp32]}" "${bi[ours_fp32_legacy]}") ratio")
  results+=("RESULT ${m}_gpu_bf16_graph_vs_legacy $(ratio "${bi[ours_bf16]}" "${bi[ours_bf16_legacy]}") ratio")
  unset ips mem bi bm
done
# what our peaks were made of, and the memory plan's arena (first round)
printf '%s\n' "${peaks[@]}"
printf '%s\n' "${results[@]}"
