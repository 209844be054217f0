"""PyTorch peer of bench/elastic/run.sh: DDP under torchrun (one process per
node, gloo, c10d rendezvous, --max-restarts), written the way torchrun's
elastic jobs are meant to be (torch.distributed.elastic docs, "train
script"): rank 0 saves a checkpoint every --ckpt-every steps to a file all
nodes see, and every (re)started worker group resumes from the newest one.

The recipe is bench/cluster/torch_ddp.py's (ResNet-20 as libpxcore builds it,
Fashion-MNIST normalised with 0.2860 / 0.3530, crop with 4 pixels of black
padding and flip per image, batch --batch per rank, SGD lr --lr momentum 0.9
weight decay 5e-4, cosine over the run, Kaiming-normal fan-out convolutions,
one compute thread). The budget is --steps SGD steps, as an H-SADMM job's is
its rounds: a step of W ranks takes the next W x batch samples of the epoch's
permutation (samples_seen is in the checkpoint, so a group of another size
goes on where the last one stopped), and the schedule runs over the steps.
After the last step the BN statistics are averaged over the ranks and each
rank evaluates its shard of the test set. Rank 0 prints `STEP n` after each
step, `RESUME step restart_count world` when it starts, `FINAL seconds
accuracy` at the end.

    torchrun ... torch_elastic.py --data DIR --steps N --ckpt FILE"""
import argparse
import datetime
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


def load(data, split, mean, std):
    x = idx(f"{data}/{split}-images-idx3-ubyte.gz").astype(np.float32)
    y = idx(f"{data}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return ((torch.from_numpy(x) / 255.0 - mean) / std).unsqueeze(1), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=60.0, help="collective timeout, s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=float, default=None)
    a = ap.parse_args()
    start = a.start if a.start is not None else time.time()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(a.seed)
    mean, std = 0.2860, 0.3530
    xtr, ytr = load(a.data, "train", mean, std)
    xte, yte = load(a.data, "t10k", mean, std)
    n = len(xtr)
    model = ResNet("resnet20", in_channels=1, num_classes=10)
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):  # libpxcore/nn/model.c: N(0, 2 / fan_out)
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    step, seen = 0, 0
    if os.path.exists(a.ckpt):
        ck = torch.load(a.ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, seen = ck["step"], ck["seen"]
    ddp = nn.parallel.DistributedDataParallel(model)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + np.cos(np.pi * min(step + s, a.steps) / a.steps)))
    if rank == 0:
        print(f"RESUME {step} {restarts} {world} {time.time() - start:.2f}", flush=True)
    g = torch.Generator().manual_seed(a.seed + 7919 * step)
    pad, black, ar = 4, -mean / std, torch.arange(28)

    def augment(x):
        m = x.shape[0]
        xp = F.pad(x, (pad, pad, pad, pad), value=black)[:, 0]
        off = torch.randint(0, 2 * pad + 1, (m, 2), generator=g)
        flip = torch.rand(m, generator=g) < 0.5
        rows = off[:, 0:1] + ar
        cols = off[:, 1:2] + torch.where(flip[:, None], 27 - ar, ar)
        return xp[torch.arange(m)[:, None, None], rows[:, :, None], cols[:, None, :]].unsqueeze(1)

    perms = {}

    def order(epoch):
        if epoch not in perms:
            perms.clear()
            perms[epoch] = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed + epoch))
        return perms[epoch]

    while step < a.steps:
        lo = seen + rank * a.batch
        ks = torch.arange(lo, lo + a.batch)
        ids = torch.cat([order(int(e))[ks[ks // n == e] % n] for e in torch.unique(ks // n)])
        x = augment(xtr[ids])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), ytr[ids]).backward()
        opt.step()
        sched.step()
        step += 1
        seen += world * a.batch
        if rank == 0:
            print(f"STEP {step} {time.time() - start:.2f}", flush=True)
            if step % a.ckpt_every == 0 and step < a.steps:
                tmp = a.ckpt + ".tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                            "seen": seen}, tmp)
                os.replace(tmp, a.ckpt)
    with torch.no_grad():  # one set of BN statistics: the ranks' average
        for b in model.buffers():
            if b.is_floating_point():
                dist.all_reduce(b)
                b.div_(world)
    model.eval()
    lo, hi = rank * len(xte) // world, (rank + 1) * len(xte) // world
    with torch.no_grad():
        correct = sum((model(xte[i:min(i + 500, hi)]).argmax(1) == yte[i:min(i + 500, hi)])
                      .sum().item() for i in range(lo, hi, 500))
    t = torch.tensor([correct, hi - lo], dtype=torch.float64)
    dist.all_reduce(t)
    if rank == 0:
        print(f"FINAL {time.time() - start:.2f} {(t[0] / t[1]).item():.4f} restarts {restarts}"
              f" world {world} torch {torch.__version__}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
