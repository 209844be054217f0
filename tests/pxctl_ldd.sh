#!/bin/bash
# pxctl_ldd: pxctl is the client part alone, linked in. `ldd pxctl` shows
# no library of PruneX (libpxcore) and none of the engine's libraries (CUDA
# runtime, cuDNN, cuBLAS, NCCL, oneDNN and its OpenCL, UCX); pxtrain, the engine's
# program, shows oneDNN and UCX, so the patterns are seen to match. Then an
# install with the engine taken away (libpxcore and pxtrain deleted) still
# checks and submits specs (a typo'd strategy gets its suggestion from the
# engine-free name table) and says what it lacks for `pxctl export`.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if "$@"; then :; else echo "FAILED: $*"; fail=1; fi; }
engine='^(libcudart|libcuda|libcudnn.*|libcublas.*|libnccl|libdnnl|libOpenCL|libuc[pstm]|libpxcore)\.so'

# The names of what ldd lists (first column), not the paths.
ldd "$build/cli/pxctl" >"$tmp/pxctl.full" 2>&1 || { cat "$tmp/pxctl.full"; exit 1; }
awk '{print $1}' "$tmp/pxctl.full" >"$tmp/pxctl.ldd"
echo "pxctl loads $(wc -l <"$tmp/pxctl.ldd") shared objects"
if grep -E "$engine" "$tmp/pxctl.ldd"; then echo "FAILED: pxctl loads the engine's libraries above"; fail=1; fi
if grep -E '^libpx' "$tmp/pxctl.ldd"; then echo "FAILED: pxctl loads PruneX's libraries above"; fail=1; fi
ldd "$build/cli/pxtrain" 2>&1 | awk '{print $1}' >"$tmp/pxtrain.ldd"
echo "pxtrain loads $(wc -l <"$tmp/pxtrain.ldd") shared objects"
echo "pxtrain: $(grep -E "$engine" "$tmp/pxtrain.ldd" | tr '\n' ' ')"
for lib in libdnnl libucp libuct libpxcore; do check grep -qE "^$lib\.so" "$tmp/pxtrain.ldd"; done

# An install without the engine: what a login node would have.
p=$tmp/prefix
cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
rm -f "$p"/lib*/libpxcore.so* "$p"/lib/*/libpxcore.so* "$p/bin/pxtrain"
unset LD_LIBRARY_PATH PRUNEX_BIN_DIR
export PATH=/usr/bin:/bin
pxctl=$p/bin/pxctl
out=$("$pxctl" --help 2>&1); rc=$?
check test $rc -eq 0
check grep -q 'hsadmm-flat' <<<"$out"
# A good spec is checked and sent (nothing listens on port 1).
out=$("$pxctl" submit "$src/examples/quickstart.yaml" --coordinator 127.0.0.1:1 2>&1); rc=$?
echo "submit quickstart.yaml: exit $rc: $out"
check test $rc -eq 1
check grep -q 'UNAVAILABLE' <<<"$out"
sed 's/^strategy: hsadmm$/strategy: hsadmn/' "$src/examples/quickstart.yaml" >"$tmp/typo.yaml"
out=$("$pxctl" submit "$tmp/typo.yaml" --coordinator 127.0.0.1:1 2>&1); rc=$?
echo "submit typo.yaml: exit $rc: $out"
check test $rc -eq 2
check grep -q "did you mean 'hsadmm'" <<<"$out"
sed 's/^  name: resnet20$/  name: resnet21/' "$src/examples/quickstart.yaml" >"$tmp/arch.yaml"
out=$("$pxctl" submit "$tmp/arch.yaml" --coordinator 127.0.0.1:1 2>&1); rc=$?
echo "submit arch.yaml: exit $rc: $out"
check test $rc -eq 2
check grep -q "resnet20" <<<"$out"
touch "$tmp/m.safetensors"
out=$("$pxctl" export "$tmp/m.safetensors" --out "$tmp/x" 2>&1); rc=$?
echo "export without the engine: exit $rc: $out"
check test $rc -eq 1
check grep -q "needs PruneX's engine (pxtrain)" <<<"$out"
[ $fail -eq 0 ] && echo "pxctl_ldd: OK"
exit $fail
