#!/usr/bin/python3
"""fresh_compact.py OUT SEED INNER [STREAM]: a compact ResNet-20 (Fashion-MNIST:
1 x 32 x 32 inputs, 10 classes) with fresh weights, as a safetensors file that
`pxtrain --load OUT` builds at its widths (its metadata's "widths"): what an
architecture that pruning could give learns when trained alone.

INNER: the blocks' inner widths (conv1's filters, conv2's inputs), three
(one per stage) or nine (one per block); STREAM: the three stages' stream
widths (default 16,32,64: the dense ones). Weights: He-normal (fan out)
convolutions, unit batch-norm scales and variances, zero shifts and means,
PyTorch's uniform classifier; numpy's generator seeded with SEED. Prints the
model's multiply-accumulates per image, counted as px_model_macs counts.

  /usr/bin/python3 bench/accuracy/fresh_compact.py f.safetensors 1 8,15,29
  build/cli/pxtrain --load f.safetensors --epochs 2 --batch 256 --lr 0.05 --seed 1 --threads 2
"""
import json
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    out, seed = sys.argv[1], int(sys.argv[2])
    inner = [int(x) for x in sys.argv[3].split(",")]
    if len(inner) == 3:
        inner = [w for w in inner for _ in range(3)]
    stream = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) == 5 else [16, 32, 64]
    if len(inner) != 9 or len(stream) != 3 or min(inner + stream) < 1:
        sys.exit("fresh_compact.py: INNER takes 3 or 9 widths, STREAM 3, each at least 1")
    rng = np.random.default_rng(seed)
    tensors, macs = {}, 0

    def conv(name, o, i, k, hw):
        nonlocal macs
        macs += o * i * k * k * hw * hw
        tensors[name] = rng.normal(0, np.sqrt(2.0 / (o * k * k)), (o, i, k, k))

    def bn(name, c):
        tensors[name + ".weight"], tensors[name + ".bias"] = np.ones(c), np.zeros(c)
        tensors[name + ".running_mean"], tensors[name + ".running_var"] = np.zeros(c), np.ones(c)

    widths, cin, hw = [stream[0]], stream[0], 32
    conv("conv1.weight", stream[0], 1, 3, hw)
    bn("bn1", stream[0])
    for s in range(3):
        for b in range(3):
            p, w, co = f"layer{s + 1}.{b}", inner[3 * s + b], stream[s]
            if s > 0 and b == 0:
                hw //= 2
            conv(p + ".conv1.weight", w, cin, 3, hw)
            bn(p + ".bn1", w)
            conv(p + ".conv2.weight", co, w, 3, hw)
            bn(p + ".bn2", co)
            widths += [w, co]
            if cin != co:  # the 1x1 shortcut
                conv(p + ".downsample.0.weight", co, cin, 1, hw)
                bn(p + ".downsample.1", co)
                widths.append(co)
            cin = co
    bound = 1 / np.sqrt(cin)
    tensors["fc.weight"] = rng.uniform(-bound, bound, (10, cin))
    tensors["fc.bias"] = rng.uniform(-bound, bound, 10)
    macs += 10 * cin
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    header["__metadata__"] = {"format": "prunex-checkpoint-v1", "arch": "resnet20",
                              "in_channels": "1", "num_classes": "10",
                              "widths": ",".join(map(str, widths)), "dataset": "fashion-mnist"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print(macs)


if __name__ == "__main__":
    main()
