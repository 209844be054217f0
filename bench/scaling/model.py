#!/usr/bin/python3
"""Strong-scaling model of hsadmm, ddp and topk (docs/scaling-model.md).

Predicts the speedup of ResNet-152 training from 8 to 64 devices (nodes of 4
devices, 100 Gbit/s between nodes) from per-phase costs: compute per step,
pack/unpack throughput, allreduce latency and bandwidth terms. Inputs that
were measured on this repository's machines are marked MEASURED with their
source; the others are ASSUMED and can be changed on the command line. The
output is a prediction under these inputs, not a measurement.

Strong scaling, two readings (both printed):
  fixed global batch (default): the global batch B and the number of steps
    are fixed; a device computes B/N images per step, so compute per step
    shrinks as 8/N from its value at 8 devices, while what a step or a round
    moves per device does not: speedup(N) = t_step(8) / t_step(N);
  fixed device batch: b per device, a fixed data budget, so the steps shrink
    as 1/N: speedup(N) = (N / 8) * t_step(8) / t_step(N).
"""
import argparse
import math

# ---- inputs ----------------------------------------------------------------------
MEASURED = {
    # bench/traffic (docs/performance.md): dense allreduce of resnet152 (CIFAR
    # shapes) moved 930.51 MB between 2 ranks (each sends and receives the
    # whole f32 vector once) -> 930.51e6 / (2 * 2 * 4) parameters
    "params": 930.51e6 / 16,
    # bench/traffic, channel keep 0.5 with coupling: 299.66 of 930.51 MB
    "packed_fraction": 299.66 / 930.51,
    # bench prune_pack (docs/performance.md): shrink of 22.32 MB in 2.66 ms
    "pack_GBps": 8.41,  # (the default of elementwise_GBps below)
    # bench/comm (docs/performance.md): 4 KB allreduce, 4 ranks, 22.1 us; the
    # per-message latency of one algorithm step (recursive doubling: 2 steps)
    "alpha_s": 22.1e-6 / 2,
}
ASSUMED = {
    "t_compute_s": 0.15,      # forward + backward of resnet152 at 8 devices (per-device batch
                              # 128, 32x32) on one GPU
    "backward_share": 2 / 3,  # of t_compute: what DDP's bucket overlap can hide
    "inter_GBps": 100 / 8 * 0.8,  # 100 Gbit/s links at 80% of line rate
    "intra_GBps": 100.0,      # NVLink-class fabric inside a node
    "alpha_inter_s": 25e-6,   # per message between nodes (TCP/RoCE class)
    "devices_per_node": 4,
    "local_steps": 4,         # hsadmm: steps per outer iteration (the quickstart's until
                              # 2026-11-30; it takes 1 now, with an 8-bit exchange)
    "update_passes": 10,      # hsadmm: element-wise passes over the parameters per round
                              # (z_i, v, u, residuals) at elementwise_GBps
    "elementwise_GBps": 8.41, # element-wise passes, packing, top-k selection: the measured
                              # CPU shrink rate (pack_GBps) by default; a GPU's HBM does ~1000
    "topk_ratio": 0.01,
    "topk_passes": 3,         # topk: passes over the gradients to select (at pack_GBps)
}
PAPER = {"hsadmm": 6.75, "ddp": 5.81, "topk": 3.71}


def ring_allreduce(nbytes, n, bw, alpha):
    """Ring allreduce of nbytes over n ranks whose slowest edge has bw GB/s."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (bw * 1e9) + 2 * (n - 1) * alpha


def step_time(kind, N, a, overlap=True, fixed_global=True):
    P = a["devices_per_node"]
    M = max(1, N // P)
    G = a["params"] * 4  # gradient / model bytes
    tc = a["t_compute_s"] * (8.0 / N if fixed_global else 1.0)
    if kind == "ddp":
        # one ring over all ranks, node by node: every node boundary carries
        # 2 (N-1)/N of the gradients each way, at the inter-node rate
        bw = a["inter_GBps"] if M > 1 else a["intra_GBps"]
        al = a["alpha_inter_s"] if M > 1 else a["alpha_s"]
        comm = ring_allreduce(G, N, bw, al)
        hidden = a["backward_share"] * tc if overlap else 0.0
        return tc + max(0.0, comm - hidden)
    if kind == "topk":
        k = a["topk_ratio"] * a["params"]
        select = a["topk_passes"] * G / (a["elementwise_GBps"] * 1e9)
        # ring allgather of 8-byte (index, value) pairs: every edge carries
        # (N-1) blocks; the node boundaries are the slow edges
        gather = (N - 1) * k * 8 / ((a["inter_GBps"] if M > 1 else a["intra_GBps"]) * 1e9)
        gather += (N - 1) * (a["alpha_inter_s"] if M > 1 else a["alpha_s"])
        # scatter-add of the N ranks' pairs into a dense gradient
        decode = N * k * 8 / (a["elementwise_GBps"] * 1e9) + G / (a["elementwise_GBps"] * 1e9)
        return tc + select + gather + decode
    if kind == "hsadmm":
        s = a["local_steps"]
        rho = a["packed_fraction"]
        intra = ring_allreduce(G, P, a["intra_GBps"], a["alpha_s"])
        pack = 2 * rho * G / (a["elementwise_GBps"] * 1e9)  # shrink + expand
        inter = ring_allreduce(rho * G, M, a["inter_GBps"], a["alpha_inter_s"]) if M > 1 else 0
        bcast = G / (a["intra_GBps"] * 1e9) + math.log2(P) * a["alpha_s"]
        update = a["update_passes"] * G / (a["elementwise_GBps"] * 1e9)
        residual = ring_allreduce(8 * 4 * 500, N, a["inter_GBps"], a["alpha_inter_s"])
        return tc + (intra + pack + inter + bcast + update + residual) / s
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in ASSUMED.items():
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=v)
    ap.add_argument("--devices", default="8,16,32,64")
    args = ap.parse_args()
    a = dict(MEASURED)
    for k in ASSUMED:
        a[k] = getattr(args, k)
    a["devices_per_node"] = int(a["devices_per_node"])
    devs = [int(x) for x in args.devices.split(",")]
    print("inputs (MEASURED here, ASSUMED otherwise):")
    for k, v in MEASURED.items():
        print(f"  {k:18s} {v:.6g}  MEASURED")
    for k in ASSUMED:
        print(f"  {k:18s} {a[k]:.6g}  ASSUMED")
    print()
    kinds = ["hsadmm", "ddp", "ddp-no-overlap", "topk"]
    res = {}
    for fixed_global in (True, False):
        print("fixed global batch (compute per step shrinks as 8/N):" if fixed_global else
              "fixed device batch (steps shrink as 1/N):")
        print("%-16s" % "strategy" + "".join("%12s" % f"{n} dev" for n in devs) +
              "   paper 8->64")
        for kind in kinds:
            base = kind.split("-")[0]
            ovl = kind != "ddp-no-overlap"
            t = {n: step_time(base, n, a, ovl, fixed_global) for n in devs}
            if fixed_global:
                sp = {n: t[devs[0]] / t[n] for n in devs}
            else:
                sp = {n: (t[devs[0]] / devs[0]) / (t[n] / n) for n in devs}
            res[(kind, fixed_global)] = sp
            row = "".join("%11.2fx" % sp[n] for n in devs)
            print("%-16s%s   %s" % (kind, row, ("%.2fx" % PAPER[base]) if kind in PAPER else ""))
        print("  step time (s) at %d / %d devices: " % (devs[0], devs[-1]) +
              ", ".join("%s %.4f / %.4f" % (k, step_time(k.split('-')[0], devs[0], a,
                                                         k != 'ddp-no-overlap', fixed_global),
                                            step_time(k.split('-')[0], devs[-1], a,
                                                      k != 'ddp-no-overlap', fixed_global))
                        for k in kinds))
        print()
    last = devs[-1]
    for kind in ("hsadmm", "ddp", "topk"):
        print(f"RESULT predicted_speedup_{kind}_{devs[0]}_to_{last} "
              f"{res[(kind, True)][last]:.2f} x")


if __name__ == "__main__":
    main()
