#!/usr/bin/env bash
# The streamed image-folder pipeline at SIZE x SIZE (default 224), ours
# (px_bench_data) and torchvision's (torch_data.py: ImageFolder + DataLoader,
# python3-torchvision and python3-pil), with the training transforms
# (RandomResizedCrop + flip) and the evaluation ones (Resize + CenterCrop),
# both normalised to float NCHW, on the same folder of N realistic JPEGs
# (make_jpegs.py: 500 x 375, quality 90; made once and kept in CACHE) and
# the same CORES cores (taskset): ours with CORES decoding threads, torch with
# CORES worker processes. Ends with RESULT lines per transform: our and
# torch's images/s per core and the ratio ours/torch (higher is better), the
# best of ROUNDS alternating runs (the machine may be shared).
#   bench/data/run.sh [BUILD_DIR]    (env: N, SIZE, CORES, EPOCHS, ROUNDS, CACHE)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bench/data/px_bench_data
. "$here/../bench_lib.sh"
bench_need "$bin" "torch, torchvision, PIL" "python3-torchvision, python3-pil"
N=${N:-400}; SIZE=${SIZE:-224}; CORES=${CORES:-1}; EPOCHS=${EPOCHS:-2}; ROUNDS=${ROUNDS:-3}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/prunex-bench}
folder=$CACHE/data-$N-500x375
if [ ! -f "$folder/.done" ]; then
  rm -rf "$folder"
  "$PY" "$here/make_jpegs.py" "$folder" "$N"
  touch "$folder/.done"
fi
echo "folder $folder: $N JPEGs, $(du -sh "$folder/train" | cut -f1)"
cpus=0-$((CORES - 1))
export OMP_NUM_THREADS=1
for mode in train eval; do
  o=(); t=()
  for r in $(seq "$ROUNDS"); do
    ours=$(taskset -c "$cpus" "$bin" "$folder" "$mode" "$CORES" "$EPOCHS" "$SIZE")
    echo "$ours" | grep -v '^RESULT'
    theirs=$(taskset -c "$cpus" "$PY" "$here/torch_data.py" "$folder" "$mode" "$CORES" "$EPOCHS" "$SIZE")
    echo "$theirs" | grep -v '^RESULT'
    o+=("$(echo "$ours" | field images_per_sec)")
    t+=("$(echo "$theirs" | field torch_images_per_sec)")
  done
  ob=$(best "${o[@]}"); tb=$(best "${t[@]}")
  awk -v m="$mode" -v a="$ob" -v b="$tb" -v c="$CORES" 'BEGIN {
    printf "RESULT data_%s_images_per_sec_per_core %.1f img/s\n", m, a / c
    printf "RESULT torch_%s_images_per_sec_per_core %.1f img/s\n", m, b / c
    printf "RESULT data_%s_vs_torch %.2f ratio\n", m, a / b }'
done
