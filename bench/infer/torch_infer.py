#!/usr/bin/python3
"""PyTorch CPU side of bench/infer: loads the dense and the compact
safetensors that px_bench_infer wrote into plain torch modules built from
their metadata (tests/export_check.py's builder and reader), checks that both
give the same logits, and measures images/s at batch 128 and the median
latency at batch 1 (eval mode, no_grad, best of two alternating rounds).
usage: torch_infer.py ARCH DIR IN_CHANNELS [ITERS]"""
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from export_check import build_torch, read_safetensors  # noqa: E402


def load(path):
    tensors, meta = read_safetensors(path)
    net = build_torch(meta)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=False)
    return net.eval()


def throughput(net, x, iters):
    with torch.no_grad():
        net(x)
        t0 = time.perf_counter()
        for _ in range(iters):
            net(x)
        return iters * x.shape[0] / (time.perf_counter() - t0)


def latency_ms(net, x, iters):
    ts = []
    with torch.no_grad():
        net(x)
        for _ in range(iters):
            t0 = time.perf_counter()
            net(x)
            ts.append(1e3 * (time.perf_counter() - t0))
    return sorted(ts)[len(ts) // 2]


def main():
    arch, d, in_c = sys.argv[1], sys.argv[2], int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    dense = load(os.path.join(d, arch + ".safetensors"))
    compact = load(os.path.join(d, arch + ".compact.safetensors"))
    g = torch.Generator().manual_seed(1)
    x = torch.rand(128, in_c, 32, 32, generator=g) - 0.5
    with torch.no_grad():
        diff = float((dense(x[:8]) - compact(x[:8])).abs().max())
    tp_d = tp_k = 0.0
    lat_d = lat_k = 1e30
    for _ in range(2):
        tp_d = max(tp_d, throughput(dense, x, iters))
        tp_k = max(tp_k, throughput(compact, x, iters))
        lat_d = min(lat_d, latency_ms(dense, x[:1], 5 * iters))
        lat_k = min(lat_k, latency_ms(compact, x[:1], 5 * iters))
    print("%-9s torch %s  batch128 %.1f -> %.1f img/s  batch1 %.2f -> %.2f ms  "
          "(max |logit diff| dense vs compact %.2g, %d threads)" %
          (arch, torch.__version__, tp_d, tp_k, lat_d, lat_k, diff, torch.get_num_threads()))
    print("ROW %s torch 0 0 %.2f %.2f %.4f %.4f" % (arch, tp_d, tp_k, lat_d, lat_k))
    print("RESULT compact_speedup_%s_torch %.2f ratio" % (arch, tp_k / tp_d))
    if diff > 1e-3:
        sys.exit("dense and compact logits differ by %g" % diff)


if __name__ == "__main__":
    main()
