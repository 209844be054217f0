#!/bin/bash
# deploy_completion: deploy/bash-completion/pxctl completes every command
# `pxctl --help` lists, the options of `pxctl --help` before a command, and
# for each command every option `pxctl COMMAND --help` lists (plus --field,
# which goes wherever --json does), and offers nothing else. Both lists are
# read from the built pxctl's help, so a command or option added without
# its completion fails here. A control copy of the script with one option
# taken out must fail the same check, which shows that it can fail.
set -u
build=$1
src=$2
pxctl=$build/cli/pxctl
comp=$src/deploy/bash-completion/pxctl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$pxctl" ] || { echo "$pxctl not built"; exit 1; }

# What the completion script offers for the words given (the last is completed).
offers() {
  local script=$1; shift
  bash -c 'source "$1"; shift; COMP_WORDS=(pxctl "$@"); COMP_CWORD=$#; _pxctl; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$script" "$@" | sort -u
}
# The options a help text lists: "  --name", "  -f, --follow" at a line's start.
help_opts() { grep -oE '^  (-[a-zA-Z], )?--?[a-zA-Z][a-zA-Z-]*' | tr -d ' ' | tr ',' '\n' | sort -u; }

commands=$("$pxctl" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }' | sort -u)
global=$("$pxctl" --help | sed -n '/^Options of every command/,/^$/p' | help_opts)
ncmd=$(printf '%s\n' $commands | wc -l)
[ "$ncmd" -ge 15 ] || { echo "only $ncmd commands read from pxctl --help"; exit 1; }

# check SCRIPT: 0 when SCRIPT covers pxctl's help exactly, else 1 (saying why).
check() {
  local script=$1 bad=0 c want got
  got=$(offers "$script" "")
  if [ "$got" != "$commands" ]; then
    echo "commands: pxctl --help lists: $(echo $commands); completion offers: $(echo $got)"; bad=1
  fi
  got=$(offers "$script" -)
  if [ "$got" != "$global" ]; then
    echo "before a command: pxctl --help lists: $(echo $global); completion offers: $(echo $got)"; bad=1
  fi
  for c in $commands; do
    want=$("$pxctl" "$c" --help | help_opts)
    if printf '%s\n' $want | grep -qx -- --json; then want=$(printf '%s\n' $want --field | sort -u); fi
    got=$(offers "$script" "$c" -)
    if [ "$got" != "$want" ]; then
      echo "$c: pxctl $c --help lists: $(echo $want)"
      echo "$c: completion offers:      $(echo $got)"
      bad=1
    fi
  done
  return $bad
}

fail=0
if check "$comp"; then
  echo "completion covers pxctl's $ncmd commands and each one's options"
else
  fail=1
fi
# control: the same script without status's --db must fail the check
sed '/^ *status) opts=/s/ --db//' "$comp" >"$tmp/pxctl"
if cmp -s "$comp" "$tmp/pxctl"; then
  echo "control: could not take --db out of status's options (the script changed shape)"; fail=1
elif check "$tmp/pxctl" >/dev/null; then
  echo "control: a script without status's --db passed the check"; fail=1
fi
exit $fail
