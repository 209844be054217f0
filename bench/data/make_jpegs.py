#!/usr/bin/python3
"""A folder of realistic JPEGs for bench/data: OUT/train/cNN/NNNN.jpg, W x H
(default 500 x 375, ImageNet's most common shape), quality 90, made with
Pillow from structured random content (gradients, sinusoidal texture,
ellipses, rectangles, lines and sensor-like noise), so that the files
compress like photographs (about 40-60 KB) rather than like flat test
patterns or pure noise. Seeded: the same arguments give the same files.

Usage: make_jpegs.py OUT [N] [CLASSES] [W] [H]"""
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def picture(rng, w, h):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(40, 215, 3)
    gx, gy = rng.uniform(-0.3, 0.3, (2, 3))
    fx, fy = rng.uniform(0.01, 0.08, 2)
    img = base + gx * xx[..., None] + gy * yy[..., None]
    img += rng.uniform(10, 40) * np.sin(fx * xx + fy * yy + rng.uniform(0, 6))[..., None]
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(rng.integers(6, 16)):
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        x1, y1 = x0 + int(rng.integers(20, w // 2)), y0 + int(rng.integers(20, h // 2))
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            d.ellipse([x0, y0, x1, y1], fill=col)
        elif kind == 1:
            d.rectangle([x0, y0, x1, y1], fill=col)
        else:
            d.line([x0, y0, x1, y1], fill=col, width=int(rng.integers(2, 12)))
    im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 1.5)))
    a = np.asarray(im).astype(np.float32) + rng.normal(0, 6, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    w = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    h = int(sys.argv[5]) if len(sys.argv) > 5 else 375
    rng = np.random.default_rng(52)
    for i in range(n):
        d = os.path.join(out, "train", "c%02d" % (i % classes))
        os.makedirs(d, exist_ok=True)
        # a quarter portrait, as in ImageNet
        pw, ph = (h, w) if i % 4 == 3 else (w, h)
        picture(rng, pw, ph).save(os.path.join(d, "%04d.jpg" % i), quality=90)
    for c in range(classes):  # the layout wants val/ with the same classes
        d = os.path.join(out, "val", "c%02d" % c)
        os.makedirs(d, exist_ok=True)
        picture(rng, w, h).save(os.path.join(d, "v.jpg"), quality=90)


if __name__ == "__main__":
    main()
