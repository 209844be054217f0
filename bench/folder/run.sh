#!/usr/bin/env bash
# The image-folder pipeline, ours (px_bench_folder) and OpenCV's
# (opencv_folder.py, Debian's python3-opencv), each on one core, on the same
# folder: Fashion-MNIST's first N training images written as colour JPEGs of
# SRC x SRC pixels (quality 90). The first pass decodes them to SIZE x SIZE
# (default 64); the feed serves FEED x FEED (default 32) images from the cache
# with the random-resized crop, flip and normalisation. Ends with RESULT lines:
# decode_images_per_sec_per_core, feed_images_per_sec_per_core (ours) and the
# ratios ours/OpenCV (higher is better), the best of ROUNDS alternating runs.
#   bench/folder/run.sh [BUILD_DIR]    (env: N, SRC, SIZE, FEED, EPOCHS, ROUNDS)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bench/folder/px_bench_folder
. "$here/../bench_lib.sh"
bench_need "$bin" "cv2, numpy" python3-opencv
N=${N:-4000}; SRC=${SRC:-96}; SIZE=${SIZE:-64}; FEED=${FEED:-32}; EPOCHS=${EPOCHS:-3}
ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=1
bench_scratch
"$PY" "$here/../../examples/make_fmnist_folder.py" "$dir/raw" --train "$N" --val 10 >/dev/null
# colour JPEGs of SRC x SRC: the grey images tinted and enlarged
"$PY" - "$dir/raw" "$dir/jpg" "$SRC" <<'PYEOF'
import os, sys, cv2, numpy as np
src, dst, s = sys.argv[1], sys.argv[2], int(sys.argv[3])
for split in ("train", "val"):
    for cls in os.listdir(os.path.join(src, split)):
        os.makedirs(os.path.join(dst, split, cls))
        for f in os.listdir(os.path.join(src, split, cls)):
            g = cv2.resize(cv2.imread(os.path.join(src, split, cls, f), 0), (s, s))
            bgr = np.stack([g, (g * 0.8).astype(np.uint8), 255 - g], -1)
            cv2.imwrite(os.path.join(dst, split, cls, f[:-4] + ".jpg"), bgr,
                        [cv2.IMWRITE_JPEG_QUALITY, 90])
PYEOF
# ROUNDS alternating runs of each (a fresh cache each time); the best of
# each figure is kept, since the machine may be shared
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b > a) ? b : a }'; }
get() { echo "$1" | awk -v k="$2" '$1 == "RESULT" && $2 == k { print $3 }'; }
od=; of=; td=; tf=
for r in $(seq "$ROUNDS"); do
  ours=$(taskset -c 0 "$bin" "$dir/jpg" "$dir/cache$r" "$SIZE" "$FEED" 3 "$EPOCHS")
  echo "$ours" | grep -v '^RESULT'
  theirs=$(taskset -c 0 "$PY" "$here/opencv_folder.py" "$dir/jpg" "$SIZE" "$FEED" 3 "$EPOCHS")
  echo "$theirs" | grep -v '^RESULT'
  od=$(best "$od" "$(get "$ours" decode_images_per_sec_per_core)")
  of=$(best "$of" "$(get "$ours" feed_images_per_sec_per_core)")
  td=$(best "$td" "$(get "$theirs" opencv_decode_images_per_sec_per_core)")
  tf=$(best "$tf" "$(get "$theirs" opencv_feed_images_per_sec_per_core)")
done
echo "RESULT decode_images_per_sec_per_core $od img/s"
echo "RESULT feed_images_per_sec_per_core $of img/s"
echo "RESULT opencv_decode_images_per_sec_per_core $td img/s"
echo "RESULT opencv_feed_images_per_sec_per_core $tf img/s"
awk -v a="$od" -v b="$td" 'BEGIN { printf "RESULT decode_vs_opencv %.2f ratio\n", a / b }'
awk -v a="$of" -v b="$tf" 'BEGIN { printf "RESULT feed_vs_opencv %.2f ratio\n", a / b }'
