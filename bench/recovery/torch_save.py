"""The peer of bench/recovery/run.sh: what a PyTorch training loop pays to
checkpoint inline, torch.save of a state of the given size (float32 tensors
of model-layer sizes) followed by fsync, median of 5, in ms.
    torch_save.py MEGABYTES DIR"""
import os
import statistics
import sys
import time

import torch


def main():
    mb = float(sys.argv[1])
    d = sys.argv[2]
    os.makedirs(d, exist_ok=True)
    n = int(mb * 1e6 / 4)
    # layer-sized tensors, as a state dict holds them
    state, left, i = {}, n, 0
    while left > 0:
        k = min(left, 590_000)
        state[f"t{i}"] = torch.randn(k)
        left -= k
        i += 1
    times = []
    for r in range(5):
        path = os.path.join(d, f"ckpt{r % 2}.pt")
        t0 = time.perf_counter()
        with open(path + ".tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        times.append(1e3 * (time.perf_counter() - t0))
    print(f"{statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
