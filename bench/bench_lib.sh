# Sourced by the benchmark scripts (bench/*/run.sh) after they set `here`
# (their own folder) and `build`: the Python they run the peers with, the
# check that the program under test is built and the peer's modules are
# installed, a scratch folder removed on exit, and the readers of the
# RESULT lines the programs print.

# Debian's interpreter: python3-torch and python3-opencv are installed for it,
# not for other pythons on PATH.
PY=${PY:-/usr/bin/python3}

# bench_need BIN PY_IMPORTS WHAT: exits 1 with a line on stderr unless BIN is
# an executable and `import PY_IMPORTS` works (WHAT names the missing peer).
bench_need() {
  [ -x "$1" ] || { echo "run.sh: $1 not built (make build)" >&2; exit 1; }
  "$PY" -c "import $2" 2>/dev/null || { echo "run.sh: $3 missing: scripts/bootstrap --bench" >&2; exit 1; }
}

# bench_scratch: sets `dir` to a new temporary folder, removed when the script exits.
bench_scratch() {
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
}

# field KEY: the value of "RESULT KEY value" on stdin.
field() { awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
# best / least V...: the largest / smallest of the values (general numeric order).
best() { printf '%s\n' "$@" | sort -g | tail -n 1; }
least() { printf '%s\n' "$@" | sort -g | head -n 1; }
