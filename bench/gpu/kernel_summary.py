#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel times by kernel name.

    kernel_summary.py PROFILE.csv [TOP]

PROFILE.csv is what `ncu --csv --metrics gpu__time_duration.sum
--print-units base` printed (scripts/gpu-kit's profile step makes one per
configuration); lines that are not part of its table (the program's own
output, ncu's ==PROF== lines) are ignored. Prints the total GPU time, the
kernel count, and the TOP kernel names (default 25) by time with their
launch count and share: where a configuration spends its step."""
import csv
import sys
from collections import defaultdict


def rows(path):
    with open(path, newline="", errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    return csv.DictReader(lines)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    time_ns = defaultdict(float)
    count = defaultdict(int)
    for r in rows(sys.argv[1]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r.get("Kernel Name", "?")
        name = name.split("(")[0][:110]
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        time_ns[name] += v
        count[name] += 1
    total = sum(time_ns.values())
    if not total:
        sys.exit(f"{sys.argv[1]}: no gpu__time_duration.sum rows (did ncu profile any kernel?)")
    print(f"{sys.argv[1]}: {sum(count.values())} kernels, {total / 1e6:.3f} ms of GPU time")
    print(f"{'ms':>9} {'share':>6} {'calls':>6}  kernel")
    for name, v in sorted(time_ns.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{v / 1e6:9.3f} {100 * v / total:5.1f}% {count[name]:6d}  {name}")


if __name__ == "__main__":
    main()
