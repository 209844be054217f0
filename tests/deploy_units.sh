#!/bin/bash
# deploy_units: `systemd-analyze verify` accepts deploy/systemd's units.
# The units are the build's (build/deploy/*.service, ExecStart and the
# man page at the install prefix); verify checks that ExecStart exists and
# that the Documentation=man: page opens, so a copy has ExecStart pointed at
# the build's binaries and the page at deploy/man's (by its path, as the
# installed units name theirs; MANPATH unset). Any warning (an unknown
# directive, a value it ignores) fails the test, and a control copy with a
# missing binary must be refused, which shows the check can fail.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found (Debian package systemd)"; exit 1; }
mkdir -p "$tmp/units" "$tmp/bad"
unset MANPATH
fail=0
for u in pxcoordd pxagent; do
  dir=coordinatord; [ $u = pxagent ] && dir=agent
  grep -q "^Documentation=man:/.*/man8/$u\.8\$" "$build/deploy/$u.service" ||
    { echo "$u.service: Documentation=man: does not name the page by its path"; fail=1; }
  sed "s#^ExecStart=[^ ]*/$u#ExecStart=$build/$dir/$u#; s#^Documentation=man:/.*/man8/#Documentation=man:$src/deploy/man/#" \
    "$build/deploy/$u.service" >"$tmp/units/$u.service"
done
for u in "$tmp"/units/*.service; do
  grep -q '^Type=notify$' "$u" || { echo "$(basename "$u"): not Type=notify"; fail=1; }
  grep -q '^WatchdogSec=' "$u" || { echo "$(basename "$u"): no WatchdogSec="; fail=1; }
  out=$(cd "$tmp/units" && systemd-analyze verify "./$(basename "$u")" 2>&1)
  rc=$?
  echo "systemd-analyze verify $(basename "$u"): exit $rc${out:+, said:}"
  [ -n "$out" ] && echo "$out"
  if [ $rc -ne 0 ] || [ -n "$out" ]; then fail=1; fi
done
# controls: a unit whose binary or man page is missing must be refused
sed "s#^ExecStart=[^ ]*#ExecStart=$tmp/no-such-pxcoordd#" "$tmp/units/pxcoordd.service" \
  >"$tmp/bad/pxcoordd.service"
sed "s#^Documentation=man:.*#Documentation=man:$tmp/no-such-page.8#" "$tmp/units/pxagent.service" \
  >"$tmp/bad/pxagent.service"
for u in pxcoordd pxagent; do
  if (cd "$tmp/bad" && systemd-analyze verify ./$u.service >/dev/null 2>&1); then
    echo "control: systemd-analyze accepted $u.service with a missing binary or man page"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "both units verified"
exit $fail
