#!/bin/bash
# install_layout: `cmake --install` into a temporary prefix gives programs
# that run from there (RPATH $ORIGIN/../lib, no LD_LIBRARY_PATH), the
# systemd units (for that prefix: `systemd-analyze verify` accepts them as
# installed) and the docs they point at, the dashboard found beside the
# binary, the sysusers.d entry, the example settings files (which
# the programs accept), --version in every program, a man page for every
# program that `man -l` renders without warnings, bash completion of every
# pxctl command and of the job ids of a running coordinator (each once),
# and the Slurm script.
set -u
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
p=$tmp/prefix
fail=0
check() { if "$@"; then :; else echo "FAILED: $*"; fail=1; fi; }
cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
unset LD_LIBRARY_PATH
libdir=$(dirname "$(find "$p" -name 'libpxcore.so.0' | head -n 1)")
[ -n "$libdir" ] && echo "libpxcore installed in ${libdir#$p/}"
for prog in pxctl pxcoordd pxagent pxworker pxtrain; do
  check test -x "$p/bin/$prog"
  runpath=$(readelf -d "$p/bin/$prog" 2>/dev/null | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p')
  echo "$prog: RUNPATH $runpath"
  check test "$runpath" = "\$ORIGIN/../${libdir#$p/}"
done
for prog in pxctl pxcoordd pxagent pxworker pxtrain; do
  v=$("$p/bin/$prog" --version 2>&1); rc=$?
  echo "$prog --version: $v (exit $rc)"
  check test $rc -eq 0; check test "${v#"$prog" [0-9]}" != "$v"
done
check "$p/bin/pxcoordd" --help >"$tmp/h1" 2>&1; check grep -q 'usage: pxcoordd' "$tmp/h1"
check "$p/bin/pxagent" --help >"$tmp/h2" 2>&1; check grep -q 'usage: pxagent' "$tmp/h2"
check "$p/bin/pxagent" --version >/dev/null
# units: written for this prefix at install time (ExecStart, the
# Documentation=file: page and the Documentation=man: page by its path,
# both installed), and `systemd-analyze verify` accepts them as installed
# with no MANPATH (it checks that ExecStart exists and runs man on the page)
for u in pxcoordd.service pxagent.service; do
  f=$p/lib/systemd/system/$u
  check test -f "$f"
  exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$f")
  doc=$(sed -n 's#^Documentation=file:##p' "$f")
  man=$(sed -n 's#^Documentation=man:##p' "$f")
  echo "$u: ExecStart $exe, Documentation=file:$doc, Documentation=man:$man"
  check test "$exe" = "$p/bin/${u%.service}"
  check test "$doc" = "$p/share/doc/prunex/operations.md"
  check test -s "$doc"
  check test "$man" = "$p/share/man/man8/${u%.service}.8"
  check test -s "$man"
  out=$(cd "$p/lib/systemd/system" && env -u MANPATH systemd-analyze verify "./$u" 2>&1)
  rc=$?
  echo "systemd-analyze verify (installed) $u: exit $rc${out:+, said:}"
  [ -n "$out" ] && echo "$out"
  check test $rc -eq 0; check test -z "$out"
done
check test -s "$p/share/doc/prunex/user-guide.md"
# a package build (DESTDIR staging): the units name the final prefix
DESTDIR=$tmp/stage cmake --install "$build" --prefix /opt/prunex >"$tmp/stage.log" 2>&1 ||
  { cat "$tmp/stage.log"; fail=1; }
got=$(grep -h '^ExecStart=' "$tmp"/stage/opt/prunex/lib/systemd/system/*.service | sort | tr '\n' ' ')
echo "DESTDIR install to /opt/prunex: $got"
check test "$got" = "ExecStart=/opt/prunex/bin/pxagent --config /etc/prunex/pxagent.conf ExecStart=/opt/prunex/bin/pxcoordd --config /etc/prunex/pxcoordd.conf "
check test ! -e /opt/prunex/lib/systemd/system/pxcoordd.service
rm -rf "$tmp/stage"
check grep -q '^u prunex ' "$p/lib/sysusers.d/prunex.conf"
check test -f "$p/share/prunex/config/pxcoordd.conf"
check test -f "$p/share/prunex/config/pxagent.conf"
check test -x "$p/share/prunex/slurm/prunex.sbatch"
# the example settings parse: pxagent stops at a bad coordinator only after
# reading the file (exit 2 names the file for a bad key, not for this one)
cp "$p/share/prunex/config/pxcoordd.conf" "$tmp/c.conf"
sed -i "s#^db = .*#db = $tmp/c.db#; s#^listen = .*#listen = 127.0.0.1:0#" "$tmp/c.conf"
"$p/bin/pxcoordd" --config "$tmp/c.conf" --http 127.0.0.1:0 >"$tmp/c.out" 2>&1 &
cpid=$!
for _ in $(seq 1 100); do grep -q '^listening on' "$tmp/c.out" && break; sleep 0.1; done
check grep -q '^listening on 127.0.0.1:' "$tmp/c.out"
# the dashboard it serves is the one installed beside it
for _ in $(seq 1 50); do grep -q 'dashboard from' "$tmp/c.out" && break; sleep 0.1; done
grep 'dashboard from' "$tmp/c.out"
check grep -q "dashboard from $p/bin/\.\./share/prunex/www)" "$tmp/c.out"
# two jobs waiting there: completion offers each id once
coord=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$tmp/c.out" | head -n 1)
printf 'model:\n  name: resnet20\ndataset:\n  name: synthetic\n' >"$tmp/spec.yaml"
for _ in 1 2; do
  check "$p/bin/pxctl" --coordinator "$coord" submit "$tmp/spec.yaml" >/dev/null
done
ids=$(PATH=$p/bin:$PATH bash -c 'source "$1"; COMP_WORDS=(pxctl --coordinator "$2" status ""); COMP_CWORD=4; _pxctl; echo "${COMPREPLY[*]}"' _ "$p/share/bash-completion/completions/pxctl" "$coord")
echo "completion of job ids: $ids"
check test "$(printf '%s\n' $ids | sort | tr '\n' ' ')" = "job-000001 job-000002 "
kill -TERM $cpid; wait $cpid; check test $? -eq 0
echo "bogus_key = 1" >"$tmp/a.conf"
"$p/bin/pxagent" --config "$tmp/a.conf" >"$tmp/a.out" 2>&1; rc=$?
check test $rc -eq 2; check grep -q "a.conf:1: unknown setting 'bogus_key'" "$tmp/a.out"
# man pages
for m in man1/pxctl.1 man1/pxtrain.1 man8/pxcoordd.8 man8/pxagent.8 man8/pxworker.8 \
         man5/prunex-jobspec.5; do
  f=$p/share/man/$m
  check test -f "$f"
  out=$(MANWIDTH=80 man -l "$f" 2>"$tmp/man.err"); rc=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  echo "man -l $m: exit $rc, $lines lines"
  check test $rc -eq 0; check test "$lines" -gt 20
  check test ! -s "$tmp/man.err"
  check test -z "$(groff -man -ww -z "$f" 2>&1)"
done
# bash completion
comp=$p/share/bash-completion/completions/pxctl
check test -f "$comp"
got=$(bash -c 'source "$1"; COMP_WORDS=(pxctl lo); COMP_CWORD=1; _pxctl; echo "${COMPREPLY[*]}"' _ "$comp")
echo "completion of 'pxctl lo': $got"; check test "$got" = "logs"
got=$(bash -c 'source "$1"; COMP_WORDS=(pxctl logs JOB --fo); COMP_CWORD=3; _pxctl; echo "${COMPREPLY[*]}"' _ "$comp")
echo "completion of 'pxctl logs JOB --fo': $got"; check test "$got" = "--follow"
for c in delete:de export:ex plot:pl; do
  got=$(bash -c 'source "$1"; COMP_WORDS=(pxctl "$2"); COMP_CWORD=1; _pxctl; echo "${COMPREPLY[*]}"' _ "$comp" "${c#*:}")
  echo "completion of 'pxctl ${c#*:}': $got"; check test "$got" = "${c%%:*}"
done
got=$(bash -c 'source "$1"; COMP_WORDS=(pxctl export m.safetensors --o); COMP_CWORD=3; _pxctl; echo "${COMPREPLY[*]}"' _ "$comp")
echo "completion of 'pxctl export m.safetensors --o': $got"; check test "$got" = "--out --onnx"
got=$(bash -c 'source "$1"; COMP_WORDS=(pxctl delete --j); COMP_CWORD=2; _pxctl; echo "${COMPREPLY[*]}"' _ "$comp")
echo "completion of 'pxctl delete --j': $got"; check test "$got" = "--json"
[ $fail -eq 0 ] && echo "installed layout OK"
exit $fail
