#!/usr/bin/env bash
# Accuracy over seeds: hsadmm (the quickstart's recipe, and at channel keep
# 0.3) beside dense DDP with the same data budget, each over SEEDS, on the
# quickstart's recipe (examples/quickstart.yaml, examples/ddp.yaml) and,
# with LONG=1, on longer ones (ResNet-20 for 10 epochs; ResNet-18). Each run
# is `pxctl run` of the example with train.seed set (and the keep or epochs
# changed); its JSON summary is kept in OUT/CONFIG-sSEED.json and reused
# when there, so seeds can be added run by run.
#
#   bench/accuracy/run.sh [BUILD_DIR]
#   SEEDS="1 2 3" CONFIGS="quick-ddp quick-hsadmm" OUT=~/acc bench/accuracy/run.sh
#
# Configurations: PREFIX-ddp (examples/ddp.yaml), PREFIX-hsadmm (the
# quickstart as it is), PREFIX-hsadmm-K (its prune.channel_keep set to K),
# PREFIX-hsadmm-macK (prune.mac_keep K in place of its channel keep),
# PREFIX-ddp-innerA.B.C (examples/ddp.yaml on a ResNet-20 whose blocks have
# A, B, C inner channels per stage, fresh He-normal weights drawn with the
# seed: examples/export_onnx.py --inner A,B,C --he; the architecture a
# pruned run compacts to, trained from scratch; its capacity_gap_pt is
# against quick-ddp-inner16.32.64, the dense one made the same way);
# PREFIX quick (2 epochs), long (10 epochs) or r18 (ResNet-18).
# WEIGHT_DECAY=X sets train.weight_decay to X in every run in place of the
# examples' 1e-3 (its RESULT names end in -wdX; at 10 epochs 1e-3 trained
# both better than 5e-4, the examples' until then).
#
# Prints a RUN line per run and, per configuration, RESULT lines: the mean
# and standard deviation (sample, n-1) of the final test accuracy in percent,
# the compact model's multiply-accumulates per image, the inter-node bytes
# and the wall time, and for the pruned ones accuracy_gap_pt (their mean
# minus the dense mean of the same recipe, in points).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
. "$root/bench/bench_lib.sh"
pxctl=$build/cli/pxctl
[ -x "$pxctl" ] || { echo "run.sh: $pxctl not built (make build)" >&2; exit 1; }
SEEDS=${SEEDS:-1 2 3 4 5}
if [ "${LONG:-0}" = 1 ]; then
  CONFIGS=${CONFIGS:-quick-ddp quick-hsadmm quick-hsadmm-0.3 long-ddp long-hsadmm r18-ddp r18-hsadmm}
else
  CONFIGS=${CONFIGS:-quick-ddp quick-hsadmm quick-hsadmm-0.3}
fi
bench_scratch
OUT=${OUT:-$dir/runs}
mkdir -p "$dir/work"
mkdir -p "$OUT"

# spec CONFIG SEED: the job spec of a configuration on stdout.
spec() {
  local base sedx=""
  case $1 in
    *-ddp-inner*) # the architecture a pruned run compacts to, trained from scratch
      base=$root/examples/ddp.yaml
      local w=${1##*-inner} onnx="$dir/work/$1-s$2.onnx"
      "$PY" "$root/examples/export_onnx.py" "$onnx" --seed "$2" --inner "${w//./,}" --he >/dev/null
      sedx="s|^  name: resnet20|  onnx: $onnx|" ;;
    *-ddp) base=$root/examples/ddp.yaml ;;
    *-hsadmm) base=$root/examples/quickstart.yaml ;;
    *-hsadmm-mac*) base=$root/examples/quickstart.yaml
                   sedx="s/^  channel_keep: .*/  mac_keep: ${1##*-mac}/" ;;
    *-hsadmm-*) base=$root/examples/quickstart.yaml
                sedx="s/^  channel_keep: .*/  channel_keep: ${1##*-}/" ;;
    *) echo "run.sh: unknown configuration $1" >&2; exit 2 ;;
  esac
  case $1 in
    long-*) sedx="$sedx;s/^  epochs: [0-9]*.*/  epochs: 10/" ;;
    r18-*) sedx="$sedx;s/^  name: resnet20/  name: resnet18/" ;;
  esac
  # WEIGHT_DECAY (e.g. 5e-4): train.weight_decay for every run, dense and
  # pruned alike, in place of the examples' (1e-3 when unset)
  if [ -n "${WEIGHT_DECAY:-}" ]; then
    sedx="$sedx;/^  weight_decay:/d;s/^train:/train:\n  weight_decay: ${WEIGHT_DECAY}/"
  fi
  # VARIANT (e.g. "final_prox: release"): one more admm field for the hsadmm
  # runs, to compare recipes; its words become part of the run's name
  if [ -n "${VARIANT:-}" ] && [ "$base" != "$root/examples/ddp.yaml" ]; then
    sedx="$sedx;s/^admm:/admm:\n  ${VARIANT}/"
  fi
  sed -e "s/^name: .*/name: acc-$1-s$2/" -e "s/^train:/train:\n  seed: $2/" \
      ${sedx:+-e "$sedx"} "$base"
}

# tag CONFIG: "-wd<WEIGHT_DECAY>" when it is set, then "-<the variant's
# letters>" for an hsadmm configuration with a VARIANT.
tag() {
  [ -n "${WEIGHT_DECAY:-}" ] && printf -- '-wd%s' "$WEIGHT_DECAY"
  case $1 in *-hsadmm | *-hsadmm-*) [ -n "${VARIANT:-}" ] && printf -- '-%s' "$(echo "$VARIANT" | tr -cd 'a-z0-9_.')" ;; esac
  return 0
}

# json FILE KEY: a number or string of the summary (null as "null").
json() { "$PY" -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("null" if v is None else v)' "$1" "$2"; }

for c in $CONFIGS; do
  for s in $SEEDS; do
    j=$OUT/$c$(tag "$c")-s$s.json
    if [ ! -s "$j" ]; then
      spec "$c" "$s" > "$dir/$c-s$s.yaml"
      "$pxctl" run "$dir/$c-s$s.yaml" --json --work-dir "$dir/work" --output "$dir/out-$c-s$s" \
        2> "$dir/$c-s$s.log" | tail -n 1 > "$j.tmp" || true
      if [ "$(json "$j.tmp" state 2>/dev/null)" != SUCCEEDED ]; then
        echo "run.sh: $c seed $s did not succeed; its log:" >&2
        tail -n 20 "$dir/$c-s$s.log" >&2
        rm -f "$j.tmp"
        exit 1
      fi
      mv "$j.tmp" "$j"
      rm -rf "$dir/out-$c-s$s"
    fi
    echo "RUN $c seed $s accuracy $(json "$j" test_accuracy) iterations $(json "$j" iterations)" \
         "inter_bytes $(json "$j" inter_bytes) wall_s $(json "$j" wall_s)" \
         "compact_macs $(json "$j" compact_macs) dense_macs $(json "$j" dense_macs)" \
         "reason: $(json "$j" reason)"
  done
done

# The figures per configuration, and the gaps to the dense recipe's mean.
"$PY" - "$OUT" $(for c in $CONFIGS; do echo "$c$(tag "$c")"; done) <<'PYEOF'
import json, os, statistics, sys
out, configs = sys.argv[1], sys.argv[2:]
means = {}
for c in configs:
    runs = [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out))
            if f.startswith(c + "-s") and f.endswith(".json")]
    acc = [100.0 * r["test_accuracy"] for r in runs]
    sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
    means[c] = statistics.mean(acc)
    print("RESULT accuracy_%s %.2f pct (mean of %d seeds)" % (c, means[c], len(acc)))
    print("RESULT accuracy_std_%s %.2f pct" % (c, sd))
    print("RESULT macs_%s %.2f M per image (dense %.2f M)" % (
        c, runs[0].get("compact_macs", 0) / 1e6, runs[0].get("dense_macs", 0) / 1e6))
    print("RESULT inter_bytes_%s %.0f B" % (c, statistics.mean(r["inter_bytes"] for r in runs)))
    print("RESULT wall_s_%s %.1f s" % (c, statistics.mean(r["wall_s"] for r in runs)))
for c in configs:
    wd = "-wd" + os.environ["WEIGHT_DECAY"] if os.environ.get("WEIGHT_DECAY") else ""
    dense = c.split("-hsadmm", 1)[0] + "-ddp" + wd
    if "-hsadmm" in c and dense in means:
        print("RESULT accuracy_gap_pt_%s %+.2f pt (vs %s)" % (c, means[c] - means[dense], dense))
    dense = c.split("-inner", 1)[0] + "-inner16.32.64" + wd
    if "-ddp-inner" in c and c != dense and dense in means:
        print("RESULT capacity_gap_pt_%s %+.2f pt (vs %s)" % (c, means[c] - means[dense], dense))
PYEOF
