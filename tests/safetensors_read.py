#!/usr/bin/env python3
"""Reads a safetensors file with numpy, json and struct only (no PruneX code,
no safetensors package) and prints what it holds, so that test_safetensors
can check that the C writer's files open the way PyTorch and NumPy users
open them.

Output, one line each, tensors sorted by name, then metadata sorted by key:
    tensor NAME DTYPE [D0,D1,...] SUM WSUM
    meta KEY VALUE
SUM is the float64 sum of the elements, WSUM the sum of element i times i in
row-major order (so that misplaced elements show), both printed "%.17g".
Exits non-zero, with a message on stderr, on anything malformed.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1",
    "BOOL": "?",
}


def main(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        sys.exit(f"{path}: header size {n} past the end of the file")
    if n % 8 != 0:
        sys.exit(f"{path}: header size {n} is not a multiple of 8")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    end_of_data = 0
    for name in sorted(header):
        e = header[name]
        begin, end = e["data_offsets"]
        end_of_data = max(end_of_data, end)
        arr = np.frombuffer(data[begin:end], dtype=np.dtype(DTYPES[e["dtype"]]))
        arr = arr.reshape(e["shape"])
        flat = arr.astype(np.float64).ravel()
        # + 0.0 turns a -0.0 (numpy's sum of one negative zero) into 0.0, as C's sum gives.
        s = float(flat.sum()) + 0.0
        ws = float((flat * np.arange(flat.size, dtype=np.float64)).sum()) + 0.0
        shape = ",".join(str(d) for d in arr.shape)
        print(f"tensor {name} {e['dtype']} [{shape}] {s:.17g} {ws:.17g}")
    if end_of_data != len(data):
        sys.exit(f"{path}: tensors cover {end_of_data} of {len(data)} data bytes")
    for k in sorted(meta):
        print(f"meta {k} {meta[k]}")


if __name__ == "__main__":
    main(sys.argv[1])
