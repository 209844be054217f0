#!/usr/bin/python3
"""Fixtures for test_data_stream, written with Pillow and torchvision, which
share no code with PruneX's streaming path (Pillow decodes through the same
libjpeg-turbo, so a JPEG decoded at full scale gives the same pixels):

  folder OUT SIZE   an image folder OUT/{train,val}/{a,b,c}/*.{jpg,png}: JPEGs
                    (quality 90) of several shapes from gradients, shapes and
                    noise, and PNGs; beside each val image, NAME.ref: what
                    torchvision's Resize(SIZE * 256 / 224) + CenterCrop(SIZE)
                    make of it (uint8 planes [3][SIZE][SIZE])
  crop FILE SIZE OUT X,Y,W,H...
                    torchvision's resized_crop of each box of FILE to SIZE x
                    SIZE, bilinear (what RandomResizedCrop does once its box
                    is drawn), as uint8 planes [3][SIZE][SIZE], one after the
                    other, into OUT
"""
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw


def picture(rng, w, h):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a, b, c = rng.uniform(0.2, 2.0, 3)
    img = np.stack([128 + 100 * np.sin(xx / (7 * a) + yy / (11 * b)),
                    (xx * 255.0 / w) * c % 256,
                    (yy * 255.0 / h + 60 * np.cos(xx / (5 * b))) % 256], -1)
    img += rng.normal(0, 8, img.shape)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(4):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(4, w // 2 + 5), y0 + rng.integers(4, h // 2 + 5)
        d.ellipse([x0, y0, x1, y1], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return im


def folder(out, size):
    from torchvision import transforms
    rng = np.random.default_rng(52)
    resize = int(math.floor(size * 256 / 224 + 0.5))
    ev = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(size)])
    # shapes: no DCT scaling at SIZE 32 (40x40, 36x44), a reduced scale (200x150, 90x120)
    shapes = [(40, 40), (36, 44), (200, 150), (90, 120), (64, 48)]
    for split, per in (("train", 8), ("val", 3)):
        for ci, cls in enumerate("abc"):
            d = os.path.join(out, split, cls)
            os.makedirs(d, exist_ok=True)
            for k in range(per):
                w, h = shapes[(k + ci) % len(shapes)]
                im = picture(rng, w, h)
                png = k % 4 == 2
                name = os.path.join(d, "%s%02d.%s" % (cls, k, "png" if png else "jpg"))
                if png:
                    im.save(name)
                else:
                    im.save(name, quality=90)
                if split == "val":
                    ref = np.asarray(ev(Image.open(name).convert("RGB")))
                    np.ascontiguousarray(ref.transpose(2, 0, 1)).tofile(name + ".ref")


def crop(path, size, out, boxes):
    from torchvision.transforms import functional as F
    im = Image.open(path).convert("RGB")
    with open(out, "wb") as f:
        for box in boxes:
            x, y, w, h = (int(v) for v in box.split(","))
            got = F.resized_crop(im, y, x, h, w, [size, size], antialias=True)
            f.write(np.ascontiguousarray(np.asarray(got).transpose(2, 0, 1)).tobytes())


def main():
    if sys.argv[1] == "folder":
        folder(sys.argv[2], int(sys.argv[3]))
    else:
        crop(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])


if __name__ == "__main__":
    main()
