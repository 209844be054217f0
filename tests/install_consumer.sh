#!/bin/sh
# Installs the build into a temporary prefix with `cmake --install` and builds
# a program against it through pkg-config alone: proves the installed headers,
# library and prunex.pc are complete and relocatable.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name prunex.pc | head -n 1)
[ -n "$pc" ] || { echo "prunex.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# the public headers are installed, the internal ones are not
inc=$(pkg-config --variable=includedir prunex)/prunex
echo "installed headers: $(cd "$inc" && ls | tr '\n' ' ')"
for h in "$(dirname "$src")"/../libpxcore/include-internal/*/prunex/*.h; do
  [ ! -e "$inc/$(basename "$h")" ] || { echo "internal header $(basename "$h") was installed"; exit 1; }
done
cc "$src" $(pkg-config --cflags --libs prunex) -o "$tmp/consumer"
libdir=$(pkg-config --variable=libdir prunex)
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer")
echo "consumer printed: $out"
[ "$out" = "ok 0.3*10->3" ] || { echo "unexpected output"; exit 1; }
