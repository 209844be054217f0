#!/usr/bin/python3
"""Fixtures for test_data_folder, written by OpenCV (python3-opencv), which
shares no code with PruneX's decoder: image files and, beside each, what
OpenCV decodes from it, as raw uint8 planes [channels][h][w] (R, G, B order):

  OUT/NAME.{png,jpg}        the file
  OUT/NAME.c{1,3}s{S}.raw   cv2.imread of the file (RGB or grey), its shorter
                            side resized to S (INTER_AREA when shrinking,
                            INTER_LINEAR when enlarging) and its centre
                            square cropped; S = 0: no resize

Usage: image_fixture.py OUT"""
import os
import sys

import cv2
import numpy as np


def ref(path, channels, size, out):
    flag = cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR
    img = cv2.imread(path, flag)
    if channels == 3:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    h, w = img.shape[:2]
    if size:
        s = min(h, w)
        nw, nh = round(w * size / s), round(h * size / s)
        interp = cv2.INTER_AREA if size < s else cv2.INTER_LINEAR
        img = cv2.resize(img, (nw, nh), interpolation=interp)
        y0, x0 = (nh - size) // 2, (nw - size) // 2
        img = img[y0:y0 + size, x0:x0 + size]
    planes = img[None] if channels == 1 else img.transpose(2, 0, 1)
    np.ascontiguousarray(planes).tofile(out)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(30)
    # smooth colour image (JPEG-friendly) and noisy ones (PNG: lossless)
    yy, xx = np.mgrid[0:64, 0:64]
    smooth = np.stack([(xx * 4) % 256, (yy * 4) % 256, ((xx + yy) * 2) % 256], -1).astype(np.uint8)
    files = {
        "rgb40.png": rng.integers(0, 256, (40, 40, 3), dtype=np.uint8),
        "grey24.png": rng.integers(0, 256, (24, 24), dtype=np.uint8),
        "wide.png": rng.integers(0, 256, (32, 64, 3), dtype=np.uint8),
        "smooth.jpg": smooth,
        "grey.jpg": (smooth[:, :, 0] // 2 + 40).astype(np.uint8),
    }
    for name, img in files.items():
        path = os.path.join(out, name)
        bgr = img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
        cv2.imwrite(path, bgr, [cv2.IMWRITE_JPEG_QUALITY, 90] if name.endswith(".jpg") else [])
    for name, channels, size in [("rgb40.png", 3, 0), ("rgb40.png", 3, 20), ("rgb40.png", 1, 0),
                                 ("grey24.png", 1, 0), ("grey24.png", 3, 0),
                                 ("grey24.png", 1, 48), ("wide.png", 3, 16),
                                 ("smooth.jpg", 3, 0), ("smooth.jpg", 1, 0),
                                 ("smooth.jpg", 3, 32), ("grey.jpg", 1, 0)]:
        base = os.path.splitext(name)[0]
        ref(os.path.join(out, name), channels, size,
            os.path.join(out, "%s.c%ds%d.raw" % (base, channels, size)))


if __name__ == "__main__":
    main()
