#!/usr/bin/env bash
# How far the fp32 training engine can go against PyTorch:
# per model, our step time (pxtrain --bench), the time oneDNN's primitives
# take in it by kind (ONEDNN_VERBOSE=1 exec times of the timed steps), the
# convolutions' GFLOP/s against this CPU's FMA peak (px_bench_fma_peak),
# and PyTorch's step (torch_bench.py, the peer of run.sh), run in this order
# ROUNDS times, best of each. The ceiling is PyTorch's step over our
# convolutions' time: the ratio the engine would reach if nothing but its
# convolutions took time.
#   bench/train/conv_share.sh [BUILD_DIR]   (env: MODELS, THREADS, BATCH, STEPS, ROUNDS)
# Prints a row per model and RESULT <model>_conv_ceiling_vs_torch and
# <model>_conv_peak_share. Not a test: about a minute per round and model.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
MODELS=${MODELS:-"resnet20 resnet18"}
THREADS=${THREADS:-2}
BATCH=${BATCH:-128}
STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=3
PY=${PY:-/usr/bin/python3}
pxtrain=$build/cli/pxtrain
peak_bin=$build/bench/train/px_bench_fma_peak
for b in "$pxtrain" "$peak_bin"; do
  [ -x "$b" ] || { echo "conv_share.sh: $b not built" >&2; exit 1; }
done
export OMP_NUM_THREADS=$THREADS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { awk -v k="$1" '$1 == "RESULT" && $2 == k {print $3}'; }

"$peak_bin" --threads "$THREADS" | tee "$tmp/peak"
peak=$(field fma_peak_gflops < "$tmp/peak")
printf '%-9s %9s %9s %9s %9s %9s %8s %8s %8s\n' model ours_ms conv_ms other_ms conv_GF/s \
  torch_ms ratio ceiling peak%
results=()
for m in $MODELS; do
  best_ours=; best_conv=; best_torch=; best_gf=
  for _ in $(seq "$ROUNDS"); do
    o=$("$pxtrain" --bench --model "$m" --batch "$BATCH" --threads "$THREADS" --steps "$STEPS" \
         --warmup "$WARMUP" | field images_per_sec)
    ONEDNN_VERBOSE=1 "$pxtrain" --bench --model "$m" --batch "$BATCH" --threads "$THREADS" \
      --steps "$STEPS" --warmup "$WARMUP" > "$tmp/v" 2>&1
    # The timed steps are the last STEPS of WARMUP + STEPS equal steps: their
    # share of the exec lines. Convolution FLOPs from the problem descriptor.
    read -r conv gf < <(awk -F, -v keep="$STEPS" -v all="$((WARMUP + STEPS))" '
      /^onednn_verbose,exec,cpu,/ { line[++n] = $0 }
      function num(s, key,   m) { return match(s, key "[0-9]+") ? substr(s, RSTART + length(key), RLENGTH - length(key)) + 0 : 0 }
      END {
        first = n - int(n * keep / all) + 1
        for (i = first; i <= n; i++) {
          k = split(line[i], f, ",")
          if (f[4] != "convolution") continue
          d = f[k - 1]; ms = f[k]
          ow = num(d, "ow"); if (!ow) ow = num(d, "oh")
          kw = num(d, "kw"); if (!kw) kw = num(d, "kh")
          fl += 2 * num(d, "mb") * num(d, "ic") * num(d, "oc") * num(d, "oh") * ow * num(d, "kh") * kw
          t += ms
        }
        printf "%.3f %.1f\n", t / keep, fl / (t / 1000) / 1e9
      }' "$tmp/v")
    t=$("$PY" "$here/torch_bench.py" --model "$m" --batch "$BATCH" --threads "$THREADS" \
         --steps "$STEPS" --precision fp32 | field images_per_sec)
    ours_ms=$(awk -v i="$o" -v b="$BATCH" 'BEGIN{printf "%.3f", b / i * 1000}')
    torch_ms=$(awk -v i="$t" -v b="$BATCH" 'BEGIN{printf "%.3f", b / i * 1000}')
    best_ours=$(awk -v a="$best_ours" -v b="$ours_ms" 'BEGIN{print (a == "" || b < a) ? b : a}')
    best_torch=$(awk -v a="$best_torch" -v b="$torch_ms" 'BEGIN{print (a == "" || b < a) ? b : a}')
    if [ -z "$best_conv" ] || awk -v a="$conv" -v b="$best_conv" 'BEGIN{exit !(a < b)}'; then
      best_conv=$conv; best_gf=$gf
    fi
  done
  read -r other ratio ceiling share < <(awk -v o="$best_ours" -v c="$best_conv" -v t="$best_torch" \
    -v g="$best_gf" -v p="$peak" 'BEGIN{printf "%.1f %.3f %.3f %.1f\n", o - c, t / o, t / c, 100 * g / p}')
  printf '%-9s %9.1f %9.1f %9s %9.1f %9.1f %8s %8s %8s\n' "$m" "$best_ours" "$best_conv" "$other" \
    "$best_gf" "$best_torch" "$ratio" "$ceiling" "$share"
  results+=("RESULT ${m}_conv_ceiling_vs_torch $ceiling ratio" "RESULT ${m}_conv_peak_share $share %")
done
printf '%s\n' "${results[@]}"
