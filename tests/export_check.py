#!/usr/bin/python3
"""Independent checks of a PruneX export (run by tests/test_export_runtimes.c
and tests/test_onnx_job.c with Debian's /usr/bin/python3; none of PruneX's
code is used here):

  1. python3-onnx's checker accepts the ONNX file; its input is
     N x 1 x 28 x 28 (Fashion-MNIST's own size), the graph starts with the
     preprocessing (Pad, Sub, Div) and the metadata describes the input
     (size, layout, range, pad, mean, std), the classes, the output and the
     PruneX version;
  2. OpenCV's dnn module runs it on the first N Fashion-MNIST test images fed
     as docs/user-guide.md says: the raw 28x28 images as float32 bytes/255,
     no padding, no normalisation. Its prediction agrees with our engine's
     (fed by the training loader) on every image, but for near-ties of our
     logits, its logits are ours, and its accuracy is the one given (our
     engine's, or the job's) within 0.1 point or one image;
  3. PyTorch loads the compact safetensors (read with numpy: Debian's torch
     1.13 has no safetensors reader) into a plain torch module built from the
     file's metadata (arch, widths), preprocesses the raw images with what
     the ONNX metadata says (pad, mean, std) and agrees in the same way.
     COMPACT "-" leaves it out (an imported model: no torch module here).

usage: export_check.py ONNX COMPACT.safetensors|- LOGITS.f32 N ACCURACY DATA_DIR
(LOGITS: our engine's logits [N][classes] on the first N test images;
ACCURACY: in percent)
Prints one line per check; exits 1 on the first failure.
"""
import gzip
import json
import struct
import sys

import numpy as np


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw[4 + 4 * nd:], dtype=np.uint8).reshape(dims)


def test_images(data_dir):
    """The raw test images as a user has them: N x 1 x 28 x 28 float32 in [0, 1]."""
    imgs = read_idx(data_dir + "/t10k-images-idx3-ubyte.gz")
    labels = read_idx(data_dir + "/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    x = imgs.astype(np.float32) / np.float32(255.0)
    return x[:, None, :, :], labels


def check_onnx(onnx_path):
    """The checker, the raw input contract and the metadata; returns the
    metadata_props."""
    import onnx
    model = onnx.load(onnx_path)
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    print("onnx checker: ok (opset %d, %d nodes, %d initializers)" %
          (opset, len(model.graph.node), len(model.graph.initializer)))
    if opset < 13:
        sys.exit("onnx: opset %d < 13" % opset)
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in model.graph.input[0].type.tensor_type.shape.dim]
    ops = [n.op_type for n in model.graph.node[:3]]
    print("onnx input %s %s, first nodes %s" % (model.graph.input[0].name, dims, ops))
    if dims[1:] != [1, 28, 28] or ops != ["Pad", "Sub", "Div"]:
        sys.exit("onnx: expected raw 1x28x28 input and the preprocessing (Pad, Sub, Div) in the graph")
    want = {"prunex.input_size": "1x28x28", "prunex.pad": "2", "prunex.mean": "0.2860",
            "prunex.std": "0.3530", "prunex.input_range": "0,1", "prunex.input_layout": "NCHW",
            "prunex.classes": "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,"
                              "Bag,Ankle boot"}
    bad = {k: props.get(k) for k in want if props.get(k) != want[k]}
    version = props.get("prunex.version", "")
    if bad or "logits" not in props.get("prunex.output", "") or \
            "raw" not in props.get("prunex.input", "") or \
            not version or version != model.producer_version or \
            model.graph.input[0].doc_string != props.get("prunex.input"):
        sys.exit("onnx: metadata_props do not describe the input and output: %r" % props)
    return props


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        tensors[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"]).copy()
    return tensors, meta


# arch -> (bottleneck, blocks per stage, base width, bottleneck width factor)
ARCHS = {
    "resnet20": (False, [3, 3, 3], 16, 1), "resnet32": (False, [5, 5, 5], 16, 1),
    "resnet56": (False, [9, 9, 9], 16, 1), "resnet18": (False, [2, 2, 2, 2], 64, 1),
    "resnet34": (False, [3, 4, 6, 3], 64, 1), "resnet50": (True, [3, 4, 6, 3], 64, 1),
    "resnet101": (True, [3, 4, 23, 3], 64, 1), "resnet152": (True, [3, 8, 36, 3], 64, 1),
    "wrn50_2": (True, [3, 4, 6, 3], 64, 2),
}


def build_torch(meta):
    """A plain torch module with the compact widths, PyTorch names."""
    import torch
    from torch import nn

    bottleneck, blocks, base, wf = ARCHS[meta["arch"]]
    widths = [int(w) for w in meta["widths"].split(",")] if meta.get("widths") else None
    it = iter(widths) if widths else None

    def width(dense):
        return next(it) if it else dense

    class Block(nn.Module):
        def __init__(self, cin, cin_dense, planes, stride):
            super().__init__()
            self.bottleneck = bottleneck
            if not bottleneck:
                out_dense = planes
                w1 = width(planes)
                self.conv1 = nn.Conv2d(cin, w1, 3, stride, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(w1)
                w2 = width(planes)
                self.conv2 = nn.Conv2d(w1, w2, 3, 1, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(w2)
                last = w2
            else:
                inner, out_dense = planes * wf, planes * 4
                w1 = width(inner)
                self.conv1 = nn.Conv2d(cin, w1, 1, 1, 0, bias=False)
                self.bn1 = nn.BatchNorm2d(w1)
                w2 = width(inner)
                self.conv2 = nn.Conv2d(w1, w2, 3, stride, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(w2)
                w3 = width(out_dense)
                self.conv3 = nn.Conv2d(w2, w3, 1, 1, 0, bias=False)
                self.bn3 = nn.BatchNorm2d(w3)
                last = w3
            self.downsample = None
            if stride != 1 or cin_dense != out_dense:
                wd = width(out_dense)
                self.downsample = nn.Sequential(nn.Conv2d(cin, wd, 1, stride, 0, bias=False),
                                                nn.BatchNorm2d(wd))
            self.out_c, self.out_dense = last, out_dense

        def forward(self, x):
            o = torch.relu(self.bn1(self.conv1(x)))
            if self.bottleneck:
                o = torch.relu(self.bn2(self.conv2(o)))
                o = self.bn3(self.conv3(o))
            else:
                o = self.bn2(self.conv2(o))
            s = self.downsample(x) if self.downsample is not None else x
            return torch.relu(o + s)

    class Net(nn.Module):
        def __init__(self, in_c, classes):
            super().__init__()
            c = width(base)
            self.conv1 = nn.Conv2d(in_c, c, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            cd = base
            for s, nb in enumerate(blocks):
                layer = []
                for b in range(nb):
                    blk = Block(c, cd, base << s, 2 if s > 0 and b == 0 else 1)
                    c, cd = blk.out_c, blk.out_dense
                    layer.append(blk)
                setattr(self, "layer%d" % (s + 1), nn.Sequential(*layer))
            self.fc = nn.Linear(c, classes)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            for s in range(len(blocks)):
                x = getattr(self, "layer%d" % (s + 1))(x)
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return Net(int(meta["in_channels"]), int(meta["num_classes"]))


def agree(name, logits, ours, labels, acc):
    """Checks a runtime's logits against our engine's on the same images."""
    scale = 1.0 + float(np.abs(ours).max())
    top2 = np.sort(ours, axis=1)[:, -2:]
    near_tie = (top2[:, 1] - top2[:, 0]) <= 1e-3 * scale
    mine, theirs = ours.argmax(1), logits.argmax(1)
    differ = mine != theirs
    r_acc = 100.0 * float((theirs == labels).mean())
    d = float(np.abs(logits - ours).max())
    print("%s: prediction agrees with our engine's on %d of %d images (%d differ, %d of them "
          "near-ties), accuracy %.2f%% (given %.2f%%), max |logit diff| %.3g, scale %.3g" %
          (name, int((~differ).sum()), len(labels), int(differ.sum()), int((differ & near_tie).sum()),
           r_acc, acc, d, scale))
    if (differ & ~near_tie).any():
        sys.exit("%s: predictions differ from our engine's on images %s" %
                 (name, np.nonzero(differ & ~near_tie)[0][:10].tolist()))
    if d > 1e-3 * scale:
        sys.exit("%s: logits differ from our engine's" % name)
    if abs(r_acc - acc) > max(0.1, 100.0 / len(labels)) + 1e-6:
        sys.exit("%s: accuracy differs from the given one by more than 0.1 point" % name)


def opencv_logits(onnx_path, x):
    import cv2
    net = cv2.dnn.readNetFromONNX(onnx_path)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    out = []
    for i in range(0, x.shape[0], 500):
        net.setInput(x[i:i + 500])
        out.append(net.forward().copy())
    return np.concatenate(out)


def torch_logits(st_path, props, x):
    """The compact file in a plain torch module, fed the raw images
    preprocessed by hand as the ONNX metadata says."""
    import torch
    tensors, meta = read_safetensors(st_path)
    net_t = build_torch(meta)
    sd = net_t.state_dict()
    missing = [k for k in sd if not k.endswith("num_batches_tracked") and k not in tensors]
    extra = [k for k in tensors if k not in sd]
    if missing or extra:
        sys.exit("torch: names differ: missing %s, extra %s" % (missing[:5], extra[:5]))
    for k in tensors:
        if tuple(sd[k].shape) != tensors[k].shape:
            sys.exit("torch: %s is %s in the file, %s in the module built from the metadata" %
                     (k, tensors[k].shape, tuple(sd[k].shape)))
    net_t.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=False)
    net_t.eval()
    pad = int(props["prunex.pad"])
    mean = torch.tensor([float(v) for v in props["prunex.mean"].split(",")]).view(1, -1, 1, 1)
    std = torch.tensor([float(v) for v in props["prunex.std"].split(",")]).view(1, -1, 1, 1)
    with torch.no_grad():
        xt = torch.nn.functional.pad(torch.from_numpy(x), (pad, pad, pad, pad), value=0.0)
        return net_t((xt - mean) / std).numpy()


def main():
    onnx_path, st_path, logits_path, n, acc, data_dir = sys.argv[1:7]
    n, acc = int(n), float(acc)
    x, labels = test_images(data_dir)
    x, labels = x[:n], labels[:n]
    ours = np.fromfile(logits_path, dtype="<f4").reshape(n, -1)

    props = check_onnx(onnx_path)
    agree("opencv dnn, raw 28x28 pixels in [0, 1]", opencv_logits(onnx_path, x), ours, labels, acc)
    if st_path != "-":
        agree("torch, compact safetensors, preprocessed as the metadata says",
              torch_logits(st_path, props, x), ours, labels, acc)
    print("all checks passed")


if __name__ == "__main__":
    main()
