#!/usr/bin/env bash
# Runs every libFuzzer harness of a PX_FUZZ build for SECONDS each (default
# 30): corpus = a fresh directory + the seeds + the regressions. A crash,
# leak or timeout fails the run and names the input libFuzzer saved under
# BUILD_DIR/fuzz-artifacts/<name>/; copy it into tests/fuzz/regressions/<name>/
# (after fixing the bug) so that every build replays it from then on.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
if [ $# -lt 1 ]; then sed -n '2,8p' "$0"; exit 2; fi
build=$1
secs=${2:-30}
src=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
fuzzers=("$build"/tests/fuzz/px_fuzz_*)
if [ ${#fuzzers[@]} -eq 0 ]; then
  echo "fuzz: no harness under $build/tests/fuzz (configure with -DPX_FUZZ=ON and build px_fuzzers)" >&2
  exit 1
fi
failed=0
for exe in "${fuzzers[@]}"; do
  name=${exe##*/px_fuzz_}
  corpus=$(mktemp -d)
  art="$build/fuzz-artifacts/$name"
  mkdir -p "$art"
  log="$build/fuzz-artifacts/$name.log"
  if timeout $((secs + 60)) "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -artifact_prefix="$art/" -print_final_stats=1 \
      "$corpus" "$src/seeds/$name" "$src/regressions/$name" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz $name: ok, $runs inputs in ${secs} s ($cov)"
  else
    echo "fuzz $name: FAILED; the input is in $art/ (copy it to tests/fuzz/regressions/$name/ once fixed)"
    grep -E 'ERROR|SUMMARY|#0 |#1 |#2 |#3 |#4 ' "$log" | head -30 || tail -30 "$log"
    failed=1
  fi
  rm -rf "$corpus"
done
exit $failed
