#!/usr/bin/python3
"""PyTorch's side of the ONNX import checks (run by tests/test_onnx_import.c
and examples/export_onnx.py's users with Debian's /usr/bin/python3; none of
PruneX's code is used here).

  onnx_import_nets.py export NET OUT.onnx [C H W CLASSES]
      exports one small network (vgg, resnet) with torch.onnx.export, as a
      user would (eval mode, opset 13, weights inside the file);
  onnx_import_nets.py reference NET DIR BATCH [C H W CLASSES]
      exports NET to DIR/model.onnx and writes, for a random input batch
      and random labels: DIR/x.f32 (input), DIR/y.i32 (labels),
      DIR/logits.f32 (eval-mode logits) and, for one training step
      (train-mode BatchNorm, mean cross-entropy), DIR/grads.txt: one line
      "NAME NUMEL FILE FILE64" per parameter with its gradient in DIR/FILE
      (float32) and the same step's in float64 (the same weights and inputs,
      model.double()) in DIR/FILE64: the yardstick both float32 results
      are measured against; for a net with check_buffers, DIR/bufs.txt:
      one line "NAME NUMEL FILE" per running statistic after the step
      (float32);
  onnx_import_nets.py compare ORIG.onnx EXPORTED.onnx
      onnx's checker on PruneX's export of an imported 1x32x32 model, and
      OpenCV's logits of both files on the same images (see compare()).

mobilenet (inverted residuals: depthwise convolutions, ReLU6 as Clip, a Concat
head) and seresnet (squeeze-and-excitation: Sigmoid, Mul, convolutions with
bias on the pooled map; a LeakyRelu stem; a MatMul + Add classifier) cover
the graph operators, acts the activations of mobilenet_v3 and efficientnet
(PX_TEST_ONNX_OPSET picks the opset: 13 by default, 17, 18, which
rewrites opset 17's ReduceMean axes as inputs, or 20, which rewrites opset
17's file with Gelu nodes), scalars the arithmetic of an
activation and a constant. Channel counts are multiples of 16 (oneDNN 2.6 trains narrower layers on its
reference kernels, about 40x slower). vgg and resnet use the built-in layer set (Conv without bias + BN + ReLU,
residual Add + ReLU, max and average pooling, global average pooling, Linear) and start from
non-trivial BN statistics and affine parameters, so that the checks see
every parameter kind.
"""
import copy
import inspect
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn


def conv_bn(ci, co, k=3, s=1):
    return [nn.Conv2d(ci, co, k, s, k // 2, bias=False), nn.BatchNorm2d(co)]


class Vgg(nn.Module):
    """VGG-style: stacks of 3x3 conv-BN-ReLU with 2x2 max pooling between
    stages, average pooling, dropout before the classifier."""

    def __init__(self, c, classes):
        super().__init__()
        layers = []
        for item in [(c, 16), (16, 16), "M", (16, 32), (32, 32), "M", (32, 64), "A"]:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            elif item == "A":
                layers.append(nn.AvgPool2d(2))
            else:
                layers += conv_bn(item[0], item[1], 3, 1) + [nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(self.pool(self.features(x)), 1)))


class Block(nn.Module):
    def __init__(self, ci, co, s):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(ci, co, 3, s)
        self.conv2, self.bn2 = conv_bn(co, co, 3, 1)
        self.down = None
        if s != 1 or ci != co:
            self.down = nn.Sequential(*conv_bn(ci, co, 1, s))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    """A CIFAR-style ResNet (resnet8: one basic block per stage)."""

    def __init__(self, c, classes, width=16):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(c, width)
        self.layers = nn.Sequential(Block(width, width, 1), Block(width, 2 * width, 2),
                                    Block(2 * width, 4 * width, 2))
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x):
        h = self.layers(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 projection,
    ReLU6 after the first two, a residual add when the shape allows."""

    def __init__(self, ci, co, s, expand=4):
        super().__init__()
        h = ci * expand
        self.body = nn.Sequential(*conv_bn(ci, h, 1), nn.ReLU6(inplace=True),
                                  nn.Conv2d(h, h, 3, s, 1, groups=h, bias=False),
                                  nn.BatchNorm2d(h), nn.ReLU6(inplace=True), *conv_bn(h, co, 1))
        self.res = s == 1 and ci == co

    def forward(self, x):
        return x + self.body(x) if self.res else self.body(x)


class MobileNet(nn.Module):
    """MobileNetV2-style: inverted residuals with depthwise convolutions and
    ReLU6; a two-branch head joined by Concat on channels."""

    def __init__(self, c, classes):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(c, 16), nn.ReLU6(inplace=True))
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1), InvertedResidual(16, 32, 2),
                                    InvertedResidual(32, 32, 1))
        self.left = nn.Sequential(*conv_bn(32, 32, 1), nn.ReLU6(inplace=True))
        self.right = nn.Sequential(*conv_bn(32, 16, 3), nn.ReLU6(inplace=True))
        self.fc = nn.Linear(48, classes)

    def forward(self, x):
        h = self.blocks(self.stem(x))
        h = torch.cat([self.left(h), self.right(h)], 1)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))


class SEBlock(Block):
    def __init__(self, ci, co, s):
        super().__init__(ci, co, s)
        self.se = SqueezeExcite(co)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.se(self.bn2(self.conv2(h)))
        return torch.relu(h + (self.down(x) if self.down is not None else x))


class MatLinear(nn.Module):
    """A classifier written as x @ W + b (exports MatMul + Add, W [F, K])."""

    def __init__(self, f, k):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(f, k) / f ** 0.5)
        self.bias = nn.Parameter(torch.randn(k) * 0.1)

    def forward(self, x):
        return x @ self.weight + self.bias


class SEResNet(nn.Module):
    """A small ResNet with squeeze-and-excitation in every block, a
    LeakyReLU stem and a MatMul classifier."""

    transposed = {"fc.weight"}  # MatMul's [F, K]: PruneX holds it as Gemm's [K, F]

    def __init__(self, c, classes, width=16):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(c, width)
        self.act = nn.LeakyReLU(0.1)
        self.layers = nn.Sequential(SEBlock(width, width, 1), SEBlock(width, 2 * width, 2))
        self.fc = MatLinear(2 * width, classes)

    def forward(self, x):
        h = self.layers(self.act(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Acts(nn.Module):
    """mobilenet_v3's and efficientnet_b0's activations: Hardswish (opset 13:
    Mul(x, HardSigmoid(x)); 14 and later: HardSwish), SiLU (Mul(x,
    Sigmoid(x))), the exact GELU (Div, Erf, Add, Mul, Mul; opset 20: Gelu, see
    export()), Tanh, Hardsigmoid, and a squeeze-and-excitation gated by a
    Hardsigmoid (mobilenet_v3's), after a depthwise convolution."""

    def __init__(self, c, classes):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(c, 16)
        self.conv2, self.bn2 = conv_bn(16, 32)
        self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False)
        self.bn3 = nn.BatchNorm2d(32)
        self.se1, self.se2 = nn.Conv2d(32, 16, 1), nn.Conv2d(16, 32, 1)
        self.conv4, self.bn4 = conv_bn(32, 32, 1)
        self.conv5, self.bn5 = conv_bn(32, 48)
        self.acts = nn.ModuleList([nn.Hardswish(), nn.SiLU(), nn.GELU(), nn.Tanh(),
                                   nn.Hardsigmoid()])
        self.fc = nn.Linear(48, classes)

    def forward(self, x):
        a = self.acts
        h = a[0](self.bn1(self.conv1(x)))
        h = a[1](self.bn2(self.conv2(h)))
        h = a[2](self.bn3(self.dw(h)))
        s = nn.functional.adaptive_avg_pool2d(h, 1)
        h = h * nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
        h = a[3](self.bn4(self.conv4(h)))
        h = a[4](self.bn5(self.conv5(h)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Scalars(nn.Module):
    """An activation and a constant: Mul, Add, Sub, Div, a constant minus an
    activation, and a division by sqrt 2 that no Erf reads (not a GELU)."""

    def __init__(self, c, classes):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(c, 16)
        self.conv2, self.bn2 = conv_bn(16, 16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        h = self.bn1(self.conv1(x))
        h = 1.0 - torch.relu((h * 2.0 + 1.0 - 0.25) / 4.0)
        h = self.bn2(self.conv2(h / math.sqrt(2.0)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class EluNet(nn.Module):
    """Uses an operator the import refuses (Elu): for the refusal test."""

    def __init__(self, c, classes):
        super().__init__()
        self.conv, self.bn = conv_bn(c, 16)
        self.gate = nn.ELU()
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        h = self.gate(self.bn(self.conv(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Shapes(nn.Module):
    """What the exporters write around the layers: a Concat of one
    input (densenet's torch.cat([x], 1)), a squeeze-and-excitation on
    x.mean((2, 3), keepdim=True) (ReduceMean as a global average pooling,
    timm's and mnasnet's idiom), one on x.mean((2, 3)) viewed back as
    [N, C, 1, 1] through the computed shape [x.size(0), x.size(1) // 2 * 2,
    1, 1] (Shape, Gather, Div, Cast, Mul, Unsqueeze, Concat, Reshape: shape
    arithmetic, as shufflenet's channels // groups), one squeezed and
    unsqueezed, and
    the classifier's input by x.view(x.size(0), -1) ("view") or by
    x.mean((2, 3)) ("mean")."""

    def __init__(self, c, classes, head="view"):
        super().__init__()
        self.head = head
        self.conv1, self.bn1 = conv_bn(c, 16)
        self.conv2, self.bn2 = conv_bn(16, 32)
        self.se = nn.ModuleList([nn.Conv2d(32, 16, 1), nn.Conv2d(16, 32, 1), nn.Conv2d(32, 16, 1),
                                 nn.Conv2d(16, 32, 1), nn.Conv2d(32, 16, 1), nn.Conv2d(16, 32, 1)])
        self.conv3, self.bn3 = conv_bn(32, 32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        se = self.se
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(torch.cat([h], 1))))
        s = h.mean((2, 3), keepdim=True)
        h = h * torch.sigmoid(se[1](torch.relu(se[0](s))))
        s = h.mean((2, 3))
        s = s.view(s.size(0), s.size(1) // 2 * 2, 1, 1)  # shape arithmetic (Div, Mul)
        h = h * torch.sigmoid(se[3](torch.relu(se[2](s))))
        s = h.mean((-2, -1), keepdim=True).squeeze(-1).squeeze(-1)
        h = h * torch.sigmoid(se[5](torch.relu(se[4](s.unsqueeze(-1).unsqueeze(-1)))))
        h = torch.relu(self.bn3(self.conv3(h)))
        if self.head == "mean":
            return self.fc(h.mean((2, 3)))
        h = nn.functional.adaptive_avg_pool2d(h, 1)
        return self.fc(h.view(h.size(0), -1))


class ShapesMean(Shapes):
    def __init__(self, c, classes):
        super().__init__(c, classes, "mean")


class DataSlice(EluNet):
    """A value taken from an activation's data (its first 8 features,
    x[:, :8], a Slice of the activation): refused, naming the node."""

    def __init__(self, c, classes):
        super().__init__(c, classes)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        h = nn.functional.adaptive_avg_pool2d(self.bn(self.conv(x)), 1)
        return self.fc(h.view(h.size(0), -1)[:, :8])


class BnEps(nn.Module):
    """Batch norms of other epsilons and momenta (googlenet's and
    mobilenet_v3's eps 1e-3, mobilenet_v3's momentum 0.01, and far ones):
    the logits see the epsilon, the running statistics after the training
    step (DIR/bufs.txt) the momentum."""

    check_buffers = True

    def __init__(self, c, classes):
        super().__init__()
        self.conv1, self.conv2, self.conv3, self.conv4 = (
            nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.Conv2d(16, 32, 3, 1, 1, bias=False),
            nn.Conv2d(32, 32, 3, 1, 1, bias=False), nn.Conv2d(32, 32, 1, bias=False))
        self.bn1 = nn.BatchNorm2d(16, eps=1e-3)
        self.bn2 = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
        self.bn3 = nn.BatchNorm2d(32, eps=0.05, momentum=0.5)
        self.bn4 = nn.BatchNorm2d(32, momentum=0.3)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = nn.functional.hardswish(self.bn2(self.conv2(h)))
        h = torch.relu(self.bn3(self.conv3(h)))
        h = self.bn4(self.conv4(h))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class FcChain(nn.Module):
    """mobilenet_v3's head: the pooled features through Linear, Hardswish,
    Dropout and a second Linear (two Gemms in a chain), after batch norms
    of eps 1e-3 and momentum 0.01 (mobilenet_v3's)."""

    check_buffers = True

    def __init__(self, c, classes):
        super().__init__()
        self.conv1, self.conv2 = (nn.Conv2d(c, 16, 3, 1, 1, bias=False),
                                  nn.Conv2d(16, 32, 3, 1, 1, bias=False))
        self.bn1 = nn.BatchNorm2d(16, eps=1e-3, momentum=0.01)
        self.bn2 = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
        self.classifier = nn.Sequential(nn.Linear(32, 48), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2, inplace=True), nn.Linear(48, classes))

    def forward(self, x):
        h = nn.functional.hardswish(self.bn1(self.conv1(x)))
        h = nn.functional.hardswish(self.bn2(self.conv2(h)))
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


SEEDS = {"mobilenet": 2}
class Clip1Net(EluNet):
    """Clip(0, 1) (Hardtanh): a Clip that is not ReLU6, refused."""

    def __init__(self, c, classes):
        super().__init__(c, classes)
        self.gate = nn.Hardtanh(0.0, 1.0)


class GeluTanhNet(EluNet):
    """GELU's tanh approximation (Mul(x, x) first): refused."""

    def __init__(self, c, classes):
        super().__init__(c, classes)
        self.gate = nn.GELU(approximate="tanh")


class LinearSE(EluNet):
    """A squeeze-and-excitation of a Linear layer, its gate viewed back as
    [N, C, 1, 1]: refused (an FC's features are read by activations and
    another FC only)."""

    def __init__(self, c, classes):
        super().__init__(c, classes)
        self.se = nn.Linear(16, 16)

    def forward(self, x):
        h = self.bn(self.conv(x))
        s = torch.sigmoid(self.se(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1)))
        h = h * s.view(s.size(0), -1, 1, 1)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class Reciprocal(nn.Module):
    def forward(self, x):
        return 1.0 / x


class RecipNet(EluNet):
    """A constant divided by an activation (PyTorch exports a Reciprocal): refused."""

    def __init__(self, c, classes):
        super().__init__(c, classes)
        self.gate = Reciprocal()


class Permute(nn.Module):
    """torchvision.ops.misc.Permute (ConvNeXt's blocks)."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class LayerNorm2d(nn.LayerNorm):
    """torchvision's LayerNorm2d (ConvNeXt's stem, downsampling and head):
    a LayerNorm over channels between two permutes."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """torchvision's ConvNeXt block: depthwise 7x7, then in NHWC a LayerNorm,
    Linear to 4C, GELU, Linear back, permuted to NCHW, a layer scale [C, 1,
    1] and the residual add (no stochastic depth: eval and p = 0 alike)."""

    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim, bias=True), Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
            nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        # torchvision starts it at 1e-6; random here so that every gradient matters
        self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1) + 0.5)

    def forward(self, x):
        return self.layer_scale * self.block(x) + x


class ConvNeXt(nn.Module):
    """convnext_tiny's structure at toy size: a 3x3 stem conv (the
    patchify 4x4 s4 is another helper's) + LayerNorm2d, a block, LayerNorm2d +
    a 3x3 s2 downsampling conv, a block, then torchvision's head: average
    pooling, LayerNorm2d, Flatten, Linear. LayerNorm is the opset 17
    LayerNormalization node, or at opset 13 its decomposition (ReduceMean,
    Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)."""

    def __init__(self, c, classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(c, 16, 3, 1, 1), LayerNorm2d(16, eps=1e-6)),
            CNBlock(16),
            nn.Sequential(LayerNorm2d(16, eps=1e-6), nn.Conv2d(16, 32, 3, 2, 1)),
            CNBlock(32))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(32, eps=1e-6), nn.Flatten(1),
                                        nn.Linear(32, classes))
        with torch.no_grad():  # LayerNorm's affine as after some training
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


class Geometry(nn.Module):
    """Windows other than k x k with padding k/2: a 4x4 stride-4
    patchify stem with bias, squeezenet's 3x3 conv without padding and its
    3x3 stride-2 ceil_mode max pooling (the last window past the input),
    inception's 1x7 and 7x1 convs, a dilated conv, an F.pad(0, 1, 0, 1)
    folded into the 2x2 conv after it, googlenet's stride-1 ceil_mode max
    pooling, an average pooling not counting its padding
    (count_include_pad=False) and one of 2x2 stride 2 with ceil_mode, and
    adaptive average pooling from 16x16 (64x64 inputs) to 8x8 (an
    AveragePool of a computed window). On 64x64 inputs: 16, 8, 6, 3, ...,
    3, 2, 1.
    geometry_same writes the convs' pads as auto_pad=SAME_UPPER (the 2x2
    conv taking over its Pad)."""

    auto_pad = False

    def __init__(self, c, classes):
        super().__init__()
        cbr = lambda ci, co, k, **kw: [nn.Conv2d(ci, co, k, bias=False, **kw), nn.BatchNorm2d(co),
                                       nn.ReLU()]
        self.stem = nn.Sequential(nn.Conv2d(c, 16, 4, 4), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(8), *cbr(16, 16, 3),
                                  nn.MaxPool2d(3, 2, ceil_mode=True))
        self.body = nn.Sequential(*cbr(16, 16, (1, 7), padding=(0, 3)),
                                  *cbr(16, 16, (7, 1), padding=(3, 0)),
                                  *cbr(16, 16, 3, padding=2, dilation=2))
        self.tail = nn.Sequential(*cbr(16, 32, 2), nn.MaxPool2d(3, 1, 1, ceil_mode=True),
                                  nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                                  nn.AvgPool2d(2, 2, ceil_mode=True), nn.Conv2d(32, 32, 2))
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.body(self.stem(x))
        x = self.tail(nn.functional.pad(x, (0, 1, 0, 1)))
        return self.fc(torch.flatten(x, 1))


class GeometrySame(Geometry):
    auto_pad = True


def fold_pad_sizes(path, sizes=(0, 0, 0, 0, 0, 0, 1, 1)):
    """The sizes of the Pad that Geometry's F.pad(0, 1, 0, 1) exports to as
    one Constant, the subgraph that computed them dropped: PyTorch 1.13
    writes Shape, Gather, ..., Reshape, Slice and Transpose of constants
    (PruneX folds the first ones, not yet Reshape and Transpose of
    constants); onnx-simplifier or a newer exporter leaves a constant."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(path)
    g = m.graph
    consts = {o for x in g.node if x.op_type == "Constant" for o in x.output}
    for n in [n for n in g.node if n.op_type == "Pad" and n.input[1] not in consts]:
        g.node.insert(list(g.node).index(n), helper.make_node(
            "Constant", [], ["pad_sizes"], value=numpy_helper.from_array(np.array(sizes))))
        n.input[1] = "pad_sizes"
        if len(n.input) == 3 and not n.input[2]:  # no value: OpenCV takes none rather than ''
            del n.input[2]
    while True:  # drop what nothing reads any more
        used = {i for x in g.node for i in x.input} | {o.name for o in g.output}
        dead = [x for x in g.node if not any(o in used for o in x.output)]
        if not dead:
            break
        for x in dead:
            g.node.remove(x)
    onnx.save(m, path)


def to_auto_pad(path):
    """The convs whose pads are SAME_UPPER's for stride 1 (total d * (k - 1),
    its odd unit at the end) rewritten with auto_pad=SAME_UPPER, and the
    2x2 conv after Geometry's F.pad(0, 1, 0, 1) so too, without the Pad
    (what another exporter writes for TensorFlow's 'same'); the Pad's sizes
    subgraph is left, unread."""
    import onnx
    from onnx import helper
    m = onnx.load(path)
    g = m.graph
    pads_of = {n.output[0]: n for n in g.node if n.op_type == "Pad"}
    drop = []
    for n in g.node:
        if n.op_type != "Conv":
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        k, d, s = a["kernel_shape"], a.get("dilations", [1, 1]), a.get("strides", [1, 1])
        if s != [1, 1]:
            continue
        same = [d[i] * (k[i] - 1) // 2 for i in (0, 1)]
        same += [d[i] * (k[i] - 1) - same[i] for i in (0, 1)]
        p = a.get("pads", [0, 0, 0, 0])
        src = pads_of.get(n.input[0])
        if src is not None and p == [0, 0, 0, 0] and k == [2, 2]:  # forward()'s F.pad
            n.input[0] = src.input[0]
            drop.append(src)
            p = same
        if p != same or p == [0, 0, 0, 0]:
            continue
        keep = [x for x in n.attribute if x.name != "pads"]
        del n.attribute[:]
        n.attribute.extend(keep + [helper.make_attribute("auto_pad", "SAME_UPPER")])
    for n in drop:
        g.node.remove(n)
    onnx.save(m, path)


class VggFlat(nn.Module):
    """torchvision's vgg11_bn classifier at toy size: the last
    map (64 x 2 x 2 at 32 x 32) flattened whole into Linear, ReLU, Dropout,
    Linear, as vgg's 512 x 7 x 7 into its 25088 x 4096 layer; view=True
    flattens by x.view(x.size(0), -1) (a Reshape by a computed shape)."""

    def __init__(self, c, classes, view=False):
        super().__init__()
        layers = []
        for item in [(c, 16), "M", (16, 32), "M", (32, 32), "M", (32, 64), "M"]:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += conv_bn(item[0], item[1], 3, 1) + [nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.view = view
        self.classifier = nn.Sequential(nn.Linear(64 * 2 * 2, 32), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(32, classes))

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1) if self.view else torch.flatten(x, 1)
        return self.classifier(x)


class VggView(VggFlat):
    def __init__(self, c, classes):
        super().__init__(c, classes, view=True)


def channel_shuffle(x, groups):
    """torchvision's shufflenetv2.channel_shuffle, verbatim."""
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    x = x.view(batchsize, -1, height, width)
    return x


class ShuffleUnit(nn.Module):
    """torchvision's InvertedResidual of ShuffleNetV2: stride 1 splits the
    channels (x.chunk(2, dim=1): Split, or Slice), stride 2 runs two
    branches on the whole input; the halves are joined and shuffled."""

    def __init__(self, ci, co, s):
        super().__init__()
        self.stride = s
        b = co // 2
        if s > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(ci, ci, 3, s, 1, groups=ci, bias=False), nn.BatchNorm2d(ci),
                nn.Conv2d(ci, b, 1, 1, 0, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(ci if s > 1 else b, b, 1, 1, 0, bias=False), nn.BatchNorm2d(b),
            nn.ReLU(inplace=True), nn.Conv2d(b, b, 3, s, 1, groups=b, bias=False),
            nn.BatchNorm2d(b), nn.Conv2d(b, b, 1, 1, 0, bias=False), nn.BatchNorm2d(b),
            nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNet(nn.Module):
    """shufflenet_v2's structure at toy size: a stem conv and max
    pooling, a stage of a stride-2 unit and a stride-1 unit, a second
    stride-2 unit, a 1x1 conv, the mean over H and W, Linear."""

    def __init__(self, c, classes):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.stage2 = nn.Sequential(ShuffleUnit(16, 32, 2), ShuffleUnit(32, 32, 1))
        self.stage3 = nn.Sequential(ShuffleUnit(32, 64, 2), ShuffleUnit(64, 64, 1))
        self.conv5 = nn.Sequential(nn.Conv2d(64, 64, 1, 1, 0, bias=False), nn.BatchNorm2d(64),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.conv5(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(x.mean([2, 3]))


class Fire(nn.Module):
    """torchvision's squeezenet Fire: a 1x1 squeeze, then 1x1 and 3x3
    expands joined on channels, each conv with a bias and a ReLU."""

    def __init__(self, ci, s, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(ci, s, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(s, e1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(s, e3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class Squeeze(nn.Module):
    """squeezenet1_1's structure at toy size: an unpadded stride-2 stem,
    ceil_mode max pooling, two Fire modules, and its classifier of
    convolutions: Dropout, a 1x1 conv to the classes, ReLU,
    AdaptiveAvgPool2d(1) (GlobalAveragePool), flatten; mean=True: the conv
    alone, then x.mean((2, 3)) (ReduceMean, keepdims 0)."""

    def __init__(self, c, classes, mean=False):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(c, 16, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 8, 16, 16), Fire(32, 8, 16, 16))
        self.mean = mean
        tail = [] if mean else [nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))]
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(32, classes, 1), *tail)

    def forward(self, x):
        x = self.classifier(self.features(x))
        return x.mean((2, 3)) if self.mean else torch.flatten(x, 1)


class SqueezeMean(Squeeze):
    def __init__(self, c, classes):
        super().__init__(c, classes, mean=True)


NETS = {"shufflenet": ShuffleNet, "squeeze": Squeeze, "squeeze_mean": SqueezeMean, "vgg": Vgg, "vgg_flat": VggFlat, "vgg_view": VggView,
        "resnet": ResNet, "mobilenet": MobileNet, "seresnet": SEResNet,
        "acts": Acts, "scalars": Scalars, "elu": EluNet, "clip1": Clip1Net,
        "gelu_tanh": GeluTanhNet, "recip": RecipNet, "shapes": Shapes,
        "shapes_mean": ShapesMean, "data_slice": DataSlice, "bn_eps": BnEps,
        "fc_chain": FcChain, "linear_se": LinearSE, "convnext": ConvNeXt, "geometry": Geometry,
        "geometry_same": GeometrySame}


def build(name, c, classes, seed=0):
    torch.manual_seed(seed)
    return randomize_bn(NETS[name](c, classes))


def randomize_bn(net):
    """BN as after some training: every parameter kind matters."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return net


def export(net, path, c, h, w):
    net.eval()
    # PyTorch 2.9 and later export through dynamo by default (another graph,
    # opset 18): ask for the TorchScript exporter that Debian's 1.13 has
    kw = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw["dynamo"] = False
    opset = int(os.environ.get("PX_TEST_ONNX_OPSET", "13"))
    torch.onnx.export(net, torch.randn(1, c, h, w), path, opset_version=min(opset, 17),
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE, **kw)
    if isinstance(net, Geometry):
        fold_pad_sizes(path)
    if getattr(net, "auto_pad", False):
        to_auto_pad(path)
    if opset >= 20:
        to_opset20(path)
    elif opset >= 18:
        to_opset18(path, opset)


def to_opset18(path, opset):
    """Opset 18 as torch 1.13 cannot write it: every ReduceMean's axes an
    input (a Constant) instead of an attribute (the change of opset 18 that
    the nets here meet)."""
    import onnx
    m = onnx.load(path)
    g = m.graph
    nodes = []
    for n in g.node:
        if n.op_type == "ReduceMean":
            axes = [a for a in n.attribute if a.name == "axes"][0]
            name = n.name + "_axes"
            nodes.append(onnx.helper.make_node("Constant", [], [name], name=name + "_Constant",
                                               value=onnx.helper.make_tensor(
                                                   name, onnx.TensorProto.INT64,
                                                   [len(axes.ints)], list(axes.ints))))
            n.input.append(name)
            n.attribute.remove(axes)
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    m.opset_import[0].version = opset
    onnx.save(m, path)


def to_opset20(path):
    """Debian's torch 1.13 and onnx 1.12 stop at opset 17: the file as opset
    20 would have it, every exact GELU (Div by sqrt 2, Erf, Add 1, Mul x,
    Mul 0.5) one Gelu node."""
    import onnx
    m = onnx.load(path)
    g = m.graph
    by_out = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    drop, add = set(), {}
    for erf in [n for n in g.node if n.op_type == "Erf"]:
        div = by_out[erf.input[0]]
        plus = readers[erf.output[0]][0]
        mulx = readers[plus.output[0]][0]
        half = readers[mulx.output[0]][0]
        consts = [by_out.get(i) for n in (div, plus, half) for i in n.input]
        drop.update(id(n) for n in [div, erf, plus, mulx, half])
        drop.update(id(n) for n in consts if n is not None and n.op_type == "Constant")
        add[id(div)] = onnx.helper.make_node("Gelu", [div.input[0]], [half.output[0]],
                                             name=erf.name.replace("Erf", "Gelu"))
    nodes = [add.get(id(n), n) for n in g.node if id(n) not in drop or id(n) in add]
    del g.node[:]
    g.node.extend(nodes)
    m.opset_import[0].version = 20
    onnx.save(m, path)


def reference(name, out, batch, c, h, w, classes):
    net = build(name, c, classes)
    export(net, os.path.join(out, "model.onnx"), c, h, w)
    # mobilenet's seed 1 puts a pre-activation within 1e-6 of ReLU6's kink at
    # 0, where rounding alone picks the side of the gradient: seed 2 does not
    g = torch.Generator().manual_seed(SEEDS.get(name, 1))
    x = torch.randn(batch, c, h, w, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g, dtype=torch.int32)
    write_reference(net, name, out, x, y)


def write_reference(net, name, out, x, y):
    """x, y, net's eval-mode logits and one training step's gradients in
    float32 and float64 (see the module's doc) into out."""
    x.numpy().astype(np.float32).tofile(os.path.join(out, "x.f32"))
    y.numpy().astype(np.int32).tofile(os.path.join(out, "y.i32"))
    macs = [0]  # multiply-accumulates per image of the convs and Linear layers

    def count(mod, inp, outp):
        if isinstance(mod, MatLinear):
            k = mod.weight.shape[0]
        elif isinstance(mod, nn.Linear):
            k = mod.in_features
        else:
            k = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
        macs[0] += outp.numel() // outp.shape[0] * k
    hooks = [mod.register_forward_hook(count) for mod in net.modules()
             if isinstance(mod, (nn.Conv2d, nn.Linear, MatLinear))]
    with torch.no_grad():
        net.eval()
        net(x).numpy().astype(np.float32).tofile(os.path.join(out, "logits.f32"))
    for h in hooks:
        h.remove()
    with open(os.path.join(out, "macs.txt"), "w") as f:
        f.write("%d\n" % macs[0])
    net64 = copy.deepcopy(net).double()  # the yardstick: the same step in float64
    losses = [train_step(net, x, y), train_step(net64, x.double(), y)]
    with open(os.path.join(out, "grads.txt"), "w") as f:
        for i, ((pname, p), p64) in enumerate(zip(net.named_parameters(), net64.parameters())):
            fn = ["g%d.f32" % i, "g%d.f64" % i]
            for g, fname, dt in ((p.grad, fn[0], np.float32), (p64.grad, fn[1], np.float64)):
                g = g.t().contiguous() if pname in getattr(net, "transposed", ()) else g
                g.numpy().astype(dt).tofile(os.path.join(out, fname))
            f.write("%s %d %s %s\n" % (pname, p.numel(), fn[0], fn[1]))
    if getattr(net, "check_buffers", False):  # the running statistics after the step
        with open(os.path.join(out, "bufs.txt"), "w") as f:
            for i, (bname, b) in enumerate(net.named_buffers()):
                if b.dtype == torch.float32:
                    b.numpy().astype(np.float32).tofile(os.path.join(out, "b%d.f32" % i))
                    f.write("%s %d b%d.f32\n" % (bname, b.numel(), i))
    print("%s: loss %.6f (float64 %.9f), %d parameters" % (
        name, losses[0], losses[1], sum(p.numel() for p in net.parameters())))


def train_step(net, x, y):
    """One training step's gradients (train-mode BatchNorm, mean
    cross-entropy) in net's .grad; returns the loss."""
    net.train()
    for m in net.modules():  # dropout off: PruneX treats Dropout as the identity
        if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0  # torchvision's stochastic depth (efficientnet, convnext) too
    loss = nn.functional.cross_entropy(net(x), y.long())
    loss.backward()
    return loss.item()


def compare(orig, exported, net=None):
    """OpenCV's dnn runs the file PyTorch exported (fed Fashion-MNIST's
    training preprocessing: raw [0, 1] pixels padded by 2 and normalised)
    and PruneX's export of the imported model (fed the raw 28x28 pixels: its
    graph preprocesses); the logits must agree."""
    import cv2
    import onnx
    onnx.checker.check_model(onnx.load(exported), full_check=True)
    u = np.random.default_rng(3).random((4, 1, 28, 28), dtype=np.float32)
    x = (np.pad(u, ((0, 0), (0, 0), (2, 2), (2, 2))) - 0.2860) / 0.3530
    if net:  # the reference is PyTorch's module (OpenCV 4.6 runs PyTorch's own file of
        # Geometry 4.9e-2 off: it reads one of its windows otherwise)
        with torch.no_grad():
            la = build(net, 1, 10).eval()(torch.from_numpy(x.astype(np.float32))).numpy()
    else:
        a = cv2.dnn.readNetFromONNX(orig)
        a.setInput(x.astype(np.float32))
        la = a.forward()
    b = cv2.dnn.readNetFromONNX(exported)
    b.setInput(u)
    lb = b.forward()
    d = float(np.abs(la - lb).max())
    print("exported ONNX: checker ok, OpenCV logits within %.2e of the original's%s" %
          (d, " (PyTorch's)" if net else ""))
    return 0 if la.shape == lb.shape == (4, 10) and d < 1e-4 else 1


def main(argv):
    if len(argv) >= 4 and argv[1] == "export":
        c, h, w, k = (int(v) for v in argv[4:8]) if len(argv) >= 8 else (1, 28, 28, 10)
        export(build(argv[2], c, k), argv[3], c, h, w)
        return 0
    if len(argv) >= 5 and argv[1] == "reference":
        c, h, w, k = (int(v) for v in argv[5:9]) if len(argv) >= 9 else (3, 16, 16, 10)
        reference(argv[2], argv[3], int(argv[4]), c, h, w, k)
        return 0
    if len(argv) in (4, 5) and argv[1] == "compare":
        return compare(*argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
