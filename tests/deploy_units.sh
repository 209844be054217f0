#!/bin/bash
# deploy_units: `systemd-analyze verify` accepts deploy/systemd's units.
# The units are the build's (build/deploy/*.service, ExecStart at the
# install prefix); verify checks that ExecStart exists and that
# Documentation=man: pages resolve, so a copy has ExecStart pointed at the
# build's binaries and MANPATH at deploy/man. Any warning (an unknown
# directive, a value it ignores) fails the test, and a control copy with a
# missing binary must be refused, which shows the check can fail.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found (Debian package systemd)"; exit 1; }
mkdir -p "$tmp/man/man1" "$tmp/man/man5" "$tmp/man/man8" "$tmp/units" "$tmp/bad"
cp "$src"/deploy/man/*.1 "$tmp/man/man1/"; cp "$src"/deploy/man/*.5 "$tmp/man/man5/"
cp "$src"/deploy/man/*.8 "$tmp/man/man8/"
export MANPATH=$tmp/man
sed "s#^ExecStart=[^ ]*/pxcoordd#ExecStart=$build/coordinatord/pxcoordd#" \
  "$build/deploy/pxcoordd.service" >"$tmp/units/pxcoordd.service"
sed "s#^ExecStart=[^ ]*/pxagent#ExecStart=$build/agent/pxagent#" \
  "$build/deploy/pxagent.service" >"$tmp/units/pxagent.service"
fail=0
for u in "$tmp"/units/*.service; do
  grep -q '^Type=notify$' "$u" || { echo "$(basename "$u"): not Type=notify"; fail=1; }
  grep -q '^WatchdogSec=' "$u" || { echo "$(basename "$u"): no WatchdogSec="; fail=1; }
  out=$(cd "$tmp/units" && systemd-analyze verify "./$(basename "$u")" 2>&1)
  rc=$?
  echo "systemd-analyze verify $(basename "$u"): exit $rc${out:+, said:}"
  [ -n "$out" ] && echo "$out"
  if [ $rc -ne 0 ] || [ -n "$out" ]; then fail=1; fi
done
# control: a unit whose binary is missing must be refused
sed "s#^ExecStart=[^ ]*#ExecStart=$tmp/no-such-pxcoordd#" "$tmp/units/pxcoordd.service" \
  >"$tmp/bad/pxcoordd.service"
if (cd "$tmp/bad" && systemd-analyze verify ./pxcoordd.service >/dev/null 2>&1); then
  echo "control: systemd-analyze accepted a unit with a missing ExecStart binary"
  fail=1
fi
[ $fail -eq 0 ] && echo "both units verified"
exit $fail
