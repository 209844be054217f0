#!/usr/bin/env bash
# Runs every libFuzzer harness of a PX_FUZZ build for SECONDS each (default
# 30): corpus = a fresh directory + the seeds + the regressions. A crash,
# leak or timeout fails the run and names the input libFuzzer saved under
# BUILD_DIR/fuzz-artifacts/<name>/; copy it into tests/fuzz/regressions/<name>/
# (after fixing the bug) so that every build replays it from then on.
# JOBS harnesses run at a time (default 1; make test runs 2 on 2 cores:
# each harness is one process, so each still gets SECONDS of a core).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS [JOBS]]
set -euo pipefail
if [ $# -lt 1 ]; then sed -n '2,10p' "$0"; exit 2; fi
build=$1
secs=${2:-30}
jobs=${3:-1}
src=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
fuzzers=("$build"/tests/fuzz/px_fuzz_*)
if [ ${#fuzzers[@]} -eq 0 ]; then
  echo "fuzz: no harness under $build/tests/fuzz (configure with -DPX_FUZZ=ON and build px_fuzzers)" >&2
  exit 1
fi
# One harness: its verdict on stdout, its exit status 0 or 1.
fuzz_one() {
  local exe=$1 name corpus art log runs cov
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
    rm -rf "$corpus"
    return 0
  fi
  echo "fuzz $name: FAILED; the input is in $art/ (copy it to tests/fuzz/regressions/$name/ once fixed)"
  grep -E 'ERROR|SUMMARY|#0 |#1 |#2 |#3 |#4 ' "$log" | head -30 || tail -30 "$log"
  rm -rf "$corpus"
  return 1
}

# JOBS at a time; each one's lines are printed together when it ends.
failed=0
running=0
outs=()
for exe in "${fuzzers[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  out=$(mktemp)
  outs+=("$out")
  (if fuzz_one "$exe" >"$out" 2>&1; then rc=0; else rc=1; fi; cat "$out"; exit $rc) &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
rm -f "${outs[@]}"
exit $failed
