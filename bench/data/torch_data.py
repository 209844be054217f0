#!/usr/bin/python3
"""torchvision's side of bench/data: ImageFolder(DIR/train) + DataLoader
(batch 64, shuffled for training, WORKERS worker processes, torch on one
thread per process) with the transforms users train ImageNet with:

  train: RandomResizedCrop(SIZE) (scale (0.08, 1)), RandomHorizontalFlip,
         ToTensor, Normalize(ImageNet mean/std)
  eval:  Resize(SIZE * 256 / 224), CenterCrop(SIZE), ToTensor, Normalize

The first epoch warms the page cache and the workers; EPOCHS more are
timed. Prints a row and RESULT torch_images_per_sec.

Usage: torch_data.py DIR train|eval WORKERS EPOCHS SIZE"""
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, mode, workers, epochs, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(1)
    norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if mode == "train":
        tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), norm])
    else:
        tf = transforms.Compose([transforms.Resize(int(size * 256 / 224 + 0.5)),
                                 transforms.CenterCrop(size), transforms.ToTensor(), norm])
    ds = datasets.ImageFolder(root + "/train", tf)
    dl = DataLoader(ds, batch_size=64, shuffle=mode == "train", num_workers=workers,
                    persistent_workers=workers > 0)
    images, check = 0, 0.0
    t0 = 0.0
    for e in range(epochs + 1):
        if e == 1:
            t0 = time.perf_counter()
        for x, y in dl:
            if e > 0:
                images += x.shape[0]
            check += float(x[0, 0, 0, 0])
    s = time.perf_counter() - t0
    rate = images / s
    print("torch %-5s %d images of %d files at 3x%dx%d, %d worker(s)  %.2f s  %.0f images/s  "
          "(checksum %.3f)" % (mode, images, len(ds), size, size, workers, s, rate, check))
    print("RESULT torch_images_per_sec %.1f img/s" % rate)


if __name__ == "__main__":
    main()
