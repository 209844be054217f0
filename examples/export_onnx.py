#!/usr/bin/python3
"""Exports a CIFAR-style ResNet-20 written in PyTorch to ONNX, the way a
user brings their own network to PruneX (examples/imported-model.yaml).

  python3 examples/export_onnx.py [OUT.onnx] [--channels 1|3] [--seed S]
                                  [--inner W1,W2,W3] [--he]

OUT defaults to resnet20.onnx beside this script; --channels 1 (the default)
for Fashion-MNIST, 3 for CIFAR-10; the input is N x C x 32 x 32 (PruneX's
data sets are trained at 32x32). --inner gives each stage's blocks that many
inner channels (conv1's filters, conv2's inputs; the residual stream keeps
16, 32, 64): the architecture a pruned job compacts to, to train from
scratch (bench/accuracy/run.sh's quick-ddp-innerA.B.C). --he draws the
convolutions He-normal (fan out), as PruneX's built-in models, in place of
PyTorch's default. What matters for the import
(docs/user-guide.md, "Your own model"):
  * export in eval mode with do_constant_folding=False and
    training=TrainingMode.PRESERVE, so BatchNormalization stays a node of
    its own instead of being folded into the convolution;
  * convolutions without bias, each followed by a BatchNormalization;
  * the classifier (nn.Linear) last, producing the logits.
"""
import argparse
import os

import torch
import torch.nn as nn


def conv_bn(ci, co, k, s):
    return nn.Conv2d(ci, co, k, s, k // 2, bias=False), nn.BatchNorm2d(co)


class BasicBlock(nn.Module):
    def __init__(self, ci, co, stride, mid=None):
        super().__init__()
        mid = mid or co
        self.conv1, self.bn1 = conv_bn(ci, mid, 3, stride)
        self.conv2, self.bn2 = conv_bn(mid, co, 3, 1)
        self.downsample = None
        if stride != 1 or ci != co:
            self.downsample = nn.Sequential(*conv_bn(ci, co, 1, stride))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (x if self.downsample is None else self.downsample(x)))


class ResNet20(nn.Module):
    def __init__(self, channels=1, classes=10, blocks=3, width=16, inner=None):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(channels, width, 3, 1)
        layers, ci = [], width
        for stage in range(3):
            co = width << stage
            for b in range(blocks):
                layers.append(BasicBlock(ci, co, 2 if stage > 0 and b == 0 else 1,
                                         inner[stage] if inner else None))
                ci = co
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(ci, classes)

    def forward(self, x):
        h = self.layers(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "resnet20.onnx"))
    ap.add_argument("--channels", type=int, default=1, choices=(1, 3))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inner", help="three inner widths, one per stage (e.g. 8,15,29)")
    ap.add_argument("--he", action="store_true", help="He-normal (fan out) convolutions")
    a = ap.parse_args()
    inner = [int(w) for w in a.inner.split(",")] if a.inner else None
    if inner and (len(inner) != 3 or min(inner) < 1):
        ap.error("--inner takes three widths, each at least 1")
    torch.manual_seed(a.seed)
    net = ResNet20(a.channels, inner=inner)
    if a.he:
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    net.eval()
    tmp = a.out + ".tmp%d" % os.getpid()  # written whole, then renamed: readers never see half
    torch.onnx.export(net, torch.randn(1, a.channels, 32, 32), tmp, opset_version=13,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
    os.replace(tmp, a.out)
    print("wrote %s (%d parameters)" % (a.out, sum(p.numel() for p in net.parameters())))


if __name__ == "__main__":
    main()
