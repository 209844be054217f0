"""PyTorch peer for bench/train/run.sh: the same ResNet definitions as
libpxcore (torchvision-style blocks, 3x3 stem, no max-pool, 1x1 conv + BN
shortcuts), trained with SGD on random 3x32x32 inputs, 10 classes. Prints
images/s and peak resident memory as RESULT lines. --precision bf16 runs the
forward (and so the backward) under CPU autocast to bfloat16, PyTorch's
mixed-precision recipe: f32 weights and optimiser, bf16 convolutions."""
import argparse
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride, width_factor=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.downsample is None else self.downsample(x)
        return F.relu(out + sc)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, width_factor=1):
        super().__init__()
        w = planes * width_factor
        self.conv1 = nn.Conv2d(cin, w, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.conv2 = nn.Conv2d(w, w, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(w)
        self.conv3 = nn.Conv2d(w, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        sc = x if self.downsample is None else self.downsample(x)
        return F.relu(out + sc)


ARCHS = {
    "resnet20": (Basic, [3, 3, 3], 16, 1), "resnet32": (Basic, [5, 5, 5], 16, 1),
    "resnet56": (Basic, [9, 9, 9], 16, 1), "resnet18": (Basic, [2, 2, 2, 2], 64, 1),
    "resnet34": (Basic, [3, 4, 6, 3], 64, 1), "resnet50": (Bottleneck, [3, 4, 6, 3], 64, 1),
    "resnet101": (Bottleneck, [3, 4, 23, 3], 64, 1), "resnet152": (Bottleneck, [3, 8, 36, 3], 64, 1),
    "wrn50_2": (Bottleneck, [3, 4, 6, 3], 64, 2),
}


class ResNet(nn.Module):
    def __init__(self, arch, in_channels=3, num_classes=10):
        super().__init__()
        block, blocks, base, wf = ARCHS[arch]
        self.conv1 = nn.Conv2d(in_channels, base, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        layers, cin = [], base
        for s, n in enumerate(blocks):
            planes = base << s
            stage = []
            for b in range(n):
                stage.append(block(cin, planes, 2 if s > 0 and b == 0 else 1, wf))
                cin = planes * block.expansion
            layers.append(nn.Sequential(*stage))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: the forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--count-params", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = ResNet(a.model)
    if a.count_params:
        print(sum(p.numel() for p in model.parameters()))
        return
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    crit = nn.CrossEntropyLoss()
    model.train()
    g = torch.Generator().manual_seed(0)
    t0 = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            t0 = time.perf_counter()
        x = torch.rand(a.batch, 3, 32, 32, generator=g) * 2 - 1
        y = torch.randint(0, 10, (a.batch,), generator=g)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = crit(model(x), y)
        loss.backward()
        opt.step()
    el = time.perf_counter() - t0
    print(f"torch {torch.__version__} {a.model} {a.precision}: {a.steps} steps in {el:.2f} s, last loss {loss.item():.4f}")
    print(f"RESULT images_per_sec {a.steps * a.batch / el:.1f} img/s")
    print(f"RESULT peak_rss_mb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")


if __name__ == "__main__":
    main()
