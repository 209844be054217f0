"""PyTorch DDP peer of bench/cluster/run.sh: the recipe of examples/ddp.yaml
(ResNet-20, Fashion-MNIST 28x28 normalised with mean 0.2860 / std 0.3530,
random crop with 4 pixels of padding and horizontal flip drawn per image (as
libpxcore/data/sampler.c does: the padding is a black pixel, 0 before
normalisation, not the mean), batch 64 per rank, SGD lr 0.05 momentum 0.9
weight decay 1e-3 (--weight-decay) on every parameter, cosine schedule over
the run, a disjoint shard of the training set per rank, convolutions
initialised as libpxcore does (Kaiming normal, fan out), over gloo, one
process per rank with one compute thread. Before each evaluation the BN
running statistics are averaged over the ranks (our ddp averages them every
step), so every rank holds the same model; the test set is evaluated on the
unwrapped module every --eval-steps steps and at the end, each rank on its
shard of the test set, the counts summed with an allreduce; rank 0 prints
`EVAL <seconds since --start> <accuracy>` lines and a `FINAL` line.

Run as: python3 torch_ddp.py --rank R --world N --master ADDR:PORT --start T"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_bench import ResNet  # noqa: E402  the same ResNet definitions as libpxcore


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--start", type=float, default=None)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--weight-decay", type=float, default=1e-3)
    ap.add_argument("--eval-steps", type=int, default=39)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many (smoke test)")
    a = ap.parse_args()
    start = a.start if a.start is not None else time.time()
    torch.set_num_threads(1)
    host, port = a.master.rsplit(":", 1)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=a.rank,
                            world_size=a.world)
    torch.manual_seed(a.seed)
    mean, std = 0.2860, 0.3530
    xtr = (torch.from_numpy(idx(f"{a.data}/train-images-idx3-ubyte.gz").astype(np.float32)) / 255.0
           - mean) / std
    ytr = torch.from_numpy(idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = (torch.from_numpy(idx(f"{a.data}/t10k-images-idx3-ubyte.gz").astype(np.float32)) / 255.0
           - mean) / std
    yte = torch.from_numpy(idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    xtr, xte = xtr.unsqueeze(1), xte.unsqueeze(1)
    shard = len(xtr) // a.world
    steps_per_epoch = max(1, shard // a.batch)
    total = steps_per_epoch * a.epochs
    if a.max_steps > 0:
        total = min(total, a.max_steps)
    model = ResNet("resnet20", in_channels=1, num_classes=10)
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):  # libpxcore/nn/model.c: N(0, 2 / fan_out)
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + np.cos(np.pi * min(s, total) / total)))
    te_lo = a.rank * len(xte) // a.world
    te_hi = (a.rank + 1) * len(xte) // a.world
    g = torch.Generator().manual_seed(a.seed)
    pad = 4

    def evaluate():
        with torch.no_grad():  # one set of BN statistics: the ranks' average
            for b in model.buffers():
                if b.is_floating_point():
                    dist.all_reduce(b)
                    b.div_(a.world)
        model.eval()
        correct = 0
        with torch.no_grad():
            for lo in range(te_lo, te_hi, 500):
                hi = min(lo + 500, te_hi)
                correct += (model(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum().item()
        t = torch.tensor([correct, te_hi - te_lo], dtype=torch.float64)
        dist.all_reduce(t)
        model.train()
        return (t[0] / t[1]).item()

    black = -mean / std  # a padding pixel: 0 before normalisation
    ar = torch.arange(28)

    def augment(x):
        """A crop offset and a flip per image (sampler.c's px_augment_choose)."""
        n = x.shape[0]
        xp = F.pad(x, (pad, pad, pad, pad), value=black)[:, 0]
        off = torch.randint(0, 2 * pad + 1, (n, 2), generator=g)
        flip = torch.rand(n, generator=g) < 0.5
        rows = off[:, 0:1] + ar
        cols = off[:, 1:2] + torch.where(flip[:, None], 27 - ar, ar)
        return xp[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]].unsqueeze(1)

    step = 0
    acc = -1.0
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr), generator=g)  # the same on every rank
        mine = perm[a.rank * shard:(a.rank + 1) * shard]
        for s in range(steps_per_epoch):
            if step >= total:
                break
            ids = mine[s * a.batch:(s + 1) * a.batch]
            x = augment(xtr[ids])
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), ytr[ids])
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % a.eval_steps == 0 or step == total:
                acc = evaluate()
                if a.rank == 0:
                    print(f"EVAL {time.time() - start:.2f} {acc:.4f}", flush=True)
    if a.rank == 0:
        print(f"FINAL {time.time() - start:.2f} {acc:.4f} torch {torch.__version__}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
