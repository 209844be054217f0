#!/usr/bin/python3
"""Writes Fashion-MNIST as an image folder (the ImageFolder layout PruneX's
`dataset: {name: folder}` reads): OUT/train/CLASS/NNNNN.png and OUT/val/CLASS/...

    /usr/bin/python3 examples/make_fmnist_folder.py OUT [--train N] [--val N]
        [--format png|jpg] [--src /usr/share/datasets/fashion-mnist]

--train/--val take the first N images of each split (0: all); the class
directories are named 0_t-shirt ... 9_ankle-boot so that their sorted order is
the label order. Needs numpy and python3-opencv (Debian packages)."""
import argparse
import gzip
import os
import sys

import cv2
import numpy as np

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle-boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xff)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def write_split(images, labels, out, fmt, quality):
    for c, name in enumerate(CLASSES):
        os.makedirs(os.path.join(out, "%d_%s" % (c, name)), exist_ok=True)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == "jpg" else []
    for i, (img, lab) in enumerate(zip(images, labels)):
        path = os.path.join(out, "%d_%s" % (lab, CLASSES[lab]), "%05d.%s" % (i, fmt))
        if not cv2.imwrite(path, img, params):
            sys.exit("cannot write %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=0)
    ap.add_argument("--val", type=int, default=0)
    ap.add_argument("--format", choices=["png", "jpg"], default="png")
    ap.add_argument("--quality", type=int, default=95)
    ap.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    for split, prefix, n in (("train", "train", a.train), ("val", "t10k", a.val)):
        images = read_idx(os.path.join(a.src, prefix + "-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(a.src, prefix + "-labels-idx1-ubyte.gz"))
        if n > 0:
            images, labels = images[:n], labels[:n]
        write_split(images, labels, os.path.join(a.out, split), a.format, a.quality)
        print("%s: %d images" % (os.path.join(a.out, split), len(images)))


if __name__ == "__main__":
    main()
