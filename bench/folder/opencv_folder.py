#!/usr/bin/python3
"""The peer of px_bench_folder, on one core with OpenCV (python3-opencv) and
numpy, as a torchvision-style pipeline does it: the first pass reads every
file of DIR/train (cv2.imread), scales the shorter side to SIZE (INTER_AREA)
and crops the centre; the feed takes those FEED x FEED images from memory and
builds batches of 128 with a random-resized crop (scale 0.35..1, aspect
3/4..4/3, cv2.resize INTER_LINEAR), a random flip and the normalisation.

Usage: opencv_folder.py DIR SIZE FEED CHANNELS EPOCHS"""
import math
import os
import random
import sys
import time

import cv2
import numpy as np

cv2.setNumThreads(1)
d, size, feed, channels, epochs = sys.argv[1], *map(int, sys.argv[2:6])
files = []
for cls in sorted(os.listdir(os.path.join(d, "train"))):
    cdir = os.path.join(d, "train", cls)
    files += [os.path.join(cdir, f) for f in sorted(os.listdir(cdir))]
flag = cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR


def load(path, s):
    img = cv2.imread(path, flag)
    h, w = img.shape[:2]
    k = s / min(h, w)
    nw, nh = max(s, round(w * k)), max(s, round(h * k))
    img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR)
    y0, x0 = (nh - s) // 2, (nw - s) // 2
    return img[y0:y0 + s, x0:x0 + s]


t0 = time.perf_counter()
for p in files:
    load(p, size)
decode_s = time.perf_counter() - t0
print("first pass  %d images -> %dx%dx%d  %.2f s  %.0f images/s (OpenCV)" %
      (len(files), channels, size, size, decode_s, len(files) / decode_s))

images = np.stack([load(p, feed) for p in files])
rng = random.Random(0)


def rrc(img):
    s = feed
    for _ in range(10):
        area = s * s * rng.uniform(0.35, 1.0)
        ar = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(area * ar)), round(math.sqrt(area / ar))
        if 0 < w <= s and 0 < h <= s:
            y, x = rng.randint(0, s - h), rng.randint(0, s - w)
            out = cv2.resize(img[y:y + h, x:x + w], (s, s), interpolation=cv2.INTER_LINEAR)
            break
    else:
        out = img
    return out[:, ::-1] if rng.random() < 0.5 else out


n = 0
t0 = time.perf_counter()
for e in range(epochs):
    order = np.random.default_rng(e).permutation(len(images))
    for b in range(0, len(order) - 127, 128):
        batch = np.stack([rrc(images[i]) for i in order[b:b + 128]]).astype(np.float32)
        batch = (batch / 255.0 - 0.5) / 0.25
        if channels == 3:
            batch = batch.transpose(0, 3, 1, 2)
        np.ascontiguousarray(batch)
        n += 128
feed_s = time.perf_counter() - t0
print("cache feed  %d images at %dx%dx%d from memory  %.2f s  %.0f images/s (OpenCV)" %
      (n, channels, feed, feed, feed_s, n / feed_s))
print("RESULT opencv_decode_images_per_sec_per_core %.0f img/s" % (len(files) / decode_s))
print("RESULT opencv_feed_images_per_sec_per_core %.0f img/s" % (n / feed_s))
