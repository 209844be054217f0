#!/usr/bin/python3
"""Runs a PruneX ONNX export in OpenCV's dnn (python3-opencv) on inputs that
test_pxctl_folder wrote: X.raw float32 [n][c][s][s] (normalised as PruneX's
loader does) and Y.raw int32 [n]. Prints "accuracy A" (fraction correct).

Usage: folder_onnx_check.py MODEL.onnx X.raw Y.raw N C S"""
import sys

import cv2
import numpy as np

model, xs, ys = sys.argv[1:4]
n, c, s = (int(v) for v in sys.argv[4:7])
x = np.fromfile(xs, np.float32).reshape(n, c, s, s)
y = np.fromfile(ys, np.int32)
net = cv2.dnn.readNetFromONNX(model)
correct = 0
for i in range(0, n, 100):
    net.setInput(x[i:i + 100])
    logits = net.forward()
    correct += int((logits.argmax(1) == y[i:i + 100]).sum())
print("accuracy %.6f" % (correct / n))
