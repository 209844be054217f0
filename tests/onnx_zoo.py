#!/usr/bin/python3
"""torchvision's classification networks for the zoo test
(tests/test_onnx_zoo.c) and the zoo bench (bench/zoo/run.sh), with Debian's
/usr/bin/python3 (python3-torchvision; none of PruneX's code is used here).
Each is built with random weights (torch.manual_seed(0), the batch norms'
statistics and affine parameters made non-trivial as in
onnx_import_nets.py), 10 classes, at the smallest input it allows (SIZES).

  onnx_zoo.py list
      one line "NET SIZE" per network;
  onnx_zoo.py reference NET OPSET DIR [BATCH [OPSET2 DIR2]]
      DIR/model.onnx (NET exported at OPSET as onnx_import_nets.py exports,
      eval mode) and, for a random batch (default 2), what
      onnx_import_nets.py's reference writes: x.f32, y.i32, logits.f32,
      grads.txt with each parameter's float32 and float64 gradients
      (BATCH 0: the file alone, for a network the import refuses); with
      OPSET2 DIR2, NET exported at OPSET2 into DIR2 too, in the same run,
      and the reference hard-linked there (the module's step is the same
      whatever the opset of the file: computed once). A
      DIR/stamp naming this script's, onnx_import_nets.py's and torch's
      versions marks a finished directory: when it matches, nothing is redone
      (the test exports each network once per build tree);
  onnx_zoo.py export NET OPSET OUT.onnx [SIZE [CLASSES]]
      the file alone (at SIZE x SIZE, default NET's, with CLASSES, default
      10: bench/gpu/imagenet.sh exports ResNet-50 at 224 with 1000);
  onnx_zoo.py bench NET BATCH THREADS STEPS [WARMUP]
      PyTorch training torchvision's own module at NET's size on random
      inputs (SGD as pxtrain --bench), printing RESULT images_per_sec.
"""
import hashlib
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# torch, torchvision and onnx_import_nets (the export and the reference
# step) are imported by the commands that use them: `reference` on a
# finished directory answers without (seconds saved per test).
torch = torchvision = nets = None


def load():
    global torch, torchvision, nets
    import torch
    import torchvision
    sys.path.insert(0, HERE)
    import onnx_import_nets as nets

CLASSES = 10
# The input side each network is exported at: 64, 224 for vgg11_bn (its 7x7
# adaptive pool must divide the map: 7 x 32). Every one of them would take
# 32, but its last stage's maps are then 1 x 1 and a training batch norm
# over a batch of 2 normalises 2 values: the step's gradients reach 1e7 to
# 1e9 and PyTorch's own float32 step is as far from the float64 one as the
# gradients are large (measured 2026-11-29), not a check of anything. At 64
# the last maps are 2 x 2 (8 values a channel).
SIZES = {
    "resnet18": 64, "resnet50": 64, "resnext50_32x4d": 64, "wide_resnet50_2": 64,
    "vgg11_bn": 224, "mobilenet_v2": 64, "mobilenet_v3_small": 64, "mobilenet_v3_large": 64,
    "efficientnet_b0": 64, "efficientnet_v2_s": 64, "regnet_x_400mf": 64, "regnet_y_400mf": 64,
    "shufflenet_v2_x1_0": 64, "squeezenet1_1": 64, "densenet121": 64, "mnasnet1_0": 64,
    "googlenet": 64, "convnext_tiny": 64,
}


def build(name, classes=CLASSES):
    torch.manual_seed(0)
    kw = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
    net = getattr(torchvision.models, name)(num_classes=classes, **kw)
    nets.randomize_bn(net)
    return net


def stamp():
    """This script, onnx_import_nets.py and torch's and torchvision's
    version files, hashed (located, not imported)."""
    h = hashlib.sha256()
    files = [os.path.abspath(__file__), os.path.join(HERE, "onnx_import_nets.py")]
    for pkg in ("torch", "torchvision"):
        spec = importlib.util.find_spec(pkg)
        if spec and spec.origin:
            files.append(os.path.join(os.path.dirname(spec.origin), "version.py"))
    for f in files:
        if os.path.exists(f):
            with open(f, "rb") as fp:
                h.update(fp.read())
    return h.hexdigest()


def export(name, opset, path, size=None, classes=CLASSES):
    load()
    os.environ["PX_TEST_ONNX_OPSET"] = str(opset)
    s = size or SIZES[name]
    nets.export(build(name, classes), path, 3, s, s)


def reference(name, opset, out, batch, also=()):
    """out for opset and, for each (opset, dir) of also, dir: the network
    exported at each opset, and one reference (the module's, whatever the
    opset) written to out and hard-linked into the others."""
    todo = [(opset, out)] + list(also)
    want = "%s batch %d\n" % (stamp(), batch)
    stamps = [os.path.join(d, "stamp") for _, d in todo]
    if all(os.path.exists(sp) and open(sp).read() == want for sp in stamps):
        return
    for (_, d), sp in zip(todo, stamps):
        os.makedirs(d, exist_ok=True)
        if os.path.exists(sp):
            os.unlink(sp)
    load()
    s = SIZES[name]
    net = build(name)
    # every export before the reference step (its train-mode forward moves
    # the batch norms' running statistics)
    for o, d in todo:
        os.environ["PX_TEST_ONNX_OPSET"] = str(o)
        nets.export(net, os.path.join(d, "model.onnx"), 3, s, s)
    if batch > 0:
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 3, s, s, generator=g)
        y = torch.randint(0, CLASSES, (batch,), generator=g, dtype=torch.int32)
        nets.write_reference(net, name, out, x, y)
        for _, d in todo[1:]:
            for f in os.listdir(out):
                if f in ("model.onnx", "stamp") or f.endswith(".tmp"):
                    continue
                dst = os.path.join(d, f)
                if os.path.exists(dst):
                    os.unlink(dst)
                os.link(os.path.join(out, f), dst)
    for sp in stamps:
        with open(sp + ".tmp", "w") as f:
            f.write(want)
        os.rename(sp + ".tmp", sp)


def bench(name, batch, threads, steps, warmup):
    """torchvision's module trained as pxtrain --bench trains the import:
    SGD (lr 0.1, momentum 0.9, weight decay 5e-4), mean cross-entropy,
    random inputs and labels, dropout as the module has it."""
    load()
    torch.set_num_threads(threads)
    net = build(name)
    s = SIZES[name]
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    net.train()
    g = torch.Generator().manual_seed(0)
    t0 = None
    for i in range(warmup + steps):
        if i == warmup:
            t0 = time.perf_counter()
        x = torch.rand(batch, 3, s, s, generator=g) * 2 - 1
        y = torch.randint(0, CLASSES, (batch,), generator=g)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    el = time.perf_counter() - t0
    print("torch %s %s %dx%d batch %d: %d steps in %.2f s, last loss %.4f" % (
        torch.__version__, name, s, s, batch, steps, el, loss.item()))
    print("RESULT images_per_sec %.1f img/s" % (steps * batch / el))


def main(argv):
    if len(argv) == 2 and argv[1] == "list":
        for n, s in SIZES.items():
            print(n, s)
        return 0
    if len(argv) in (5, 6, 8) and argv[1] == "reference" and argv[2] in SIZES:
        also = [(int(argv[6]), argv[7])] if len(argv) == 8 else []
        reference(argv[2], int(argv[3]), argv[4], int(argv[5]) if len(argv) >= 6 else 2, also)
        return 0
    if len(argv) in (5, 6, 7) and argv[1] == "export" and argv[2] in SIZES:
        export(argv[2], int(argv[3]), argv[4], int(argv[5]) if len(argv) >= 6 else None,
               int(argv[6]) if len(argv) == 7 else CLASSES)
        return 0
    if len(argv) in (6, 7) and argv[1] == "bench" and argv[2] in SIZES:
        bench(argv[2], int(argv[3]), int(argv[4]), int(argv[5]),
              int(argv[6]) if len(argv) == 7 else 3)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
